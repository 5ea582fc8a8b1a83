//! One request's run: filter by permission, group the conversation into
//! units, measure every unit, allocate the budget, then hand plain values to
//! layout, hints and the report.

use std::time::{Duration, Instant};

use tracing::debug;

use super::allocate::{self, Allocation, BlockPlan, Carrier, DropReason, Form, UnitPlan};
use super::counting::Counter;
use super::error::{AssembleError, BlockNeed, Needs};
use super::layout;
use super::lighten;
use super::measure::{Measured, Measurement, MemberCost, Unit};
use super::policy::Policy;
use super::report;
use super::shrink::Shrinker;
use super::turns;
use super::validate::Budget;
use crate::prompt::{
    AssembleRequest, BlockDecision, BlockKind, CacheHints, CacheInfo, Item, PartKind, Sources, Usage,
};
use crate::prompt_cache::hints;
use crate::prompt_cache::prefix::{PrefixFacts, PrefixKey, SEGMENTS_APART};
use crate::telemetry::metrics;
use crate::tokens::chat::message_tokens;
use crate::tokens::hf::HfModel;
use crate::tokens::{ChatMessage, ModelSpec};
use crate::vocab::{Role, Warning, WarningRef, codes, saturating_u32};

/// What a successful run produces before texts are moved out of the request.
pub(super) struct RunOutput {
    /// The messages, as positions in the request.
    pub plan: layout::Plan,
    /// Tokens used, against the budget.
    pub usage: Usage,
    /// The static prefix's facts.
    pub cache: CacheInfo,
    /// Hints for the provider's and the engine's caches.
    pub hints: CacheHints,
    /// What happened to each block.
    pub decisions: Vec<BlockDecision>,
    /// What the caller should know.
    pub warnings: Vec<Warning>,
    /// The prompt's parts in order, tools first (the fingerprint's and the
    /// cache plan's units).
    pub parts: Vec<PartFacts>,
}

/// One part of the assembled prompt, as the fingerprint and the cache plan
/// read it: [`layout::PartRef`] with its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartFacts {
    /// What it is.
    pub kind: PartKind,
    /// Where it comes from (`None`: the tools).
    pub at: Option<layout::PartAt>,
    /// xxh3 of what it renders.
    pub hash: u64,
    /// Its tokens: a message's under the chat formula, a context unit's
    /// share of the context message (the first also carries the message's
    /// own overhead), the tools' share.
    pub tokens: u32,
    /// The message holding it (the tools: 0).
    pub message_index: u32,
    /// A static segment holding a volatile value.
    pub volatile: bool,
    /// The item that names it, as (block, position in its items).
    pub item: Option<(usize, usize)>,
}

/// What the parts' tokens are made of besides the units' costs.
#[derive(Debug, Clone, Copy)]
struct PartCosts {
    /// Opening the context message and the summary message.
    overheads: [u32; 2],
    /// The summary of compacted turns, when one is kept.
    turn_summary: u32,
    /// The query's message.
    query: u32,
    /// The tools' share.
    tools: u32,
}

/// A prompt as its chat template renders it: the messages' tokens, and what
/// the tools add to them.
struct Rendered {
    messages: u32,
    tools: u32,
}

/// Per-request state.
pub(super) struct Pipeline<'a> {
    /// Counts through the shared caches, with the request's tallies.
    counter: Counter<'a>,
    spec: &'a ModelSpec,
    pub(super) policy: &'a Policy,
    pub(super) req: &'a AssembleRequest,
    /// Canonical tool definitions.
    tools: &'a [String],
    budget: Budget,
    pub(super) measured: Vec<Measured>,
    warnings: Vec<Warning>,
    /// Where the current phase began.
    pub(super) lap: Instant,
    /// Phases ended, recorded when the run ends well (a warm try that
    /// missed records none: its full run records them).
    phases: Vec<(&'static str, Instant, Duration)>,
    /// The static prefix's facts and whether they were a hit, once looked up.
    prefix_lookup: Option<(PrefixFacts, bool)>,
    /// What the parts that may never be cut need, once allocated.
    needs: Option<Needs>,
}

