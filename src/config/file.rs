//! The TOML configuration file: its schema (every table rejects unknown keys)
//! and the layering embedded default < file. Flags and environment variables
//! are layered on top in [`super`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Deserialize;

use super::auth::AuthSection;
use super::{ConfigError, LogFormat};
use crate::assemble::{Catalog, Policy};
use crate::compact::{CompactionSettings, MarkerKey};
use crate::prompt::BlockKind;
use crate::tokens::hf::HfModel;
use crate::tokens::models::CacheSettings;
use crate::tokens::{Encoding, ModelSpec, ModelTable, Tokenizer};
use crate::vocab::Role;

/// The embedded default configuration, printed by `config --print-default`.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/default.toml");

/// One configuration file, every value optional (absent = the layer below).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// `[[models]]`: when present, the whole model table.
    pub models: Option<Vec<ModelEntry>>,
    /// `[policies.NAME]`: when present, every policy (`default` is added if
    /// missing).
    pub policies: Option<BTreeMap<String, PolicyEntry>>,
}

/// `[server]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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
    pub tls: Option<TlsSection>,
}

/// `[server.tls]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM certificate chain.
    pub cert: Option<PathBuf>,
    /// PEM private key.
    pub key: Option<PathBuf>,
    /// PEM CA bundle; when set, clients must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
}

/// `[cache]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSection {
    /// Cache weight in MiB.
    pub mib: Option<u64>,
    /// Prefix family names (metric labels).
    pub families: Option<Vec<String>>,
}

/// `[telemetry]`: trace export over OTLP/gRPC.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// `[compaction]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// A secret string from the file: its `Debug` shows nothing of it.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

/// Fewest characters of `compaction.marker_key`.
pub const MIN_MARKER_KEY_CHARS: usize = 32;
/// Most characters of `compaction.marker_key`.
pub const MAX_MARKER_KEY_CHARS: usize = 1024;

/// `[memory]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// Provider minimum cacheable prefix in tokens (default 1024).
    pub cache_min_tokens: Option<u32>,
    /// Engine cache block size in tokens (default 16).
    pub engine_block_tokens: Option<u32>,
    /// Shards of the OpenAI prompt_cache_key (default 1).
    pub prompt_cache_key_shards: Option<u32>,
    /// Lowest margin provider feedback may lower an estimate to.
    pub estimate_margin_min_percent: Option<u32>,
    /// Highest margin provider feedback may raise an estimate to.
    pub estimate_margin_max_percent: Option<u32>,
}

/// One `[policies.NAME]` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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
}

