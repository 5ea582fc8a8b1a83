//! Named policies and the catalog (model table plus policies) that a request
//! resolves against. The catalog is swapped whole on reload.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::allocate::Window;
use crate::compact::CompactionSettings;
use crate::prompt::{Block, BlockKind};
use crate::prompt_cache::families;
use crate::tokens::ModelTable;
use crate::vocab::{Role, saturating_u32};

/// The name a request with no `policy` gets.
pub const DEFAULT_POLICY: &str = "default";

/// How a request is assembled beyond its own fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Role of the context message (evidence, memory, state): user or system.
    pub context_role: Role,
    /// Default priority per block kind, in [`BlockKind::ALL`] order (1 = highest).
    pub priorities: [u32; 6],
    /// Whether conversation turns that do not fit are compacted into a
    /// summary before they are dropped (compact before drop).
    pub compact_turns: bool,
    /// The conversation window's marks, in percent of the input budget:
    /// once turns must go, the conversation is cut in steps of
    /// `window_high_percent - window_low_percent` of the budget at
    /// positions that do not move as the session grows (see
    /// [`Window`]), and the kept turns never pass
    /// `window_high_percent`. Equal marks: no window (cut wherever the room
    /// ends).
    pub window_low_percent: u32,
    /// See `window_low_percent`.
    pub window_high_percent: u32,
    /// For a model counted with its own folder: text in the request's
    /// items and query that spells one of the model's special tokens
    /// (`<|im_end|>`) is broken with a word joiner (U+2060) after its first
    /// character before anything is counted, so the engine reads it as
    /// text, not as the token. Off: such text is counted as the token the
    /// engine will read, with a SPECIAL_TOKEN_TEXT warning. The static
    /// prefix (the operator's own) is never rewritten.
    pub neutralize_special_tokens: bool,
    /// Whether old tool results may be cleared when the conversation does
    /// not fit, before any turn is summarized or dropped (see
    /// `lighten`).
    pub clear_tool_results: bool,
    /// The newest tool results, never cleared.
    pub keep_recent_tool_results: u32,
    /// Least tokens cleared at once (the anchors' spacing); 0: the window's
    /// step (`window_high_percent - window_low_percent` of the budget).
    pub clear_at_least_tokens: u32,
    /// Tools whose results are never cleared.
    pub exclude_tools: Vec<String>,
    /// Whether a closed tool cycle's thinking may be dropped (all of a
    /// turn's at once) when the conversation does not fit, with the
    /// results cleared at the same anchor.
    pub drop_closed_thinking: bool,
}

/// The default `window_low_percent`.
pub const DEFAULT_WINDOW_LOW_PERCENT: u32 = 70;
/// The default `window_high_percent`.
pub const DEFAULT_WINDOW_HIGH_PERCENT: u32 = 100;
/// The default `keep_recent_tool_results`. Anthropic's context editing
/// keeps 3 tool uses by default; here clearing only ever happens when the
/// conversation does not fit, and every result kept whole is one more step
/// of the conversation rewritten when the next one is cleared: with 3, an
/// agent session at an 8k budget keeps 40% of each prompt a byte-identical
/// prefix of the one before, less than the window alone (60%); with 1,
/// 66% (`examples/session_window`, docs/assembly.md).
pub const DEFAULT_KEEP_RECENT_TOOL_RESULTS: u32 = 1;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            context_role: Role::User,
            priorities: BlockKind::ALL.map(BlockKind::default_priority),
            compact_turns: true,
            window_low_percent: DEFAULT_WINDOW_LOW_PERCENT,
            window_high_percent: DEFAULT_WINDOW_HIGH_PERCENT,
            neutralize_special_tokens: false,
            clear_tool_results: true,
            keep_recent_tool_results: DEFAULT_KEEP_RECENT_TOOL_RESULTS,
            clear_at_least_tokens: 0,
            exclude_tools: Vec::new(),
            drop_closed_thinking: true,
        }
    }
}

impl Policy {
    /// The default priority of blocks of `kind`.
    pub fn priority(&self, kind: BlockKind) -> u32 {
        let i = BlockKind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
        self.priorities[i]
    }

    /// The conversation window for an input budget of `budget` tokens.
    pub fn window(&self, budget: u32) -> Window {
        let of = |percent: u32| saturating_u32(u64::from(budget) * u64::from(percent.min(100)) / 100);
        let high = self.window_high_percent.min(100);
        let low = self.window_low_percent.min(high);
        Window {
            step: of(high - low),
            high: if high == 100 { u32::MAX } else { of(high) },
        }
    }

    /// Least tokens lightening clears at once under an input budget of
    /// `budget` tokens: `clear_at_least_tokens`, or the window's step.
    pub fn clear_at_least(&self, budget: u32) -> u32 {
        if self.clear_at_least_tokens > 0 {
            self.clear_at_least_tokens
        } else {
            self.window(budget).step
        }
    }

    /// The priority of `block`: its own, or (0) the default for its kind.
    pub fn priority_of(&self, block: &Block) -> u32 {
        if block.priority == 0 {
            self.priority(block.kind)
        } else {
            block.priority
        }
    }
}

/// What requests resolve against: models and named policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Catalog {
    /// The model table.
    pub models: ModelTable,
    /// Policies by name; always holds [`DEFAULT_POLICY`].
    pub policies: BTreeMap<String, Arc<Policy>>,
    /// Configured prefix families (metric labels; others count as `other`).
    pub families: Vec<String>,
    /// Conversation compaction defaults (`[compaction]`).
    pub compaction: CompactionSettings,
}

impl Catalog {
    /// A catalog of `models` and `policies`; a missing `default` policy is
    /// added with the built-in defaults.
    pub fn new(models: ModelTable, mut policies: BTreeMap<String, Arc<Policy>>) -> Self {
        policies
            .entry(DEFAULT_POLICY.to_owned())
            .or_insert_with(|| Arc::new(Policy::default()));
        Catalog {
            models,
            policies,
            families: Vec::new(),
            compaction: CompactionSettings::default(),
        }
    }

    /// The metric label of a request's prefix family: the name if
    /// configured, else `other`; `None` when the request names none.
    pub fn family_label(&self, family: &str) -> Option<&str> {
        if family.is_empty() {
            return None;
        }
        Some(
            self.families
                .iter()
                .find(|f| *f == family)
                .map_or(families::OTHER, String::as_str),
        )
    }

    /// The policy a request names (empty = default).
    pub fn policy(&self, name: &str) -> Option<&Arc<Policy>> {
        let name = if name.is_empty() { DEFAULT_POLICY } else { name };
        self.policies.get(name)
    }
}
