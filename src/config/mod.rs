//! Configuration: the embedded default TOML, under an optional file, under
//! environment variables, under flags, validated into one [`ServerConfig`]
//! before any port is bound. Errors name the bad key; the binary exits 64.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use self::auth::AuthSettings;
use crate::assemble::Catalog;
use crate::memory::MemorySettings;
use crate::memory::keeper::RecallFailure;
use crate::memory::store::{Backend, DEFAULT_STATEMENT_TIMEOUT, Retention};
use crate::telemetry::trace::TraceSettings;
use crate::vocab::saturating_u32;

pub mod auth;
mod file;
mod telemetry;
mod tls;

pub use file::{EMBEDDED_DEFAULT, FileConfig, default_catalog};
pub use tls::TlsSettings;

/// The exit code for bad configuration (EX_USAGE).
pub const EXIT_CONFIG: u8 = 64;

/// context-assembler: assembles budgeted, cache-stable LLM prompts over gRPC.
#[derive(Debug, Parser)]
#[command(
    name = "context-assembler",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do; `serve` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server options when no subcommand is given.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve gRPC (the default).
    Serve(Box<ServeArgs>),
    /// Assemble one request from a JSON file (proto3 JSON of AssembleRequest)
    /// without a server, and print the messages and decisions.
    Assemble(AssembleArgs),
    /// Print the embedded default configuration, or check a file.
    Config(ConfigArgs),
    /// Serve a local web page that assembles requests with the configured
    /// models and policies (no gRPC, no memory store).
    Preview(PreviewArgs),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Options of `serve`. Every option overrides the configuration file, whose
/// values override the embedded default (`config --print-default`).
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "CONTEXT_ASSEMBLER_CONFIG")]
    pub config: Option<PathBuf>,
    /// gRPC listen address [default: 127.0.0.1:50051].
    #[arg(long, env = "CONTEXT_ASSEMBLER_LISTEN")]
    pub listen: Option<String>,
    /// Prometheus listen address (`/metrics`); `off` disables it [default: 127.0.0.1:9464].
    #[arg(long, env = "CONTEXT_ASSEMBLER_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Weight of the token-count caches in MiB [default: 64].
    #[arg(long, env = "CONTEXT_ASSEMBLER_CACHE_MIB")]
    pub cache_mib: Option<u64>,
    /// Grace period for in-flight requests on SIGTERM/SIGINT, in seconds [default: 10].
    #[arg(long, env = "CONTEXT_ASSEMBLER_DRAIN_SECS")]
    pub drain_secs: Option<u64>,
    /// Log format [default: plain].
    #[arg(long, env = "CONTEXT_ASSEMBLER_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Largest request message in bytes [default: 4194304].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<u64>,
    /// Most blocks per request [default: 64].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_BLOCKS")]
    pub max_blocks: Option<u64>,
    /// Most items over all blocks of a request [default: 10000].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_ITEMS")]
    pub max_items: Option<u64>,
    /// Most requests in one AssembleBatch [default: 256].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_BATCH_REQUESTS")]
    pub max_batch_requests: Option<u64>,
    /// Most requests worked on at once; more are shed [default: 64].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_CONCURRENCY")]
    pub max_concurrency: Option<u64>,
    /// Deadline for requests without grpc-timeout, in ms; 0 = none [default: 30000].
    #[arg(long, env = "CONTEXT_ASSEMBLER_DEFAULT_TIMEOUT_MS")]
    pub default_timeout_ms: Option<u64>,
    /// Most open client connections [default: 1024].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MAX_CONNECTIONS")]
    pub max_connections: Option<u64>,
    /// TLS certificate chain (PEM); enables TLS with --tls-key.
    #[arg(long, env = "CONTEXT_ASSEMBLER_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "CONTEXT_ASSEMBLER_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// CA bundle (PEM) for client certificates: requires mutual TLS.
    #[arg(long, env = "CONTEXT_ASSEMBLER_TLS_CLIENT_CA")]
    pub tls_client_ca: Option<PathBuf>,
    /// Memory store: sqlite, postgres or off [default: sqlite].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MEMORY_STORE")]
    pub memory_store: Option<String>,
    /// SQLite memory database file [default: context-assembler-memory.db].
    #[arg(long, env = "CONTEXT_ASSEMBLER_MEMORY_SQLITE_PATH")]
    pub memory_sqlite_path: Option<PathBuf>,
    /// PostgreSQL URL of the memory store (with --memory-store postgres).
    #[arg(long, env = "CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL", hide_env_values = true)]
    pub memory_postgres_url: Option<String>,
    /// OTLP/gRPC collector for trace spans, e.g. http://otel-collector:4317; empty or `off` exports none [default: off].
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of exported spans [default: context-assembler].
    #[arg(long, env = "OTEL_SERVICE_NAME")]
    pub otlp_service_name: Option<String>,
}

