//! The replay workload: F prefix families x U users x T turns, with evidence
//! drawn from a shared corpus by Zipf popularity and some families carrying a
//! per-request timestamp in their system prompt (a cache-busting value, as
//! real gateways send). Requests come in session order: a user's turns are
//! consecutive and each turn's history holds the earlier turns.
//!
//! The sizes scale with `prompt_tokens`: the generated content is a little
//! over the budget, so the allocator does real work (low-scored evidence
//! falls back to its compact form or is dropped) as it would in production.

use super::{Rng, prose};
use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Principal, Segment, SegmentKind};
use crate::vocab::Role;

/// Bytes of generated prose per token, roughly (o200k on this vocabulary).
const BYTES_PER_TOKEN: usize = 5;

/// The shape of a replay workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replay {
    /// Prefix families (distinct system prompts and policies).
    pub families: usize,
    /// Users per family.
    pub users: usize,
    /// Turns per user.
    pub turns: usize,
    /// The request budget (`max_input_tokens`) and the prompt's target size.
    pub prompt_tokens: usize,
    /// Documents in the shared evidence corpus.
    pub corpus: usize,
    /// Evidence items per request (at `offer` 1).
    pub evidence_per_request: usize,
    /// How many budgets of content a request offers, roughly: 1 is a little
    /// over the budget; each step adds a budget's worth of evidence items
    /// of the same size (8 offers about 8x the budget).
    pub offer: usize,
    /// Zipf exponent of document popularity.
    pub zipf_s: f64,
    /// Every n-th family has a timestamp in its system prompt (0 = none).
    pub volatile_every: usize,
    /// The generator seed.
    pub seed: u64,
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            families: 8,
            users: 100,
            turns: 6,
            prompt_tokens: 8_000,
            corpus: 500,
            evidence_per_request: 6,
            offer: 1,
            zipf_s: 1.1,
            volatile_every: 4,
            seed: 7,
        }
    }
}

/// One request of the replay and the family it belongs to.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// Index of the prefix family.
    pub family: usize,
    /// The request.
    pub request: AssembleRequest,
}

impl Replay {
    /// Requests in the workload.
    pub fn len(&self) -> usize {
        self.families * self.users * self.turns
    }

    /// Whether the workload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Evidence items per request: each document is about 45% /
    /// `evidence_per_request` of the budget, and each step of `offer` adds a
    /// budget's worth.
    pub fn evidence_items(&self) -> usize {
        self.evidence_per_request * (45 + 100 * self.offer.max(1).saturating_sub(1)) / 45
    }

    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        format!(
            "{} families x {} users x {} turns = {} requests of a {}-token budget; evidence {} of {} documents \
             (Zipf s={}); every {}th family has a timestamp in its system prompt{}",
            self.families,
            self.users,
            self.turns,
            self.len(),
            self.prompt_tokens,
            self.evidence_items(),
            self.corpus,
            self.zipf_s,
            self.volatile_every,
            if self.offer > 1 {
                format!("; offers about {}x the budget", self.offer)
            } else {
                String::new()
            }
        )
    }

    /// The requests, in session order. Deterministic in the shape.
    pub fn requests(&self) -> Vec<Replayed> {
        let mut rng = Rng::new(self.seed);
        let bytes = self.prompt_tokens.max(200) * BYTES_PER_TOKEN;
        // A static prefix of about 35% + 10%, evidence about 45%, history
        // growing by about 4% a turn: over the budget from the third turn.
        let doc_bytes = bytes * 45 / 100 / self.evidence_per_request.max(1);
        let corpus = Corpus::new(&mut rng, self.corpus.max(1), doc_bytes, self.zipf_s);
        let evidence_items = self.evidence_items();
        let prefixes: Vec<(String, String)> = (0..self.families)
            .map(|_| (prose(&mut rng, bytes * 35 / 100), prose(&mut rng, bytes / 10)))
            .collect();
        let mut out = Vec::with_capacity(self.len());
        let mut clock = 1_795_300_000u64;
        for (f, (system, policy)) in prefixes.iter().enumerate() {
            for u in 0..self.users {
                let mut history: Vec<Item> = Vec::new();
                for t in 0..self.turns {
                    clock += 7;
                    let mut system = system.clone();
                    if self.volatile_every > 0 && f % self.volatile_every == self.volatile_every - 1 {
                        system.push_str(&format!(" Current time: {clock}."));
                    }
                    let evidence = corpus.draw(&mut rng, evidence_items);
                    let query = format!("user {u} turn {t}: {}", prose(&mut rng, 120));
                    let blocks = vec![
                        Block::new("evidence", BlockKind::Evidence, evidence),
                        Block::new("history", BlockKind::RecentTurns, history.clone()),
                    ];
                    out.push(Replayed {
                        family: f,
                        request: self.request((f, u, t), prefix(system, policy), blocks, query.clone()),
                    });
                    history.push(Item {
                        id: format!("t{t}-q"),
                        role: Some(Role::User),
                        content: query,
                        ..Item::default()
                    });
                    history.push(Item {
                        id: format!("t{t}-a"),
                        role: Some(Role::Assistant),
                        content: prose(&mut rng, bytes * 4 / 100),
                        ..Item::default()
                    });
                }
            }
        }
        out
    }

    /// The request of family `f`'s user `u` at turn `t`.
    fn request(
        &self,
        (f, u, t): (usize, usize, usize),
        static_segments: Vec<Segment>,
        blocks: Vec<Block>,
        query: String,
    ) -> AssembleRequest {
        AssembleRequest {
            request_id: format!("f{f}-u{u}-t{t}"),
            model: "gpt-4o".to_owned(),
            max_input_tokens: Some(self.prompt_tokens as u32),
            static_segments,
            blocks,
            query,
            principal: Principal {
                id: format!("user-{u}"),
                scopes: Vec::new(),
            },
            session_id: format!("f{f}-u{u}"),
            prefix_family: format!("family-{f}"),
            ..AssembleRequest::default()
        }
    }
}

