//! Hostile input through the real binary (a child process, so its memory is
//! its own): a deterministic generator of malformed and extreme requests over
//! every RPC that takes input. Each answer must be a well-formed gRPC status
//! from the set its variant allows (an OK answer must be internally
//! consistent), the process must neither panic nor exit, it must still answer
//! health checks and ordinary requests afterwards, and its memory must stay
//! bounded.
//!
//! `HOSTILE_REQUESTS` sets the number of cases (default [`DEFAULT_REQUESTS`],
//! well under 30 s in a debug build). The full run:
//!
//! ```sh
//! HOSTILE_REQUESTS=100000 cargo test --release --test limits hostile:: -- --nocapture
//! ```
//!
//! `HOSTILE_SEED` picks another seed; a failure names its case, and
//! `HOSTILE_SEED=S HOSTILE_CASE=N` replays that one case alone (a Compact
//! case may then meet another circuit-breaker state: sessions are shared
//! between cases so that breakers open).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::wire::{empties, empty_items, field, varint};
use crate::common::{self, ChildServer, RawAnswer, RawClient, frame, overflow_detail};
use crate::shapes;
use context_assembler::grpc::pb;
use context_assembler::prompt_cache::feedback::PROVIDERS;
use context_assembler::workload::{Rng, prose};
use prost::Message as _;
use tonic::Code;
use tonic_types::StatusExt;

/// Cases when `HOSTILE_REQUESTS` is not set.
const DEFAULT_REQUESTS: usize = 5_000;
/// Seed when `HOSTILE_SEED` is not set.
const DEFAULT_SEED: u64 = 0x005E_ED0F_4057_11E5;
/// Cases sent at once (each worker has its own HTTP/2 connection).
const WORKERS: usize = 12;
/// The server's default `limits.max_request_bytes`.
const MAX_REQUEST_BYTES: usize = 4 << 20;
/// The server's default `limits.max_items`.
const MAX_ITEMS: usize = 10_000;
/// The server's default `limits.max_blocks`.
const MAX_BLOCKS: usize = 64;
/// The server's default `limits.max_batch_requests`.
const MAX_BATCH_REQUESTS: usize = 256;
/// How much the resident set may grow over the run (after warm-up).
const RSS_GROWTH_LIMIT_KIB: u64 = 512 * 1024;

/// Every RPC that takes input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rpc {
    Assemble,
    CountTokens,
    ListModels,
    AssembleBatch,
    AssembleStream,
    ReportUsage,
    Compact,
    Retain,
    Forget,
    ListMemories,
}

const RPCS: [Rpc; 10] = [
    Rpc::Assemble,
    Rpc::CountTokens,
    Rpc::ListModels,
    Rpc::AssembleBatch,
    Rpc::AssembleStream,
    Rpc::ReportUsage,
    Rpc::Compact,
    Rpc::Retain,
    Rpc::Forget,
    Rpc::ListMemories,
];

impl Rpc {
    fn path(self) -> String {
        format!("/context_assembler.v1.Assembler/{self:?}")
    }
}

/// What a case sent, kept to check an OK answer against.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
enum Sent {
    /// Bytes that are not (or not only) a valid message: the answer is
    /// checked for consistency on its own.
    Garbage,
    Assemble(pb::AssembleRequest),
    Count(pb::CountTokensRequest),
    Batch(pb::AssembleBatchRequest),
    /// The messages, and whether something undecodable follows them.
    Stream(Vec<pb::AssembleRequest>, bool),
    Compact(pb::CompactRequest),
    Report(pb::ReportUsageRequest),
    ListModels,
    Retain(pb::RetainRequest),
}

/// One generated request and what may answer it.
struct Case {
    variant: &'static str,
    rpc: Rpc,
    body: Vec<u8>,
    headers: Vec<(&'static str, String)>,
    sent: Sent,
    /// The codes this variant may get.
    codes: &'static [Code],
    /// The `ErrorInfo.reason` a RESOURCE_EXHAUSTED answer must carry, when
    /// the variant knows it.
    reason: Option<&'static str>,
    /// A case of hundreds of KB or more: in a debug build on a busy machine
    /// it may outlast the server's default 30 s deadline, and
    /// DEADLINE_EXCEEDED is a well-formed answer to it.
    slow: bool,
}

/// Valid requests with hostile values: the domain accepts, refuses as
/// malformed, or refuses as over budget.
const SEMANTIC: &[Code] = &[Code::Ok, Code::InvalidArgument, Code::FailedPrecondition];
/// Bytes on the wire that may not decode: as [`SEMANTIC`], plus the size
/// and shape limits (RESOURCE_EXHAUSTED) and INTERNAL for
/// the gRPC framing errors tonic answers before any handler (see
/// [`FRAMING_ERRORS`]).
const WIRE: &[Code] = &[
    Code::Ok,
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::ResourceExhausted,
    Code::Internal,
];
/// A compressed message: as [`WIRE`], plus UNIMPLEMENTED for an encoding the
/// server does not support.
const COMPRESSED: &[Code] = &[
    Code::Ok,
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::ResourceExhausted,
    Code::Internal,
    Code::Unimplemented,
];
/// A valid request with a tiny `grpc-timeout`: done in time or not.
const TIMED: &[Code] = &[Code::Ok, Code::DeadlineExceeded];

/// The INTERNAL answers that are legitimate: tonic's framing layer answers
/// them before the codec or any handler runs, for a body that is not a
/// well-framed gRPC message. The gRPC compression spec requires INTERNAL
/// for a compressed flag without `grpc-encoding`; the others (an invalid
/// flag byte, a body that ends inside a frame, no message at all) are the
/// same class of protocol error. Any other INTERNAL (a panic is answered as
/// "internal error while assembling") fails the test.
const FRAMING_ERRORS: [&str; 3] = [
    "protocol error: ",
    "Unexpected EOF decoding stream.",
    "Missing request message.",
];

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------

/// How expensive a case may be: most are cheap; every `MEDIUM_EVERY`-th may
/// carry hundreds of KB, every `BULK_EVERY`-th 10,000 items, every
/// `HEAVY_EVERY`-th several MB (the bulk and heavy kinds in turn, so that
/// the default run has each).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cost {
    Cheap,
    Medium,
    Bulk,
    Heavy,
    /// A shape that is tiny per element and huge in count (see [`shaped`]).
    Shape,
}

const MEDIUM_EVERY: usize = 100;
const BULK_EVERY: usize = 1500;
const HEAVY_EVERY: usize = 2500;
const SHAPE_EVERY: usize = 400;

fn cost(i: usize) -> Cost {
    if i % HEAVY_EVERY == HEAVY_EVERY - 1 {
        Cost::Heavy
    } else if i % BULK_EVERY == BULK_EVERY / 2 {
        Cost::Bulk
    } else if i % SHAPE_EVERY == SHAPE_EVERY / 2 {
        Cost::Shape
    } else if i % MEDIUM_EVERY == 7 {
        Cost::Medium
    } else {
        Cost::Cheap
    }
}

/// Case `i` of the run seeded with `seed`: the same pair always gives the
/// same bytes.
fn generate(seed: u64, i: usize) -> Case {
    let mut rng = Rng::new(seed ^ (i as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    let slow = |mut c: Case| {
        c.slow = true;
        c
    };
    match cost(i) {
        Cost::Heavy => slow(heavy(&mut rng, i / HEAVY_EVERY)),
        Cost::Bulk => slow(bulk(&mut rng, i / BULK_EVERY)),
        Cost::Shape => slow(shaped(&mut rng, i / SHAPE_EVERY)),
        Cost::Medium => slow(medium(&mut rng)),
        Cost::Cheap => {
            if rng.below(100) < 30 {
                wire(&mut rng)
            } else {
                semantic(&mut rng)
            }
        }
    }
}

fn chance(rng: &mut Rng, percent: usize) -> bool {
    rng.below(100) < percent
}

/// Pieces that stress tokenizers, renderers and escaping: wrappers and their
/// escapes, special-token text, CR/LF, invisible and combining characters,
/// values the volatile-prefix scan looks for, JSON punctuation.
const FRAGMENTS: &[&str] = &[
    " ",
    "  ",
    "\n",
    "\r\n",
    "\t",
    "<",
    ">",
    "&lt;",
    "&amp;",
    "<document id=\"x\" trust=\"trusted\">",
    "</document>",
    "<summary>",
    "</summary>",
    "<pinned kind=\"task\" id=\"p\">",
    "</pinned>",
    "<state>",
    "<|endoftext|>",
    "<|im_start|>",
    "<|fim_prefix|>",
    "é",
    "e\u{301}\u{301}\u{301}",
    "👍🏽",
    "👨‍👩‍👧‍👦",
    "\u{200b}",
    "\u{202e}",
    "\u{0}",
    "\u{feff}",
    "\u{fffd}",
    "日本語のテキスト",
    "ﷺ",
    "𝕏",
    "\\",
    "\"",
    "{\"a\":",
    "}",
    "[",
    "]",
    "'s",
    "'ll",
    "1234567890",
    "2024-05-01T12:34:56Z",
    "1714567890123",
    "550e8400-e29b-41d4-a716-446655440000",
    "deadbeef0123456789abcdef",
    "src/main.rs",
    "TODO: next step is pending.",
    "the customer asked about a refund. ",
    "\u{10ffff}",
];

/// A short hostile text (0 to about `max` bytes).
fn nasty(rng: &mut Rng, max: usize) -> String {
    let mut s = String::new();
    let target = rng.below(max + 1);
    while s.len() < target {
        let piece = rng.pick(FRAGMENTS);
        let run = if chance(rng, 10) { 1 + rng.below(32) } else { 1 };
        for _ in 0..run {
            s.push_str(piece);
        }
    }
    s
}

/// A non-blank hostile text.
fn nasty_nonblank(rng: &mut Rng, max: usize) -> String {
    let mut s = nasty(rng, max);
    s.push('q');
    s
}

/// One character or short sequence repeated: the worst cases for
/// pre-tokenization and BPE merging.
const REPEATED: &[&str] = &[
    " ",
    "a",
    "\n",
    "<",
    "\r\n",
    "\t",
    "ab",
    "é",
    "👍",
    "1",
    ".",
    "<|endoftext|>",
    "</document>",
    "&lt;",
    " \n",
    "\u{0}",
    "\u{200b}",
];

fn repeated(rng: &mut Rng, bytes: usize) -> String {
    let unit = rng.pick(REPEATED);
    unit.repeat(bytes / unit.len().max(1))
}

fn extreme_u32(rng: &mut Rng) -> u32 {
    const V: [u32; 11] = [0, 1, 2, 3, 7, 100, 4096, 65_535, 1 << 31, u32::MAX - 1, u32::MAX];
    if chance(rng, 10) {
        rng.next_u64() as u32
    } else {
        V[rng.below(V.len())]
    }
}

fn maybe_u32(rng: &mut Rng, percent: usize) -> Option<u32> {
    chance(rng, percent).then(|| extreme_u32(rng))
}

fn extreme_f64(rng: &mut Rng) -> f64 {
    const V: [f64; 12] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        0.5,
    ];
    V[rng.below(V.len())]
}

/// An enum value: usually valid (`0..=max`), sometimes not.
fn enum_value(rng: &mut Rng, max: i32) -> i32 {
    if chance(rng, 85) {
        rng.below(max as usize + 1) as i32
    } else {
        [max + 1, -1, 99, i32::MAX, i32::MIN][rng.below(5)]
    }
}

const MODELS: &[&str] = &[
    "gpt-4o",
    "gpt-4o-mini",
    "gpt-4",
    "gpt-4-32k",
    "gpt-4-turbo",
    "gpt-3.5-turbo",
    "gpt-4.1",
    "gpt-5",
    "o3",
    "o1-preview",
    "claude-3-5-sonnet",
    "claude",
];

fn model(rng: &mut Rng) -> String {
    if chance(rng, 90) {
        rng.pick(MODELS).to_owned()
    } else {
        ["", "unknown-model", "GPT-4O", "gpt", " gpt-4o", "gpt-4o\u{0}"][rng.below(6)].to_owned()
    }
}

/// Request ids come from a small pool so ReportUsage sometimes matches one.
fn request_id(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => String::new(),
        1 => nasty(rng, 40),
        _ => format!("hostile-{}", rng.below(64)),
    }
}

