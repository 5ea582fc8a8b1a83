use proptest::prelude::*;

use super::*;
use crate::vocab::saturating_u32;

/// Synthetic shrink: compact costs a third, truncation keeps what fits in
/// steps of 5 tokens (sentence ends), at least 5; a turn summary costs 6
/// plus 3 per unit covered (none when turns are not compacted).
struct Synthetic<'a>(&'a [BlockPlan], bool);

impl Shrink for Synthetic<'_> {
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        Some(self.0[block].units[unit].full).filter(|&full| full <= limit)
    }
    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        Some(self.0[block].units[unit].full / 3 + 1).filter(|&cost| cost <= limit)
    }
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        let full = self.0[block].units[unit].full;
        let cost = (limit.min(full.saturating_sub(1)) / 5) * 5;
        (cost >= 5).then_some((cost as usize, cost))
    }
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        self.1.then(|| 6 + 3 * saturating_u32(units.len()))
    }
    fn light(&mut self, _: usize, _: usize) -> Option<Light> {
        None
    }
}

const OVERHEAD: u32 = 4;

fn kinds() -> impl Strategy<Value = BlockKind> {
    prop::sample::select(BlockKind::ALL.to_vec())
}

prop_compose! {
    fn unit()(full in 1u32..200, score in 0.0f64..1.0, has_compact in any::<bool>(), broken in 0u8..10)
        -> UnitPlan {
        UnitPlan {
            full,
            lazy: false,
            score,
            has_compact,
            invalid: (broken == 0).then_some(DropReason::OrphanToolResult),
            pinned: false,
        }
    }
}

prop_compose! {
    fn block()(kind in kinds(), priority in 1u32..10, cuttable in 0u8..8,
               min_tokens in prop::sample::select(vec![0u32, 0, 20, 100]),
               max_tokens in prop::sample::select(vec![None, None, Some(50u32), Some(300)]),
               units in prop::collection::vec(unit(), 0..8)) -> BlockPlan {
        let slot = match kind {
            BlockKind::Summary => Carrier::Summary,
            BlockKind::RecentTurns | BlockKind::History => Carrier::Own,
            _ => Carrier::Context,
        };
        let cuttable = cuttable != 0;
        BlockPlan {
            kind,
            priority,
            cuttable,
            min_tokens,
            max_tokens: if cuttable { max_tokens } else { None },
            slot,
            chrono: None,
            units,
        }
    }
}

fn plans() -> impl Strategy<Value = (Vec<BlockPlan>, u64, u32)> {
    (prop::collection::vec(block(), 0..6), 0u64..100, 0u32..1500).prop_map(|(mut blocks, base, budget)| {
        for (chrono, b) in blocks.iter_mut().filter(|b| b.slot == Carrier::Own).enumerate() {
            b.chrono = Some(chrono);
            // A call whose older half sits in a non-cuttable block pins the
            // newer block's first unit.
            if let Some(first) = b.units.first_mut() {
                first.pinned = first.full % 5 == 0;
            }
        }
        (blocks, base, budget)
    })
}

/// Allocates under `window`, with turn summaries when `summaries`.
fn allocated(
    blocks: &[BlockPlan],
    base: u64,
    budget: u32,
    window: Window,
    summaries: bool,
) -> Result<Allocation, Overflow> {
    allocate(
        blocks,
        base,
        [OVERHEAD; 2],
        budget,
        window,
        None,
        &mut Synthetic(blocks, summaries),
    )
}

fn run(blocks: &[BlockPlan], base: u64, budget: u32) -> Result<Allocation, Overflow> {
    allocated(blocks, base, budget, Window::OFF, true)
}

fn run_without_summary(blocks: &[BlockPlan], base: u64, budget: u32) -> Result<Allocation, Overflow> {
    allocated(blocks, base, budget, Window::OFF, false)
}

