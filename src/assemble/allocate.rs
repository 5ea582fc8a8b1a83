//! The budget allocator: reserve what may never be cut, then fill
//! the cuttable blocks in priority order, compacting before dropping.
//!
//! It works on measured *units* (an item, or a turn with its tool results) and
//! knows nothing of text: costs come in, forms come out. Costs are exact
//! tokens, so `used` is the exact total of the prompt that will be rendered.

mod plan;

use crate::prompt::BlockKind;
use crate::vocab::saturating_u32;

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
/// fit, the window cuts it first, at its anchors on those bare costs (see
/// below), and the turns after the cut are lightened as above.
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
    let plain = |shrink: &mut dyn Shrink| fill_all(blocks, &limits, None, true, shrink);
    // The room the turns had: what they kept and what was left.
    let kept: u64 = seq
        .iter()
        .map(|&(b, u)| u64::from(first.costs[b][u]))
        .sum::<u64>()
        + first.summary.as_ref().map_or(0, |s| u64::from(s.cost));
    let room = (kept + u64::from(budget).saturating_sub(first.used)).min(u64::from(window.high));
    let lights: Vec<Option<Light>> = seq
        .iter()
        .map(|&(b, u)| {
            let unit = &blocks[b].units[u];
            if unit.reserved_in(&blocks[b]) {
                None
            } else {
                shrink.light(b, u)
            }
        })
        .collect();
    let full = |i: usize| u64::from(blocks[seq[i].0].units[seq[i].1].full);
    let light = |i: usize| lights[i].map_or(full(i), |l| u64::from(l.cost).min(full(i)));
    // ends[k]: the conversation is lightened before seq[ends[k]], the k-th
    // anchor.
    let mut ends = Vec::new();
    let mut since = 0u64;
    for (i, l) in lights.iter().enumerate() {
        since += l.map_or(0, |l| u64::from(l.saving));
        if since > 0 && since >= u64::from(at_least) {
            ends.push(i + 1);
            since = 0;
        }
    }
    if lights.iter().all(Option::is_none) {
        return plain(shrink);
    }
    // What lightening every turn it may would leave of each, were nothing
    // protected: it depends on the turns alone.
    let bare: Vec<u64> = (0..seq.len())
        .map(|i| full(i) - lights[i].map_or(0, |l| u64::from(l.saving)).min(full(i)))
        .collect();
    // The window's cut, decided on the bare conversation: it depends on
    // the turns alone, so it only moves forward as the session grows, by a
    // whole step, and a result leaving the newest or a user turn closing a
    // cycle never pulls it back. When what protection keeps whole (the
    // newest results, an open cycle's thinking) does not fit beside the
    // rest, the fill cuts further, and a later request may not need to.
    let window_anchor = window.anchors(bare.iter().copied());

    // A turn that must stay (reserved) stops the cut, as it stops the
    // window's; a turn block with a floor leaves the cut to the fill, which
    // keeps the floor.
    let must_stay = seq
        .iter()
        .position(|&(b, u)| blocks[b].units[u].reserved_in(&blocks[b]))
        .unwrap_or(seq.len());
    let floors = seq.iter().any(|&(b, _)| blocks[b].min_tokens > 0);
    let cut = if floors || bare.iter().sum::<u64>() <= room {
        0
    } else {
        let mut first = seq.len();
        let mut suffix = 0u64;
        while first > 0 && suffix + bare[first - 1] <= room {
            first -= 1;
            suffix += bare[first];
        }
        (first..seq.len())
            .find(|&j| window_anchor[j])
            .unwrap_or(first)
            .min(seq.len().saturating_sub(1))
            .min(must_stay)
    };
    // Of the turns after the cut, the least anchor that lets them fit as
    // they will be sent (all that can be lightened when none does).
    let kept_total = |end: usize| -> u64 {
        (cut..seq.len())
            .map(|i| if i < end { light(i) } else { full(i) })
            .sum()
    };
    let end = ends
        .iter()
        .copied()
        .filter(|&e| e > cut)
        .find(|&e| kept_total(e) <= room)
        .unwrap_or(seq.len());
    let lightened: Vec<usize> = (cut..end).filter(|&i| light(i) < full(i)).collect();
    if lightened.is_empty() && cut == 0 {
        return plain(shrink);
    }
    let mut lighter = blocks.to_vec();
    for &i in &lightened {
        let (b, u) = seq[i];
        lighter[b].units[u].full = saturating_u32(light(i));
    }
    let decided = Decided {
        anchor_costs: &bare,
        cut: &seq[..cut],
    };
    let mut out = fill_all(&lighter, &limits, Some(decided), true, shrink)?;
    for &i in &lightened {
        let (b, u) = seq[i];
        if out.forms[b][u] == Form::Full {
            out.forms[b][u] = Form::Light;
        }
        out.fulls[b][u] = Full::Exact(blocks[b].units[u].full);
    }
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
    let Limits {
        base,
        overheads,
        budget,
        window,
    } = *limits;
    let mut st = State {
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
        used: base,
        open: [false; 2],
        overheads: overheads.map(u64::from),
        budget: u64::from(budget),
        cut_chrono: None,
        forced: blocks.iter().map(|b| vec![false; b.units.len()]).collect(),
    };
    let (anchor_costs, forced) = decided.map(|d| (d.anchor_costs, d.cut)).unzip();
    for &(b, u) in forced.unwrap_or_default() {
        if !blocks[b].units[u].reserved_in(&blocks[b]) {
            st.forced[b][u] = true;
            st.forms[b][u] = Form::Dropped(DropReason::OlderThanCut);
            st.fates[b] = BlockFate::Cut;
        }
    }

    let mut reserved = vec![0; blocks.len()];
    for (bi, b) in blocks.iter().enumerate() {
        if !b.cuttable {
            st.fates[bi] = BlockFate::Reserved;
        }
        let before = st.used;
        for (ui, u) in b.units.iter().enumerate().filter(|(_, u)| u.reserved_in(b)) {
            st.keep(bi, ui, b.slot, Form::Full, u.full);
        }
        reserved[bi] = st.used - before;
    }
    if st.used > st.budget {
        return Err(Overflow {
            non_cuttable: st.used,
            reserved,
        });
    }

    // Priority first; among equal priorities newer turn blocks first, so the
    // oldest turns are the ones cut.
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].cuttable).collect();
    order.sort_by_key(|&i| (blocks[i].priority, blocks[i].chrono.map(std::cmp::Reverse), i));
    for bi in order {
        st.fill(bi, &blocks[bi], shrink);
    }
    let conversation = Conversation::of(blocks, window, anchor_costs);
    let window_given_up = st.cut_at_anchor(blocks, &conversation, window);
    let summary = if summarize {
        st.summarize_turns(blocks, &conversation, shrink)
    } else {
        None
    };

    Ok(Allocation {
        forms: st.forms,
        costs: st.costs,
        fulls: st.fulls,
        fates: st.fates,
        summary,
        window_given_up,
        used: st.used,
        reserved,
    })
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

