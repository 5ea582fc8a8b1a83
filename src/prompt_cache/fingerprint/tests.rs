use proptest::prelude::*;

use super::*;

const H: u64 = 0x5eed;

/// An owned part, so a test can build a prompt and edit a copy.
#[derive(Debug, Clone)]
struct Owned {
    kind: PartKind,
    id: String,
    hash: u64,
    tokens: u32,
    volatile: bool,
}

fn own(kind: PartKind, id: &str, hash: u64, tokens: u32) -> Owned {
    Owned {
        kind,
        id: id.to_owned(),
        hash,
        tokens,
        volatile: false,
    }
}

/// The parts, with message indexes as the assembler gives them: the tools in
/// no message of their own, context items sharing one.
fn view(owned: &[Owned]) -> Vec<Part<'_>> {
    let mut next = 0u32;
    let mut context = None;
    owned
        .iter()
        .map(|o| {
            let message_index = match o.kind.region() {
                Region::Tools => 0,
                Region::Context => *context.get_or_insert_with(|| {
                    next += 1;
                    next - 1
                }),
                _ => {
                    context = None;
                    next += 1;
                    next - 1
                }
            };
            Part {
                kind: o.kind,
                id: &o.id,
                hash: o.hash,
                tokens: o.tokens,
                message_index,
                volatile: o.volatile,
            }
        })
        .collect()
}

fn tokens_before(owned: &[Owned], k: usize) -> u32 {
    owned.iter().take(k).map(|o| o.tokens).sum()
}

/// Where `next` first differs from `prev`, fingerprinted from `min_level`.
fn diverge_at(prev: &[Owned], next: &[Owned], min_level: u8) -> Divergence {
    let fp = encode(H, &view(prev), min_level);
    diverge(&fp, H, &view(next)).unwrap()
}

fn check(prev: &[Owned], next: &[Owned]) -> Divergence {
    diverge_at(prev, next, 0)
}

/// Tools, two static segments, a summary, four turns, four context items and
/// the query.
fn base() -> Vec<Owned> {
    use PartKind::*;
    vec![
        own(Tools, "", 1, 300),
        own(System, "sys", 2, 500),
        own(Examples, "ex", 3, 200),
        own(Summary, "", 4, 100),
        own(Turn, "t1", 11, 40),
        own(Turn, "t2", 12, 50),
        own(Turn, "t3", 13, 60),
        own(Turn, "t4", 14, 70),
        own(Evidence, "e1", 21, 80),
        own(Memory, "m1", 22, 30),
        own(Memory, "m2", 23, 30),
        own(State, "s1", 24, 10),
        own(Query, "", 31, 20),
    ]
}

fn position(owned: &[Owned], id: &str) -> usize {
    owned.iter().position(|o| o.id == id).unwrap()
}

#[test]
fn identical_prompts_do_not_diverge() {
    let d = check(&base(), &base());
    assert_eq!(d.change, Change::None);
    assert_eq!(d.kind, None);
    assert_eq!(d.part_index, 13);
    assert_eq!(d.token_offset, tokens_before(&base(), 13));
}

#[test]
fn a_changed_header_is_a_model_change() {
    let fp = fingerprint(H, &view(&base()));
    let d = diverge(&fp, H + 1, &view(&base())).unwrap();
    assert_eq!(d.change, Change::ModelChanged);
    assert_eq!((d.kind, d.token_offset), (Some(PartKind::Tools), 0));
}

#[test]
fn a_changed_tool_is_a_tools_change() {
    let mut next = base();
    next[0].hash ^= 1;
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::ToolsChanged);
    assert_eq!(
        (d.kind, d.part_index, d.token_offset),
        (Some(PartKind::Tools), 0, 0)
    );
}

#[test]
fn a_timestamp_in_the_system_prompt_is_a_volatile_value() {
    let mut next = base();
    next[1].hash ^= 1;
    next[1].volatile = true;
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::VolatileValue);
    assert_eq!((d.id.as_str(), d.message_index, d.token_offset), ("sys", 0, 300));
}