/// The total recomputed from the forms alone.
fn recount(blocks: &[BlockPlan], a: &Allocation, base: u64) -> u64 {
    let mut total = base;
    for slot in [Carrier::Context, Carrier::Summary] {
        let open = blocks
            .iter()
            .enumerate()
            .any(|(bi, b)| b.slot == slot && a.forms[bi].iter().any(|f| f.is_kept()))
            || (slot == Carrier::Summary && a.summary.is_some());
        if open {
            total += u64::from(OVERHEAD);
        }
    }
    let summary = a.summary.as_ref().map_or(0, |s| u64::from(s.cost));
    total + summary + a.costs.iter().flatten().map(|&c| u64::from(c)).sum::<u64>()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn allocation_invariants_hold((blocks, base, budget) in plans()) {
        // With turn summaries: exact accounting within the budget.
        if let Ok(a) = run(&blocks, base, budget) {
            prop_assert_eq!(recount(&blocks, &a, base), a.used);
            prop_assert!(a.used <= u64::from(budget));
        }
        // The fill itself (turn summaries are checked against it below).
        match run_without_summary(&blocks, base, budget) {
            Err(Overflow { non_cuttable, reserved }) => {
                prop_assert!(non_cuttable > u64::from(budget));
                // The breakdown adds up, each block's part is its reserved
                // units (with at most the openings of both messages).
                prop_assert_eq!(base + reserved.iter().sum::<u64>(), non_cuttable);
                for (bi, b) in blocks.iter().enumerate() {
                    let units: u64 = b.units.iter().filter(|u| u.reserved_in(b)).map(|u| u64::from(u.full)).sum();
                    prop_assert!(reserved[bi] >= units && reserved[bi] <= units + 2 * u64::from(OVERHEAD));
                    prop_assert!(units > 0 || reserved[bi] == 0);
                }
                // The same parts whatever the budget.
                if let Ok(a) = run_without_summary(&blocks, base, u32::try_from(non_cuttable).unwrap_or(u32::MAX)) {
                    prop_assert_eq!(a.reserved, reserved);
                }
            }
            Ok(a) => {
                prop_assert!(base + a.reserved.iter().sum::<u64>() <= a.used);
                // Exact accounting, within budget.
                prop_assert_eq!(recount(&blocks, &a, base), a.used);
                prop_assert!(a.used <= u64::from(budget));
                let room = u64::from(budget) - a.used;
                for (bi, b) in blocks.iter().enumerate() {
                    let forms = &a.forms[bi];
                    for (ui, u) in b.units.iter().enumerate() {
                        // Broken units never kept; non-cuttable kept in full.
                        if u.invalid.is_some() {
                            prop_assert!(!forms[ui].is_kept());
                        } else if !b.cuttable || u.pinned {
                            prop_assert_eq!(forms[ui], Form::Full);
                        }
                        if forms[ui] == Form::Full {
                            prop_assert_eq!(a.costs[bi][ui], u.full);
                        }
                    }
                    // What the block's own fill kept and was offered (pinned units are reserved).
                    let fill = |ui: usize| b.units[ui].invalid.is_none() && !b.units[ui].pinned;
                    let kept: u64 = (0..b.units.len()).filter(|&ui| fill(ui)).map(|ui| u64::from(a.costs[bi][ui])).sum();
                    let offered: u64 = (0..b.units.len()).filter(|&ui| fill(ui)).map(|ui| u64::from(b.units[ui].full)).sum();
                    // min_tokens / max_tokens hold.
                    if b.cuttable {
                        prop_assert!(kept == 0 || kept == offered || kept >= u64::from(b.min_tokens));
                        if let Some(max) = b.max_tokens {
                            prop_assert!(kept <= u64::from(max));
                        }
                    }
                    let slot_open = blocks.iter().enumerate()
                        .any(|(bj, o)| o.slot == b.slot && b.slot != Carrier::Own && a.forms[bj].iter().any(|f| f.is_kept()));
                    let extra = if b.slot == Carrier::Own || slot_open { 0 } else { u64::from(OVERHEAD) };
                    let ceiling = b.max_tokens.map_or(u64::MAX, u64::from);
                    match b.kind {
                        BlockKind::RecentTurns | BlockKind::History => {
                            // Kept turns are a suffix; the newest dropped one does not fit.
                            let valid: Vec<usize> = (0..b.units.len()).filter(|&i| fill(i)).collect();
                            let kept_flags: Vec<bool> = valid.iter().map(|&i| forms[i].is_kept()).collect();
                            let first_kept = kept_flags.iter().position(|&k| k).unwrap_or(kept_flags.len());
                            prop_assert!(kept_flags[first_kept..].iter().all(|&k| k), "kept turns are not a suffix");
                            if first_kept > 0 {
                                let newest_dropped = valid[first_kept - 1];
                                if forms[newest_dropped] == Form::Dropped(DropReason::NoRoom)
                                    || forms[newest_dropped] == Form::Dropped(DropReason::BlockLimit) {
                                    let c = u64::from(b.units[newest_dropped].full);
                                    prop_assert!(c + extra > room || kept + c > ceiling);
                                }
                            }
                        }
                        _ => {
                            // No item dropped that would still fit in the room left at the end.
                            for (ui, u) in b.units.iter().enumerate() {
                                if let Form::Dropped(DropReason::NoRoom | DropReason::BlockLimit) = forms[ui] {
                                    let cheapest = if u.has_compact { u.full.min(u.full / 3 + 1) } else { u.full };
                                    let c = u64::from(cheapest);
                                    let truncatable = b.kind == BlockKind::Summary && u.full > 5 && room.saturating_sub(extra).min(ceiling.saturating_sub(kept)) >= 5;
                                    prop_assert!(!truncatable, "a summary that could be truncated was dropped");
                                    prop_assert!(c + extra > room || kept + c > ceiling,
                                        "unit {ui} of block {bi} ({:?}) dropped but {c} fits room {room}", b.kind);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Compact before drop: a summary covers exactly the turns older than
    /// every kept turn, costs less than they would, and everything else is
    /// what dropping alone would decide, but for the oldest turns given up
    /// to make room for it.
    #[test]
    fn turn_summaries_cover_the_oldest_turns((blocks, base, budget) in plans()) {
        let (Ok(a), Ok(plain)) = (run(&blocks, base, budget), run_without_summary(&blocks, base, budget)) else {
            return Ok(());
        };
        prop_assert!(plain.summary.is_none());
        let mut chrono: Vec<usize> = (0..blocks.len()).filter(|&b| blocks[b].chrono.is_some()).collect();
        chrono.sort_by_key(|&b| blocks[b].chrono);
        let seq: Vec<(usize, usize)> = chrono.iter()
            .flat_map(|&b| (0..blocks[b].units.len()).map(move |u| (b, u)))
            .filter(|&(b, u)| blocks[b].units[u].invalid.is_none())
            .collect();
        let Some(s) = &a.summary else {
            prop_assert_eq!(&a, &plain);
            return Ok(());
        };
        let first_kept = seq.iter().position(|&(b, u)| a.forms[b][u].is_kept()).unwrap_or(seq.len());
        prop_assert!(first_kept > 0);
        prop_assert_eq!(&s.units[..], &seq[..first_kept]);
        let covered: u64 = s.units.iter().map(|&(b, u)| u64::from(blocks[b].units[u].full)).sum();
        prop_assert_eq!(s.covered, covered);
        prop_assert!(u64::from(s.cost) < covered);
        for &(b, u) in &s.units {
            prop_assert_eq!(a.forms[b][u], Form::Dropped(DropReason::Summarized));
            prop_assert_eq!(a.costs[b][u], 0);
        }
        // Turns the plain allocation kept and the summary covers were given
        // up for it: at most MAX_EVICTIONS, and every other decision is equal.
        let given_up = s.units.iter().filter(|&&(b, u)| plain.forms[b][u].is_kept()).count();
        prop_assert!(given_up <= MAX_EVICTIONS);
        for (bi, forms) in a.forms.iter().enumerate() {
            for (ui, f) in forms.iter().enumerate() {
                if !s.units.contains(&(bi, ui)) {
                    prop_assert_eq!(*f, plain.forms[bi][ui]);
                }
            }
        }
    }

    #[test]
    fn allocation_is_deterministic((blocks, base, budget) in plans()) {
        prop_assert_eq!(run(&blocks, base, budget), run(&blocks, base, budget));
    }
}

fn evidence(units: &[(u32, f64)]) -> BlockPlan {
    BlockPlan {
        kind: BlockKind::Evidence,
        priority: 5,
        cuttable: true,
        min_tokens: 0,
        max_tokens: None,
        slot: Carrier::Context,
        chrono: None,
        units: units
            .iter()
            .map(|&(full, score)| UnitPlan {
                full,
                lazy: false,
                score,
                has_compact: false,
                invalid: None,
                pinned: false,
            })
            .collect(),
    }
}

/// The plans as the pipeline makes them: every valid unit of a cuttable
/// context block lazy, its full cost hidden (0) until measured.
fn lazily(blocks: &[BlockPlan]) -> Vec<BlockPlan> {
    let mut lazy = blocks.to_vec();
    for b in lazy.iter_mut().filter(|b| b.cuttable && b.chrono.is_none()) {
        for u in b.units.iter_mut().filter(|u| u.invalid.is_none()) {
            u.lazy = true;
            u.full = 0;
        }
    }
    lazy
}

/// Counts what lazy measuring asks for: the tokens it looked at (at most
/// the limit, or the whole unit when that is less).
struct Metered<'a> {
    inner: Synthetic<'a>,
    looked_at: u64,
}

impl Shrink for Metered<'_> {
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        let full = self.inner.0[block].units[unit].full;
        self.looked_at += u64::from(full.min(limit.saturating_add(1)));
        self.inner.measure(block, unit, limit)
    }
    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        self.inner.compact_cost(block, unit, limit)
    }
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        self.inner.truncate(block, unit, limit)
    }
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        self.inner.summarize(units)
    }
    fn light(&mut self, _: usize, _: usize) -> Option<Light> {
        None
    }
}

/// Allocates `blocks` made lazy within `budget`, metered: the allocation
/// and the tokens measuring looked at.
fn metered(blocks: &[BlockPlan], budget: u32) -> (Allocation, u64) {
    let lazy = lazily(blocks);
    let mut metered = Metered {
        inner: Synthetic(blocks, true),
        looked_at: 0,
    };
    let a = allocate(&lazy, 0, [OVERHEAD; 2], budget, Window::OFF, None, &mut metered).unwrap();
    (a, metered.looked_at)
}

/// Counts every form to its end, whatever the limit (what the allocator
/// did before it measured against the room): answers past the limit are
/// left to the allocator's own checks.
struct Unbounded<'a>(Synthetic<'a>);

impl Shrink for Unbounded<'_> {
    fn measure(&mut self, block: usize, unit: usize, _: u32) -> Option<u32> {
        self.0.measure(block, unit, u32::MAX)
    }
    fn compact_cost(&mut self, block: usize, unit: usize, _: u32) -> Option<u32> {
        self.0.compact_cost(block, unit, u32::MAX)
    }
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        self.0.truncate(block, unit, limit)
    }
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        self.0.summarize(units)
    }
    fn light(&mut self, _: usize, _: usize) -> Option<Light> {
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Measuring context units (full and compact forms) only as far as the
    /// room they are offered changes no decision: the same forms, costs,
    /// fates, summary and total as with every form counted in full; each offered cost is exact
    /// or a lower bound past what the unit was offered, exact for every
    /// kept unit; and what was counted is at most what was offered.
    #[test]
    fn lazy_measuring_decides_as_full_measuring((blocks, base, budget) in plans()) {
        let exact = allocate(&blocks, base, [OVERHEAD; 2], budget, Window::OFF, None, &mut Unbounded(Synthetic(&blocks, true)));
        let lazy_plans = lazily(&blocks);
        let mut metered = Metered { inner: Synthetic(&blocks, true), looked_at: 0 };
        let lazy = allocate(&lazy_plans, base, [OVERHEAD; 2], budget, Window::OFF, None, &mut metered);
        match (exact, lazy) {
            (Err(e), Err(l)) => prop_assert_eq!(e, l),
            (Ok(e), Ok(l)) => {
                prop_assert_eq!(&e.forms, &l.forms);
                prop_assert_eq!(&e.costs, &l.costs);
                prop_assert_eq!(&e.fates, &l.fates);
                prop_assert_eq!(&e.summary, &l.summary);
                prop_assert_eq!(e.used, l.used);
                let mut offered = 0u64;
                for (bi, b) in blocks.iter().enumerate() {
                    for (ui, u) in b.units.iter().enumerate() {
                        offered += u64::from(u.full);
                        match l.fulls[bi][ui] {
                            Full::Exact(n) => prop_assert_eq!(n, u.full),
                            Full::AtLeast(n) => {
                                prop_assert!(n <= u.full && n > 0, "bound {} of {}", n, u.full);
                                prop_assert!(!matches!(l.forms[bi][ui], Form::Full), "kept in full on a bound");
                            }
                        }
                    }
                }
                prop_assert!(metered.looked_at <= offered);
            }
            (e, l) => prop_assert!(false, "exact {:?}, lazy {:?}", e.is_ok(), l.is_ok()),
        }
    }
}

