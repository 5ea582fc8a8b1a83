//! The budget search of a template model's fit, try by try: which budget
//! follows a render over the budget or a refusal, and when it gives up.

use super::*;

/// The request's budget in these searches.
const BUDGET: u32 = 100;

/// A search before its first try, as [`fit`] starts one.
fn search() -> Search {
    Search {
        budget: BUDGET,
        allowed: BUDGET,
        tries: 0,
        over_at: u32::MAX,
        refused_at: None,
        least_over: u64::MAX,
    }
}

/// What the allocator answers when a budget leaves no room for what cannot
/// be cut.
fn no_room() -> AssembleError {
    AssembleError::BudgetOverflow {
        non_cuttable_tokens: 0,
        budget: 0,
        model: "m".to_owned(),
        needs: Box::default(),
    }
}

/// How a try under the search's current budget came out.
enum Came {
    /// Rendered to this many tokens.
    Rendered(u64),
    /// Failed with this error.
    Failed(AssembleError),
}

/// The budget after one more try that `came` out so, as [`fit`] makes
/// each: counted, asked for the next budget, which is tried unless the
/// search is exhausted (`None`: the search ends with this try).
fn try_once(s: &mut Search, came: Came) -> Option<u32> {
    s.tries += 1;
    let next = match came {
        // The search reads a try's result only when nothing rendered.
        Came::Rendered(n) => s.next(Some(n), &Err(AssembleError::Cancelled)),
        Came::Failed(e) => s.next(None, &Err(e)),
    };
    if let Some(n) = next
        && !s.exhausted(n)
    {
        s.allowed = n;
    }
    next
}

#[test]
fn a_render_within_the_budget_ends_the_search() {
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(u64::from(BUDGET))), None);
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(1)), None);
}

/// The first tries go down by what the render went over: the per-message
/// estimate is off by a few tokens, so that nearly always fits.
#[test]
fn a_render_over_the_budget_lowers_it_by_the_overshoot() {
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(110)), Some(90));
    assert!(!s.exhausted(90));
    assert_eq!(try_once(&mut s, Came::Rendered(103)), Some(87));
    assert!(!s.exhausted(87));
    assert_eq!(try_once(&mut s, Came::Rendered(100)), None);
}

/// The request's own budget leaving no room is the answer: no budget above
/// the request's is ever tried. Nor is another error searched around.
#[test]
fn a_refusal_of_the_request_budget_ends_the_search() {
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Failed(no_room())), None);
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(110)), Some(90));
    let refused = AssembleError::TemplateRefused {
        model: "m".to_owned(),
        reason: "no".to_owned(),
    };
    assert_eq!(try_once(&mut s, Came::Failed(refused)), None);
}

/// Once a lowered budget leaves no room (the overshoot was in messages a
/// cut drops), the budgets between the highest that refused and the lowest
/// that went over are bisected, until they meet.
#[test]
fn a_lowered_budget_that_leaves_no_room_is_searched_above() {
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(110)), Some(90));
    // 90 refused, 100 went over.
    assert_eq!(try_once(&mut s, Came::Failed(no_room())), Some(95));
    assert!(!s.exhausted(95));
    // 90 refused, 95 went over.
    assert_eq!(try_once(&mut s, Came::Rendered(104)), Some(92));
    assert!(!s.exhausted(92));
    // 92 refused, 95 went over.
    assert_eq!(try_once(&mut s, Came::Failed(no_room())), Some(93));
    assert!(!s.exhausted(93));
    // 92 refused, 93 went over: nothing is left between them.
    let next = try_once(&mut s, Came::Rendered(101)).unwrap();
    assert!(s.exhausted(next), "{next} after 92 refused and 93 went over");
    assert_eq!(s.tries, 5);
}

#[test]
fn a_bisection_that_fits_ends_the_search() {
    let mut s = search();
    assert_eq!(try_once(&mut s, Came::Rendered(110)), Some(90));
    assert_eq!(try_once(&mut s, Came::Failed(no_room())), Some(95));
    assert_eq!(try_once(&mut s, Came::Rendered(99)), None);
}

/// Whatever the renders, a request makes at most `MAX_RENDER_TRIES`
/// allocations: each try over by one token lowers the budget by one.
#[test]
fn the_tries_are_bounded() {
    let mut s = search();
    for t in 1..MAX_RENDER_TRIES {
        let next = try_once(&mut s, Came::Rendered(u64::from(BUDGET) + 1)).unwrap();
        assert_eq!(next, BUDGET - t);
        assert!(!s.exhausted(next), "try {t}");
    }
    let next = try_once(&mut s, Came::Rendered(u64::from(BUDGET) + 1)).unwrap();
    assert!(s.exhausted(next));
}