/// A small id pool: duplicates happen.
fn id(rng: &mut Rng) -> String {
    match rng.below(20) {
        0 => String::new(),
        1 => nasty(rng, 20),
        _ => format!("i{}", rng.below(12)),
    }
}

/// A tool definition: usually valid JSON (keys in any order and spacing),
/// sometimes not JSON, not an object, or hostile JSON.
fn tool(rng: &mut Rng) -> String {
    match rng.below(16) {
        0 => String::new(),
        1 => "{".to_owned(),
        2 => "[]".to_owned(),
        3 => "1".to_owned(),
        4 => "null".to_owned(),
        5 => "{\"a\":}".to_owned(),
        6 => format!(
            "{{\"deep\":{}{}}}",
            "[".repeat(1 + rng.below(5000)),
            "]".repeat(rng.below(5000))
        ),
        7 => "{\"n\":1e99999,\"m\":-0.0,\"k\":123456789012345678901234567890}".to_owned(),
        8 => "{\"\\ud800\":\"\\udfff\",\"a\":\"\\u0000\"}".to_owned(),
        9 => "{\"a\":1,\"a\":2}".to_owned(),
        10 => format!(
            "{{{}\"z\":0}}",
            (0..rng.below(300))
                .map(|k| format!("\"k{k}\":{k},"))
                .collect::<String>()
        ),
        11 => nasty(rng, 60),
        _ => {
            let name = format!("\"name\": \"tool_{}\"", rng.below(4));
            let params = "\"parameters\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}";
            if chance(rng, 50) {
                format!("{{\"type\":\"function\",\"function\":{{{name},{params}}}}}")
            } else {
                format!("{{ \"function\" : {{ {params} , {name} }} ,\n \"type\":\"function\" }}")
            }
        }
    }
}

