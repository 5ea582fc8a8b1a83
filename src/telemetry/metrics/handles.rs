//! The recorders every request calls, through the handles the current
//! registry keeps (see `registry` and `handle_table`).
//!
//! The `counter!`, `gauge!` and `histogram!` macros build a key from the
//! name and labels, hash it and look the series up in the recorder's
//! registry on every call (about 1-3k instructions each, an allocation when
//! a label is not a literal); a kept handle goes straight to its atomics.
//! A warm request records a dozen series, so this was a tenth of the CPU a
//! warm 4k `Assemble` spends outside its handler (`transport_floor warm`).
//!
//! Only series a call has recorded are registered, so the scrape holds the
//! same series as without handles. Each registry keeps its own handles, so
//! a handle never outlives the recorder it came from; a call with no
//! current registry goes through the macros (to a local recorder a test
//! set, else nowhere). Sound because the recorder is built without an idle
//! timeout: a series, once registered, is never removed.

use std::time::Duration;

use metrics::{counter, gauge, histogram};

use super::RPCS;
use super::handle_table::Handles;
use super::registry::with_current;
use crate::telemetry::names::*;

/// Calls `f` with the current registry's handles, or `fallback` (the
/// macros, which reach a local recorder if a test set one) when there is no
/// registry.
fn with_handles(f: impl FnOnce(&Handles), fallback: impl FnOnce()) {
    if with_current(|r| f(&r.handles)).is_none() {
        fallback();
    }
}

/// Records one finished RPC (or render endpoint: `rpc` names one of
/// [`RPCS`] or an endpoint, `code` one of [`GRPC_CODES`] or an HTTP
/// status).
pub fn request(rpc: &'static str, code: &'static str, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    let count = || counter!(REQUESTS_TOTAL, "rpc" => rpc, "code" => code);
    let duration = || histogram!(REQUEST_DURATION_SECONDS, "rpc" => rpc);
    let Some(r) = RPCS.iter().position(|&r| r == rpc) else {
        count().increment(1);
        duration().record(seconds);
        return;
    };
    let c = GRPC_CODES.iter().position(|&c| c == code);
    with_handles(
        |h| {
            match c {
                Some(c) => h.requests[r][c].get_or_init(count).increment(1),
                None => count().increment(1),
            }
            h.durations[r].get_or_init(duration).record(seconds);
        },
        || {
            count().increment(1);
            duration().record(seconds);
        },
    );
}

/// Records `took` in the histogram of `phase`.
pub(super) fn phase_histogram(phase: &'static str, took: Duration) {
    let seconds = took.as_secs_f64();
    let series = || histogram!(PHASE_DURATION_SECONDS, "phase" => phase);
    match PHASES.iter().position(|&p| p == phase) {
        Some(i) => with_handles(
            |h| h.phases[i].get_or_init(series).record(seconds),
            || series().record(seconds),
        ),
        None => series().record(seconds),
    }
}

/// Moves the held-upload-budget gauge by `delta` bytes.
pub fn upload_budget_held(delta: f64) {
    let series = || gauge!(UPLOAD_BUDGET_HELD_BYTES);
    with_handles(
        |h| h.upload_held.get_or_init(series).increment(delta),
        || series().increment(delta),
    );
}

/// Moves the in-flight gauge by `delta`.
pub fn in_flight(delta: f64) {
    let series = || gauge!(IN_FLIGHT_REQUESTS);
    with_handles(
        |h| h.in_flight.get_or_init(series).increment(delta),
        || series().increment(delta),
    );
}

/// Records a request's cache lookups under `metric` (one of the cache
/// constants), once per request rather than once per lookup.
pub fn cache_lookups(metric: &'static str, hits: u64, misses: u64) {
    let table = [PREFIX_CACHE_LOOKUPS_TOTAL, SEGMENT_CACHE_LOOKUPS_TOTAL];
    let at = table.iter().position(|&m| m == metric);
    for (r, (result, n)) in [("hit", hits), ("miss", misses)].into_iter().enumerate() {
        if n == 0 {
            continue;
        }
        let series = || counter!(metric, "result" => result);
        match at {
            Some(m) => with_handles(
                |h| h.lookups[m][r].get_or_init(series).increment(n),
                || series().increment(n),
            ),
            None => series().increment(n),
        }
    }
}

/// Records one block's decision: its kind and outcome, and how many of its
/// items were dropped and filtered.
pub fn block_decision(kind: &'static str, outcome: &'static str, dropped: usize, filtered: usize) {
    let block = || counter!(BLOCKS_TOTAL, "kind" => kind, "outcome" => outcome);
    let items = || counter!(ITEMS_DROPPED_TOTAL, "kind" => kind);
    let filtered_items = || counter!(ITEMS_FILTERED_TOTAL);
    let (dropped, filtered) = (dropped as u64, filtered as u64);
    with_handles(
        |h| {
            let labels = [kind, outcome];
            h.blocks
                .with(|k| *k == labels, || labels, block, |c| c.increment(1));
            if dropped > 0 {
                h.dropped
                    .with(|k| *k == kind, || kind, items, |c| c.increment(dropped));
            }
            if filtered > 0 {
                h.items_filtered.get_or_init(filtered_items).increment(filtered);
            }
        },
        || {
            block().increment(1);
            if dropped > 0 {
                items().increment(dropped);
            }
            if filtered > 0 {
                filtered_items().increment(filtered);
            }
        },
    );
}

/// Records the sizes of one assembled prompt.
pub fn prompt_tokens(static_tokens: u32, dynamic_tokens: u32) {
    for (r, (region, n)) in [("static", static_tokens), ("dynamic", dynamic_tokens)]
        .into_iter()
        .enumerate()
    {
        let series = || histogram!(PROMPT_TOKENS, "region" => region);
        with_handles(
            |h| h.prompt_tokens[r].get_or_init(series).record(f64::from(n)),
            || series().record(f64::from(n)),
        );
    }
}

/// Records an assembled prompt's tokens by source (`model`: a table entry's
/// name, so the label is bounded by the table).
pub fn prompt_tokens_by_source(model: &str, exact: u32, provider: u32, estimated: u32) {
    for (source, n) in [
        (SOURCE_EXACT, exact),
        (SOURCE_PROVIDER, provider),
        (SOURCE_ESTIMATED, estimated),
    ] {
        if n == 0 {
            continue;
        }
        let series =
            || counter!(PROMPT_TOKENS_BY_SOURCE_TOTAL, "model" => model.to_owned(), "source" => source);
        with_handles(
            |h| {
                h.by_source.with(
                    |(m, s)| **m == *model && *s == source,
                    || (model.into(), source),
                    series,
                    |c| c.increment(u64::from(n)),
                )
            },
            || series().increment(u64::from(n)),
        );
    }
}