/// Options of `assemble`.
#[derive(Debug, Clone, Args)]
pub struct AssembleArgs {
    /// The request as proto3 JSON; `-` reads standard input.
    pub file: PathBuf,
    /// Print the whole response as proto3 JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Read one request per line and print one JSON line per request: the
    /// response, or `{"error": {"code": .., "message": ..}}`. Caches stay warm
    /// across lines.
    #[arg(long, conflicts_with = "json")]
    pub jsonl: bool,
    /// TOML configuration file (its models and policies are used).
    #[arg(long, env = "CONTEXT_ASSEMBLER_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Options of `preview`.
#[derive(Debug, Clone, Args)]
pub struct PreviewArgs {
    /// HTTP listen address of the page; loopback unless --allow-remote.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// TOML configuration file (its models, policies and limits are used).
    #[arg(long, env = "CONTEXT_ASSEMBLER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Allow a non-loopback listen address (the page has no authentication).
    #[arg(long)]
    pub allow_remote: bool,
    /// A request (proto3 JSON of AssembleRequest) the page offers besides
    /// the shipped examples; it stays on the server.
    #[arg(value_name = "FILE.json")]
    pub file: Option<PathBuf>,
}

/// Options of `config`.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct ConfigArgs {
    /// Print the embedded default configuration.
    #[arg(long)]
    pub print_default: bool,
    /// Validate FILE as the server would at start (exit 64 if invalid).
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
}

/// Request limits, enforced by the gRPC layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest request message in bytes.
    pub max_request_bytes: u32,
    /// Most blocks per request.
    pub max_blocks: u32,
    /// Most items per request.
    pub max_items: u32,
    /// Most requests per AssembleBatch.
    pub max_batch_requests: u32,
    /// Most requests worked on at once.
    pub max_concurrency: u32,
    /// Deadline when the client sends none.
    pub default_timeout: Option<Duration>,
    /// Most open client connections.
    pub max_connections: u32,
}

/// A validated server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// gRPC address.
    pub listen: SocketAddr,
    /// Metrics address, if enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// Cache weight in bytes.
    pub cache_bytes: u64,
    /// Drain grace period.
    pub drain: Duration,
    /// Log format.
    pub log_format: LogFormat,
    /// Request limits.
    pub limits: Limits,
    /// Server TLS, if enabled.
    pub tls: Option<TlsSettings>,
    /// What this configuration was made from: SIGHUP validates the same
    /// flags and environment over the re-read file.
    pub source: ServeArgs,
    /// Models and policies.
    pub catalog: Catalog,
    /// The memory store.
    pub memory_backend: Backend,
    /// How memories are retained and recalled.
    pub memory: MemorySettings,
    /// What each client certificate identity may claim (`[auth]`).
    pub auth: AuthSettings,
    /// Trace export (`[telemetry]`), if an OTLP endpoint is configured.
    pub tracing: Option<TraceSettings>,
}

/// What SIGHUP applies: the catalog and `[auth]`.
#[derive(Debug, Clone)]
pub struct Reloadable {
    /// Models, policies, compaction and cache families.
    pub catalog: Catalog,
    /// What each client identity may claim.
    pub auth: AuthSettings,
}

