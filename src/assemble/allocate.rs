//! The budget allocator: reserve what may never be cut, then fill
//! the cuttable blocks in priority order, compacting before dropping.
//!
//! It works on measured *units* (an item, or a turn with its tool results) and
//! knows nothing of text: costs come in, forms come out. Costs are exact
//! tokens, so `used` is the exact total of the prompt that will be rendered.

mod conversation;
mod fill;
mod lightening;
mod plan;

use crate::prompt::BlockKind;
use conversation::Conversation;
use lightening::{TurnLights, room_of_turns};

pub use plan::{
    Allocation, BlockFate, BlockPlan, Carrier, DropReason, Form, Full, Light, Overflow, Shrink, TurnSummary,
    UnitPlan, Window,
};

/// Most verbatim turns given up to make room for the summary of the turns
/// that did not fit: each try re-renders and recounts the summary.
const MAX_EVICTIONS: usize = 8;

/// Sorts positions by descending score, ties in original order: the one
/// ranking used both to decide what survives and where it is placed.
pub fn rank_by_score(mut positions: Vec<usize>, score: impl Fn(usize) -> f64) -> Vec<usize> {
    positions.sort_by(|&x, &y| score(y).total_cmp(&score(x)).then(x.cmp(&y)));
    positions
}

/// Allocates `budget` tokens. `base` is the cost of what is always present
/// (static prefix, query, reply priming); `overheads` is the cost of opening
/// each shared message, indexed by slot index (context, summary).
///
/// With `lighten` (the least tokens lightened at once), a conversation that
/// does not fit is first *lightened* ([`Shrink::light`]: old tool results
/// cleared, closed cycles' thinking dropped) before any turn is summarized
/// or dropped. Lightening goes oldest first up to an anchor: the anchors
/// are the turns where the tokens lightening could save (were nothing
/// protected) since the previous anchor reach `lighten`, counted from the
/// first turn, so they depend only on the turns before them and appending
/// turns moves none. The least anchor whose lightening lets the whole
/// conversation fit the room the turns had is taken. A session's next
/// requests lighten the same turns until the conversation outgrows its room
/// again, and then lighten at least `lighten` tokens more at once. When
/// even the conversation lightened whole (were nothing protected) does not
/// fit, the window cuts it first, at its anchors on those bare costs, and
/// the turns after the cut are lightened as above.
pub fn allocate(
    blocks: &[BlockPlan],
    base: u64,
    overheads: [u32; 2],
    budget: u32,
    window: Window,
    lighten: Option<u32>,
    shrink: &mut dyn Shrink,
) -> Result<Allocation, Overflow> {
    let limits = Limits {
        base,
        overheads,
        budget,
        window,
    };
    let Some(at_least) = lighten else {
        return fill_all(blocks, &limits, None, true, shrink);
    };
    // First without summarizing (the costly part): what the turns have
    // room for, and whether they fit whole.
    let first = fill_all(blocks, &limits, None, false, shrink)?;
    let seq = Conversation::sequence(blocks);
    if seq.iter().all(|&(b, u)| first.forms[b][u].is_kept()) {
        return Ok(first);
    }
    let room = room_of_turns(&first, &seq, &limits);
    // What lightening offers each turn, and where its anchors fall.
    let turns = TurnLights::offered(blocks, seq, shrink);
    let ends = turns.anchors(at_least);
    if turns.none_offered() {
        return fill_all(blocks, &limits, None, true, shrink);
    }
    // The window's cut on the bare conversation, then the least anchor
    // after it that lets the turns fit their room.
    let bare = turns.bare();
    let cut = turns.cut(&bare, room, window);
    let end = turns.end(&ends, cut, room);
    let lightened = turns.lightened(cut, end);
    if lightened.is_empty() && cut == 0 {
        return fill_all(blocks, &limits, None, true, shrink);
    }
    // The fill with those turns at their light cost, the window decided.
    let lighter = turns.lighter(&lightened);
    let decided = turns.decided(&bare, cut);
    let mut out = fill_all(&lighter, &limits, Some(decided), true, shrink)?;
    turns.mark_lightened(&mut out, &lightened);
    Ok(out)
}

/// [`allocate`] without lightening: reserve, fill by priority, cut the
/// conversation at the window's anchor, summarize what did not fit. With
/// `decided`, the window works on its anchors and its cut turns are cut
/// whatever the room. Without `summarize`, turns that do not fit are
/// dropped, not summarized.
fn fill_all(
    blocks: &[BlockPlan],
    limits: &Limits,
    decided: Option<Decided<'_>>,
    summarize: bool,
    shrink: &mut dyn Shrink,
) -> Result<Allocation, Overflow> {
    let mut st = State::new(blocks, limits);
    let (anchor_costs, forced) = decided.map(|d| (d.anchor_costs, d.cut)).unzip();
    st.force_cut(blocks, forced.unwrap_or_default());
    let reserved = st.reserve(blocks)?;
    for bi in fill_order(blocks) {
        st.fill(bi, &blocks[bi], shrink);
    }
    let conversation = Conversation::of(blocks, limits.window, anchor_costs);
    let window_given_up = st.cut_at_anchor(blocks, &conversation, limits.window);
    let summary = if summarize {
        st.summarize_turns(blocks, &conversation, shrink)
    } else {
        None
    };
    Ok(st.into_allocation(summary, window_given_up, reserved))
}

/// The order the cuttable blocks are filled in: priority first; among
/// equal priorities newer turn blocks first, so the oldest turns are the
/// ones cut.
fn fill_order(blocks: &[BlockPlan]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].cuttable).collect();
    order.sort_by_key(|&i| (blocks[i].priority, blocks[i].chrono.map(std::cmp::Reverse), i));
    order
}

