//! Metric names (constants, with units), their descriptions and buckets, and
//! the helpers that record them. Labels take only bounded `&'static str`
//! values: request-supplied strings never become label values.
//!
//! A leaf: recorders take plain values and this module imports nothing from
//! the crate. Series whose label values the domain owns (block kinds,
//! providers, models, ...) are started at zero by `server::series`. Each
//! server records into a [`Registry`] of its own (see `registry`).

use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

mod describe;
mod handle_table;
mod handles;
mod registry;

pub use super::names::*;
pub use describe::describe;
use handles::phase_histogram;
pub use handles::{
    block_decision, cache_lookups, in_flight, prompt_tokens, prompt_tokens_by_source, request,
    upload_budget_held,
};
pub use registry::{Registry, serving};

/// Builds a Prometheus recorder with explicit buckets (described by
/// [`Registry::new`]).
fn build_recorder() -> Result<PrometheusRecorder, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(REQUEST_DURATION_SECONDS.to_owned()),
            &DURATION_BUCKETS_SECONDS,
        )
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(PROMPT_TOKENS.to_owned()), &TOKEN_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(COMPACTION_TOKENS_SAVED.to_owned()), &TOKEN_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(TOKEN_COUNT_RELATIVE_ERROR.to_owned()),
                &RELATIVE_ERROR_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(PIECE_ESTIMATE_RELATIVE_ERROR.to_owned()),
                &RELATIVE_ERROR_BUCKETS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(MEMORY_RECALL_DURATION_SECONDS.to_owned()),
                &DURATION_BUCKETS_SECONDS,
            )
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(PHASE_DURATION_SECONDS.to_owned()),
                &PHASE_BUCKETS_SECONDS,
            )
        })
        .map_err(|e| e.to_string())?
        .build_recorder();
    Ok(recorder)
}

/// Records one provider count call (or dropped piece): `provider` a bounded
/// API name, `outcome` one of [`PROVIDER_COUNT_OUTCOMES`].
pub fn provider_count_call(provider: &'static str, outcome: &'static str) {
    counter!(PROVIDER_COUNT_CALLS_TOTAL, "provider" => provider, "outcome" => outcome).increment(1);
}

/// Sets the pieces waiting for `provider`'s count.
pub fn provider_count_queue_depth(provider: &'static str, depth: usize) {
    gauge!(PROVIDER_COUNT_QUEUE_DEPTH, "provider" => provider).set(depth as f64);
}

/// Starts `provider`'s count series at zero.
pub fn provider_count_known(provider: &'static str) {
    for outcome in PROVIDER_COUNT_OUTCOMES {
        counter!(PROVIDER_COUNT_CALLS_TOTAL, "provider" => provider, "outcome" => outcome).increment(0);
    }
    gauge!(PROVIDER_COUNT_QUEUE_DEPTH, "provider" => provider).set(0.0);
}

/// Records a request the gateway edge saw: `api` one of [`GATEWAY_APIS`],
/// `outcome` one of [`GATEWAY_OUTCOMES`], `reason` a bounded label of the
/// gateway's.
pub fn gateway_request(api: &'static str, outcome: &'static str, reason: &'static str) {
    counter!(GATEWAY_REQUESTS_TOTAL, "api" => api, "outcome" => outcome, "reason" => reason).increment(1);
}

/// Starts a gateway series at zero (and its API's tokens cut).
pub fn gateway_known(api: &'static str, outcome: &'static str, reason: &'static str) {
    counter!(GATEWAY_REQUESTS_TOTAL, "api" => api, "outcome" => outcome, "reason" => reason).increment(0);
    counter!(GATEWAY_TOKENS_CUT_TOTAL, "api" => api).increment(0);
}

/// Records the conversation tokens a fit took out of a request of `api`.
pub fn gateway_tokens_cut(api: &'static str, tokens: u64) {
    counter!(GATEWAY_TOKENS_CUT_TOTAL, "api" => api).increment(tokens);
}

