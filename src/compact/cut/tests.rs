use proptest::prelude::*;

use super::*;
use crate::compact::test_support::{call, conversation, result, user};
use crate::vocab::Role;

// REFERENCE section 3: preserve 2 over [user, call, result, "Done."] walks
// back to keep the call with its result: one message summarized.
#[test]
fn the_cut_walks_back_to_keep_a_call_with_its_result() {
    let msgs = [
        user("Search for files"),
        call(&["call_abc"]),
        result(&["call_abc"]),
        Msg::text(Role::Assistant, "Done."),
    ];
    let b = Boundaries::of(&msgs, 0);
    assert_eq!(b.compaction_cut(2), Some(1));
    assert_eq!(b.compaction_cut(1), Some(3));
    assert_eq!(b.compaction_cut(4), None);
}

// REFERENCE section 3 has claw-code remove 1 message here and keep the
// orphaned result, which providers reject; an orphan leaves with the oldest
// part instead.
#[test]
fn an_orphaned_result_is_never_kept_after_a_cut() {
    let msgs = [
        user("hi"),
        Msg::text(Role::Assistant, "looking"),
        result(&["gone"]),
        Msg::text(Role::Assistant, "recent"),
    ];
    let b = Boundaries::of(&msgs, 0);
    assert_eq!(b.orphans, vec!["gone".to_owned()]);
    assert_eq!(b.compaction_cut(2), Some(3));
}

#[test]
fn turns_are_dropped_whole_and_the_last_turn_stays() {
    let msgs = [
        user("a"),
        call(&["x", "y"]),
        result(&["x"]),
        result(&["y"]),
        user("b"),
        Msg::text(Role::Assistant, "c"),
    ];
    let b = Boundaries::of(&msgs, 0);
    assert_eq!(b.after_turns(0, 2), Some(4));
    assert_eq!(b.after_turns(4, 2), Some(5));
    assert_eq!(b.after_turns(5, 2), None);
}

/// Whether cutting before `k` keeps every kept result with its call and
/// every summarized call without a kept result (checked by brute force).
fn cut_is_safe(msgs: &[Msg], k: usize) -> bool {
    let kept = &msgs[k..];
    let results_have_calls = kept.iter().enumerate().all(|(j, m)| {
        m.tool_results()
            .all(|id| kept[..=j].iter().any(|c| c.tool_uses().any(|u| u == id)))
    });
    let calls_kept_whole = msgs[..k].iter().all(|m| {
        m.tool_uses()
            .all(|id| !kept.iter().any(|r| r.tool_results().any(|x| x == id)))
    });
    results_have_calls && calls_kept_whole
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_cut_is_safe(steps in prop::collection::vec((0u8..7, any::<u8>(), any::<u16>()), 0..60), preserve in 0usize..8) {
        let msgs = conversation(&steps, &mut 0);
        let b = Boundaries::of(&msgs, 0);
        for k in 0..=msgs.len() {
            if k > 0 && b.is_clean(k) {
                prop_assert!(cut_is_safe(&msgs, k), "boundary {k} called clean");
            }
        }
        if let Some(k) = b.compaction_cut(preserve) {
            prop_assert!(k > 0 && k <= msgs.len());
            prop_assert!(cut_is_safe(&msgs, k));
            let first_is_result = msgs.get(k).is_some_and(Msg::has_tool_result);
            prop_assert!(!first_is_result, "kept part begins with a tool result");
            // The latest safe cut that keeps `preserve`, when one exists.
            let naive = msgs.len() - preserve;
            if k <= naive {
                prop_assert!((k + 1..=naive).all(|x| !cut_is_safe(&msgs, x)));
            } else {
                prop_assert!((1..=naive).all(|x| !cut_is_safe(&msgs, x)));
            }
        } else {
            prop_assert!(msgs.len() <= preserve);
        }
        let mut at = 0;
        while let Some(k) = b.after_turns(at, 2) {
            prop_assert!(k > at && cut_is_safe(&msgs, k));
            prop_assert!(!msgs[k].has_tool_result());
            at = k;
        }
    }
}
