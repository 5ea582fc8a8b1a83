//! Per warm call, side by side in one run: the server CPU and the client
//! latency of the sidecar (a release binary, spawned) over TCP loopback and
//! over a Unix socket, for `ListModels`, `CountTokens("hi")` and a warm 4k
//! `Assemble`; and of the transport floor, a bare tonic server (tonic's own
//! transport, prost's codec, nothing else) answering an empty unary call on
//! the same path, over both transports, with the same client.
//!
//! One client, one call at a time (what a gateway's single request sees).
//! Server CPU is read from the server process's threads
//! (`/proc/PID/task/*/schedstat`, nanoseconds on CPU) around each cell of
//! `--calls` calls; cells run in a new order each round and each figure is
//! the median over `--rounds` rounds.
//!
//! `fresh` measures the fresh workload (`workload::fresh`) the same way
//! but under load (`--concurrency` calls in flight over two connections,
//! as loadgen's fresh rows): the sidecar's server CPU per request, cold (a
//! nonce before every text) and warm, beside the bare server carrying the
//! same cold requests and answering each with the sidecar's answer to the
//! first, and this process counting once what each request keeps (its static
//! segments, query and kept items; dropped items not at all). The bare
//! server plus that counting is at least what any exact server built on
//! tonic pays for a cold request before it hashes, allocates or renders
//! anything.
//!
//! `warm` runs a warm 4k `Assemble` at concurrency 1, 4 and 16 against
//! the bare server carrying the same request and the same answer bytes
//! (see `support/warm.rs`).
//!
//! ```sh
//! cargo build --release --bin context-assembler --example transport_floor
//! target/release/examples/transport_floor measure target/release/context-assembler --calls 3000 --rounds 5
//! target/release/examples/transport_floor fresh target/release/context-assembler --budget 4000 --calls 3000 --rounds 3
//! target/release/examples/transport_floor warm target/release/context-assembler --calls 3000 --rounds 5
//! target/release/examples/transport_floor floor unix:/tmp/floor.sock     # the floor server alone
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bare.rs"]
mod bare;
#[path = "support/kept.rs"]
mod kept;
#[path = "support/process.rs"]
mod support;
#[path = "support/warm.rs"]
mod warm;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use context_assembler::assemble::Assembler;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::tokens::{Encoding, Tokenizer};
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::{self, Shape};
use prost::Message as _;
use support::{cpu_between, cpu_by_thread, median, sidecar, thread_cpu};
use tonic::transport::{Channel, Endpoint};

const USAGE: &str = "usage: transport_floor floor ADDR [ANSWER_FILE] \
                     | measure SIDECAR_BINARY [--config FILE] [--calls N] [--rounds R] \
                     | fresh SIDECAR_BINARY [--budget B] [--concurrency C] [--calls N] [--rounds R] \
                     | warm SIDECAR_BINARY... [--concurrency 1,4,16] [--calls N] [--rounds R] \
                     | drive ADDR list-models|count-tokens|assemble4k CALLS";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // `--name N` of the arguments, else `default`.
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect(USAGE))
    };
    match args.first().map(String::as_str) {
        Some("floor") => runtime.block_on(bare::serve(args.get(1).expect(USAGE), args.get(2).map(Path::new))),
        Some("measure") => {
            let binary = PathBuf::from(args.get(1).expect(USAGE));
            let config = args
                .iter()
                .position(|a| a == "--config")
                .and_then(|i| args.get(i + 1))
                .cloned();
            runtime.block_on(measure(
                &binary,
                config.as_deref(),
                flag("--calls", 3000),
                flag("--rounds", 5),
            ));
        }
        Some("fresh") => {
            let binary = PathBuf::from(args.get(1).expect(USAGE));
            runtime.block_on(fresh(
                &binary,
                u32::try_from(flag("--budget", 4000)).expect(USAGE),
                flag("--concurrency", 4),
                flag("--calls", 4000),
                flag("--rounds", 3),
            ));
        }
        Some("warm") => {
            // Every argument before the first flag is a sidecar binary.
            let binaries: Vec<PathBuf> = args[1..]
                .iter()
                .take_while(|a| !a.starts_with("--"))
                .map(PathBuf::from)
                .collect();
            assert!(!binaries.is_empty(), "{USAGE}");
            let concurrencies: Vec<usize> = args
                .iter()
                .position(|a| a == "--concurrency")
                .and_then(|i| args.get(i + 1))
                .map_or("1,4,16", String::as_str)
                .split(',')
                .map(|c| c.parse().expect(USAGE))
                .collect();
            runtime.block_on(warm::run(
                &binaries,
                &concurrencies,
                flag("--calls", 3000),
                flag("--rounds", 5),
            ));
        }
        Some("drive") => {
            let rpc = match args.get(2).map(String::as_str) {
                Some("list-models") => Rpc::ListModels,
                Some("count-tokens") => Rpc::CountTokens,
                Some("assemble4k") => Rpc::Assemble4k,
                _ => panic!("{USAGE}"),
            };
            let calls = args.get(3).and_then(|n| n.parse().ok()).expect(USAGE);
            runtime.block_on(drive(args.get(1).expect(USAGE), rpc, calls));
        }
        _ => panic!("{USAGE}"),
    }
}