/// RPC names, as labelled.
pub const RPCS: [&str; 11] = [
    "Assemble",
    "Compact",
    "CountTokens",
    "ListModels",
    "AssembleBatch",
    "AssembleStream",
    "ReportUsage",
    "Retain",
    "Forget",
    "ListMemories",
    "ExtProc",
];

/// Counts a request `[auth]` refused. `identity` is an `[[auth.clients]]`
/// identity or [`IDENTITY_UNLISTED`] (bounded by the configuration), `claim`
/// one of a fixed set.
pub fn claim_denied(identity: &str, claim: &'static str) {
    counter!(CLAIMS_DENIED_TOTAL, "identity" => identity.to_owned(), "claim" => claim).increment(1);
}

/// Starts the denial counter of every configured identity at zero, so an
/// alert on its increase sees the first denial.
pub fn claim_identities_known<'a>(identities: impl IntoIterator<Item = &'a str>, claims: &[&'static str]) {
    for identity in identities.into_iter().chain([IDENTITY_UNLISTED]) {
        for &claim in claims {
            counter!(CLAIMS_DENIED_TOTAL, "identity" => identity.to_owned(), "claim" => claim).increment(0);
        }
    }
}

/// Starts the series alerts and dashboards rely on at zero, so that a fresh
/// sidecar's scrape already has them (`rate()` needs two samples).
/// `labels` gives the label values the domain owns.
pub fn initialize(labels: &Labels) {
    for rpc in RPCS {
        counter!(REQUESTS_TOTAL, "rpc" => rpc, "code" => "OK").increment(0);
    }
    for metric in [PREFIX_CACHE_LOOKUPS_TOTAL, SEGMENT_CACHE_LOOKUPS_TOTAL] {
        counter!(metric, "result" => "hit").increment(0);
        counter!(metric, "result" => "miss").increment(0);
    }
    counter!(ITEMS_FILTERED_TOTAL).increment(0);
    for &kind in labels.block_kinds {
        counter!(ITEMS_DROPPED_TOTAL, "kind" => kind).increment(0);
    }
    for rpc in [
        "Assemble",
        "CountTokens",
        "AssembleBatch",
        "AssembleStream",
        "Compact",
        "Retain",
        "Forget",
        "ListMemories",
    ] {
        for reason in REFUSAL_REASONS {
            counter!(REQUESTS_REFUSED_TOTAL, "rpc" => rpc, "reason" => reason).increment(0);
        }
    }
    gauge!(IN_FLIGHT_REQUESTS).increment(0.0);
    gauge!(UPLOAD_BUDGET_HELD_BYTES).increment(0.0);
    gauge!(OPEN_CONNECTIONS).increment(0.0);
    for &provider in labels.providers {
        counter!(PROVIDER_PROMPT_TOKENS_TOTAL, "provider" => provider).increment(0);
        counter!(PROVIDER_CACHED_TOKENS_TOTAL, "provider" => provider).increment(0);
        counter!(PROVIDER_CACHE_WRITE_TOKENS_TOTAL, "provider" => provider).increment(0);
        counter!(PROMPT_CACHE_EXPECTED_TOKENS_TOTAL, "provider" => provider).increment(0);
        counter!(PROMPT_CACHE_EXPECTED_MISSES_TOTAL, "provider" => provider).increment(0);
        counter!(PROMPT_CACHE_PREFIXES_FLAGGED_TOTAL, "provider" => provider).increment(0);
        for &diagnostic in labels.diagnostics {
            counter!(PROVIDER_CACHE_DIAGNOSTICS_TOTAL, "provider" => provider, "diagnostic" => diagnostic)
                .increment(0);
        }
    }
    for &kind in labels.volatile_kinds {
        counter!(PREFIX_VOLATILE_TOTAL, "kind" => kind).increment(0);
    }
    counter!(CONNECTIONS_REFUSED_TOTAL).increment(0);
    for &outcome in labels.compact_outcomes {
        counter!(COMPACTIONS_TOTAL, "source" => COMPACTION_SOURCE_COMPACT, "outcome" => outcome).increment(0);
    }
    for outcome in [COMPACTION_OUTCOME_SUMMARIZED, COMPACTION_OUTCOME_LIGHTENED] {
        counter!(COMPACTIONS_TOTAL, "source" => COMPACTION_SOURCE_ASSEMBLE, "outcome" => outcome)
            .increment(0);
    }
    counter!(COMPACTION_BREAKER_OPEN_TOTAL).increment(0);
    for result in [RELOAD_APPLIED, RELOAD_REFUSED] {
        counter!(CONFIG_RELOADS_TOTAL, "result" => result).increment(0);
    }
    counter!(MEMORIES_RECALLED_TOTAL).increment(0);
    gauge!(MEMORY_RECALLS_IN_FLIGHT).set(0.0);
    counter!(MEMORY_RECALL_UNAVAILABLE_TOTAL).increment(0);
    for cause in [DELETED_RETENTION, DELETED_FORGET, DELETED_STORE_FULL] {
        counter!(MEMORIES_DELETED_TOTAL, "cause" => cause).increment(0);
    }
    // Also with tracing off: zeros let the alert and the dashboard read the
    // same series on every sidecar.
    for reason in TRACE_DROP_REASONS {
        counter!(TRACE_SPANS_DROPPED_TOTAL, "reason" => reason).increment(0);
    }
    counter!(TRACE_SPANS_EXPORTED_TOTAL).increment(0);
}

