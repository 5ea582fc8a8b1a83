//! The assembly pipeline: resolve, validate, filter, measure, allocate, lay
//! out, report. CLEAR's control flow: C/E arrive in the request, L filters
//! before anything is measured, A allocates and orders.

use std::cell::Cell;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use tracing::debug;

use super::allocate::{self, BlockPlan, DropReason, Shrink, Slot, UnitPlan};
use super::cache::{CountCache, TextCache};
pub use super::cancel::Cancel;
use super::cancel::Meter;
use super::error::AssembleError;
use super::layout;
use super::models::ModelSpec;
use super::policy::{Catalog, Policy};
use super::render::{self, FormAttr};
use super::report;
use super::request::{AssembleRequest, BlockKind, Item, Role};
use super::response::{Assembly, CacheInfo, Usage, Warning};
use super::tokenizer::{Encoding, Tokenizer};
use super::turns;
use super::validate::{self, Budget, Resolved, UNKNOWN_MODEL};
use super::volatile::{self, Volatile};
use crate::telemetry::metrics;

/// Warning code for a volatile value in the static prefix.
pub const VOLATILE_PREFIX: &str = "VOLATILE_PREFIX";
/// Warning code for a recall the memory store did not answer in time (or
/// failed): the prompt was assembled without memories.
pub const RECALL_UNAVAILABLE: &str = "RECALL_UNAVAILABLE";

/// Where in the prefix a volatile value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Segment,
    Tool,
}

/// What the prefix cache remembers about a static prefix.
#[derive(Debug, Clone, Copy, Default)]
struct PrefixFacts {
    /// Tokens of the static prefix messages.
    tokens: u32,
    /// A bit per [`Volatile::ALL`] kind found.
    volatile: u8,
    /// The first volatile value: where (tools first), and its kind.
    first: Option<(Place, u16, Volatile)>,
}

impl PrefixFacts {
    fn scan(tokens: u32, segments: &[super::request::Segment], tools: &[String]) -> Self {
        let mut facts = PrefixFacts {
            tokens,
            ..PrefixFacts::default()
        };
        let texts = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (Place::Tool, i, t.as_str()))
            .chain(
                segments
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (Place::Segment, i, s.content.as_str())),
            );
        for (place, i, text) in texts {
            let (kinds, first) = volatile::scan(text);
            facts.volatile |= kinds;
            if let (None, Some((kind, _))) = (facts.first, first) {
                facts.first = Some((place, u16::try_from(i).unwrap_or(u16::MAX), kind));
            }
        }
        facts
    }
}

/// Tokens every reply is primed with (chat formula).
pub const REPLY_PRIMING_TOKENS: u32 = 3;
/// Tokens every message costs besides its role and content (chat formula).
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 3;
/// Default weight of the token-count caches.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Assembles prompts. Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Assembler {
    catalog: RwLock<Arc<Catalog>>,
    segments: CountCache,
    prefixes: CountCache<PrefixFacts>,
    /// Turn summary units and their counts, by what they summarize.
    summaries: TextCache,
    families: super::families::FamilyTracker,
    feedback: super::feedback::Feedback,
}

/// Which tokenizer `CountTokens` should use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountTarget {
    /// A model name from the table.
    Model(String),
    /// An encoding name.
    Encoding(String),
}

/// A token count and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount {
    /// Tokens.
    pub tokens: u32,
    /// Tokenizer id.
    pub tokenizer: String,
    /// Whether exact.
    pub exact: bool,
}

impl Assembler {
    /// An assembler over `catalog` whose caches hold about `cache_bytes`
    /// (13/16 for segments and items, 1/8 for prefixes, 1/16 for turn
    /// summaries).
    pub fn new(catalog: Catalog, cache_bytes: u64) -> Self {
        Assembler {
            catalog: RwLock::new(Arc::new(catalog)),
            segments: CountCache::new(cache_bytes / 16 * 13),
            prefixes: CountCache::new(cache_bytes / 8),
            summaries: TextCache::new(cache_bytes / 16),
            families: super::families::FamilyTracker::default(),
            feedback: super::feedback::Feedback::default(),
        }
    }

