//! Deterministic synthetic workloads: prose, code and whole requests of a
//! target size, generated in-process (no data is downloaded). Used by the
//! benches, the tests and the load generator.

pub mod fresh;
pub mod replay;
pub mod sessions;

use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Principal, Segment, SegmentKind};
use crate::vocab::Role;

/// A small, fast, deterministic PRNG (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One element of `items`.
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const WORDS: &[&str] = &[
    "the",
    "customer",
    "account",
    "refund",
    "policy",
    "within",
    "thirty",
    "days",
    "order",
    "shipping",
    "invoice",
    "support",
    "ticket",
    "was",
    "opened",
    "after",
    "payment",
    "failed",
    "plan",
    "upgrade",
    "billing",
    "cycle",
    "renewal",
    "discount",
    "region",
    "warehouse",
    "delivery",
    "estimate",
    "because",
    "however",
    "therefore",
    "product",
    "version",
    "release",
    "notes",
    "describe",
    "changes",
    "to",
    "and",
    "of",
    "in",
    "for",
    "with",
    "on",
    "is",
    "are",
    "we",
    "they",
    "it",
    "this",
    "that",
    "a",
    "an",
    "Europe",
    "October",
    "API",
    "latency",
    "regression",
    "dashboard",
    "migration",
    "database",
    "index",
    "query",
];

const CODE_LINES: &[&str] = &[
    "fn handle(req: &Request) -> Result<Response, Error> {",
    "    let user = db.find_user(req.user_id)?;",
    "    if user.plan == Plan::Pro && !user.suspended {",
    "        return Ok(Response::ok(user.quota * 2));",
    "    }",
    "    for (i, item) in items.iter().enumerate() {",
    "        total += item.price * item.qty as f64;",
    "    let cfg = Config::load(\"/etc/app/config.toml\")?;",
    "    log::info!(\"processed {} items in {:?}\", n, elapsed);",
    "    match status { 200..=299 => ok(), 404 => not_found(), _ => retry() }",
    "}",
    "",
    "def refund(order_id: str, amount: float) -> dict:",
    "    return {'order': order_id, 'amount': round(amount, 2)}",
    "SELECT id, email FROM users WHERE created_at > NOW() - INTERVAL '30 days';",
];

/// English-like prose of about `bytes` bytes, in sentences and paragraphs.
pub fn prose(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        let n = 6 + rng.below(14);
        for i in 0..n {
            let w = rng.pick(WORDS);
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    s.extend(f.to_uppercase());
                    s.push_str(c.as_str());
                }
            } else {
                s.push(' ');
                s.push_str(w);
            }
            if rng.below(12) == 0 {
                s.push_str(&format!(" {}", rng.below(10_000)));
            }
        }
        s.push_str(if rng.below(8) == 0 { ".\n\n" } else { ". " });
    }
    s
}

/// Source-code-like text of about `bytes` bytes.
pub fn code(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 128);
    while s.len() < bytes {
        s.push_str(rng.pick(CODE_LINES));
        s.push('\n');
    }
    s
}

/// Shape of a synthetic request.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Approximate prompt size in tokens (about 4.5 bytes of prose per token).
    pub tokens: usize,
    /// Evidence items.
    pub evidence: usize,
    /// Conversation turns (history + recent).
    pub turns: usize,
}

impl Shape {
    /// A typical RAG-chat shape of `tokens` tokens with `items` evidence items.
    pub fn new(tokens: usize, items: usize) -> Self {
        Shape {
            tokens,
            evidence: items,
            turns: 8,
        }
    }
}

/// A request of the given shape, deterministic in `seed`: a static prefix of
/// about a tenth of the tokens, evidence for about 60%, memory, state, a
/// summary and a conversation for the rest.
pub fn request(shape: Shape, seed: u64) -> AssembleRequest {
    let mut rng = Rng::new(seed);
    let bytes = shape.tokens * 9 / 2;
    let static_bytes = bytes / 10;
    let evidence_bytes = bytes * 6 / 10 / shape.evidence.max(1);
    let turn_bytes = bytes * 2 / 10 / shape.turns.max(1);
    let static_segments = static_segments(static_bytes);
    let evidence = evidence(&mut rng, shape.evidence, evidence_bytes);
    let memory = (0..4)
        .map(|i| Item {
            id: format!("mem-{i}"),
            content: prose(&mut rng, bytes / 50),
            score: 0.5,
            ..Item::default()
        })
        .collect();
    let state = vec![Item {
        id: "state".to_owned(),
        content: format!("plan: pro\ncase: open\nregion: eu-{}", rng.below(9)),
        trusted: true,
        ..Item::default()
    }];
    let summary = vec![Item {
        id: "summary".to_owned(),
        content: prose(&mut rng, bytes / 20),
        ..Item::default()
    }];
    let (history, recent) = conversation(&mut rng, shape.turns, turn_bytes);
    let block = Block::new;
    AssembleRequest {
        request_id: format!("synthetic-{seed}"),
        model: "gpt-4o".to_owned(),
        static_segments,
        blocks: vec![
            block("state", BlockKind::State, state),
            block("evidence", BlockKind::Evidence, evidence),
            block("memory", BlockKind::Memory, memory),
            block("summary", BlockKind::Summary, summary),
            block("history", BlockKind::History, history),
            block("recent", BlockKind::RecentTurns, recent),
        ],
        query: "What does the refund policy say about annual plans bought in Europe?".to_owned(),
        principal: Principal {
            id: "user-1".to_owned(),
            scopes: vec!["support".to_owned()],
        },
        session_id: format!("session-{seed}"),
        ..AssembleRequest::default()
    }
}

/// The static prefix of a synthetic request, about `bytes` long: a system
/// prompt and an output schema, the same in every request of that size.
fn static_segments(bytes: usize) -> Vec<Segment> {
    vec![
        Segment {
            id: "system".to_owned(),
            kind: SegmentKind::System,
            content: prose(&mut Rng::new(1), bytes * 6 / 10),
        },
        Segment {
            id: "schema".to_owned(),
            kind: SegmentKind::OutputSchema,
            content: code(&mut Rng::new(2), bytes * 4 / 10),
        },
    ]
}

/// `n` evidence items of about `bytes` each, best scored first: every fourth
/// one code, every other one with a compact form.
fn evidence(rng: &mut Rng, n: usize, bytes: usize) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            id: format!("doc-{i}"),
            content: if i % 4 == 3 {
                code(rng, bytes)
            } else {
                prose(rng, bytes)
            },
            score: 1.0 - i as f64 / n.max(1) as f64,
            source: "kb".to_owned(),
            compact_form: (i % 2 == 0).then(|| prose(rng, bytes / 5)),
            ..Item::default()
        })
        .collect()
}

/// A conversation of `turns` turns of about `bytes` each, the user's first,
/// as its history (the older half) and its recent turns.
fn conversation(rng: &mut Rng, turns: usize, bytes: usize) -> (Vec<Item>, Vec<Item>) {
    let mut history: Vec<Item> = Vec::new();
    for t in 0..turns {
        let role = if t % 2 == 0 { Role::User } else { Role::Assistant };
        history.push(Item {
            id: format!("turn-{t}"),
            content: prose(rng, bytes),
            role: Some(role),
            ..Item::default()
        });
    }
    let recent = history.split_off(history.len() / 2);
    (history, recent)
}