#[test]
fn an_edited_examples_segment_is_a_system_change() {
    let mut next = base();
    next[2].hash ^= 1;
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::SystemChanged);
    assert_eq!((d.id.as_str(), d.token_offset), ("ex", 800));
}

#[test]
fn dropping_and_summarizing_leading_turns_is_a_window_step() {
    let prev = base();
    let mut next = base();
    next.drain(4..6);
    next[3].hash = 99;
    let d = check(&prev, &next);
    assert_eq!(d.change, Change::WindowStep);
    assert_eq!((d.kind, d.token_offset), (Some(PartKind::Summary), 1000));
    // Without touching the summary, at the first kept turn.
    let mut next = base();
    next.remove(4);
    let d = check(&prev, &next);
    assert_eq!(d.change, Change::WindowStep);
    assert_eq!((d.id.as_str(), d.token_offset), ("t2", 1100));
}

#[test]
fn a_rewritten_summary_over_the_same_turns_is_a_summary_change() {
    let mut next = base();
    next[3].hash = 99;
    assert_eq!(check(&base(), &next).change, Change::SummaryChanged);
}

#[test]
fn a_removed_or_edited_turn_is_a_turn_change() {
    let mut next = base();
    next.remove(position(&next, "t2"));
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::TurnChanged);
    assert_eq!((d.id.as_str(), d.token_offset), ("t3", 1140));
    let mut next = base();
    next[7].hash = 77;
    let d = check(&base(), &next);
    assert_eq!((d.change, d.id.as_str()), (Change::TurnChanged, "t4"));
}

#[test]
fn new_turns_after_the_conversation_are_appended() {
    let mut next = base();
    let at = position(&next, "e1");
    next.insert(at, own(PartKind::Turn, "t5", 15, 5));
    next.insert(at + 1, own(PartKind::Turn, "t6", 16, 6));
    next.last_mut().unwrap().hash = 32;
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::Appended);
    assert_eq!(
        (d.id.as_str(), d.token_offset),
        ("t5", tokens_before(&base(), at))
    );
    // Grouped, the last turn group extends and the report is still exact.
    for level in [1, 5, MAX_LEVEL] {
        let d = diverge_at(&base(), &next, level);
        assert_eq!(d.change, Change::Appended, "level {level}");
        assert_eq!(d.token_offset, tokens_before(&base(), at), "level {level}");
    }
}

#[test]
fn a_new_evidence_item_is_an_added_item() {
    let mut next = base();
    next.insert(position(&next, "e1") + 1, own(PartKind::Evidence, "e2", 25, 90));
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::ItemAdded);
    assert_eq!((d.kind, d.id.as_str()), (Some(PartKind::Evidence), "e2"));
    assert_eq!(d.token_offset, tokens_before(&base(), 9));
}

#[test]
fn a_reordered_memory_is_a_reordered_item() {
    let mut next = base();
    next.swap(9, 10);
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::ItemReordered);
    assert_eq!((d.id.as_str(), d.token_offset), ("m2", tokens_before(&base(), 9)));
}

#[test]
fn a_removed_memory_is_a_removed_item() {
    let mut next = base();
    next.remove(9);
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::ItemRemoved);
    assert_eq!(d.id, "m2");
    // The whole context gone: the query is where it was.
    let mut next = base();
    next.drain(8..12);
    let d = check(&base(), &next);
    assert_eq!((d.change, d.kind), (Change::ItemRemoved, Some(PartKind::Query)));
}

#[test]
fn a_new_query_is_a_query_change() {
    let mut next = base();
    next[12].hash = 32;
    let d = check(&base(), &next);
    assert_eq!(d.change, Change::QueryChanged);
    assert_eq!(d.token_offset, tokens_before(&base(), 12));
}