    /// The current catalog (models and policies).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the catalog; requests already running keep the one they
    /// started with. Cached counts stay valid: they are keyed by tokenizer.
    pub fn set_catalog(&self, catalog: Catalog) {
        for e in catalog.models.encodings() {
            e.warm();
        }
        *self.catalog.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
    }

    /// Loads every vocabulary the table uses (readiness waits for this).
    pub fn warm(&self) {
        for e in self.catalog().models.encodings() {
            e.warm();
        }
    }

    /// Compares a provider's usage report with the sidecar's count for the
    /// request, and records both.
    pub fn report_usage(&self, report: &super::feedback::UsageReport) -> Option<super::feedback::Comparison> {
        let c = self.feedback.report(report)?;
        let catalog = self.catalog();
        let spec = catalog.models.entries().iter().find(|e| *e.name == *c.model)?;
        if let (Some(bounds), false) = (spec.margin_bounds, spec.tokenizer.is_exact()) {
            let wanted = self
                .feedback
                .adapt(&c, report.prompt_tokens, bounds, std::time::Instant::now());
            if let Some(margin) = wanted.filter(|&m| m != spec.tokenizer.margin_percent()) {
                self.set_margin(&c.model, margin);
            }
        }
        Some(c)
    }

    /// Gives the estimating model `name` a new margin (read-modify-write of
    /// the catalog under its lock, so a concurrent reload is not undone).
    fn set_margin(&self, name: &str, margin: u32) {
        let mut guard = self.catalog.write().unwrap_or_else(PoisonError::into_inner);
        let mut catalog = (**guard).clone();
        let entries = catalog
            .models
            .entries()
            .iter()
            .map(|e| {
                let mut e = (**e).clone();
                if e.name == name {
                    e.tokenizer = Tokenizer::estimate(e.tokenizer.encoding(), margin);
                }
                e
            })
            .collect();
        catalog.models = super::models::ModelTable::new(entries);
        *guard = Arc::new(catalog);
        drop(guard);
        metrics::estimate_margin(name.to_owned(), margin);
        tracing::info!(
            model = name,
            margin_percent = margin,
            "estimate margin adapted from provider feedback"
        );
    }

    /// Counts `text` with the tokenizer of a model or an encoding.
    pub fn count_tokens(&self, target: &CountTarget, text: &str) -> Result<TokenCount, AssembleError> {
        let tokenizer = match target {
            CountTarget::Model(m) => self
                .catalog()
                .models
                .resolve(m)
                .map(|s| s.tokenizer.clone())
                .ok_or_else(|| AssembleError::invalid("model", UNKNOWN_MODEL))?,
            CountTarget::Encoding(e) => Encoding::from_name(e).map(Tokenizer::exact).ok_or_else(|| {
                AssembleError::invalid("encoding", "unknown encoding: use o200k_base or cl100k_base")
            })?,
        };
        Ok(TokenCount {
            tokens: tokenizer.count(text),
            tokenizer: tokenizer.to_string(),
            exact: tokenizer.is_exact(),
        })
    }

    /// Counts `text` with `tokenizer` through the segment cache (shared with
    /// Assemble, so a conversation re-sent each turn is tokenized once).
    /// Returns the count and whether it was a cache hit.
    pub fn count_cached(&self, tokenizer: &Tokenizer, text: &str) -> (u32, bool) {
        self.segments.count(tokenizer, text)
    }

    /// Assembles one prompt, consuming the request (its texts move into the
    /// answer). CPU-bound: call it off the async reactor.
    pub fn assemble(&self, req: AssembleRequest) -> Result<Assembly, AssembleError> {
        self.assemble_cancellable(req, &Cancel::new())
    }