#[test]
fn lazy_units_that_cannot_fit_are_counted_only_as_far_as_the_room() {
    // Room for one 40-token unit of three 400-token ones and two 40s: the
    // 400s are each looked at only as far as the room left (at most 81
    // tokens), not in full.
    let blocks = [evidence(&[
        (40, 0.9),
        (400, 0.8),
        (400, 0.7),
        (400, 0.6),
        (40, 0.5),
    ])];
    let (a, looked_at) = metered(&blocks, 4 + 120);
    assert_eq!(
        a.forms[0],
        vec![
            Form::Full,
            Form::Dropped(DropReason::NoRoom),
            Form::Dropped(DropReason::NoRoom),
            Form::Dropped(DropReason::NoRoom),
            Form::Full
        ]
    );
    assert!(
        a.fulls[0][1..4]
            .iter()
            .all(|f| matches!(f, Full::AtLeast(n) if *n <= 121)),
        "{:?}",
        a.fulls[0]
    );
    assert!(looked_at <= 40 + 40 + 3 * 121, "{looked_at}");
}

#[test]
fn trying_a_block_whole_counts_first_what_the_fill_keeps_first() {
    // Room for the two best units only. Trying the block whole measures in
    // the fill's order (by score), so it stops after the first 60 that
    // passes the room; the fill then looks at the other 60s only as far
    // as the room left (none). In index order it counted the two 60s the
    // fill drops before anything the fill keeps.
    let blocks = [evidence(&[(60, 0.1), (60, 0.2), (60, 0.3), (30, 0.9), (30, 0.8)])];
    let (a, looked_at) = metered(&blocks, 4 + 60);
    assert_eq!(
        a.forms[0],
        vec![
            Form::Dropped(DropReason::NoRoom),
            Form::Dropped(DropReason::NoRoom),
            Form::Dropped(DropReason::NoRoom),
            Form::Full,
            Form::Full
        ]
    );
    assert!(looked_at <= 30 + 30 + 60 + 2, "{looked_at}");
}

