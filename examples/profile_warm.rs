//! Profiling driver: repeats one warm server-side Assemble (decode, assemble,
//! encode) so a profiler can attribute its time.
//! Usage: profile_warm [ITERATIONS] [TOKENS] [ITEMS] [BUDGET]
#![allow(clippy::unwrap_used)]

use context_assembler::assemble::{AssembleRequest, Assembler, DEFAULT_CACHE_BYTES};
use context_assembler::grpc::pb;
use context_assembler::workload::{self, Shape};
use prost::Message as _;

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let bytes = pb::AssembleRequest::from(workload::request(Shape::new(32_000, 16), 42)).encode_to_vec();
    let asm = Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES);
    let mut total = 0usize;
    let started = std::time::Instant::now();
    for _ in 0..iterations {
        let req = AssembleRequest::try_from(pb::AssembleRequest::decode(bytes.as_slice()).unwrap()).unwrap();
        let out = asm.assemble(req).unwrap();
        total += pb::AssembleResponse::from(out).encode_to_vec().len();
    }
    let per = started.elapsed() / iterations as u32;
    println!(
        "{iterations} iterations, {per:?} per request ({} request bytes, {total} response bytes)",
        bytes.len()
    );
}