    /// [`Assembler::assemble`] that stops early once `cancel` is set (a
    /// deadline passed or the caller went away): no further text is
    /// tokenized and nothing half-counted is cached.
    pub fn assemble_cancellable(
        &self,
        req: AssembleRequest,
        cancel: &Cancel,
    ) -> Result<Assembly, AssembleError> {
        self.assemble_with_prefix(req, None, cancel).0
    }

    /// [`Assembler::assemble_cancellable`] with the prefix hash already
    /// made for identical static parts (batches hash each prefix once).
    /// Returns the prefix key it used, when it got that far.
    pub(crate) fn assemble_with_prefix(
        &self,
        req: AssembleRequest,
        prefix: Option<&PrefixKey>,
        cancel: &Cancel,
    ) -> (Result<Assembly, AssembleError>, Option<PrefixKey>) {
        match self.assemble_inner(req, prefix, cancel) {
            Ok((a, key)) => (Ok(a), Some(key)),
            Err(e) => (Err(e), None),
        }
    }

    fn assemble_inner(
        &self,
        req: AssembleRequest,
        prefix: Option<&PrefixKey>,
        cancel: &Cancel,
    ) -> Result<(Assembly, PrefixKey), AssembleError> {
        // A batch cancelled midway hands every later request over at once.
        if cancel.is_cancelled() {
            return Err(AssembleError::Cancelled);
        }
        let started = Instant::now();
        let catalog = self.catalog();
        let Resolved {
            spec,
            policy,
            budget,
            tools,
        } = validate::validate(&req, &catalog).map_err(AssembleError::InvalidArgument)?;
        let mut pipeline = Pipeline::new(self, &spec, &policy, &req, budget, cancel);
        pipeline.tools = &tools;
        pipeline.lap = started;
        let key = prefix
            .cloned()
            .unwrap_or_else(|| PrefixKey::of(&tools, &req.static_segments));
        if let Some(family) = catalog.family_label(&req.prefix_family) {
            self.families
                .observe(family, &key.digest, std::time::Instant::now());
        }
        let result = pipeline.run(key.clone());
        pipeline.record_lookups();
        let render_started = pipeline.lap;
        let (plan, usage, cache, hints, decisions, warnings) = result?;
        self.feedback.remember(
            &req.request_id,
            &spec.name,
            spec.tokenizer.margin_percent(),
            usage.total_tokens.saturating_add(usage.tools_tokens),
        );
        let assembly = Assembly {
            request_id: req.request_id.clone(),
            model: spec.name.clone(),
            messages: layout::materialize(plan, req),
            usage,
            cache,
            decisions,
            warnings,
            tools,
            hints,
        };
        metrics::phase(metrics::PHASE_RENDER, render_started.elapsed());
        Ok((assembly, key))
    }
}

/// A static prefix's hash (hex and digest) and content bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixKey {
    hex: String,
    digest: [u8; 32],
    bytes: u64,
}

impl PrefixKey {
    /// Hashes canonical `tools` and `segments`.
    pub fn of(tools: &[String], segments: &[super::request::Segment]) -> Self {
        let (hex, digest, bytes) = render::prefix_hash(tools, segments);
        PrefixKey { hex, digest, bytes }
    }
}

/// One unit of a block: a context item, or a turn with its tool results. A
/// unit's members are (block, candidate) pairs: a tool call made at the end of
/// HISTORY and answered at the start of RECENT_TURNS is one unit, owned by the
/// newer block.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    pub members: Vec<(usize, usize)>,
    pub invalid: Option<DropReason>,
}

/// One block after filtering and measuring (`measured[i]` is `blocks[i]`).
pub(crate) struct Measured {
    /// Positions in `block.items` of the items the principal may see.
    pub candidates: Vec<usize>,
    /// Positions of the items filtered out.
    pub filtered: Vec<usize>,
    /// The block's units, in order.
    pub units: Vec<Unit>,
    /// Full-form text of each candidate (context kinds only).
    pub rendered: Vec<String>,
}

/// What a successful run produces before texts are moved out of the request.
type RunOutput = (
    layout::Plan,
    Usage,
    CacheInfo,
    super::response::CacheHints,
    Vec<super::response::BlockDecision>,
    Vec<Warning>,
);