#[test]
fn thousands_of_parts_fit_in_the_budget() {
    use PartKind::*;
    let kinds = [System, Turn, Evidence, Memory, State];
    for kind in kinds {
        let prompt: Vec<Owned> = (0..5000u64)
            .map(|i| own(kind, "", i.wrapping_mul(0x9e37_79b9), 100))
            .collect();
        let fp = fingerprint(H, &view(&prompt));
        assert!(fp.len() <= MAX_BYTES, "{kind:?}: {} bytes", fp.len());
        let d = diverge(&fp, H, &view(&prompt)).unwrap();
        assert_eq!((d.change, d.token_offset), (Change::None, 500_000));
    }
}

/// 400 turns between three static segments and ten context items.
fn long() -> Vec<Owned> {
    use PartKind::*;
    let mut out = vec![
        own(Tools, "", 1, 900),
        own(System, "sys", 2, 500),
        own(Examples, "ex", 3, 200),
    ];
    out.extend((0..400u64).map(|i| own(Turn, "t", (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15), 80)));
    out.extend((0..10u64).map(|i| own(Memory, "m", 1000 + i, 40)));
    out.push(own(Query, "", 7, 30));
    out
}

#[test]
fn a_long_conversation_is_grouped_and_still_reads_steps_and_appends() {
    let prev = long();
    let fp = fingerprint(H, &view(&prev));
    let decoded = decode(&fp).unwrap();
    assert!(decoded.level > 0, "grouped");
    assert!(decoded.entries.iter().all(|e| !e.rest), "not truncated");
    // The window drops 37 turns and a summary takes their place.
    let mut next = prev.clone();
    next.drain(3..40);
    next.insert(3, own(PartKind::Summary, "", 5, 300));
    let d = diverge(&fp, H, &view(&next)).unwrap();
    assert_eq!((d.change, d.token_offset), (Change::WindowStep, 1600));
    // Two turns appended: reported exactly where they start.
    let mut next = prev.clone();
    next.insert(403, own(PartKind::Turn, "t401", 401, 10));
    next.insert(404, own(PartKind::Turn, "t402", 402, 10));
    let d = diverge(&fp, H, &view(&next)).unwrap();
    assert_eq!((d.change, d.id.as_str()), (Change::Appended, "t401"));
    assert_eq!(d.token_offset, tokens_before(&prev, 403));
}

/// Parts folded to fingerprint `owned` and compare it with itself.
fn folds(owned: &[Owned]) -> usize {
    FOLDS.with(|c| c.set(0));
    let parts = view(owned);
    let fp = fingerprint(H, &parts);
    let d = diverge(&fp, H, &parts).unwrap();
    assert_eq!(d.change, Change::None);
    FOLDS.with(|c| c.get())
}

#[test]
fn the_work_is_linear_in_the_parts() {
    use PartKind::*;
    // Turns grouped, static segments truncated, and runs of one part that no
    // level groups (each level tried stops at the budget).
    let shapes: [fn(u64) -> PartKind; 3] = [|_| Turn, |_| System, |i| if i % 2 == 0 { Turn } else { Memory }];
    for shape in shapes {
        let prompt = |n: u64| -> Vec<Owned> {
            (0..n)
                .map(|i| own(shape(i), "", (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15), 10))
                .collect()
        };
        let (small, large) = (folds(&prompt(1000)), folds(&prompt(8000)));
        assert!(large <= 8 * small, "{:?}: {small} then {large}", shape(1));
        assert!(large <= 6 * 8000, "{:?}: {large} folds for 8000 parts", shape(1));
    }
}

