//! The TOML configuration file: its schema (every table rejects unknown keys,
//! each lies over the layer below: [`super::section`]), and the file layer
//! itself: the embedded default under the file. Flags lie over that in
//! [`super::layers`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use super::auth::AuthSection;
use super::{ConfigError, LogFormat};

/// The embedded default configuration, printed by `config --print-default`.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/default.toml");

pub use super::section::Layer;
use super::section::section;

section! {
    /// One configuration file, every value optional (absent = the layer below).
    pub struct FileConfig {
        /// `[server]`.
        #[serde(default)]
        pub server: ServerSection,
        /// `[cache]`.
        #[serde(default)]
        pub cache: CacheSection,
        /// `[limits]`.
        #[serde(default)]
        pub limits: LimitsSection,
        /// `[compaction]`.
        #[serde(default)]
        pub compaction: CompactionSection,
        /// `[memory]`.
        #[serde(default)]
        pub memory: MemorySection,
        /// `[auth]`.
        #[serde(default)]
        pub auth: AuthSection,
        /// `[telemetry]`.
        #[serde(default)]
        pub telemetry: TelemetrySection,
        /// `[render]`.
        #[serde(default)]
        pub render: RenderSection,
        /// `[gateway]`.
        #[serde(default)]
        pub gateway: GatewaySection,
        /// `[providers.NAME]`: each provider's cache rules, per field.
        #[serde(default)]
        pub providers: ProvidersSection,
        /// `[[models]]`: when present, the whole model table.
        pub models: Option<Vec<ModelEntry>>,
        /// `[policies.NAME]`: when present, every policy (`default` is added if
        /// missing).
        pub policies: Option<BTreeMap<String, PolicyEntry>>,
    }
}

section! {
    /// `[providers]`: one table per provider a model entry may name.
    pub struct ProvidersSection {
        /// `[providers.openai]`.
        #[serde(default)]
        pub openai: ProviderEntry,
        /// `[providers.anthropic]`.
        #[serde(default)]
        pub anthropic: ProviderEntry,
        /// `[providers.bedrock]`.
        #[serde(default)]
        pub bedrock: ProviderEntry,
        /// `[providers.gemini]`.
        #[serde(default)]
        pub gemini: ProviderEntry,
        /// `[providers.vllm]`.
        #[serde(default)]
        pub vllm: ProviderEntry,
        /// `[providers.sglang]`.
        #[serde(default)]
        pub sglang: ProviderEntry,
        /// `[providers.trtllm]`.
        #[serde(default)]
        pub trtllm: ProviderEntry,
    }
}

section! {
    /// `[providers.NAME]`: the rules of one provider's prompt cache.
    pub struct ProviderEntry {
        /// Shortest prefix cached, in tokens.
        pub min_tokens: Option<u32>,
        /// Implicit hits grow in steps of this many tokens.
        pub step_tokens: Option<u32>,
        /// Most breakpoint markers per request (0 = implicit only).
        pub max_breakpoints: Option<u32>,
        /// Cache lifetimes a request may ask for (`"5m"`, `"1h"`, ...).
        pub ttls: Option<Vec<String>>,
        /// The lifetime when a request asks for none (`""` = none).
        pub default_ttl: Option<String>,
        /// Content blocks a marker looks back (0 = no limit).
        pub lookback_blocks: Option<u32>,
        /// Whether the provider takes explicit breakpoint markers.
        pub explicit_breakpoints: Option<bool>,
        /// `[providers.NAME.counting]`: the provider's counting endpoint
        /// (Anthropic and Gemini; off unless `url` is set).
        #[serde(default)]
        pub counting: CountingSection,
    }
}

