//! `[telemetry]`: where trace spans go. The endpoint comes from
//! `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`), else the file, else
//! nowhere; the service name likewise from `--otlp-service-name` (or
//! `OTEL_SERVICE_NAME`). Checked before any port is bound.

use std::time::Duration;

use super::file::TelemetrySection;
use super::{ConfigError, ServeArgs};
use crate::telemetry::trace::{TraceSettings, check_endpoint};

/// The `service.name` of exported spans unless configured.
pub const DEFAULT_SERVICE_NAME: &str = "context-assembler";
/// Spans waiting for export at most unless configured.
pub const DEFAULT_MAX_QUEUE_SPANS: u64 = 2048;
/// The time one export call may take unless configured, in milliseconds.
pub const DEFAULT_EXPORT_TIMEOUT_MS: u64 = 10_000;
/// Longest service name accepted.
const MAX_SERVICE_NAME_CHARS: usize = 256;

/// The trace export settings, or `None` when no endpoint is configured.
pub(super) fn validate(args: &ServeArgs, t: &TelemetrySection) -> Result<Option<TraceSettings>, ConfigError> {
    let (endpoint, key) = match (&args.otlp_endpoint, &t.otlp_endpoint) {
        (Some(e), _) => (e.trim(), "--otlp-endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)"),
        (None, Some(e)) => (e.trim(), "telemetry.otlp_endpoint"),
        (None, None) => return Ok(None),
    };
    if endpoint.is_empty() || endpoint == "off" {
        return Ok(None);
    }
    check_endpoint(endpoint).map_err(|m| ConfigError::new(key, m))?;
    let (service_name, name_key) = match (&args.otlp_service_name, &t.service_name) {
        (Some(n), _) => (n.clone(), "--otlp-service-name (OTEL_SERVICE_NAME)"),
        (None, Some(n)) => (n.clone(), "telemetry.service_name"),
        (None, None) => (DEFAULT_SERVICE_NAME.to_owned(), "telemetry.service_name"),
    };
    if service_name.trim().is_empty() || service_name.chars().count() > MAX_SERVICE_NAME_CHARS {
        return Err(ConfigError::new(
            name_key,
            format!("must be 1 to {MAX_SERVICE_NAME_CHARS} characters"),
        ));
    }
    let queue = t.max_queue_spans.unwrap_or(DEFAULT_MAX_QUEUE_SPANS);
    if !(1..=1_000_000).contains(&queue) {
        return Err(ConfigError::new(
            "telemetry.max_queue_spans",
            format!("{queue} is not between 1 and 1000000"),
        ));
    }
    let timeout = t.export_timeout_ms.unwrap_or(DEFAULT_EXPORT_TIMEOUT_MS);
    if !(1..=60_000).contains(&timeout) {
        return Err(ConfigError::new(
            "telemetry.export_timeout_ms",
            format!("{timeout} is not between 1 and 60000"),
        ));
    }
    Ok(Some(TraceSettings {
        endpoint: endpoint.to_owned(),
        service_name,
        max_queue_spans: usize::try_from(queue).unwrap_or(usize::MAX),
        export_timeout: Duration::from_millis(timeout),
    }))
}