#[test]
fn lowest_scored_evidence_goes_first() {
    let blocks = [evidence(&[(40, 0.1), (40, 0.9), (40, 0.5)])];
    let a = run(&blocks, 0, 4 + 80).unwrap();
    assert_eq!(
        a.forms[0],
        vec![Form::Dropped(DropReason::NoRoom), Form::Full, Form::Full]
    );
    assert_eq!(a.used, 84);
}

#[test]
fn non_cuttable_overflow_is_reported_not_truncated() {
    let mut state = evidence(&[(100, 1.0)]);
    state.kind = BlockKind::State;
    state.cuttable = false;
    // The base, and the block with the opening of its message.
    assert_eq!(
        run(&[state], 10, 50),
        Err(Overflow {
            non_cuttable: 114,
            reserved: vec![100 + u64::from(OVERHEAD)]
        })
    );
}

#[test]
fn older_turn_blocks_are_dropped_when_newer_turns_were_cut() {
    let blocks = [
        turns(BlockKind::History, 9, 0, &[5, 5]),
        turns(BlockKind::RecentTurns, 8, 1, &[50, 10, 10]),
    ];
    let a = run(&blocks, 0, 30).unwrap();
    assert_eq!(a.fates, vec![BlockFate::Gap, BlockFate::Cut]);
    assert_eq!(
        a.forms[1],
        vec![Form::Dropped(DropReason::NoRoom), Form::Full, Form::Full]
    );
    assert_eq!(a.used, 20);
}

