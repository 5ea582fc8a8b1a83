//! Workload replay: F prefix families x U users x T turns through a real
//! server on loopback, with evidence drawn from a shared corpus by Zipf
//! popularity and some families carrying a per-request timestamp in their
//! system prompt. Runs the same requests as unary `Assemble` calls and as
//! `AssembleBatch` calls (each on a fresh server, same concurrency) and
//! reports cache facts and throughput.
//! Usage: replay [FAMILIES] [USERS] [TURNS] [CONCURRENCY] [BATCH]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::server::Bound;
use context_assembler::workload::replay::Replay;
use tonic::transport::Channel;

async fn server() -> (Channel, std::net::SocketAddr) {
    let config = ServeArgs {
        listen: Some("127.0.0.1:0".to_owned()),
        metrics_listen: Some("127.0.0.1:0".to_owned()),
        max_concurrency: Some(256),
        // Assembly only: no memory file left behind.
        memory_store: Some("off".to_owned()),
        ..ServeArgs::default()
    }
    .validate()
    .unwrap();
    let bound = Bound::bind(config).await.unwrap();
    let (addr, metrics) = (bound.grpc_addr().unwrap(), bound.metrics_addr().unwrap());
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
    loop {
        let s = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status);
        if s.is_ok_and(|s| s == tonic_health::pb::health_check_response::ServingStatus::Serving as i32) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (channel, metrics)
}

async fn segment_lookups(metrics: std::net::SocketAddr) -> (f64, f64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(metrics).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).await.unwrap();
    let value = |result: &str| {
        page.lines()
            .find(|l| {
                l.starts_with("assembler_segment_cache_lookups_total")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0.0)
    };
    (value("hit"), value("miss"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Run {
    elapsed: Duration,
    latencies: Vec<Duration>,
    responses: Vec<(usize, pb::AssembleResponse)>,
    hit_rate: f64,
}

/// Sends `jobs` (each a list of requests: one for unary, several for a
/// batch) from `concurrency` tasks, in order within each task.
async fn run(jobs: Vec<Vec<(usize, pb::AssembleRequest)>>, concurrency: usize, batch: bool) -> Run {
    let (channel, metrics) = server().await;
    let (h0, m0) = segment_lookups(metrics).await;
    let queue = Arc::new(std::sync::Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let queue = queue.clone();
            let mut client = AssemblerClient::new(channel.clone())
                .max_decoding_message_size(256 << 20)
                .max_encoding_message_size(256 << 20);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut got = Vec::new();
                loop {
                    let Some(job) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    let t = Instant::now();
                    if batch {
                        let families: Vec<usize> = job.iter().map(|(f, _)| *f).collect();
                        let req = pb::AssembleBatchRequest {
                            requests: job.into_iter().map(|(_, r)| r).collect(),
                        };
                        let out = client.assemble_batch(req).await.unwrap().into_inner();
                        lat.push(t.elapsed());
                        for (f, r) in families.into_iter().zip(out.results) {
                            match r.result {
                                Some(pb::assemble_result::Result::Response(resp)) => got.push((f, resp)),
                                other => panic!("a request failed: {other:?}"),
                            }
                        }
                    } else {
                        for (f, r) in job {
                            let resp = client.assemble(r).await.unwrap().into_inner();
                            lat.push(t.elapsed());
                            got.push((f, resp));
                        }
                    }
                }
                (lat, got)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut responses = Vec::new();
    for t in tasks {
        let (l, g) = t.await.unwrap();
        latencies.extend(l);
        responses.extend(g);
    }
    let elapsed = started.elapsed();
    let (h1, m1) = segment_lookups(metrics).await;
    latencies.sort();
    let hit_rate = (h1 - h0) / ((h1 - h0) + (m1 - m0)).max(1.0);
    Run {
        elapsed,
        latencies,
        responses,
        hit_rate,
    }
}

fn report(name: &str, r: &Run, requests: usize) {
    println!(
        "{name}: {requests} requests in {:.2?}: {:.0} requests/s; per call p50 {:.2?} p99 {:.2?}; segment-cache hit rate {:.1}%",
        r.elapsed,
        requests as f64 / r.elapsed.as_secs_f64(),
        percentile(&r.latencies, 0.5),
        percentile(&r.latencies, 0.99),
        100.0 * r.hit_rate
    );
}

#[tokio::main]
async fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (families, users, turns, concurrency, batch) =
        (arg(1, 8), arg(2, 100), arg(3, 6), arg(4, 8), arg(5, 16));
    let shape = Replay {
        families,
        users,
        turns,
        ..Replay::default()
    };
    let requests: Vec<(usize, pb::AssembleRequest)> = shape
        .requests()
        .into_iter()
        .map(|r| (r.family, pb::AssembleRequest::from(r.request)))
        .collect();
    let n = requests.len();
    println!("workload: {}", shape.describe());

    let unary = run(
        requests.iter().map(|r| vec![r.clone()]).collect(),
        concurrency,
        false,
    )
    .await;
    // Batches of consecutive requests in arrival order.
    let batches: Vec<Vec<(usize, pb::AssembleRequest)>> = requests.chunks(batch).map(<[_]>::to_vec).collect();
    let batched = run(batches, concurrency, true).await;

    // Prefix facts, from the unary run.
    let mut hashes: HashMap<usize, HashMap<String, usize>> = HashMap::new();
    let (mut prompt_tokens, mut cacheable) = (0u64, 0u64);
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (f, resp) in &unary.responses {
        let cache = resp.cache.as_ref().unwrap();
        let usage = resp.usage.as_ref().unwrap();
        let hints = resp.hints.as_ref().unwrap();
        *hashes
            .entry(*f)
            .or_default()
            .entry(cache.prefix_hash.clone())
            .or_default() += 1;
        prompt_tokens += u64::from(usage.total_tokens);
        // A provider can serve the prefix from cache when it has seen it
        // before and it is above the provider's minimum.
        let first_time = seen.insert(cache.prefix_hash.clone());
        if !first_time && !hints.below_provider_minimum {
            cacheable += u64::from(cache.prefix_tokens);
        }
    }
    let identical: usize = hashes
        .values()
        .map(|h| h.values().max().copied().unwrap_or(0))
        .sum();
    println!(
        "prefixes: {:.1}% of requests carry their family's most common prefix bytes; \
         provider-cacheable prefix tokens are {:.1}% of prompt tokens",
        100.0 * identical as f64 / n as f64,
        100.0 * cacheable as f64 / prompt_tokens.max(1) as f64
    );
    report("Assemble", &unary, n);
    report(&format!("AssembleBatch ({batch} per batch)"), &batched, n);
}
