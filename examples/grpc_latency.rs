//! End-to-end latency of `Assemble` through a real server on loopback: starts
//! the server in-process on 127.0.0.1:0, sends one cold request, then N warm
//! ones sequentially, and prints client-observed percentiles.
//! Usage: grpc_latency [TOKENS] [REQUESTS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::server::Bound;
use context_assembler::workload::{self, Shape};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (tokens, n) = (arg(1, 32_000), arg(2, 2_000));
    let config = ServeArgs {
        listen: Some("127.0.0.1:0".to_owned()),
        metrics_listen: Some("off".to_owned()),
        // Assembly only: no memory file left behind.
        memory_store: Some("off".to_owned()),
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
    // Cold means empty caches with the vocabularies loaded: wait for SERVING.
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
    let mut client = AssemblerClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let req = pb::AssembleRequest::from(workload::request(Shape::new(tokens, 16), 42));
    let started = Instant::now();
    let first = client.assemble(req.clone()).await.unwrap().into_inner();
    let cold = started.elapsed();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let resp = client.assemble(req.clone()).await.unwrap().into_inner();
        times.push(started.elapsed());
        assert_eq!(resp.usage, first.usage);
    }
    times.sort();
    println!(
        "{tokens} tokens ({} prompt tokens): cold {cold:?}; warm n={n} p50 {:?} p90 {:?} p99 {:?}",
        first.usage.unwrap().total_tokens,
        percentile(&times, 0.5),
        percentile(&times, 0.9),
        percentile(&times, 0.99)
    );
}