/// `[policies.NAME.priorities]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
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

    /// `self` over `base`: every value `self` sets wins; `models` and
    /// `policies` replace the base's whole table when present.
    pub fn over(self, base: &FileConfig) -> FileConfig {
        let b = base.clone();
        FileConfig {
            server: ServerSection {
                listen: self.server.listen.or(b.server.listen),
                metrics_listen: self.server.metrics_listen.or(b.server.metrics_listen),
                drain_secs: self.server.drain_secs.or(b.server.drain_secs),
                log_format: self.server.log_format.or(b.server.log_format),
                tls: self.server.tls.or(b.server.tls),
            },
            cache: CacheSection {
                mib: self.cache.mib.or(b.cache.mib),
                families: self.cache.families.or(b.cache.families),
            },
            limits: LimitsSection {
                max_request_bytes: self.limits.max_request_bytes.or(b.limits.max_request_bytes),
                max_blocks: self.limits.max_blocks.or(b.limits.max_blocks),
                max_items: self.limits.max_items.or(b.limits.max_items),
                max_batch_requests: self.limits.max_batch_requests.or(b.limits.max_batch_requests),
                max_concurrency: self.limits.max_concurrency.or(b.limits.max_concurrency),
                default_timeout_ms: self.limits.default_timeout_ms.or(b.limits.default_timeout_ms),
                max_connections: self.limits.max_connections.or(b.limits.max_connections),
            },
            compaction: CompactionSection {
                trigger_percent: self.compaction.trigger_percent.or(b.compaction.trigger_percent),
                target_percent: self.compaction.target_percent.or(b.compaction.target_percent),
                preserve_recent: self.compaction.preserve_recent.or(b.compaction.preserve_recent),
                breaker_failures: self.compaction.breaker_failures.or(b.compaction.breaker_failures),
                breaker_cooldown_secs: self
                    .compaction
                    .breaker_cooldown_secs
                    .or(b.compaction.breaker_cooldown_secs),
                marker_key: self.compaction.marker_key.or(b.compaction.marker_key),
            },
            memory: MemorySection {
                store: self.memory.store.or(b.memory.store),
                sqlite_path: self.memory.sqlite_path.or(b.memory.sqlite_path),
                postgres_url: self.memory.postgres_url.or(b.memory.postgres_url),
                postgres_max_connections: self
                    .memory
                    .postgres_max_connections
                    .or(b.memory.postgres_max_connections),
                extra_types: self.memory.extra_types.or(b.memory.extra_types),
                max_per_subject: self.memory.max_per_subject.or(b.memory.max_per_subject),
                max_age_days: self.memory.max_age_days.or(b.memory.max_age_days),
                recall_limit: self.memory.recall_limit.or(b.memory.recall_limit),
                max_recall_limit: self.memory.max_recall_limit.or(b.memory.max_recall_limit),
                recency_half_life_hours: self
                    .memory
                    .recency_half_life_hours
                    .or(b.memory.recency_half_life_hours),
                postgres_statement_timeout_ms: self
                    .memory
                    .postgres_statement_timeout_ms
                    .or(b.memory.postgres_statement_timeout_ms),
                recall_timeout_ms: self.memory.recall_timeout_ms.or(b.memory.recall_timeout_ms),
                recall_failure: self.memory.recall_failure.or(b.memory.recall_failure),
                max_store_waits: self.memory.max_store_waits.or(b.memory.max_store_waits),
                max_memory_bytes: self.memory.max_memory_bytes.or(b.memory.max_memory_bytes),
                max_recall_bytes: self.memory.max_recall_bytes.or(b.memory.max_recall_bytes),
                max_page_bytes: self.memory.max_page_bytes.or(b.memory.max_page_bytes),
                max_total_bytes: self.memory.max_total_bytes.or(b.memory.max_total_bytes),
            },
            auth: AuthSection {
                clients: self.auth.clients.or(b.auth.clients),
            },
            telemetry: TelemetrySection {
                otlp_endpoint: self.telemetry.otlp_endpoint.or(b.telemetry.otlp_endpoint),
                service_name: self.telemetry.service_name.or(b.telemetry.service_name),
                max_queue_spans: self.telemetry.max_queue_spans.or(b.telemetry.max_queue_spans),
                export_timeout_ms: self.telemetry.export_timeout_ms.or(b.telemetry.export_timeout_ms),
            },
            models: self.models.or(b.models),
            policies: self.policies.or(b.policies),
        }
    }

    /// The model table and policies, validated.
    pub fn catalog(&self) -> Result<Catalog, ConfigError> {
        let entries = self
            .models
            .as_deref()
            .ok_or_else(|| ConfigError::new("models", "the model table is empty"))?;
        let models = model_table(entries)?;
        let mut policies = BTreeMap::new();
        for (name, entry) in self.policies.iter().flatten() {
            policies.insert(name.clone(), Arc::new(policy(name, entry)?));
        }
        let mut catalog = Catalog::new(models, policies);
        catalog.families = families(self.cache.families.as_deref().unwrap_or_default())?;
        catalog.compaction = compaction(&self.compaction)?;
        Ok(catalog)
    }
}

/// What a model entry counts with.
enum Counter {
    Encoding(Encoding),
    Folder(Arc<HfModel>),
}

/// Loads the model folder `dir` for the setting `key`, once per table
/// (`loaded` holds the folders loaded so far, by path).
fn load_folder(
    dir: &Path,
    key: &str,
    loaded: &mut BTreeMap<PathBuf, Arc<HfModel>>,
) -> Result<Arc<HfModel>, ConfigError> {
    if let Some(m) = loaded.get(dir) {
        return Ok(m.clone());
    }
    let model = HfModel::load(dir)
        .map(Arc::new)
        .map_err(|e| ConfigError::new(key, e.to_string()))?;
    loaded.insert(dir.to_owned(), model.clone());
    Ok(model)
}

