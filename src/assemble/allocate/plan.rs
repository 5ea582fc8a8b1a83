//! What the allocator takes and gives: the blocks and units it is offered,
//! the forms and fates it decides, the window it keeps, and the [`Shrink`]
//! seam through which it measures cheaper forms on demand.

use crate::prompt::BlockKind;

/// Which message carries a block's units, which decides message overhead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// The shared context message (STATE, EVIDENCE, MEMORY): one overhead.
    Context,
    /// The summary message: one overhead.
    Summary,
    /// Each unit is its own message(s); overhead is inside the unit's cost.
    Own,
}

impl Carrier {
    /// Where blocks of `kind` render.
    pub fn of(kind: BlockKind) -> Carrier {
        match kind {
            BlockKind::Summary => Carrier::Summary,
            BlockKind::RecentTurns | BlockKind::History => Carrier::Own,
            BlockKind::State | BlockKind::Evidence | BlockKind::Memory => Carrier::Context,
        }
    }

    pub(super) fn index(self) -> Option<usize> {
        match self {
            Carrier::Context => Some(0),
            Carrier::Summary => Some(1),
            Carrier::Own => None,
        }
    }
}

/// A block as the allocator sees it.
#[derive(Debug, Clone)]
pub struct BlockPlan {
    /// Chooses the compaction rule.
    pub kind: BlockKind,
    /// Effective priority (1 = highest).
    pub priority: u32,
    /// Whether the block may be cut.
    pub cuttable: bool,
    /// Floor for a cut block.
    pub min_tokens: u32,
    /// Ceiling on kept tokens.
    pub max_tokens: Option<u32>,
    /// Where it renders.
    pub slot: Carrier,
    /// Position in the conversation (turn blocks): older blocks come first.
    pub chrono: Option<usize>,
    /// Candidate units, in block order.
    pub units: Vec<UnitPlan>,
}

/// One measured unit.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitPlan {
    /// Tokens of the full form (0 and unused when `lazy`).
    pub full: u32,
    /// Not measured yet: the allocator asks [`Shrink::measure`] for its full
    /// cost against the room it is offered, so a unit that cannot fit is
    /// counted only as far as the room (a context unit of a cuttable block;
    /// never a turn, whose cost places the window's anchors).
    pub lazy: bool,
    /// Relevance (EVIDENCE, MEMORY, STATE order).
    pub score: f64,
    /// Whether a compact form exists.
    pub has_compact: bool,
    /// Set when the unit can never be kept (broken tool-call pairing).
    pub invalid: Option<DropReason>,
    /// Reserved whatever its block: a turn unit with a member in a
    /// non-cuttable block (a call there, its result in a newer block).
    pub pinned: bool,
}

impl UnitPlan {
    pub(super) fn reserved_in(&self, block: &BlockPlan) -> bool {
        self.invalid.is_none() && (self.pinned || !block.cuttable)
    }
}

/// Why a unit was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// No form of it fit the room left.
    NoRoom,
    /// It would have passed the block's `max_tokens`.
    BlockLimit,
    /// Its block was cut below `min_tokens` and dropped whole.
    BelowMinTokens,
    /// Newer turns were cut, so older ones would leave a gap.
    ChronologyGap,
    /// A tool result whose call is not in the block.
    OrphanToolResult,
    /// An assistant tool call whose results are not all in the block.
    IncompleteToolCall,
    /// An older turn dropped because a newer one did not fit.
    OlderThanCut,
    /// A turn that did not fit, covered by the compaction summary instead.
    Summarized,
}

/// The form a unit is kept in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Its content.
    Full,
    /// Its compact form.
    Compact,
    /// Its content cut after `bytes` bytes, at a sentence end.
    Truncated {
        /// Length of the kept prefix.
        bytes: usize,
    },
    /// A turn unit lightened: its tool results cleared and its closed
    /// cycle's thinking dropped, as far as each member may be
    /// ([`Shrink::light`]).
    Light,
    /// Not kept.
    Dropped(DropReason),
}

impl Form {
    /// Whether the unit is in the prompt.
    pub fn is_kept(self) -> bool {
        !matches!(self, Form::Dropped(_))
    }
}

/// What is known of a unit's full cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Counted to the end.
    Exact(u32),
    /// Counted only until it passed what it was offered: at least this
    /// (`AtLeast(0)`: not measured yet).
    AtLeast(u32),
}

impl Full {
    /// The exact cost, or the lower bound.
    pub fn tokens(self) -> u32 {
        match self {
            Full::Exact(n) | Full::AtLeast(n) => n,
        }
    }
}

/// What the allocator decided for a whole block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFate {
    /// Non-cuttable: reserved in full.
    Reserved,
    /// Fit whole.
    Whole,
    /// Compacted to fit the room or its ceiling.
    Cut,
    /// Cut below `min_tokens`: dropped whole.
    BelowMin,
    /// Dropped because newer turns were cut.
    Gap,
}