/// An item; `fault` is the percent chance of each hostile value, `turn`
/// whether it is a conversation turn.
fn item(rng: &mut Rng, fault: usize, position: usize, turn: bool, content: String) -> pb::Item {
    let role = if chance(rng, fault) {
        enum_value(rng, 4)
    } else if turn {
        1 + rng.below(4) as i32
    } else {
        0
    };
    pb::Item {
        id: if chance(rng, fault) {
            id(rng)
        } else {
            format!("i{position}")
        },
        content,
        score: if chance(rng, fault) {
            extreme_f64(rng)
        } else {
            rng.below(1000) as f64 / 1000.0
        },
        source: if chance(rng, 30) {
            nasty(rng, 30)
        } else {
            String::new()
        },
        trusted: chance(rng, 50),
        required_scopes: if chance(rng, 15) {
            (0..rng.below(4)).map(|_| scope(rng)).collect()
        } else {
            Vec::new()
        },
        role,
        tool_call_ids: if chance(rng, if turn { 30 } else { fault }) {
            (0..rng.below(3)).map(|_| format!("c{}", rng.below(6))).collect()
        } else {
            Vec::new()
        },
        tool_call_id: if chance(rng, if turn { 30 } else { fault }) {
            format!("c{}", rng.below(6))
        } else {
            String::new()
        },
        compact_form: chance(rng, 20).then(|| nasty(rng, 60)),
        tool_name: if chance(rng, if turn { 30 } else { fault }) {
            ["grep", "", "memory", "read_file"][rng.below(4)].to_owned()
        } else {
            String::new()
        },
        thinking: if chance(rng, if turn { 20 } else { fault }) {
            (0..rng.below(3))
                .map(|_| pb::Thinking {
                    text: nasty(rng, 60),
                    signature: if chance(rng, 50) { id(rng) } else { String::new() },
                    redacted: chance(rng, 20),
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

fn scope(rng: &mut Rng) -> String {
    ["a", "b", "finance", "", "admin"][rng.below(5)].to_owned()
}

/// An Assemble request with hostile values throughout, kept small (so that
/// the errors it may earn stay few: see
/// `an_error_naming_many_bad_fields_still_reaches_the_client`).
fn assemble_request(rng: &mut Rng) -> pb::AssembleRequest {
    // The chance of each hostile value: some requests are nearly valid (and
    // reach the allocator and the renderer), others are wrong everywhere.
    let fault = [1, 5, 30][rng.below(3)];
    let blocks = (0..rng.below(5))
        .map(|b| {
            let kind = if chance(rng, fault) {
                enum_value(rng, 6)
            } else {
                1 + rng.below(6) as i32
            };
            let turn = kind == 5 || kind == 6;
            let extreme = |rng: &mut Rng| if chance(rng, fault) { extreme_u32(rng) } else { 0 };
            pb::Block {
                name: if chance(rng, fault) {
                    id(rng)
                } else {
                    format!("b{b}")
                },
                kind,
                priority: extreme(rng),
                cuttable: [None, Some(true), Some(false)][rng.below(3)],
                min_tokens: extreme(rng),
                max_tokens: extreme(rng),
                items: (0..rng.below(6))
                    .map(|i| {
                        let content = nasty(rng, 120);
                        item(rng, fault, i, turn, content)
                    })
                    .collect(),
            }
        })
        .collect();
    pb::AssembleRequest {
        request_id: request_id(rng),
        model: if chance(rng, fault) {
            model(rng)
        } else {
            rng.pick(MODELS).to_owned()
        },
        max_input_tokens: maybe_u32(rng, fault),
        output_reserve: maybe_u32(rng, fault),
        static_segments: (0..rng.below(4))
            .map(|_| pb::Segment {
                id: id(rng),
                kind: enum_value(rng, 4),
                content: nasty(rng, 150),
            })
            .collect(),
        blocks,
        query: if chance(rng, fault) {
            nasty(rng, 10)
        } else {
            nasty_nonblank(rng, 80)
        },
        principal: chance(rng, 50).then(|| pb::Principal {
            id: id(rng),
            scopes: (0..rng.below(4)).map(|_| scope(rng)).collect(),
        }),
        session_id: if chance(rng, 50) {
            format!("s{}", rng.below(8))
        } else {
            nasty(rng, 20)
        },
        policy: if chance(rng, fault) {
            ["default", "memory-first", "no-such-policy", "DEFAULT"][rng.below(4)].to_owned()
        } else {
            String::new()
        },
        tools: (0..if chance(rng, 30) { rng.below(4) } else { 0 })
            .map(|_| tool(rng))
            .collect(),
        cache_salt: nasty(rng, 10),
        prefix_family: ["", "fam", "other", "\u{0}"][rng.below(4)].to_owned(),
        recall: chance(rng, 20).then(|| pb::Recall {
            subject: if chance(rng, fault) {
                nasty(rng, 600)
            } else {
                nasty_nonblank(rng, 20)
            },
            query: nasty(rng, 60),
            max_memories: extreme_u32(rng),
            types: (0..rng.below(3))
                .map(|_| ["decision", "summary", "bugfix", "", "nope", "\u{0}"][rng.below(6)].to_owned())
                .collect(),
            block: ["", "memory", "recalled_memories", "\u{0}", "evidence"][rng.below(5)].to_owned(),
            max_tokens: extreme_u32(rng),
            priority: extreme_u32(rng),
        }),
        return_token_ids: chance(rng, 20),
        // Undecodable, oversized or another prompt's: never a panic.
        previous_fingerprint: if chance(rng, 30) {
            (0..rng.below(600)).map(|_| rng.below(256) as u8).collect()
        } else {
            Vec::new()
        },
        cache_ttl: if chance(rng, fault) {
            ["5m", "1h", "30m", "24h", "7d", "0m", "1h\u{0}", "-5m"][rng.below(8)].to_owned()
        } else {
            String::new()
        },
    }
}

/// A valid request (known model, unique names and ids, a query): what it
/// must get is known exactly.
fn clean_assemble(rng: &mut Rng, items: usize, item_bytes: usize) -> pb::AssembleRequest {
    let mut req = common::heavy_request(rng.next_u64(), items, item_bytes);
    req.request_id = format!("hostile-{}", rng.below(64));
    req.static_segments = vec![pb::Segment {
        id: "sys".to_owned(),
        kind: pb::SegmentKind::System.into(),
        content: "You answer from the documents only.".to_owned(),
    }];
    req
}

fn count_request(rng: &mut Rng, text: String) -> pb::CountTokensRequest {
    use pb::count_tokens_request::Tokenizer;
    let tokenizer = match rng.below(10) {
        0 => None,
        1 => Some(Tokenizer::Encoding(
            ["o200k_base", "cl100k_base", "p50k_base", "", "O200K_BASE"][rng.below(5)].to_owned(),
        )),
        2 => Some(Tokenizer::Encoding("o200k_base".to_owned())),
        _ => Some(Tokenizer::Model(model(rng))),
    };
    pb::CountTokensRequest {
        tokenizer,
        text: text.into(),
    }
}

fn content_block(rng: &mut Rng, text_max: usize) -> pb::ContentBlock {
    use pb::content_block::Block;
    let block = match rng.below(10) {
        0 => None,
        1..=3 => Some(Block::ToolUse(pb::ToolUse {
            id: format!("t{}", rng.below(6)),
            name: if chance(rng, 90) {
                format!("tool_{}", rng.below(3))
            } else {
                nasty(rng, 10)
            },
            input: if chance(rng, 50) {
                "{\"path\":\"src/lib.rs\"}".to_owned()
            } else {
                nasty(rng, 60)
            },
        })),
        4..=5 => Some(Block::ToolResult(pb::ToolResult {
            tool_use_id: format!("t{}", rng.below(6)),
            output: nasty(rng, text_max),
            is_error: chance(rng, 20),
        })),
        _ => Some(Block::Text(nasty(rng, text_max))),
    };
    pb::ContentBlock { block }
}

fn conversation(rng: &mut Rng, messages: usize, text_max: usize) -> Vec<pb::ConversationMessage> {
    (0..messages)
        .map(|_| pb::ConversationMessage {
            id: id(rng),
            role: if chance(rng, 90) {
                1 + rng.below(4) as i32
            } else {
                enum_value(rng, 4)
            },
            content: (0..rng.below(3) + usize::from(chance(rng, 90)))
                .map(|_| content_block(rng, text_max))
                .collect(),
        })
        .collect()
}

fn compact_request(rng: &mut Rng, messages: Vec<pb::ConversationMessage>) -> pb::CompactRequest {
    pb::CompactRequest {
        request_id: request_id(rng),
        model: model(rng),
        session_id: format!("s{}", rng.below(8)),
        messages,
        trigger_tokens: if chance(rng, 50) {
            Some(rng.below(200) as u32)
        } else {
            maybe_u32(rng, 30)
        },
        target_tokens: if chance(rng, 50) {
            Some(rng.below(300) as u32)
        } else {
            maybe_u32(rng, 30)
        },
        preserve_recent: maybe_u32(rng, 40),
        pinned: (0..if chance(rng, 30) { rng.below(3) } else { 0 })
            .map(|_| pb::PinnedItem {
                id: id(rng),
                kind: ["task", "file", "", "</pinned>"][rng.below(4)].to_owned(),
                content: nasty(rng, 80),
            })
            .collect(),
        context_length_exceeded: chance(rng, 20),
        cache_salt: String::new(),
    }
}

fn report_request(rng: &mut Rng) -> pb::ReportUsageRequest {
    let small = |rng: &mut Rng| {
        if chance(rng, 70) {
            rng.below(5000) as u32
        } else {
            extreme_u32(rng)
        }
    };
    pb::ReportUsageRequest {
        request_id: request_id(rng),
        provider: {
            // Every known provider, and names that are not one.
            let odd = ["", "OpenAI", "\u{0}"];
            let n = PROVIDERS.len() + odd.len();
            let i = rng.below(n);
            PROVIDERS
                .iter()
                .chain(&odd)
                .nth(i)
                .copied()
                .unwrap_or_default()
                .to_owned()
        },
        prompt_tokens: small(rng),
        cached_tokens: small(rng),
        cache_read_tokens: small(rng),
        cache_creation_tokens: small(rng),
        cache_write_tokens: small(rng),
        diagnostic: ["", "tools_changed", "MODEL_CHANGED", "\u{0}", "made up"][rng.below(5)].to_owned(),
        answer: if chance(rng, 30) {
            nasty(rng, 4096)
        } else {
            String::new()
        },
    }
}

fn case(variant: &'static str, rpc: Rpc, payload: Vec<u8>, sent: Sent, codes: &'static [Code]) -> Case {
    Case {
        variant,
        rpc,
        body: frame(&payload),
        headers: Vec::new(),
        sent,
        codes,
        reason: None,
        slow: false,
    }
}

/// A structurally valid message with hostile values, for any RPC.
fn semantic(rng: &mut Rng) -> Case {
    match rng.below(100) {
        0..=29 => {
            let req = assemble_request(rng);
            case(
                "assemble: hostile values",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                SEMANTIC,
            )
        }
        30..=34 => {
            let n = 1 + rng.below(4);
            let mut req = clean_assemble(rng, n, 50);
            // The system segment and the query alone take more than 15.
            req.max_input_tokens = Some(1 + rng.below(15) as u32);
            let mut c = case(
                "assemble: non-cuttable content over the budget",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                &[Code::FailedPrecondition],
            );
            c.reason = Some("BUDGET_OVERFLOW");
            c
        }
        35..=37 => {
            let mut req = clean_assemble(rng, 1, 10);
            let too_many = rng.below(2) == 0;
            if too_many {
                req.blocks[0].items = (0..=MAX_ITEMS).map(|i| item_with_id(i, "")).collect();
            } else {
                req.blocks = (0..=MAX_BLOCKS)
                    .map(|b| pb::Block {
                        name: format!("b{b}"),
                        kind: pb::BlockKind::Evidence.into(),
                        ..Default::default()
                    })
                    .collect();
            }
            let mut c = case(
                "assemble: one over the block or item limit",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                &[Code::ResourceExhausted],
            );
            c.reason = Some(if too_many {
                "TOO_MANY_ITEMS"
            } else {
                "TOO_MANY_BLOCKS"
            });
            c
        }
        38..=41 => {
            let (n, bytes) = (1 + rng.below(5), 1 + rng.below(400));
            let req = clean_assemble(rng, n, bytes);
            case(
                "assemble: clean",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                &[Code::Ok],
            )
        }
        42..=51 => {
            let bytes = rng.below(4096);
            let text = if chance(rng, 80) {
                nasty(rng, 300)
            } else {
                repeated(rng, bytes)
            };
            let req = count_request(rng, text);
            case(
                "count: hostile text",
                Rpc::CountTokens,
                req.encode_to_vec(),
                Sent::Count(req),
                SEMANTIC,
            )
        }
        52..=59 => {
            let n = rng.below(6);
            let req = pb::AssembleBatchRequest {
                requests: (0..n)
                    .map(|_| {
                        let n = 1 + rng.below(3);
                        if chance(rng, 30) {
                            clean_assemble(rng, n, 100)
                        } else {
                            assemble_request(rng)
                        }
                    })
                    .collect(),
            };
            case(
                "batch: hostile requests",
                Rpc::AssembleBatch,
                req.encode_to_vec(),
                Sent::Batch(req),
                SEMANTIC,
            )
        }
        60..=67 => stream_case(rng),
        68..=83 => {
            let n = rng.below(12);
            let messages = if chance(rng, 30) {
                clean_conversation(rng, 4 + n)
            } else {
                conversation(rng, n, 120)
            };
            let req = compact_request(rng, messages);
            case(
                "compact: hostile conversation",
                Rpc::Compact,
                req.encode_to_vec(),
                Sent::Compact(req),
                SEMANTIC,
            )
        }
        84..=85 => {
            let req = retain_request(rng);
            case(
                "retain: hostile model output and fields",
                Rpc::Retain,
                req.encode_to_vec(),
                Sent::Retain(req),
                SEMANTIC,
            )
        }
        86 => {
            let req = forget_request(rng);
            case(
                "forget",
                Rpc::Forget,
                req.encode_to_vec(),
                Sent::Garbage,
                SEMANTIC,
            )
        }
        87 => {
            let req = list_request(rng);
            case(
                "list memories",
                Rpc::ListMemories,
                req.encode_to_vec(),
                Sent::Garbage,
                SEMANTIC,
            )
        }
        88..=95 => {
            let req = report_request(rng);
            case(
                "report usage",
                Rpc::ReportUsage,
                req.encode_to_vec(),
                Sent::Report(req),
                SEMANTIC,
            )
        }
        _ => case(
            "list models",
            Rpc::ListModels,
            Vec::new(),
            Sent::ListModels,
            &[Code::Ok],
        ),
    }
}

fn item_with_id(i: usize, content: &str) -> pb::Item {
    pb::Item {
        id: format!("e{i}"),
        content: content.to_owned(),
        ..Default::default()
    }
}

/// A tool-call conversation that is valid: user asks, assistant calls,
/// tool answers, assistant says.
fn clean_conversation(rng: &mut Rng, turns: usize) -> Vec<pb::ConversationMessage> {
    use pb::content_block::Block;
    let text = |s: String| pb::ContentBlock {
        block: Some(Block::Text(s)),
    };
    let mut out = vec![pb::ConversationMessage {
        id: "sys".to_owned(),
        role: pb::Role::System.into(),
        content: vec![text("You are a coding agent.".to_owned())],
    }];
    for t in 0..turns {
        let call = format!("call-{t}");
        out.push(pb::ConversationMessage {
            id: format!("u{t}"),
            role: pb::Role::User.into(),
            content: vec![text(nasty_nonblank(rng, 100))],
        });
        out.push(pb::ConversationMessage {
            id: format!("a{t}"),
            role: pb::Role::Assistant.into(),
            content: vec![pb::ContentBlock {
                block: Some(Block::ToolUse(pb::ToolUse {
                    id: call.clone(),
                    name: "read_file".to_owned(),
                    input: "{\"path\":\"src/lib.rs\"}".to_owned(),
                })),
            }],
        });
        out.push(pb::ConversationMessage {
            id: format!("r{t}"),
            role: pb::Role::Tool.into(),
            content: vec![pb::ContentBlock {
                block: Some(Block::ToolResult(pb::ToolResult {
                    tool_use_id: call,
                    output: nasty(rng, 200),
                    is_error: false,
                })),
            }],
        });
    }
    out
}

/// A stream of hostile messages, sometimes followed by bytes that do not
/// decode (the stream then ends with an error after answering the others).
fn stream_case(rng: &mut Rng) -> Case {
    let requests: Vec<pb::AssembleRequest> = (0..rng.below(5))
        .map(|_| {
            let n = 1 + rng.below(3);
            if chance(rng, 40) {
                clean_assemble(rng, n, 100)
            } else {
                assemble_request(rng)
            }
        })
        .collect();
    let mut body: Vec<u8> = requests.iter().flat_map(|r| frame(&r.encode_to_vec())).collect();
    let garbage = chance(rng, 25);
    let codes: &'static [Code] = if garbage {
        match rng.below(3) {
            0 => body.extend(frame(&[0xff, 0xff, 0xff])),
            1 => body.extend([0, 0, 0, 0, 40, 1, 2, 3]),
            _ => body.extend([2, 0, 0, 0, 0]),
        }
        &[Code::InvalidArgument, Code::Internal]
    } else {
        &[Code::Ok]
    };
    Case {
        variant: "stream: hostile messages",
        rpc: Rpc::AssembleStream,
        body,
        headers: Vec::new(),
        sent: Sent::Stream(requests, garbage),
        codes,
        reason: None,
        slow: false,
    }
}

/// A valid encoding of some request for `rpc`.
fn valid_payload(rng: &mut Rng, rpc: Rpc) -> Vec<u8> {
    match rpc {
        Rpc::Assemble | Rpc::AssembleStream => assemble_request(rng).encode_to_vec(),
        Rpc::CountTokens => {
            let text = nasty(rng, 100);
            count_request(rng, text).encode_to_vec()
        }
        Rpc::ListModels => Vec::new(),
        Rpc::AssembleBatch => pb::AssembleBatchRequest {
            requests: (0..rng.below(3)).map(|_| assemble_request(rng)).collect(),
        }
        .encode_to_vec(),
        Rpc::ReportUsage => report_request(rng).encode_to_vec(),
        Rpc::Compact => {
            let n = rng.below(6);
            let messages = conversation(rng, n, 60);
            compact_request(rng, messages).encode_to_vec()
        }
        Rpc::Retain => retain_request(rng).encode_to_vec(),
        Rpc::Forget => forget_request(rng).encode_to_vec(),
        Rpc::ListMemories => list_request(rng).encode_to_vec(),
    }
}

/// Subjects the memory cases share, so retains, recalls, lists and forgets
/// meet the same memories (and keys replay).
const SUBJECTS: [&str; 3] = ["s0", "s1", "tenant/ünïcode"];

fn subject(rng: &mut Rng) -> String {
    if chance(rng, 10) {
        nasty(rng, 700)
    } else {
        rng.pick(&SUBJECTS).to_string()
    }
}

/// Model output from XML-ish fragments: good, malformed, nested, private,
/// DTDs and entities, unterminated.
fn model_output(rng: &mut Rng) -> String {
    const FRAGMENTS: [&str; 24] = [
        "<observation><type>decision</type><text>",
        "<observation><type>bugfix</type><title>",
        "<observation><type>nope</type><text>",
        "<observation>",
        "</observation>",
        "</text></observation>",
        "</title><narrative>",
        "</narrative></observation>",
        "<facts><fact>",
        "</fact></facts>",
        "<summary><request>",
        "</request><learned>",
        "</learned><files_read><file>",
        "</file></files_read></summary>",
        "</summary>",
        "<private>",
        "</private>",
        "<!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;\">]>",
        "&b;",
        "&amp;",
        "<![CDATA[ x < y ]]>",
        "<",
        "&",
        "<observation",
    ];
    let mut out = String::new();
    for _ in 0..rng.below(24) {
        if chance(rng, 50) {
            out.push_str(rng.pick(&FRAGMENTS));
        } else {
            out.push_str(&nasty(rng, 40));
        }
    }
    out
}

fn retain_request(rng: &mut Rng) -> pb::RetainRequest {
    let fault = if chance(rng, 70) { 0 } else { 20 };
    let text = |rng: &mut Rng| nasty(rng, 60);
    pb::RetainRequest {
        idempotency_key: if chance(rng, fault) {
            nasty(rng, 300)
        } else {
            format!("k{}", rng.below(40))
        },
        subject: subject(rng),
        required_scopes: (0..rng.below(3)).map(|_| scope(rng)).collect(),
        request_id: request_id(rng),
        turn: extreme_u32(rng),
        model_output: model_output(rng),
        observations: (0..rng.below(3))
            .map(|_| pb::Observation {
                r#type: ["decision", "bugfix", "refactor", "", "nope", "\u{0}"][rng.below(6)].to_owned(),
                title: text(rng),
                text: text(rng),
                facts: (0..rng.below(3)).map(|_| text(rng)).collect(),
                files_read: (0..rng.below(2)).map(|_| text(rng)).collect(),
                files_modified: (0..rng.below(2)).map(|_| text(rng)).collect(),
            })
            .collect(),
        summaries: (0..rng.below(2))
            .map(|_| pb::SessionSummary {
                request: text(rng),
                learned: text(rng),
                files_edited: vec![text(rng)],
                ..Default::default()
            })
            .collect(),
    }
}

fn forget_request(rng: &mut Rng) -> pb::ForgetRequest {
    match rng.below(4) {
        0 => pb::ForgetRequest {
            ids: (0..rng.below(4))
                .map(|_| {
                    [
                        format!("{}", rng.below(50)),
                        nasty(rng, 10),
                        "-1".to_owned(),
                        "99999999999999999999".to_owned(),
                        format!("{:032x}", rng.below(50)),
                    ][rng.below(5)]
                    .clone()
                })
                .collect(),
            subject: if chance(rng, 50) {
                subject(rng)
            } else {
                String::new()
            },
            ..Default::default()
        },
        1 => pb::ForgetRequest {
            subject: subject(rng),
            r#type: ["bugfix", "summary", "", "\u{0}"][rng.below(4)].to_owned(),
            ..Default::default()
        },
        2 => pb::ForgetRequest {
            ids: vec!["1".to_owned()],
            subject: subject(rng),
            r#type: nasty(rng, 5),
        },
        _ => pb::ForgetRequest::default(),
    }
}

fn list_request(rng: &mut Rng) -> pb::ListMemoriesRequest {
    pb::ListMemoriesRequest {
        subject: subject(rng),
        page_size: if chance(rng, 80) {
            rng.below(20) as u32
        } else {
            extreme_u32(rng)
        },
        page_token: ["", "1", "0", "-5", "abc", "9223372036854775807"][rng.below(6)].to_owned(),
        principal: chance(rng, 50).then(|| pb::Principal {
            id: nasty(rng, 5),
            scopes: (0..rng.below(4)).map(|_| nasty(rng, 5)).collect(),
        }),
    }
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

/// Bytes on the wire that are not a well-formed message, or not a
/// well-framed one, for any RPC.
fn wire(rng: &mut Rng) -> Case {
    let rpc = RPCS[rng.below(RPCS.len())];
    let garbage = |variant, body| Case {
        variant,
        rpc,
        body,
        headers: Vec::new(),
        sent: Sent::Garbage,
        codes: WIRE,
        reason: None,
        slow: false,
    };
    match rng.below(11) {
        0 => {
            let n = rng.below(512);
            garbage("wire: random bytes, framed", frame(&random_bytes(rng, n)))
        }
        1 => {
            let n = rng.below(48);
            garbage("wire: random bytes, unframed", random_bytes(rng, n))
        }
        2 => {
            let mut p = valid_payload(rng, rpc);
            p.truncate(rng.below(p.len() + 1));
            garbage("wire: truncated encoding", frame(&p))
        }
        3 => {
            // The frame header promises more than the body holds.
            let p = valid_payload(rng, rpc);
            let mut body = frame(&p);
            body.truncate(5 + rng.below(p.len().max(1)));
            body[1..5].copy_from_slice(&(p.len() as u32 + 1).to_be_bytes());
            garbage("wire: body ends inside the frame", body)
        }
        4 => {
            let mut p = valid_payload(rng, rpc);
            for _ in 0..1 + rng.below(8) {
                if !p.is_empty() {
                    let at = rng.below(p.len());
                    p[at] ^= 1 << rng.below(8);
                }
            }
            garbage("wire: bit flips", frame(&p))
        }
        5 => {
            // A known or unknown field number with any wire type, including
            // the deprecated groups and the invalid types 6 and 7.
            let mut p = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let field = 1 + rng.below(20) as u64;
                let wire_type = rng.below(8) as u64;
                varint(field << 3 | wire_type, &mut p);
                let n = rng.below(12);
                match wire_type {
                    0 => varint(rng.next_u64(), &mut p),
                    2 => {
                        varint(n as u64 + rng.below(3) as u64, &mut p);
                        p.extend(random_bytes(rng, n));
                    }
                    _ => p.extend(random_bytes(rng, n)),
                }
            }
            garbage("wire: wrong wire types", frame(&p))
        }
        6 => {
            // Groups nested far beyond prost's recursion limit.
            let depth = 1 + rng.below(200_000);
            let mut p = Vec::new();
            for _ in 0..depth {
                varint(99 << 3 | 3, &mut p);
            }
            garbage("wire: deeply nested groups", frame(&p))
        }
        7 => {
            // Invalid UTF-8 in a string field (field 2 or 3, a string in
            // most requests).
            let mut p = valid_payload(rng, rpc);
            varint((2 + rng.below(2) as u64) << 3 | 2, &mut p);
            varint(4, &mut p);
            p.extend([b'a', 0xff, 0xc3, 0x28]);
            garbage("wire: invalid UTF-8 in a string", frame(&p))
        }
        8 => {
            let mut body = frame(&valid_payload(rng, rpc));
            body[0] = 1 + rng.below(255) as u8;
            let mut c = garbage("wire: compression flag", body);
            if chance(rng, 50) {
                let encoding = ["gzip", "identity", "deflate", "zstd", "snappy"][rng.below(5)];
                c.headers.push(("grpc-encoding", encoding.to_owned()));
            }
            c.codes = COMPRESSED;
            c
        }
        9 => {
            // A frame header declaring more than the limit, then a few bytes.
            let declared = MAX_REQUEST_BYTES as u64
                + 1
                + rng.next_u64() % (u64::from(u32::MAX) - MAX_REQUEST_BYTES as u64);
            let mut body = vec![0];
            body.extend_from_slice(&(declared as u32).to_be_bytes());
            let n = rng.below(64);
            body.extend(random_bytes(rng, n));
            let mut c = garbage("wire: declared size over the limit", body);
            c.codes = &[Code::ResourceExhausted];
            c.reason = Some("REQUEST_TOO_LARGE");
            c
        }
        _ => {
            // An ordinary request with odd headers: grpc-timeout values that
            // are invalid (ignored), tiny or huge; unknown metadata.
            let req = clean_assemble(rng, 2, 100);
            let timeout = [
                "",
                "1",
                "-1S",
                "1x",
                "999999999S",
                "99999999H",
                "0n",
                "1n",
                "5u",
                "3S",
                "1M",
            ][rng.below(11)];
            let mut c = case(
                "headers: odd grpc-timeout and metadata",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                TIMED,
            );
            c.headers.push(("grpc-timeout", timeout.to_owned()));
            c.headers.push((
                "x-hostile",
                nasty(rng, 40).replace(|ch: char| !ch.is_ascii_graphic(), "_"),
            ));
            c
        }
    }
}

/// Hundreds of KB: repeated characters in every content field of some RPC,
/// large batches and conversations, a message just over the limit.
fn medium(rng: &mut Rng) -> Case {
    let bytes = 32 * 1024 + rng.below(256 * 1024);
    match rng.below(7) {
        0 => {
            let mut req = clean_assemble(rng, 3, 100);
            let text = repeated(rng, bytes);
            match rng.below(5) {
                0 => req.query = text,
                1 => req.static_segments[0].content = text,
                2 => req.blocks[0].items[0].content = text,
                3 => req.blocks[0].items[1].compact_form = Some(text),
                _ => req.blocks[0].items[2].source = text,
            }
            case(
                "assemble: repeated characters",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                SEMANTIC,
            )
        }
        1 => {
            let text = repeated(rng, bytes);
            let req = count_request(rng, text);
            case(
                "count: repeated characters",
                Rpc::CountTokens,
                req.encode_to_vec(),
                Sent::Count(req),
                SEMANTIC,
            )
        }
        2 => {
            // Up to a little over the batch limit, which is refused whole.
            let req = pb::AssembleBatchRequest {
                requests: (0..50 + rng.below(250)).map(|_| assemble_request(rng)).collect(),
            };
            let over = req.requests.len() > MAX_BATCH_REQUESTS;
            Case {
                reason: over.then_some("TOO_MANY_REQUESTS"),
                ..case(
                    "batch: hundreds of requests",
                    Rpc::AssembleBatch,
                    req.encode_to_vec(),
                    Sent::Batch(req),
                    if over {
                        &[Code::ResourceExhausted]
                    } else {
                        SEMANTIC
                    },
                )
            }
        }
        3 => {
            let n = 20 + rng.below(200);
            let mut messages = clean_conversation(rng, n);
            let last = messages.len() - 1;
            messages[last].content.push(pb::ContentBlock {
                block: Some(pb::content_block::Block::Text(repeated(rng, bytes))),
            });
            let req = compact_request(rng, messages);
            case(
                "compact: long conversation",
                Rpc::Compact,
                req.encode_to_vec(),
                Sent::Compact(req),
                SEMANTIC,
            )
        }
        4 => {
            // A tool definition of hundreds of KB, or nested deep.
            let mut req = clean_assemble(rng, 2, 100);
            req.tools = vec![if chance(rng, 50) {
                format!("{{\"description\":\"{}\"}}", "x".repeat(bytes))
            } else {
                format!("{{\"a\":{}}}", "[".repeat(bytes / 2))
            }];
            case(
                "assemble: a huge tool definition",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                SEMANTIC,
            )
        }
        5 => {
            let mut req = clean_assemble(rng, 1, 10);
            req.principal = Some(pb::Principal {
                id: "p".to_owned(),
                scopes: (0..bytes / 64).map(|k| format!("scope-{k}")).collect(),
            });
            req.blocks[0].items[0].required_scopes = (0..bytes / 128).map(|k| format!("scope-{k}")).collect();
            case(
                "assemble: thousands of scopes",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                SEMANTIC,
            )
        }
        _ => {
            // Just over the limit, for real (not only declared).
            let rpc = [Rpc::Assemble, Rpc::CountTokens, Rpc::Compact, Rpc::AssembleStream][rng.below(4)];
            let text = "z".repeat(MAX_REQUEST_BYTES + 1 + rng.below(1024));
            let payload = match rpc {
                Rpc::CountTokens => count_request(rng, text).encode_to_vec(),
                Rpc::Compact => {
                    let messages = clean_conversation(rng, 2);
                    let mut req = compact_request(rng, messages);
                    req.pinned = vec![pb::PinnedItem {
                        id: "p".to_owned(),
                        kind: "task".to_owned(),
                        content: text,
                    }];
                    req.encode_to_vec()
                }
                _ => {
                    let mut req = clean_assemble(rng, 1, 10);
                    req.query = text;
                    req.encode_to_vec()
                }
            };
            let mut c = case(
                "any: a message just over the limit",
                rpc,
                payload,
                Sent::Garbage,
                &[Code::ResourceExhausted],
            );
            c.reason = Some("REQUEST_TOO_LARGE");
            c
        }
    }
}

/// 10,000 items (the default limit) in one request, a conversation or a
/// batch (the `nth` bulk case of the run picks which).
fn bulk(rng: &mut Rng, nth: usize) -> Case {
    match nth % 3 {
        0 => {
            let mut req = clean_assemble(rng, 1, 10);
            let tiny = ["", " ", "a", "\n", "<", "é"];
            req.blocks[0].items = (0..MAX_ITEMS)
                .map(|i| item_with_id(i, tiny[i % tiny.len()]))
                .collect();
            req.max_input_tokens = Some(if chance(rng, 50) { 500 } else { 100_000 });
            case(
                "assemble: 10,000 items",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
                &[Code::Ok],
            )
        }
        1 => {
            let mut messages = clean_conversation(rng, 0);
            // The limit counts messages and pinned items.
            while messages.len() < MAX_ITEMS - 2 {
                messages.push(pb::ConversationMessage {
                    id: format!("m{}", messages.len()),
                    role: [pb::Role::User, pb::Role::Assistant][messages.len() % 2].into(),
                    content: vec![pb::ContentBlock {
                        block: Some(pb::content_block::Block::Text(prose(rng, 10))),
                    }],
                });
            }
            let mut req = compact_request(rng, messages);
            req.model = "gpt-4o".to_owned();
            req.trigger_tokens = Some(1);
            req.target_tokens = Some(1 + rng.below(100_000) as u32);
            req.pinned.truncate(2);
            case(
                "compact: 10,000 messages",
                Rpc::Compact,
                req.encode_to_vec(),
                Sent::Compact(req),
                SEMANTIC,
            )
        }
        _ => {
            let req = pb::AssembleBatchRequest {
                requests: (0..10)
                    .map(|_| {
                        let mut r = clean_assemble(rng, 1, 10);
                        r.blocks[0].items = (0..MAX_ITEMS / 10).map(|i| item_with_id(i, "x y")).collect();
                        r
                    })
                    .collect(),
            };
            case(
                "batch: 10,000 items in all",
                Rpc::AssembleBatch,
                req.encode_to_vec(),
                Sent::Batch(req),
                &[Code::Ok],
            )
        }
    }
}

/// Messages near the size limit made of millions of empty sub-messages (or
/// empty strings), which would decode to hundreds of times their size: each
/// RPC refuses them from the encoded bytes, before decoding, with the reason
/// its shape deserves. And the shapes that once made the domain's work
/// super-linear (`tests/shapes`), at sizes where a quadratic path would
/// outlast the deadline. The `nth` shape case of the run picks one, in
/// turn.
fn shaped(rng: &mut Rng, nth: usize) -> Case {
    let semantic = |variant, rpc, payload: Vec<u8>, sent| case(variant, rpc, payload, sent, SEMANTIC);
    match nth % 12 {
        7 => {
            let req = shapes::whitespace_summary(1 << 20);
            return semantic(
                "shape: 1 MiB blank SUMMARY cut to 8 tokens",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
            );
        }
        8 => {
            let req = shapes::many_scopes(1_000, 256, 4_096);
            return semantic(
                "shape: 1,000 items x 256 scopes held among 4,096",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
            );
        }
        9 => {
            let req = shapes::tool_calls_answered_from_the_end(2, 4_096);
            return semantic(
                "shape: 4,096 calls answered from the end",
                Rpc::Assemble,
                req.encode_to_vec(),
                Sent::Assemble(req),
            );
        }
        10 => {
            let req = shapes::distinct_batch_prefixes(MAX_BATCH_REQUESTS, "gpt-4o");
            return semantic(
                "shape: batch of 256 distinct prefixes",
                Rpc::AssembleBatch,
                req.encode_to_vec(),
                Sent::Batch(req),
            );
        }
        11 => {
            let req = shapes::forged_continuation(40_000, 4_000);
            return semantic(
                "shape: compact of a forged 40,000-tool continuation",
                Rpc::Compact,
                req.encode_to_vec(),
                Sent::Compact(req),
            );
        }
        _ => {}
    }
    let near = (MAX_REQUEST_BYTES - 64 - rng.below(4096)) / 2;
    let refused = |variant, rpc, payload: Vec<u8>, reason| Case {
        reason: Some(reason),
        ..case(variant, rpc, payload, Sent::Garbage, &[Code::ResourceExhausted])
    };
    match nth % 7 {
        0 => refused(
            "shape: batch of 2M empty requests",
            Rpc::AssembleBatch,
            empties(1, near),
            "TOO_MANY_REQUESTS",
        ),
        1 => refused(
            "shape: 2M empty items",
            Rpc::Assemble,
            empty_items(near - 8),
            "TOO_MANY_ITEMS",
        ),
        2 => {
            let mut batch = Vec::new();
            for _ in 0..256 {
                field(1, &empty_items(near / 256 - 8), &mut batch);
            }
            refused(
                "shape: batch of 256 x 8k empty items",
                Rpc::AssembleBatch,
                batch,
                "REQUEST_TOO_COMPLEX",
            )
        }
        3 => refused(
            "shape: compact of 2M empty messages",
            Rpc::Compact,
            empties(4, near),
            "REQUEST_TOO_COMPLEX",
        ),
        4 => refused(
            "shape: retain of 2M empty observations",
            Rpc::Retain,
            empties(7, near),
            "REQUEST_TOO_COMPLEX",
        ),
        5 => refused(
            "shape: forget of 2M empty ids",
            Rpc::Forget,
            empties(1, near),
            "REQUEST_TOO_COMPLEX",
        ),
        _ => {
            // A valid message answered, then one of 2M empty items: the
            // stream ends with the refusal, before decoding it.
            let first = clean_assemble(rng, 1, 100);
            let mut body = frame(&first.encode_to_vec());
            body.extend(frame(&empty_items(near - 8 - body.len())));
            Case {
                variant: "shape: stream message of 2M empty items",
                rpc: Rpc::AssembleStream,
                body,
                headers: Vec::new(),
                sent: Sent::Stream(vec![first], true),
                codes: &[Code::ResourceExhausted],
                reason: Some("REQUEST_TOO_COMPLEX"),
                slow: false,
            }
        }
    }
}

/// Several MB just under the request limit: one huge string, counted or
/// assembled (the `nth` heavy case of the run picks which).
fn heavy(rng: &mut Rng, nth: usize) -> Case {
    let bytes = MAX_REQUEST_BYTES - 64 * 1024 - rng.below(1 << 20);
    let text = match rng.below(3) {
        0 => repeated(rng, bytes),
        1 => prose(rng, bytes),
        _ => random_bytes(rng, bytes)
            .into_iter()
            .map(|b| char::from(b % 95 + 32))
            .collect(),
    };
    if nth.is_multiple_of(2) {
        let req = count_request(rng, text);
        return case(
            "count: several MB",
            Rpc::CountTokens,
            req.encode_to_vec(),
            Sent::Count(req),
            SEMANTIC,
        );
    }
    let mut req = clean_assemble(rng, 2, 100);
    match rng.below(3) {
        0 => req.query = text,
        1 => req.static_segments[0].content = text,
        _ => req.blocks[0].items[0].content = text,
    }
    case(
        "assemble: several MB in one field",
        Rpc::Assemble,
        req.encode_to_vec(),
        Sent::Assemble(req),
        SEMANTIC,
    )
}

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// Checks one answer against what its case allows.
fn check(case: &Case, answer: &RawAnswer) -> Result<(), String> {
    if let Some(broken) = &answer.broken {
        return Err(format!("not a well-formed answer: {broken}"));
    }
    if answer.http != 200 {
        return Err(format!("HTTP {}", answer.http));
    }
    let Some(raw) = answer.code else {
        return Err("no grpc-status".to_owned());
    };
    let code = Code::from_i32(raw);
    let late = case.slow && code == Code::DeadlineExceeded;
    if !(case.codes.contains(&code) || late) {
        return Err(format!(
            "{code:?} ({:?}) is not among {:?}",
            answer.message(),
            case.codes
        ));
    }
    if code != Code::Ok && !answer.messages.is_empty() && case.rpc != Rpc::AssembleStream {
        return Err(format!(
            "{code:?} with {} response messages",
            answer.messages.len()
        ));
    }
    match code {
        Code::Ok => check_ok(case, answer),
        Code::Internal => {
            let m = answer.message();
            if FRAMING_ERRORS.iter().any(|f| m.starts_with(f)) {
                check_stream_prefix(case, answer)
            } else {
                Err(format!("INTERNAL that is not a framing error: {m:?}"))
            }
        }
        Code::InvalidArgument => {
            let status = answer.status.as_ref().ok_or("no status")?;
            let named = status
                .get_details_bad_request()
                .is_some_and(|b| !b.field_violations.is_empty());
            if named || status.message().starts_with("malformed request message") {
                check_stream_prefix(case, answer)
            } else {
                Err(format!("INVALID_ARGUMENT names no field: {:?}", status.message()))
            }
        }
        Code::FailedPrecondition => check_overflow(answer.status.as_ref().ok_or("no status")?),
        Code::ResourceExhausted => {
            let status = answer.status.as_ref().ok_or("no status")?;
            check_refusal(status, case.reason)?;
            check_stream_prefix(case, answer)
        }
        _ => Ok(()),
    }
}

fn check_overflow(status: &tonic::Status) -> Result<(), String> {
    let info = status
        .get_details_error_info()
        .ok_or("FAILED_PRECONDITION without ErrorInfo")?;
    let number = |k: &str| info.metadata.get(k).and_then(|v| v.parse::<u64>().ok());
    match (
        info.reason.as_str(),
        number("non_cuttable_tokens"),
        number("budget"),
    ) {
        // The breakdown agrees and adds up (overflow_detail asserts).
        ("BUDGET_OVERFLOW", Some(need), Some(budget)) if need > budget => {
            match overflow_detail(status.details()) {
                Some(d) if d.blocks.len() <= 16 && d.blocks.iter().all(|b| b.name.len() <= 64) => Ok(()),
                d => Err(format!("BUDGET_OVERFLOW with {d:?}")),
            }
        }
        _ => Err(format!("FAILED_PRECONDITION with {info:?}")),
    }
}

fn check_refusal(status: &tonic::Status, want: Option<&str>) -> Result<(), String> {
    let info = status
        .get_details_error_info()
        .ok_or_else(|| format!("RESOURCE_EXHAUSTED without ErrorInfo: {:?}", status.message()))?;
    let known = [
        "REQUEST_TOO_LARGE",
        "TOO_MANY_BLOCKS",
        "TOO_MANY_ITEMS",
        "TOO_MANY_REQUESTS",
        "REQUEST_TOO_COMPLEX",
    ];
    if want.is_some_and(|w| w != info.reason) || !known.contains(&info.reason.as_str()) {
        return Err(format!("RESOURCE_EXHAUSTED {:?}, wanted {want:?}", info.reason));
    }
    Ok(())
}

/// A stream that ended with an error still answered each message before it.
fn check_stream_prefix(case: &Case, answer: &RawAnswer) -> Result<(), String> {
    match &case.sent {
        Sent::Stream(requests, true) => check_stream(requests, answer, true),
        _ => Ok(()),
    }
}

fn check_ok(case: &Case, answer: &RawAnswer) -> Result<(), String> {
    let one = |n: usize| {
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} response messages to a unary call"))
        }
    };
    let decode = |e: prost::DecodeError| format!("the response does not decode: {e}");
    match case.rpc {
        Rpc::Assemble => {
            one(answer.messages.len())?;
            let resp = answer.decode::<pb::AssembleResponse>().map_err(decode)?;
            let req = match &case.sent {
                Sent::Assemble(r) => Some(r),
                _ => None,
            };
            check_assembly(&resp[0], req)
        }
        Rpc::CountTokens => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::CountTokensResponse>().map_err(decode)?[0];
            if let Sent::Count(req) = &case.sent {
                let bytes = req.text.len() as u64;
                let tokens = u64::from(resp.tokens);
                if tokens > 2 * bytes || (bytes == 0) != (tokens == 0) {
                    return Err(format!("{tokens} tokens for {bytes} bytes"));
                }
            }
            Ok(())
        }
        Rpc::ListModels => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::ListModelsResponse>().map_err(decode)?[0];
            let names: Vec<&str> = resp.models.iter().map(|m| m.name.as_str()).collect();
            if names.is_empty() || !names.is_sorted() {
                return Err(format!("models: {names:?}"));
            }
            Ok(())
        }
        Rpc::AssembleBatch => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::AssembleBatchResponse>().map_err(decode)?[0];
            let requests = match &case.sent {
                Sent::Batch(b) => Some(&b.requests),
                _ => None,
            };
            check_batch(resp, requests)
        }
        Rpc::AssembleStream => match &case.sent {
            Sent::Stream(requests, false) => check_stream(requests, answer, false),
            _ => Ok(()),
        },
        Rpc::ReportUsage => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::ReportUsageResponse>().map_err(decode)?[0];
            let zero = matches!(&case.sent, Sent::Report(r) if r.prompt_tokens == 0);
            if !resp.relative_error.is_finite()
                || (resp.matched && (zero || resp.sidecar_tokens == 0))
                || (!resp.matched && resp.sidecar_tokens != 0)
            {
                return Err(format!("{resp:?}"));
            }
            Ok(())
        }
        Rpc::Compact => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::CompactResponse>().map_err(decode)?[0];
            let req = match &case.sent {
                Sent::Compact(r) => Some(r),
                _ => None,
            };
            check_compaction(resp, req)
        }
        Rpc::Retain => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::RetainResponse>().map_err(decode)?[0];
            let well_formed =
                |id: &String| id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            if !resp.memory_ids.iter().all(well_formed) {
                return Err(format!(
                    "a memory id that is not 32 hex digits: {:?}",
                    resp.memory_ids
                ));
            }
            if let Sent::Retain(req) = &case.sent {
                for p in &resp.problems {
                    let at = usize::try_from(p.offset).unwrap_or(usize::MAX);
                    let tag = format!("<{}", p.element);
                    if !req
                        .model_output
                        .get(at..)
                        .is_some_and(|rest| rest.starts_with(&tag))
                    {
                        return Err(format!("problem offset {at} is not at a <{}", p.element));
                    }
                }
            }
            Ok(())
        }
        Rpc::Forget => {
            one(answer.messages.len())?;
            answer.decode::<pb::ForgetResponse>().map_err(decode)?;
            Ok(())
        }
        Rpc::ListMemories => {
            one(answer.messages.len())?;
            let resp = &answer.decode::<pb::ListMemoriesResponse>().map_err(decode)?[0];
            if resp.memories.iter().any(|m| m.content.is_none()) {
                return Err("a listed memory without content".to_owned());
            }
            Ok(())
        }
    }
}