/// A configuration error, naming the bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}: {message}")]
pub struct ConfigError {
    /// The setting at fault: a file key (`limits.max_blocks`,
    /// `models[2].encoding`), a flag with its env var, or the file itself.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// A value and the name of the setting it came from.
struct Setting<T> {
    value: T,
    key: String,
}

/// The flag's value if given, else the file's (named by `file_key`), else
/// the embedded default's.
fn pick<T: Clone>(
    flag: Option<T>,
    flag_key: &str,
    file: Option<T>,
    file_key: &str,
) -> Result<Setting<T>, ConfigError> {
    match (flag, file) {
        (Some(value), _) => Ok(Setting {
            value,
            key: flag_key.to_owned(),
        }),
        (None, Some(value)) => Ok(Setting {
            value,
            key: file_key.to_owned(),
        }),
        (None, None) => Err(ConfigError::new(file_key, "missing (and no embedded default)")),
    }
}

fn within(s: &Setting<u64>, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&s.value) {
        Ok(s.value)
    } else {
        Err(ConfigError::new(
            s.key.clone(),
            format!("{} is not between {lo} and {hi}", s.value),
        ))
    }
}

/// The file layer: the embedded default, under `path`'s file if given.
pub fn load_file(path: Option<&std::path::Path>) -> Result<FileConfig, ConfigError> {
    let embedded = FileConfig::embedded();
    match path {
        Some(p) => Ok(FileConfig::read(p)?.over(embedded)),
        None => Ok(embedded.clone()),
    }
}

impl ServerConfig {
    /// Re-reads the configuration file under the same flags and environment
    /// and returns its catalog: what SIGHUP applies. The whole layered
    /// configuration must validate. `None` without a file.
    pub fn reload_catalog(&self) -> Option<Result<Catalog, ConfigError>> {
        self.reload().map(|r| r.map(|r| r.catalog))
    }

    /// Re-reads the configuration file as [`Self::reload_catalog`] does and
    /// returns everything SIGHUP applies. `None` without a file.
    pub fn reload(&self) -> Option<Result<Reloadable, ConfigError>> {
        self.source.config.as_ref()?;
        Some(self.source.validate().map(|c| Reloadable {
            catalog: c.catalog,
            auth: c.auth,
        }))
    }
}

