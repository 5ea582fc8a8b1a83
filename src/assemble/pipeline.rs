//! One request's run: filter by permission, group the conversation into
//! units, measure every unit, allocate the budget, then hand plain values to
//! layout, hints and the report.

use std::cell::{Cell, OnceCell};
use std::time::{Duration, Instant};

use tracing::debug;

use super::allocate::{self, BlockPlan, Carrier, DropReason, UnitPlan};
use super::assembler::Assembler;
use super::error::AssembleError;
use super::layout;
use super::policy::Policy;
use super::render::{self, FormAttr};
use super::report;
use super::shrink::Shrinker;
use super::turns;
use super::validate::Budget;
use crate::prompt::{AssembleRequest, BlockDecision, BlockKind, CacheHints, CacheInfo, Item, Usage};
use crate::prompt_cache::hints;
use crate::prompt_cache::prefix::{PrefixFacts, PrefixKey};
use crate::telemetry::metrics;
use crate::tokens::chat::message_tokens;
use crate::tokens::hf::{HfModel, Piece};
use crate::tokens::{ChatMessage, ModelSpec, Tokenizer, cache};
use crate::vocab::{Cancel, Role, Warning, WarningRef, codes, saturating_u32};

/// One unit of a block: a context item, or a turn with its tool results. A
/// unit's members are (block, candidate) pairs: a tool call made at the end of
/// HISTORY and answered at the start of RECENT_TURNS is one unit, owned by the
/// newer block.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub members: Vec<(usize, usize)>,
    pub invalid: Option<DropReason>,
}

/// One block after filtering and measuring (`measured[i]` is `blocks[i]`).
pub(super) struct Measured {
    /// Positions in `block.items` of the items the principal may see.
    pub candidates: Vec<usize>,
    /// Positions of the items filtered out.
    pub filtered: Vec<usize>,
    /// The block's units, in order.
    pub units: Vec<Unit>,
    /// Full-form text of each candidate (context kinds only), rendered
    /// when first needed: a unit offered room it cannot fit (proved from
    /// its content) is never copied.
    rendered: Vec<OnceCell<String>>,
    /// Count-cache key of each candidate's content (turn kinds only), hashed
    /// once: its count and the summary keys of the runs covering it use it.
    content_keys: Vec<OnceCell<cache::Key>>,
}

impl Measured {
    /// The full-form unit of candidate `ci`, `item`, of a block of `kind`.
    pub fn unit(&self, kind: BlockKind, item: &Item, ci: usize) -> &str {
        self.rendered[ci].get_or_init(|| render::unit(kind, item, &item.content, FormAttr::Full))
    }
}

/// One empty cell per candidate, or none when `used` is false.
fn cells<T>(candidates: &[usize], used: bool) -> Vec<OnceCell<T>> {
    if used {
        candidates.iter().map(|_| OnceCell::new()).collect()
    } else {
        Vec::new()
    }
}

/// What a successful run produces before texts are moved out of the request.
type RunOutput = (
    layout::Plan,
    Usage,
    CacheInfo,
    CacheHints,
    Vec<BlockDecision>,
    Vec<Warning>,
);

/// A prompt as its chat template renders it: the messages' tokens, and what
/// the tools add to them.
struct Rendered {
    messages: u32,
    tools: u32,
}

/// Per-request state.
pub(super) struct Pipeline<'a> {
    pub(super) asm: &'a Assembler,
    spec: &'a ModelSpec,
    pub(super) policy: &'a Policy,
    pub(super) tok: &'a Tokenizer,
    pub(super) cancel: &'a Cancel,
    pub(super) req: &'a AssembleRequest,
    /// Canonical tool definitions.
    tools: &'a [String],
    budget: Budget,
    pub(super) measured: Vec<Measured>,
    warnings: Vec<Warning>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    /// Where the current phase began.
    pub(super) lap: Instant,
    /// A warm try: everything must come from the caches; the first thing
    /// that would be counted or summarized sets `cancel` instead, and the
    /// run is abandoned (to be run again in full elsewhere).
    pub(super) warm_only: bool,
    /// Phases ended, recorded when the run ends well (a warm try that
    /// missed records none: its full run records them).
    phases: Vec<(&'static str, Instant, Duration)>,
    /// The static prefix's facts and whether they were a hit, once looked up.
    prefix_lookup: Option<(PrefixFacts, bool)>,
}