fn model_table(entries: &[ModelEntry]) -> Result<ModelTable, ConfigError> {
    if entries.is_empty() {
        return Err(ConfigError::new("models", "the model table is empty"));
    }
    let mut specs: Vec<ModelSpec> = Vec::with_capacity(entries.len());
    let mut loaded = BTreeMap::new();
    for (i, m) in entries.iter().enumerate() {
        let key = |f: &str| format!("models[{i}].{f}");
        if m.name.trim().is_empty() || m.name.len() > 128 {
            return Err(ConfigError::new(key("name"), "must be 1 to 128 characters"));
        }
        if specs.iter().any(|s| s.name == m.name) {
            return Err(ConfigError::new(
                key("name"),
                format!("duplicate model {:?}", m.name),
            ));
        }
        let counter = match (&m.encoding, &m.tokenizer_dir) {
            (Some(name), None) => Counter::Encoding(Encoding::from_name(name).ok_or_else(|| {
                ConfigError::new(
                    key("encoding"),
                    format!("{name:?} is not cl100k_base or o200k_base"),
                )
            })?),
            (None, Some(dir)) => {
                if m.estimate_margin_percent > 0 {
                    return Err(ConfigError::new(
                        key("estimate_margin_percent"),
                        "a model counted with its own tokenizer_dir is exact: no margin",
                    ));
                }
                let model = load_folder(dir, &key("tokenizer_dir"), &mut loaded)?;
                if model.template().is_some() && m.message_overhead_tokens.is_some() {
                    return Err(ConfigError::new(
                        key("message_overhead_tokens"),
                        "applies to a tokenizer_dir without a chat template (the template frames each message)",
                    ));
                }
                Counter::Folder(model)
            }
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    key("tokenizer_dir"),
                    "set encoding or tokenizer_dir, not both",
                ));
            }
            (None, None) => {
                return Err(ConfigError::new(
                    key("encoding"),
                    "set encoding (cl100k_base or o200k_base) or tokenizer_dir",
                ));
            }
        };
        if m.message_overhead_tokens.is_some() && m.tokenizer_dir.is_none() {
            return Err(ConfigError::new(
                key("message_overhead_tokens"),
                "applies to a tokenizer_dir (OpenAI models use their chat formula)",
            ));
        }
        if m.estimate_margin_percent > 100 {
            return Err(ConfigError::new(
                key("estimate_margin_percent"),
                "must be between 0 and 100",
            ));
        }
        if m.context_window == 0 {
            return Err(ConfigError::new(key("context_window"), "must be positive"));
        }
        if m.output_reserve >= m.context_window {
            return Err(ConfigError::new(
                key("output_reserve"),
                "must be less than context_window",
            ));
        }
        let defaults = CacheSettings::default();
        let cache = CacheSettings {
            min_tokens: m
                .cache_min_tokens
                .unwrap_or(defaults.min_tokens.min(m.context_window)),
            engine_block_tokens: m.engine_block_tokens.unwrap_or(defaults.engine_block_tokens),
            key_shards: m.prompt_cache_key_shards.unwrap_or(defaults.key_shards),
        };
        if cache.min_tokens > m.context_window {
            return Err(ConfigError::new(
                key("cache_min_tokens"),
                "must not exceed context_window",
            ));
        }
        if !(1..=4096).contains(&cache.engine_block_tokens) {
            return Err(ConfigError::new(
                key("engine_block_tokens"),
                "must be between 1 and 4096",
            ));
        }
        if !(1..=1024).contains(&cache.key_shards) {
            return Err(ConfigError::new(
                key("prompt_cache_key_shards"),
                "must be between 1 and 1024",
            ));
        }
        let margin = m.estimate_margin_percent;
        let margin_bounds = match (m.estimate_margin_min_percent, m.estimate_margin_max_percent) {
            (None, None) => None,
            (lo, hi) => {
                let (lo, hi) = (lo.unwrap_or(margin), hi.unwrap_or(margin));
                if margin == 0 {
                    return Err(ConfigError::new(
                        key("estimate_margin_min_percent"),
                        "margin bounds apply to estimated models (estimate_margin_percent > 0)",
                    ));
                }
                if lo == 0 || lo > margin || margin > hi || hi > 100 {
                    return Err(ConfigError::new(
                        key("estimate_margin_max_percent"),
                        "needs 1 <= estimate_margin_min_percent <= estimate_margin_percent <= estimate_margin_max_percent <= 100",
                    ));
                }
                Some((lo, hi))
            }
        };
        specs.push(ModelSpec {
            cache,
            margin_bounds,
            name: m.name.clone(),
            prefix: m.prefix,
            tokenizer: match counter {
                Counter::Folder(model) => Tokenizer::hf(model, m.message_overhead_tokens.unwrap_or(0)),
                Counter::Encoding(e) if m.estimate_margin_percent == 0 => Tokenizer::exact(e),
                Counter::Encoding(e) => Tokenizer::estimate(e, m.estimate_margin_percent),
            },
            context_window: m.context_window,
            output_reserve: m.output_reserve,
        });
    }
    Ok(ModelTable::new(specs))
}

/// Most prefix families (each is a metric label).
const MAX_FAMILIES: usize = 64;

