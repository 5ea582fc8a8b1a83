//! Telemetry: the tracing subscriber, the metric catalogue, a reader of the
//! exposition it serves, and the export of trace spans over OTLP.

pub mod exposition;
pub mod metrics;
mod names;
pub mod process;
pub mod trace;

use tracing_subscriber::{EnvFilter, fmt};

/// Installs the global tracing subscriber: level from `RUST_LOG` (default
/// `info`), JSON lines when `json` is set, plain text otherwise. Safe to call
/// more than once (later calls do nothing).
pub fn init_tracing(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
