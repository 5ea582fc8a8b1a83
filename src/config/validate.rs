//! The one validator: every setting of the [`Layers`] checked (ranges,
//! addresses, combinations) into a [`ServerConfig`] before any port is bound.
//! The first bad setting is reported under the name it was given: the flag
//! and its variable, or the file key.

use std::net::SocketAddr;
use std::time::Duration;

use super::layers::Layers;
use super::listen::{self, ListenAddr};
use super::{ConfigError, GatewaySettings, Limits, ServeArgs, ServerConfig, TlsSettings, auth, tls};
use crate::memory::MemorySettings;
use crate::memory::keeper::RecallFailure;
use crate::memory::model::SUMMARY_TYPE;
use crate::memory::store::{Backend, Retention};
use crate::telemetry::trace::{TraceSettings, check_endpoint};
use crate::vocab::saturating_u32;

/// Longest service name accepted.
const MAX_SERVICE_NAME_CHARS: usize = 256;
/// Most observation types a configuration may add.
const MAX_EXTRA_TYPES: usize = 32;

/// `args` layered over the file and the embedded default, and checked.
pub(super) fn server_config(args: &ServeArgs) -> Result<ServerConfig, ConfigError> {
    let l = Layers::new(args)?;
    let s = &l.merged.server;
    let (listen, metrics_listen, render_listen) = addresses(&l)?;
    let limits = limits(&l)?;
    let tls = server_tls(&l, &listen)?;
    let (memory_backend, memory) = memory(&l)?;
    let auth = auth::validate(&l.merged.auth, tls.as_ref().is_some_and(|t| t.mutual))?;
    let tracing = tracing(&l)?;
    let gateway = gateway(&l)?;
    let counting = super::counting::counting(&l.merged.providers)?;
    let cache_mib = l.bounded("cache.mib", l.merged.cache.mib, 1, 1 << 20)?;
    let drain_secs = l.bounded("server.drain_secs", s.drain_secs, 0, 3600)?;
    Ok(ServerConfig {
        listen,
        metrics_listen,
        render_listen,
        cache_bytes: cache_mib * 1024 * 1024,
        drain: Duration::from_secs(drain_secs),
        log_format: *l.required("server.log_format", &s.log_format)?,
        limits,
        tls,
        source: args.clone(),
        catalog: l.merged.catalog()?,
        memory_backend,
        memory,
        auth,
        tracing,
        gateway,
        counting,
    })
}

/// `[gateway]`.
fn gateway(l: &Layers) -> Result<GatewaySettings, ConfigError> {
    let g = &l.merged.gateway;
    let refuse_overloaded = match l.required("gateway.on_overload", &g.on_overload)?.as_str() {
        "pass" => false,
        "refuse" => true,
        other => {
            return Err(l.error(
                "gateway.on_overload",
                format!("{other:?} is neither \"pass\" nor \"refuse\""),
            ));
        }
    };
    Ok(GatewaySettings {
        refuse_malformed: *l.required("gateway.refuse_malformed", &g.refuse_malformed)?,
        refuse_unknown_model: *l.required("gateway.refuse_unknown_model", &g.refuse_unknown_model)?,
        refuse_overloaded,
        cache_markers: *l.required("gateway.cache_markers", &g.cache_markers)?,
        prompt_cache_key: *l.required("gateway.prompt_cache_key", &g.prompt_cache_key)?,
    })
}

/// The gRPC address, and the metrics and render addresses unless `off`; no
/// two may share a port on overlapping addresses, or a socket path. gRPC and
/// the render node may listen on a Unix socket (`unix:/abs/path`); metrics
/// stay on TCP, where Prometheus scrapes.
fn addresses(l: &Layers) -> Result<(ListenAddr, Option<SocketAddr>, Option<ListenAddr>), ConfigError> {
    let parse = |key: &str, value: &str| listen::parse(value).map_err(|m| l.error(key, m));
    let listen = parse(
        "server.listen",
        l.required("server.listen", &l.merged.server.listen)?,
    )?;
    let metrics = match l
        .required("server.metrics_listen", &l.merged.server.metrics_listen)?
        .as_str()
    {
        "off" => None,
        m => match parse("server.metrics_listen", m)? {
            ListenAddr::Tcp(a) => Some(a),
            ListenAddr::Unix(_) => {
                return Err(l.error(
                    "server.metrics_listen",
                    "host:port or `off`: Prometheus scrapes over TCP, not a Unix socket",
                ));
            }
        },
    };
    let render = match l.required("render.listen", &l.merged.render.listen)?.as_str() {
        "off" => None,
        r => Some(parse("render.listen", r)?),
    };
    let clash = |a: SocketAddr, b: SocketAddr| {
        a.port() == b.port()
            && b.port() != 0
            && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
    };
    let clashes = |a: &ListenAddr, b: &ListenAddr| match (a, b) {
        (ListenAddr::Tcp(a), ListenAddr::Tcp(b)) => clash(*a, *b),
        (ListenAddr::Unix(a), ListenAddr::Unix(b)) => a == b,
        _ => false,
    };
    if let Some(m) = metrics
        && clashes(&ListenAddr::Tcp(m), &listen)
    {
        return Err(l.error(
            "server.metrics_listen",
            "must differ from the gRPC listen address",
        ));
    }
    if let Some(r) = &render
        && (clashes(r, &listen) || metrics.is_some_and(|m| clashes(r, &ListenAddr::Tcp(m))))
    {
        return Err(l.error(
            "render.listen",
            "must differ from the gRPC and metrics listen addresses",
        ));
    }
    Ok((listen, metrics, render))
}