section! {
    /// `[providers.NAME.counting]`: where and how hard the provider's free
    /// counting endpoint is used to learn the count of each prompt piece.
    pub struct CountingSection {
        /// The endpoint (Anthropic's `count_tokens`, Gemini's
        /// `models/{model}:countTokens`, or a proxy): `http://` or `https://`.
        pub url: Option<String>,
        /// A file holding the API key (relative to the config file, or
        /// absolute).
        pub api_key_file: Option<PathBuf>,
        /// An environment variable holding the API key.
        pub api_key_env: Option<String>,
        /// Calls per minute at most.
        pub requests_per_minute: Option<u32>,
        /// Calls in flight at most.
        pub concurrency: Option<u32>,
        /// The longest one call may take, in milliseconds.
        pub timeout_ms: Option<u64>,
        /// Pieces waiting to be counted at most (the oldest is dropped).
        pub queue: Option<u32>,
        /// How long a request may wait for its provider to count its
        /// static prefix at first sight, in milliseconds (0, the default:
        /// never; at most 2000).
        pub wait_ms: Option<u64>,
    }
}

section! {
    /// `[render]`: the render node (vLLM's render contract over HTTP/1.1).
    pub struct RenderSection {
        /// Render address or `off`.
        pub listen: Option<String>,
    }
}

section! {
    /// `[gateway]`: what the gateway edge (Envoy's processor, the HTTP fit)
    /// does where it cannot fit a request.
    pub struct GatewaySection {
        /// Refuse (400) a body that is not its path's API, instead of
        /// passing it on.
        pub refuse_malformed: Option<bool>,
        /// Refuse (400) a request for a model the table does not know.
        pub refuse_unknown_model: Option<bool>,
        /// Over the limits: `pass` the request on unfitted, or `refuse` (429).
        pub on_overload: Option<String>,
        /// Add Anthropic `cache_control` markers that take effect.
        pub cache_markers: Option<bool>,
        /// Set OpenAI's `prompt_cache_key` when the caller sets none.
        pub prompt_cache_key: Option<bool>,
    }
}

section! {
    /// `[server]`.
    pub struct ServerSection {
        /// gRPC address.
        pub listen: Option<String>,
        /// Metrics address or `off`.
        pub metrics_listen: Option<String>,
        /// Drain grace period in seconds.
        pub drain_secs: Option<u64>,
        /// Log format.
        pub log_format: Option<LogFormat>,
        /// `[server.tls]`.
        #[serde(default)]
        pub tls: TlsSection,
    }
}

section! {
    /// `[server.tls]`.
    pub struct TlsSection {
        /// PEM certificate chain.
        pub cert: Option<PathBuf>,
        /// PEM private key.
        pub key: Option<PathBuf>,
        /// PEM CA bundle; when set, clients must present a certificate it signed.
        pub client_ca: Option<PathBuf>,
    }
}

section! {
    /// `[cache]`.
    pub struct CacheSection {
        /// Cache weight in MiB.
        pub mib: Option<u64>,
        /// Prefix family names (metric labels).
        pub families: Option<Vec<String>>,
    }
}

section! {
    /// `[telemetry]`: trace export over OTLP/gRPC.
    pub struct TelemetrySection {
        /// The collector's URI; empty or `off` exports nothing.
        pub otlp_endpoint: Option<String>,
        /// The `service.name` of exported spans.
        pub service_name: Option<String>,
        /// Spans waiting for export at most; more are dropped (counted).
        pub max_queue_spans: Option<u64>,
        /// The time one export call may take, in milliseconds.
        pub export_timeout_ms: Option<u64>,
    }
}

section! {
    /// `[limits]`.
    pub struct LimitsSection {
        /// Largest request message in bytes.
        pub max_request_bytes: Option<u64>,
        /// Most blocks per request.
        pub max_blocks: Option<u64>,
        /// Most items per request.
        pub max_items: Option<u64>,
        /// Most requests per AssembleBatch.
        pub max_batch_requests: Option<u64>,
        /// Most requests worked on at once.
        pub max_concurrency: Option<u64>,
        /// Deadline when the client sends none, in ms (0 = none).
        pub default_timeout_ms: Option<u64>,
        /// Most open client connections.
        pub max_connections: Option<u64>,
    }
}

