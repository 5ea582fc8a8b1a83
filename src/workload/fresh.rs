//! The fresh workload: every request brings new text, and most of what it
//! offers is kept. A retrieval chat as it arrives at the sidecar: a stable
//! system prompt, then, all new in each request, a few retrieved documents
//! (prose, every third one code), a conversation of a new user (answers
//! sometimes carrying code) and the query. Each request offers about
//! [`OFFER_PERCENT`] of its budget and caps its documents at
//! [`EVIDENCE_CEILING_PERCENT`] (the EVIDENCE block's `max_tokens`), so
//! the documents that pass the cap are dropped, lowest-scored first, the
//! conversation nearly always fits whole beside them, and most of what is offered
//! is kept: the cold path where nothing is cached and little is left
//! unmeasured, the opposite of the replay's `offer` k times the budget.
//!
//! Why a cap: without one the documents take the room first and the
//! conversation must be cut, and once turns must go the default policy's
//! conversation window cuts in steps of 30% of the budget (anchors that stay
//! put from one request of a session to the next); for a conversation new
//! in each request that leaves up to a step of the budget unused (at 32k,
//! 20-29% of it), and about two thirds of the offer is kept.
//!
//! Only the system prompt repeats: each request draws its text from its own
//! generator, seeded from the workload's, so no document, turn or query of
//! one request appears in another.

use std::collections::HashMap;

use super::{Rng, code, prose};
use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Principal, Segment, SegmentKind};
use crate::vocab::Role;

/// Bytes of generated prose per o200k token, times four (about 5.25).
const PROSE_BYTES_PER_4_TOKENS: usize = 21;
/// Bytes of generated code per o200k token, times ten (about 3.7).
const CODE_BYTES_PER_10_TOKENS: usize = 37;
/// The system prompt's share of the budget, in percent.
const SYSTEM_PERCENT: usize = 8;
/// The documents' share of the budget, in percent: more than they may take.
const EVIDENCE_PERCENT: usize = 72;
/// The documents' ceiling (the EVIDENCE block's `max_tokens`), in percent
/// of the budget: as a retrieval caller caps its documents, so that the
/// conversation fits whole beside them.
pub const EVIDENCE_CEILING_PERCENT: usize = 60;
/// The conversation's share of the budget, in percent.
const TURNS_PERCENT: usize = 32;
/// What a request offers, in percent of its budget (content tokens: the
/// system prompt, documents, turns; the query adds a few tokens).
pub const OFFER_PERCENT: usize = SYSTEM_PERCENT + EVIDENCE_PERCENT + TURNS_PERCENT;
/// Bytes of a query, about.
const QUERY_BYTES: usize = 160;

/// Prose of about `tokens` o200k tokens.
fn prose_tokens(rng: &mut Rng, tokens: usize) -> String {
    prose(rng, tokens * PROSE_BYTES_PER_4_TOKENS / 4)
}

/// Code of about `tokens` o200k tokens.
fn code_tokens(rng: &mut Rng, tokens: usize) -> String {
    code(rng, tokens * CODE_BYTES_PER_10_TOKENS / 10)
}

/// The shape of a fresh workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fresh {
    /// Requests (each a new user's, with new documents and turns).
    pub requests: usize,
    /// The request budget (`max_input_tokens`).
    pub budget: u32,
    /// The generator seed.
    pub seed: u64,
}

impl Fresh {
    /// The budgets measured: 4k and 32k.
    pub const BUDGETS: [u32; 2] = [4_000, 32_000];
    /// Requests in the workload when not said otherwise.
    pub const REQUESTS: usize = 200;

    /// Documents per request: 10 at 4k, 14 at 32k.
    pub fn documents(&self) -> usize {
        10 + (self.budget as usize / 8_000).min(8)
    }

