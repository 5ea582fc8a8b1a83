//! Metric names (constants, with units), the bounded label values they take,
//! and their buckets.

/// Requests by RPC and gRPC code.
pub const REQUESTS_TOTAL: &str = "assembler_requests_total";
/// Server-side request duration by RPC.
pub const REQUEST_DURATION_SECONDS: &str = "assembler_request_duration_seconds";
/// The `code` labels of gRPC status codes, indexed by the code's number.
pub const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
/// Static-prefix cache lookups by result.
pub const PREFIX_CACHE_LOOKUPS_TOTAL: &str = "assembler_prefix_cache_lookups_total";
/// Segment/item token-count cache lookups by result.
pub const SEGMENT_CACHE_LOOKUPS_TOTAL: &str = "assembler_segment_cache_lookups_total";
/// Block decisions by kind and outcome.
pub const BLOCKS_TOTAL: &str = "assembler_blocks_total";
/// Items dropped by block kind.
pub const ITEMS_DROPPED_TOTAL: &str = "assembler_items_dropped_total";
/// Items filtered by permission.
pub const ITEMS_FILTERED_TOTAL: &str = "assembler_items_filtered_total";
/// Requests refused because non-cuttable content exceeded the budget, by model.
pub const BUDGET_OVERFLOW_TOTAL: &str = "assembler_budget_overflow_total";
/// Prompt tokens per assembled prompt by region.
pub const PROMPT_TOKENS: &str = "assembler_prompt_tokens";
/// Requests refused before or instead of being worked on, by rpc and reason.
pub const REQUESTS_REFUSED_TOTAL: &str = "assembler_requests_refused_total";
/// Requests being worked on (Assemble and CountTokens).
pub const IN_FLIGHT_REQUESTS: &str = "assembler_in_flight_requests";
/// Bytes of the upload budget held by messages being received, decoded or
/// worked on.
pub const UPLOAD_BUDGET_HELD_BYTES: &str = "assembler_upload_budget_held_bytes";
/// Configuration reloads (SIGHUP) by result: `applied` or `refused`.
pub const CONFIG_RELOADS_TOTAL: &str = "assembler_config_reloads_total";
/// Requests refused PERMISSION_DENIED by `[auth]`, by client identity (an
/// `[[auth.clients]]` identity, or `unlisted`) and claim (`identity`,
/// `subject`, `scope`, `report_usage`).
pub const CLAIMS_DENIED_TOTAL: &str = "assembler_claims_denied_total";
/// The identity label of a certificate no `[[auth.clients]]` entry names.
pub const IDENTITY_UNLISTED: &str = "unlisted";