/// The label values of [`initialize`]'s series that the domain owns.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    /// Block kinds (`kind` of dropped items).
    pub block_kinds: &'a [&'static str],
    /// Providers of usage reports, `other` included.
    pub providers: &'a [&'static str],
    /// Kinds of volatile value in a static prefix.
    pub volatile_kinds: &'a [&'static str],
    /// Outcomes of a Compact request.
    pub compact_outcomes: &'a [&'static str],
    /// Provider cache diagnostics, `other` included.
    pub diagnostics: &'a [&'static str],
}

/// Starts the stored-memory series of every memory type at zero (the type
/// label's values are the configured types and the summary type).
pub fn memory_types_known(types: impl IntoIterator<Item = String>) {
    for t in types {
        counter!(MEMORIES_STORED_TOTAL, "type" => t).increment(0);
    }
}

/// Counts memories stored by one Retain (`types` come from the configured
/// set) and those its retention limits deleted.
pub fn memories_stored(types: &[String], evicted: u64) {
    for t in types {
        counter!(MEMORIES_STORED_TOTAL, "type" => t.clone()).increment(1);
    }
    counter!(MEMORIES_DELETED_TOTAL, "cause" => DELETED_RETENTION).increment(evicted);
}

/// Records one recall.
pub fn recall(took: Duration, recalled: usize) {
    histogram!(MEMORY_RECALL_DURATION_SECONDS).record(took.as_secs_f64());
    counter!(MEMORIES_RECALLED_TOTAL).increment(recalled as u64);
}

/// A recall waiting on the store, counted in
/// [`MEMORY_RECALLS_IN_FLIGHT`] until dropped (also when the caller goes
/// away and the recall is abandoned).
#[must_use = "the recall is counted while the guard lives"]
pub struct RecallInFlight(());

impl RecallInFlight {
    /// Counts one more recall in flight.
    pub fn enter() -> RecallInFlight {
        gauge!(MEMORY_RECALLS_IN_FLIGHT).increment(1.0);
        RecallInFlight(())
    }
}

impl Drop for RecallInFlight {
    fn drop(&mut self) {
        gauge!(MEMORY_RECALLS_IN_FLIGHT).decrement(1.0);
    }
}

/// Counts a recall the store did not answer.
pub fn recall_unavailable() {
    counter!(MEMORY_RECALL_UNAVAILABLE_TOTAL).increment(1);
}

/// Whether the memory store is connected and answering.
pub fn memory_store_up(up: bool) {
    gauge!(MEMORY_STORE_UP).set(if up { 1.0 } else { 0.0 });
}

/// Counts memories the store's size bound evicted.
pub fn memories_evicted_for_space(deleted: u64) {
    counter!(MEMORIES_DELETED_TOTAL, "cause" => DELETED_STORE_FULL).increment(deleted);
}