/// `calls` calls of `rpc` to a running server, one at a time (for a
/// profiler attached to the server); prints the client p50.
async fn drive(addr: &str, rpc: Rpc, calls: usize) {
    let mut client = AssemblerClient::new(channel(addr).await)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let assemble = pb::AssembleRequest::from(workload::request(Shape::new(4000, 16), 42));
    let (_, p50, _) = cell(&mut client, std::process::id(), rpc, calls, &assemble).await;
    println!("{calls} calls of {rpc:?}: client p50 {p50:.1} us");
}

/// The same client settings for every server; only the dialling differs.
async fn channel(addr: &str) -> Channel {
    let endpoint = Endpoint::from_shared(match addr.strip_prefix("unix:") {
        Some(_) => "http://localhost".to_owned(),
        None => format!("http://{addr}"),
    })
    .unwrap()
    .tcp_nodelay(true)
    .initial_stream_window_size(8 << 20)
    .initial_connection_window_size(16 << 20);
    match addr.strip_prefix("unix:") {
        Some(path) => context_assembler::server::dial::channel(endpoint, std::path::Path::new(path))
            .await
            .unwrap(),
        None => endpoint.connect().await.unwrap(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Rpc {
    ListModels,
    CountTokens,
    Assemble4k,
}

/// What one cell measured: server CPU µs per call, client p50 and p90 µs.
type Figures = (f64, f64, f64);

/// One cell: `calls` warm calls, one at a time.
async fn cell(
    client: &mut AssemblerClient<Channel>,
    pid: u32,
    rpc: Rpc,
    calls: usize,
    assemble: &pb::AssembleRequest,
) -> Figures {
    let count = pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned())),
        text: "hi".into(),
    };
    let one = async |client: &mut AssemblerClient<Channel>| match rpc {
        Rpc::ListModels => drop(client.list_models(pb::ListModelsRequest {}).await.unwrap()),
        Rpc::CountTokens => drop(client.count_tokens(count.clone()).await.unwrap()),
        Rpc::Assemble4k => drop(client.assemble(assemble.clone()).await.unwrap()),
    };
    for _ in 0..calls / 10 {
        one(client).await;
    }
    let mut times = Vec::with_capacity(calls);
    let before = cpu_by_thread(pid);
    for _ in 0..calls {
        let started = Instant::now();
        one(client).await;
        times.push(started.elapsed());
    }
    let after = cpu_by_thread(pid);
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    (
        cpu_between(&before, &after) as f64 / 1e3 / calls as f64,
        at(0.5),
        at(0.9),
    )
}

