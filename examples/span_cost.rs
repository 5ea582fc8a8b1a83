//! What the log span of one Assemble costs alone, under the subscriber the
//! sidecar installs (`telemetry::init_tracing`, the default `info` level
//! unless `RUST_LOG` says otherwise): opened with the fields the service
//! gives it, entered four times (a handler's polls) and closed, in rounds.
//!
//! Usage: span_cost [plain|json] [SPANS_PER_ROUND] [ROUNDS]
//! (`RUST_LOG=warn span_cost` times it filtered out.)

use std::time::Instant;

/// The sidecar's allocator, so the span's allocations cost what they do there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.first().is_some_and(|a| a == "json");
    let per_round: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    context_assembler::telemetry::init_tracing(json);
    let (request_id, model) = ("req-0123456789abcdef".to_owned(), "gpt-4o".to_owned());
    let mut each = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        for i in 0..per_round {
            // As `grpc::service::assemble_span` opens it.
            let span = tracing::info_span!(
                "assemble",
                rpc = "Assemble",
                request_id = request_id.as_str(),
                model = model.as_str(),
                blocks = i % 7,
            );
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
