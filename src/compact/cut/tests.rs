use proptest::prelude::*;

use super::*;
use crate::assemble::Role;
use crate::compact::test_support::{call, result, user};

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

/// Builds a conversation from random steps: text turns, calls with one to
/// three ids, results for a random subset of pending calls (interleaved
/// with other messages), orphan results, and calls left unanswered.
fn conversation(steps: &[(u8, u8)]) -> Vec<Msg> {
    let mut msgs = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    let mut next = 0;
    for &(op, arg) in steps {
        match op % 6 {
            0 => msgs.push(user("u")),
            1 => msgs.push(Msg::text(Role::Assistant, "a")),
            2 | 3 => {
                let ids: Vec<String> = (0..=arg % 3)
                    .map(|_| {
                        next += 1;
                        format!("c{next}")
                    })
                    .collect();
                pending.extend(ids.iter().cloned());
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                msgs.push(call(&refs));
            }
            4 if !pending.is_empty() => {
                let take = 1 + usize::from(arg) % pending.len();
                let answered: Vec<String> = pending.drain(..take).collect();
                let refs: Vec<&str> = answered.iter().map(String::as_str).collect();
                msgs.push(result(&refs));
            }
            _ if arg % 7 == 0 => msgs.push(result(&["orphan"])),
            _ => msgs.push(user("u")),
        }
    }
    msgs
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
    fn every_cut_is_safe(steps in prop::collection::vec((0u8..6, any::<u8>()), 0..60), preserve in 0usize..8) {
        let msgs = conversation(&steps);
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