fn turns(kind: BlockKind, priority: u32, chrono: usize, fulls: &[u32]) -> BlockPlan {
    BlockPlan {
        kind,
        priority,
        cuttable: true,
        min_tokens: 0,
        max_tokens: None,
        slot: Carrier::Own,
        chrono: Some(chrono),
        units: fulls
            .iter()
            .map(|&full| UnitPlan {
                full,
                lazy: false,
                score: 0.0,
                has_compact: false,
                invalid: None,
                pinned: false,
            })
            .collect(),
    }
}

#[test]
fn turns_that_do_not_fit_are_summarized_before_they_are_dropped() {
    // 40 tokens: the newest two turns (20) fit, the 30 and the 50 do not; a
    // summary of those two (6 + 3 * 2 = 12, + 4 to open the summary message)
    // fits in the 20 left.
    let blocks = [turns(BlockKind::RecentTurns, 8, 0, &[50, 30, 10, 10])];
    let a = run(&blocks, 0, 40).unwrap();
    let s = a.summary.clone().unwrap();
    assert_eq!((s.units, s.cost, s.covered), (vec![(0, 0), (0, 1)], 12, 80));
    assert_eq!(
        a.forms[0],
        vec![
            Form::Dropped(DropReason::Summarized),
            Form::Dropped(DropReason::Summarized),
            Form::Full,
            Form::Full
        ]
    );
    assert_eq!(a.used, 20 + 12 + u64::from(OVERHEAD));
    // Without compaction they are dropped.
    let plain = run_without_summary(&blocks, 0, 40).unwrap();
    assert!(plain.summary.is_none());
    assert_eq!(plain.used, 20);
}

#[test]
fn the_oldest_kept_turns_make_room_for_the_summary() {
    // 30 tokens: three 10-token turns fit, the 40 does not, and no room is
    // left. A summary of the 40 (9 + 4) does not fit; giving up the oldest
    // kept turn leaves 10, not enough for a summary of two (12 + 4); giving
    // up the next leaves 20, enough for a summary of three (15 + 4).
    let blocks = [turns(BlockKind::History, 9, 0, &[40, 10, 10, 10])];
    let a = run(&blocks, 0, 30).unwrap();
    let s = a.summary.clone().unwrap();
    assert_eq!(s.units, vec![(0, 0), (0, 1), (0, 2)]);
    assert_eq!(a.forms[0][3], Form::Full);
    assert_eq!(a.used, 10 + 15 + u64::from(OVERHEAD));
    // The newest turn is never given up: with room for it alone, no summary.
    let a = run(&[turns(BlockKind::History, 9, 0, &[40, 10])], 0, 10).unwrap();
    assert!(a.summary.is_none());
    assert_eq!(a.forms[0], vec![Form::Dropped(DropReason::NoRoom), Form::Full]);
}

/// The boundary of a conversation's cut: the index of its first kept turn
/// (of block 0), or its length when none is kept.
fn boundary(a: &Allocation) -> usize {
    a.forms[0]
        .iter()
        .position(|f| f.is_kept())
        .unwrap_or(a.forms[0].len())
}

