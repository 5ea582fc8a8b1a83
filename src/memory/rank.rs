//! Ranking recall candidates: full-text relevance (normalized to the best
//! candidate, so both backends' scales agree) and recency (halving every
//! half-life) into one score in [0, 1], higher first; ties go to the newer.
//!
//! The ranking is deterministic, so a retry of a request recalls the same
//! memories in the same order and its prompt is byte for byte the same:
//! - Recency is scored on a clock that moves in steps
//!   ([`recency_clock`]), not at the request's millisecond: every rank
//!   within one step gives the same scores (a millisecond apart, test
//!   `two_ranks_a_millisecond_apart_give_the_same_order_and_scores`).
//! - Every tie is broken by a total order (newer first, then later stored,
//!   then the lower id), so the order in which the store returns the
//!   candidates never matters (test
//!   `the_store_s_order_of_candidates_never_changes_the_ranking`).

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

/// Steps of the recency clock in a half-life (see [`recency_clock`]).
pub const RECENCY_STEPS_PER_HALF_LIFE: u32 = 64;

/// The length of a step of the recency clock: 1/64 of the half-life (2 h
/// 37 min 30 s at the default week, 56.25 s at the shortest configurable
/// half-life, an hour), at least 1 ms.
pub fn recency_step_ms(half_life: Duration) -> i64 {
    let step = half_life.as_millis() / u128::from(RECENCY_STEPS_PER_HALF_LIFE);
    i64::try_from(step).unwrap_or(i64::MAX).max(1)
}

/// The time recency is scored at: `now_ms` rounded down to the start of
/// its step ([`recency_step_ms`]), steps counted from the Unix epoch, so
/// every sidecar sharing a store steps at the same instants.
///
/// Why: scored at the exact millisecond, every memory's recency shrinks a
/// little between a request and its retry, by the same factor for all, and
/// that can swap two memories whose scores nearly tie (one more relevant,
/// the other newer): the retry's prompt differs. Within a step the scores
/// are identical. Crossing into the next step shrinks each recency by a
/// factor of at least 2^(-1/64), which can only swap two memories whose
/// scores were within `(1 - RELEVANCE_WEIGHT) * (1 - 2^(-1/64))` (about
/// 0.0032) of each other; a retry a few seconds later crosses with a chance of its delay over the
/// step (under 0.1% for 5 s at the default half-life). The cost: a
/// recency up to one step stale, at most 2^(1/64) (1.1%) too high, the same
/// for every memory; a memory stored within the current step has full
/// recency, and among those the newer ranks first (the tie order).
pub fn recency_clock(now_ms: i64, half_life: Duration) -> i64 {
    now_ms - now_ms.rem_euclid(recency_step_ms(half_life))
}

/// Scores and orders `candidates` at `now_ms` (on the recency clock,
/// [`recency_clock`]), keeping the best `max`. The order is total: equal
/// scores go to the newer, then to the later stored (`seq`, unique within
/// a store), then to the lower id; the candidates' order does not matter.
pub fn rank(candidates: Vec<Candidate>, now_ms: i64, half_life: Duration, max: usize) -> Vec<Ranked> {
    let now_ms = recency_clock(now_ms, half_life);
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
            .then_with(|| a.candidate.id.cmp(&b.candidate.id))
    });
    ranked.truncate(max);
    ranked
}

#[cfg(test)]
mod tests;
