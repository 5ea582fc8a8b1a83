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
mod tests;