impl ServeArgs {
    /// Layers flags and env over the file over the embedded default, and
    /// checks every setting; the first bad one is reported by name.
    pub fn validate(&self) -> Result<ServerConfig, ConfigError> {
        let f = load_file(self.config.as_deref())?;
        let listen = pick(
            self.listen.clone(),
            "--listen (CONTEXT_ASSEMBLER_LISTEN)",
            f.server.listen.clone(),
            "server.listen",
        )?;
        let listen: SocketAddr = listen.value.parse().map_err(|e| {
            ConfigError::new(
                listen.key.clone(),
                format!("{:?} is not a socket address: {e}", listen.value),
            )
        })?;
        let metrics = pick(
            self.metrics_listen.clone(),
            "--metrics-listen (CONTEXT_ASSEMBLER_METRICS_LISTEN)",
            f.server.metrics_listen.clone(),
            "server.metrics_listen",
        )?;
        let metrics_listen = if metrics.value == "off" {
            None
        } else {
            Some(metrics.value.parse::<SocketAddr>().map_err(|e| {
                ConfigError::new(
                    metrics.key.clone(),
                    format!("{:?} is not a socket address or `off`: {e}", metrics.value),
                )
            })?)
        };
        let clash = |m: SocketAddr| {
            m.port() == listen.port()
                && listen.port() != 0
                && (m.ip() == listen.ip() || m.ip().is_unspecified() || listen.ip().is_unspecified())
        };
        if metrics_listen.is_some_and(clash) {
            return Err(ConfigError::new(
                metrics.key,
                "must differ from the gRPC listen address",
            ));
        }
        let cache_mib = pick(
            self.cache_mib,
            "--cache-mib (CONTEXT_ASSEMBLER_CACHE_MIB)",
            f.cache.mib,
            "cache.mib",
        )?;
        let drain = pick(
            self.drain_secs,
            "--drain-secs (CONTEXT_ASSEMBLER_DRAIN_SECS)",
            f.server.drain_secs,
            "server.drain_secs",
        )?;
        let log_format = pick(
            self.log_format,
            "--log-format",
            f.server.log_format,
            "server.log_format",
        )?;
        let l = &f.limits;
        let max_request_bytes = pick(
            self.max_request_bytes,
            "--max-request-bytes (CONTEXT_ASSEMBLER_MAX_REQUEST_BYTES)",
            l.max_request_bytes,
            "limits.max_request_bytes",
        )?;
        let max_blocks = pick(
            self.max_blocks,
            "--max-blocks (CONTEXT_ASSEMBLER_MAX_BLOCKS)",
            l.max_blocks,
            "limits.max_blocks",
        )?;
        let max_items = pick(
            self.max_items,
            "--max-items (CONTEXT_ASSEMBLER_MAX_ITEMS)",
            l.max_items,
            "limits.max_items",
        )?;
        let max_batch_requests = pick(
            self.max_batch_requests,
            "--max-batch-requests (CONTEXT_ASSEMBLER_MAX_BATCH_REQUESTS)",
            l.max_batch_requests,
            "limits.max_batch_requests",
        )?;
        let max_concurrency = pick(
            self.max_concurrency,
            "--max-concurrency (CONTEXT_ASSEMBLER_MAX_CONCURRENCY)",
            l.max_concurrency,
            "limits.max_concurrency",
        )?;
        let timeout = pick(
            self.default_timeout_ms,
            "--default-timeout-ms (CONTEXT_ASSEMBLER_DEFAULT_TIMEOUT_MS)",
            l.default_timeout_ms,
            "limits.default_timeout_ms",
        )?;
        let max_connections = pick(
            self.max_connections,
            "--max-connections (CONTEXT_ASSEMBLER_MAX_CONNECTIONS)",
            l.max_connections,
            "limits.max_connections",
        )?;
        let to_u32 = |v: u64| saturating_u32(v);
        let limits = Limits {
            // gRPC frames carry a u32 length; 1 GiB is far past any prompt.
            max_request_bytes: to_u32(within(&max_request_bytes, 1024, 1 << 30)?),
            max_blocks: to_u32(within(&max_blocks, 1, 100_000)?),
            max_items: to_u32(within(&max_items, 1, 10_000_000)?),
            max_batch_requests: to_u32(within(&max_batch_requests, 1, 100_000)?),
            max_concurrency: to_u32(within(&max_concurrency, 1, 100_000)?),
            default_timeout: match within(&timeout, 0, 86_400_000)? {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            max_connections: to_u32(within(&max_connections, 1, 1_000_000)?),
        };

        let file_tls = f.server.tls.clone().unwrap_or_default();
        let tls = match (
            pick(
                self.tls_cert.clone(),
                "--tls-cert (CONTEXT_ASSEMBLER_TLS_CERT)",
                file_tls.cert,
                "server.tls.cert",
            ),
            pick(
                self.tls_key.clone(),
                "--tls-key (CONTEXT_ASSEMBLER_TLS_KEY)",
                file_tls.key,
                "server.tls.key",
            ),
        ) {
            (Ok(cert), Ok(key)) => {
                let ca = pick(
                    self.tls_client_ca.clone(),
                    "--tls-client-ca (CONTEXT_ASSEMBLER_TLS_CLIENT_CA)",
                    file_tls.client_ca,
                    "server.tls.client_ca",
                )
                .ok();
                let ca_key = ca
                    .as_ref()
                    .map_or("server.tls.client_ca".to_owned(), |c| c.key.clone());
                Some(tls::load(
                    &cert.value,
                    &key.value,
                    ca.as_ref().map(|c| c.value.as_path()),
                    [&cert.key, &key.key, &ca_key],
                )?)
            }
            (Err(_), Err(_)) => {
                let key = match (&self.tls_client_ca, &file_tls.client_ca) {
                    (Some(_), _) => "--tls-client-ca (CONTEXT_ASSEMBLER_TLS_CLIENT_CA)",
                    (None, Some(_)) => "server.tls.client_ca",
                    (None, None) => "",
                };
                if !key.is_empty() {
                    return Err(ConfigError::new(
                        key,
                        "mutual TLS needs a certificate and a key too",
                    ));
                }
                None
            }
            (Ok(given), Err(_)) | (Err(_), Ok(given)) => {
                // Name the missing half the way the given half was given.
                let from_flag = given.key.starts_with("--");
                let missing = match (given.key.contains("cert"), from_flag) {
                    (true, true) => "--tls-key (CONTEXT_ASSEMBLER_TLS_KEY)",
                    (true, false) => "server.tls.key",
                    (false, true) => "--tls-cert (CONTEXT_ASSEMBLER_TLS_CERT)",
                    (false, false) => "server.tls.cert",
                };
                return Err(ConfigError::new(
                    missing,
                    format!(
                        "missing: TLS needs both a certificate and a key ({} is set)",
                        given.key
                    ),
                ));
            }
        };

        let (memory_backend, memory) = self.memory(&f)?;
        let auth = auth::validate(&f.auth, tls.as_ref().is_some_and(|t| t.mutual))?;
        let tracing = telemetry::validate(self, &f.telemetry)?;
        Ok(ServerConfig {
            tracing,
            auth,
            memory_backend,
            memory,
            listen,
            metrics_listen,
            cache_bytes: within(&cache_mib, 1, 1 << 20)? * 1024 * 1024,
            drain: Duration::from_secs(within(&drain, 0, 3600)?),
            log_format: log_format.value,
            limits,
            tls,
            source: self.clone(),
            catalog: f.catalog()?,
        })
    }
}

/// Most observation types a configuration may add.
const MAX_EXTRA_TYPES: usize = 32;

impl ServeArgs {
    /// The `[memory]` settings under the memory flags.
    fn memory(&self, f: &FileConfig) -> Result<(Backend, MemorySettings), ConfigError> {
        let m = &f.memory;
        let store = pick(
            self.memory_store.clone(),
            "--memory-store (CONTEXT_ASSEMBLER_MEMORY_STORE)",
            m.store.clone(),
            "memory.store",
        )?;
        let backend = match store.value.as_str() {
            "off" => Backend::Off,
            "sqlite" => {
                let path = pick(
                    self.memory_sqlite_path.clone(),
                    "--memory-sqlite-path (CONTEXT_ASSEMBLER_MEMORY_SQLITE_PATH)",
                    m.sqlite_path.clone(),
                    "memory.sqlite_path",
                )?;
                if path.value.as_os_str().is_empty() {
                    return Err(ConfigError::new(path.key, "must not be empty"));
                }
                Backend::Sqlite { path: path.value }
            }
            "postgres" => {
                let url = pick(
                    self.memory_postgres_url.clone(),
                    "--memory-postgres-url (CONTEXT_ASSEMBLER_MEMORY_POSTGRES_URL)",
                    m.postgres_url.clone(),
                    "memory.postgres_url",
                )?;
                if !(url.value.starts_with("postgres://") || url.value.starts_with("postgresql://")) {
                    // Never echo the value: it may hold a password.
                    return Err(ConfigError::new(url.key, "must be a postgres:// URL"));
                }
                let pool = u64::from(m.postgres_max_connections.unwrap_or(8));
                let pool = Setting {
                    value: pool,
                    key: "memory.postgres_max_connections".to_owned(),
                };
                let default_ms = u64::try_from(DEFAULT_STATEMENT_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
                let statement_timeout = Setting {
                    value: m.postgres_statement_timeout_ms.map_or(default_ms, u64::from),
                    key: "memory.postgres_statement_timeout_ms".to_owned(),
                };
                Backend::Postgres {
                    url: url.value,
                    max_connections: u32::try_from(within(&pool, 1, 1000)?).unwrap_or(8),
                    statement_timeout: Duration::from_millis(within(&statement_timeout, 10, 3_600_000)?),
                }
            }
            other => {
                return Err(ConfigError::new(
                    store.key,
                    format!("{other:?} is not sqlite, postgres or off"),
                ));
            }
        };
        let mut settings = MemorySettings::default();
        // Each type is a metric label value: the set stays small.
        if m.extra_types.as_ref().is_some_and(|t| t.len() > MAX_EXTRA_TYPES) {
            return Err(ConfigError::new(
                "memory.extra_types",
                format!("at most {MAX_EXTRA_TYPES} types"),
            ));
        }
        for (i, t) in m.extra_types.iter().flatten().enumerate() {
            let key = format!("memory.extra_types[{i}]");
            let ok = !t.is_empty()
                && t.len() <= 64
                && t.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            if !ok {
                return Err(ConfigError::new(key, "a type is 1-64 of a-z, 0-9, _ and -"));
            }
            if settings.types.contains(t) || t == crate::memory::model::SUMMARY_TYPE {
                return Err(ConfigError::new(key, format!("{t:?} is already a type")));
            }
            settings.types.push(t.clone());
        }
        let setting = |v: Option<u32>, d: u32, key: &str| Setting {
            value: u64::from(v.unwrap_or(d)),
            key: key.to_owned(),
        };
        let to_u32 = |v: u64| saturating_u32(v);
        let d = MemorySettings::default();
        let max_per_subject = setting(
            m.max_per_subject,
            d.retention.max_per_subject,
            "memory.max_per_subject",
        );
        let max_age_days = setting(m.max_age_days, 0, "memory.max_age_days");
        let recall_limit = setting(m.recall_limit, d.recall_limit, "memory.recall_limit");
        let max_recall_limit = setting(m.max_recall_limit, d.max_recall_limit, "memory.max_recall_limit");
        let half_life = setting(m.recency_half_life_hours, 168, "memory.recency_half_life_hours");
        let bytes = |v: Option<u64>, d: u64, key: &str| Setting {
            value: v.unwrap_or(d),
            key: key.to_owned(),
        };
        let max_total_bytes = bytes(m.max_total_bytes, 0, "memory.max_total_bytes");
        settings.retention = Retention {
            max_per_subject: to_u32(within(&max_per_subject, 0, 100_000_000)?),
            max_age: match within(&max_age_days, 0, 36_500)? {
                0 => None,
                days => Some(Duration::from_secs(days * 86_400)),
            },
            max_total_bytes: within(&max_total_bytes, 0, 1 << 50)?,
        };
        let recall_timeout = setting(
            m.recall_timeout_ms,
            saturating_u32(d.recall_timeout.as_millis()),
            "memory.recall_timeout_ms",
        );
        settings.recall_timeout = Duration::from_millis(within(&recall_timeout, 1, 60_000)?);
        settings.recall_failure = match m.recall_failure.as_deref().unwrap_or("degrade") {
            "degrade" => RecallFailure::Degrade,
            "fail" => RecallFailure::Fail,
            other => {
                return Err(ConfigError::new(
                    "memory.recall_failure",
                    format!("{other:?} is not \"degrade\" or \"fail\""),
                ));
            }
        };
        let waits = setting(m.max_store_waits, d.max_store_waits, "memory.max_store_waits");
        settings.max_store_waits = to_u32(within(&waits, 1, 100_000)?);
        let memory_bytes = setting(m.max_memory_bytes, d.max_memory_bytes, "memory.max_memory_bytes");
        settings.max_memory_bytes = to_u32(within(&memory_bytes, 256, 16 << 20)?);
        let recall_bytes = bytes(m.max_recall_bytes, d.max_recall_bytes, "memory.max_recall_bytes");
        settings.max_recall_bytes = within(&recall_bytes, 1024, 1 << 30)?;
        let page_bytes = bytes(m.max_page_bytes, d.max_page_bytes, "memory.max_page_bytes");
        settings.max_page_bytes = within(&page_bytes, 1024, 1 << 30)?;
        settings.max_recall_limit = to_u32(within(&max_recall_limit, 1, 1000)?);
        settings.recall_limit = to_u32(within(&recall_limit, 1, u64::from(settings.max_recall_limit))?);
        settings.half_life = Duration::from_secs(within(&half_life, 1, 87_600)? * 3600);
        Ok((backend, settings))
    }
}

#[cfg(test)]
mod tests;
