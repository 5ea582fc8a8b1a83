//! Configuration: the embedded default TOML, under an optional file, under
//! environment variables, under flags (layered once, in `layers.rs`), checked
//! by one validator (`validate.rs`) into one [`ServerConfig`] before any port
//! is bound. Errors name the bad key; the binary exits 64.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use self::auth::AuthSettings;
use crate::assemble::Catalog;
use crate::memory::MemorySettings;
use crate::memory::store::Backend;
use crate::telemetry::trace::TraceSettings;

pub mod auth;
mod catalog;
mod counting;
mod file;
mod layers;
mod listen;
mod providers;
mod section;
mod tls;
mod validate;

pub use catalog::default_catalog;
pub use file::{EMBEDDED_DEFAULT, FileConfig, load_file};
pub use listen::{ListenAddr, MAX_UNIX_PATH_BYTES};
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
    /// gRPC listen address, host:port or unix:/absolute/path [default: 127.0.0.1:50051].
    #[arg(long, env = "CONTEXT_ASSEMBLER_LISTEN")]
    pub listen: Option<String>,
    /// Prometheus listen address (`/metrics`); `off` disables it [default: 127.0.0.1:9464].
    #[arg(long, env = "CONTEXT_ASSEMBLER_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Render node listen address (vLLM's render contract over HTTP/1.1: token ids for routers), host:port
    /// or unix:/absolute/path; `off` disables it [default: off].
    #[arg(long, env = "CONTEXT_ASSEMBLER_RENDER_LISTEN")]
    pub render_listen: Option<String>,
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
    /// gRPC address: TCP or a Unix socket path.
    pub listen: ListenAddr,
    /// Metrics address, if enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// Render node address (TCP or a Unix socket path), if enabled.
    pub render_listen: Option<ListenAddr>,
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
    /// The gateway edge (`[gateway]`).
    pub gateway: GatewaySettings,
    /// The providers' counting endpoints configured
    /// (`[providers.NAME.counting]`), by provider name.
    pub counting: Vec<(&'static str, crate::provider_count::Settings)>,
}

/// What the gateway edge does where it cannot fit a request (`[gateway]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Refuse (400) a body that is not its path's API.
    pub refuse_malformed: bool,
    /// Refuse (400) a request for a model the table does not know.
    pub refuse_unknown_model: bool,
    /// Refuse (429) when over the limits, instead of passing it on.
    pub refuse_overloaded: bool,
    /// Add Anthropic `cache_control` markers that take effect.
    pub cache_markers: bool,
    /// Set OpenAI's `prompt_cache_key` when the caller sets none.
    pub prompt_cache_key: bool,
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
        validate::server_config(self)
    }
}

#[cfg(test)]
mod tests;