/// `parts` with the blocks that reserve tokens (`reserved`, per block of
/// `plans`, which are `req`'s blocks), most tokens first.
fn block_needs(mut parts: Needs, req: &AssembleRequest, plans: &[BlockPlan], reserved: &[u64]) -> Needs {
    parts.blocks = (req.blocks.iter().zip(plans).zip(reserved).enumerate())
        .filter(|(_, (_, tokens))| **tokens > 0)
        .map(|(index, ((block, plan), &tokens))| BlockNeed {
            index,
            name: block.name.clone(),
            kind: block.kind,
            tokens,
            cuttable: plan.cuttable,
        })
        .collect();
    parts
        .blocks
        .sort_by_key(|b| (std::cmp::Reverse(b.tokens), b.index));
    parts
}

impl<'a> Pipeline<'a> {
    /// What the parts that may never be cut needed on the last run, once it
    /// allocated (whether they fit or not).
    pub(super) fn needs(&self) -> Option<&Needs> {
        self.needs.as_ref()
    }

    /// A run of `req` (valid: `spec`, `policy`, `budget` and canonical
    /// `tools` resolved) counting with `counter` (`spec`'s tokenizer), whose
    /// first phase began at `started`.
    pub(super) fn new(
        counter: Counter<'a>,
        spec: &'a ModelSpec,
        policy: &'a Policy,
        req: &'a AssembleRequest,
        tools: &'a [String],
        budget: Budget,
        started: Instant,
    ) -> Self {
        Pipeline {
            counter,
            spec,
            policy,
            lap: started,
            req,
            tools,
            budget,
            measured: Vec::new(),
            warnings: Vec::new(),
            phases: Vec::new(),
            prefix_lookup: None,
            needs: None,
        }
    }