fn check_assembly(resp: &pb::AssembleResponse, req: Option<&pb::AssembleRequest>) -> Result<(), String> {
    let usage = resp.usage.as_ref().ok_or("no usage")?;
    let cache = resp.cache.as_ref().ok_or("no cache info")?;
    let used = u64::from(usage.total_tokens) + u64::from(usage.tools_tokens);
    if used > u64::from(usage.budget) {
        return Err(format!(
            "{used} tokens (with tools) over the budget {}",
            usage.budget
        ));
    }
    if usage.total_tokens != usage.static_tokens + usage.dynamic_tokens {
        return Err(format!("total != static + dynamic: {usage:?}"));
    }
    if cache.prefix_tokens != usage.static_tokens {
        return Err(format!(
            "prefix tokens {} != static tokens {}",
            cache.prefix_tokens, usage.static_tokens
        ));
    }
    if resp.messages.is_empty() || resp.messages.iter().any(|m| !(1..=4).contains(&m.role)) {
        return Err("no messages, or a message without a role".to_owned());
    }
    if let Some(req) = req {
        if resp.request_id != req.request_id {
            return Err("request_id not echoed".to_owned());
        }
        // A recall into a block the request lacks adds that block.
        let added = req.recall.as_ref().is_some_and(|r| {
            let name = if r.block.is_empty() {
                "recalled_memories"
            } else {
                r.block.as_str()
            };
            !req.blocks.iter().any(|b| b.name == name)
        });
        if resp.decisions.len() != req.blocks.len() + usize::from(added) {
            return Err(format!(
                "{} decisions for {} blocks (recall added {added})",
                resp.decisions.len(),
                req.blocks.len()
            ));
        }
        if resp.recall.is_some() != req.recall.is_some() {
            return Err("a recall report without a recall, or none for one".to_owned());
        }
        if resp.tools.len() != req.tools.len() {
            return Err(format!("{} tools for {}", resp.tools.len(), req.tools.len()));
        }
        if resp.messages.last().map(|m| m.content.as_str()) != Some(req.query.as_str()) {
            return Err("the query is not the last message, verbatim".to_owned());
        }
    }
    Ok(())
}