/// The conversation's turn units in chronological order, with its anchors.
struct Conversation {
    /// (block, unit) of every valid turn unit, oldest first.
    seq: Vec<(usize, usize)>,
    /// Whether `seq[i]` is an anchor of the window.
    anchor: Vec<bool>,
}

impl Conversation {
    /// (block, unit) of every valid turn unit, oldest first.
    fn sequence(blocks: &[BlockPlan]) -> Vec<(usize, usize)> {
        let mut chrono: Vec<usize> = (0..blocks.len())
            .filter(|&b| blocks[b].chrono.is_some())
            .collect();
        chrono.sort_by_key(|&b| blocks[b].chrono);
        chrono
            .iter()
            .flat_map(|&b| (0..blocks[b].units.len()).map(move |u| (b, u)))
            .filter(|&(b, u)| blocks[b].units[u].invalid.is_none())
            .collect()
    }

    fn of(blocks: &[BlockPlan], window: Window, costs: Option<&[u64]>) -> Conversation {
        let seq = Conversation::sequence(blocks);
        let anchor = match costs {
            Some(costs) => window.anchors(costs.iter().copied()),
            None => window.anchors(seq.iter().map(|&(b, u)| u64::from(blocks[b].units[u].full))),
        };
        Conversation { seq, anchor }
    }