fn windowed(blocks: &[BlockPlan], base: u64, budget: u32, window: Window, summaries: bool) -> Allocation {
    allocated(blocks, base, budget, window, summaries).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Appending an exchange to a conversation either keeps the cut where
    /// it was, with the same summary and every turn kept before kept again
    /// in the same form (so every byte before the new turns is the same), or
    /// moves the cut forward by at least a whole step.
    #[test]
    fn appending_an_exchange_keeps_the_cut_or_moves_it_a_whole_step(
        fulls in prop::collection::vec(1u32..120, 1..40),
        exchange in prop::collection::vec(1u32..120, 1..3),
        base in 0u64..50,
        budget in 100u32..1500,
        step in 1u32..400,
        summaries in any::<bool>(),
    ) {
        // The room holds two steps and two turns: an anchor is always among
        // the kept turns (with less, the cut falls where the room ends).
        prop_assume!(u64::from(budget) >= base + 2 * u64::from(step) + 2 * 120);
        let window = Window { step, high: u32::MAX };
        let before = [turns(BlockKind::RecentTurns, 8, 0, &fulls)];
        let mut longer = fulls.clone();
        longer.extend(&exchange);
        let after = [turns(BlockKind::RecentTurns, 8, 0, &longer)];
        let (a, b) = (windowed(&before, base, budget, window, summaries), windowed(&after, base, budget, window, summaries));
        prop_assert_eq!(recount(&before, &a, base), a.used);
        prop_assert_eq!(recount(&after, &b, base), b.used);
        prop_assert!(a.used <= u64::from(budget) && b.used <= u64::from(budget));
        let (cut, next) = (boundary(&a), boundary(&b));
        let kept_before = a.forms[0].iter().any(|f| f.is_kept());
        if next == cut && kept_before {
            // Same cut: same summary, and every turn kept before is kept again.
            prop_assert_eq!(a.summary.as_ref().map(|s| (&s.units, s.cost)), b.summary.as_ref().map(|s| (&s.units, s.cost)));
            for i in cut..fulls.len() {
                prop_assert_eq!(a.forms[0][i], b.forms[0][i], "turn {} of {}", i, fulls.len());
            }
        } else if next != cut && cut > 0 && next < fulls.len() {
            // Moved (within the turns both requests share): by a step at least.
            let (lo, hi) = (cut.min(next), cut.max(next));
            let moved: u64 = fulls[lo..hi].iter().map(|&f| u64::from(f)).sum();
            prop_assert!(moved >= u64::from(step), "cut moved from {} to {} ({} tokens, step {})", cut, next, moved, step);
        }
    }

    /// The window never costs a turn that the cut does not need: it gives up
    /// the oldest kept turns up to the next anchor only, less than a step
    /// before the last of them.
    #[test]
    fn the_window_gives_up_less_than_a_step(
        fulls in prop::collection::vec(1u32..120, 1..40),
        base in 0u64..50,
        budget in 100u32..1500,
        step in 1u32..400,
    ) {
        let blocks = [turns(BlockKind::RecentTurns, 8, 0, &fulls)];
        let plain = windowed(&blocks, base, budget, Window::OFF, false);
        let a = windowed(&blocks, base, budget, Window { step, high: u32::MAX }, false);
        prop_assert_eq!(recount(&blocks, &a, base), a.used);
        let given_up = plain.used - a.used;
        prop_assert_eq!(a.window_given_up[0], given_up);
        prop_assert!(boundary(&a) >= boundary(&plain));
        if given_up > 0 {
            let last = boundary(&a) - 1;
            prop_assert!(given_up - u64::from(fulls[last]) < u64::from(step), "gave up {} with a step of {}", given_up, step);
            prop_assert!(a.forms[0].iter().any(|f| f.is_kept()), "the newest kept turn is never given up");
        }
    }
}

#[test]
fn the_window_ceiling_bounds_the_kept_turns_even_when_they_fit() {
    // Ten turns of 10 fit a budget of 1,000, but the ceiling is 35: the cut
    // moves to the first anchor (steps of 20: every other turn) whose suffix
    // is under it, and the room given up is reported.
    let blocks = [turns(BlockKind::RecentTurns, 8, 0, &[10; 10])];
    let a = windowed(&blocks, 0, 1_000, Window { step: 20, high: 35 }, false);
    let kept: Vec<bool> = a.forms[0].iter().map(|f| f.is_kept()).collect();
    assert_eq!(
        kept,
        [false, false, false, false, false, false, false, false, true, true]
    );
    assert_eq!((a.used, a.window_given_up[0]), (20, 80));
    assert!(
        a.forms[0][..8]
            .iter()
            .all(|&f| f == Form::Dropped(DropReason::OlderThanCut))
    );
    // With summaries the eight are covered by one.
    let a = windowed(&blocks, 0, 1_000, Window { step: 20, high: 35 }, true);
    assert_eq!(a.summary.map(|s| s.units.len()), Some(8));
}

/// Synthetic lightening of the turns of block 0: unit `i` would save
/// `lights[i].0` tokens were nothing protected, of which `lights[i].1` are
/// protected now (a newest result, an open cycle's thinking).
struct Lightening<'a> {
    inner: Synthetic<'a>,
    lights: &'a [(u32, u32)],
}

impl Shrink for Lightening<'_> {
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        self.inner.measure(block, unit, limit)
    }
    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        self.inner.compact_cost(block, unit, limit)
    }
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        self.inner.truncate(block, unit, limit)
    }
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        self.inner.summarize(units)
    }
    fn light(&mut self, block: usize, unit: usize) -> Option<Light> {
        let full = self.inner.0[block].units[unit].full;
        let &(saving, protected) = self.lights.get(unit).filter(|_| block == 0)?;
        let saving = saving.min(full);
        (saving > 0).then_some(Light {
            cost: full - (saving - protected.min(saving)),
            saving,
        })
    }
}

/// Allocates turns `fulls` (lightening as `lights` says, at least
/// `at_least` at once) under `budget`, no window, with summaries.
fn lightened(
    fulls: &[u32],
    lights: &[(u32, u32)],
    budget: u32,
    at_least: u32,
) -> (Vec<BlockPlan>, Allocation) {
    let blocks = vec![turns(BlockKind::RecentTurns, 8, 0, fulls)];
    let a = allocate(
        &blocks,
        0,
        [OVERHEAD; 2],
        budget,
        Window::OFF,
        Some(at_least),
        &mut Lightening {
            inner: Synthetic(&blocks, true),
            lights,
        },
    )
    .unwrap();
    (blocks, a)
}

