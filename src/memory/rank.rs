//! Ranking recall candidates: full-text relevance (normalized to the best
//! candidate, so both backends' scales agree) and recency (halving every
//! half-life) into one score in [0, 1], higher first; ties go to the newer.

use std::time::Duration;

use super::store::Candidate;

/// Weight of relevance in the score; recency has the rest.
pub const RELEVANCE_WEIGHT: f64 = 0.7;

/// Most search terms taken from a query.
pub const MAX_TERMS: usize = 32;
/// Longest search term kept, in characters.
const MAX_TERM_CHARS: usize = 64;

/// Words too common to search for.
const STOP_WORDS: [&str; 32] = [
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "for", "from", "how", "i", "in", "is",
    "it", "me", "my", "of", "on", "or", "that", "the", "this", "to", "was", "we", "what", "with", "you",
    "your",
];

/// The search terms of a query: runs of letters and digits, lower case,
/// without stop words and repeats, at most [`MAX_TERMS`]. Nothing else of
/// the text reaches the full-text engine, so no query is its syntax.
pub fn terms(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        if out.len() == MAX_TERMS {
            break;
        }
        let word: String = word
            .chars()
            .take(MAX_TERM_CHARS)
            .flat_map(char::to_lowercase)
            .collect();
        if word.is_empty() || STOP_WORDS.contains(&word.as_str()) || out.contains(&word) {
            continue;
        }
        out.push(word);
    }
    out
}

/// A ranked candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// The candidate.
    pub candidate: Candidate,
    /// Its score in [0, 1].
    pub score: f64,
}

/// Scores and orders `candidates` at `now_ms`, keeping the best `max`.
pub fn rank(candidates: Vec<Candidate>, now_ms: i64, half_life: Duration, max: usize) -> Vec<Ranked> {
    let best = candidates
        .iter()
        .map(|c| c.relevance)
        .filter(|r| r.is_finite())
        .fold(0.0_f64, f64::max);
    let half_life_ms = (half_life.as_millis() as f64).max(1.0);
    let mut ranked: Vec<Ranked> = candidates
        .into_iter()
        .map(|c| {
            let relevance = if best > 0.0 && c.relevance.is_finite() {
                (c.relevance / best).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let age_ms = now_ms.saturating_sub(c.created_at_ms).max(0) as f64;
            let recency = 0.5_f64.powf(age_ms / half_life_ms);
            let score = RELEVANCE_WEIGHT * relevance + (1.0 - RELEVANCE_WEIGHT) * recency;
            Ranked { candidate: c, score }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.candidate.created_at_ms.cmp(&a.candidate.created_at_ms))
            .then(b.candidate.seq.cmp(&a.candidate.seq))
    });
    ranked.truncate(max);
    ranked
}

#[cfg(test)]
mod tests {
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
}
