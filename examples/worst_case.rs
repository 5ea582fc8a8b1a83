//! CPU per MiB of request for each hostile shape of issue 15, built at the
//! largest request the server accepts by default (4 MiB on the wire, at most
//! 10,000 items), and for ordinary large requests: the domain in process,
//! without gRPC (decoding is not timed).
//!
//! ```text
//! cargo run --release --example worst_case [ROW-NAME-PART]
//! ```
//!
//! CPU time is the thread's own (`/proc/thread-self/schedstat`, in ns), so
//! other processes on the machine do not count; each shape runs three times
//! on a fresh assembler (cold caches: every count is a miss) and the least is
//! reported. The target is at most 50 ms of CPU per MiB.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/shapes/mod.rs"]
mod shapes;

use std::sync::Arc;

use context_assembler::assemble::{self as domain, Assembler, batch};
use context_assembler::compact::{CompactRequest, Compactor};
use context_assembler::config::default_catalog;
use context_assembler::grpc::pb;
use context_assembler::prompt;
use context_assembler::tokens;
use context_assembler::vocab::Cancel;
use context_assembler::workload::{self, Rng, Shape};
use prost::Message as _;

/// The default `max_request_bytes`.
const MAX_WIRE: usize = 4 << 20;
/// The default `max_items`.
const MAX_ITEMS: usize = 10_000;
/// The default `limits.max_batch_requests`: a larger batch is refused by the
/// gate before it is decoded.
const MAX_BATCH_REQUESTS: usize = 256;
/// The target, in ms of CPU per MiB of request.
const TARGET_MS_PER_MIB: f64 = 50.0;