/// Per-request state.
pub(crate) struct Pipeline<'a> {
    asm: &'a Assembler,
    pub spec: &'a ModelSpec,
    pub policy: &'a Policy,
    pub tok: &'a Tokenizer,
    cancel: &'a Cancel,
    pub req: &'a AssembleRequest,
    /// Canonical tool definitions.
    tools: &'a [String],
    budget: Budget,
    pub measured: Vec<Measured>,
    pub warnings: Vec<Warning>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    /// Where the current phase began.
    lap: Instant,
}

impl<'a> Pipeline<'a> {
    fn new(
        asm: &'a Assembler,
        spec: &'a ModelSpec,
        policy: &'a Policy,
        req: &'a AssembleRequest,
        budget: Budget,
        cancel: &'a Cancel,
    ) -> Self {
        Pipeline {
            asm,
            spec,
            policy,
            tok: &spec.tokenizer,
            cancel,
            lap: Instant::now(),
            req,
            tools: &[],
            budget,
            measured: Vec::new(),
            warnings: Vec::new(),
            hits: Cell::new(0),
            misses: Cell::new(0),
        }
    }

    /// Tokens of one message whose content has `content` tokens.
    fn message_cost(&self, role: Role, content: u32) -> u32 {
        content.saturating_add(MESSAGE_OVERHEAD_TOKENS + self.tok.role_tokens(role))
    }