/// A batch or stream error: a code an Assemble could answer, with its
/// encoded status.
fn check_request_error(e: &pb::RequestError) -> Result<(), String> {
    let code = Code::from_i32(e.code);
    let status = tonic_types::pb::Status::decode(e.status_details.as_slice())
        .map_err(|x| format!("status_details do not decode: {x}"))?;
    if status.code != e.code {
        return Err(format!("status_details code {} != {}", status.code, e.code));
    }
    let rebuilt = tonic::Status::with_details(code, e.message.clone(), e.status_details.clone().into());
    match code {
        Code::InvalidArgument if rebuilt.get_details_bad_request().is_some() => Ok(()),
        Code::FailedPrecondition => check_overflow(&rebuilt),
        Code::ResourceExhausted => check_refusal(&rebuilt, None),
        _ => Err(format!("request error {code:?}: {:?}", e.message)),
    }
}

fn check_result(r: &pb::AssembleResult, req: Option<&pb::AssembleRequest>) -> Result<bool, String> {
    match &r.result {
        Some(pb::assemble_result::Result::Response(resp)) => check_assembly(resp, req).map(|()| true),
        Some(pb::assemble_result::Result::Error(e)) => check_request_error(e).map(|()| false),
        None => Err("an empty result".to_owned()),
    }
}

