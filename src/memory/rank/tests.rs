use proptest::prelude::*;

use super::*;

fn candidate(seq: i64, created_at_ms: i64, relevance: f64) -> Candidate {
    Candidate {
        id: crate::memory::MemoryId::stored(format!("{seq:032x}")),
        seq,
        memory_type: "decision".into(),
        title: String::new(),
        body: String::new(),
        created_at_ms,
        relevance,
    }
}

const DAY: i64 = 86_400_000;
const WEEK: Duration = Duration::from_secs(7 * 86_400);

#[test]
fn terms_are_words_lower_cased_without_stop_words_or_syntax() {
    assert_eq!(
        terms("How do I refresh the JWT? NEAR(\"x\" OR y*) jwt"),
        ["refresh", "jwt", "near", "x", "y"]
    );
    assert_eq!(terms("Überprüfung 42"), ["überprüfung", "42"]);
    assert!(terms("!!! ... the").is_empty());
    assert_eq!(terms(&"w ".repeat(1000)).len(), 1);
    let many: String = (0..100).map(|i| format!("t{i} ")).collect();
    assert_eq!(terms(&many).len(), MAX_TERMS);
}

#[test]
fn a_relevant_old_memory_beats_an_irrelevant_new_one() {
    let now = 100 * DAY;
    let ranked = rank(
        vec![candidate(1, now - 30 * DAY, 8.0), candidate(2, now, 0.0)],
        now,
        WEEK,
        10,
    );
    assert_eq!(ranked[0].candidate.seq, 1);
}

#[test]
fn without_relevance_the_newest_come_first() {
    let now = 100 * DAY;
    let ranked = rank(
        vec![
            candidate(1, now - 3 * DAY, 0.0),
            candidate(3, now - DAY, 0.0),
            candidate(2, now - 2 * DAY, 0.0),
        ],
        now,
        WEEK,
        2,
    );
    let ids: Vec<i64> = ranked.iter().map(|r| r.candidate.seq).collect();
    assert_eq!(ids, [3, 2]);
}

/// Regression (recall once): a retry a millisecond later recalls in the
/// same order, with the same scores. The two memories below are built to
/// tie half a millisecond after `t`: scored at the exact time, the newer
/// one led at `t` and the more relevant one at `t + 1`.
#[test]
fn two_ranks_a_millisecond_apart_give_the_same_order_and_scores() {
    let t = 1000 * DAY + 7 * 3_600_000 + 1234;
    let half_life_ms = WEEK.as_millis() as f64;
    let recency = |age_ms: f64| 0.5_f64.powf(age_ms / half_life_ms);
    let (newer_at, older_at) = (t - 3_600_000, t - 30 * DAY);
    let mid = t as f64 + 0.5;
    // Relevance of the older one (relative to the anchor's 1.0) that
    // makes both score alike at `mid`.
    let tie = (1.0 - RELEVANCE_WEIGHT) * (recency(mid - newer_at as f64) - recency(mid - older_at as f64))
        / RELEVANCE_WEIGHT;
    let candidates = vec![
        candidate(1, t - 2 * DAY, 1.0),
        candidate(2, newer_at, 0.0),
        candidate(3, older_at, tie),
    ];
    let order = |r: &[Ranked]| r.iter().map(|r| (r.candidate.seq, r.score)).collect::<Vec<_>>();
    let first = rank(candidates.clone(), t, WEEK, 10);
    let retry = rank(candidates, t + 1, WEEK, 10);
    assert_eq!(order(&first), order(&retry));
}

/// Every rank within one step of the recency clock gives the same
/// order and scores; the next step may change the scores, not the
/// order of memories whose scores are far apart.
#[test]
fn ranks_within_a_step_of_the_recency_clock_agree() {
    let step = recency_step_ms(WEEK);
    let start = 5000 * step;
    let candidates: Vec<Candidate> = (0..20)
        .map(|i| candidate(i, start - i * DAY / 3, f64::from((i * 7 % 5) as u8)))
        .collect();
    let at = |t: i64| rank(candidates.clone(), t, WEEK, usize::MAX);
    let first = at(start);
    for t in [start + 1, start + step / 3, start + step - 1] {
        assert_eq!(at(t), first, "at {t}");
    }
    let next = at(start + step);
    assert_ne!(next, first, "the clock moved on at the next step");
    let seqs = |r: &[Ranked]| r.iter().map(|r| r.candidate.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&next), seqs(&first));
}