#[test]
fn unreadable_fingerprints_are_errors() {
    let owned = base();
    let parts = view(&owned);
    let fp = fingerprint(H, &parts);
    assert_eq!(diverge(&[], H, &parts), Err(FingerprintError::Malformed));
    assert_eq!(diverge(&[VERSION], H, &parts), Err(FingerprintError::Malformed));
    assert_eq!(diverge(&[7, 0], H, &parts), Err(FingerprintError::Version(7)));
    let mut long = fp.clone();
    long.resize(MAX_BYTES + 1, 0);
    assert_eq!(diverge(&long, H, &parts), Err(FingerprintError::Malformed));
    let mut bad_tag = fp.clone();
    bad_tag.push(0x4f);
    assert_eq!(diverge(&bad_tag, H, &parts), Err(FingerprintError::Malformed));
    assert!(diverge(&fp[..fp.len() - 1], H, &parts).is_err());
}

#[test]
fn labels_are_distinct() {
    let mut kinds: Vec<_> = PartKind::ALL.iter().map(|k| k.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), PartKind::ALL.len());
    let mut changes: Vec<_> = Change::ALL.iter().map(|c| c.as_str()).collect();
    changes.sort_unstable();
    changes.dedup();
    assert_eq!(changes.len(), Change::ALL.len());
}

/// A well-formed prompt: tools, static segments, a summary, turns, context
/// items and a query, each optional, with random hashes and tokens.
fn prompt() -> impl Strategy<Value = Vec<Owned>> {
    let part = || (any::<u64>(), 1..3000u32);
    (
        prop::option::of(part()),
        prop::collection::vec(part(), 0..4),
        prop::option::of(part()),
        prop::collection::vec(part(), 0..30),
        prop::collection::vec((0..3usize, part()), 0..10),
        prop::option::of(part()),
    )
        .prop_map(|(tools, statics, summary, turns, context, query)| {
            use PartKind::*;
            let mut out = Vec::new();
            out.extend(tools.map(|(h, t)| own(Tools, "", h, t)));
            for (i, (h, t)) in statics.into_iter().enumerate() {
                let kind = if i % 2 == 0 { System } else { Examples };
                out.push(own(kind, &format!("s{i}"), h, t));
            }
            out.extend(summary.map(|(h, t)| own(Summary, "", h, t)));
            for (i, (h, t)) in turns.into_iter().enumerate() {
                out.push(own(Turn, &format!("t{i}"), h, t));
            }
            for (i, (k, (h, t))) in context.into_iter().enumerate() {
                let kind = [Evidence, Memory, State][k];
                out.push(own(kind, &format!("c{i}"), h, t));
            }
            out.extend(query.map(|(h, t)| own(Query, "", h, t)));
            out
        })
}

/// Where new turns go: after the last turn, summary or static segment.
fn conversation_end(owned: &[Owned]) -> usize {
    owned
        .iter()
        .position(|o| matches!(o.kind.region(), Region::Context | Region::Query))
        .unwrap_or(owned.len())
}

