//! Which turns [`allocate`](super::allocate) lightens: what each turn
//! would cost lightened, the anchors every `lighten` tokens of saving, the
//! window's cut decided on the bare conversation, and the least anchor
//! after it that lets the turns fit the room they had.

use super::{Allocation, BlockPlan, Decided, Form, Full, Light, Limits, Shrink, Window};
use crate::vocab::saturating_u32;

/// The room the turns had in `first`, the fill without summarizing: what
/// they kept and what was left, at most the window's ceiling.
pub(super) fn room_of_turns(first: &Allocation, seq: &[(usize, usize)], limits: &Limits) -> u64 {
    let kept: u64 = seq
        .iter()
        .map(|&(b, u)| u64::from(first.costs[b][u]))
        .sum::<u64>()
        + first.summary.as_ref().map_or(0, |s| u64::from(s.cost));
    (kept + u64::from(limits.budget).saturating_sub(first.used)).min(u64::from(limits.window.high))
}

/// The conversation's turn units, oldest first, with what lightening
/// offers each. Positions (`i`, `cut`, `end`) index the sequence.
pub(super) struct TurnLights<'a> {
    blocks: &'a [BlockPlan],
    /// (block, unit) of every valid turn unit, oldest first.
    seq: Vec<(usize, usize)>,
    /// What lightening `seq[i]` offers: `None` for a turn that must stay
    /// (reserved) or that nothing lightens.
    lights: Vec<Option<Light>>,
}

impl<'a> TurnLights<'a> {
    /// Asks the shrinker, oldest first, what lightening offers each turn
    /// of `seq` (the conversation's sequence) that may be lightened.
    pub(super) fn offered(
        blocks: &'a [BlockPlan],
        seq: Vec<(usize, usize)>,
        shrink: &mut dyn Shrink,
    ) -> TurnLights<'a> {
        let lights = seq
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
        TurnLights { blocks, seq, lights }
    }

    /// The full cost of `seq[i]`.
    fn full(&self, i: usize) -> u64 {
        let (b, u) = self.seq[i];
        u64::from(self.blocks[b].units[u].full)
    }

    /// The cost of `seq[i]` as it would be sent lightened (its full cost
    /// when nothing lightens it).
    fn light(&self, i: usize) -> u64 {
        self.lights[i].map_or(self.full(i), |l| u64::from(l.cost).min(self.full(i)))
    }

    /// The anchors of lightening: at `ends[k]`, the conversation is
    /// lightened before `seq[ends[k]]`, the k-th anchor. They are where the
    /// tokens lightening could save since the anchor before reach
    /// `at_least`, so they depend only on the turns before them.
    pub(super) fn anchors(&self, at_least: u32) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut since = 0u64;
        for (i, l) in self.lights.iter().enumerate() {
            since += l.map_or(0, |l| u64::from(l.saving));
            if since > 0 && since >= u64::from(at_least) {
                ends.push(i + 1);
                since = 0;
            }
        }
        ends
    }

    /// Whether lightening offers nothing for any turn.
    pub(super) fn none_offered(&self) -> bool {
        self.lights.iter().all(Option::is_none)
    }

    /// What lightening every turn it may would leave of each, were nothing
    /// protected: it depends on the turns alone.
    pub(super) fn bare(&self) -> Vec<u64> {
        (0..self.seq.len())
            .map(|i| {
                self.full(i)
                    - self.lights[i]
                        .map_or(0, |l| u64::from(l.saving))
                        .min(self.full(i))
            })
            .collect()
    }

    /// Where the window cuts the conversation (the turns before `seq[cut]`
    /// are cut), decided on the `bare` conversation: 0 when it fits `room`.
    pub(super) fn cut(&self, bare: &[u64], room: u64, window: Window) -> usize {
        let blocks = self.blocks;
        let seq = &self.seq;
        // The window's cut, decided on the bare conversation: it depends on
        // the turns alone, so it only moves forward as the session grows, by
        // a whole step, and a result leaving the newest or a user turn
        // closing a cycle never pulls it back. When what protection keeps
        // whole (the newest results, an open cycle's thinking) does not fit
        // beside the rest, the fill cuts further, and a later request may
        // not need to.
        let window_anchor = window.anchors(bare.iter().copied());

        // A turn that must stay (reserved) stops the cut, as it stops the
        // window's; a turn block with a floor leaves the cut to the fill,
        // which keeps the floor.
        let must_stay = seq
            .iter()
            .position(|&(b, u)| blocks[b].units[u].reserved_in(&blocks[b]))
            .unwrap_or(seq.len());
        let floors = seq.iter().any(|&(b, _)| blocks[b].min_tokens > 0);
        if floors || bare.iter().sum::<u64>() <= room {
            return 0;
        }
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
    }

    /// Of the turns after the cut, where lightening ends: the least anchor
    /// of `ends` that lets them fit `room` as they will be sent (all that
    /// can be lightened when none does).
    pub(super) fn end(&self, ends: &[usize], cut: usize, room: u64) -> usize {
        let kept_total = |end: usize| -> u64 {
            (cut..self.seq.len())
                .map(|i| if i < end { self.light(i) } else { self.full(i) })
                .sum()
        };
        ends.iter()
            .copied()
            .filter(|&e| e > cut)
            .find(|&e| kept_total(e) <= room)
            .unwrap_or(self.seq.len())
    }

    /// The positions from `cut` to `end` that lightening makes cheaper.
    pub(super) fn lightened(&self, cut: usize, end: usize) -> Vec<usize> {
        (cut..end).filter(|&i| self.light(i) < self.full(i)).collect()
    }

    /// The blocks with the turns at `lightened` costing their light form.
    pub(super) fn lighter(&self, lightened: &[usize]) -> Vec<BlockPlan> {
        let mut lighter = self.blocks.to_vec();
        for &i in lightened {
            let (b, u) = self.seq[i];
            lighter[b].units[u].full = saturating_u32(self.light(i));
        }
        lighter
    }

    /// What is decided for the fill of the lighter blocks: the window's
    /// anchors on the `bare` costs, and the turns before `cut` cut.
    pub(super) fn decided<'d>(&'d self, bare: &'d [u64], cut: usize) -> Decided<'d> {
        Decided {
            anchor_costs: bare,
            cut: &self.seq[..cut],
        }
    }

    /// Marks the turns at `lightened` kept whole as kept light in `out`, the
    /// fill of the lighter blocks, with their full cost as it was.
    pub(super) fn mark_lightened(&self, out: &mut Allocation, lightened: &[usize]) {
        for &i in lightened {
            let (b, u) = self.seq[i];
            if out.forms[b][u] == Form::Full {
                out.forms[b][u] = Form::Light;
            }
            out.fulls[b][u] = Full::Exact(self.blocks[b].units[u].full);
        }
    }
}