fn families(names: &[String]) -> Result<Vec<String>, ConfigError> {
    if names.len() > MAX_FAMILIES {
        return Err(ConfigError::new(
            "cache.families",
            format!("at most {MAX_FAMILIES} families (each is a metric label)"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n != crate::prompt_cache::families::OTHER
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !ok || out.contains(n) {
            return Err(ConfigError::new(
                format!("cache.families[{i}]"),
                "a unique name of 1 to 64 of A-Z a-z 0-9 - _ . (not \"other\")",
            ));
        }
        out.push(n.clone());
    }
    Ok(out)
}

fn compaction(c: &CompactionSection) -> Result<CompactionSettings, ConfigError> {
    let d = CompactionSettings::default();
    let percent = |v: Option<u32>, d: u32, key: &str| match v.unwrap_or(d) {
        p @ 1..=100 => Ok(p),
        _ => Err(ConfigError::new(key, "must be between 1 and 100")),
    };
    let settings = CompactionSettings {
        trigger_percent: percent(c.trigger_percent, d.trigger_percent, "compaction.trigger_percent")?,
        target_percent: percent(c.target_percent, d.target_percent, "compaction.target_percent")?,
        preserve_recent: c.preserve_recent.unwrap_or(d.preserve_recent),
        breaker_failures: c.breaker_failures.unwrap_or(d.breaker_failures),
        breaker_cooldown: c
            .breaker_cooldown_secs
            .map_or(d.breaker_cooldown, std::time::Duration::from_secs),
        marker_key: match &c.marker_key {
            // The message never shows the value: it is a secret.
            Some(Secret(k))
                if !(MIN_MARKER_KEY_CHARS..=MAX_MARKER_KEY_CHARS).contains(&k.chars().count())
                    || k.trim() != k =>
            {
                return Err(ConfigError::new(
                    "compaction.marker_key",
                    format!(
                        "must be {MIN_MARKER_KEY_CHARS} to {MAX_MARKER_KEY_CHARS} characters, without \
                         leading or trailing whitespace (e.g. `openssl rand -hex 32`)"
                    ),
                ));
            }
            Some(Secret(k)) => MarkerKey::derive(k),
            None => d.marker_key,
        },
    };
    if settings.target_percent > settings.trigger_percent {
        return Err(ConfigError::new(
            "compaction.target_percent",
            "must not exceed compaction.trigger_percent",
        ));
    }
    if settings.preserve_recent > 10_000 {
        return Err(ConfigError::new(
            "compaction.preserve_recent",
            "must be at most 10000",
        ));
    }
    if !(1..=1000).contains(&settings.breaker_failures) {
        return Err(ConfigError::new(
            "compaction.breaker_failures",
            "must be between 1 and 1000",
        ));
    }
    if settings.breaker_cooldown.is_zero() || settings.breaker_cooldown > crate::compact::breaker::IDLE_EXPIRY
    {
        return Err(ConfigError::new(
            "compaction.breaker_cooldown_secs",
            "must be between 1 and 3600",
        ));
    }
    Ok(settings)
}

fn policy(name: &str, entry: &PolicyEntry) -> Result<Policy, ConfigError> {
    let key = |f: &str| format!("policies.{name}.{f}");
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_name {
        return Err(ConfigError::new(
            format!("policies.{name:?}"),
            "a policy name is 1 to 64 of A-Z a-z 0-9 - _ .",
        ));
    }
    let mut policy = Policy::default();
    policy.compact_turns = entry.compact_turns.unwrap_or(policy.compact_turns);
    policy.neutralize_special_tokens = entry
        .neutralize_special_tokens
        .unwrap_or(policy.neutralize_special_tokens);
    policy.window_low_percent = entry.window_low_percent.unwrap_or(policy.window_low_percent);
    policy.window_high_percent = entry.window_high_percent.unwrap_or(policy.window_high_percent);
    if policy.window_high_percent > 100 {
        return Err(ConfigError::new(
            key("window_high_percent"),
            format!("{} is not a percentage (0 to 100)", policy.window_high_percent),
        ));
    }
    if policy.window_low_percent > policy.window_high_percent {
        return Err(ConfigError::new(
            key("window_low_percent"),
            format!(
                "{} is above window_high_percent ({})",
                policy.window_low_percent, policy.window_high_percent
            ),
        ));
    }
    if let Some(role) = entry.context_role.as_deref() {
        policy.context_role = match role {
            "user" => Role::User,
            "system" => Role::System,
            other => {
                return Err(ConfigError::new(
                    key("context_role"),
                    format!("{other:?} is not \"user\" or \"system\""),
                ));
            }
        };
    }
    let p = &entry.priorities;
    let given = [
        p.state,
        p.evidence,
        p.memory,
        p.summary,
        p.recent_turns,
        p.history,
    ];
    for (i, value) in given.into_iter().enumerate() {
        if let Some(v) = value {
            if v == 0 || v > 1000 {
                let kind = BlockKind::ALL[i].as_str();
                return Err(ConfigError::new(
                    key(&format!("priorities.{kind}")),
                    "must be between 1 and 1000",
                ));
            }
            policy.priorities[i] = v;
        }
    }
    Ok(policy)
}

/// The embedded default catalog (models and policies).
pub fn default_catalog() -> Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            FileConfig::embedded()
                .catalog()
                .unwrap_or_else(|_| Catalog::new(ModelTable::new(Vec::new()), BTreeMap::new()))
        })
        .clone()
}