/// Responses whose static prefix holds a volatile value, by kind.
pub const PREFIX_VOLATILE_TOTAL: &str = "assembler_prefix_volatile_total";
/// New static-prefix hashes per prefix family (within a 10-minute window).
pub const PREFIX_HASH_CHANGES_TOTAL: &str = "assembler_prefix_hash_changes_total";
/// Divergence reports (a request that sent its session's previous
/// fingerprint), by what changed and prefix family.
pub const PROMPT_CACHE_DIVERGENCES_TOTAL: &str = "assembler_prompt_cache_divergences_total";
/// Cache-write tokens providers reported (Anthropic/Bedrock creation,
/// OpenAI writes), by provider.
pub const PROVIDER_CACHE_WRITE_TOKENS_TOTAL: &str = "assembler_provider_cache_write_tokens_total";
/// Provider cache diagnostics gateways passed on, by provider and name.
pub const PROVIDER_CACHE_DIAGNOSTICS_TOTAL: &str = "assembler_provider_cache_diagnostics_total";
/// Tokens the cache plans of reported requests expected the provider to
/// serve from cache, by provider.
pub const PROMPT_CACHE_EXPECTED_TOKENS_TOTAL: &str = "assembler_prompt_cache_expected_tokens_total";
/// Reported requests whose expected cache hit did not happen, by provider.
pub const PROMPT_CACHE_EXPECTED_MISSES_TOTAL: &str = "assembler_prompt_cache_expected_misses_total";
/// Prefixes flagged for missing their expected hits in a row, by provider.
pub const PROMPT_CACHE_PREFIXES_FLAGGED_TOTAL: &str = "assembler_prompt_cache_prefixes_flagged_total";
/// The family label of a request that names no prefix family.
pub const FAMILY_NONE: &str = "none";
/// Prompt tokens providers counted, as gateways report them, by provider.
pub const PROVIDER_PROMPT_TOKENS_TOTAL: &str = "assembler_provider_prompt_tokens_total";
/// Prompt tokens providers served from their caches, by provider.
pub const PROVIDER_CACHED_TOKENS_TOTAL: &str = "assembler_provider_cached_tokens_total";
/// (sidecar count - provider count) / provider count, by model.
pub const TOKEN_COUNT_RELATIVE_ERROR: &str = "assembler_token_count_relative_error";
/// Relative-error buckets: exact counts land in the 0 bucket.
pub const RELATIVE_ERROR_BUCKETS: [f64; 13] = [
    -0.5, -0.2, -0.1, -0.05, -0.02, -0.01, 0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
];
/// (estimate - provider count) / provider count of each piece a provider
/// counted, by tokenizer generation and content class.
pub const PIECE_ESTIMATE_RELATIVE_ERROR: &str = "assembler_piece_estimate_relative_error";
/// Tokens of assembled prompts by where their count came from.
pub const PROMPT_TOKENS_BY_SOURCE_TOTAL: &str = "assembler_prompt_tokens_by_source_total";
/// The `source` label: a public tokenizer's count.
pub const SOURCE_EXACT: &str = "exact";
/// The `source` label: the model's provider counted it.
pub const SOURCE_PROVIDER: &str = "provider";
/// The `source` label: estimated.
pub const SOURCE_ESTIMATED: &str = "estimated";
/// The current margin of an estimating model, in percent.
pub const ESTIMATE_MARGIN_PERCENT: &str = "assembler_estimate_margin_percent";
/// Client connections open now.
pub const OPEN_CONNECTIONS: &str = "assembler_open_connections";
/// Connections closed at once because `limits.max_connections` were open.
pub const CONNECTIONS_REFUSED_TOTAL: &str = "assembler_connections_refused_total";

/// Conversation compactions by source (`compact`, `assemble`) and outcome.
pub const COMPACTIONS_TOTAL: &str = "assembler_compactions_total";
/// Tokens a compaction or trim removed, by source.
pub const COMPACTION_TOKENS_SAVED: &str = "assembler_compaction_tokens_saved";
/// Session circuit breakers opened (compaction kept failing; trimming instead).
pub const COMPACTION_BREAKER_OPEN_TOTAL: &str = "assembler_compaction_breaker_open_total";
/// Compaction source: the Compact RPC.
pub const COMPACTION_SOURCE_COMPACT: &str = "compact";
/// Compaction source: turns compacted before they were dropped in Assemble.
pub const COMPACTION_SOURCE_ASSEMBLE: &str = "assemble";

/// Server-side time per request phase, by `phase` (one of [`PHASES`]).
pub const PHASE_DURATION_SECONDS: &str = "assembler_phase_duration_seconds";
/// Phase: protobuf decoding of a request message (per message: a batch is one).
pub const PHASE_DECODE: &str = "decode";
/// Phase: wire to domain and domain to wire conversion of one request.
pub const PHASE_CONVERT: &str = "convert";
/// Phase: validation, prefix hashing, cache lookups and token counting.
pub const PHASE_TOKENIZE: &str = "tokenize";
/// Phase: the budget allocation (including compact forms and turn summaries).
pub const PHASE_ALLOCATE: &str = "allocate";
/// Phase: layout, rendering of the messages, cache hints and the report.
pub const PHASE_RENDER: &str = "render";
/// Phase: protobuf encoding of a response message.
pub const PHASE_ENCODE: &str = "encode";
/// Every phase, in request order.
pub const PHASES: [&str; 6] = [
    PHASE_DECODE,
    PHASE_CONVERT,
    PHASE_TOKENIZE,
    PHASE_ALLOCATE,
    PHASE_RENDER,
    PHASE_ENCODE,
];
/// Phase buckets: 1 us to 100 ms.
pub const PHASE_BUCKETS_SECONDS: [f64; 14] = [
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.01,
    0.025,
    0.1,
];
/// Resident memory of the process (from `/proc/self/status`).
pub const PROCESS_RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// User and system CPU time of the process (from `/proc/self/stat`).
pub const PROCESS_CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
/// Open file descriptors of the process (entries of `/proc/self/fd`).
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
/// Threads of the process.
pub const PROCESS_THREADS: &str = "process_threads";
/// Tasks alive on the async runtime serving the scrape.
pub const RUNTIME_ALIVE_TASKS: &str = "assembler_runtime_alive_tasks";

