//! Conversation compaction, free of wire types and of the assembler:
//! a long conversation becomes a deterministic summary, the pinned items and
//! the most recent messages verbatim, cut only where no tool call is
//! separated from its result.
//!
//! - [`conversation`]: the messages and the request;
//! - [`cut`]: where a conversation may be cut (tool-call pair safety);
//! - [`summary`]: the deterministic, bounded, mergeable summary;
//! - [`breaker`]: the per-session circuit breaker;
//! - [`marker`]: the key that seals the continuation and pinned markers;
//! - [`outcome`]: what a request answers;
//! - [`compactor`]: trigger, compaction, breaker fallback and emergency trim,
//!   with exact token counts;
//! - [`error`]: why a compaction failed.
//!
//! It uses only the lower layers ([`crate::tokens`], [`crate::vocab`]):
//! models and counts reach it through [`Counting`], which the assembler
//! implements. [`crate::assemble`] uses it (turns that do not fit are
//! summarized before they are dropped), never the reverse.

pub mod breaker;
pub mod compactor;
pub mod conversation;
pub mod cut;
pub mod error;
pub mod marker;
pub mod outcome;
pub mod summary;
#[cfg(test)]
mod test_support;

use crate::vocab::saturating_u32;
use std::time::Duration;

pub use compactor::{Compactor, Counting};
pub use conversation::{CompactRequest, Content, Msg, Pinned};
pub use error::CompactError;
pub use marker::MarkerKey;
pub use outcome::{CompactOutcome, Compaction, Provenance, TrimStep};

/// Default trigger: compact at this share of the model's input budget.
pub const DEFAULT_TRIGGER_PERCENT: u32 = 80;
/// Default target: a compaction must get under this share of the input budget.
pub const DEFAULT_TARGET_PERCENT: u32 = 50;
/// Default count of recent messages kept verbatim.
pub const DEFAULT_PRESERVE_RECENT: u32 = 4;
/// Default consecutive failed compactions that open a session's breaker.
pub const DEFAULT_BREAKER_FAILURES: u32 = 3;
/// Default time an open breaker stays open.
pub const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(600);

/// How compaction behaves where a request does not say (`[compaction]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Seals the continuation and pinned markers (`marker_key`, else a
    /// random per-process key).
    pub marker_key: MarkerKey,
    /// `trigger_tokens` default, in percent of the model's input budget.
    pub trigger_percent: u32,
    /// `target_tokens` default, in percent of the model's input budget.
    pub target_percent: u32,
    /// `preserve_recent` default.
    pub preserve_recent: u32,
    /// Consecutive failed compactions that open a session's breaker.
    pub breaker_failures: u32,
    /// How long an open breaker stays open before compaction is tried again.
    pub breaker_cooldown: Duration,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            trigger_percent: DEFAULT_TRIGGER_PERCENT,
            target_percent: DEFAULT_TARGET_PERCENT,
            preserve_recent: DEFAULT_PRESERVE_RECENT,
            breaker_failures: DEFAULT_BREAKER_FAILURES,
            breaker_cooldown: DEFAULT_BREAKER_COOLDOWN,
            marker_key: MarkerKey::per_process(),
        }
    }
}

impl CompactionSettings {
    /// `percent` of `budget` tokens, rounded down.
    pub fn share(budget: u32, percent: u32) -> u32 {
        saturating_u32(u64::from(budget) * u64::from(percent) / 100)
    }
}