    /// Conversation turns per request (user first, even): 6 at 4k, 12 at
    /// 32k.
    pub fn turns(&self) -> usize {
        2 * (3 + (self.budget as usize / 10_000).min(12))
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} fresh requests of a {}-token budget: a stable system prompt, then all new in each request {} \
             documents (every third code; at most {}% of the budget), {} turns and the query; about {}% of \
             the budget offered",
            self.requests,
            self.budget,
            self.documents(),
            EVIDENCE_CEILING_PERCENT,
            self.turns(),
            OFFER_PERCENT
        )
    }

    /// The requests, in order. Deterministic in the shape.
    pub fn requests(&self) -> Vec<AssembleRequest> {
        let budget = (self.budget as usize).max(500);
        let system = prose_tokens(&mut Rng::new(self.seed), budget * SYSTEM_PERCENT / 100);
        let mut seeds = Rng::new(self.seed ^ 0x6672_6573_685f_7772);
        (0..self.requests)
            .map(|n| self.request(n, &system, &mut Rng::new(seeds.next_u64())))
            .collect()
    }

    /// Request `n`, its text drawn from `rng`.
    fn request(&self, n: usize, system: &str, rng: &mut Rng) -> AssembleRequest {
        let budget = (self.budget as usize).max(500);
        // Each size varies by up to 15% either way around its share.
        let vary = |rng: &mut Rng, tokens: usize| tokens * 85 / 100 + rng.below(tokens * 30 / 100 + 1);
        let docs = self.documents();
        let evidence = (0..docs)
            .map(|d| {
                let tokens = vary(rng, budget * EVIDENCE_PERCENT / 100 / docs);
                let content = if d % 3 == 2 {
                    code_tokens(rng, tokens)
                } else {
                    prose_tokens(rng, tokens)
                };
                Item {
                    id: format!("doc-{d}"),
                    content,
                    score: 0.95 - d as f64 / (2 * docs) as f64 - rng.below(100) as f64 / 10_000.0,
                    source: format!("kb/{n}-{d}.md"),
                    ..Item::default()
                }
            })
            .collect();
        let turns = self.turns();
        let conversation = (0..turns)
            .map(|t| {
                let tokens = vary(rng, budget * TURNS_PERCENT / 100 / turns);
                let (role, content) = if t % 2 == 0 {
                    // Questions are short; the answers carry the rest.
                    (Role::User, prose_tokens(rng, tokens / 3))
                } else if t % 4 == 3 {
                    let text = prose_tokens(rng, tokens * 2 / 3);
                    let snippet = code_tokens(rng, tokens);
                    (Role::Assistant, format!("{text}\n```\n{snippet}```\n"))
                } else {
                    (Role::Assistant, prose_tokens(rng, tokens * 5 / 3))
                };
                Item {
                    id: format!("t{t}"),
                    role: Some(role),
                    content,
                    ..Item::default()
                }
            })
            .collect();
        AssembleRequest {
            request_id: format!("fresh-{n}"),
            model: "gpt-4o".to_owned(),
            max_input_tokens: Some(self.budget),
            static_segments: vec![Segment {
                id: "system".to_owned(),
                kind: SegmentKind::System,
                content: system.to_owned(),
            }],
            blocks: vec![
                Block {
                    max_tokens: self.budget * EVIDENCE_CEILING_PERCENT as u32 / 100,
                    ..Block::new("evidence", BlockKind::Evidence, evidence)
                },
                Block::new("conversation", BlockKind::RecentTurns, conversation),
            ],
            query: format!("Request {n}: {}", prose(rng, QUERY_BYTES).trim_end()),
            principal: Principal {
                id: format!("user-{n}"),
                scopes: Vec::new(),
            },
            session_id: format!("fresh-{n}"),
            ..AssembleRequest::default()
        }
    }
}

/// What a request offers, in content tokens (framing excluded): its static
/// segments and query, which are always kept, and each item's full form, by
/// id. A kept share is measured against it: an answer's kept items (every
/// item of this workload is kept whole or dropped: no compact forms, no
/// summary) over the whole offer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offer {
    /// The static segments and the query: tokens, and how many texts.
    fixed: (u64, u64),
    /// Each item's tokens, by id.
    items: HashMap<String, u32>,
}

impl Offer {
    /// The offer of `req`, counted with `count` (the request's tokenizer).
    pub fn of(req: &AssembleRequest, count: impl Fn(&str) -> u32) -> Offer {
        let fixed = req
            .static_segments
            .iter()
            .map(|s| &s.content)
            .chain(std::iter::once(&req.query))
            .fold((0, 0), |(tokens, texts), t| {
                (tokens + u64::from(count(t)), texts + 1)
            });
        let items = req
            .blocks
            .iter()
            .flat_map(|b| b.items.iter().map(|i| (i.id.clone(), count(&i.content))))
            .collect();
        Offer { fixed, items }
    }

    /// Content tokens offered.
    pub fn total(&self) -> u64 {
        self.measure([], 0).0
    }

    /// Content tokens offered and kept by an answer that kept the items
    /// `kept_ids` (an id not offered counts nothing), when every text was
    /// sent with `prefix` more tokens before it (a cold run's nonce; 0 for
    /// none).
    pub fn measure<'a>(&self, kept_ids: impl IntoIterator<Item = &'a str>, prefix: u32) -> (u64, u64) {
        let with = |tokens: u32| u64::from(tokens) + u64::from(prefix);
        let fixed = self.fixed.0 + self.fixed.1 * u64::from(prefix);
        let offered = fixed + self.items.values().map(|&t| with(t)).sum::<u64>();
        let kept = fixed
            + kept_ids
                .into_iter()
                .filter_map(|id| self.items.get(id))
                .map(|&t| with(t))
                .sum::<u64>();
        (offered, kept)
    }
}

#[cfg(test)]
mod tests;
