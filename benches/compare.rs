//! Path (d) of the side-by-side comparison (`benches/compare/README.md`): the
//! library called in-process on the replay workload, the same requests that
//! `export_workload` writes for the Python paths (same shape and seed by
//! default; the bench prints the blake3 of their JSON lines, which equals the
//! exporter's). Each benchmark is one pass over the whole workload, so its
//! throughput is requests per second:
//!
//! - `compare/library_warm/replay_{4k,8k}`: `Assembler::assemble` on owned
//!   domain requests, caches warmed by one earlier pass;
//! - `compare/library_warm_wire/...`: what the server does per request
//!   (protobuf decode, convert, assemble, encode), warm;
//! - `compare/library_cold/...`: one pass starting from empty caches;
//! - `compare/library_cold/sessions_{chat,tool}_4k` and `sessions_agent_8k`:
//!   the session replay, one pass from empty caches over sessions that add
//!   one exchange (an agent: one step) per request (session by session, as
//!   `export_workload --sessions chat|tool-heavy|agent --users 20 --turns 20`
//!   writes them), so each request is cold only in its newest exchange. The
//!   agent sessions run at 8k, the smallest of issue 37's budgets: a step is
//!   about 1,200 tokens and the system prompt 5,000 characters, so at 4k the
//!   window would keep about two steps and measure little but cutting.
//! - `compare/library_cold/fresh_{4k,32k}`: the fresh workload, one pass
//!   from empty caches over 200 requests that each bring new documents, a
//!   new conversation and a new query (only the system prompt repeats),
//!   offering about 1.15x the budget and keeping most of it (as
//!   `export_workload --fresh --prompt-tokens 4000|32000` writes them).
//!
//! The shape can be changed with `COMPARE_FAMILIES`, `COMPARE_USERS`,
//! `COMPARE_TURNS` (sessions: `COMPARE_USERS` sessions of `COMPARE_TURNS`
//! requests, 20 x 20 by default; the fresh workload: `COMPARE_FRESH`
//! requests, 200 by default); criterion's `--test` mode uses a 1 x 2 x 3
//! workload (sessions: 2 x 3; fresh: 3).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use context_assembler::assemble::{Assembler, DEFAULT_CACHE_BYTES};
use context_assembler::grpc::pb;
use context_assembler::prompt::AssembleRequest;
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::sessions::{Sessions, Turns};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message as _;

/// The budgets compared, as in the README's tables.
const PROMPT_TOKENS: [usize; 2] = [4_000, 8_000];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `export_workload`'s default shape (8 x 20 x 6, the replay seed), or a
/// tiny one in criterion's `--test` mode.
fn shape(prompt_tokens: usize) -> Replay {
    let test = std::env::args().any(|a| a == "--test");
    Replay {
        families: env_or("COMPARE_FAMILIES", if test { 1 } else { 8 }),
        users: env_or("COMPARE_USERS", if test { 2 } else { 20 }),
        turns: env_or("COMPARE_TURNS", if test { 3 } else { 6 }),
        prompt_tokens,
        ..Replay::default()
    }
}

/// `export_workload --sessions`' shape (20 sessions x 20 requests, the
/// replay seed) at its default budget for the kind (4k; agent sessions 8k,
/// with a 5,000-character system prompt), or a tiny one in criterion's
/// `--test` mode.
fn sessions(turns: Turns) -> Sessions {
    let test = std::env::args().any(|a| a == "--test");
    let agent = turns == Turns::Agent;
    Sessions {
        sessions: env_or("COMPARE_USERS", if test { 2 } else { 20 }),
        requests: env_or("COMPARE_TURNS", if test { 3 } else { 20 }),
        budget: if agent { 8_000 } else { 4_000 },
        system_chars: turns.system_chars(),
        turns,
        policy: "",
        seed: Replay::default().seed,
    }
}

/// `export_workload --fresh`'s shape at `budget` (200 requests, the replay
/// seed), or a tiny one in criterion's `--test` mode.
fn fresh(budget: u32) -> Fresh {
    let test = std::env::args().any(|a| a == "--test");
    Fresh {
        requests: env_or("COMPARE_FRESH", if test { 3 } else { Fresh::REQUESTS }),
        budget,
        seed: Replay::default().seed,
    }
}

