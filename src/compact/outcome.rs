//! What a Compact request answers: the outcome, provenance and trim steps
//! (its warning codes are in [`crate::vocab::codes`]).

use super::breaker::BreakerState;
use super::conversation::Msg;
use crate::vocab::Warning;

/// What a Compact request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactOutcome {
    /// Compacted to at most the target.
    Compacted,
    /// Compacted, but still over the target (a failure for the breaker).
    CompactedOverTarget,
    /// Below the trigger: unchanged.
    BelowTrigger,
    /// At or past the trigger, but no clean cut keeps the recent messages
    /// and summarizes anything (or an emergency trim of a single turn):
    /// unchanged.
    NothingToCompact,
    /// The session's breaker is open: the oldest turns were trimmed instead.
    BreakerTrimmed,
    /// The provider refused the conversation as too long: the oldest turns
    /// were trimmed.
    EmergencyTrimmed,
}

impl CompactOutcome {
    /// Every outcome, for metric series.
    pub const ALL: [CompactOutcome; 6] = [
        CompactOutcome::Compacted,
        CompactOutcome::CompactedOverTarget,
        CompactOutcome::BelowTrigger,
        CompactOutcome::NothingToCompact,
        CompactOutcome::BreakerTrimmed,
        CompactOutcome::EmergencyTrimmed,
    ];

    /// A stable lower-case name, used as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactOutcome::Compacted => "compacted",
            CompactOutcome::CompactedOverTarget => "compacted_over_target",
            CompactOutcome::BelowTrigger => "below_trigger",
            CompactOutcome::NothingToCompact => "nothing_to_compact",
            CompactOutcome::BreakerTrimmed => "breaker_trimmed",
            CompactOutcome::EmergencyTrimmed => "emergency_trimmed",
        }
    }

    /// Whether a summary replaced older messages.
    pub fn compacted(self) -> bool {
        matches!(
            self,
            CompactOutcome::Compacted | CompactOutcome::CompactedOverTarget
        )
    }
}

/// Which input messages a summary covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Provenance {
    /// Non-empty ids of the summarized messages, in order.
    pub message_ids: Vec<String>,
    /// First summarized input index.
    pub start: u32,
    /// One past the last summarized input index.
    pub end: u32,
    /// Input index of an earlier summary merged into this one.
    pub merged_summary_index: Option<u32>,
}

/// One step of a trim: the turns dropped and the tokens left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimStep {
    /// Non-empty ids of the dropped messages, in order.
    pub message_ids: Vec<String>,
    /// First dropped input index.
    pub start: u32,
    /// One past the last dropped input index.
    pub end: u32,
    /// Tokens of the conversation after this step.
    pub tokens_after: u32,
}

/// The answer to a Compact request.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    /// Echo of the request id.
    pub request_id: String,
    /// The model table entry used.
    pub model: String,
    /// The conversation to send next.
    pub messages: Vec<Msg>,
    /// What was done.
    pub outcome: CompactOutcome,
    /// Why, in a few words.
    pub reason: String,
    /// Tokens of the input conversation.
    pub tokens_before: u32,
    /// Tokens of `messages`.
    pub tokens_after: u32,
    /// The trigger applied.
    pub trigger_tokens: u32,
    /// The target applied.
    pub target_tokens: u32,
    /// The recent-message count applied.
    pub preserve_recent: u32,
    /// Tokenizer id.
    pub tokenizer: String,
    /// Whether counts are exact for the model.
    pub exact: bool,
    /// What the summary covers (when compacted).
    pub provenance: Option<Provenance>,
    /// Index in `messages` of the continuation message (when compacted).
    pub summary_index: Option<u32>,
    /// Trim steps (breaker and emergency trims).
    pub trim_steps: Vec<TrimStep>,
    /// The session's breaker after this request.
    pub breaker: BreakerState,
    /// Observations (ids and counts only).
    pub warnings: Vec<Warning>,
}