/// Counts memories a Forget deleted.
pub fn memories_forgotten(deleted: u64) {
    counter!(MEMORIES_DELETED_TOTAL, "cause" => DELETED_FORGET).increment(deleted);
}

/// Starts the budget-overflow series of every model at zero.
pub fn models_known(models: impl IntoIterator<Item = String>) {
    for model in models {
        counter!(BUDGET_OVERFLOW_TOTAL, "model" => model).increment(0);
    }
}

/// Records one refused request (`reason` is one of [`REFUSAL_REASONS`]).
pub fn refused(rpc: &'static str, reason: &'static str) {
    counter!(REQUESTS_REFUSED_TOTAL, "rpc" => rpc, "reason" => reason).increment(1);
}

/// Records the time one request spent in `phase` (one of [`PHASES`]).
/// While a trace recorder is entered on this thread, the phase is also kept
/// as a span (see [`super::trace`]).
pub fn phase(phase: &'static str, took: Duration) {
    phase_histogram(phase, took);
    super::trace::phase(phase, took);
}

/// [`phase`] for a phase that ended at `end` (recorded after the fact).
pub fn phase_ended(phase: &'static str, end: std::time::Instant, took: Duration) {
    phase_histogram(phase, took);
    super::trace::phase_ended(phase, end, took);
}

/// Sets the process gauges from `/proc/self` (Linux; elsewhere only the
/// runtime's task count) and the runtime's alive tasks, and returns the
/// process's CPU seconds. Called per scrape.
fn refresh_process() -> Option<f64> {
    if let Ok(tasks) = tokio::runtime::Handle::try_current().map(|h| h.metrics().num_alive_tasks()) {
        gauge!(RUNTIME_ALIVE_TASKS).set(tasks as f64);
    }
    let process = super::process::read()?;
    gauge!(PROCESS_RESIDENT_MEMORY_BYTES).set(process.resident_bytes as f64);
    gauge!(PROCESS_OPEN_FDS).set(process.open_fds as f64);
    gauge!(PROCESS_THREADS).set(process.threads as f64);
    Some(process.cpu_seconds)
}

/// Appends the process's CPU time to a scrape's `page` as the counter
/// Prometheus's process collector exports (the recorder's counters are
/// whole numbers; CPU seconds are not).
fn append_cpu(mut page: String, cpu: Option<f64>) -> String {
    if let Some(seconds) = cpu {
        use std::fmt::Write as _;
        let _ = write!(
            page,
            "# HELP {PROCESS_CPU_SECONDS_TOTAL} Total user and system CPU time spent in seconds.\n\
             # TYPE {PROCESS_CPU_SECONDS_TOTAL} counter\n\
             {PROCESS_CPU_SECONDS_TOTAL} {seconds}\n"
        );
    }
    page
}

/// Records an estimating model's margin.
pub fn estimate_margin(model: String, margin: u32) {
    gauge!(ESTIMATE_MARGIN_PERCENT, "model" => model).set(f64::from(margin));
}

/// Records a provider's usage report.
pub fn provider_usage(provider: &'static str, prompt: u64, cached: u64, written: u64) {
    counter!(PROVIDER_PROMPT_TOKENS_TOTAL, "provider" => provider).increment(prompt);
    counter!(PROVIDER_CACHED_TOKENS_TOTAL, "provider" => provider).increment(cached);
    counter!(PROVIDER_CACHE_WRITE_TOKENS_TOTAL, "provider" => provider).increment(written);
}

/// Records a provider cache diagnostic (a bounded name) a gateway passed on.
pub fn provider_cache_diagnostic(provider: &'static str, diagnostic: &'static str) {
    counter!(PROVIDER_CACHE_DIAGNOSTICS_TOTAL, "provider" => provider, "diagnostic" => diagnostic)
        .increment(1);
}

/// Records what a reported request's plan expected from the provider's
/// cache, and whether the hit did not happen.
pub fn prompt_cache_expected(provider: &'static str, expected: u64, missed: bool) {
    counter!(PROMPT_CACHE_EXPECTED_TOKENS_TOTAL, "provider" => provider).increment(expected);
    counter!(PROMPT_CACHE_EXPECTED_MISSES_TOTAL, "provider" => provider).increment(u64::from(missed));
}