    /// Counts through the segment cache, tallying hits and misses. Once the
    /// request is cancelled, counts nothing and returns 0 (the run is
    /// abandoned before any result is used).
    pub(crate) fn count(&self, text: &str) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        let (n, hit) = self.asm.segments.count(self.tok, text);
        let tally = if hit { &self.hits } else { &self.misses };
        tally.set(tally.get() + 1);
        n
    }

    fn record_lookups(&self) {
        metrics::cache_lookups(
            metrics::SEGMENT_CACHE_LOOKUPS_TOTAL,
            self.hits.get(),
            self.misses.get(),
        );
    }

    /// The item at candidate `ci` of block `bi`.
    pub(crate) fn item(&self, bi: usize, ci: usize) -> &'a Item {
        &self.req.blocks[bi].items[self.measured[bi].candidates[ci]]
    }

    fn run(&mut self, prefix: PrefixKey) -> Result<RunOutput, AssembleError> {
        let req = self.req;
        let PrefixKey {
            hex: prefix_hash,
            digest: prefix_digest,
            bytes: prefix_bytes,
        } = prefix;
        let (static_tokens, prefix_hit) = self.static_tokens(&prefix_digest);
        let query_tokens = self.message_cost(Role::User, self.count(&req.query));
        let tools_tokens = self
            .tools
            .iter()
            .map(|t| self.count(t))
            .fold(0, u32::saturating_add);
        let base = u64::from(static_tokens)
            + u64::from(query_tokens)
            + u64::from(REPLY_PRIMING_TOKENS)
            + u64::from(tools_tokens);

        let plans = self.measure();
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_TOKENIZE);
        // Opening the context message (policy's role) and the summary message (user).
        let overheads = [
            self.message_cost(self.policy.context_role, 0),
            self.message_cost(Role::User, 0),
        ];
        let mut shrinker = Shrinker {
            p: self,
            turn_summary: None,
        };
        let alloc = allocate::allocate(&plans, base, overheads, self.budget.input, &mut shrinker)
            .map_err(|o| {
                debug!(non_cuttable = o.non_cuttable, budget = self.budget.input, model = %self.spec.name, "budget overflow");
                AssembleError::BudgetOverflow {
                    non_cuttable_tokens: o.non_cuttable,
                    budget: self.budget.input,
                    model: self.spec.name.clone(),
                }
            })?;

        let turn_summary = shrinker.turn_summary.take().filter(|_| alloc.summary.is_some());
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_ALLOCATE);
        if let Some(s) = &alloc.summary {
            metrics::compaction(
                metrics::COMPACTION_SOURCE_ASSEMBLE,
                metrics::COMPACTION_OUTCOME_SUMMARIZED,
                u32::try_from(s.covered.saturating_sub(u64::from(s.cost))).unwrap_or(u32::MAX),
            );
        }
        let plan = layout::plan(self, &alloc, turn_summary);
        let hints = super::hints::of(
            self.spec,
            req,
            self.tools.len(),
            &plan,
            &prefix_hash,
            static_tokens,
            tools_tokens,
        );
        let decisions = report::decisions(self, &plans, &alloc);
        // The tools are reserved from the budget but are not messages.
        let total = u32::try_from(alloc.used.saturating_sub(u64::from(tools_tokens))).unwrap_or(u32::MAX);
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
        };
        let cache = CacheInfo {
            prefix_hash,
            prefix_tokens: static_tokens,
            prefix_bytes,
            prefix_message_count: u32::try_from(req.static_segments.len()).unwrap_or(u32::MAX),
            prefix_cache_hit: prefix_hit,
        };
        Ok((
            plan,
            usage,
            cache,
            hints,
            decisions,
            std::mem::take(&mut self.warnings),
        ))
    }

    /// Tokens of the static prefix messages and its volatile values: one
    /// lookup when the prefix is known, else one count and one scan per
    /// segment and tool (single flight: concurrent requests with a new
    /// prefix do it once). A cancelled count is not cached. Volatile values
    /// give a warning and are counted in every response that carries them.
    ///
    /// The cache is partitioned by `cache_salt`: a prefix another tenant
    /// (another salt) brought is a miss, so `prefix_cache_hit` never tells
    /// one caller what system prompt another used.
    fn static_tokens(&mut self, digest: &[u8; 32]) -> (u32, bool) {
        let key = prefix_key(self.tok, digest, &self.req.cache_salt);
        let counted = self.asm.prefixes.get_or_try_count(key, || {
            let tokens = self
                .req
                .static_segments
                .iter()
                .map(|s| self.message_cost(Role::System, self.count(&s.content)))
                .fold(0, u32::saturating_add);
            if self.cancel.is_cancelled() {
                return Err(AssembleError::Cancelled);
            }
            Ok(PrefixFacts::scan(tokens, &self.req.static_segments, self.tools))
        });
        // Cancelled: the run is abandoned at the next check.
        let (facts, hit) = counted.unwrap_or((PrefixFacts::default(), false));
        metrics::cache_lookups(
            metrics::PREFIX_CACHE_LOOKUPS_TOTAL,
            u64::from(hit),
            u64::from(!hit),
        );
        if let Some((place, index, kind)) = facts.first {
            for (bit, k) in Volatile::ALL.iter().enumerate() {
                if facts.volatile & (1 << bit) != 0 {
                    metrics::prefix_volatile(k.as_str());
                }
            }
            let at = match place {
                Place::Tool => format!("tools[{index}]"),
                Place::Segment => {
                    let id = self
                        .req
                        .static_segments
                        .get(usize::from(index))
                        .map_or("", |s| s.id.as_str());
                    format!("static_segments[{index}] (id {id:?})")
                }
            };
            self.warnings.push(Warning {
                code: VOLATILE_PREFIX,
                message: format!(
                    "the static prefix holds a {} in {at}: a value that changes between requests changes \
                     prefix_hash and defeats provider prompt caches; move it to a block or the query",
                    kind.as_str()
                ),
            });
        }
        (facts.tokens, hit)
    }

    /// Records the time since the last phase ended as `phase`.
    fn end_phase(&mut self, phase: &'static str) {
        let now = Instant::now();
        metrics::phase(phase, now.duration_since(self.lap));
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
            let rendered = if block.kind.is_turns() {
                Vec::new()
            } else {
                // Once cancelled, nothing more is rendered (nor counted: the
                // run is abandoned after measuring).
                candidates
                    .iter()
                    .map(|&i| {
                        if self.cancel.is_cancelled() {
                            return String::new();
                        }
                        render::unit(
                            block.kind,
                            &block.items[i],
                            &block.items[i].content,
                            FormAttr::Full,
                        )
                    })
                    .collect()
            };
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
                    let full = if block.kind.is_turns() {
                        u.members
                            .iter()
                            .map(|&(mb, mc)| {
                                let it = self.item(mb, mc);
                                self.message_cost(it.role.unwrap_or(Role::User), self.count(&it.content))
                            })
                            .fold(0, u32::saturating_add)
                    } else {
                        self.count(&m.rendered[ui])
                    };
                    let first = self.item(u.members[0].0, u.members[0].1);
                    UnitPlan {
                        full,
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
                priority: block.effective_priority(self.policy),
                cuttable: block.effective_cuttable(),
                min_tokens: block.min_tokens,
                max_tokens: block.max_tokens(),
                slot: Slot::of(block.kind),
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
        for unit in turns::group(&items) {
            let members: Vec<(usize, usize)> = unit.members.iter().map(|&i| turns[i]).collect();
            if let Some(reason) = unit.invalid {
                let ids: Vec<&str> = members
                    .iter()
                    .map(|&(b, c)| self.item(b, c).id.as_str())
                    .collect();
                let (code, what) = match reason {
                    DropReason::OrphanToolResult => ("ORPHAN_TOOL_RESULT", "tool result without its call"),
                    _ => ("INCOMPLETE_TOOL_CALL", "tool call without all of its results"),
                };
                self.warnings.push(Warning {
                    code,
                    message: format!("{what}, dropped: {}", ids.join(", ")),
                });
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

/// Measures compact and truncated forms, and the summary of turns that do
/// not fit, on demand.
struct Shrinker<'p, 'a> {
    p: &'p Pipeline<'a>,
    /// The last turn summary unit rendered (the one kept, if any).
    turn_summary: Option<String>,
}

/// The id of the summary unit of compacted turns.
pub const TURN_SUMMARY_ID: &str = "compacted-turns";
/// The source attribute of the summary unit of compacted turns.
const TURN_SUMMARY_SOURCE: &str = "context-assembler";

impl Shrink for Shrinker<'_, '_> {
    /// The summary unit of the turns' items (the Compact RPC's summary), as
    /// one `<summary id="compacted-turns">` unit of the summary message, so
    /// its count adds exactly to the units beside it.
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        if !self.p.policy.compact_turns || self.p.cancel.is_cancelled() {
            return None;
        }
        let members = || {
            units
                .iter()
                .flat_map(|&(b, u)| &self.p.measured[b].units[u].members)
                .map(|&(mb, mc)| self.p.item(mb, mc))
        };
        let key = turn_summary_key(self.p.tok, members());
        if let Some(known) = self.p.asm.summaries.get(&key) {
            self.turn_summary = Some(known.0.clone());
            return Some(known.1);
        }
        let msgs: Vec<crate::compact::Msg> = members().map(turn_message).collect();
        let text = crate::compact::summary::Summary::of_until(&msgs, None, self.p.cancel)
            .ok()?
            .plain();
        // The summary clips the turns verbatim: it is only as trusted as the
        // least trusted turn it covers.
        let item = Item {
            id: TURN_SUMMARY_ID.to_owned(),
            source: TURN_SUMMARY_SOURCE.to_owned(),
            trusted: members().all(vouched_for),
            ..Item::default()
        };
        let unit = render::unit(BlockKind::Summary, &item, &text, FormAttr::Compact);
        let cost = self.p.count(&unit);
        if self.p.cancel.is_cancelled() {
            // The count may be a cancelled 0: remember nothing.
            return None;
        }
        self.p.asm.summaries.insert(key, unit.clone(), cost);
        self.turn_summary = Some(unit);
        Some(cost)
    }

    fn compact_cost(&mut self, block: usize, unit: usize) -> u32 {
        let item = self.p.item(block, unit);
        let text = item.compact_form.as_deref().unwrap_or_default();
        self.p.count(&render::unit(
            self.p.req.blocks[block].kind,
            item,
            text,
            FormAttr::Compact,
        ))
    }

    /// Galloping search over sentence ends: probes grow from the first
    /// sentence, so the work is proportional to what is kept, not to the
    /// whole text; every answer is a verified count, and a probe stops
    /// counting once past `limit`. Finding the ends is one pass over the
    /// content, cancellable.
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        let item = self.p.item(block, unit);
        let kind = self.p.req.blocks[block].kind;
        // Cancelled: nothing fits, and the run is abandoned at its next check.
        let mut ends = render::sentence_ends(&item.content, &mut Meter::new(self.p.cancel)).ok()?;
        ends.retain(|&e| e < item.content.len());
        let cost = |i: usize| {
            if self.p.cancel.is_cancelled() {
                return None;
            }
            let u = render::unit(kind, item, &item.content[..ends[i]], FormAttr::Truncated);
            self.p.tok.count_at_most(&u, limit)
        };
        let mut best: Option<(usize, u32)> = None;
        let (mut lo, mut hi) = (0, ends.len());
        let mut step = 1;
        while lo < hi {
            let probe = (lo + step - 1).min(hi - 1);
            if let Some(c) = cost(probe) {
                best = Some((ends[probe], c));
                lo = probe + 1;
                step *= 2;
            } else {
                hi = probe;
                step = 1.max((hi - lo) / 2);
            }
        }
        best
    }
}

/// The prefix cache key of the static prefix `digest` under `salt`: the
/// digest, then the salt length-framed (an empty salt is its own partition).
fn prefix_key(tok: &Tokenizer, digest: &[u8; 32], salt: &str) -> super::cache::Key {
    let mut h = tok.hasher();
    h.update(digest);
    h.update(&(salt.len() as u64).to_le_bytes());
    h.update(salt.as_bytes());
    *h.finalize().as_bytes()
}

/// Whether the application vouches for a turn's content: it says so, and the
/// turn is neither the end user's text nor a tool's output (those are
/// untrusted whatever the flag says: a prompt injection arrives there).
fn vouched_for(item: &Item) -> bool {
    item.trusted && !matches!(item.role, Some(Role::User | Role::Tool) | None)
}

/// The key of the summary unit of `items`: every field [`turn_message`]
/// and [`vouched_for`] read, length-prefixed, keyed by the tokenizer (its
/// count is cached too).
fn turn_summary_key<'i>(tok: &Tokenizer, items: impl Iterator<Item = &'i Item>) -> super::cache::Key {
    let mut h = tok.hasher();
    h.update(b"turn-summary/v2");
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for item in items {
        field(item.role.map_or("", Role::as_str).as_bytes());
        field(item.id.as_bytes());
        field(item.tool_call_id.as_bytes());
        field(&(item.tool_call_ids.len() as u64).to_le_bytes());
        for id in &item.tool_call_ids {
            field(id.as_bytes());
        }
        field(item.content.as_bytes());
        field(&[u8::from(vouched_for(item))]);
    }
    *h.finalize().as_bytes()
}

/// A conversation turn as a compaction message: its text, the calls it
/// makes (tool names are not known here), or the result it carries.
fn turn_message(item: &Item) -> crate::compact::Msg {
    use crate::compact::Content;
    let role = item.role.unwrap_or(Role::User);
    let mut content = Vec::with_capacity(1 + item.tool_call_ids.len());
    if role == Role::Tool {
        content.push(Content::ToolResult {
            tool_use_id: item.tool_call_id.clone(),
            output: item.content.clone(),
            is_error: false,
        });
    } else {
        content.push(Content::Text(item.content.clone()));
    }
    content.extend(item.tool_call_ids.iter().map(|id| Content::ToolUse {
        id: id.clone(),
        name: String::new(),
        input: String::new(),
    }));
    crate::compact::Msg {
        id: item.id.clone(),
        role,
        content,
    }
}

#[cfg(test)]
mod tests;