/// The allocator's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Per block, per unit: the form kept.
    pub forms: Vec<Vec<Form>>,
    /// Per block, per unit: tokens of the kept form (0 when dropped).
    pub costs: Vec<Vec<u32>>,
    /// Per block, per unit: the full form's cost as far as it was measured
    /// (exact but for lazy units that could not fit).
    pub fulls: Vec<Vec<Full>>,
    /// Per block.
    pub fates: Vec<BlockFate>,
    /// The summary of the oldest turns that did not fit, when one is kept.
    pub summary: Option<TurnSummary>,
    /// Per block: tokens of turns the room had space for but the
    /// conversation window gave up to cut at an anchor (room left unused so
    /// that the next requests of the session keep the same bytes).
    pub window_given_up: Vec<u64>,
    /// Exact tokens of the whole prompt.
    pub used: u64,
    /// Per block: tokens of its units that may not be cut (a non-cuttable
    /// block's, pinned ones), with the opening of the message they are the
    /// first to open. With the fixed cost these add up to what may never be
    /// cut.
    pub reserved: Vec<u64>,
}

/// The conversation window: when turns must go, the conversation is cut
/// only at *anchors*. The first turn is one, and each next anchor is the
/// first turn at least `step` tokens (of full cost) after the one before. An
/// anchor depends only on the turns before it, so appending turns moves no
/// anchor: the cut, and the summary and turns after it, stay byte-identical
/// from one request of a session to the next until the conversation has
/// outgrown its room, and then move by at least a whole step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// Least tokens between anchors; 0 cuts at any turn (no window).
    pub step: u32,
    /// Most tokens the kept turns may hold (`u32::MAX`: no ceiling).
    pub high: u32,
}

impl Window {
    /// No window: turns are cut wherever the room ends.
    pub const OFF: Window = Window {
        step: 0,
        high: u32::MAX,
    };

    /// Whether each turn of a conversation whose units cost `fulls` (oldest
    /// first) is an anchor. Every turn is one when there is no window.
    pub(super) fn anchors(self, fulls: impl Iterator<Item = u64>) -> Vec<bool> {
        let step = u64::from(self.step);
        // Tokens since the last anchor; the first turn is one.
        let mut since = step;
        fulls
            .map(|full| {
                let anchor = since >= step;
                if anchor {
                    since = 0;
                }
                since += full;
                anchor
            })
            .collect()
    }
}

/// A turn unit's lightened form, as far as it is known before deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Light {
    /// Its tokens lightened as far as its members may be now (the newest
    /// results and the open cycle's thinking kept): its full cost when
    /// nothing of it may be lightened yet.
    pub cost: u32,
    /// Tokens lightening would save were nothing protected: it places the
    /// anchors, which must not move as the session grows (a result leaves
    /// the newest ones, a user turn closes a cycle).
    pub saving: u32,
}

/// Turns that did not fit, compacted into one summary unit instead of
/// dropped (compact before drop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSummary {
    /// The turn units covered, (block, unit), oldest first.
    pub units: Vec<(usize, usize)>,
    /// Tokens of the summary unit in the summary message.
    pub cost: u32,
    /// Tokens the covered turns would have cost in full.
    pub covered: u64,
    /// The turns the next step of the window would add to it, up to the
    /// next anchor (none when no turn follows): a session's next request
    /// most likely sends the summary of `units` and these, which may so be
    /// counted ahead of it.
    pub ahead: Vec<(usize, usize)>,
}

/// Non-cuttable content alone exceeds the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overflow {
    /// Tokens of everything that may not be cut.
    pub non_cuttable: u64,
    /// Per block: tokens of its units that may not be cut, with the opening
    /// of the message they open (see [`Allocation::reserved`]).
    pub reserved: Vec<u64>,
}

/// Measures the cheaper forms of a unit on demand, so that a warm request that
/// fits never pays for them.
pub trait Shrink {
    /// Tokens of the full form of lazy unit `unit` of block `block` when at
    /// most `limit`, else `None` (counting stops past the limit).
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32>;
    /// Tokens of unit `unit` of block `block` in compact form when at most
    /// `limit`, else `None` (counting stops past the limit).
    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32>;
    /// The longest sentence-boundary prefix of the unit whose cost is at most
    /// `limit`: (bytes kept, cost). `None` if not even one sentence fits.
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)>;
    /// A turn unit's lightened form: `None` when lightening cannot change
    /// it, whatever protects its members.
    fn light(&mut self, block: usize, unit: usize) -> Option<Light>;
    /// Tokens of one summary unit covering the turn units `units`
    /// ((block, unit), oldest first) in the summary message; `None` when
    /// turns are not compacted (the policy says drop).
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32>;
}