/// The request's blocks after filtering and grouping: what the layout and
/// the report read (plain values, not the pipeline).
#[derive(Clone, Copy)]
pub(super) struct Measurement<'a> {
    /// The request.
    pub req: &'a AssembleRequest,
    /// `blocks[i]` measures `req.blocks[i]`.
    pub blocks: &'a [Measured],
}

impl<'a> Measurement<'a> {
    /// The item at candidate `ci` of block `bi`.
    pub fn item(&self, bi: usize, ci: usize) -> &'a Item {
        &self.req.blocks[bi].items[self.blocks[bi].candidates[ci]]
    }
}

impl<'a> Pipeline<'a> {
    /// A run of `req` (valid: `spec`, `policy`, `budget` and canonical
    /// `tools` resolved) whose first phase began at `started`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        asm: &'a Assembler,
        spec: &'a ModelSpec,
        policy: &'a Policy,
        req: &'a AssembleRequest,
        tools: &'a [String],
        budget: Budget,
        cancel: &'a Cancel,
        started: Instant,
    ) -> Self {
        Pipeline {
            asm,
            spec,
            policy,
            tok: &spec.tokenizer,
            cancel,
            lap: started,
            req,
            tools,
            budget,
            measured: Vec::new(),
            warnings: Vec::new(),
            hits: Cell::new(0),
            misses: Cell::new(0),
            warm_only: false,
            phases: Vec::new(),
            prefix_lookup: None,
        }
    }

    /// Tokens of one message whose content has `content` tokens.
    fn message_cost(&self, role: Role, content: u32) -> u32 {
        message_tokens(self.tok, role, content)
    }

    /// Tokens of a `role` message holding `text` (opening the prompt when
    /// `first`; `key` is the count-cache key of `text`, when the caller has
    /// it). Where the template sets the content in a piece of its own
    /// ([`crate::tokens::chat::Glue`]) that piece is counted, seam and all,
    /// through the cache (the rendering's piece is the same bytes, so the
    /// final count finds it there); else the content, plus the role's frame.
    fn message_count(&self, role: Role, first: bool, text: &str, key: Option<&cache::Key>) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        let piece = match self.tok.glue(role, first) {
            Some(g) if !g.is_identity() => {
                let mut h = self.tok.hasher();
                g.hash_piece(&mut h, text);
                let key = *h.finalize().as_bytes();
                match self.asm.segments.cached_keyed(&key) {
                    Some(n) => self.hit_or_missed(Some(n)).unwrap_or_default(),
                    None => self.count_keyed(key, &g.piece(text)),
                }
            }
            _ => match key {
                Some(k) => self.count_keyed(*k, text),
                None => self.count(text),
            },
        };
        self.tok.glued_message_tokens(role, first, piece)
    }

    /// Counts through the segment cache, tallying hits and misses. Once the
    /// request is cancelled, counts nothing and returns 0 (the run is
    /// abandoned before any result is used).
    pub(super) fn count(&self, text: &str) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        self.count_keyed(cache::key(self.tok, text.as_bytes()), text)
    }

    /// [`Pipeline::count`] of `text` whose count-cache key is `key`.
    fn count_keyed(&self, key: cache::Key, text: &str) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        if self.warm_only {
            let n = self.asm.segments.cached_keyed(&key);
            return self.hit_or_missed(n).unwrap_or_default();
        }
        let (n, hit) = self.asm.segments.count_keyed(self.tok, key, text);
        let tally = if hit { &self.hits } else { &self.misses };
        tally.set(tally.get() + 1);
        n
    }

    /// [`Pipeline::count`] when at most `limit`, else `None` (counting
    /// stops past the limit; the cache remembers the bound). Once the
    /// request is cancelled, counts nothing and returns `None`.
    pub(super) fn count_at_most(&self, text: &str, limit: u32) -> Option<u32> {
        if self.cancel.is_cancelled() {
            return None;
        }
        if self.surely_over(text, limit) {
            return None;
        }
        if self.warm_only {
            let n = self.asm.segments.cached_at_most(self.tok, text, limit);
            return self.hit_or_missed(n).flatten();
        }
        let (n, hit) = self.asm.segments.count_at_most(self.tok, text, limit);
        let tally = if hit { &self.hits } else { &self.misses };
        tally.set(tally.get() + 1);
        n
    }

    /// Whether `text` (or any text holding its whitespace-separated runs,
    /// such as the unit rendered around it) surely counts more than
    /// `limit`. Tried only for far more bytes than the limit: a scan of its
    /// words may prove it cannot fit before it is rendered or hashed for
    /// the cache (an item offered the little room left costs what the room
    /// holds, not what it offers).
    pub(super) fn surely_over(&self, text: &str, limit: u32) -> bool {
        let long = usize::try_from(limit).is_ok_and(|l| l < text.len() / 4);
        long && self.tok.surely_over(text, limit)
    }

    /// A warm try's lookup: a hit is tallied; a miss abandons the try.
    pub(super) fn hit_or_missed<T>(&self, found: Option<T>) -> Option<T> {
        if found.is_some() {
            self.hits.set(self.hits.get() + 1);
        } else {
            self.cancel.cancel();
        }
        found
    }

    /// Records the phases and cache lookups of a run (not of a warm try
    /// that missed: the full run records its own).
    pub(super) fn record_lookups(&self) {
        for &(phase, end, took) in &self.phases {
            metrics::phase_ended(phase, end, took);
        }
        if let Some((facts, hit)) = self.prefix_lookup {
            metrics::cache_lookups(
                metrics::PREFIX_CACHE_LOOKUPS_TOTAL,
                u64::from(hit),
                u64::from(!hit),
            );
            for kind in facts.volatile_kinds() {
                metrics::prefix_volatile(kind);
            }
        }
        metrics::cache_lookups(
            metrics::SEGMENT_CACHE_LOOKUPS_TOTAL,
            self.hits.get(),
            self.misses.get(),
        );
    }

    /// The item at candidate `ci` of block `bi`.
    pub(super) fn item(&self, bi: usize, ci: usize) -> &'a Item {
        &self.req.blocks[bi].items[self.measured[bi].candidates[ci]]
    }

    /// The count-cache key of the content of turn candidate `ci` of block
    /// `bi`, hashed on first use only.
    pub(super) fn content_key(&self, bi: usize, ci: usize) -> &cache::Key {
        self.measured[bi].content_keys[ci]
            .get_or_init(|| cache::key(self.tok, self.item(bi, ci).content.as_bytes()))
    }

    /// Measures, allocates and lays out the request whose static prefix is
    /// `prefix`.
    pub(super) fn run(&mut self, prefix: PrefixKey) -> Result<RunOutput, AssembleError> {
        let req = self.req;
        let (static_tokens, (tools_tokens, tools_exact), prefix_hit) = self.static_tokens(&prefix);
        let PrefixKey {
            hex: prefix_hash,
            bytes: prefix_bytes,
            ..
        } = prefix;
        let query_tokens = self.message_count(Role::User, false, &req.query, None);
        let base = u64::from(static_tokens)
            + u64::from(query_tokens)
            + u64::from(self.tok.priming_tokens())
            + u64::from(tools_tokens);

        let plans = self.measure();
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_TOKENIZE);
        // Opening the context message (policy's role) and the summary message (user).
        let overheads = [
            self.message_cost(self.policy.context_role, 0),
            self.message_cost(Role::User, 0),
        ];
        let mut shrinker = Shrinker::new(self);
        let window = self.policy.window(self.budget.input);
        let alloc = allocate::allocate(&plans, base, overheads, self.budget.input, window, &mut shrinker)
            .map_err(|o| {
                debug!(non_cuttable = o.non_cuttable, budget = self.budget.input, model = %self.spec.name, "budget overflow");
                AssembleError::BudgetOverflow {
                    non_cuttable_tokens: o.non_cuttable,
                    budget: self.budget.input,
                    model: self.spec.name.clone(),
                }
            })?;

        let turn_summary = alloc.summary.as_ref().and_then(|s| shrinker.kept_summary(s));
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_ALLOCATE);
        if let Some(s) = &alloc.summary {
            metrics::compaction(
                metrics::COMPACTION_SOURCE_ASSEMBLE,
                metrics::COMPACTION_OUTCOME_SUMMARIZED,
                saturating_u32(s.covered.saturating_sub(u64::from(s.cost))),
            );
        }
        let measurement = Measurement {
            req,
            blocks: &self.measured,
        };
        let mut plan = layout::plan(measurement, self.policy, &alloc, turn_summary);
        let joined = layout::conform(&mut plan, self.tok.layout_rules());
        if joined > 0 {
            self.warnings.push(Warning::new(
                codes::MESSAGES_JOINED,
                format!(
                    "{joined} message(s) joined with the one before them: the chat template of model {} refuses consecutive messages of one role",
                    self.spec.name
                ),
            ));
        }
        let last_turn = plan.iter().rposition(|(_, c)| c.holds_turn());
        let stable_tokens = if last_turn.is_some() {
            // The summary message and the turns come right after the static
            // messages (layout's order), the context message after them.
            let of = |slot: Carrier| -> u64 {
                plans
                    .iter()
                    .zip(&alloc.costs)
                    .filter(|(p, _)| p.slot == slot && (slot != Carrier::Own || p.chrono.is_some()))
                    .flat_map(|(_, c)| c)
                    .map(|&c| u64::from(c))
                    .sum()
            };
            let turn_summary = alloc.summary.as_ref().map_or(0, |s| u64::from(s.cost));
            let summary = of(Carrier::Summary) + turn_summary;
            let opened = if summary > 0 { u64::from(overheads[1]) } else { 0 };
            saturating_u32(u64::from(static_tokens) + opened + summary + of(Carrier::Own))
        } else {
            static_tokens
        };
        let hints = hints::of(
            &self.spec.cache,
            &hints::Prompt {
                segments: &req.static_segments,
                session_id: &req.session_id,
                tools: self.tools.len(),
                last_turn,
                prefix_hash: &prefix_hash,
                prefix_tokens: static_tokens,
                stable_tokens,
                tools_tokens,
            },
        );
        // The tools are reserved from the budget but are not messages.
        let (rendered, special_text) = self.rendered_total(&plan)?;
        let (total, tools_tokens) = match rendered {
            // What the engine bills: the messages, and what the tools add.
            Some(r) => (r.messages, r.tools),
            None => (
                saturating_u32(alloc.used.saturating_sub(u64::from(tools_tokens))),
                tools_tokens,
            ),
        };
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(special_text);
        let decisions = report::decisions(measurement, &plans, &alloc, &mut warnings);
        let usage = Usage {
            budget: self.budget.input,
            total_tokens: total,
            static_tokens,
            dynamic_tokens: total.saturating_sub(static_tokens),
            tokenizer: self.tok.to_string(),
            exact: self.tok.is_exact(),
            output_reserve: self.budget.output_reserve,
            context_window: self.spec.context_window,
            tools_tokens,
            tools_exact,
        };
        let cache = CacheInfo {
            prefix_hash,
            prefix_tokens: static_tokens,
            prefix_bytes,
            prefix_message_count: saturating_u32(req.static_segments.len()),
            prefix_cache_hit: prefix_hit,
        };
        Ok((plan, usage, cache, hints, decisions, warnings))
    }

    /// Tokens of the static prefix messages and of the tools, and the
    /// prefix's volatile values: one lookup when the prefix is known, else
    /// one count and one scan per segment and tool (single flight:
    /// concurrent requests with a new prefix do it once). A cancelled count is not cached. Volatile values
    /// give a warning and are counted in every response that carries them.
    ///
    /// The cache is partitioned by `cache_salt`: a prefix another tenant
    /// (another salt) brought is a miss, so `prefix_cache_hit` never tells
    /// one caller what system prompt another used.
    fn static_tokens(&mut self, prefix: &PrefixKey) -> (u32, (u32, bool), bool) {
        let key = prefix.cache_key(self.tok, &self.req.cache_salt);
        let counted = if self.warm_only {
            let found = self.asm.prefixes.get(&key);
            if found.is_none() {
                self.cancel.cancel();
            }
            Ok(found.map(|f| (f, true)).unwrap_or_default())
        } else {
            self.asm.prefixes.get_or_try_count(key, || {
                let tokens = self
                    .req
                    .static_segments
                    .iter()
                    .enumerate()
                    .map(|(i, s)| self.message_count(Role::System, i == 0, &s.content, None))
                    .fold(0, u32::saturating_add);
                let tools_tokens = self.tok.tools_tokens(self.tools);
                if self.cancel.is_cancelled() {
                    return Err(AssembleError::Cancelled);
                }
                Ok(PrefixFacts::scan(
                    tokens,
                    tools_tokens,
                    &self.req.static_segments,
                    self.tools,
                ))
            })
        };
        // Cancelled: the run is abandoned at the next check.
        let (facts, hit) = counted.unwrap_or((PrefixFacts::default(), false));
        self.prefix_lookup = Some((facts, hit));
        self.warnings.extend(facts.warning(&self.req.static_segments));
        (facts.tokens, (facts.tools_tokens, facts.tools_exact), hit)
    }

    /// The exact tokens of the prompt `plan` lays out, for a model whose
    /// per-message sum is an estimate (a chat template): the messages
    /// rendered by the template and tokenized whole, counted through the
    /// segment cache (a repeated prompt is looked up by its digest). With
    /// tools, also their share: what rendering them with these messages
    /// adds (a template may place them with the first system message, so
    /// the share depends on the messages). `None` where the sum is exact.
    /// Also the warning about special-token text, if any.
    fn rendered_total(
        &self,
        plan: &layout::Plan,
    ) -> Result<(Option<Rendered>, Option<Warning>), AssembleError> {
        let Some(model) = self.tok.hf_model().filter(|m| m.template().is_some()) else {
            return Ok((None, None));
        };
        let texts: Vec<_> = plan
            .iter()
            .map(|(_, source)| layout::text_of(self.req, source))
            .collect();
        let messages: Vec<ChatMessage<'_>> = plan
            .iter()
            .zip(&texts)
            .map(|((role, _), text)| ChatMessage {
                role: role.as_str(),
                content: text,
            })
            .collect();
        let warning = self.special_text_warning(model, &messages);
        let tools: Vec<serde_json::Value> = self
            .tools
            .iter()
            .filter_map(|t| serde_json::from_str(t).ok())
            .collect();
        let count = |tools: Option<&[serde_json::Value]>| -> Result<u32, AssembleError> {
            match self.tok.rendered_text(&messages, tools) {
                Some(Ok(text)) => Ok(self.count_rendered(model, &text)),
                Some(Err(e)) => Err(AssembleError::TemplateRefused {
                    model: self.spec.name.clone(),
                    reason: e.to_string(),
                }),
                // A template was found above.
                None => Ok(0),
            }
        };
        let messages_tokens = count(None)?;
        let tools_tokens = if tools.is_empty() {
            0
        } else {
            count(Some(&tools))?.saturating_sub(messages_tokens)
        };
        self.check_cancelled()?;
        Ok((
            Some(Rendered {
                messages: messages_tokens,
                tools: tools_tokens,
            }),
            warning,
        ))
    }

    /// Tokens of the rendering `text` of a prompt: piece by piece where
    /// `model`'s added tokens cut it ([`crate::tokens::hf::Piece`]: the sum
    /// is the whole's count, exactly), each piece through the segment cache,
    /// so a prompt that shares messages with an earlier one counts only its
    /// new pieces; else whole.
    fn count_rendered(&self, model: &HfModel, text: &str) -> u32 {
        let mut n = 0u32;
        let cut = model.split(text, |p| {
            n = n.saturating_add(match p {
                Piece::Added => 1,
                Piece::Text(t) => self.count(t),
            });
        });
        match cut {
            Some(()) => n,
            None => self.count(text),
        }
    }

    /// The warning about the messages whose text spells one of `model`'s
    /// special tokens: the engine reads such text as the token (it is
    /// counted so), which lets a content forge a turn. Names the tokens and
    /// the messages, never the text around them.
    fn special_text_warning(&self, model: &HfModel, messages: &[ChatMessage<'_>]) -> Option<Warning> {
        let mut tokens: Vec<&str> = Vec::new();
        let mut at: Vec<usize> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let found = model.specials_in(m.content);
            if !found.is_empty() {
                at.push(i);
                for t in found {
                    if !tokens.contains(&t) {
                        tokens.push(t);
                    }
                }
            }
        }
        if at.is_empty() {
            return None;
        }
        tokens.truncate(8);
        Some(Warning::new(
            codes::SPECIAL_TOKEN_TEXT,
            format!(
                "messages {at:?} spell special tokens of model {} ({}): the engine reads them as those tokens, not as text; set the policy's neutralize_special_tokens to break them",
                self.spec.name,
                tokens.join(" ")
            ),
        ))
    }

    /// Records the time since the last phase ended as `phase`.
    fn end_phase(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.phases.push((phase, now, now.duration_since(self.lap)));
        self.lap = now;
    }

    fn check_cancelled(&self) -> Result<(), AssembleError> {
        if self.cancel.is_cancelled() {
            debug!("cancelled: assembly abandoned");
            return Err(AssembleError::Cancelled);
        }
        Ok(())
    }

    /// Filters every block by permission, groups the conversation into units
    /// and measures every unit.
    fn measure(&mut self) -> Vec<BlockPlan> {
        let req = self.req;
        let held = req.principal.held();
        for (bi, block) in req.blocks.iter().enumerate() {
            let (candidates, filtered): (Vec<usize>, Vec<usize>) =
                (0..block.items.len()).partition(|&i| held.permit(&block.items[i].required_scopes));
            if !filtered.is_empty() {
                debug!(
                    block = bi,
                    filtered = filtered.len(),
                    "items filtered by permission"
                );
            }
            let turns = block.kind.is_turns();
            let (rendered, content_keys) = (cells(&candidates, !turns), cells(&candidates, turns));
            let units = if block.kind.is_turns() {
                Vec::new()
            } else {
                (0..candidates.len())
                    .map(|ci| Unit {
                        members: vec![(bi, ci)],
                        invalid: None,
                    })
                    .collect()
            };
            self.measured.push(Measured {
                candidates,
                filtered,
                units,
                rendered,
                content_keys,
            });
        }
        let chrono = self.group_conversation();

        let mut plans = Vec::with_capacity(req.blocks.len());
        for (bi, block) in req.blocks.iter().enumerate() {
            let m = &self.measured[bi];
            let units = m
                .units
                .iter()
                .enumerate()
                .map(|(ui, u)| {
                    // A unit of a cuttable context block is measured when the
                    // allocator offers it room, and only as far as that room.
                    let lazy = !block.kind.is_turns() && block.effective_cuttable() && u.invalid.is_none();
                    let full = if lazy {
                        0
                    } else if block.kind.is_turns() {
                        u.members
                            .iter()
                            .map(|&(mb, mc)| {
                                let it = self.item(mb, mc);
                                if self.cancel.is_cancelled() {
                                    return 0;
                                }
                                let role = it.role.unwrap_or(Role::User);
                                self.message_count(role, false, &it.content, Some(self.content_key(mb, mc)))
                            })
                            .fold(0, u32::saturating_add)
                    } else if self.cancel.is_cancelled() {
                        // Nothing more is rendered or counted: the run is
                        // abandoned after measuring.
                        0
                    } else {
                        self.count(m.unit(block.kind, self.item(bi, ui), ui))
                    };
                    let first = self.item(u.members[0].0, u.members[0].1);
                    UnitPlan {
                        full,
                        lazy,
                        score: first.score,
                        // An empty compact form would render an empty wrapper
                        // reported as kept: it counts as none.
                        has_compact: !block.kind.is_turns()
                            && first.compact_form.as_deref().is_some_and(|c| !c.is_empty()),
                        invalid: u.invalid,
                        pinned: u
                            .members
                            .iter()
                            .any(|&(mb, _)| !req.blocks[mb].effective_cuttable()),
                    }
                })
                .collect();
            plans.push(BlockPlan {
                kind: block.kind,
                priority: self.policy.priority_of(block),
                cuttable: block.effective_cuttable(),
                min_tokens: block.min_tokens,
                max_tokens: block.max_tokens(),
                slot: Carrier::of(block.kind),
                chrono: chrono.iter().position(|&c| c == bi),
                units,
            });
        }
        plans
    }

    /// Groups every visible turn of the conversation (HISTORY blocks, then
    /// RECENT_TURNS blocks, each in request order) into units; a unit belongs
    /// to the block of its last member. Returns the turn blocks oldest first.
    fn group_conversation(&mut self) -> Vec<usize> {
        let req = self.req;
        let of = |k: BlockKind| (0..req.blocks.len()).filter(move |&b| req.blocks[b].kind == k);
        let chrono: Vec<usize> = of(BlockKind::History).chain(of(BlockKind::RecentTurns)).collect();
        let turns: Vec<(usize, usize)> = chrono
            .iter()
            .flat_map(|&b| (0..self.measured[b].candidates.len()).map(move |c| (b, c)))
            .collect();
        let items: Vec<&Item> = turns.iter().map(|&(b, c)| self.item(b, c)).collect();
        let mut units = turns::group(&items);
        if self.tok.layout_rules().user_first {
            units = turns::exchanges(units, &items);
        }
        for unit in units {
            let members: Vec<(usize, usize)> = unit.members.iter().map(|&i| turns[i]).collect();
            if let Some(reason) = unit.invalid {
                let ids: Vec<&str> = members
                    .iter()
                    .map(|&(b, c)| self.item(b, c).id.as_str())
                    .collect();
                let (code, what) = match reason {
                    DropReason::OrphanToolResult => {
                        (codes::ORPHAN_TOOL_RESULT, "tool result without its call")
                    }
                    _ => (
                        codes::INCOMPLETE_TOOL_CALL,
                        "tool call without all of its results",
                    ),
                };
                let about = members
                    .iter()
                    .zip(&ids)
                    .map(|(&(block, _), id)| WarningRef::Item {
                        block,
                        id: (*id).to_owned(),
                    })
                    .collect();
                self.warnings.push(
                    Warning::new(code, format!("{what}, dropped: {}", ids.join(", "))).with_about(about),
                );
            }
            let owner = members.last().map_or(0, |&(b, _)| b);
            self.measured[owner].units.push(Unit {
                members,
                invalid: unit.invalid,
            });
        }
        chrono
    }
}
