//! Every hostile shape of `tests/shapes` costs at most n log n in
//! its size, through the domain in process. Each test times the same shape
//! at n and at 8n in one run (the least CPU time of a few repetitions, so
//! that a loaded machine does not skew it) and fails
//! only when the ratio is past what n log n allows with a threefold slack:
//! a quadratic path gives about 64, a linear one about 8, whatever the
//! machine's speed.

use std::sync::Arc;
use std::time::Instant;

use crate::common;
use crate::shapes;
use context_assembler::assemble::{self as domain, Assembler, batch, turns};
use context_assembler::compact::{CompactRequest, Compactor};
use context_assembler::config::default_catalog;
use context_assembler::prompt;
use context_assembler::prompt::Item;
use context_assembler::vocab::Cancel;

fn assembler() -> Arc<Assembler> {
    let asm = Assembler::new(default_catalog(), domain::DEFAULT_CACHE_BYTES);
    asm.warm();
    Arc::new(asm)
}

/// Seconds of CPU this thread has run (`/proc/thread-self/schedstat`): time
/// spent waiting for a core on a loaded machine does not count, where a
/// clock would charge it to long runs more than to short ones. Falls back to
/// the clock where the kernel does not say.
fn cpu_seconds(since: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .map_or_else(|| since.elapsed().as_secs_f64(), |ns| ns as f64 / 1e9)
}

/// The least CPU time of `reps` runs of `run` on a fresh input from `build`,
/// in seconds (building is not timed). The kernel accounts CPU time at
/// scheduler ticks, so each measurement runs enough inputs back to back to
/// last about 50 ms and is divided by their number.
fn fastest<T>(reps: usize, build: &impl Fn() -> T, run: &impl Fn(T)) -> f64 {
    let epoch = Instant::now();
    let input = build();
    let once = Instant::now();
    run(input);
    let batch = (0.05 / once.elapsed().as_secs_f64().max(1e-6))
        .ceil()
        .clamp(1.0, 1000.0) as usize;
    (0..reps)
        .map(|_| {
            let inputs: Vec<T> = (0..batch).map(|_| build()).collect();
            let started = cpu_seconds(epoch);
            for input in inputs {
                run(input);
            }
            (cpu_seconds(epoch) - started) / batch as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Fails when `run` on the shape of size 8n takes more than n log n allows
/// (times 3) over the same shape of size n.
fn assert_n_log_n<T>(what: &str, n: usize, build: impl Fn(usize) -> T, run: impl Fn(T)) {
    // One unmeasured run warms caches of code and vocabulary.
    run(build(n));
    // The machine is shared: the fastest of several runs is the one least
    // disturbed.
    let small = fastest(9, &|| build(n), &run);
    let large = fastest(5, &|| build(8 * n), &run);
    let ratio = large / small.max(1e-9);
    let allowed = 8.0 * ((8 * n) as f64).log2() / (n as f64).log2() * 3.0;
    eprintln!("{what}: n={n} {small:.6}s, 8n {large:.6}s, x{ratio:.1} (n log n allows x{allowed:.1})");
    assert!(
        ratio <= allowed,
        "{what}: {n} -> {} took {small:.6}s -> {large:.6}s (x{ratio:.1}); n log n allows x{allowed:.1}",
        8 * n
    );
}

fn domain_request(wire: context_assembler::grpc::pb::AssembleRequest) -> prompt::AssembleRequest {
    prompt::AssembleRequest::try_from(wire).unwrap()
}

#[test]
fn summary_truncation_over_blank_lines_is_n_log_n() {
    let _turn = common::blocking_turn();
    let asm = assembler();
    assert_n_log_n(
        "whitespace SUMMARY",
        4 << 10,
        |n| domain_request(shapes::whitespace_summary(n)),
        |req| {
            let a = Assembler::assemble(&asm, req).unwrap();
            assert_eq!(a.decisions.len(), 1);
        },
    );
}

#[test]
fn long_runs_are_counted_in_n_log_n() {
    let _turn = common::blocking_turn();
    let asm = assembler();
    let salt = std::sync::atomic::AtomicUsize::new(0);
    assert_n_log_n(
        "long runs",
        32 << 10,
        |n| {
            domain_request(shapes::long_runs(
                n,
                salt.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            ))
        },
        |req| {
            let a = asm.assemble(req).unwrap();
            assert!(a.usage.total_tokens > 0);
        },
    );
}

#[test]
fn scope_checks_are_n_log_n_in_items_and_scopes() {
    let _turn = common::blocking_turn();
    let asm = assembler();
    assert_n_log_n(
        "scopes",
        512,
        |n| domain_request(shapes::many_scopes(n, 8, n)),
        |req| {
            asm.assemble(req).unwrap();
        },
    );
}

#[test]
fn turn_grouping_is_n_log_n_in_calls_answered_from_the_end() {
    let _turn = common::blocking_turn();
    assert_n_log_n(
        "tool calls",
        2048,
        |n| {
            let mut req = domain_request(shapes::tool_calls_answered_from_the_end(1, n));
            std::mem::take(&mut req.blocks[0].items)
        },
        |items: Vec<Item>| {
            let refs: Vec<&Item> = items.iter().collect();
            let units = turns::group(&refs);
            assert_eq!(units.len(), 3);
            assert!(units.iter().all(|u| u.invalid.is_none()));
        },
    );
}

#[test]
fn batch_grouping_is_n_log_n_in_distinct_prefixes() {
    let _turn = common::blocking_turn();
    let asm = assembler();
    assert_n_log_n(
        "batch prefixes",
        1000,
        |n| {
            shapes::distinct_batch_prefixes(n, "no-such-model")
                .requests
                .into_iter()
                .map(domain_request)
                .collect::<Vec<_>>()
        },
        |reqs| {
            let out = batch::assemble_batch(&asm, &asm.catalog(), reqs, &Cancel::new());
            assert!(out.results.iter().all(Result::is_err));
        },
    );
}

#[test]
fn compacting_a_forged_summary_is_n_log_n_in_its_tool_names() {
    let _turn = common::blocking_turn();
    let compactor = Compactor::new(assembler());
    assert_n_log_n(
        "forged continuation",
        1000,
        |n| CompactRequest::try_from(shapes::forged_continuation(4 * n, n)).unwrap(),
        |req| {
            compactor.compact(req, &Cancel::new()).unwrap();
        },
    );
}
