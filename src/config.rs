//! Command line and environment -> one validated configuration, before any
//! port is bound. Every flag has an environment variable and a named default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Default gRPC listen address (loopback: the sidecar serves its pod).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
/// Default Prometheus listen address.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
/// Default weight of the token-count caches, in MiB.
pub const DEFAULT_CACHE_MIB: u64 = 64;
/// Default grace period for in-flight requests on shutdown, in seconds.
pub const DEFAULT_DRAIN_SECS: u64 = 10;

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
    Serve(ServeArgs),
    /// Assemble one request from a JSON file (proto3 JSON of AssembleRequest)
    /// without a server, and print the messages and decisions.
    Assemble(AssembleArgs),
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Options of `serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// gRPC listen address.
    #[arg(long, env = "CONTEXT_ASSEMBLER_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Prometheus listen address (`/metrics`); `off` disables it.
    #[arg(long, env = "CONTEXT_ASSEMBLER_METRICS_LISTEN", default_value = DEFAULT_METRICS_LISTEN)]
    pub metrics_listen: String,
    /// Weight of the token-count caches in MiB.
    #[arg(long, env = "CONTEXT_ASSEMBLER_CACHE_MIB", default_value_t = DEFAULT_CACHE_MIB)]
    pub cache_mib: u64,
    /// Grace period for in-flight requests on SIGTERM/SIGINT, in seconds.
    #[arg(long, env = "CONTEXT_ASSEMBLER_DRAIN_SECS", default_value_t = DEFAULT_DRAIN_SECS)]
    pub drain_secs: u64,
    /// Log format.
    #[arg(long, env = "CONTEXT_ASSEMBLER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
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
}

/// A validated server configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// A configuration error, naming the bad setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}: {message}")]
pub struct ConfigError {
    /// The flag (and env var) at fault.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl ServeArgs {
    /// Checks every setting; the first bad one is reported.
    pub fn validate(&self) -> Result<ServerConfig, ConfigError> {
        let listen = self.listen.parse().map_err(|e| ConfigError {
            key: "--listen (CONTEXT_ASSEMBLER_LISTEN)",
            message: format!("{:?} is not a socket address: {e}", self.listen),
        })?;
        let metrics_listen = if self.metrics_listen == "off" {
            None
        } else {
            Some(self.metrics_listen.parse().map_err(|e| ConfigError {
                key: "--metrics-listen (CONTEXT_ASSEMBLER_METRICS_LISTEN)",
                message: format!("{:?} is not a socket address or `off`: {e}", self.metrics_listen),
            })?)
        };
        if self.cache_mib == 0 || self.cache_mib > 1 << 20 {
            return Err(ConfigError {
                key: "--cache-mib (CONTEXT_ASSEMBLER_CACHE_MIB)",
                message: "must be between 1 and 1048576".to_owned(),
            });
        }
        if metrics_listen == Some(listen) {
            return Err(ConfigError {
                key: "--metrics-listen (CONTEXT_ASSEMBLER_METRICS_LISTEN)",
                message: "must differ from --listen".to_owned(),
            });
        }
        Ok(ServerConfig {
            listen,
            metrics_listen,
            cache_bytes: self.cache_mib * 1024 * 1024,
            drain: Duration::from_secs(self.drain_secs),
            log_format: self.log_format,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("context-assembler").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_validate() {
        let cli = parse(&[]);
        assert!(cli.command.is_none());
        let cfg = cli.serve.validate().unwrap();
        assert_eq!(cfg.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(cfg.metrics_listen, Some(DEFAULT_METRICS_LISTEN.parse().unwrap()));
        assert_eq!(cfg.cache_bytes, DEFAULT_CACHE_MIB << 20);
    }

    #[test]
    fn serve_subcommand_takes_the_same_flags() {
        let cli = parse(&["serve", "--listen", "0.0.0.0:7000", "--metrics-listen", "off"]);
        let Some(Command::Serve(args)) = cli.command else {
            panic!("not serve")
        };
        let cfg = args.validate().unwrap();
        assert_eq!(cfg.listen.port(), 7000);
        assert_eq!(cfg.metrics_listen, None);
    }

    #[test]
    fn bad_settings_name_their_key() {
        let err = parse(&["--listen", "nowhere"]).serve.validate().unwrap_err();
        assert!(err.key.starts_with("--listen"));
        let err = parse(&["--cache-mib", "0"]).serve.validate().unwrap_err();
        assert!(err.key.starts_with("--cache-mib"));
        let err = parse(&["--listen", "127.0.0.1:1", "--metrics-listen", "127.0.0.1:1"])
            .serve
            .validate()
            .unwrap_err();
        assert!(err.key.starts_with("--metrics-listen"));
    }

    #[test]
    fn assemble_subcommand_parses() {
        let cli = parse(&["assemble", "-", "--json"]);
        let Some(Command::Assemble(a)) = cli.command else {
            panic!("not assemble")
        };
        assert_eq!(a.file, PathBuf::from("-"));
        assert!(a.json);
    }
}