/// The order is total: candidates tied on score and age (the store's
/// order of writes and the id then decide) come out alike whatever
/// order the store gave them in.
#[test]
fn the_store_s_order_of_candidates_never_changes_the_ranking() {
    let now = 100 * DAY;
    let mut candidates = vec![
        candidate(4, now - DAY, 1.0),
        candidate(9, now - DAY, 1.0),
        candidate(2, now - DAY, 1.0),
        candidate(7, now - 2 * DAY, 0.0),
        candidate(3, now - 2 * DAY, 0.0),
    ];
    // The same seq twice (no store does this): the id decides.
    let mut twin = candidate(3, now - 2 * DAY, 0.0);
    twin.id = crate::memory::MemoryId::stored(format!("{:032x}", 1));
    candidates.push(twin);
    let ids = |c: Vec<Candidate>| -> Vec<String> {
        rank(c, now, WEEK, usize::MAX)
            .into_iter()
            .map(|r| r.candidate.id.to_string())
            .collect()
    };
    let expected = ids(candidates.clone());
    assert_eq!(expected, [9, 4, 2, 7, 1, 3].map(|s: i64| format!("{s:032x}")),);
    for turn in 1..candidates.len() {
        let mut shuffled = candidates.clone();
        shuffled.rotate_left(turn);
        assert_eq!(ids(shuffled.clone()), expected, "rotated by {turn}");
        shuffled.reverse();
        assert_eq!(ids(shuffled), expected, "rotated by {turn}, reversed");
    }
}

proptest! {
    /// Ordered by score, scores in [0, 1], at most `max`, each candidate
    /// once; and monotone: more relevant at equal age, or newer at equal
    /// relevance, never ranks lower.
    #[test]
    fn ranking_is_ordered_bounded_and_monotone(
        // Ties on purpose: relevances and ages from small sets half the
        // time, so equal relevance and equal age occur in most cases.
        raw in prop::collection::vec(
            (
                prop_oneof![(0i64..4).prop_map(|d| d * 10), 0i64..1000],
                prop_oneof![(0u8..4).prop_map(f64::from), 0.0f64..50.0],
            ),
            0..40,
        ),
        max in 0usize..50,
    ) {
        let now = 1000 * DAY;
        let candidates: Vec<Candidate> = raw
            .iter()
            .enumerate()
            .map(|(i, &(days, rel))| candidate(i as i64, now - days * DAY / 10, rel))
            .collect();
        let ranked = rank(candidates.clone(), now, WEEK, max);
        prop_assert_eq!(ranked.len(), candidates.len().min(max));
        let mut ids: Vec<i64> = ranked.iter().map(|r| r.candidate.seq).collect();
        ids.sort_unstable();
        ids.dedup();
        prop_assert_eq!(ids.len(), ranked.len());
        for w in ranked.windows(2) {
            prop_assert!(w[0].score >= w[1].score);
        }
        for r in &ranked {
            prop_assert!((0.0..=1.0).contains(&r.score));
        }
        let all = rank(candidates, now, WEEK, usize::MAX);
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                let (ca, cb) = (&a.candidate, &b.candidate);
                if ca.created_at_ms == cb.created_at_ms && ca.relevance > cb.relevance {
                    prop_assert!(a.score >= b.score);
                }
                // At equal relevance the newer ranks first; at equal
                // relevance and age, the later stored (higher seq).
                if ca.relevance == cb.relevance
                    && (ca.created_at_ms, ca.seq) > (cb.created_at_ms, cb.seq)
                {
                    prop_assert!(i < j, "{:?} ranked after {:?}", ca, cb);
                }
            }
        }
    }
}
