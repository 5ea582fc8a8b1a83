//! Assembly while the memory store stalls: starts the server in-process on
//! 127.0.0.1:0 over a SQLite store with the default settings
//! (`memory.recall_timeout_ms = 50`, `recall_failure = "degrade"`), seeds
//! one subject's memories, then runs two phases of SECS seconds, each with
//! CLIENTS clients sending plain Assembles (no recall) back to back and
//! RECALLERS clients sending the same request with a recall:
//!
//! 1. `healthy`: the store answers;
//! 2. `stalled`: another process (python3) holds the SQLite WAL-index locks
//!    every reader needs, as a hung disk or a stuck process would; SQLite
//!    readers retry for about 10 s, then fail.
//!
//! It prints plain-Assemble throughput, recall latency (p50, p99, max) and
//! how many recalls brought memories or answered RECALL_UNAVAILABLE.
//!
//! Usage: store_stall [SECS] [CLIENTS] [RECALLERS] [TOKENS]
//! (defaults 10 4 4 4000); `cargo run --release --example store_stall`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::server::Bound;
use context_assembler::workload::{self, Shape};
use tonic::transport::Channel;

const SUBJECT: &str = "bench/stall";
const MEMORIES: usize = 1000;

#[path = "../tests/sqlite_stall/mod.rs"]
mod sqlite_stall;
use sqlite_stall::SqliteStall as Stall;

#[derive(Default)]
struct Phase {
    plain: usize,
    plain_failed: usize,
    recalls: Vec<Duration>,
    with_memories: usize,
    unavailable: usize,
    recall_failed: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn run(
    channel: &Channel,
    plain: &pb::AssembleRequest,
    recall: &pb::AssembleRequest,
    secs: u64,
    clients: usize,
    recallers: usize,
) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..clients + recallers {
        let mut client = AssemblerClient::new(channel.clone()).max_decoding_message_size(64 << 20);
        let request = if k < clients {
            plain.clone()
        } else {
            recall.clone()
        };
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut phase = Phase::default();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let answer = client.assemble(request.clone()).await;
                let took = started.elapsed();
                match (request.recall.is_some(), answer) {
                    (false, Ok(_)) => phase.plain += 1,
                    (false, Err(_)) => phase.plain_failed += 1,
                    (true, Ok(r)) => {
                        let r = r.into_inner();
                        phase.recalls.push(took);
                        if r.warnings.iter().any(|w| w.code == "RECALL_UNAVAILABLE") {
                            phase.unavailable += 1;
                        } else if r.recall.is_some_and(|x| !x.recalled_ids.is_empty()) {
                            phase.with_memories += 1;
                        }
                    }
                    (true, Err(_)) => phase.recall_failed += 1,
                }
            }
            phase
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Phase::default();
    for t in tasks {
        let p = t.await.unwrap();
        all.plain += p.plain;
        all.plain_failed += p.plain_failed;
        all.recalls.extend(p.recalls);
        all.with_memories += p.with_memories;
        all.unavailable += p.unavailable;
        all.recall_failed += p.recall_failed;
    }
    all.recalls.sort();
    all
}

fn report(name: &str, p: &Phase, secs: u64) {
    println!(
        "{name:8} plain Assemble {:7.1}/s ({} failed) | recall n={} p50 {:?} p99 {:?} max {:?}; \
         with memories {}, RECALL_UNAVAILABLE {}, failed {}",
        p.plain as f64 / secs as f64,
        p.plain_failed,
        p.recalls.len(),
        percentile(&p.recalls, 0.5),
        percentile(&p.recalls, 0.99),
        p.recalls.last().copied().unwrap_or_default(),
        p.with_memories,
        p.unavailable,
        p.recall_failed,
    );
}

#[tokio::main]
async fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (secs, clients, recallers, tokens) = (arg(1, 10) as u64, arg(2, 4), arg(3, 4), arg(4, 4000));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let config = ServeArgs {
        listen: Some("127.0.0.1:0".to_owned()),
        metrics_listen: Some("off".to_owned()),
        memory_sqlite_path: Some(db.clone()),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let bound = Bound::bind(config).await.unwrap();
    let addr = bound.grpc_addr().unwrap();
    tokio::spawn(bound.serve(std::future::pending()));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .tcp_nodelay(true)
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(16 << 20)
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    while let Some(m) = watch.message().await.unwrap() {
        if m.status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
            break;
        }
    }
    let mut client = AssemblerClient::new(channel.clone());
    for batch in 0..MEMORIES / 100 {
        let observations = (0..100)
            .map(|i| pb::Observation {
                r#type: "decision".to_owned(),
                text: format!("Decision {batch}-{i}: the ledger service rotates its signing keys weekly."),
                ..Default::default()
            })
            .collect();
        client
            .retain(pb::RetainRequest {
                idempotency_key: format!("seed-{batch}"),
                subject: SUBJECT.to_owned(),
                observations,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let plain = pb::AssembleRequest::from(workload::request(Shape::new(tokens, 16), 42));
    let mut recall = plain.clone();
    recall.recall = Some(pb::Recall {
        subject: SUBJECT.to_owned(),
        query: "ledger signing keys".to_owned(),
        ..Default::default()
    });
    println!(
        "store_stall: {secs} s per phase, {clients} plain clients, {recallers} recall clients, \
         {tokens}-token requests, {MEMORIES} memories (SQLite, recall_timeout_ms = 50)"
    );
    // Warm the caches first, so both phases see the same hit rates.
    run(&channel, &plain, &recall, 2, clients, recallers).await;
    let healthy = run(&channel, &plain, &recall, secs, clients, recallers).await;
    report("healthy", &healthy, secs);
    let stall = Stall::hold(&db);
    let stalled = run(&channel, &plain, &recall, secs, clients, recallers).await;
    report("stalled", &stalled, secs);
    drop(stall);
}
