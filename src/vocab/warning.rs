//! Warnings: what a response says besides its answer, under stable codes.

/// A non-fatal observation (ids and counts only, never content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Stable code.
    pub code: &'static str,
    /// Detail.
    pub message: String,
    /// What it is about, by position in the request: the block it names,
    /// the items it lists (never more than its message lists). Empty when
    /// it is about the request as a whole. Not on the wire: the preview
    /// points at blocks and items with it, without reading the message.
    pub about: Vec<WarningRef>,
}

/// A block or item a [`Warning`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarningRef {
    /// The request's block at this index.
    Block(usize),
    /// The item of this id in the request's block at index `block`.
    Item {
        /// The block's index in the request.
        block: usize,
        /// The item's id (unique within its block).
        id: String,
    },
}

impl Warning {
    /// A warning under `code` (one of [`codes`]), about nothing in
    /// particular.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Warning {
            code,
            message: message.into(),
            about: Vec::new(),
        }
    }

    /// This warning, about `refs`.
    #[must_use]
    pub fn with_about(mut self, refs: Vec<WarningRef>) -> Self {
        self.about = refs;
        self
    }
}

/// Every warning code, stable across versions (clients match on them).
pub mod codes {
    /// A volatile value (timestamp, id, ...) in the static prefix.
    pub const VOLATILE_PREFIX: &str = "VOLATILE_PREFIX";
    /// The memory store did not answer a recall in time (or failed): the
    /// prompt was assembled without memories.
    pub const RECALL_UNAVAILABLE: &str = "RECALL_UNAVAILABLE";
    /// A tool result whose call is not before it.
    pub const ORPHAN_TOOL_RESULT: &str = "ORPHAN_TOOL_RESULT";
    /// A tool call without all of its results (Assemble drops the unit).
    pub const INCOMPLETE_TOOL_CALL: &str = "INCOMPLETE_TOOL_CALL";
    /// A tool call no later message answers (Compact keeps it).
    pub const UNANSWERED_TOOL_CALL: &str = "UNANSWERED_TOOL_CALL";
    /// Older turns kept while newer ones were cut: what is kept is not one
    /// contiguous stretch of the conversation.
    pub const CHRONOLOGY_GAP: &str = "CHRONOLOGY_GAP";
    /// A compaction ended over its target.
    pub const COMPACTION_OVER_TARGET: &str = "COMPACTION_OVER_TARGET";
    /// A session's compaction breaker is open: oldest turns are trimmed
    /// instead.
    pub const COMPACTION_BREAKER_OPEN: &str = "COMPACTION_BREAKER_OPEN";
    /// Consecutive messages of one role were sent as one: the model's chat
    /// template refuses them apart (roles must alternate).
    pub const MESSAGES_JOINED: &str = "MESSAGES_JOINED";
    /// A text spells one of the model's special tokens (`<|im_end|>`,
    /// `<start_of_turn>`): the engine will read it as that token, a
    /// prompt-injection risk. Counted as the engine counts it.
    pub const SPECIAL_TOKEN_TEXT: &str = "SPECIAL_TOKEN_TEXT";
    /// Token ids were asked for, but the model counts with an encoding, not
    /// a model folder (or its template refused the prompt): none are given.
    pub const TOKEN_IDS_UNAVAILABLE: &str = "TOKEN_IDS_UNAVAILABLE";
    /// Recalled memories were left out because their text (normalized)
    /// is that of a better-ranked memory or of an item of the request: the
    /// message names each one's id and what it repeats (a memory id, or an
    /// item's id and block), never the text.
    pub const MEMORY_DUPLICATE: &str = "MEMORY_DUPLICATE";

    /// Every code above.
    pub const ALL: [&str; 12] = [
        VOLATILE_PREFIX,
        RECALL_UNAVAILABLE,
        ORPHAN_TOOL_RESULT,
        INCOMPLETE_TOOL_CALL,
        UNANSWERED_TOOL_CALL,
        CHRONOLOGY_GAP,
        COMPACTION_OVER_TARGET,
        COMPACTION_BREAKER_OPEN,
        MESSAGES_JOINED,
        SPECIAL_TOKEN_TEXT,
        TOKEN_IDS_UNAVAILABLE,
        MEMORY_DUPLICATE,
    ];
}

#[cfg(test)]
mod tests {
    use super::codes;

    /// `codes::ALL` lists every code `codes` declares, once, in the order
    /// declared, and each code is spelled as its name: a code added to
    /// one list and not the other fails here.
    #[test]
    fn all_lists_every_declared_code_once_spelled_as_its_name() {
        let declared: Vec<(&str, &str)> = include_str!("warning.rs")
            .lines()
            .filter_map(|line| line.trim().strip_prefix("pub const ")?.split_once(": &str = "))
            .collect();
        let names: Vec<&str> = declared.iter().map(|&(name, _)| name).collect();
        assert_eq!(names, codes::ALL);
        for (name, value) in declared {
            assert_eq!(value, format!("{name:?};"));
        }
    }
}
