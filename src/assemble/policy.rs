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
    /// [`Window`](super::allocate::Window)), and the kept turns never pass
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
}

/// The default `window_low_percent`.
pub const DEFAULT_WINDOW_LOW_PERCENT: u32 = 70;
/// The default `window_high_percent`.
pub const DEFAULT_WINDOW_HIGH_PERCENT: u32 = 100;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            context_role: Role::User,
            priorities: BlockKind::ALL.map(BlockKind::default_priority),
            compact_turns: true,
            window_low_percent: DEFAULT_WINDOW_LOW_PERCENT,
            window_high_percent: DEFAULT_WINDOW_HIGH_PERCENT,
            neutralize_special_tokens: false,
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
