//! One request's run: filter by permission, group the conversation into
//! units, measure every unit, allocate the budget, then hand plain values to
//! layout, hints and the report.

use std::time::{Duration, Instant};

use tracing::debug;

use super::allocate::{self, Allocation, BlockPlan, Form};
use super::counting::Counter;
use super::error::{AssembleError, BlockNeed, Needs};
use super::layout;
use super::measure::{Measured, Measurement};
use super::policy::Policy;
use super::report;
use super::shrink::Shrinker;
use super::validate::Budget;
use crate::prompt::{AssembleRequest, BlockDecision, CacheHints, CacheInfo, PartKind, Sources, Usage};
use crate::prompt_cache::prefix::{PrefixFacts, PrefixKey};
use crate::telemetry::metrics;
use crate::tokens::ModelSpec;
use crate::tokens::chat::message_tokens;
use crate::vocab::{Role, Warning, saturating_u32};

mod lay_out;
mod measure;
mod render;

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

/// A prompt as its chat template renders it: the messages' tokens, and what
/// the tools add to them.
struct Rendered {
    messages: u32,
    tools: u32,
}

/// The measure step's product.
struct Sized {
    /// The static prefix's key.
    prefix: PrefixKey,
    /// The static prefix's facts: its messages' and the tools' tokens, its
    /// volatile values.
    facts: PrefixFacts,
    /// Whether they were cached.
    prefix_hit: bool,
    /// The query's message.
    query_tokens: u32,
    /// Every block, as the allocator reads it.
    plans: Vec<BlockPlan>,
    /// Opening the context message and the summary message.
    overheads: [u32; 2],
}

/// The allocate step's product.
struct Allotted {
    /// What each unit got.
    alloc: Allocation,
    /// The text of the summary of compacted turns, when one is kept.
    turn_summary: Option<String>,
    /// For a model its provider counts: the text of the summary the
    /// window's next step would keep instead, to be counted ahead.
    ahead: Option<String>,
}

/// The lay-out step's product.
struct Laid {
    /// The messages, as positions in the request.
    plan: layout::Plan,
    /// The prompt's parts in order, tools first.
    parts: Vec<PartFacts>,
    /// Hints for the provider's and the engine's caches.
    hints: CacheHints,
}

/// Records what the allocation compacted: the turns summarized, the turns
/// lightened.
fn record_compaction(alloc: &Allocation) {
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

    /// One try of the fit stage, as a list of steps each handing its product
    /// to the next: measures (the static prefix, the query, every block's
    /// units), allocates the budget (lightening and windowing the turns,
    /// compacting and dropping), lays out for attention and caches, and
    /// counts the render, for the request whose static prefix is `prefix`.
    pub(super) fn run(&mut self, prefix: PrefixKey) -> Result<RunOutput, AssembleError> {
        let sized = self.size(prefix)?;
        let Allotted {
            alloc,
            turn_summary,
            ahead,
        } = self.allot(&sized)?;
        let laid = self.lay_out(&sized, &alloc, turn_summary, ahead);
        let (rendered, special_text) = self.rendered_total(&laid.plan)?;
        Ok(self.report(sized, &alloc, laid, rendered, special_text))
    }

    /// The allocate step: the budget shared out by priority, turns lightened
    /// and windowed, units compacted before they are dropped; an overflow
    /// of what may never be cut is the request's error.
    fn allot(&mut self, sized: &Sized) -> Result<Allotted, AssembleError> {
        let base = u64::from(sized.facts.tokens)
            + u64::from(sized.query_tokens)
            + u64::from(self.counter.tok.priming_tokens())
            + u64::from(sized.facts.tools_tokens);
        let mut shrinker = Shrinker::new(&self.counter, self.measurement(), self.policy);
        let window = self.policy.window(self.budget.input);
        let lighten = Some(self.policy.clear_at_least(self.budget.input));
        let alloc = allocate::allocate(
            &sized.plans,
            base,
            sized.overheads,
            self.budget.input,
            window,
            lighten,
            &mut shrinker,
        );
        let parts = Needs {
            static_prefix: u64::from(sized.facts.tokens),
            tools: u64::from(sized.facts.tools_tokens),
            query: u64::from(sized.query_tokens),
            framing: u64::from(self.counter.tok.priming_tokens()),
            blocks: Vec::new(),
            template: 0,
        };
        let alloc = match alloc {
            Ok(a) => a,
            Err(o) => {
                debug!(non_cuttable = o.non_cuttable, budget = self.budget.input, model = %self.spec.name, "budget overflow");
                let needs = block_needs(parts, self.req, &sized.plans, &o.reserved);
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
        let needs = block_needs(parts, self.req, &sized.plans, &alloc.reserved);
        let turn_summary = alloc.summary.as_ref().and_then(|s| shrinker.kept_summary(s));
        let ahead = (alloc.summary.as_ref())
            .filter(|_| turn_summary.is_some() && self.counter.counts_ahead())
            .and_then(|s| shrinker.ahead_summary(s));
        drop(shrinker);
        self.needs = Some(needs);
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_ALLOCATE);
        record_compaction(&alloc);
        Ok(Allotted {
            alloc,
            turn_summary,
            ahead,
        })
    }

    /// The report step: usage against the budget (the render's count where
    /// a template renders, else the allocator's sum), the prefix's facts,
    /// every block's decisions and the warnings.
    fn report(
        &mut self,
        sized: Sized,
        alloc: &Allocation,
        laid: Laid,
        rendered: Option<Rendered>,
        special_text: Option<Warning>,
    ) -> RunOutput {
        let Sized {
            prefix,
            facts,
            prefix_hit,
            plans,
            ..
        } = sized;
        let static_tokens = facts.tokens;
        // The tools are reserved from the budget but are not messages.
        let (total, tools_tokens) = match rendered {
            // What the engine bills: the messages, and what the tools add.
            Some(r) => (r.messages, r.tools),
            None => (
                saturating_u32(alloc.used.saturating_sub(u64::from(facts.tools_tokens))),
                facts.tools_tokens,
            ),
        };
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(special_text);
        let decisions = report::decisions(self.measurement(), &plans, alloc, &mut warnings);
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
            tools_exact: facts.tools_exact,
            sources: Sources::all(total, self.counter.tok.is_exact()),
        };
        let cache = CacheInfo {
            prefix_hash: prefix.hex,
            prefix_tokens: static_tokens,
            prefix_bytes: prefix.bytes,
            prefix_message_count: saturating_u32(self.req.static_segments.len()),
            prefix_cache_hit: prefix_hit,
        };
        RunOutput {
            plan: laid.plan,
            usage,
            cache,
            hints: laid.hints,
            decisions,
            warnings,
            parts: laid.parts,
        }
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
}