    /// The blocks measured so far, as plain values.
    fn measurement(&self) -> Measurement<'_> {
        Measurement {
            req: self.req,
            blocks: &self.measured,
        }
    }

    /// Tokens of one message whose content has `content` tokens.
    fn message_cost(&self, role: Role, content: u32) -> u32 {
        message_tokens(self.counter.tok, role, content)
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
        self.counter.record_lookups();
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
        let query_tokens = if req.no_query {
            0
        } else {
            self.counter.message_count(Role::User, false, &req.query, None)
        };
        let base = u64::from(static_tokens)
            + u64::from(query_tokens)
            + u64::from(self.counter.tok.priming_tokens())
            + u64::from(tools_tokens);

        let plans = self.measure();
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_TOKENIZE);
        // Opening the context message (policy's role) and the summary message (user).
        let overheads = [
            self.message_cost(self.policy.context_role, 0),
            self.message_cost(Role::User, 0),
        ];
        let mut shrinker = Shrinker::new(&self.counter, self.measurement(), self.policy);
        let window = self.policy.window(self.budget.input);
        let lighten = Some(self.policy.clear_at_least(self.budget.input));
        let alloc = allocate::allocate(
            &plans,
            base,
            overheads,
            self.budget.input,
            window,
            lighten,
            &mut shrinker,
        );
        let needs;
        let parts = Needs {
            static_prefix: u64::from(static_tokens),
            tools: u64::from(tools_tokens),
            query: u64::from(query_tokens),
            framing: u64::from(self.counter.tok.priming_tokens()),
            blocks: Vec::new(),
            template: 0,
        };
        let alloc = match alloc {
            Ok(a) => {
                needs = Some(block_needs(parts, req, &plans, &a.reserved));
                a
            }
            Err(o) => {
                debug!(non_cuttable = o.non_cuttable, budget = self.budget.input, model = %self.spec.name, "budget overflow");
                let needs = block_needs(parts, req, &plans, &o.reserved);
                drop(shrinker);
                self.needs = Some(needs.clone());
                return Err(AssembleError::BudgetOverflow {
                    non_cuttable_tokens: o.non_cuttable,
                    budget: self.budget.input,
                    model: self.spec.name.clone(),
                    needs: Box::new(needs),
                });
            }
        };

        let turn_summary = alloc.summary.as_ref().and_then(|s| shrinker.kept_summary(s));
        drop(shrinker);
        self.needs = needs;
        let turn_summary_cost = alloc.summary.as_ref().map_or(0, |s| s.cost);
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_ALLOCATE);
        if let Some(s) = &alloc.summary {
            metrics::compaction(
                metrics::COMPACTION_SOURCE_ASSEMBLE,
                metrics::COMPACTION_OUTCOME_SUMMARIZED,
                saturating_u32(s.covered.saturating_sub(u64::from(s.cost))),
            );
        }
        let lightened: u64 = (alloc.forms.iter().flatten())
            .zip(alloc.fulls.iter().flatten().zip(alloc.costs.iter().flatten()))
            .filter(|(f, _)| **f == Form::Light)
            .map(|(_, (full, &cost))| u64::from(full.tokens().saturating_sub(cost)))
            .sum();
        if lightened > 0 {
            metrics::compaction(
                metrics::COMPACTION_SOURCE_ASSEMBLE,
                metrics::COMPACTION_OUTCOME_LIGHTENED,
                saturating_u32(lightened),
            );
        }
        let measurement = Measurement {
            req,
            blocks: &self.measured,
        };
        let (mut plan, mut part_refs) = layout::plan(measurement, self.policy, &alloc, turn_summary);
        let joined = layout::conform(&mut plan, self.counter.tok.layout_rules(), &mut part_refs);
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
        let parts = self.part_facts(
            &part_refs,
            &plans,
            &alloc,
            PartCosts {
                overheads,
                turn_summary: turn_summary_cost,
                query: query_tokens,
                tools: tools_tokens,
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
            tokenizer: self.counter.tok.to_string(),
            exact: self.counter.tok.is_exact(),
            output_reserve: self.budget.output_reserve,
            context_window: self.spec.context_window,
            tools_tokens,
            tools_exact,
            sources: Sources::all(total, self.counter.tok.is_exact()),
        };
        let cache = CacheInfo {
            prefix_hash,
            prefix_tokens: static_tokens,
            prefix_bytes,
            prefix_message_count: saturating_u32(req.static_segments.len()),
            prefix_cache_hit: prefix_hit,
        };
        Ok(RunOutput {
            plan,
            usage,
            cache,
            hints,
            decisions,
            warnings,
            parts,
        })
    }

    /// The parts of the laid-out prompt with their tokens, tools first.
    fn part_facts(
        &self,
        refs: &[layout::PartRef],
        plans: &[BlockPlan],
        alloc: &Allocation,
        costs: PartCosts,
    ) -> Vec<PartFacts> {
        let facts = self.prefix_lookup.map(|(f, _)| f).unwrap_or_default();
        let unit_cost = |b: usize, u: usize| alloc.costs.get(b).and_then(|c| c.get(u)).copied().unwrap_or(0);
        let mut out = Vec::with_capacity(refs.len() + 1);
        if !self.tools.is_empty() {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for t in self.tools {
                h.update(&(t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
            out.push(PartFacts {
                kind: PartKind::Tools,
                at: None,
                hash: h.digest(),
                tokens: costs.tools,
                message_index: 0,
                volatile: false,
                item: None,
            });
        }
        let last_apart = SEGMENTS_APART - 1;
        let mut context_opened = false;
        for r in refs {
            // Segments past those kept apart are one part with the last of
            // those (its tokens and volatile flag already hold theirs).
            if matches!(r.at, layout::PartAt::Static(i) if i > last_apart) {
                if let Some(last) = out.last_mut() {
                    last.hash = last.hash.rotate_left(17) ^ r.hash;
                }
                continue;
            }
            let (tokens, volatile) = match r.at {
                layout::PartAt::Static(i) => (
                    facts.segment_tokens.get(i).copied().unwrap_or(0),
                    facts.volatile_segments & (1 << i.min(last_apart)) != 0,
                ),
                layout::PartAt::Summary => {
                    let units: u32 = plans
                        .iter()
                        .zip(&alloc.costs)
                        .filter(|(p, _)| p.slot == Carrier::Summary)
                        .flat_map(|(_, c)| c)
                        .fold(0, |a, &c| a.saturating_add(c));
                    (
                        costs.overheads[1]
                            .saturating_add(units)
                            .saturating_add(costs.turn_summary),
                        false,
                    )
                }
                layout::PartAt::Unit { block, unit } if r.kind != PartKind::Turn => {
                    let opened = if std::mem::replace(&mut context_opened, true) {
                        0
                    } else {
                        costs.overheads[0]
                    };
                    (unit_cost(block, unit).saturating_add(opened), false)
                }
                layout::PartAt::Unit { block, unit } => (unit_cost(block, unit), false),
                layout::PartAt::Query => (costs.query, false),
            };
            out.push(PartFacts {
                kind: r.kind,
                at: Some(r.at),
                hash: r.hash,
                tokens,
                message_index: saturating_u32(r.message),
                volatile,
                item: r.item,
            });
        }
        out
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
        let key = prefix.cache_key(self.counter.tok, &self.req.cache_salt);
        let cached = self
            .counter
            .allowance
            .is_bounded()
            .then(|| self.counter.caches.prefixes.get(&key));
        let counted = if let Some(found) = cached
            && (found.is_some() || !self.counter.afford(self.prefix_bytes()))
        {
            Ok(found.map(|f| (f, true)).unwrap_or_default())
        } else if self.counter.tok.content_estimate().is_some() {
            // Learned piece by piece: facts counted while a segment or the
            // tools are estimated are not kept, since their counts become
            // the provider's once it has counted them.
            match self.counter.caches.prefixes.get(&key) {
                Some(facts) => Ok((facts, true)),
                None => {
                    let before = self.counter.estimated();
                    let facts = self.count_prefix();
                    if let Ok(f) = facts
                        && self.counter.estimated() == before
                    {
                        self.counter.caches.prefixes.insert(key, f);
                    }
                    facts.map(|f| (f, false))
                }
            }
        } else {
            self.counter
                .caches
                .prefixes
                .get_or_try_count(key, || self.count_prefix())
        };
        // Cancelled: the run is abandoned at the next check.
        let (facts, hit) = counted.unwrap_or((PrefixFacts::default(), false));
        self.prefix_lookup = Some((facts, hit));
        self.warnings.extend(facts.warning(&self.req.static_segments));
        (facts.tokens, (facts.tools_tokens, facts.tools_exact), hit)
    }

    /// Bytes of the static segments and tool definitions: what counting the
    /// static prefix counts.
    fn prefix_bytes(&self) -> usize {
        let segments: usize = self.req.static_segments.iter().map(|s| s.content.len()).sum();
        segments + self.tools.iter().map(String::len).sum::<usize>()
    }

    /// Counts the static prefix: each segment as a system message, and the
    /// tools.
    fn count_prefix(&self) -> Result<PrefixFacts, AssembleError> {
        let tokens = self
            .req
            .static_segments
            .iter()
            .enumerate()
            .map(|(i, s)| self.counter.message_count(Role::System, i == 0, &s.content, None))
            .collect::<Vec<u32>>();
        let tools_tokens = self.counter.tools_tokens(self.tools);
        if self.counter.cancel.is_cancelled() {
            return Err(AssembleError::Cancelled);
        }
        Ok(PrefixFacts::scan(
            tokens,
            tools_tokens,
            &self.req.static_segments,
            self.tools,
        ))
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
        let Some(model) = self.counter.tok.hf_model().filter(|m| m.template().is_some()) else {
            return Ok((None, None));
        };
        let texts: Vec<_> = plan
            .iter()
            .map(|(_, source)| layout::text_of(self.req, source))
            .collect();
        let reasoning: Vec<Option<String>> = plan
            .iter()
            .map(|(_, source)| layout::thinking_of(self.req, source))
            .collect();
        let messages: Vec<ChatMessage<'_>> = plan
            .iter()
            .zip(&texts)
            .zip(&reasoning)
            .map(|(((role, _), text), reasoning)| ChatMessage {
                role: role.as_str(),
                content: text,
                reasoning: reasoning.as_deref(),
            })
            .collect();
        let warning = self.special_text_warning(model, &messages);
        let tools: Vec<serde_json::Value> = self
            .tools
            .iter()
            .filter_map(|t| serde_json::from_str(t).ok())
            .collect();
        let count = |tools: Option<&[serde_json::Value]>| -> Result<u32, AssembleError> {
            match self.counter.tok.rendered_text(&messages, tools) {
                Some(Ok(text)) => Ok(self.counter.count_rendered(model, &text)),
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
        if self.counter.cancel.is_cancelled() {
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
            let units = if turns {
                Vec::new()
            } else {
                (0..candidates.len())
                    .map(|ci| Unit {
                        members: vec![(bi, ci)],
                        invalid: None,
                    })
                    .collect()
            };
            self.measured
                .push(Measured::new(candidates, filtered, units, turns));
        }
        let chrono = self.group_conversation();
        let reads_thinking = self.spec.reads_thinking();
        for (bi, lights) in lighten::members(self.measurement(), &chrono, self.policy)
            .into_iter()
            .enumerate()
        {
            if !chrono.contains(&bi) {
                continue;
            }
            let costs: Vec<MemberCost> = (0..self.measured[bi].candidates.len())
                .map(|ci| self.member_cost(bi, ci, reads_thinking))
                .collect();
            let m = &mut self.measured[bi];
            m.lights = lights;
            m.costs = costs;
        }

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
                                let c = self.measured[mb].costs.get(mc).copied().unwrap_or_default();
                                c.message.saturating_add(c.thinking)
                            })
                            .fold(0, u32::saturating_add)
                    } else if self.counter.cancel.is_cancelled() {
                        // Nothing more is rendered or counted: the run is
                        // abandoned after measuring.
                        0
                    } else {
                        self.counter
                            .count(m.unit(block.kind, self.measurement().item(bi, ui), ui))
                    };
                    let first = self.measurement().item(u.members[0].0, u.members[0].1);
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

    /// The tokens of turn candidate `ci` of block `bi`: its message, and
    /// its thinking when the provider reads it.
    fn member_cost(&self, bi: usize, ci: usize, reads_thinking: bool) -> MemberCost {
        let it = self.measurement().item(bi, ci);
        if self.counter.cancel.is_cancelled() {
            return MemberCost::default();
        }
        let role = it.role.unwrap_or(Role::User);
        let message = self.counter.message_count(
            role,
            false,
            &it.content,
            Some(self.measurement().content_key(self.counter.tok, bi, ci)),
        );
        let thinking = if reads_thinking {
            it.thinking
                .iter()
                .filter(|t| !t.redacted)
                .map(|t| self.counter.count(&t.text))
                .fold(0, u32::saturating_add)
        } else {
            0
        };
        MemberCost { message, thinking }
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
        let items: Vec<&Item> = turns
            .iter()
            .map(|&(b, c)| self.measurement().item(b, c))
            .collect();
        let mut units = turns::group(&items);
        if self.counter.tok.layout_rules().user_first {
            units = turns::exchanges(units, &items);
        }
        for unit in units {
            let members: Vec<(usize, usize)> = unit.members.iter().map(|&i| turns[i]).collect();
            if let Some(reason) = unit.invalid {
                let ids: Vec<&str> = members
                    .iter()
                    .map(|&(b, c)| self.measurement().item(b, c).id.as_str())
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