#[test]
fn turns_are_lightened_before_any_is_summarized_or_dropped() {
    // 4 turns of 100 (400) in 300: lightening the first two (60 each)
    // frees 120, the first anchor (at least 100 saved) is after turn 2.
    let (blocks, a) = lightened(
        &[100, 100, 100, 100],
        &[(60, 0), (60, 0), (60, 0), (60, 0)],
        300,
        100,
    );
    assert_eq!(a.forms[0], vec![Form::Light, Form::Light, Form::Full, Form::Full]);
    assert_eq!(a.costs[0], vec![40, 40, 100, 100]);
    assert_eq!(a.fulls[0][0], Full::Exact(100), "offered: the full cost");
    assert!(a.summary.is_none());
    assert_eq!(recount(&blocks, &a, 0), a.used);
    // What fits whole is not lightened.
    let (_, whole) = lightened(&[100, 100, 100, 100], &[(60, 0); 4], 400, 100);
    assert!(whole.forms[0].iter().all(|&f| f == Form::Full));
}

#[test]
fn protected_savings_place_anchors_but_are_not_taken() {
    // The second turn's saving is protected: the first anchor (after turn
    // 2, 120 saved were nothing protected) frees only 60, too little; the
    // next (after turn 4) frees 180.
    let lights = [(60, 0), (60, 60), (60, 0), (60, 0), (60, 0)];
    let (blocks, a) = lightened(&[100; 5], &lights, 360, 100);
    // The protected turn is sent whole.
    assert_eq!(
        a.forms[0],
        vec![Form::Light, Form::Full, Form::Light, Form::Light, Form::Full]
    );
    assert_eq!(a.costs[0], vec![40, 100, 40, 40, 100]);
    assert_eq!(recount(&blocks, &a, 0), a.used);
}

#[test]
fn past_the_last_anchor_everything_is_lightened_and_the_window_cuts() {
    // Even lightened whole (5 x 40 = 200) the turns pass 150: every turn
    // that can be is lightened, and the oldest go.
    let (blocks, a) = lightened(&[100; 5], &[(60, 0); 5], 150, 100);
    assert!(!a.forms[0][0].is_kept());
    assert!(
        a.forms[0]
            .iter()
            .filter(|f| f.is_kept())
            .all(|&f| f == Form::Light)
    );
    assert!(a.used <= 150);
    assert_eq!(recount(&blocks, &a, 0), a.used);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Appending turns to a conversation that lightening makes fit either
    /// lightens the same turns (every turn before the new ones sent as
    /// before), or lightens more of them, oldest first, at least
    /// `at_least` tokens more were nothing protected (a whole step); the
    /// total is exact and within the budget.
    #[test]
    fn appending_keeps_the_lightened_turns_or_lightens_a_whole_step_more(
        units in prop::collection::vec((1u32..150, 0u32..150, 0u32..4), 2..30),
        added in prop::collection::vec((1u32..150, 0u32..150, 0u32..4), 1..3),
        budget in 100u32..2000,
        at_least in 1u32..400,
    ) {
        // A protected share only for the newest few, as protection works.
        let shape = |all: &[(u32, u32, u32)]| -> (Vec<u32>, Vec<(u32, u32)>) {
            let n = all.len();
            all.iter().enumerate().map(|(i, &(full, saving, p))| {
                let saving = saving.min(full);
                let protected = if n - i <= 2 { saving * p / 4 } else { 0 };
                (full, (saving, protected))
            }).unzip()
        };
        let (fulls, lights) = shape(&units);
        let mut longer = units.clone();
        longer.extend(&added);
        let (fulls2, mut lights2) = shape(&longer);
        // What protected a unit before may only have been lifted.
        for (i, l) in lights.iter().enumerate() {
            lights2[i].1 = lights2[i].1.min(l.1);
        }
        let (b1, a) = lightened(&fulls, &lights, budget, at_least);
        let (b2, b) = lightened(&fulls2, &lights2, budget, at_least);
        prop_assert_eq!(recount(&b1, &a, 0), a.used);
        prop_assert_eq!(recount(&b2, &b, 0), b.used);
        prop_assert!(a.used <= u64::from(budget) && b.used <= u64::from(budget));
        // Only the case where both fit whole, lightened or not.
        prop_assume!(a.forms[0].iter().chain(&b.forms[0]).all(|f| f.is_kept()));
        // The anchors, as specified: where the savings (were nothing
        // protected) since the one before reach `at_least`.
        let anchors = |lights: &[(u32, u32)]| -> Vec<usize> {
            let mut since = 0u32;
            let mut out = vec![0];
            for (i, l) in lights.iter().enumerate() {
                since += l.0;
                if since > 0 && since >= at_least {
                    out.push(i + 1);
                    since = 0;
                }
            }
            out.push(lights.len());
            out
        };
        // Where lightening ends: the least anchor that covers every turn
        // sent lightened, and no turn that could be is sent whole before it.
        let end = |x: &Allocation, fulls: &[u32], lights: &[(u32, u32)]| -> Result<usize, TestCaseError> {
            let last = x.forms[0].iter().rposition(|&f| f == Form::Light).map_or(0, |i| i + 1);
            let at = anchors(lights).into_iter().find(|&a| a >= last).unwrap_or(lights.len());
            for i in 0..at {
                let saves = lights[i].0 > lights[i].1 && lights[i].0.min(fulls[i]) > 0;
                prop_assert_eq!(x.forms[0][i] == Form::Light, saves, "turn {} of {} (lightened to {})", i, fulls.len(), at);
            }
            Ok(at)
        };
        let (e1, e2) = (end(&a, &fulls, &lights)?, end(&b, &fulls2, &lights2)?);
        prop_assert!(e2 >= e1 || e1 == fulls.len(), "lightening went back from {} to {}", e1, e2);
        if e2 == e1 {
            for i in 0..fulls.len() {
                prop_assert_eq!(a.forms[0][i], b.forms[0][i], "turn {}", i);
            }
        } else if e2 < fulls2.len() && e1 < fulls.len() {
            let more: u32 = lights2[e1..e2].iter().map(|l| l.0).sum();
            prop_assert!(more >= at_least, "lightened {} more (units {}..{}), less than {}", more, e1, e2, at_least);
        }
    }
}

