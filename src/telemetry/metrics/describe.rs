//! Every metric's description and unit, given once to each registry.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

use crate::telemetry::names::*;

/// The kind of a metric, as its description declares it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

use Kind::{Counter, Gauge, Histogram};

/// Every metric: kind, name, unit, help text.
const METRICS: [(Kind, &str, Unit, &str); 51] = [
    (
        Histogram,
        PHASE_DURATION_SECONDS,
        Unit::Seconds,
        "server-side time per request phase: decode, convert, tokenize, allocate, render, encode",
    ),
    (
        Gauge,
        PROCESS_RESIDENT_MEMORY_BYTES,
        Unit::Bytes,
        "resident memory of the sidecar process",
    ),
    (Gauge, PROCESS_OPEN_FDS, Unit::Count, "open file descriptors"),
    (Gauge, PROCESS_THREADS, Unit::Count, "threads of the process"),
    (
        Gauge,
        RUNTIME_ALIVE_TASKS,
        Unit::Count,
        "tasks alive on the async runtime",
    ),
    (
        Counter,
        REQUESTS_TOTAL,
        Unit::Count,
        "gRPC requests by rpc and status code",
    ),
    (
        Counter,
        CLAIMS_DENIED_TOTAL,
        Unit::Count,
        "requests [auth] refused for a claim their identity may not make, by identity and claim",
    ),
    (
        Histogram,
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "server-side request duration by rpc",
    ),
    (
        Counter,
        PREFIX_CACHE_LOOKUPS_TOTAL,
        Unit::Count,
        "static-prefix token-count cache lookups by result",
    ),
    (
        Counter,
        SEGMENT_CACHE_LOOKUPS_TOTAL,
        Unit::Count,
        "segment and item token-count cache lookups by result",
    ),
    (
        Counter,
        BLOCKS_TOTAL,
        Unit::Count,
        "block decisions by kind and outcome",
    ),
    (
        Counter,
        ITEMS_DROPPED_TOTAL,
        Unit::Count,
        "items dropped to fit the budget, by block kind",
    ),
    (
        Counter,
        ITEMS_FILTERED_TOTAL,
        Unit::Count,
        "items filtered by permission",
    ),
    (
        Counter,
        BUDGET_OVERFLOW_TOTAL,
        Unit::Count,
        "requests whose non-cuttable content exceeded the budget, by model",
    ),
    (
        Histogram,
        PROMPT_TOKENS,
        Unit::Count,
        "tokens per assembled prompt, by region",
    ),
    (
        Counter,
        REQUESTS_REFUSED_TOTAL,
        Unit::Count,
        "requests refused by a limit, shed, or cut off by their deadline, by rpc and reason",
    ),
    (
        Gauge,
        IN_FLIGHT_REQUESTS,
        Unit::Count,
        "requests holding a work slot",
    ),
    (
        Gauge,
        UPLOAD_BUDGET_HELD_BYTES,
        Unit::Bytes,
        "bytes of the upload budget held by messages being received, decoded or worked on",
    ),
    (Gauge, OPEN_CONNECTIONS, Unit::Count, "client connections open"),
    (
        Counter,
        PROMPT_TOKENS_BY_SOURCE_TOTAL,
        Unit::Count,
        "tokens of assembled prompts by model and where their count came from (exact, provider, estimated)",
    ),
    (
        Gauge,
        ESTIMATE_MARGIN_PERCENT,
        Unit::Percent,
        "the safety margin of an estimating model's token counts, by model",
    ),
    (
        Counter,
        PROVIDER_PROMPT_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers counted (ReportUsage), by provider",
    ),
    (
        Counter,
        PROVIDER_CACHED_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers served from cache (ReportUsage), by provider",
    ),
    (
        Histogram,
        TOKEN_COUNT_RELATIVE_ERROR,
        Unit::Count,
        "(sidecar count - provider count) / provider count per reported request, by model",
    ),
    (
        Histogram,
        PIECE_ESTIMATE_RELATIVE_ERROR,
        Unit::Count,
        "(content estimate - provider count) / provider count of each piece a provider counted, before learning from it, by tokenizer generation and content class",
    ),
    (
        Counter,
        PREFIX_HASH_CHANGES_TOTAL,
        Unit::Count,
        "static-prefix hashes a prefix family had not used in the last 10 minutes, by family",
    ),
    (
        Counter,
        PROVIDER_CACHE_WRITE_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers wrote to their caches (ReportUsage), by provider",
    ),
    (
        Counter,
        PROVIDER_CACHE_DIAGNOSTICS_TOTAL,
        Unit::Count,
        "provider cache diagnostics gateways passed on (ReportUsage), by provider and diagnostic",
    ),
    (
        Counter,
        PROMPT_CACHE_EXPECTED_TOKENS_TOTAL,
        Unit::Count,
        "tokens the cache plans of reported requests expected the provider to serve from cache, by provider",
    ),
    (
        Counter,
        PROMPT_CACHE_EXPECTED_MISSES_TOTAL,
        Unit::Count,
        "reported requests whose provider served less than half of the cache hit their plan expected, by provider",
    ),
    (
        Counter,
        PROMPT_CACHE_PREFIXES_FLAGGED_TOTAL,
        Unit::Count,
        "prefixes that missed their expected cache hits in several reports in a row, by provider",
    ),
    (
        Counter,
        PROMPT_CACHE_DIVERGENCES_TOTAL,
        Unit::Count,
        "where a prompt first differs from its session's previous one (requests that sent its fingerprint), by change and prefix family",
    ),
    (
        Counter,
        PREFIX_VOLATILE_TOTAL,
        Unit::Count,
        "assembled prompts whose static prefix holds a volatile value (timestamp, date, uuid, hex_id)",
    ),
    (
        Counter,
        CONNECTIONS_REFUSED_TOTAL,
        Unit::Count,
        "connections closed at once because the connection limit was reached",
    ),
    (
        Counter,
        COMPACTIONS_TOTAL,
        Unit::Count,
        "conversation compactions by source (compact, assemble) and outcome",
    ),
    (
        Histogram,
        COMPACTION_TOKENS_SAVED,
        Unit::Count,
        "tokens a compaction or trim removed from a conversation, by source",
    ),
    (
        Counter,
        COMPACTION_BREAKER_OPEN_TOTAL,
        Unit::Count,
        "session circuit breakers opened after consecutive compactions over target",
    ),
    (
        Counter,
        MEMORIES_STORED_TOTAL,
        Unit::Count,
        "memories stored by Retain (replayed calls excluded), by type",
    ),
    (
        Histogram,
        MEMORY_RECALL_DURATION_SECONDS,
        Unit::Seconds,
        "time to fetch and rank the memories of one recall",
    ),
    (
        Gauge,
        MEMORY_RECALLS_IN_FLIGHT,
        Unit::Count,
        "recalls waiting on the memory store",
    ),
    (
        Counter,
        MEMORIES_RECALLED_TOTAL,
        Unit::Count,
        "memories recalled into prompts, before the budget",
    ),
    (
        Counter,
        MEMORIES_DELETED_TOTAL,
        Unit::Count,
        "memories deleted, by cause (retention, forget, store_full)",
    ),
    (
        Gauge,
        MEMORY_STORE_UP,
        Unit::Count,
        "1 while the memory store is connected and answers, 0 while it is unreachable (Assemble still serves, without recall)",
    ),
    (
        Counter,
        MEMORY_RECALL_UNAVAILABLE_TOTAL,
        Unit::Count,
        "recalls the memory store did not answer in time or failed (prompt assembled without memories, or request failed)",
    ),
    (
        Counter,
        TRACE_SPANS_DROPPED_TOTAL,
        Unit::Count,
        "trace spans dropped instead of exported, by reason (queue_full, export_failed, too_many_phases)",
    ),
    (
        Counter,
        TRACE_SPANS_EXPORTED_TOTAL,
        Unit::Count,
        "trace spans the OTLP collector accepted",
    ),
    (
        Counter,
        CONFIG_RELOADS_TOTAL,
        Unit::Count,
        "configuration reloads on SIGHUP, by result (applied or refused)",
    ),
    (
        Counter,
        GATEWAY_REQUESTS_TOTAL,
        Unit::Count,
        "provider requests the gateway edge (Envoy's processor, the HTTP fit) saw, by api, outcome (fitted, unchanged, passed, refused) and reason",
    ),
    (
        Counter,
        GATEWAY_TOKENS_CUT_TOTAL,
        Unit::Count,
        "conversation tokens the gateway edge took out of requests to fit them (turns cut, results cleared, thinking dropped, less the summary added)",
    ),
    (
        Counter,
        PROVIDER_COUNT_CALLS_TOTAL,
        Unit::Count,
        "calls to a provider's counting endpoint learning prompt pieces' counts in the background, by provider and outcome (learned, refused, failed, throttled; dropped: a piece dropped from the full queue; breaker_open: a call not made)",
    ),
    (
        Gauge,
        PROVIDER_COUNT_QUEUE_DEPTH,
        Unit::Count,
        "prompt pieces waiting for a provider count, by provider",
    ),
];

/// Describes every metric to the current recorder (a new registry's).
pub fn describe() {
    for (kind, name, unit, help) in METRICS {
        match kind {
            Counter => describe_counter!(name, unit, help),
            Gauge => describe_gauge!(name, unit, help),
            Histogram => describe_histogram!(name, unit, help),
        }
    }
}