/// CPU time this thread has run, in ns (0 where the kernel does not say).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The largest `n` whose shape encodes to at most `max` bytes (doubling,
/// then bisecting).
fn largest<M: prost::Message>(max: usize, shape: impl Fn(usize) -> M) -> usize {
    let fits = |n: usize| shape(n).encoded_len() <= max;
    let mut hi = 1;
    while fits(hi) {
        hi *= 2;
    }
    let mut lo = hi / 2;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

fn fresh() -> Arc<Assembler> {
    let asm = Assembler::new(default_catalog(), domain::DEFAULT_CACHE_BYTES);
    asm.warm();
    Arc::new(asm)
}

/// One row: the least CPU of three runs of `run` on fresh inputs.
fn measure<T>(name: &str, wire: usize, build: impl Fn() -> T, run: impl Fn(T) -> String) {
    // `worst_case WORDS`: only the rows whose name contains WORDS (under a
    // profiler, say); the others are still built, not run.
    if std::env::args().nth(1).is_some_and(|only| !name.contains(&only)) {
        return;
    }
    let mut best = u64::MAX;
    let mut outcome = String::new();
    for _ in 0..3 {
        let input = build();
        let started = thread_cpu_ns();
        outcome = run(input);
        best = best.min(thread_cpu_ns() - started);
    }
    let mib = wire as f64 / f64::from(1 << 20);
    let ms = best as f64 / 1e6;
    let per_mib = ms / mib;
    let verdict = if per_mib <= TARGET_MS_PER_MIB {
        "ok"
    } else {
        "OVER"
    };
    println!("| {name} | {mib:.2} | {ms:.1} | {per_mib:.1} | {verdict} | {outcome} |");
}

fn assemble_row(name: &str, wire: pb::AssembleRequest) {
    let size = wire.encoded_len();
    let req = prompt::AssembleRequest::try_from(wire).expect("a valid wire request");
    measure(
        name,
        size,
        || (fresh(), req.clone()),
        |(asm, req)| match asm.assemble(req) {
            Ok(a) => format!("OK, {} tokens", a.usage.total_tokens),
            Err(e) => format!("error: {}", short(&e.to_string())),
        },
    );
}

fn batch_row(name: &str, wire: pb::AssembleBatchRequest) {
    let size = wire.encoded_len();
    let reqs: Vec<prompt::AssembleRequest> = wire
        .requests
        .into_iter()
        .map(|r| prompt::AssembleRequest::try_from(r).expect("a valid wire request"))
        .collect();
    measure(
        name,
        size,
        || (fresh(), reqs.clone()),
        |(asm, reqs)| {
            let out = batch::assemble_batch(&asm, &asm.catalog(), reqs, &Cancel::new());
            let ok = out.results.iter().filter(|r| r.is_ok()).count();
            format!("{ok} of {} OK, {} groups", out.results.len(), out.groups.len())
        },
    );
}

fn compact_row(name: &str, wire: pb::CompactRequest) {
    let size = wire.encoded_len();
    let req = CompactRequest::try_from(wire).expect("a valid wire request");
    measure(
        name,
        size,
        || (Compactor::new(fresh()), req.clone()),
        |(c, req)| match c.compact(req, &Cancel::new()) {
            Ok(out) => format!(
                "{}, {} -> {} tokens",
                out.outcome.as_str(),
                out.tokens_before,
                out.tokens_after
            ),
            Err(e) => format!("error: {}", short(&e.to_string())),
        },
    );
}

fn short(s: &str) -> String {
    s.chars().take(60).collect()
}

/// An ordinary large SUMMARY: prose, truncated to `max_tokens`.
fn prose_summary(bytes: usize, max_tokens: u32) -> pb::AssembleRequest {
    let mut req = shapes::whitespace_summary(0);
    req.blocks[0].max_tokens = max_tokens;
    req.blocks[0].items[0].content = workload::prose(&mut Rng::new(7), bytes);
    req
}

/// An ordinary long conversation of prose messages, compacted at once.
fn prose_conversation(messages: usize, bytes_each: usize) -> pb::CompactRequest {
    let mut rng = Rng::new(11);
    let mut req = shapes::forged_continuation(0, 0);
    req.messages = (0..messages)
        .map(|i| pb::ConversationMessage {
            id: format!("m{i}"),
            role: if i % 2 == 0 {
                pb::Role::User
            } else {
                pb::Role::Assistant
            }
            .into(),
            content: vec![pb::ContentBlock {
                block: Some(pb::content_block::Block::Text(workload::prose(
                    &mut rng, bytes_each,
                ))),
            }],
        })
        .collect();
    req
}

/// A batch at the request limit whose static prefixes are all distinct:
/// `bytes` of prose each.
fn prose_prefixes(model: &str, bytes: usize) -> pb::AssembleBatchRequest {
    let mut batch = shapes::distinct_batch_prefixes(MAX_BATCH_REQUESTS, model);
    let mut rng = Rng::new(9);
    for r in &mut batch.requests {
        let prose = workload::prose(&mut rng, bytes);
        r.static_segments[0].content.push_str(&prose);
    }
    batch
}

fn main() {
    println!("| shape | request MiB | CPU ms | CPU ms per MiB | target | result |");
    println!("|---|---:|---:|---:|---|---|");

    let n = largest(MAX_WIRE, shapes::whitespace_summary);
    assemble_row("blank-line SUMMARY, max_tokens 8", shapes::whitespace_summary(n));

    let held = prompt::MAX_PRINCIPAL_SCOPES;
    let per_item = prompt::MAX_SCOPES_PER_ITEM;
    let n = largest(MAX_WIRE, |n| shapes::many_scopes(n, per_item, held)).min(MAX_ITEMS);
    assemble_row(
        &format!("{n} items x {per_item} scopes, principal {held}"),
        shapes::many_scopes(n, per_item, held),
    );

    let calls = prompt::MAX_TOOL_CALL_IDS_PER_MESSAGE;
    let turns = (MAX_ITEMS - 2) / (calls + 1);
    assemble_row(
        &format!("{turns} turns x {calls} calls answered from the end"),
        shapes::tool_calls_answered_from_the_end(turns, calls),
    );

    // At most 256 requests in a batch; the rest of the size goes to their
    // distinct prefixes.
    let bytes = largest(MAX_WIRE, |b| prose_prefixes("gpt-4o", b));
    batch_row(
        &format!(
            "batch of {MAX_BATCH_REQUESTS} distinct {} KiB prefixes",
            bytes >> 10
        ),
        prose_prefixes("gpt-4o", bytes),
    );
    let bytes = largest(MAX_WIRE, |b| prose_prefixes("no-such-model", b));
    batch_row(
        &format!("batch of {MAX_BATCH_REQUESTS} distinct prefixes, all invalid"),
        prose_prefixes("no-such-model", bytes),
    );

    // Each call and its result count against the item limit; forged names
    // fill the rest of the size.
    let calls = (MAX_ITEMS - 8) / 2;
    let n = largest(MAX_WIRE, |n| shapes::forged_continuation(n, calls));
    compact_row(
        &format!("forged continuation: {n} names, {calls} calls"),
        shapes::forged_continuation(n, calls),
    );

    let tokens = largest(MAX_WIRE, |t| {
        pb::AssembleRequest::from(workload::request(Shape::new(t, 5_000), 3))
    });
    let ordinary = pb::AssembleRequest::from(workload::request(Shape::new(tokens, 5_000), 3));
    assemble_row("ordinary: prose, 5,000 evidence items", ordinary);
    assemble_row(
        "ordinary: 4 MiB prose SUMMARY, max_tokens 100,000",
        prose_summary(MAX_WIRE - 4096, 100_000),
    );
    let n = largest(MAX_WIRE, |n| prose_conversation(n, 2048));
    compact_row(
        &format!("ordinary: compact {n} prose messages"),
        prose_conversation(n, 2048),
    );

    // The floor: counting the bytes once, which every shape whose content is
    // measured pays.
    let text = workload::prose(&mut Rng::new(5), MAX_WIRE);
    let tok = tokens::Tokenizer::exact(tokens::Encoding::O200kBase);
    measure(
        "reference: count 4 MiB of prose once (o200k)",
        MAX_WIRE,
        || text.clone(),
        |t| format!("{} tokens", tok.count(&t)),
    );
}