/// `[limits]`.
fn limits(l: &Layers) -> Result<Limits, ConfigError> {
    let f = &l.merged.limits;
    let count = |key: &str, value: Option<u64>, hi: u64| l.bounded(key, value, 1, hi).map(saturating_u32);
    Ok(Limits {
        // gRPC frames carry a u32 length; 1 GiB is far past any prompt.
        max_request_bytes: saturating_u32(l.bounded(
            "limits.max_request_bytes",
            f.max_request_bytes,
            1024,
            1 << 30,
        )?),
        max_blocks: count("limits.max_blocks", f.max_blocks, 100_000)?,
        max_items: count("limits.max_items", f.max_items, 10_000_000)?,
        max_batch_requests: count("limits.max_batch_requests", f.max_batch_requests, 100_000)?,
        max_concurrency: count("limits.max_concurrency", f.max_concurrency, 100_000)?,
        default_timeout: match l.bounded("limits.default_timeout_ms", f.default_timeout_ms, 0, 86_400_000)? {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        },
        max_connections: count("limits.max_connections", f.max_connections, 1_000_000)?,
    })
}

/// Server TLS: a certificate and a key, and a client CA for mutual TLS.
/// Not on a Unix socket: only processes that may open the socket file reach
/// it (its folder and mode decide), so TLS would add cost and nothing else;
/// `[auth]`, which names client certificates, is refused with it.
fn server_tls(l: &Layers, listen: &ListenAddr) -> Result<Option<TlsSettings>, ConfigError> {
    const CERT: &str = "server.tls.cert";
    const KEY: &str = "server.tls.key";
    const CA: &str = "server.tls.client_ca";
    let t = &l.merged.server.tls;
    let missing = |missing: &str, given: &str| {
        ConfigError::new(
            l.name_like(missing, given),
            format!(
                "missing: TLS needs both a certificate and a key ({} is set)",
                l.name(given)
            ),
        )
    };
    match (&t.cert, &t.key) {
        (Some(_), Some(_)) if listen.unix_path().is_some() => Err(l.error(
            CERT,
            format!(
                "TLS is not served on a Unix socket ({} is {listen}): the socket file's folder and mode \
                 decide who connects; listen on host:port for TLS",
                l.name("server.listen")
            ),
        )),
        (Some(cert), Some(key)) => {
            let [c, k, ca] = [CERT, KEY, CA].map(|setting| l.name(setting));
            Ok(Some(tls::load(cert, key, t.client_ca.as_deref(), [&c, &k, &ca])?))
        }
        (Some(_), None) => Err(missing(KEY, CERT)),
        (None, Some(_)) => Err(missing(CERT, KEY)),
        (None, None) if t.client_ca.is_some() => {
            Err(l.error(CA, "mutual TLS needs a certificate and a key too"))
        }
        (None, None) => Ok(None),
    }
}

/// The memory store and `[memory]`.
fn memory(l: &Layers) -> Result<(Backend, MemorySettings), ConfigError> {
    let m = &l.merged.memory;
    let backend = memory_backend(l)?;
    let types = memory_types(l)?;
    let retention = Retention {
        max_per_subject: saturating_u32(l.bounded(
            "memory.max_per_subject",
            m.max_per_subject,
            0,
            100_000_000,
        )?),
        max_age: match l.bounded("memory.max_age_days", m.max_age_days, 0, 36_500)? {
            0 => None,
            days => Some(Duration::from_secs(days * 86_400)),
        },
        max_total_bytes: l.bounded("memory.max_total_bytes", m.max_total_bytes, 0, 1 << 50)?,
    };
    let recall_timeout = l.bounded("memory.recall_timeout_ms", m.recall_timeout_ms, 1, 60_000)?;
    let recall_failure = match l.required("memory.recall_failure", &m.recall_failure)?.as_str() {
        "degrade" => RecallFailure::Degrade,
        "fail" => RecallFailure::Fail,
        other => {
            return Err(l.error(
                "memory.recall_failure",
                format!("{other:?} is not \"degrade\" or \"fail\""),
            ));
        }
    };
    let max_store_waits = l.bounded("memory.max_store_waits", m.max_store_waits, 1, 100_000)?;
    let max_memory_bytes = l.bounded("memory.max_memory_bytes", m.max_memory_bytes, 256, 16 << 20)?;
    let max_recall_bytes = l.bounded("memory.max_recall_bytes", m.max_recall_bytes, 1024, 1 << 30)?;
    let max_page_bytes = l.bounded("memory.max_page_bytes", m.max_page_bytes, 1024, 1 << 30)?;
    let max_recall_limit = l.bounded("memory.max_recall_limit", m.max_recall_limit, 1, 1000)?;
    let recall_limit = l.bounded("memory.recall_limit", m.recall_limit, 1, max_recall_limit)?;
    let half_life_hours = l.bounded(
        "memory.recency_half_life_hours",
        m.recency_half_life_hours,
        1,
        87_600,
    )?;
    let settings = MemorySettings {
        types,
        retention,
        recall_limit: saturating_u32(recall_limit),
        max_recall_limit: saturating_u32(max_recall_limit),
        half_life: Duration::from_secs(half_life_hours * 3600),
        recall_timeout: Duration::from_millis(recall_timeout),
        recall_failure,
        max_store_waits: saturating_u32(max_store_waits),
        max_memory_bytes: saturating_u32(max_memory_bytes),
        max_recall_bytes,
        max_page_bytes,
    };
    Ok((backend, settings))
}

