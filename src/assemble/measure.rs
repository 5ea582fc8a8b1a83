//! A request's blocks measured: the candidates the principal may see, the
//! units they are grouped into (a turn with its tool results is one), what
//! lightening may do to each turn, and the texts and keys made of them on
//! first use. What the pipeline builds, and what the allocator's shrinker,
//! the layout and the report read.

use std::cell::OnceCell;

use super::allocate::DropReason;
use super::counting::Counter;
use super::render::{self, FormAttr};
use crate::prompt::{AssembleRequest, BlockKind, Item};
use crate::tokens::cache;

/// One unit of a block: a context item, or a turn with its tool results. A
/// unit's members are (block, candidate) pairs: a tool call made at the end of
/// HISTORY and answered at the start of RECENT_TURNS is one unit, owned by the
/// newer block.
#[derive(Debug, Clone)]
pub(super) struct Unit {
    pub members: Vec<(usize, usize)>,
    pub invalid: Option<DropReason>,
}

/// One block after filtering and measuring (`measured[i]` is `blocks[i]`).
pub(super) struct Measured {
    /// Positions in `block.items` of the items the principal may see.
    pub candidates: Vec<usize>,
    /// Positions of the items filtered out.
    pub filtered: Vec<usize>,
    /// The block's units, in order.
    pub units: Vec<Unit>,
    /// Full-form text of each candidate (context kinds only), rendered
    /// when first needed: a unit offered room it cannot fit (proved from
    /// its content) is never copied.
    rendered: Vec<OnceCell<String>>,
    /// Count-cache key of each candidate's content (turn kinds only), hashed
    /// once: its count and the summary keys of the runs covering it use it.
    content_keys: Vec<OnceCell<cache::Key>>,
    /// What lightening may do to each candidate (turn kinds only).
    pub lights: Vec<MemberLight>,
    /// Each candidate's tokens (turn kinds only): its message, and its
    /// thinking where the provider reads it.
    pub costs: Vec<MemberCost>,
    /// Each candidate's message tokens once cleared, when clearing saves
    /// tokens (`None`: it is kept whole), decided when the allocator first
    /// asks what lightening saves (turn kinds only).
    cleared: Vec<OnceCell<Option<u32>>>,
}

/// A turn's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct MemberCost {
    /// Its message (role, content, overhead).
    pub message: u32,
    /// Its thinking, where the provider reads it (else 0).
    pub thinking: u32,
}

/// What takes a cleared tool result's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Clear {
    /// [`placeholder`](super::lighten::placeholder).
    Placeholder,
    /// The item's compact form (the caller's own shorter text).
    Compact,
}

/// What lightening may do to one turn, before protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct MemberLight {
    /// How its content is cleared, for a tool result the policy may clear.
    pub clear: Option<Clear>,
    /// Whether it carries thinking that may be dropped.
    pub thinking: bool,
    /// A result among the newest `keep_recent_tool_results`: never cleared.
    pub recent: bool,
    /// A turn of the open tool cycle (no user turn after it): its thinking
    /// is never dropped.
    pub open_cycle: bool,
}

impl MemberLight {
    /// How its content is cleared when its unit is lightened.
    pub fn cleared(self) -> Option<Clear> {
        self.clear.filter(|_| !self.recent)
    }

    /// Whether its thinking is dropped when its unit is lightened.
    pub fn drops_thinking(self) -> bool {
        self.thinking && !self.open_cycle
    }
}

impl Measured {
    /// A block whose visible items are `candidates` (positions in its
    /// items), grouped into `units`; `turns` for a conversation block (its
    /// contents are keyed; a context block's units are rendered).
    pub fn new(candidates: Vec<usize>, filtered: Vec<usize>, units: Vec<Unit>, turns: bool) -> Self {
        let (rendered, content_keys) = (cells(&candidates, !turns), cells(&candidates, turns));
        let cleared = cells(&candidates, turns);
        Measured {
            candidates,
            filtered,
            units,
            rendered,
            content_keys,
            lights: Vec::new(),
            costs: Vec::new(),
            cleared,
        }
    }

    /// Candidate `ci`'s message tokens once cleared, decided by `decide` on
    /// first use (`None`: clearing it saves nothing, it is kept whole).
    pub fn cleared_cost(&self, ci: usize, decide: impl FnOnce() -> Option<u32>) -> Option<u32> {
        *self.cleared.get(ci)?.get_or_init(decide)
    }

    /// Whether candidate `ci` is cleared when its unit is lightened: the
    /// policy may clear it, nothing protects it, and clearing saves tokens
    /// (known once the allocator asked).
    pub fn clears(&self, ci: usize) -> Option<Clear> {
        let clear = self.lights.get(ci)?.cleared()?;
        self.cleared.get(ci)?.get().copied().flatten().map(|_| clear)
    }

    /// The full-form unit of candidate `ci`, `item`, of a block of `kind`.
    pub fn unit(&self, kind: BlockKind, item: &Item, ci: usize) -> &str {
        self.rendered[ci].get_or_init(|| render::unit(kind, item, &item.content, FormAttr::Full))
    }
}

/// One empty cell per candidate, or none when `used` is false.
fn cells<T>(candidates: &[usize], used: bool) -> Vec<OnceCell<T>> {
    if used {
        candidates.iter().map(|_| OnceCell::new()).collect()
    } else {
        Vec::new()
    }
}

/// The request's blocks after filtering and grouping: what the layout and
/// the report read (plain values, not the pipeline).
#[derive(Clone, Copy)]
pub(super) struct Measurement<'a> {
    /// The request.
    pub req: &'a AssembleRequest,
    /// `blocks[i]` measures `req.blocks[i]`.
    pub blocks: &'a [Measured],
}

impl<'a> Measurement<'a> {
    /// The item at candidate `ci` of block `bi`.
    pub fn item(&self, bi: usize, ci: usize) -> &'a Item {
        &self.req.blocks[bi].items[self.blocks[bi].candidates[ci]]
    }

    /// The count-cache key (under `counter`'s tokenizer) of the content of
    /// turn candidate `ci` of block `bi`, found on first use only.
    pub fn content_key(&self, counter: &Counter<'_>, bi: usize, ci: usize) -> &'a cache::Key {
        self.blocks[bi].content_keys[ci].get_or_init(|| counter.key(&self.item(bi, ci).content))
    }
}