/// Records a prefix flagged for missing its expected hits in a row.
pub fn prompt_cache_prefix_flagged(provider: &'static str) {
    counter!(PROMPT_CACHE_PREFIXES_FLAGGED_TOTAL, "provider" => provider).increment(1);
}

/// Records the relative error of the sidecar's count against a provider's.
pub fn count_error(model: String, relative: f64) {
    histogram!(TOKEN_COUNT_RELATIVE_ERROR, "model" => model).record(relative);
}

/// Records the relative error a content estimate made on a piece its
/// provider then counted (`generation`: a model table label; `class`: a
/// content class name).
pub fn piece_estimate_error(generation: &str, class: &'static str, relative: f64) {
    histogram!(PIECE_ESTIMATE_RELATIVE_ERROR, "generation" => generation.to_owned(), "class" => class)
        .record(relative);
}

/// Starts the prefix-hash-change series of every family label.
pub fn families_known(families: impl IntoIterator<Item = String>) {
    for family in families {
        counter!(PREFIX_HASH_CHANGES_TOTAL, "family" => family).increment(0);
    }
}

/// Records a divergence report: what changed (a `Change` label) in a
/// request of `family` (a configured name, `other` or `none`).
pub fn prompt_cache_divergence(change: &'static str, family: &str) {
    counter!(PROMPT_CACHE_DIVERGENCES_TOTAL, "change" => change, "family" => family.to_owned()).increment(1);
}

/// Starts the divergence series of every change (`changes`' labels) and
/// family label (the configured names, `other` and `none`).
pub fn divergences_known(families: impl IntoIterator<Item = String>, changes: &[&'static str]) {
    for family in families {
        for &change in changes {
            counter!(PROMPT_CACHE_DIVERGENCES_TOTAL, "change" => change, "family" => family.clone())
                .increment(0);
        }
    }
}

/// Records a prefix hash new to `family` (a configured name or `other`).
pub fn prefix_hash_change(family: String) {
    counter!(PREFIX_HASH_CHANGES_TOTAL, "family" => family).increment(1);
}

/// Records a static prefix holding a volatile value of `kind`.
pub fn prefix_volatile(kind: &'static str) {
    counter!(PREFIX_VOLATILE_TOTAL, "kind" => kind).increment(1);
}

/// Moves the open-connections gauge by `delta`.
pub fn connections(delta: f64) {
    gauge!(OPEN_CONNECTIONS).increment(delta);
}

/// Records a connection closed at the connection limit.
pub fn connection_refused() {
    counter!(CONNECTIONS_REFUSED_TOTAL).increment(1);
}

/// Outcome of a compaction inside Assemble: turns summarized before dropping.
pub const COMPACTION_OUTCOME_SUMMARIZED: &str = "summarized";
/// Outcome of a compaction inside Assemble: turns lightened (tool results
/// cleared, closed cycles' thinking dropped) before any is summarized.
pub const COMPACTION_OUTCOME_LIGHTENED: &str = "lightened";

/// Records one compaction (`outcome` is a bounded `as_str` label) and the
/// tokens it removed.
pub fn compaction(source: &'static str, outcome: &'static str, saved: u32) {
    counter!(COMPACTIONS_TOTAL, "source" => source, "outcome" => outcome).increment(1);
    if saved > 0 {
        histogram!(COMPACTION_TOKENS_SAVED, "source" => source).record(f64::from(saved));
    }
}

/// Records a session breaker opening.
pub fn compaction_breaker_opened() {
    counter!(COMPACTION_BREAKER_OPEN_TOTAL).increment(1);
}

/// Records one configuration reload.
pub fn config_reload(result: &'static str) {
    counter!(CONFIG_RELOADS_TOTAL, "result" => result).increment(1);
}

/// Records a budget overflow. `model` is the name of the model-table entry the
/// request resolved to (a bounded set), never the request's own string.
pub fn budget_overflow(model: String) {
    counter!(BUDGET_OVERFLOW_TOTAL, "model" => model).increment(1);
}