/// The memory store: `memory.store` and the settings of the one chosen.
fn memory_backend(l: &Layers) -> Result<Backend, ConfigError> {
    let m = &l.merged.memory;
    let backend = match l.required("memory.store", &m.store)?.as_str() {
        "off" => Backend::Off,
        "sqlite" => {
            let path = l.required("memory.sqlite_path", &m.sqlite_path)?;
            if path.as_os_str().is_empty() {
                return Err(l.error("memory.sqlite_path", "must not be empty"));
            }
            Backend::Sqlite { path: path.clone() }
        }
        "postgres" => {
            let url = l.required("memory.postgres_url", &m.postgres_url)?;
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                // Never echo the value: it may hold a password.
                return Err(l.error("memory.postgres_url", "must be a postgres:// URL"));
            }
            let pool = l.bounded(
                "memory.postgres_max_connections",
                m.postgres_max_connections,
                1,
                1000,
            )?;
            let timeout_ms = m.postgres_statement_timeout_ms;
            Backend::Postgres {
                url: url.clone(),
                max_connections: saturating_u32(pool),
                statement_timeout: Duration::from_millis(l.bounded(
                    "memory.postgres_statement_timeout_ms",
                    timeout_ms,
                    10,
                    3_600_000,
                )?),
            }
        }
        other => {
            return Err(l.error(
                "memory.store",
                format!("{other:?} is not sqlite, postgres or off"),
            ));
        }
    };
    Ok(backend)
}

/// The built-in observation types and `memory.extra_types`.
fn memory_types(l: &Layers) -> Result<Vec<String>, ConfigError> {
    let extra = l.merged.memory.extra_types.as_deref().unwrap_or_default();
    // Each type is a metric label value: the set stays small.
    if extra.len() > MAX_EXTRA_TYPES {
        return Err(l.error("memory.extra_types", format!("at most {MAX_EXTRA_TYPES} types")));
    }
    let mut types = MemorySettings::default().types;
    for (i, t) in extra.iter().enumerate() {
        let key = format!("memory.extra_types[{i}]");
        let ok = !t.is_empty()
            && t.len() <= 64
            && t.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !ok {
            return Err(l.error(&key, "a type is 1-64 of a-z, 0-9, _ and -"));
        }
        if types.contains(t) || t == SUMMARY_TYPE {
            return Err(l.error(&key, format!("{t:?} is already a type")));
        }
        types.push(t.clone());
    }
    Ok(types)
}

/// Trace export, or `None` when the endpoint is absent, empty or `off`.
fn tracing(l: &Layers) -> Result<Option<TraceSettings>, ConfigError> {
    let t = &l.merged.telemetry;
    let endpoint = match t.otlp_endpoint.as_deref().map(str::trim) {
        None | Some("" | "off") => return Ok(None),
        Some(e) => e,
    };
    check_endpoint(endpoint).map_err(|m| l.error("telemetry.otlp_endpoint", m))?;
    let service_name = l.required("telemetry.service_name", &t.service_name)?;
    if service_name.trim().is_empty() || service_name.chars().count() > MAX_SERVICE_NAME_CHARS {
        return Err(l.error(
            "telemetry.service_name",
            format!("must be 1 to {MAX_SERVICE_NAME_CHARS} characters"),
        ));
    }
    let queue = l.bounded("telemetry.max_queue_spans", t.max_queue_spans, 1, 1_000_000)?;
    let timeout_ms = l.bounded("telemetry.export_timeout_ms", t.export_timeout_ms, 1, 60_000)?;
    Ok(Some(TraceSettings {
        endpoint: endpoint.to_owned(),
        service_name: service_name.clone(),
        max_queue_spans: usize::try_from(queue).unwrap_or(usize::MAX),
        export_timeout: Duration::from_millis(timeout_ms),
    }))
}
