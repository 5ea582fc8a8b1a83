//! The conversation after the blocks are filled: its turn units in
//! chronological order with the window's anchors, the window's cut at an
//! anchor, and the summary of the turns that did not fit (compact before
//! drop).

use super::{
    BlockFate, BlockPlan, Carrier, DropReason, Form, MAX_EVICTIONS, Shrink, State, TurnSummary, Window,
};

/// The conversation's turn units in chronological order, with its anchors.
pub(super) struct Conversation {
    /// (block, unit) of every valid turn unit, oldest first.
    seq: Vec<(usize, usize)>,
    /// Whether `seq[i]` is an anchor of the window.
    anchor: Vec<bool>,
}

impl Conversation {
    /// (block, unit) of every valid turn unit, oldest first.
    pub(super) fn sequence(blocks: &[BlockPlan]) -> Vec<(usize, usize)> {
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

    pub(super) fn of(blocks: &[BlockPlan], window: Window, costs: Option<&[u64]>) -> Conversation {
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

/// The turns a summary would cover, grown oldest first while no summary
/// fits, and the kept turns given up to cover them.
struct Covering {
    /// Position in the sequence of the next turn to cover.
    next: usize,
    /// (block, unit) of the turns covered, oldest first.
    units: Vec<(usize, usize)>,
    /// The kept turns given up, with the form and cost they had.
    evicted: Vec<(usize, usize, Form, u32)>,
    /// Tokens each block keeps now.
    block_kept: Vec<u64>,
}

impl State {
    /// The window's cut: when turns were dropped, the oldest kept turns up
    /// to the next anchor are given up too (and so are the oldest while the
    /// kept turns pass the window's ceiling), so that the cut sits at an
    /// anchor. Never the newest kept turn, a pinned one, one of a
    /// non-cuttable block or one its block's `min_tokens` needs: the cut
    /// stops before such a turn. Returns, per block, the tokens given up.
    pub(super) fn cut_at_anchor(
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
    pub(super) fn summarize_turns(
        &mut self,
        blocks: &[BlockPlan],
        conversation: &Conversation,
        shrink: &mut dyn Shrink,
    ) -> Option<TurnSummary> {
        let seq = &conversation.seq;
        let last_kept = seq.iter().rposition(|&(b, u)| self.forms[b][u].is_kept());
        let full = |&(b, u): &(usize, usize)| u64::from(blocks[b].units[u].full);
        let snapshot = (self.used, self.fates.clone());
        let mut covering = Covering {
            next: 0,
            units: Vec::new(),
            evicted: Vec::new(),
            block_kept: self.kept_per_block(),
        };
        let mut steps = 0;
        let summary = loop {
            self.cover_dropped(seq, &mut covering);
            if covering.units.is_empty() {
                return None;
            }
            let Some(cost) = shrink.summarize(&covering.units) else {
                break None;
            };
            let covered_full: u64 = covering.units.iter().map(full).sum();
            let fits = u64::from(cost) + self.open_cost(Carrier::Summary) <= self.room();
            if fits && u64::from(cost) < covered_full {
                let until = conversation.anchor_from(covering.next + 1);
                break Some(TurnSummary {
                    units: covering.units,
                    cost,
                    covered: covered_full,
                    ahead: seq.get(covering.next..until).unwrap_or_default().to_vec(),
                });
            }
            if steps == MAX_EVICTIONS {
                break None;
            }
            steps += 1;
            if !self.give_up_to_anchor(blocks, conversation, last_kept, &mut covering) {
                break None;
            }
        };
        match summary {
            Some(s) => {
                self.keep_summary(&s);
                Some(s)
            }
            None => {
                self.restore(covering.evicted, snapshot);
                None
            }
        }
    }

    /// Covers every dropped turn of `seq` from `covering.next` up to the
    /// next kept one.
    fn cover_dropped(&self, seq: &[(usize, usize)], covering: &mut Covering) {
        while let Some(&x) = seq
            .get(covering.next)
            .filter(|&&(b, u)| !self.forms[b][u].is_kept())
        {
            covering.units.push(x);
            covering.next += 1;
        }
    }

    /// Gives up the oldest kept turns from `covering.next` up to the next
    /// anchor (one turn without a window), never the newest (at
    /// `last_kept`), and covers them. False when a turn must stay.
    fn give_up_to_anchor(
        &mut self,
        blocks: &[BlockPlan],
        conversation: &Conversation,
        last_kept: Option<usize>,
        covering: &mut Covering,
    ) -> bool {
        let seq = &conversation.seq;
        let until = conversation.anchor_from(covering.next + 1);
        while covering.next < until {
            let next = covering.next;
            let Some(&(b, u)) = seq.get(next).filter(|_| Some(next) < last_kept) else {
                return false;
            };
            let form = self.forms[b][u];
            if form.is_kept() {
                let Some(cost) = self.give_up(blocks, (b, u), &mut covering.block_kept) else {
                    return false;
                };
                covering.evicted.push((b, u, form, cost));
            }
            covering.units.push((b, u));
            covering.next += 1;
        }
        true
    }

    /// Keeps `summary` in the summary message, paying for opening it, and
    /// drops the turns it covers as summarized.
    fn keep_summary(&mut self, summary: &TurnSummary) {
        self.used += self.open_cost(Carrier::Summary) + u64::from(summary.cost);
        if let Some(i) = Carrier::Summary.index() {
            self.open[i] = true;
        }
        for &(b, u) in &summary.units {
            self.forms[b][u] = Form::Dropped(DropReason::Summarized);
        }
    }

    /// Puts back the turns given up for a summary that did not fit, with
    /// the tokens used and the blocks' fates as they were (`snapshot`).
    fn restore(&mut self, evicted: Vec<(usize, usize, Form, u32)>, snapshot: (u64, Vec<BlockFate>)) {
        for (b, u, form, cost) in evicted {
            self.forms[b][u] = form;
            self.costs[b][u] = cost;
        }
        (self.used, self.fates) = snapshot;
    }
}
