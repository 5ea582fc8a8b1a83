//! What an estimate counts with besides its base encoding: the frames its
//! provider measured around a message, and a content-aware estimate
//! ([`crate::tokens::estimate`]) frozen for one request.

use std::sync::Arc;

use crate::tokens::estimate::{Features, Snapshot};

/// What a provider's counting measured around the content of an estimated
/// model's messages (its counting endpoint, with a few one-message
/// requests): a prompt's fixed cost, and each message's by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeasuredFrames {
    /// Once per prompt (its first message's frame less a further one's).
    pub priming: u32,
    /// Each message that is not a system prompt.
    pub message: u32,
    /// A system prompt.
    pub system: u32,
}

/// A content-aware estimate ([`crate::tokens::estimate`]) as one request
/// counts with it: a tokenizer generation's calibrated coefficients and
/// error, frozen, so that every text of the request is estimated alike. A text
/// costs [`Snapshot::budget_tokens`] of its [`Features`]: the estimate
/// raised by the generation's recent 99th percentile error.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentEstimate {
    /// The tokenizer generation's label.
    pub generation: Arc<str>,
    /// Its calibrator's state when frozen.
    pub snapshot: Snapshot,
}

impl ContentEstimate {
    pub(super) fn count(&self, text: &str) -> u32 {
        self.snapshot.budget_tokens(&Features::of(text))
    }

    /// A lower bound of the count of any text holding `text` whole (a unit
    /// rendered around it): joining texts merges at most one run (of
    /// [`Features::RUNS`]) at each of the two joins.
    pub(super) fn count_within_any(&self, text: &str) -> u32 {
        let c = &self.snapshot.coefficients.0;
        let merged = 2.0 * Features::RUNS.iter().map(|&i| c[i]).fold(0.0, f64::max);
        let estimate = self.snapshot.coefficients.estimate(&Features::of(text)) - merged;
        Snapshot::budget_of(estimate, self.snapshot.least_factor())
    }

    /// The most bytes a text counting at most `tokens` can hold: every
    /// character costs at least the smallest character coefficient (none
    /// when one is zero), and holds at most 4 bytes.
    pub(super) fn most_bytes_within(&self, tokens: u32) -> usize {
        let c = &self.snapshot.coefficients.0;
        let least = [c[0], c[1], c[3], c[4], c[5], c[6]]
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        if least <= 0.0 || !least.is_finite() {
            return usize::MAX;
        }
        let chars = (f64::from(tokens) / (least * self.snapshot.least_factor())).floor() + 1.0;
        // `as` saturates; the bound is finite and positive.
        (chars * 4.0).min(usize::MAX as f64) as usize
    }
}