/// Refusal reason: the concurrency limit shed the request.
pub const REFUSED_CONCURRENCY: &str = "concurrency";
/// Refusal reason: the message exceeded `limits.max_request_bytes`.
pub const REFUSED_REQUEST_TOO_LARGE: &str = "request_too_large";
/// Refusal reason: more blocks than `limits.max_blocks`.
pub const REFUSED_TOO_MANY_BLOCKS: &str = "too_many_blocks";
/// Refusal reason: more items than `limits.max_items`.
pub const REFUSED_TOO_MANY_ITEMS: &str = "too_many_items";
/// Refusal reason: the upload budget was held by other messages.
pub const REFUSED_UPLOAD_BUDGET: &str = "upload_budget";
/// Refusal reason: more batch requests than `limits.max_batch_requests`.
pub const REFUSED_TOO_MANY_REQUESTS: &str = "too_many_requests";
/// Refusal reason: the message would take too much memory to decode.
pub const REFUSED_TOO_COMPLEX: &str = "too_complex";
/// Refusal reason: the deadline passed; the work was cancelled.
pub const REFUSED_DEADLINE_EXCEEDED: &str = "deadline_exceeded";
/// Every refusal reason.
pub const REFUSAL_REASONS: [&str; 8] = [
    REFUSED_CONCURRENCY,
    REFUSED_UPLOAD_BUDGET,
    REFUSED_REQUEST_TOO_LARGE,
    REFUSED_TOO_MANY_REQUESTS,
    REFUSED_TOO_COMPLEX,
    REFUSED_TOO_MANY_BLOCKS,
    REFUSED_TOO_MANY_ITEMS,
    REFUSED_DEADLINE_EXCEEDED,
];
/// Reload result: the new models and policies are in use.
pub const RELOAD_APPLIED: &str = "applied";
/// Memories stored by Retain (replays excluded), by type.
pub const MEMORIES_STORED_TOTAL: &str = "assembler_memories_stored_total";
/// Time to fetch and rank the memories of one recall.
pub const MEMORY_RECALL_DURATION_SECONDS: &str = "assembler_memory_recall_duration_seconds";
/// Memories recalled into prompts (before the budget cut them).
pub const MEMORIES_RECALLED_TOTAL: &str = "assembler_memories_recalled_total";
/// Gauge: recalls waiting on the memory store (a stalled store shows here).
pub const MEMORY_RECALLS_IN_FLIGHT: &str = "assembler_memory_recalls_in_flight";
/// Memories deleted by retention limits and by Forget, by cause.
pub const MEMORIES_DELETED_TOTAL: &str = "assembler_memories_deleted_total";
/// Deletion cause: retention limits on write.
pub const DELETED_RETENTION: &str = "retention";
/// Deletion cause: a Forget request.
pub const DELETED_FORGET: &str = "forget";
/// Deletion cause: the store's size bound (`memory.max_total_bytes`)
/// evicted the oldest memories of any subject.
pub const DELETED_STORE_FULL: &str = "store_full";
/// Whether the memory store is connected and answering (1) or not (0).
pub const MEMORY_STORE_UP: &str = "assembler_memory_store_up";
/// Recalls the store did not answer in time (or failed): the prompt was
/// assembled without memories.
pub const MEMORY_RECALL_UNAVAILABLE_TOTAL: &str = "assembler_memory_recall_unavailable_total";

