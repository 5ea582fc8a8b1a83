//! Counting over the wire against counting in process, side by side in one
//! run: `CountTokens` of 1 MB texts sent to a spawned release sidecar (TCP
//! loopback), its server CPU read from its threads around each cell, against
//! this process counting the same texts with the same library on one
//! thread. Distinct texts (none repeats within a cell), o200k and cl100k,
//! prose and code; cells in a new order each round, medians over rounds.
//!
//! ```sh
//! cargo build --release --bin context-assembler --example count_wire
//! target/release/examples/count_wire target/release/context-assembler --texts 30 --rounds 5
//! ```
//!
//! Beside them, in the same cells, a bare tonic server (`support/bare.rs`:
//! tonic's own server and decoder, prost's codec, a handler that answers a
//! count of 0 without counting) receives the same texts: its CPU per MiB is
//! the transport's floor, a server we did not write, and the last column is
//! the share of in-process speed that a server paying that floor and then
//! counting exactly as fast as this process would reach
//! (`floor / (floor + in process)`, in MiB/s).
//!
//! `--uds` serves and dials a Unix domain socket instead of TCP loopback.
//! `--floor` names an encoding the server does not know, so that it does
//! everything but count (receives, measures, decodes, checks the text's
//! UTF-8, answers INVALID_ARGUMENT): the server column is then the cost of
//! the transport alone, per MiB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bare.rs"]
mod bare;
#[path = "support/process.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::tokens::{Encoding, Tokenizer};
use context_assembler::workload::{self, Rng};
use support::{cpu_between, cpu_by_thread, median, sidecar, thread_cpu};
use tonic::transport::Endpoint;

const USAGE: &str = "usage: count_wire SIDECAR_BINARY [--texts N] [--rounds R] [--mib M] [--uds] [--floor] \
                     | count_wire floor ADDR";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("floor") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(bare::serve(args.get(1).expect(USAGE), None));
        return;
    }
    let binary = PathBuf::from(args.first().expect(USAGE));
    let flag = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect(USAGE))
    };
    let (texts, rounds, mib) = (flag("--texts", 30), flag("--rounds", 5), flag("--mib", 1));
    let uds = args.iter().any(|a| a == "--uds");
    let floor = args.iter().any(|a| a == "--floor");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(measure(&binary, texts, rounds, mib << 20, uds, floor));
}

async fn measure(
    binary: &std::path::Path,
    texts: usize,
    rounds: usize,
    bytes: usize,
    uds: bool,
    floor: bool,
) {
    let socket =
        |name: &str| std::env::temp_dir().join(format!("count_wire-{}-{name}.sock", std::process::id()));
    let listen = |name: &str| {
        if uds {
            format!("unix:{}", socket(name).display())
        } else {
            "127.0.0.1:0".to_owned()
        }
    };
    let server = sidecar(binary, None, &listen("sidecar"));
    let bare = bare::process(&listen("bare"), None);
    let connect = async |server: &support::Server| {
        let endpoint =
            Endpoint::from_shared(format!("http://{}", if uds { "localhost" } else { &server.addr }))
                .unwrap()
                .tcp_nodelay(true)
                .initial_stream_window_size(8 << 20)
                .initial_connection_window_size(16 << 20);
        let channel = match server.addr.strip_prefix("unix:") {
            Some(path) => {
                context_assembler::server::dial::channel(endpoint, std::path::Path::new(path)).await
            }
            None => endpoint.connect().await,
        }
        .unwrap();
        AssemblerClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    };
    let mut client = connect(&server).await;
    let mut bare_client = connect(&bare).await;
    let ready_by = Instant::now() + Duration::from_secs(60);
    while client.list_models(pb::ListModelsRequest {}).await.is_err() && Instant::now() < ready_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kinds = ["prose", "code"];
    let inputs: Vec<Vec<String>> = kinds
        .iter()
        .enumerate()
        .map(|(k, kind)| {
            (0..texts)
                .map(|i| {
                    let mut rng = Rng::new(1000 * k as u64 + i as u64);
                    if *kind == "prose" {
                        workload::prose(&mut rng, bytes)
                    } else {
                        workload::code(&mut rng, bytes)
                    }
                })
                .collect()
        })
        .collect();
    let mut cells = Vec::new();
    for encoding in Encoding::ALL {
        // Its tables are built on first use, not in a measured cell.
        assert!(Tokenizer::exact(encoding).count("warm up") > 0);
        for k in 0..kinds.len() {
            cells.push((encoding, k));
        }
    }
    let pid = server.child.id();
    // Per cell: (in-process, server, bare server) MiB/s per round.
    let mut results = vec![Vec::new(); cells.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.rotate_left(round % cells.len());
        for c in order {
            let (encoding, k) = cells[c];
            let tokenizer = Tokenizer::exact(encoding);
            let total: usize = inputs[k].iter().map(String::len).sum();
            // In process: the same texts, the same counter, one thread.
            let started = thread_cpu();
            let mut local = Vec::with_capacity(texts);
            for t in &inputs[k] {
                local.push(tokenizer.count(std::hint::black_box(t)));
            }
            let own = (thread_cpu() - started).as_secs_f64();
            // Over the wire: server CPU around the same texts, one at a time.
            let before = cpu_by_thread(pid);
            for (t, want) in inputs[k].iter().zip(&local) {
                let name = if floor { "not_an_encoding" } else { encoding.name() };
                let answer = client
                    .count_tokens(pb::CountTokensRequest {
                        tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding(name.to_owned())),
                        text: t.clone().into(),
                    })
                    .await;
                match answer {
                    Ok(a) if !floor => {
                        assert_eq!(a.into_inner().tokens, *want, "the same count over the wire")
                    }
                    Err(s) if floor => assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}"),
                    other => panic!("unexpected answer: {other:?}"),
                }
            }
            let wire = cpu_between(&before, &cpu_by_thread(pid)) as f64 / 1e9;
            // The floor: the same texts to the bare server.
            let before = cpu_by_thread(bare.child.id());
            for t in &inputs[k] {
                let request = pb::CountTokensRequest {
                    tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding(
                        encoding.name().to_owned(),
                    )),
                    text: t.clone().into(),
                };
                assert_eq!(
                    bare_client
                        .count_tokens(request)
                        .await
                        .unwrap()
                        .into_inner()
                        .tokens,
                    0
                );
            }
            let carried = cpu_between(&before, &cpu_by_thread(bare.child.id())) as f64 / 1e9;
            let mb = total as f64 / (1 << 20) as f64;
            eprintln!(
                "round {round} {} {}: in process {:.1} MiB/s, server {:.1} MiB/s, bare server {:.1} MiB/s",
                encoding.name(),
                kinds[k],
                mb / own,
                mb / wire,
                mb / carried
            );
            results[c].push((mb / own, mb / wire, mb / carried));
        }
    }
    println!(
        "| encoding | text | in process MiB/s | server CPU MiB/s | bare tonic server CPU MiB/s | server / in process \
         (median of {rounds}) | ceiling: floor / (floor + in process) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (c, &(encoding, k)) in cells.iter().enumerate() {
        let r = &results[c];
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1}% | {:.1}% |",
            encoding.name(),
            kinds[k],
            median(r.iter().map(|x| x.0).collect()),
            median(r.iter().map(|x| x.1).collect()),
            median(r.iter().map(|x| x.2).collect()),
            100.0 * median(r.iter().map(|x| x.1 / x.0).collect()),
            100.0 * median(r.iter().map(|x| x.2 / (x.2 + x.0)).collect())
        );
    }
}