section! {
    /// `[compaction]`.
    pub struct CompactionSection {
        /// Default trigger, in percent of the model's input budget.
        pub trigger_percent: Option<u32>,
        /// Default target, in percent of the model's input budget.
        pub target_percent: Option<u32>,
        /// Default count of recent messages kept verbatim.
        pub preserve_recent: Option<u32>,
        /// Consecutive failed compactions that open a session's breaker.
        pub breaker_failures: Option<u32>,
        /// Seconds an open breaker stays open.
        pub breaker_cooldown_secs: Option<u64>,
        /// The secret that seals continuation and pinned markers (never logged).
        pub marker_key: Option<Secret>,
    }
}

/// A secret string from the file: its `Debug` shows nothing of it.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

section! {
    /// `[memory]`.
    pub struct MemorySection {
        /// `sqlite`, `postgres` or `off`.
        pub store: Option<String>,
        /// SQLite database file.
        pub sqlite_path: Option<PathBuf>,
        /// PostgreSQL URL.
        pub postgres_url: Option<String>,
        /// PostgreSQL pool size.
        pub postgres_max_connections: Option<u32>,
        /// Observation types besides the built-in five.
        pub extra_types: Option<Vec<String>>,
        /// Most memories kept per subject (0 = no limit).
        pub max_per_subject: Option<u32>,
        /// Oldest memory kept, in days (0 = forever).
        pub max_age_days: Option<u32>,
        /// Memories recalled when a request does not say.
        pub recall_limit: Option<u32>,
        /// Most memories a request may recall.
        pub max_recall_limit: Option<u32>,
        /// Hours after which recency's weight halves.
        pub recency_half_life_hours: Option<u32>,
        /// PostgreSQL `statement_timeout`, in milliseconds.
        pub postgres_statement_timeout_ms: Option<u32>,
        /// Longest a recall waits on the store, in milliseconds.
        pub recall_timeout_ms: Option<u32>,
        /// `degrade` or `fail`: what a recall that times out or fails does.
        pub recall_failure: Option<String>,
        /// Most calls waiting on the store at once.
        pub max_store_waits: Option<u32>,
        /// Largest memory, in bytes.
        pub max_memory_bytes: Option<u32>,
        /// Bytes of candidates one recall loads.
        pub max_recall_bytes: Option<u64>,
        /// Bytes of memories one ListMemories page holds.
        pub max_page_bytes: Option<u64>,
        /// Most bytes of memories in the store (0 = no limit).
        pub max_total_bytes: Option<u64>,
    }
}

/// One `[[models]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// Model name or name prefix.
    pub name: String,
    /// Whether the name matches names that continue it with `-`.
    #[serde(default)]
    pub prefix: bool,
    /// `cl100k_base` or `o200k_base` (an OpenAI encoding); or set
    /// `tokenizer_dir` instead.
    pub encoding: Option<String>,
    /// A model folder in the Hugging Face layout (`tokenizer.json`, and
    /// `tokenizer_config.json` with its `chat_template` or a
    /// `chat_template.jinja`), relative to the config file or absolute:
    /// counts are that tokenizer's, prompts are rendered by that template.
    pub tokenizer_dir: Option<PathBuf>,
    /// For a `tokenizer_dir` without a chat template: tokens each message
    /// costs besides its content (default 0).
    pub message_overhead_tokens: Option<u32>,
    /// 0 = exact; otherwise an estimate with this margin.
    #[serde(default)]
    pub estimate_margin_percent: u32,
    /// Context window in tokens.
    pub context_window: u32,
    /// Default output reserve in tokens.
    pub output_reserve: u32,
    /// Who serves the model: a `[providers.NAME]` table (default `openai`
    /// for an encoding, `vllm` for a `tokenizer_dir`).
    pub provider: Option<String>,
    /// Provider minimum cacheable prefix in tokens (default: the provider's).
    pub cache_min_tokens: Option<u32>,
    /// Whether the model takes explicit breakpoint markers (default: the
    /// provider's; OpenAI's GPT-5.6 and later do).
    pub explicit_breakpoints: Option<bool>,
    /// Cache lifetimes the model offers (default: the provider's).
    pub cache_ttls: Option<Vec<String>>,
    /// The model's default cache lifetime (default: the provider's).
    pub cache_default_ttl: Option<String>,
    /// Engine cache block size in tokens (default: an engine provider's
    /// `step_tokens`, else 16).
    pub engine_block_tokens: Option<u32>,
    /// Shards of the OpenAI prompt_cache_key (default 1).
    pub prompt_cache_key_shards: Option<u32>,
    /// Lowest margin provider feedback may lower an estimate to.
    pub estimate_margin_min_percent: Option<u32>,
    /// Highest margin provider feedback may raise an estimate to.
    pub estimate_margin_max_percent: Option<u32>,
    /// For a model without a public tokenizer: the tokenizer generation it
    /// shares with other models (`claude-legacy`, `claude-2026`,
    /// `gemini-gemma3`, ...). Counts, estimates and their calibration are
    /// kept per generation and never mixed; an estimated model without one
    /// is labelled `unknown`.
    pub tokenizer_generation: Option<String>,
}