/// Trace spans dropped instead of exported, by reason.
pub const TRACE_SPANS_DROPPED_TOTAL: &str = "assembler_trace_spans_dropped_total";
/// Trace spans the collector accepted.
pub const TRACE_SPANS_EXPORTED_TOTAL: &str = "assembler_trace_spans_exported_total";
/// Drop reason: the export queue was full (the collector is down or slow).
pub const TRACE_DROPPED_QUEUE_FULL: &str = "queue_full";
/// Drop reason: the export call failed or timed out.
pub const TRACE_DROPPED_EXPORT_FAILED: &str = "export_failed";
/// Drop reason: a request recorded more phases than a span may hold.
pub const TRACE_DROPPED_TOO_MANY_PHASES: &str = "too_many_phases";
/// Every drop reason, each started at zero by `initialize` whether or not
/// tracing is configured.
pub const TRACE_DROP_REASONS: [&str; 3] = [
    TRACE_DROPPED_QUEUE_FULL,
    TRACE_DROPPED_EXPORT_FAILED,
    TRACE_DROPPED_TOO_MANY_PHASES,
];

/// Requests the gateway edge saw, by api, outcome and reason.
pub const GATEWAY_REQUESTS_TOTAL: &str = "assembler_gateway_requests_total";
/// Conversation tokens the gateway edge cut, by api.
pub const GATEWAY_TOKENS_CUT_TOTAL: &str = "assembler_gateway_tokens_cut_total";
/// The gateway's APIs, as labelled.
pub const GATEWAY_APIS: [&str; 3] = ["chat_completions", "messages", "responses"];
/// The gateway's outcomes, as labelled.
pub const GATEWAY_OUTCOMES: [&str; 4] = ["fitted", "unchanged", "passed", "refused"];

/// Calls to a provider's free counting endpoint (issue 52), by provider and
/// outcome ([`PROVIDER_COUNT_OUTCOMES`]).
pub const PROVIDER_COUNT_CALLS_TOTAL: &str = "assembler_provider_count_calls_total";
/// Pieces waiting for a provider count, by provider.
pub const PROVIDER_COUNT_QUEUE_DEPTH: &str = "assembler_provider_count_queue_depth";
/// Outcome of a provider count call: the provider answered a count.
pub const PROVIDER_COUNT_LEARNED: &str = "learned";
/// Outcome: the provider refused the request (400, 404, 413, 422).
pub const PROVIDER_COUNT_REFUSED: &str = "refused";
/// Outcome: the call failed (timeout, connect or TLS error, 5xx, no count).
pub const PROVIDER_COUNT_FAILED: &str = "failed";
/// Outcome: the provider answered 429.
pub const PROVIDER_COUNT_THROTTLED: &str = "throttled";
/// Outcome: a queued piece dropped, never sent, to make room in a full queue.
pub const PROVIDER_COUNT_DROPPED: &str = "dropped";
/// Outcome: a call not made because the provider's breaker was open.
pub const PROVIDER_COUNT_BREAKER_OPEN: &str = "breaker_open";
/// Outcome: a piece's count read from the fleet's shared store: no call
/// made.
pub const PROVIDER_COUNT_SHARED: &str = "shared";
/// Outcome: a read or write of the fleet's shared store failed or timed out.
pub const PROVIDER_COUNT_SHARED_UNAVAILABLE: &str = "shared_unavailable";
/// Every provider count outcome, as labelled.
pub const PROVIDER_COUNT_OUTCOMES: [&str; 8] = [
    PROVIDER_COUNT_LEARNED,
    PROVIDER_COUNT_REFUSED,
    PROVIDER_COUNT_FAILED,
    PROVIDER_COUNT_THROTTLED,
    PROVIDER_COUNT_DROPPED,
    PROVIDER_COUNT_BREAKER_OPEN,
    PROVIDER_COUNT_SHARED,
    PROVIDER_COUNT_SHARED_UNAVAILABLE,
];

/// Reload result: the file did not validate; the old configuration stays.
pub const RELOAD_REFUSED: &str = "refused";

/// Duration buckets: 50 us to 1 s.
pub const DURATION_BUCKETS_SECONDS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Token buckets: 64 to 1Mi, by powers of four.
pub const TOKEN_BUCKETS: [f64; 8] = [
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
];
