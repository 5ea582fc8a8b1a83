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
//! ```sh
//! cargo build --release --bin context-assembler --example transport_floor
//! target/release/examples/transport_floor measure target/release/context-assembler --calls 3000 --rounds 5
//! target/release/examples/transport_floor floor unix:/tmp/floor.sock     # the floor server alone
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/process.rs"]
mod support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::workload::{self, Shape};
use support::{Server, cpu_between, cpu_by_thread, median, sidecar};
use tokio::net::{TcpListener, UnixListener};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint};

const USAGE: &str = "usage: transport_floor floor ADDR | measure SIDECAR_BINARY [--config FILE] [--calls N] [--rounds R] \
                     | drive ADDR list-models|count-tokens|assemble4k CALLS";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("floor") => runtime.block_on(floor(args.get(1).expect(USAGE))),
        Some("measure") => {
            let binary = PathBuf::from(args.get(1).expect(USAGE));
            let flag = |name: &str, default: usize| {
                args.iter()
                    .position(|a| a == name)
                    .and_then(|i| args.get(i + 1))
                    .map_or(default, |v| v.parse().expect(USAGE))
            };
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

/// The floor: `ListModels` answered with an empty message by a hand-written
/// service exactly as tonic's codegen writes one, on tonic's own server.
#[derive(Clone)]
struct Empty;

impl NamedService for Empty {
    const NAME: &'static str = "context_assembler.v1.Assembler";
}

struct EmptyListModels;

impl tonic::server::UnaryService<pb::ListModelsRequest> for EmptyListModels {
    type Response = pb::ListModelsResponse;
    type Future = std::future::Ready<Result<tonic::Response<pb::ListModelsResponse>, tonic::Status>>;

    fn call(&mut self, _: tonic::Request<pb::ListModelsRequest>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(pb::ListModelsResponse::default())))
    }
}

impl tower_service::Service<http::Request<Body>> for Empty {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        Box::pin(async move {
            if req.uri().path() != "/context_assembler.v1.Assembler/ListModels" {
                return Ok(tonic::Status::unimplemented("only ListModels").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
            Ok(grpc.unary(EmptyListModels, req).await)
        })
    }
}

/// Serves the floor on `addr` (`host:port` or `unix:/path`); prints
/// `listening ADDR` once bound.
async fn floor(addr: &str) {
    let server = tonic::transport::Server::builder().add_service(Empty);
    if let Some(path) = addr.strip_prefix("unix:") {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        println!("listening unix:{path}");
        let incoming = futures_util::stream::unfold(listener, |l| async move {
            Some((l.accept().await.map(|(s, _)| s), l))
        });
        server.serve_with_incoming(incoming).await.unwrap();
    } else {
        let listener = TcpListener::bind(addr).await.unwrap();
        println!("listening {}", listener.local_addr().unwrap());
        let incoming = futures_util::stream::unfold(listener, |l| async move {
            let accepted = l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                s
            });
            Some((accepted, l))
        });
        server.serve_with_incoming(incoming).await.unwrap();
    }
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

/// Starts this binary's floor server on `addr`.
fn floor_process(addr: &str) -> Server {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["floor", addr])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().strip_prefix("listening ").unwrap().to_owned();
    Server { child, addr }
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
        ("floor", "tcp", floor_process("127.0.0.1:0")),
        ("floor", "uds", floor_process(&sock("floor.sock"))),
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
        while health
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map(|r| r.into_inner().status)
            .ok()
            != Some(serving)
        {
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
