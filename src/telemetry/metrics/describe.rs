//! Every metric's description and unit, given once when the recorder is
//! installed.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};

use crate::telemetry::names::*;

/// Describes every metric once (call after installing the recorder).
pub fn describe() {
    describe_histogram!(
        PHASE_DURATION_SECONDS,
        Unit::Seconds,
        "server-side time per request phase: decode, convert, tokenize, allocate, render, encode"
    );
    describe_gauge!(
        PROCESS_RESIDENT_MEMORY_BYTES,
        Unit::Bytes,
        "resident memory of the sidecar process"
    );
    describe_gauge!(PROCESS_OPEN_FDS, Unit::Count, "open file descriptors");
    describe_gauge!(PROCESS_THREADS, Unit::Count, "threads of the process");
    describe_gauge!(
        RUNTIME_ALIVE_TASKS,
        Unit::Count,
        "tasks alive on the async runtime"
    );
    describe_counter!(
        REQUESTS_TOTAL,
        Unit::Count,
        "gRPC requests by rpc and status code"
    );
    describe_counter!(
        CLAIMS_DENIED_TOTAL,
        Unit::Count,
        "requests [auth] refused for a claim their identity may not make, by identity and claim"
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "server-side request duration by rpc"
    );
    describe_counter!(
        PREFIX_CACHE_LOOKUPS_TOTAL,
        Unit::Count,
        "static-prefix token-count cache lookups by result"
    );
    describe_counter!(
        SEGMENT_CACHE_LOOKUPS_TOTAL,
        Unit::Count,
        "segment and item token-count cache lookups by result"
    );
    describe_counter!(BLOCKS_TOTAL, Unit::Count, "block decisions by kind and outcome");
    describe_counter!(
        ITEMS_DROPPED_TOTAL,
        Unit::Count,
        "items dropped to fit the budget, by block kind"
    );
    describe_counter!(ITEMS_FILTERED_TOTAL, Unit::Count, "items filtered by permission");
    describe_counter!(
        BUDGET_OVERFLOW_TOTAL,
        Unit::Count,
        "requests whose non-cuttable content exceeded the budget, by model"
    );
    describe_histogram!(
        PROMPT_TOKENS,
        Unit::Count,
        "tokens per assembled prompt, by region"
    );
    describe_counter!(
        REQUESTS_REFUSED_TOTAL,
        Unit::Count,
        "requests refused by a limit, shed, or cut off by their deadline, by rpc and reason"
    );
    describe_gauge!(IN_FLIGHT_REQUESTS, Unit::Count, "requests holding a work slot");
    describe_gauge!(
        UPLOAD_BUDGET_HELD_BYTES,
        Unit::Bytes,
        "bytes of the upload budget held by messages being received, decoded or worked on"
    );
    describe_gauge!(OPEN_CONNECTIONS, Unit::Count, "client connections open");
    describe_counter!(
        PROMPT_TOKENS_BY_SOURCE_TOTAL,
        Unit::Count,
        "tokens of assembled prompts by model and where their count came from (exact, provider, estimated)"
    );
    describe_gauge!(
        ESTIMATE_MARGIN_PERCENT,
        Unit::Percent,
        "the safety margin of an estimating model's token counts, by model"
    );
    describe_counter!(
        PROVIDER_PROMPT_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers counted (ReportUsage), by provider"
    );
    describe_counter!(
        PROVIDER_CACHED_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers served from cache (ReportUsage), by provider"
    );
    describe_histogram!(
        TOKEN_COUNT_RELATIVE_ERROR,
        Unit::Count,
        "(sidecar count - provider count) / provider count per reported request, by model"
    );
    describe_histogram!(
        PIECE_ESTIMATE_RELATIVE_ERROR,
        Unit::Count,
        "(content estimate - provider count) / provider count of each piece a provider counted, before learning from it, by tokenizer generation and content class"
    );
    describe_counter!(
        PREFIX_HASH_CHANGES_TOTAL,
        Unit::Count,
        "static-prefix hashes a prefix family had not used in the last 10 minutes, by family"
    );
    describe_counter!(
        PROVIDER_CACHE_WRITE_TOKENS_TOTAL,
        Unit::Count,
        "prompt tokens providers wrote to their caches (ReportUsage), by provider"
    );
    describe_counter!(
        PROVIDER_CACHE_DIAGNOSTICS_TOTAL,
        Unit::Count,
        "provider cache diagnostics gateways passed on (ReportUsage), by provider and diagnostic"
    );
    describe_counter!(
        PROMPT_CACHE_EXPECTED_TOKENS_TOTAL,
        Unit::Count,
        "tokens the cache plans of reported requests expected the provider to serve from cache, by provider"
    );
    describe_counter!(
        PROMPT_CACHE_EXPECTED_MISSES_TOTAL,
        Unit::Count,
        "reported requests whose provider served less than half of the cache hit their plan expected, by provider"
    );
    describe_counter!(
        PROMPT_CACHE_PREFIXES_FLAGGED_TOTAL,
        Unit::Count,
        "prefixes that missed their expected cache hits in several reports in a row, by provider"
    );
    describe_counter!(
        PROMPT_CACHE_DIVERGENCES_TOTAL,
        Unit::Count,
        "where a prompt first differs from its session's previous one (requests that sent its fingerprint), by change and prefix family"
    );
    describe_counter!(
        PREFIX_VOLATILE_TOTAL,
        Unit::Count,
        "assembled prompts whose static prefix holds a volatile value (timestamp, date, uuid, hex_id)"
    );
    describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        Unit::Count,
        "connections closed at once because the connection limit was reached"
    );
    describe_counter!(
        COMPACTIONS_TOTAL,
        Unit::Count,
        "conversation compactions by source (compact, assemble) and outcome"
    );
    describe_histogram!(
        COMPACTION_TOKENS_SAVED,
        Unit::Count,
        "tokens a compaction or trim removed from a conversation, by source"
    );
    describe_counter!(
        COMPACTION_BREAKER_OPEN_TOTAL,
        Unit::Count,
        "session circuit breakers opened after consecutive compactions over target"
    );
    describe_counter!(
        MEMORIES_STORED_TOTAL,
        Unit::Count,
        "memories stored by Retain (replayed calls excluded), by type"
    );
    describe_histogram!(
        MEMORY_RECALL_DURATION_SECONDS,
        Unit::Seconds,
        "time to fetch and rank the memories of one recall"
    );
    describe_gauge!(
        MEMORY_RECALLS_IN_FLIGHT,
        Unit::Count,
        "recalls waiting on the memory store"
    );
    describe_counter!(
        MEMORIES_RECALLED_TOTAL,
        Unit::Count,
        "memories recalled into prompts, before the budget"
    );
    describe_counter!(
        MEMORIES_DELETED_TOTAL,
        Unit::Count,
        "memories deleted, by cause (retention, forget, store_full)"
    );
    describe_gauge!(
        MEMORY_STORE_UP,
        Unit::Count,
        "1 while the memory store is connected and answers, 0 while it is unreachable (Assemble still serves, without recall)"
    );
    describe_counter!(
        MEMORY_RECALL_UNAVAILABLE_TOTAL,
        Unit::Count,
        "recalls the memory store did not answer in time or failed (prompt assembled without memories, or request failed)"
    );
    describe_counter!(
        TRACE_SPANS_DROPPED_TOTAL,
        Unit::Count,
        "trace spans dropped instead of exported, by reason (queue_full, export_failed, too_many_phases)"
    );
    describe_counter!(
        TRACE_SPANS_EXPORTED_TOTAL,
        Unit::Count,
        "trace spans the OTLP collector accepted"
    );
    describe_counter!(
        CONFIG_RELOADS_TOTAL,
        Unit::Count,
        "configuration reloads on SIGHUP, by result (applied or refused)"
    );
    describe_counter!(
        GATEWAY_REQUESTS_TOTAL,
        Unit::Count,
        "provider requests the gateway edge (Envoy's processor, the HTTP fit) saw, by api, outcome (fitted, unchanged, passed, refused) and reason"
    );
    describe_counter!(
        GATEWAY_TOKENS_CUT_TOTAL,
        Unit::Count,
        "conversation tokens the gateway edge took out of requests to fit them (turns cut, results cleared, thinking dropped, less the summary added)"
    );
    describe_counter!(
        PROVIDER_COUNT_CALLS_TOTAL,
        Unit::Count,
        "calls to a provider's counting endpoint learning prompt pieces' counts in the background, by provider and outcome (learned, refused, failed, throttled; dropped: a piece dropped from the full queue; breaker_open: a call not made)"
    );
    describe_gauge!(
        PROVIDER_COUNT_QUEUE_DEPTH,
        Unit::Count,
        "prompt pieces waiting for a provider count, by provider"
    );
}