/// The order block `b` is filled in when it does not fit whole, of its
/// `valid` units: turns newest first, a summary's units as given, ranked
/// blocks by score. Trying the whole block measures units in this order
/// too, so what it counts before it finds the block too large is what the
/// fill keeps first, not units the fill then drops unread.
fn unit_order(b: &BlockPlan, valid: &[usize]) -> Vec<usize> {
    match b.kind {
        BlockKind::RecentTurns | BlockKind::History => valid.iter().rev().copied().collect(),
        BlockKind::Summary => valid.to_vec(),
        BlockKind::Evidence | BlockKind::Memory | BlockKind::State => {
            rank_by_score(valid.to_vec(), |ui| b.units[ui].score)
        }
    }
}

/// What every fill is within: the always-present cost, the shared messages'
/// overheads, the budget and the window.
#[derive(Debug, Clone, Copy)]
struct Limits {
    base: u64,
    overheads: [u32; 2],
    budget: u32,
    window: Window,
}

/// What lightening decided for the window: the costs its anchors are
/// placed on (per turn unit, oldest first), and the turn units cut.
#[derive(Debug, Clone, Copy)]
struct Decided<'a> {
    anchor_costs: &'a [u64],
    cut: &'a [(usize, usize)],
}

/// One fill's decisions so far, per block and unit, and the tokens used.
struct State {
    forms: Vec<Vec<Form>>,
    costs: Vec<Vec<u32>>,
    fulls: Vec<Vec<Full>>,
    fates: Vec<BlockFate>,
    used: u64,
    open: [bool; 2],
    overheads: [u64; 2],
    budget: u64,
    /// Chronological position of the newest turn block that lost turns.
    cut_chrono: Option<usize>,
    /// Per block, per unit: cut whatever the room (see [`fill_all`]).
    forced: Vec<Vec<bool>>,
}

impl State {
    /// Nothing kept yet: every unit dropped for want of room (or as
    /// invalid), lazy units' full costs unknown, only `base` used.
    fn new(blocks: &[BlockPlan], limits: &Limits) -> State {
        State {
            forms: blocks
                .iter()
                .map(|b| {
                    b.units
                        .iter()
                        .map(|u| Form::Dropped(u.invalid.unwrap_or(DropReason::NoRoom)))
                        .collect()
                })
                .collect(),
            costs: blocks.iter().map(|b| vec![0; b.units.len()]).collect(),
            fulls: blocks
                .iter()
                .map(|b| {
                    b.units
                        .iter()
                        .map(|u| {
                            if u.lazy {
                                Full::AtLeast(0)
                            } else {
                                Full::Exact(u.full)
                            }
                        })
                        .collect()
                })
                .collect(),
            fates: vec![BlockFate::Whole; blocks.len()],
            used: limits.base,
            open: [false; 2],
            overheads: limits.overheads.map(u64::from),
            budget: u64::from(limits.budget),
            cut_chrono: None,
            forced: blocks.iter().map(|b| vec![false; b.units.len()]).collect(),
        }
    }

    /// Cuts the turn units `cut` whatever the room, but those that must
    /// stay (reserved).
    fn force_cut(&mut self, blocks: &[BlockPlan], cut: &[(usize, usize)]) {
        for &(b, u) in cut {
            if !blocks[b].units[u].reserved_in(&blocks[b]) {
                self.forced[b][u] = true;
                self.forms[b][u] = Form::Dropped(DropReason::OlderThanCut);
                self.fates[b] = BlockFate::Cut;
            }
        }
    }

    /// Keeps what may never be cut: a non-cuttable block's units and pinned
    /// ones. Returns the tokens each block reserved, or the overflow when
    /// they pass the budget.
    fn reserve(&mut self, blocks: &[BlockPlan]) -> Result<Vec<u64>, Overflow> {
        let mut reserved = vec![0; blocks.len()];
        for (bi, b) in blocks.iter().enumerate() {
            if !b.cuttable {
                self.fates[bi] = BlockFate::Reserved;
            }
            let before = self.used;
            for (ui, u) in b.units.iter().enumerate().filter(|(_, u)| u.reserved_in(b)) {
                self.keep(bi, ui, b.slot, Form::Full, u.full);
            }
            reserved[bi] = self.used - before;
        }
        if self.used > self.budget {
            return Err(Overflow {
                non_cuttable: self.used,
                reserved,
            });
        }
        Ok(reserved)
    }

    /// The allocation the fill decided.
    fn into_allocation(
        self,
        summary: Option<TurnSummary>,
        window_given_up: Vec<u64>,
        reserved: Vec<u64>,
    ) -> Allocation {
        Allocation {
            forms: self.forms,
            costs: self.costs,
            fulls: self.fulls,
            fates: self.fates,
            summary,
            window_given_up,
            used: self.used,
            reserved,
        }
    }

    /// Extra tokens to open `slot` if it is not open yet.
    fn open_cost(&self, slot: Carrier) -> u64 {
        match slot.index() {
            Some(i) if !self.open[i] => self.overheads[i],
            _ => 0,
        }
    }

    /// Keeps a unit in `form`, paying for opening its slot if it is the first.
    fn keep(&mut self, bi: usize, ui: usize, slot: Carrier, form: Form, cost: u32) {
        self.used += self.open_cost(slot) + u64::from(cost);
        if let Some(i) = slot.index() {
            self.open[i] = true;
        }
        self.forms[bi][ui] = form;
        self.costs[bi][ui] = cost;
    }

    fn room(&self) -> u64 {
        self.budget.saturating_sub(self.used)
    }
}

#[cfg(test)]
mod tests;