proptest! {
    #[test]
    fn identical_parts_do_not_diverge(owned in prompt(), level in 0..=MAX_LEVEL) {
        let d = diverge_at(&owned, &owned, level);
        prop_assert_eq!(d.change, Change::None);
        prop_assert_eq!(d.token_offset, tokens_before(&owned, owned.len()));
    }

    #[test]
    fn a_change_is_reported_at_or_before_it(
        owned in prompt(),
        level in 0..=MAX_LEVEL,
        at in any::<prop::sample::Index>(),
        flip in 1..u64::MAX,
    ) {
        prop_assume!(!owned.is_empty());
        let k = at.index(owned.len());
        let mut next = owned.clone();
        next[k].hash ^= flip;
        let d = diverge_at(&owned, &next, level);
        prop_assert_ne!(d.change, Change::None);
        prop_assert!(d.part_index as usize <= k, "{:?} for a change at {}", d, k);
        prop_assert!(d.token_offset <= tokens_before(&owned, k));
    }

    #[test]
    fn appended_turns_are_appended(
        owned in prompt(),
        level in 0..=MAX_LEVEL,
        extra in prop::collection::vec((any::<u64>(), 1..3000u32), 1..5),
    ) {
        let at = conversation_end(&owned);
        let mut next = owned.clone();
        for (i, (h, t)) in extra.into_iter().enumerate() {
            next.insert(at + i, own(PartKind::Turn, "new", h, t));
        }
        let d = diverge_at(&owned, &next, level);
        prop_assert_eq!(d.change, Change::Appended);
        prop_assert_eq!(d.part_index as usize, at);
        prop_assert_eq!(d.token_offset, tokens_before(&owned, at));
    }

    #[test]
    fn dropped_leading_turns_are_a_window_step(
        owned in prompt(),
        level in 0..=MAX_LEVEL,
        drop in any::<prop::sample::Index>(),
        summary in prop::option::of(any::<u64>()),
    ) {
        let first = owned.iter().position(|o| o.kind == PartKind::Turn);
        let turns = owned.iter().filter(|o| o.kind == PartKind::Turn).count();
        prop_assume!(turns >= 2);
        let first = first.unwrap();
        let d = 1 + drop.index(turns - 1);
        let mut next = owned.clone();
        next.drain(first..first + d);
        if let Some(h) = summary {
            match next.iter_mut().find(|o| o.kind == PartKind::Summary) {
                Some(s) => s.hash = h,
                None => next.insert(first, own(PartKind::Summary, "", h, 50)),
            }
        }
        let div = diverge_at(&owned, &next, level);
        prop_assert_eq!(div.change, Change::WindowStep);
        prop_assert!(div.token_offset <= tokens_before(&owned, first));
    }

    #[test]
    fn any_prompt_fits_in_the_budget(
        parts in prop::collection::vec((0..9usize, any::<u64>(), any::<u32>()), 0..4000),
    ) {
        let owned: Vec<Owned> = parts
            .into_iter()
            .map(|(k, h, t)| own(PartKind::ALL[k], "", h, t))
            .collect();
        let fp = fingerprint(H, &view(&owned));
        prop_assert!(fp.len() <= MAX_BYTES);
        let d = diverge(&fp, H, &view(&owned)).unwrap();
        let total: u64 = owned.iter().map(|o| u64::from(o.tokens)).sum();
        prop_assert_eq!(d.change, Change::None);
        prop_assert_eq!(u64::from(d.token_offset), total.min(u64::from(u32::MAX)));
    }

    #[test]
    fn grouped_and_ungrouped_agree_outside_groups(
        owned in prompt(),
        level in 1..=MAX_LEVEL,
        at in any::<prop::sample::Index>(),
        flip in 1..u64::MAX,
        volatile in any::<bool>(),
    ) {
        let outside: Vec<usize> = (0..owned.len())
            .filter(|&i| !owned[i].kind.region().groupable())
            .collect();
        prop_assume!(!outside.is_empty());
        let k = outside[at.index(outside.len())];
        let mut next = owned.clone();
        next[k].hash ^= flip;
        next[k].volatile = volatile;
        prop_assert_eq!(encode(H, &view(&owned), 0)[1], 0, "fits ungrouped");
        let flat = diverge_at(&owned, &next, 0);
        let grouped = diverge_at(&owned, &next, level);
        prop_assert_eq!(flat.change, grouped.change);
    }

    #[test]
    fn decoding_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..700),
        owned in prompt(),
        cut in any::<prop::sample::Index>(),
        poke in any::<(prop::sample::Index, u8)>(),
    ) {
        let parts = view(&owned);
        let _ = diverge(&bytes, H, &parts);
        let mut fp = fingerprint(H, &parts);
        let _ = diverge(&fp[..cut.index(fp.len() + 1)], H, &parts);
        let i = poke.0.index(fp.len());
        fp[i] = poke.1;
        let _ = diverge(&fp, H, &parts);
        // A readable header with random entries after it.
        let mut forged = vec![VERSION, poke.1 % (MAX_LEVEL + 1)];
        forged.extend_from_slice(&bytes);
        let _ = diverge(&forged, H, &parts);
    }
}
