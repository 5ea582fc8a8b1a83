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