fn check_batch(
    resp: &pb::AssembleBatchResponse,
    requests: Option<&Vec<pb::AssembleRequest>>,
) -> Result<(), String> {
    if let Some(requests) = requests
        && requests.len() != resp.results.len()
    {
        return Err(format!(
            "{} results for {} requests",
            resp.results.len(),
            requests.len()
        ));
    }
    let mut ok = Vec::new();
    for (i, r) in resp.results.iter().enumerate() {
        if check_result(r, requests.map(|q| &q[i])).map_err(|e| format!("results[{i}]: {e}"))? {
            ok.push(i as u32);
        }
    }
    let mut order = resp.order.clone();
    order.sort_unstable();
    if order != ok {
        return Err(format!(
            "order {:?} is not a permutation of the successes {ok:?}",
            resp.order
        ));
    }
    let mut members: Vec<u32> = Vec::new();
    for g in &resp.groups {
        if !g.members.is_sorted() || !g.members.contains(&g.warmup) {
            return Err(format!("group {g:?}"));
        }
        let saved = u64::from(g.shared_prefix_tokens) * (g.members.len() as u64 - 1);
        if g.tokens_saved != saved {
            return Err(format!("group saves {} != {saved}", g.tokens_saved));
        }
        members.extend(&g.members);
    }
    members.sort_unstable();
    if members != ok {
        return Err(format!("groups cover {members:?}, successes are {ok:?}"));
    }
    Ok(())
}