section! {
    /// One `[policies.NAME]` entry.
    pub struct PolicyEntry {
        /// `user` or `system`.
        pub context_role: Option<String>,
        /// Default priorities by block kind.
        #[serde(default)]
        pub priorities: PrioritiesEntry,
        /// Whether turns that do not fit are compacted before they are dropped.
        pub compact_turns: Option<bool>,
        /// The conversation window's low mark, percent of the input budget.
        pub window_low_percent: Option<u32>,
        /// The conversation window's high mark, percent of the input budget.
        pub window_high_percent: Option<u32>,
        /// Whether special-token text in items and the query is broken before
        /// counting (models with a tokenizer_dir).
        pub neutralize_special_tokens: Option<bool>,
        /// Whether old tool results may be cleared before turns are
        /// summarized or dropped.
        pub clear_tool_results: Option<bool>,
        /// The newest tool results, never cleared.
        pub keep_recent_tool_results: Option<u32>,
        /// Least tokens cleared at once (0: the window's step).
        pub clear_at_least_tokens: Option<u32>,
        /// Tools whose results are never cleared.
        pub exclude_tools: Option<Vec<String>>,
        /// Whether a closed tool cycle's thinking may be dropped.
        pub drop_closed_thinking: Option<bool>,
    }
}

section! {
    /// `[policies.NAME.priorities]`.
    pub struct PrioritiesEntry {
        /// STATE.
        pub state: Option<u32>,
        /// EVIDENCE.
        pub evidence: Option<u32>,
        /// MEMORY.
        pub memory: Option<u32>,
        /// SUMMARY.
        pub summary: Option<u32>,
        /// RECENT_TURNS.
        pub recent_turns: Option<u32>,
        /// HISTORY.
        pub history: Option<u32>,
    }
}

impl FileConfig {
    /// Parses TOML text; the error names the file, line and key.
    pub fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            ConfigError::new(origin.to_owned(), format!("{}{at}", e.message()))
        })
    }

    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(origin.clone(), format!("cannot read: {e}")))?;
        let mut config = FileConfig::parse(&text, &origin)?;
        // A model folder named relative to the file is found beside it.
        let base = path.parent().unwrap_or(Path::new(""));
        for m in config.models.iter_mut().flatten() {
            if let Some(dir) = m.tokenizer_dir.as_mut().filter(|d| d.is_relative()) {
                *dir = base.join(&*dir);
            }
        }
        for entry in [&mut config.providers.anthropic, &mut config.providers.gemini] {
            if let Some(f) = entry.counting.api_key_file.as_mut().filter(|f| f.is_relative()) {
                *f = base.join(&*f);
            }
        }
        Ok(config)
    }

    /// The embedded default, parsed once.
    pub fn embedded() -> &'static FileConfig {
        static EMBEDDED: OnceLock<FileConfig> = OnceLock::new();
        EMBEDDED.get_or_init(|| {
            // A unit test proves the embedded file parses; an empty config
            // (every default absent) would fail validation loudly.
            FileConfig::parse(EMBEDDED_DEFAULT, "embedded default").unwrap_or_default()
        })
    }
}

/// The file layer: the embedded default, under `path`'s file if given.
pub fn load_file(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let embedded = FileConfig::embedded().clone();
    match path {
        Some(p) => Ok(FileConfig::read(p)?.over(embedded)),
        None => Ok(embedded),
    }
}
