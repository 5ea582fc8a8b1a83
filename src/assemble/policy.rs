//! Named policies and the catalog (model table plus policies) that a request
//! resolves against. The catalog is swapped whole on reload.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::compact::CompactionSettings;
use crate::prompt::{Block, BlockKind};
use crate::prompt_cache::families;
use crate::tokens::ModelTable;
use crate::vocab::Role;

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
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            context_role: Role::User,
            priorities: BlockKind::ALL.map(BlockKind::default_priority),
            compact_turns: true,
        }
    }
}

impl Policy {
    /// The default priority of blocks of `kind`.
    pub fn priority(&self, kind: BlockKind) -> u32 {
        let i = BlockKind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
        self.priorities[i]
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
