//! `transport_floor warm`: a warm 4k `Assemble` at several concurrencies,
//! the sidecar beside a bare tonic server carrying the same bytes.
//!
//! The floor decodes the same request into prost's owned messages and
//! answers it with the sidecar's own encoded answer to it (captured once
//! warm, so the same size and bytes go back). What is left between the two
//! is what the sidecar's layers, its warm assembly and its encoding cost.
//! Each round runs, for each concurrency, the two cells back to back in an
//! order that alternates round by round; a cell is `calls` calls with that
//! many in flight (over two connections, as `fresh`), after a tenth as many
//! unmeasured ones. Server CPU per call is the sum over the server's threads
//! (`/proc/PID/task/*/schedstat`) across the cell.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use context_assembler::grpc::pb;
use context_assembler::workload::{self, Shape};
use prost::Message as _;

use crate::support::{Server, cpu_between, cpu_by_thread, median, sidecar};
use crate::{bare, clients, drive_cell};

/// One cell's figures: server CPU µs per call, and calls per second.
type Cell = (f64, f64);

/// Runs the comparison and prints one row per concurrency and sidecar
/// (`binaries`: one, or a build before and after a change, side by side).
/// Every sidecar must answer the same bytes.
pub async fn run(binaries: &[PathBuf], concurrencies: &[usize], calls: usize, rounds: usize) {
    let request = pb::AssembleRequest::from(workload::request(Shape::new(4000, 16), 42));
    let requests = Arc::new(vec![request.clone()]);
    let sidecars: Vec<_> = binaries.iter().map(|b| sidecar(b, None, "127.0.0.1:0")).collect();
    let answer = warm_answer(&sidecars[0].addr, &request).await;
    for s in &sidecars[1..] {
        assert_eq!(
            warm_answer(&s.addr, &request).await,
            answer,
            "the sidecars answer alike"
        );
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let answer_file = dir.path().join("answer.bin");
    std::fs::write(&answer_file, &answer).expect("the answer written");
    let floor = bare::process("127.0.0.1:0", Some(&answer_file));
    let mut to_floor = clients(&floor.addr, 1).await.remove(0);
    let echoed = to_floor
        .assemble(request.clone())
        .await
        .expect("the floor answers");
    assert_eq!(
        echoed.into_inner().encode_to_vec(),
        answer,
        "the floor sends the sidecar's answer"
    );
    eprintln!(
        "warm 4k Assemble: request {} bytes, answer {} bytes; calls {calls}, rounds {rounds}",
        request.encoded_len(),
        answer.len()
    );
    // The floor last: servers[n] for n < sidecars.len() are the sidecars.
    let servers: Vec<&Server> = sidecars.iter().chain([&floor]).collect();
    let mut pools = Vec::new();
    for &c in concurrencies {
        let mut pool = Vec::new();
        for s in &servers {
            pool.push(clients(&s.addr, c).await);
        }
        pools.push(pool);
    }
    // results[concurrency][server]
    let mut results = vec![vec![Vec::new(); servers.len()]; concurrencies.len()];
    for round in 0..rounds {
        for (k, &c) in concurrencies.iter().enumerate() {
            let mut order: Vec<usize> = (0..servers.len()).collect();
            order.rotate_left((round + k) % servers.len());
            if round % 2 == 1 {
                order.reverse();
            }
            for s in order {
                let pid = servers[s].child.id();
                drive_cell(&pools[k][s], &requests, None, calls / 10).await;
                let before = cpu_by_thread(pid);
                let started = Instant::now();
                drive_cell(&pools[k][s], &requests, None, calls).await;
                let wall = started.elapsed().as_secs_f64();
                let cpu = cpu_between(&before, &cpu_by_thread(pid)) as f64 / 1e3 / calls as f64;
                eprintln!(
                    "round {round} concurrency {c} {}: {cpu:.1} us CPU/call, {:.0} calls/s",
                    name(binaries, s),
                    calls as f64 / wall
                );
                results[k][s].push((cpu, calls as f64 / wall));
            }
        }
    }
    print_table(binaries, concurrencies, &results, rounds);
}

/// The name of server `s`: a sidecar's binary, or the floor.
fn name(binaries: &[PathBuf], s: usize) -> String {
    binaries
        .get(s)
        .map_or_else(|| "floor".to_owned(), |b| b.display().to_string())
}

/// The sidecar's encoded answer to `request` once warm (its counts cached,
/// its prefix seen), after waiting for it to serve.
async fn warm_answer(addr: &str, request: &pb::AssembleRequest) -> Vec<u8> {
    let mut client = clients(addr, 1).await.remove(0);
    let ready_by = Instant::now() + Duration::from_secs(60);
    loop {
        match client.assemble(request.clone()).await {
            Ok(_) => break,
            Err(e) if Instant::now() > ready_by => panic!("the sidecar did not answer: {e:?}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let warm = client.assemble(request.clone()).await.expect("a warm answer");
    warm.into_inner().encode_to_vec()
}

/// `lo-hi` of a cell's CPU figures.
fn range(cells: &[Cell]) -> (f64, f64) {
    cells
        .iter()
        .fold((f64::MAX, 0.0_f64), |(lo, hi), c| (lo.min(c.0), hi.max(c.0)))
}

fn print_table(binaries: &[PathBuf], concurrencies: &[usize], results: &[Vec<Vec<Cell>>], rounds: usize) {
    println!(
        "| concurrency | server | CPU us/call (median of {rounds}, range) | over the floor (median of the \
         rounds' ratios, range) | calls/s |"
    );
    println!("|---:|---|---:|---:|---:|");
    for (k, c) in concurrencies.iter().enumerate() {
        let floor = &results[k][binaries.len()];
        for (s, cells) in results[k].iter().enumerate() {
            let cpu = median(cells.iter().map(|x| x.0).collect());
            let rate = median(cells.iter().map(|x| x.1).collect());
            let (lo, hi) = range(cells);
            let ratios: Vec<f64> = cells.iter().zip(floor).map(|(s, f)| s.0 / f.0).collect();
            let (rlo, rhi) = ratios
                .iter()
                .fold((f64::MAX, 0.0_f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
            println!(
                "| {c} | {} | {cpu:.1} ({lo:.1}-{hi:.1}) | {:.2}x ({rlo:.2}-{rhi:.2}) | {rate:.0} |",
                name(binaries, s),
                median(ratios),
            );
        }
    }
}