    /// The first anchor at or after `i` (`seq.len()` when none).
    fn anchor_from(&self, i: usize) -> usize {
        (i..self.seq.len())
            .find(|&j| self.anchor[j])
            .unwrap_or(self.seq.len())
    }
}

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

    fn fill(&mut self, bi: usize, b: &BlockPlan, shrink: &mut dyn Shrink) {
        let valid: Vec<usize> = (0..b.units.len())
            .filter(|&ui| b.units[ui].invalid.is_none() && !b.units[ui].pinned && !self.forced[bi][ui])
            .collect();
        if valid.is_empty() {
            return;
        }
        if let (Some(c), Some(cut)) = (b.chrono, self.cut_chrono)
            && c < cut
        {
            self.fates[bi] = BlockFate::Gap;
            for &ui in &valid {
                self.forms[bi][ui] = Form::Dropped(DropReason::ChronologyGap);
            }
            return;
        }
        let ceiling = b.max_tokens.map_or(u64::MAX, u64::from);
        // The order the block is filled in when it does not fit whole:
        // turns newest first, a summary's units as given, ranked blocks by
        // score. Trying the whole block measures units in this order too,
        // so what it counts before it finds the block too large is what the
        // fill keeps first, not units the fill then drops unread.
        let order: Vec<usize> = match b.kind {
            BlockKind::RecentTurns | BlockKind::History => valid.iter().rev().copied().collect(),
            BlockKind::Summary => valid.clone(),
            BlockKind::Evidence | BlockKind::Memory | BlockKind::State => {
                let mut ranked = valid.clone();
                ranked.sort_by(|&x, &y| b.units[y].score.total_cmp(&b.units[x].score).then(x.cmp(&y)));
                ranked
            }
        };
        if let Some(whole) = self.whole(bi, &order, b.slot, ceiling, shrink) {
            for (&ui, cost) in order.iter().zip(whole) {
                self.keep(bi, ui, b.slot, Form::Full, cost);
            }
            return;
        }

        let (used_before, open_before) = (self.used, self.open);
        let mut kept: u64 = 0;
        match b.kind {
            BlockKind::RecentTurns | BlockKind::History => {
                let mut stopped = false;
                for &ui in &order {
                    let cost = b.units[ui].full;
                    if stopped {
                        self.forms[bi][ui] = Form::Dropped(DropReason::OlderThanCut);
                    } else if let Err(why) = self.fits(b.slot, kept, ceiling, cost) {
                        self.forms[bi][ui] = Form::Dropped(why);
                        stopped = true;
                    } else {
                        self.keep(bi, ui, b.slot, Form::Full, cost);
                        kept += u64::from(cost);
                    }
                }
            }
            BlockKind::Summary | BlockKind::Evidence | BlockKind::Memory | BlockKind::State => {
                for &ui in &order {
                    let form = self.shrink_one(bi, ui, b, kept, ceiling, shrink);
                    if let Some((form, cost)) = form {
                        self.keep(bi, ui, b.slot, form, cost);
                        kept += u64::from(cost);
                    }
                }
            }
        }

        if kept < u64::from(b.min_tokens) {
            self.used = used_before;
            self.open = open_before;
            self.fates[bi] = BlockFate::BelowMin;
            for &ui in &valid {
                self.forms[bi][ui] = Form::Dropped(DropReason::BelowMinTokens);
                self.costs[bi][ui] = 0;
            }
        } else {
            self.fates[bi] = BlockFate::Cut;
        }
        if let Some(c) = b.chrono
            && valid.iter().any(|&ui| !self.forms[bi][ui].is_kept())
        {
            self.cut_chrono = Some(self.cut_chrono.map_or(c, |old| old.max(c)));
        }
    }

    /// The window's cut: when turns were dropped, the oldest kept turns up
    /// to the next anchor are given up too (and so are the oldest while the
    /// kept turns pass the window's ceiling), so that the cut sits at an
    /// anchor. Never the newest kept turn, a pinned one, one of a
    /// non-cuttable block or one its block's `min_tokens` needs: the cut
    /// stops before such a turn. Returns, per block, the tokens given up.
    fn cut_at_anchor(
        &mut self,
        blocks: &[BlockPlan],
        conversation: &Conversation,
        window: Window,
    ) -> Vec<u64> {
        let mut given_up = vec![0u64; blocks.len()];
        let seq = &conversation.seq;
        let kept = |st: &Self, (b, u): (usize, usize)| st.forms[b][u].is_kept();
        let (Some(first), Some(last)) = (
            seq.iter().position(|&x| kept(self, x)),
            seq.iter().rposition(|&x| kept(self, x)),
        ) else {
            return given_up;
        };
        let cost = |st: &Self, (b, u): (usize, usize)| u64::from(st.costs[b][u]);
        let mut kept_tokens: u64 = seq[first..].iter().map(|&x| cost(self, x)).sum();
        if first == 0 && kept_tokens <= u64::from(window.high) {
            // Nothing was cut: the conversation is whole.
            return given_up;
        }
        let mut cut = conversation.anchor_from(first);
        kept_tokens -= seq[first..cut].iter().map(|&x| cost(self, x)).sum::<u64>();
        while cut <= last && kept_tokens > u64::from(window.high) {
            let next = conversation.anchor_from(cut + 1);
            kept_tokens -= seq[cut..next].iter().map(|&x| cost(self, x)).sum::<u64>();
            cut = next;
        }
        if cut > last {
            // No anchor leaves a kept turn: cut where the room ended.
            return given_up;
        }
        let mut block_kept = self.kept_per_block();
        for &(b, u) in &seq[first..cut] {
            if !kept(self, (b, u)) {
                continue;
            }
            let Some(cost) = self.give_up(blocks, (b, u), &mut block_kept) else {
                break;
            };
            given_up[b] += u64::from(cost);
        }
        given_up
    }

    /// Tokens each block keeps now.
    fn kept_per_block(&self) -> Vec<u64> {
        self.costs
            .iter()
            .map(|c| c.iter().map(|&c| u64::from(c)).sum())
            .collect()
    }

    /// Gives up the kept turn `(b, u)` to move the conversation's cut, when
    /// it may go: not pinned, its block cuttable, and the block still at its
    /// `min_tokens` without it (`block_kept`: tokens each block keeps, kept
    /// current). Returns its cost; `None` when it must stay.
    fn give_up(
        &mut self,
        blocks: &[BlockPlan],
        (b, u): (usize, usize),
        block_kept: &mut [u64],
    ) -> Option<u32> {
        let cost = self.costs[b][u];
        let spare = block_kept[b] - u64::from(cost) >= u64::from(blocks[b].min_tokens);
        if blocks[b].units[u].pinned || !blocks[b].cuttable || !spare {
            return None;
        }
        block_kept[b] -= u64::from(cost);
        self.used -= u64::from(cost);
        self.costs[b][u] = 0;
        self.forms[b][u] = Form::Dropped(DropReason::OlderThanCut);
        self.fates[b] = BlockFate::Cut;
        Some(cost)
    }

    /// Compact before drop: the turns older than every kept turn (all of
    /// them when none is kept) become one summary unit, when it fits in the
    /// room left and costs less than the turns it covers. Until it does, the
    /// oldest verbatim turns are given up one by one (at most
    /// [`MAX_EVICTIONS`], never the newest kept turn, a pinned one, or one
    /// its block's `min_tokens` needs); when no summary fits, everything is
    /// as before. Room a given-up turn frees beyond the summary's cost is not
    /// offered again to blocks filled earlier.
    fn summarize_turns(
        &mut self,
        blocks: &[BlockPlan],
        conversation: &Conversation,
        shrink: &mut dyn Shrink,
    ) -> Option<TurnSummary> {
        let seq = &conversation.seq;
        let kept = |st: &Self, (b, u): (usize, usize)| st.forms[b][u].is_kept();
        let last_kept = seq.iter().rposition(|&x| kept(self, x));
        let mut next = 0;
        let mut covered: Vec<(usize, usize)> = Vec::new();
        let full = |&(b, u): &(usize, usize)| u64::from(blocks[b].units[u].full);
        let snapshot = (self.used, self.fates.clone());
        let mut evicted: Vec<(usize, usize, Form, u32)> = Vec::new();
        let mut block_kept = self.kept_per_block();
        let mut steps = 0;
        let summary = loop {
            // Cover every dropped turn up to the next kept one.
            while let Some(&x) = seq.get(next).filter(|&&x| !kept(self, x)) {
                covered.push(x);
                next += 1;
            }
            if covered.is_empty() {
                return None;
            }
            let Some(cost) = shrink.summarize(&covered) else {
                break None;
            };
            let covered_full: u64 = covered.iter().map(full).sum();
            let fits = u64::from(cost) + self.open_cost(Carrier::Summary) <= self.room();
            if fits && u64::from(cost) < covered_full {
                break Some(TurnSummary {
                    units: covered,
                    cost,
                    covered: covered_full,
                });
            }
            // Give up the oldest kept turns up to the next anchor (one turn
            // without a window), never the newest, and cover them.
            if steps == MAX_EVICTIONS {
                break None;
            }
            steps += 1;
            let until = conversation.anchor_from(next + 1);
            let mut stuck = false;
            while next < until {
                let Some(&(b, u)) = seq.get(next).filter(|_| Some(next) < last_kept) else {
                    stuck = true;
                    break;
                };
                let form = self.forms[b][u];
                if form.is_kept() {
                    let Some(cost) = self.give_up(blocks, (b, u), &mut block_kept) else {
                        stuck = true;
                        break;
                    };
                    evicted.push((b, u, form, cost));
                }
                covered.push((b, u));
                next += 1;
            }
            if stuck {
                break None;
            }
        };
        match summary {
            Some(s) => {
                self.used += self.open_cost(Carrier::Summary) + u64::from(s.cost);
                if let Some(i) = Carrier::Summary.index() {
                    self.open[i] = true;
                }
                for &(b, u) in &s.units {
                    self.forms[b][u] = Form::Dropped(DropReason::Summarized);
                }
                Some(s)
            }
            None => {
                for (b, u, form, cost) in evicted {
                    self.forms[b][u] = form;
                    self.costs[b][u] = cost;
                }
                (self.used, self.fates) = snapshot;
                None
            }
        }
    }

    /// The full cost of each of `valid` (units of block `bi`, in the order
    /// the block is filled) when all of them fit together in the room and
    /// under `ceiling`. Lazy units are measured in that order, each against
    /// the whole room (the most the block can offer any of them, so none is
    /// measured twice), until their sum passes what the block may take.
    fn whole(
        &mut self,
        bi: usize,
        valid: &[usize],
        slot: Carrier,
        ceiling: u64,
        shrink: &mut dyn Shrink,
    ) -> Option<Vec<u32>> {
        let room = self.room().checked_sub(self.open_cost(slot))?;
        let most = room.min(ceiling);
        let mut sum = 0u64;
        let mut costs = Vec::with_capacity(valid.len());
        for &ui in valid {
            let Full::Exact(cost) = self.measure(bi, ui, room, shrink) else {
                return None;
            };
            sum += u64::from(cost);
            if sum > most {
                return None;
            }
            costs.push(cost);
        }
        Some(costs)
    }

    /// What is known of unit `ui` of block `bi`'s full cost once measured
    /// against `limit`: exact when it is at most `limit` (or was counted
    /// before), else a lower bound past `limit`.
    fn measure(&mut self, bi: usize, ui: usize, limit: u64, shrink: &mut dyn Shrink) -> Full {
        let known = self.fulls[bi][ui];
        match known {
            Full::AtLeast(n) if u64::from(n) <= limit => {
                let limit = saturating_u32(limit);
                let full = shrink
                    .measure(bi, ui, limit)
                    .map_or(Full::AtLeast(limit.saturating_add(1)), Full::Exact);
                self.fulls[bi][ui] = full;
                full
            }
            _ => known,
        }
    }

    /// Whether a unit of `cost` fits both the room and the block's ceiling.
    fn fits(&self, slot: Carrier, kept: u64, ceiling: u64, cost: u32) -> Result<(), DropReason> {
        let cost = u64::from(cost);
        if cost + self.open_cost(slot) > self.room() {
            Err(DropReason::NoRoom)
        } else if kept + cost > ceiling {
            Err(DropReason::BlockLimit)
        } else {
            Ok(())
        }
    }

    /// The best form of one unit that fits: full, then compact, then (for
    /// summaries) a sentence-boundary truncation. Records the drop otherwise.
    fn shrink_one(
        &mut self,
        bi: usize,
        ui: usize,
        b: &BlockPlan,
        kept: u64,
        ceiling: u64,
        shrink: &mut dyn Shrink,
    ) -> Option<(Form, u32)> {
        let unit = &b.units[ui];
        // Measured against the room alone: past it, it is dropped for want
        // of room whatever the ceiling, as an exact count would say.
        let room = self.room().saturating_sub(self.open_cost(b.slot));
        let full = self.measure(bi, ui, room, shrink);
        let mut why = match full {
            Full::Exact(cost) => match self.fits(b.slot, kept, ceiling, cost) {
                Ok(()) => return Some((Form::Full, cost)),
                Err(why) => why,
            },
            Full::AtLeast(_) => DropReason::NoRoom,
        };
        if unit.has_compact {
            // Past the room: no room, as for the full form.
            why = match shrink.compact_cost(bi, ui, saturating_u32(room)) {
                Some(cost) => match self.fits(b.slot, kept, ceiling, cost) {
                    Ok(()) => return Some((Form::Compact, cost)),
                    Err(w) => w,
                },
                None => DropReason::NoRoom,
            };
        }
        if b.kind == BlockKind::Summary {
            let room = self.room().saturating_sub(self.open_cost(b.slot));
            let limit = room.min(ceiling.saturating_sub(kept));
            let limit = saturating_u32(limit);
            if let Some((bytes, cost)) = shrink.truncate(bi, ui, limit) {
                return Some((Form::Truncated { bytes }, cost));
            }
        }
        self.forms[bi][ui] = Form::Dropped(why);
        None
    }
}

#[cfg(test)]
mod tests;
