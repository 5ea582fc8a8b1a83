//! Profiling driver: repeats warm server-side Assembles (decode, assemble,
//! encode) so a profiler can attribute their time. Either one synthetic
//! request (`TOKENS`, default 32k) or, with `replay`, a pass over the replay
//! workload at a prompt size (default 4k), warmed once before timing.
//! Usage: profile_warm [ITERATIONS] [TOKENS]
//!        profile_warm replay [PASSES] [PROMPT_TOKENS]
#![allow(clippy::unwrap_used)]

use context_assembler::assemble::{Assembler, DEFAULT_CACHE_BYTES};

/// The sidecar's allocator, so the profile is the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use context_assembler::grpc::pb;
use context_assembler::prompt::AssembleRequest;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::{self, Shape};
use prost::Message as _;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let replay = args.first().is_some_and(|a| a == "replay");
    let num = |i: usize, d: usize| {
        args.get(i + usize::from(replay))
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let requests: Vec<Vec<u8>> = if replay {
        Replay {
            families: 4,
            users: 20,
            prompt_tokens: num(1, 4_000),
            ..Replay::default()
        }
        .requests()
        .into_iter()
        .map(|r| pb::AssembleRequest::from(r.request).encode_to_vec())
        .collect()
    } else {
        vec![pb::AssembleRequest::from(workload::request(Shape::new(num(1, 32_000), 16), 42)).encode_to_vec()]
    };
    let iterations = num(0, if replay { 20 } else { 2000 });
    let asm = Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES);
    let mut total = 0usize;
    let once = |bytes: &[u8]| {
        let req = AssembleRequest::try_from(pb::AssembleRequest::decode(bytes).unwrap()).unwrap();
        let out = asm.assemble(req).unwrap();
        pb::AssembleResponse::from(out).encode_to_vec().len()
    };
    requests.iter().for_each(|r| total += once(r));
    let started = std::time::Instant::now();
    for _ in 0..iterations {
        for r in &requests {
            total += once(r);
        }
    }
    let n = iterations * requests.len();
    let per = started.elapsed() / n as u32;
    println!(
        "{n} warm requests, {per:?} per request ({} distinct, {total} response bytes in all)",
        requests.len()
    );
}
