//! One cuttable block's fill: whole when it fits, else unit by unit in its
//! order (turns newest first until one does not fit, other units each in
//! the best form that fits), and nothing when it cannot keep its floor.

use super::{BlockFate, BlockPlan, Carrier, DropReason, Form, Full, Shrink, State, unit_order};
use crate::prompt::BlockKind;
use crate::vocab::saturating_u32;

impl State {
    /// Fills block `bi` (`b`) with what fits of its units that are valid,
    /// not pinned and not cut whatever the room.
    pub(super) fn fill(&mut self, bi: usize, b: &BlockPlan, shrink: &mut dyn Shrink) {
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
        let order = unit_order(b, &valid);
        if let Some(whole) = self.whole(bi, &order, b.slot, ceiling, shrink) {
            for (&ui, cost) in order.iter().zip(whole) {
                self.keep(bi, ui, b.slot, Form::Full, cost);
            }
            return;
        }

        let before = (self.used, self.open);
        let kept = match b.kind {
            BlockKind::RecentTurns | BlockKind::History => self.fill_turns(bi, b, &order, ceiling),
            BlockKind::Summary | BlockKind::Evidence | BlockKind::Memory | BlockKind::State => {
                self.fill_shrinking(bi, b, &order, ceiling, shrink)
            }
        };
        if kept < u64::from(b.min_tokens) {
            self.drop_below_min(bi, &valid, before);
        } else {
            self.fates[bi] = BlockFate::Cut;
        }
        if let Some(c) = b.chrono
            && valid.iter().any(|&ui| !self.forms[bi][ui].is_kept())
        {
            self.cut_chrono = Some(self.cut_chrono.map_or(c, |old| old.max(c)));
        }
    }

    /// Keeps turns of block `bi` in `order` (newest first) until one does
    /// not fit; the older ones are dropped behind the cut. Returns the
    /// tokens kept.
    fn fill_turns(&mut self, bi: usize, b: &BlockPlan, order: &[usize], ceiling: u64) -> u64 {
        let mut kept: u64 = 0;
        let mut stopped = false;
        for &ui in order {
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
        kept
    }

    /// Keeps each unit of block `bi` in `order` in the best form that fits
    /// (see [`State::shrink_one`]). Returns the tokens kept.
    fn fill_shrinking(
        &mut self,
        bi: usize,
        b: &BlockPlan,
        order: &[usize],
        ceiling: u64,
        shrink: &mut dyn Shrink,
    ) -> u64 {
        let mut kept: u64 = 0;
        for &ui in order {
            let form = self.shrink_one(bi, ui, b, kept, ceiling, shrink);
            if let Some((form, cost)) = form {
                self.keep(bi, ui, b.slot, form, cost);
                kept += u64::from(cost);
            }
        }
        kept
    }

    /// Drops every one of `valid` (units of block `bi`) below the block's
    /// `min_tokens`, and gives back what they took: the tokens used and the
    /// messages opened as they were `before` the fill.
    fn drop_below_min(&mut self, bi: usize, valid: &[usize], before: (u64, [bool; 2])) {
        (self.used, self.open) = before;
        self.fates[bi] = BlockFate::BelowMin;
        for &ui in valid {
            self.forms[bi][ui] = Form::Dropped(DropReason::BelowMinTokens);
            self.costs[bi][ui] = 0;
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