/// A family's static prefix: its system prompt, then its policy.
fn prefix(system: String, policy: &str) -> Vec<Segment> {
    vec![
        Segment {
            id: "system".to_owned(),
            kind: SegmentKind::System,
            content: system,
        },
        Segment {
            id: "policy".to_owned(),
            kind: SegmentKind::Policy,
            content: policy.to_owned(),
        },
    ]
}

/// The shared evidence corpus: its documents, their compact forms (the
/// first fifth) and the cumulative Zipf popularity of their ranks.
struct Corpus {
    docs: Vec<String>,
    compact: Vec<String>,
    cdf: Vec<f64>,
}

impl Corpus {
    /// `n` documents of about `doc_bytes`, popular by Zipf exponent `s`.
    fn new(rng: &mut Rng, n: usize, doc_bytes: usize, s: f64) -> Self {
        let docs: Vec<String> = (0..n).map(|_| prose(rng, doc_bytes)).collect();
        let compact: Vec<String> = docs
            .iter()
            .map(|doc| doc.chars().take(doc.len() / 5).collect())
            .collect();
        let cdf = zipf_cdf(docs.len(), s);
        Corpus { docs, compact, cdf }
    }

    /// `n` evidence items of documents drawn by popularity, scored by rank
    /// in the request; every other one has its compact form.
    fn draw(&self, rng: &mut Rng, n: usize) -> Vec<Item> {
        (0..n)
            .map(|e| {
                let x = (rng.next_u64() % 1_000_000) as f64 / 1_000_000.0;
                let doc = self.cdf.partition_point(|&c| c < x).min(self.docs.len() - 1);
                Item {
                    id: format!("doc-{doc}-{e}"),
                    content: self.docs[doc].clone(),
                    score: 1.0 / (1.0 + e as f64),
                    source: format!("kb/{doc}.md"),
                    compact_form: (e % 2 == 1).then(|| self.compact[doc].clone()),
                    ..Item::default()
                }
            })
            .collect()
    }
}

/// The cumulative distribution of Zipf popularity over `n` ranks.
fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_in_session_order_and_near_the_budget() {
        let shape = Replay {
            families: 2,
            users: 2,
            turns: 4,
            prompt_tokens: 4_000,
            ..Replay::default()
        };
        let a = shape.requests();
        let b = shape.requests();
        assert_eq!(a.len(), shape.len());
        assert!(a.iter().zip(&b).all(|(x, y)| x.request == y.request));
        // A user's turns are consecutive and each carries the earlier turns.
        let turns: Vec<usize> = a[..4].iter().map(|r| r.request.blocks[1].items.len()).collect();
        assert_eq!(turns, vec![0, 2, 4, 6]);
        // The generated text is within a factor of the target size.
        let bytes: usize = a[3]
            .request
            .static_segments
            .iter()
            .map(|s| s.content.len())
            .chain(
                a[3].request
                    .blocks
                    .iter()
                    .flat_map(|b| b.items.iter().map(|i| i.content.len())),
            )
            .sum();
        let tokens = bytes / BYTES_PER_TOKEN;
        assert!((3_000..6_000).contains(&tokens), "{tokens}");
    }

    #[test]
    fn offering_k_budgets_adds_k_minus_one_budgets_of_evidence() {
        let evidence_tokens = |offer: usize| {
            let shape = Replay {
                families: 1,
                users: 1,
                turns: 1,
                prompt_tokens: 4_000,
                offer,
                ..Replay::default()
            };
            let r = &shape.requests()[0].request;
            assert_eq!(r.blocks[0].items.len(), shape.evidence_items());
            r.blocks[0].items.iter().map(|i| i.content.len()).sum::<usize>() / BYTES_PER_TOKEN
        };
        let one = evidence_tokens(1);
        for offer in [2, 4, 8] {
            let extra = evidence_tokens(offer) - one;
            let budgets = extra as f64 / 4_000.0;
            // Within a tenth: the documents are a little longer than asked.
            let want = (offer - 1) as f64;
            assert!(
                (budgets - want).abs() <= 0.1 * want,
                "offer {offer}: {budgets} budgets more"
            );
        }
    }

    #[test]
    fn zipf_cdf_ends_at_one_and_favours_low_ranks() {
        let cdf = zipf_cdf(100, 1.1);
        assert!((cdf[99] - 1.0).abs() < 1e-9);
        assert!(cdf[0] > 0.1);
        assert!(cdf.windows(2).all(|w| w[0] <= w[1]));
    }
}