fn check_stream(requests: &[pb::AssembleRequest], answer: &RawAnswer, garbage: bool) -> Result<(), String> {
    let answers = answer
        .decode::<pb::AssembleStreamResponse>()
        .map_err(|e| format!("a stream answer does not decode: {e}"))?;
    // The messages before an undecodable one are all answered (their answers
    // are sent before the stream's error).
    if answers.len() != requests.len() {
        return Err(format!(
            "{} answers to {} messages (then garbage: {garbage})",
            answers.len(),
            requests.len()
        ));
    }
    for (i, (a, req)) in answers.iter().zip(requests).enumerate() {
        if a.index != i as u64 || a.request_id != req.request_id {
            return Err(format!("answer {i}: index {} id {:?}", a.index, a.request_id));
        }
        check_result(a.result.as_ref().ok_or("no result")?, Some(req))
            .map_err(|e| format!("answer {i}: {e}"))?;
    }
    Ok(())
}

fn check_compaction(resp: &pb::CompactResponse, req: Option<&pb::CompactRequest>) -> Result<(), String> {
    use pb::CompactOutcome as O;
    let outcome = O::try_from(resp.outcome).map_err(|_| format!("outcome {}", resp.outcome))?;
    let first_is_result = resp.messages.first().is_some_and(|m| {
        m.content
            .iter()
            .any(|c| matches!(c.block, Some(pb::content_block::Block::ToolResult(_))))
    });
    match outcome {
        O::Unspecified => return Err("outcome unspecified".to_owned()),
        O::BelowTrigger | O::NothingToCompact => {
            if let Some(req) = req
                && resp.messages != req.messages
            {
                return Err(format!("{outcome:?} changed the conversation"));
            }
        }
        O::Compacted | O::CompactedOverTarget => {
            let summarized = resp
                .summary_index
                .is_some_and(|i| (i as usize) < resp.messages.len());
            if !(summarized && resp.compacted) {
                return Err(format!("{outcome:?} without a summary: {:?}", resp.summary_index));
            }
            if first_is_result {
                return Err("the compacted conversation begins with a tool result".to_owned());
            }
        }
        O::BreakerTrimmed | O::EmergencyTrimmed => {
            // Nothing dropped (already under the target): the conversation
            // is the input, which may itself begin with an orphan result.
            // Once turns are dropped, what is left never begins with one.
            if resp.trim_steps.is_empty() {
                if let Some(req) = req
                    && resp.messages != req.messages
                {
                    return Err(format!("{outcome:?} without a step changed the conversation"));
                }
            } else if first_is_result {
                return Err("the trimmed conversation begins with a tool result".to_owned());
            }
            let after: Vec<u32> = resp.trim_steps.iter().map(|s| s.tokens_after).collect();
            if !after.is_sorted_by(|a, b| a >= b) {
                return Err(format!("trim steps do not shrink: {after:?}"));
            }
        }
    }
    if outcome == O::Compacted && resp.tokens_after > resp.target_tokens {
        return Err(format!(
            "COMPACTED to {} over the target {}",
            resp.tokens_after, resp.target_tokens
        ));
    }
    if let Some(req) = req
        && resp.request_id != req.request_id
    {
        return Err("request_id not echoed".to_owned());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.replace('_', "").parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

/// An ordinary request must still succeed, and health must say SERVING.
async fn still_serving(channel: &tonic::transport::Channel, n: u64) -> Result<(), String> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|s| format!("health check: {s:?}"))?;
    if health.into_inner().status != tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
        return Err("health is not SERVING".to_owned());
    }
    pb::assembler_client::AssemblerClient::new(channel.clone())
        .assemble(common::heavy_request(n, 3, 200))
        .await
        .map(|_| ())
        .map_err(|s| format!("an ordinary request failed: {s:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_hostile_requests_get_well_formed_statuses_and_memory_stays_bounded() {
    let _turn = common::turn().await;
    let requests = env_number("HOSTILE_REQUESTS").map_or(DEFAULT_REQUESTS, |n| n as usize);
    let seed = env_number("HOSTILE_SEED").unwrap_or(DEFAULT_SEED);
    let only = env_number("HOSTILE_CASE").map(|n| n as usize);
    let mut server = ChildServer::spawn(
        &["--log-format", "json"],
        &[("RUST_LOG", "warn,context_assembler::server=info")],
    );
    let channel = server.serving_channel().await;

    // Warm-up: ordinary traffic, so the baseline holds the vocabularies,
    // the runtime's threads and some cache.
    let mut warm = RawClient::connect(server.grpc).await;
    for n in 0..64 {
        let req = common::heavy_request(10_000 + n, 20, 500);
        let answer = warm
            .call(&Rpc::Assemble.path(), frame(&req.encode_to_vec()), &[])
            .await;
        assert_eq!(answer.code, Some(0), "warm-up: {answer:?}");
    }
    // And the memory store's connections.
    let mut recall = common::heavy_request(20_000, 2, 50);
    recall.recall = Some(pb::Recall {
        subject: "warm".to_owned(),
        ..Default::default()
    });
    for _ in 0..8 {
        let answer = warm
            .call(&Rpc::Assemble.path(), frame(&recall.encode_to_vec()), &[])
            .await;
        assert_eq!(answer.code, Some(0), "warm-up: {answer:?}");
    }
    drop(warm);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_warm = server.proc_status("VmRSS");
    let fds_warm = server.open_fds();
    let threads_warm = server.proc_status("Threads");

    let cases: Vec<usize> = match only {
        Some(i) => vec![i],
        None => (0..requests).collect(),
    };
    let cases = Arc::new(cases);
    let next = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let tally = Arc::new(Mutex::new(BTreeMap::<(&'static str, Rpc, String), usize>::new()));
    let spent = Arc::new(Mutex::new(BTreeMap::<&'static str, Duration>::new()));
    let threads_peak = Arc::new(AtomicUsize::new(threads_warm as usize));
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (cases, next, failures, tally) =
                (cases.clone(), next.clone(), failures.clone(), tally.clone());
            let (addr, channel, spent) = (server.grpc, channel.clone(), spent.clone());
            let threads_peak = threads_peak.clone();
            let pid = server.child.id();
            tokio::spawn(async move {
                let mut client = RawClient::connect(addr).await;
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = cases.get(k) else { break };
                    if failures.lock().unwrap().len() >= 20 {
                        break;
                    }
                    let mut case = generate(seed, i);
                    let body = std::mem::take(&mut case.body);
                    let headers: Vec<(&str, &str)> =
                        case.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let sent_at = Instant::now();
                    let answer = client.call(&case.rpc.path(), body, &headers).await;
                    let took = sent_at.elapsed();
                    *spent.lock().unwrap().entry(case.variant).or_default() += took;
                    if took > Duration::from_secs(5) {
                        eprintln!("slow: case {i} ({}) took {took:?}", case.variant);
                    }
                    if only.is_some() {
                        eprintln!("case {i}: {} {:?}\n{:#?}", case.variant, case.rpc, case.sent);
                        eprintln!("answer: {answer:#?}");
                        for rsp in answer.decode::<pb::CompactResponse>().into_iter().flatten() {
                            eprintln!("as a CompactResponse: {rsp:#?}");
                        }
                    }
                    let label = answer
                        .code
                        .map_or("none".to_owned(), |c| format!("{:?}", Code::from_i32(c)));
                    *tally
                        .lock()
                        .unwrap()
                        .entry((case.variant, case.rpc, label))
                        .or_default() += 1;
                    if let Err(e) = check(&case, &answer) {
                        failures.lock().unwrap().push(format!(
                            "case {i} ({}, {:?}): {e}\n  replay: HOSTILE_SEED={seed:#x} HOSTILE_CASE={i} \
                             cargo test --test limits hostile:: -- --nocapture",
                            case.variant, case.rpc
                        ));
                    }
                    if answer.broken.is_some() {
                        client = RawClient::connect(addr).await;
                    }
                    if k % 1000 == 999
                        && let Err(e) = still_serving(&channel, k as u64).await
                    {
                        failures.lock().unwrap().push(format!("after {k} cases: {e}"));
                    }
                    if k % 50 == 49 {
                        let threads = common::proc_status(pid, "Threads") as usize;
                        threads_peak.fetch_max(threads, Ordering::Relaxed);
                    }
                    if k % 20_000 == 19_999 {
                        let rss = common::proc_status(pid, "VmRSS") / 1024;
                        eprintln!("after {} cases: RSS {rss} MiB", k + 1);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed();

    let mut summary = String::new();
    for ((variant, rpc, code), n) in tally.lock().unwrap().iter() {
        summary.push_str(&format!("  {n:>6}  {variant} [{rpc:?}] -> {code}\n"));
    }
    let mut slowest: Vec<_> = spent.lock().unwrap().clone().into_iter().collect();
    slowest.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    for (variant, d) in slowest.iter().take(8) {
        summary.push_str(&format!("  waited {d:>8.1?} in all on {variant}\n"));
    }
    eprintln!(
        "{} cases in {elapsed:.1?} (seed {seed:#x}):\n{summary}",
        cases.len()
    );

    // Still alive and serving, with no panic and nothing recorded as
    // INTERNAL or UNKNOWN by a handler.
    assert!(server.running(), "the sidecar exited");
    still_serving(&channel, 1).await.unwrap();
    drop(channel);
    let page = server.metrics_page().await;
    for code in ["INTERNAL", "UNKNOWN"] {
        let n: f64 = page
            .lines()
            .filter(|l| l.starts_with("assembler_requests_total{") && l.contains(&format!("code=\"{code}\"")))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        assert_eq!(n, 0.0, "handlers answered {code}");
    }
    let panics: Vec<String> = server
        .logs()
        .into_iter()
        .filter(|l| l.contains("panicked") || l.contains("domain task failed"))
        .collect();
    assert!(panics.is_empty(), "{panics:#?}");

    // Bounded memory: nothing in flight now, so the resident set is what
    // the process keeps (caches are bounded, and allocators keep some).
    // File descriptors and threads return to their warm counts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_end = server.proc_status("VmRSS");
    let hwm = server.proc_status("VmHWM");
    let mut fds_end = server.open_fds();
    for _ in 0..100 {
        if fds_end <= fds_warm + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        fds_end = server.open_fds();
    }
    let threads_end = server.proc_status("Threads");
    eprintln!(
        "RSS: {} MiB after warm-up, {} MiB at the end, peak {} MiB; fds {fds_warm} -> {fds_end}; \
         threads {threads_warm} -> {threads_end}",
        rss_warm / 1024,
        rss_end / 1024,
        hwm / 1024
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        rss_end < rss_warm + RSS_GROWTH_LIMIT_KIB,
        "RSS grew from {rss_warm} KiB to {rss_end} KiB"
    );
    assert!(
        fds_end <= fds_warm + 2,
        "open fds grew from {fds_warm} to {fds_end}"
    );
    // Threads: the runtime may add blocking threads up to its bound
    // (max_concurrency + 8, see main.rs) while work runs; none is added per
    // request or connection and kept.
    let bound = u64::from(
        context_assembler::config::ServeArgs::default()
            .validate()
            .unwrap()
            .limits
            .max_concurrency,
    ) + 8;
    let threads_peak = threads_peak.load(Ordering::Relaxed) as u64;
    assert!(
        threads_peak <= threads_warm + bound && threads_end <= threads_warm + bound,
        "threads grew from {threads_warm} to {threads_end} (peak {threads_peak}); the runtime adds at most {bound}"
    );
}

// ---------------------------------------------------------------------------
// Regressions found by the generator
// ---------------------------------------------------------------------------

/// Regression: each bad field added a `BadRequest` violation and a clause of
/// the status message, both sent in the response trailers: with a hundred or
/// so, the trailers passed the 16 KiB header list that HTTP/2 clients accept
/// by default (h2, hence tonic; grpc-java allows 8 KiB), and the client got a
/// protocol error instead of INVALID_ARGUMENT. Duplicate ids in a block of
/// 100 retrieved documents were enough. Now at most 16 are listed.
#[tokio::test]
async fn an_error_naming_many_bad_fields_still_reaches_the_client() {
    let server = common::TestServer::start().await;
    let mut client = server.client();
    let mut duplicate_ids = common::heavy_request(1, 100, 20);
    for item in &mut duplicate_ids.blocks[0].items {
        item.id = "same".to_owned();
    }
    let status = client.assemble(duplicate_ids).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.get_details_bad_request().is_some(), "{status:?}");

    let empty_messages = pb::CompactRequest {
        model: "gpt-4o".to_owned(),
        messages: vec![pb::ConversationMessage::default(); MAX_ITEMS],
        ..Default::default()
    };
    let status = client.compact(empty_messages).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.get_details_bad_request().is_some(), "{status:?}");
    server.stop().await;
}

/// The contract: each AssembleStream message is admitted like a unary call,
/// size included (RESOURCE_EXHAUSTED, REQUEST_TOO_LARGE). Regression: the gate
/// reads only the first message's frame header, so a later oversized message
/// reached tonic's decode limit, which ended the stream with OUT_OF_RANGE
/// (and counted no refusal).
#[tokio::test]
async fn an_oversized_message_later_on_a_stream_is_resource_exhausted() {
    let server = common::TestServer::start().await;
    let mut client = RawClient::connect(server.addr).await;
    let mut body = frame(&common::heavy_request(1, 2, 100).encode_to_vec());
    body.push(0);
    body.extend_from_slice(&(MAX_REQUEST_BYTES as u32 + 1).to_be_bytes());
    body.extend_from_slice(&[0; 64]);
    let answer = client.call(&Rpc::AssembleStream.path(), body, &[]).await;
    let first = answer.decode::<pb::AssembleStreamResponse>().unwrap();
    assert!(
        matches!(
            first.first().and_then(|a| a.result.as_ref()?.result.as_ref()),
            Some(pb::assemble_result::Result::Response(_))
        ),
        "the first message is answered: {answer:?}"
    );
    // Refused as too large: as the second answer, or as the stream's status.
    let refused_in_stream = first.get(1).is_some_and(|a| {
        matches!(
            a.result.as_ref().and_then(|r| r.result.as_ref()),
            Some(pb::assemble_result::Result::Error(e)) if e.code == Code::ResourceExhausted as i32
        )
    });
    let refused_stream = answer.code() == Code::ResourceExhausted
        && check_refusal(answer.status.as_ref().unwrap(), Some("REQUEST_TOO_LARGE")).is_ok();
    assert!(refused_in_stream || refused_stream, "{answer:?}");
    server.stop().await;
}

/// Regression: request ids (kept 15 minutes for ReportUsage) and session ids
/// (the compaction breaker's key) were stored whole in caches bounded by
/// count (100,000 entries each), so unique ids of a few MB each could pin
/// gigabytes; both are now keyed by their blake3. 150 ids of 1 MiB each of
/// both kinds must not grow the resident set by anything like their 300 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_huge_identifiers_do_not_pin_memory() {
    let _turn = common::turn().await;
    const IDS: u64 = 150;
    let server = ChildServer::spawn(
        &["--log-format", "json"],
        &[("RUST_LOG", "warn,context_assembler::server=info")],
    );
    server.serving_channel().await;
    let mut client = RawClient::connect(server.grpc).await;
    let before = server.proc_status("VmRSS");
    for k in 0..IDS {
        let mut assemble = common::heavy_request(k, 1, 10);
        assemble.request_id = format!("{k:08}{}", "r".repeat(1 << 20));
        let answer = client
            .call(&Rpc::Assemble.path(), frame(&assemble.encode_to_vec()), &[])
            .await;
        assert_eq!(answer.code(), Code::Ok, "{answer:?}");
        let mut messages = clean_conversation(&mut Rng::new(k), 4);
        messages.truncate(4);
        let compact = pb::CompactRequest {
            model: "gpt-4o".to_owned(),
            session_id: format!("{k:08}{}", "s".repeat(1 << 20)),
            messages,
            trigger_tokens: Some(1),
            target_tokens: Some(1),
            preserve_recent: Some(1),
            ..Default::default()
        };
        let answer = client
            .call(&Rpc::Compact.path(), frame(&compact.encode_to_vec()), &[])
            .await;
        assert_eq!(answer.code(), Code::Ok, "{answer:?}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = server.proc_status("VmRSS").saturating_sub(before);
    assert!(
        grown < 128 * 1024,
        "{} MiB of ids sent, the resident set grew by {} MiB and stays",
        2 * IDS,
        grown / 1024
    );
}
