//! What the log span of one Assemble costs alone, under the subscriber the
//! sidecar installs (`telemetry::init_tracing`, the default `info` level
//! unless `RUST_LOG` says otherwise): opened as the service opens it
//! (`grpc::service::assemble_span`), entered four times (a handler's
//! polls) and closed, in rounds.
//!
//! Usage: span_cost [plain|json] [SPANS_PER_ROUND] [ROUNDS]
//! (`RUST_LOG=warn span_cost` times it filtered out.)

use std::time::Instant;

use context_assembler::grpc::pb;
use context_assembler::grpc::service::assemble_span;

/// The sidecar's allocator, so the span's allocations cost what they do there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.first().is_some_and(|a| a == "json");
    let per_round: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    context_assembler::telemetry::init_tracing(json);
    let mut request = pb::AssembleRequest {
        request_id: "req-0123456789abcdef".to_owned(),
        model: "gpt-4o".to_owned(),
        ..Default::default()
    };
    request.blocks.resize_with(6, Default::default);
    let mut each = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..per_round {
            let span = assemble_span(std::hint::black_box(&request));
            for _ in 0..4 {
                let _entered = span.enter();
                std::hint::black_box(&span);
            }
        }
        each.push(started.elapsed().as_nanos() as f64 / f64::from(per_round.max(1)));
    }
    let shown: Vec<String> = each.iter().map(|ns| format!("{ns:.0}")).collect();
    println!(
        "{} format: ns per span (open, 4 enters, close), {rounds} rounds of {per_round}: {}",
        if json { "json" } else { "plain" },
        shown.join(", ")
    );
}