/// Every turn of block 0 lightened as `lights` says (others not).
fn with_lights(
    blocks: &[BlockPlan],
    lights: &[(u32, u32)],
    base: u64,
    budget: u32,
    at_least: u32,
) -> Result<Allocation, Overflow> {
    allocate(
        blocks,
        base,
        [OVERHEAD; 2],
        budget,
        Window {
            step: 50,
            high: u32::MAX,
        },
        Some(at_least),
        &mut Lightening {
            inner: Synthetic(blocks, true),
            lights,
        },
    )
}

#[test]
fn a_pinned_turn_stays_whole_and_a_floor_is_kept_when_the_cut_is_decided_bare() {
    // The oldest turn is pinned (its call's other half is in a block that
    // may not be cut), and even lightened whole the turns do not fit: the
    // cut decided on the bare costs never takes it.
    let mut blocks = vec![turns(BlockKind::RecentTurns, 8, 0, &[100; 8])];
    blocks[0].units[0].pinned = true;
    let lights = [(60, 0); 8];
    let a = with_lights(&blocks, &lights, 0, 250, 100).unwrap();
    assert_eq!(a.forms[0][0], Form::Full, "the pinned turn stays whole");
    assert!(a.used <= 250);
    assert_eq!(recount(&blocks, &a, 0), a.used);
    // A floor on the block: the fill keeps it, or drops the block whole.
    blocks[0].units[0].pinned = false;
    blocks[0].min_tokens = 200;
    let b = with_lights(&blocks, &lights, 0, 250, 100).unwrap();
    assert!(b.used <= 250);
    assert_eq!(recount(&blocks, &b, 0), b.used);
    let kept: u32 = b.costs[0].iter().sum();
    assert!(kept == 0 || kept >= 200, "kept {kept} under the floor");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// With lightening, whatever the blocks: the same overflow as without
    /// (only what may not be cut counts), a total within the budget and
    /// exact, reserved units whole, and a turn block's floor kept or the
    /// block dropped whole.
    #[test]
    fn lightening_keeps_the_allocation_invariants(
        (blocks, base, budget) in plans(),
        lights in prop::collection::vec((0u32..150, 0u32..150), 0..8),
        at_least in 1u32..300,
    ) {
        let plain = run(&blocks, base, budget);
        let lit = with_lights(&blocks, &lights, base, budget, at_least);
        match (plain, lit) {
            (Err(p), Err(l)) => prop_assert_eq!(p, l),
            (Ok(_), Ok(a)) => {
                prop_assert!(a.used <= u64::from(budget));
                prop_assert_eq!(recount(&blocks, &a, base), a.used);
                for (bi, b) in blocks.iter().enumerate() {
                    for (ui, u) in b.units.iter().enumerate() {
                        if u.reserved_in(b) {
                            prop_assert_eq!(a.forms[bi][ui], Form::Full, "reserved unit {} of block {}", ui, bi);
                        }
                    }
                    // What the fill kept beside the reserved units.
                    let kept: u64 = a.costs[bi].iter().zip(&b.units).filter(|(_, u)| !u.reserved_in(b)).map(|(&c, _)| u64::from(c)).sum();
                    // A floor binds a block that lost turns (one kept whole,
                    // lightened or not, is not cut).
                    let lost = a.forms[bi].iter().zip(&b.units).any(|(f, u)| u.invalid.is_none() && !f.is_kept());
                    if b.cuttable && b.chrono.is_some() && lost {
                        prop_assert!(kept == 0 || kept >= u64::from(b.min_tokens),
                            "block {} kept {} under its floor {}", bi, kept, b.min_tokens);
                    }
                }
            }
            (p, l) => prop_assert!(false, "lightening changed the outcome: {:?} vs {:?}", p.map(|a| a.used), l.map(|a| a.used)),
        }
    }
}