async fn measure(binary: &Path, config: Option<&str>, calls: usize, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let sock = |name: &str| format!("unix:{}", dir.path().join(name).display());
    let servers = [
        ("sidecar", "tcp", sidecar(binary, config, "127.0.0.1:0")),
        ("sidecar", "uds", sidecar(binary, config, &sock("sidecar.sock"))),
        ("floor", "tcp", bare::process("127.0.0.1:0", None)),
        ("floor", "uds", bare::process(&sock("floor.sock"), None)),
    ];
    let mut clients = Vec::new();
    let mut channels = Vec::new();
    for (_, _, s) in &servers {
        let ch = channel(&s.addr).await;
        channels.push(ch.clone());
        let mut c = AssemblerClient::new(ch)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        // The sidecar is ready once its vocabularies are loaded.
        let ready_by = Instant::now() + Duration::from_secs(60);
        while c.list_models(pb::ListModelsRequest {}).await.is_err() && Instant::now() < ready_by {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        clients.push(c);
    }
    let assemble = pb::AssembleRequest::from(workload::request(Shape::new(4000, 16), 42));
    // The sidecar waits for SERVING before the first count; a first call
    // of each kind warms its caches.
    for (c, ch) in clients[..2].iter_mut().zip(&channels) {
        let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
        let serving = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
        let serving_by = Instant::now() + Duration::from_secs(60);
        while health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map(|r| r.into_inner().status)
            .ok()
            != Some(serving)
        {
            assert!(
                Instant::now() < serving_by,
                "the sidecar was not SERVING within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.assemble(assemble.clone()).await.unwrap();
    }
    let mut cells: Vec<(usize, Rpc)> = Vec::new();
    for rpc in [Rpc::ListModels, Rpc::CountTokens, Rpc::Assemble4k] {
        cells.extend([(0, rpc), (1, rpc)]);
    }
    cells.extend([(2, Rpc::ListModels), (3, Rpc::ListModels)]);
    let mut results: HashMap<(usize, Rpc), Vec<Figures>> = HashMap::new();
    for round in 0..rounds {
        let mut order = cells.clone();
        order.rotate_left(round % cells.len());
        if round % 2 == 1 {
            order.reverse();
        }
        for (server, rpc) in order {
            let pid = servers[server].2.child.id();
            let r = cell(&mut clients[server], pid, rpc, calls, &assemble).await;
            eprintln!(
                "round {round} {} {} {rpc:?}: {:.1} us CPU, p50 {:.1} us",
                servers[server].0, servers[server].1, r.0, r.1
            );
            results.entry((server, rpc)).or_default().push(r);
        }
    }
    println!(
        "| server | transport | rpc | server CPU us/call (median of {rounds}, range) | client p50 us | client p90 us |"
    );
    println!("|---|---|---|---:|---:|---:|");
    let mut cpu = HashMap::new();
    for (server, rpc) in &cells {
        let r = &results[&(*server, *rpc)];
        let c: Vec<f64> = r.iter().map(|x| x.0).collect();
        let (lo, hi) = (
            c.iter().copied().fold(f64::MAX, f64::min),
            c.iter().copied().fold(0.0, f64::max),
        );
        let m = median(c);
        cpu.insert((*server, *rpc), m);
        println!(
            "| {} | {} | {rpc:?}{} | {m:.1} ({lo:.1}-{hi:.1}) | {:.1} | {:.1} |",
            servers[*server].0,
            servers[*server].1,
            if *server >= 2 { " (empty)" } else { "" },
            median(r.iter().map(|x| x.1).collect()),
            median(r.iter().map(|x| x.2).collect()),
        );
    }
    for (t, name) in [(0, "tcp"), (1, "uds")] {
        println!(
            "ListModels server CPU over the floor, {name}: {:.2}x",
            cpu[&(t, Rpc::ListModels)] / cpu[&(t + 2, Rpc::ListModels)]
        );
    }
}

/// The fresh workload at `budget`, side by side in one run, `concurrency`
/// calls in flight over two connections (loadgen's defaults for the fresh
/// rows): server CPU per request of the sidecar on cold requests (a nonce
/// before every text, as loadgen's `--cold`), of the sidecar on the same
/// requests warm (the workload's 200 requests repeated, every count a cache
/// hit), and of the bare tonic server carrying the same cold requests and
/// answering each with the sidecar's own answer to the first of them. The
/// last is the floor: what receiving, decoding and answering requests of
/// this size costs before anything is counted or assembled.
async fn fresh(binary: &Path, budget: u32, concurrency: usize, calls: usize, rounds: usize) {
    let shape = Fresh {
        requests: Fresh::REQUESTS,
        budget,
        seed: Replay::default().seed,
    };
    let domain = shape.requests();
    // What any exact server counts of each request at least: its static
    // segments, its query and the items it keeps (found by this build's
    // library), each once. An item it drops it counts only as far as the
    // room it was offered, or not at all, so this is a lower bound.
    let library = Assembler::new(context_assembler::config::default_catalog(), 64 << 20);
    let kept_texts: Vec<Vec<String>> = domain
        .iter()
        .enumerate()
        .map(|(n, r)| {
            // As sent cold: a nonce of the cells' form before every text.
            let mut r = r.clone();
            let nonce = format!("n{} ", 1_000_000 + n);
            for s in &mut r.static_segments {
                s.content.insert_str(0, &nonce);
            }
            for item in r.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
                item.content.insert_str(0, &nonce);
            }
            r.query.insert_str(0, &nonce);
            let out = library.assemble(r.clone()).unwrap();
            kept::kept_texts(&r, out.decisions.iter().map(|d| d.kept_item_ids.as_slice()))
        })
        .collect();
    let requests: Arc<Vec<pb::AssembleRequest>> =
        Arc::new(domain.into_iter().map(pb::AssembleRequest::from).collect());
    let dir = tempfile::tempdir().unwrap();
    let side = sidecar(binary, None, "127.0.0.1:0");
    let side_clients = clients(&side.addr, concurrency).await;
    let mut first = side_clients[0].clone();
    let ready_by = Instant::now() + Duration::from_secs(60);
    let answer = loop {
        match first.assemble(requests[0].clone()).await {
            Ok(a) => break a.into_inner(),
            Err(e) if Instant::now() > ready_by => panic!("the sidecar did not answer: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let answer_file = dir.path().join("answer.bin");
    std::fs::write(&answer_file, answer.encode_to_vec()).unwrap();
    let floor = bare::process("127.0.0.1:0", Some(&answer_file));
    let floor_clients = clients(&floor.addr, concurrency).await;
    let request_bytes = requests.iter().map(|r| r.encoded_len()).sum::<usize>() / requests.len();
    eprintln!(
        "{}; mean request {request_bytes} bytes, the answer {} bytes",
        shape.describe(),
        answer.encoded_len()
    );
    // The sidecar's warm cells find every count of the workload cached.
    drive_cell(&side_clients, &requests, None, requests.len()).await;
    let nonces = Arc::new(AtomicUsize::new(0));
    let cells = [
        ("sidecar", "cold"),
        ("sidecar", "warm"),
        ("bare tonic", "cold"),
        ("counting what it keeps once, in process", "cold"),
    ];
    let o200k = Tokenizer::exact(Encoding::O200kBase);
    // Its tables are built on first use, not in a measured cell.
    assert!(o200k.count(&kept_texts[0][0]) > 0);
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.rotate_left(round % cells.len());
        for c in order {
            if c == 3 {
                // What counting what a request keeps once costs this
                // process on one thread (gpt-4o's o200k, no cache): the
                // part of a cold request no cache can save.
                let started = thread_cpu();
                for texts in &kept_texts {
                    let tokens: u32 = texts.iter().map(|t| o200k.count(std::hint::black_box(t))).sum();
                    std::hint::black_box(tokens);
                }
                let us = (thread_cpu() - started).as_secs_f64() * 1e6 / kept_texts.len() as f64;
                eprintln!("round {round} counting in process: {us:.1} us per request");
                results[c].push(us);
                continue;
            }
            let (server, clients) = if c == 2 {
                (&floor, &floor_clients)
            } else {
                (&side, &side_clients)
            };
            let cold = (cells[c].1 == "cold").then_some(&nonces);
            let before = cpu_by_thread(server.child.id());
            drive_cell(clients, &requests, cold, calls).await;
            let us = cpu_between(&before, &cpu_by_thread(server.child.id())) as f64 / 1e3 / calls as f64;
            eprintln!(
                "round {round} {} {}: {us:.1} us server CPU per request",
                cells[c].0, cells[c].1
            );
            results[c].push(us);
        }
    }
    println!("| server | requests | CPU us/request (median of {rounds}, range) |");
    println!("|---|---|---:|");
    for (c, (server, kind)) in cells.iter().enumerate() {
        let r = &results[c];
        let (lo, hi) = (
            r.iter().copied().fold(f64::MAX, f64::min),
            r.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "| {server} | fresh {}k, {kind} | {:.1} ({lo:.1}-{hi:.1}) |",
            budget / 1000,
            median(r.clone())
        );
    }
}

/// `concurrency` clients over two connections, alternating.
async fn clients(addr: &str, concurrency: usize) -> Vec<AssemblerClient<Channel>> {
    let channels = [channel(addr).await, channel(addr).await];
    (0..concurrency)
        .map(|i| {
            AssemblerClient::new(channels[i % 2].clone())
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20)
        })
        .collect()
}

/// `calls` requests of the workload in a loop, one client per call in
/// flight; with `nonces`, each request made new by a nonce before every
/// text. Every answer must be OK.
async fn drive_cell(
    clients: &[AssemblerClient<Channel>],
    requests: &Arc<Vec<pb::AssembleRequest>>,
    nonces: Option<&Arc<AtomicUsize>>,
    calls: usize,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let (mut client, next, requests) = (client.clone(), next.clone(), requests.clone());
            let nonces = nonces.cloned();
            tokio::spawn(async move {
                loop {
                    let ticket = next.fetch_add(1, Ordering::Relaxed);
                    if ticket >= calls {
                        break;
                    }
                    let mut r = requests[ticket % requests.len()].clone();
                    if let Some(n) = &nonces {
                        let nonce = format!("n{} ", n.fetch_add(1, Ordering::Relaxed));
                        for s in &mut r.static_segments {
                            s.content.insert_str(0, &nonce);
                        }
                        for item in r.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
                            item.content.insert_str(0, &nonce);
                        }
                        r.query.insert_str(0, &nonce);
                    }
                    client.assemble(r).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
