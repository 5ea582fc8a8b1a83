//! Stage 2, fit: one [`Pipeline`] run (measure, lighten and window,
//! allocate, lay out, render) under the request's budget, and for a model
//! whose chat template's render the per-message estimate let past that
//! budget, more runs under lower budgets.

use std::time::Instant;

use super::super::counting::{Allowance, Counter, INLINE_COUNT_BYTES};
use super::super::error::AssembleError;
use super::super::pipeline::{Pipeline, RunOutput};
use super::super::policy::Catalog;
use super::admit::Admitted;
use super::{Options, Shared};
use crate::tokens::{RequestKeys, Tokenizer};
use crate::vocab::saturating_u32;

/// Allocations of one request under a chat template before it is refused
/// as over its budget: the first, one lowered by the overshoot (the
/// per-message estimate is off by a few tokens, so it nearly always fits),
/// then a search between budgets that refused and budgets that went over.
const MAX_RENDER_TRIES: u32 = 8;

/// A request fitted to its budget, or refused.
pub(in crate::assemble) struct Fitted {
    /// The laid-out prompt, or why none fits.
    pub out: Result<RunOutput, AssembleError>,
    /// When the last phase of the fitting run ended (the answer's render
    /// phase begins there).
    pub render_started: Instant,
}

/// The budgets tried so far and what they came to.
struct Search {
    /// The request's budget.
    budget: u32,
    /// The budget of the next try.
    allowed: u32,
    /// Tries made.
    tries: u32,
    /// Budgets at or above this rendered over.
    over_at: u32,
    /// Budgets at or below this left no room.
    refused_at: Option<u32>,
    /// The smallest render over the budget.
    least_over: u64,
}

impl Search {
    /// The budget of the try after one that came to `rendered` tokens
    /// (`None`: the allocation failed with `result`'s error), or `None`
    /// when the search ends with that try.
    fn next(&mut self, rendered: Option<u64>, result: &Result<RunOutput, AssembleError>) -> Option<u32> {
        let next = match (rendered, result) {
            (Some(n), _) if n <= u64::from(self.budget) => return None,
            (Some(n), _) => {
                self.over_at = self.allowed;
                self.least_over = self.least_over.min(n);
                match self.refused_at {
                    None => self
                        .allowed
                        .saturating_sub(saturating_u32(n - u64::from(self.budget))),
                    Some(r) => r + (self.over_at - r) / 2,
                }
            }
            // A lowered budget that leaves no room: search above it.
            (None, Err(AssembleError::BudgetOverflow { .. })) if self.tries > 1 => {
                self.refused_at = Some(self.allowed);
                self.allowed + (self.over_at - self.allowed) / 2
            }
            (None, _) => return None,
        };
        Some(next)
    }

    /// The overflow of a search that found no budget to fit, the last try
    /// being `pipeline` for model `model`: the parts as the allocator
    /// counted them, and what the closest render added beyond them as the
    /// template's (so they add up to at least that render).
    fn overflow(&self, pipeline: &Pipeline<'_>, model: &str) -> AssembleError {
        let mut needs = pipeline.needs().cloned().unwrap_or_default();
        needs.template = self.least_over.saturating_sub(needs.total());
        AssembleError::BudgetOverflow {
            non_cuttable_tokens: needs.total(),
            budget: self.budget,
            model: model.to_owned(),
            needs: Box::new(needs),
        }
    }

    /// Whether no budget is left to try after `next`.
    fn exhausted(&self, next: u32) -> bool {
        let searched = self.refused_at.is_some_and(|r| next <= r) || next >= self.over_at;
        self.tries >= MAX_RENDER_TRIES || searched
    }
}

/// Fits `admitted` to its budget: a template's frames are estimated per
/// message and the rendered count is exact, so a prompt the estimate let
/// past the budget is allocated again under a lower budget: first lowered
/// by the overshoot, then, once a lowered budget leaves no room for what
/// cannot be cut (the overshoot may have been in messages that a cut
/// drops), halfway between the highest budget that refused and the lowest
/// that went over. The answer always names the request's budget, and the
/// first try's prefix lookup (later tries find the prefix it cached).
///
/// `None`: an inline try that met more than its allowance, abandoned with
/// nothing recorded. Otherwise the request's prefix family is observed and
/// the fitting run's phases and lookups recorded.
pub(in crate::assemble) fn fit(
    shared: Shared<'_>,
    catalog: &Catalog,
    admitted: &Admitted,
    options: &Options<'_>,
) -> Option<Fitted> {
    let Admitted {
        req,
        spec,
        policy,
        budget,
        tools,
        key,
        tokenizer,
        started,
    } = admitted;
    let allowance = allowance(options, tokenizer);
    // The request's count keys: its inline try's, when it was handed back
    // from one; else its own, for the runs of the search below.
    let own = RequestKeys::new();
    let keys = options.keys.unwrap_or(&own);
    let inline = options.inline.is_some();
    let cancel = options.cancel;
    let mut search = Search {
        budget: budget.input,
        allowed: budget.input,
        tries: 0,
        over_at: u32::MAX,
        refused_at: None,
        least_over: u64::MAX,
    };
    let mut first_hit = None;
    let (out, pipeline) = loop {
        let counter = Counter::new(shared.caches, tokenizer, cancel, &allowance)
            .learning(shared.learning.scope(spec, &req.model))
            .keys(keys);
        let mut allowed = *budget;
        allowed.input = search.allowed;
        let mut pipeline = Pipeline::new(counter, spec, policy, req, tools, allowed, *started);
        let result = pipeline.run(key.clone());
        search.tries += 1;
        if inline && cancel.is_cancelled() {
            break (result, pipeline);
        }
        let rendered = result.as_ref().ok().map(|RunOutput { usage, cache, .. }| {
            first_hit.get_or_insert(cache.prefix_cache_hit);
            u64::from(usage.total_tokens) + u64::from(usage.tools_tokens)
        });
        let Some(next) = search.next(rendered, &result) else {
            let result = match rendered {
                Some(n) if n <= u64::from(budget.input) => result.map(|mut r| {
                    r.usage.budget = budget.input;
                    r.cache.prefix_cache_hit = first_hit.unwrap_or(r.cache.prefix_cache_hit);
                    r
                }),
                _ => result,
            };
            break (result, pipeline);
        };
        if search.exhausted(next) {
            let overflow = search.overflow(&pipeline, &spec.name);
            break (Err(overflow), pipeline);
        }
        search.allowed = next;
    };
    if inline && cancel.is_cancelled() {
        return None;
    }
    // Observed once per request: after an inline try that missed, by the
    // full run.
    if let Some(family) = catalog.family_label(&req.prefix_family) {
        shared.families.observe(family, &key.digest, Instant::now());
    }
    pipeline.record_lookups();
    Some(Fitted {
        out,
        render_started: pipeline.lap,
    })
}

/// What the run may count anew ([`Options::inline`]): past the busy
/// allowance only where counting is fast whatever the text, not with a
/// model folder (one counted by the reference library, or text its
/// normalizer changes, runs at 1-2 MiB/s).
fn allowance(options: &Options<'_>, tokenizer: &Tokenizer) -> Allowance {
    options.inline.map_or(Allowance::unbounded(), |bytes| {
        let fast = tokenizer.hf_model().is_none();
        Allowance::bytes(if fast {
            bytes
        } else {
            bytes.min(INLINE_COUNT_BYTES)
        })
    })
}

#[cfg(test)]
mod tests;