/// The blake3 of the workload as `export_workload` writes it.
fn jsonl_hash(requests: &[AssembleRequest]) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    for r in requests {
        h.update(&serde_json::to_vec(&pb::AssembleRequest::from(r.clone())).unwrap());
        h.update(b"\n");
    }
    h.finalize()
}

fn new_assembler() -> Assembler {
    Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES)
}

/// One pass of owned domain requests; the sum of the totals.
fn pass(asm: &Assembler, requests: Vec<AssembleRequest>) -> u64 {
    requests
        .into_iter()
        .map(|r| u64::from(asm.assemble(r).unwrap().usage.total_tokens))
        .sum()
}

/// One pass as the server does it: decode, convert, assemble, encode.
fn wire_pass(asm: &Assembler, wire: &[Vec<u8>]) -> usize {
    wire.iter()
        .map(|bytes| {
            let req =
                AssembleRequest::try_from(pb::AssembleRequest::decode(bytes.as_slice()).unwrap()).unwrap();
            pb::AssembleResponse::from(asm.assemble(req).unwrap())
                .encode_to_vec()
                .len()
        })
        .sum()
}

/// `compare/library_cold/<id>`: one pass over `requests` from empty caches.
fn cold_row(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, requests: &[AssembleRequest]) {
    g.throughput(Throughput::Elements(requests.len() as u64));
    g.bench_with_input(BenchmarkId::new("library_cold", id), requests, |b, requests| {
        b.iter_batched(
            || (new_assembler(), requests.to_vec()),
            |(cold, r)| pass(&cold, black_box(r)),
            criterion::BatchSize::PerIteration,
        )
    });
}

fn compare(c: &mut Criterion) {
    let mut g = c.benchmark_group("compare");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for tokens in PROMPT_TOKENS {
        let shape = shape(tokens);
        let requests: Vec<AssembleRequest> = shape.requests().into_iter().map(|r| r.request).collect();
        eprintln!(
            "replay_{}k: {} requests, JSON lines blake3 {} ({})",
            tokens / 1000,
            requests.len(),
            jsonl_hash(&requests).to_hex(),
            shape.describe()
        );
        let id = format!("replay_{}k", tokens / 1000);
        g.throughput(Throughput::Elements(requests.len() as u64));

        let warm = new_assembler();
        pass(&warm, requests.clone());
        g.bench_with_input(BenchmarkId::new("library_warm", &id), &requests, |b, requests| {
            b.iter_batched(
                || requests.clone(),
                |r| pass(&warm, black_box(r)),
                criterion::BatchSize::LargeInput,
            )
        });

        let wire: Vec<Vec<u8>> = requests
            .iter()
            .map(|r| pb::AssembleRequest::from(r.clone()).encode_to_vec())
            .collect();
        g.bench_with_input(BenchmarkId::new("library_warm_wire", &id), &wire, |b, wire| {
            b.iter(|| wire_pass(&warm, black_box(wire)))
        });

        cold_row(&mut g, &id, &requests);
    }
    for turns in Turns::ALL {
        let shape = sessions(turns);
        let requests: Vec<AssembleRequest> = shape.requests().into_iter().flatten().collect();
        // sessions_chat_4k, sessions_tool_4k, sessions_agent_8k.
        let id = format!(
            "sessions_{}_{}k",
            turns.name().split('-').next().unwrap_or("chat"),
            shape.budget / 1000
        );
        eprintln!(
            "{id}: {} requests, JSON lines blake3 {} ({} sessions x {} requests, budget {})",
            requests.len(),
            jsonl_hash(&requests).to_hex(),
            shape.sessions,
            shape.requests,
            shape.budget
        );
        cold_row(&mut g, &id, &requests);
    }
    for budget in Fresh::BUDGETS {
        let shape = fresh(budget);
        let requests = shape.requests();
        let id = format!("fresh_{}k", budget / 1000);
        eprintln!(
            "{id}: {} requests, JSON lines blake3 {} ({})",
            requests.len(),
            jsonl_hash(&requests).to_hex(),
            shape.describe()
        );
        cold_row(&mut g, &id, &requests);
    }
    g.finish();
}

criterion_group!(benches, compare);
criterion_main!(benches);
