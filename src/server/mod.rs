//! Bind, serve and drain: the gRPC service with health and reflection over
//! hyper's HTTP/2 server (plain or TLS, on a TCP port or a Unix socket), the
//! Prometheus endpoint, the render node, readiness as a latch, SIGHUP
//! reloads, shutdown under a deadline.
//!
//! The HTTP/2 server is hyper's own rather than tonic's transport, so that
//! every layer a request passes is ours: the gate reads the frame header
//! before the body and sheds before anything is buffered, deadlines answer
//! DEADLINE_EXCEEDED (tonic's transport would answer CANCELLED), and
//! connections are bounded.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tracing::{debug, info, warn};

use crate::assemble::Assembler;
use crate::assemble::flow::Flow;
use crate::config::{ListenAddr, ServerConfig};
use crate::gateway::http::FitRoutes;
use crate::gateway::{self, ExtProc, Fitter};
use crate::grpc::admission::Admission;
use crate::grpc::auth::{Authority, ClientIdentity};
use crate::grpc::gate::Gate;
use crate::grpc::trace::Traced;
use crate::grpc::{AssemblerService, pb};
use crate::memory::Memories;
use crate::memory::store::Backend;
use crate::telemetry::metrics;
use crate::telemetry::trace::Exporter;
use crate::tokens::provider::Provider;

mod conn;
pub mod dial;
mod listener;
pub mod memory;
mod metrics_http;
mod render_node;
mod series;
mod shared_counts;
mod signals;

use conn::{Calls, Conn};
use listener::Listener;
use shared_counts::SharedCounts;

pub use metrics_http::{METRICS_HEADER_TIMEOUT, install_metrics};
pub use signals::{Hangups, reload, shutdown_signal};

/// HTTP/2 receive windows. Prompts are large (a 32k-token request is about
/// 150 KB); with the 64 KiB protocol default every request waits for window
/// updates, so the sidecar advertises room for a default-limit request at
/// once. The gate reads bodies as they arrive, so the windows bound what a
/// stalled stream can leave unread, per stream and per connection.
const HTTP2_STREAM_WINDOW_BYTES: u32 = 4 << 20;
const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 8 << 20;
/// The largest HTTP/2 frame a client may send. hyper reads a connection one
/// frame at a time, into a buffer the size the frame announces; at the
/// protocol's 16 KiB a 1 MB request took about 64 reads and as many wakeups.
/// At 64 KiB a 32k-token request offering 8x its budget costs about 9% less
/// server CPU (docs/benchmarks/history.md section 16). A connection that
/// stalls inside a frame holds that buffer until the keep-alive closes it
/// (its ping goes unanswered: 40 s at most), so this and `max_connections`
/// bound what stalled connections can pin: about 97 KB each, measured,
/// against 48 KB at 16 KiB (`tests/limits/connection_memory.rs`).
const HTTP2_MAX_FRAME_BYTES: u32 = 64 << 10;
/// Concurrent streams per connection. Admission bounds the work; this bounds
/// the per-connection bookkeeping.
const HTTP2_MAX_CONCURRENT_STREAMS: u32 = 256;
/// Streams a client may reset before the server has accepted them, before
/// the connection is closed (the rapid-reset guard). hyper's default of 20
/// closed a gateway's whole connection, failing its other calls, when a burst
/// of its deadlines expired under load (the load generator saw it); one
/// connection's worth of streams keeps the guard bounded.
const HTTP2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = HTTP2_MAX_CONCURRENT_STREAMS as usize;
/// After the last unary request of a drain is answered, how long responses
/// get to reach the socket before the remaining connections are closed.
const FLUSH_GRACE: Duration = Duration::from_millis(250);
/// The least time the memory store is given to close on shutdown.
const STORE_CLOSE_MIN: Duration = Duration::from_millis(500);
/// How long, past the drain deadline, the UNAVAILABLE answers of abandoned
/// calls have to reach their clients before the process exits.
const ABANDON_FLUSH: Duration = Duration::from_millis(500);
/// Bytes a response may take per byte of the request limit: it echoes the
/// request's kept text, escaped (at most 5 bytes for 1), plus its report.
const RESPONSE_BYTES_PER_REQUEST_BYTE: usize = 8;
/// The least any response may take (a ListModels or ListMemories page).
const MIN_RESPONSE_BYTES: usize = 16 << 20;

/// The encoded size limit of responses.
/// How long one processor stream may take when `default_timeout_ms` is 0
/// (none): a stalled stream must still end.
const EXT_PROC_DEADLINE: Duration = Duration::from_secs(60);

/// The processor's tonic service, for its health status.
type ExtProcSvc = gateway::pb::ext_proc::external_processor_server::ExternalProcessorServer<ExtProc>;

fn max_response_bytes(max_request_bytes: u32) -> usize {
    (max_request_bytes as usize)
        .saturating_mul(RESPONSE_BYTES_PER_REQUEST_BYTE)
        .max(MIN_RESPONSE_BYTES)
}

/// How long, past the drain deadline, the last trace spans may take to
/// reach the collector (at least).
const TRACE_FLUSH_MIN: Duration = Duration::from_secs(1);

/// How often the drain looks at what is still open.
const DRAIN_POLL: Duration = Duration::from_millis(20);
/// Keep-alive pings find dead peers so their connections are freed.
const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// A TLS handshake that takes longer is abandoned.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors while starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be bound (or a path was in the way of its
    /// socket).
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: ListenAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics recorder could not be installed.
    #[error("metrics: {0}")]
    Metrics(String),
    /// The trace exporter could not be started.
    #[error("tracing: {0}")]
    Tracing(String),
    /// Reflection could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(String),
    /// A provider's counting endpoint could not be set up.
    #[error("providers counting: {0}")]
    Counting(String),
}

/// A server whose listeners are bound but which does not serve yet.
#[derive(Debug)]
pub struct Bound {
    grpc: Listener,
    metrics: Option<TcpListener>,
    render: Option<Listener>,
    assembler: Arc<Assembler>,
    memories: Arc<Memories>,
    /// The fleet's learned counts, over the PostgreSQL store once open.
    shared: Arc<SharedCounts>,
    config: ServerConfig,
    hangups: Hangups,
}

impl Bound {
    /// Binds the configured addresses (port 0 picks a free port; a Unix
    /// socket path replaces only a stale socket, see `listener`).
    pub async fn bind(config: ServerConfig) -> Result<Bound, ServeError> {
        // Opened (created, migrated) before any port is taken; a store that
        // cannot open does not fail the start: the sidecar serves without it
        // and reconnects (see `memory::keep`).
        let shared = Arc::new(SharedCounts::default());
        let memories = Arc::new(memory::open(&config.memory_backend, config.memory.clone(), &shared).await);
        let hangups = Hangups::register();
        let bind = |addr: &ListenAddr| {
            let addr = addr.clone();
            async move {
                Listener::bind(&addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })
            }
        };
        let grpc = bind(&config.listen).await?;
        let metrics = match config.metrics_listen {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| ServeError::Bind {
                addr: ListenAddr::Tcp(addr),
                source,
            })?),
            None => None,
        };
        let render = match &config.render_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let assembler = Arc::new(Assembler::new(config.catalog.clone(), config.cache_bytes));
        assembler
            .learning()
            .start(config.counting.clone())
            .map_err(|e| ServeError::Counting(e.to_string()))?;
        // A fleet on one PostgreSQL store counts each piece once (issue 52).
        if matches!(config.memory_backend, Backend::Postgres { .. }) {
            for (name, _) in &config.counting {
                let counter = Provider::from_name(name).and_then(|p| assembler.learning().counter(p));
                if let Some(counter) = counter {
                    counter.share(shared.clone());
                }
            }
        }
        Ok(Bound {
            grpc,
            metrics,
            render,
            assembler,
            memories,
            shared,
            config,
            hangups,
        })
    }

    /// The bound gRPC address, when it is a TCP port (an error on a Unix
    /// socket: see [`Self::grpc_listen`]).
    pub fn grpc_addr(&self) -> std::io::Result<SocketAddr> {
        self.grpc.local_addr()?.tcp().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::Unsupported, "gRPC listens on a Unix socket")
        })
    }

    /// The bound gRPC address: a TCP port or a Unix socket path.
    pub fn grpc_listen(&self) -> std::io::Result<ListenAddr> {
        self.grpc.local_addr()
    }

    /// The bound metrics address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound render node address, if enabled on a TCP port.
    pub fn render_addr(&self) -> Option<SocketAddr> {
        self.render_listen().and_then(|a| a.tcp())
    }

    /// The bound render node address (a TCP port or a Unix socket path), if
    /// enabled.
    pub fn render_listen(&self) -> Option<ListenAddr> {
        self.render.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The assembler the server uses (tests reload through it).
    pub fn assembler(&self) -> Arc<Assembler> {
        self.assembler.clone()
    }

    /// Serves until `shutdown` resolves, then reports NOT_SERVING, stops
    /// accepting and waits up to the drain period for in-flight requests.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Bound {
            grpc: listener,
            metrics: metrics_listener,
            render: render_listener,
            assembler,
            memories,
            shared,
            config,
            hangups,
        } = self;
        let config = Arc::new(config);
        let handle = install_metrics()?;
        let exporter = match &config.tracing {
            Some(settings) => {
                info!(
                    endpoint = %settings.endpoint,
                    service_name = %settings.service_name,
                    "exporting trace spans over OTLP"
                );
                Some(Exporter::start(settings).map_err(ServeError::Tracing)?)
            }
            None => None,
        };
        series::start(&assembler.catalog(), &memories.settings().types);
        if let Some(l) = metrics_listener {
            info!(
                addr = %l.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
                "metrics listening"
            );
            tokio::spawn(metrics_http::serve_metrics(l, handle.clone()));
        }

        let (reporter, health) = tonic_health::server::health_reporter();
        type Svc = pb::assembler_server::AssemblerServer<AssemblerService>;
        reporter.set_not_serving::<Svc>().await;
        reporter.set_not_serving::<ExtProcSvc>().await;
        reporter.set_service_status("", ServingStatus::NotServing).await;

        let reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ServeError::Reflection(e.to_string()))?;
        let reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1alpha()
            .map_err(|e| ServeError::Reflection(e.to_string()))?;

        let limits = config.limits;
        let admission = Admission::new(limits);
        let (drain_tx, drain_rx) = watch::channel(false);
        let fitter = Fitter::new(
            assembler.clone(),
            Flow::new(assembler.clone(), memories.clone()),
            admission.clone(),
            gateway::Settings {
                max_body_bytes: limits.max_request_bytes as usize,
                refuse_malformed: config.gateway.refuse_malformed,
                refuse_unknown_model: config.gateway.refuse_unknown_model,
                refuse_overloaded: config.gateway.refuse_overloaded,
                cache_markers: config.gateway.cache_markers,
                prompt_cache_key: config.gateway.prompt_cache_key,
                max_turns: limits.max_items as usize,
            },
        );
        let render_node = render_listener.map(|l| {
            info!(addr = %l.shown(), "render node listening");
            tokio::spawn(render_node::serve(
                l,
                assembler.clone(),
                admission.clone(),
                Arc::new(FitRoutes::new(fitter.clone())),
                drain_rx.clone(),
            ))
        });
        let authority = Authority::new(&config.auth);
        let service = AssemblerService::new(assembler.clone(), admission.clone())
            .with_memories(memories.clone())
            .with_authority(authority.clone());
        let assembler_svc = Svc::new(service)
            // A backstop behind the gate (which answers first, with
            // RESOURCE_EXHAUSTED). Responses echo the request, escaped (at
            // most 5 bytes for 1), plus the report: bounded all the same.
            .max_decoding_message_size(limits.max_request_bytes as usize)
            .max_encoding_message_size(max_response_bytes(limits.max_request_bytes));
        let ext_proc = ExtProc::new(
            fitter.clone(),
            drain_rx.clone(),
            limits.default_timeout.unwrap_or(EXT_PROC_DEADLINE),
        )
        .with_authority(authority.clone());
        let routes = Routes::new(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(assembler_svc)
            .add_service(ext_proc.service())
            .prepare();

        // Readiness latch: SERVING once every vocabulary is loaded.
        let warm_assembler = assembler.clone();
        let warm_reporter = reporter.clone();
        tokio::spawn(async move {
            match tokio::task::spawn_blocking(move || warm_assembler.warm()).await {
                Ok(()) => {
                    warm_reporter.set_serving::<Svc>().await;
                    warm_reporter.set_serving::<ExtProcSvc>().await;
                    warm_reporter.set_service_status("", ServingStatus::Serving).await;
                    info!("tokenizers loaded: serving");
                }
                Err(e) => warn!(err = %e, "tokenizer warm-up failed: staying NOT_SERVING"),
            }
        });
        let reloads = tokio::spawn(hangups.reload_on_each(config.clone(), assembler.clone(), authority));
        let keeper = tokio::spawn(memory::keep(
            config.memory_backend.clone(),
            memories.clone(),
            reporter.clone(),
            shared,
        ));

        let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES)
            .max_frame_size(HTTP2_MAX_FRAME_BYTES)
            .max_concurrent_streams(HTTP2_MAX_CONCURRENT_STREAMS)
            .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_ACCEPT_RESET_STREAMS)
            .keep_alive_interval(HTTP2_KEEPALIVE_INTERVAL)
            .keep_alive_timeout(HTTP2_KEEPALIVE_TIMEOUT);
        let calls = Calls::default();
        let (abandon_tx, abandon_rx) = watch::channel(false);
        let conn = Arc::new(Conn {
            http2,
            service: Traced::new(
                Gate::new(routes, admission.clone(), drain_rx.clone()),
                exporter.clone(),
            ),
            calls: calls.clone(),
            abandon: abandon_rx,
        });
        let tls = config.tls.as_ref().map(|t| TlsAcceptor::from(t.config.clone()));

        info!(
            addr = %listener.shown(),
            tls = config.tls.is_some(),
            mutual_tls = config.tls.as_ref().is_some_and(|t| t.mutual),
            auth_clients = config.auth.clients.len(),
            "gRPC listening"
        );
        let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = &mut shutdown => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    warn!(err = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // At the limit the connection is closed at once: the client fails
            // fast instead of waiting in the backlog.
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                metrics::connection_refused();
                debug!(%peer, limit = limits.max_connections, "connection limit reached: closed");
                continue;
            };
            let conn = conn.clone();
            let tls = tls.clone();
            let drain = drain_rx.clone();
            tokio::spawn(async move {
                let _slot = slot;
                metrics::connections(1.0);
                match tls {
                    None => conn.serve(stream, peer, None, drain).await,
                    Some(acceptor) => {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                // Verified by the handshake (mutual TLS); its
                                // names select the [auth] entry.
                                let identity = tls
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .map(|leaf| Arc::new(ClientIdentity::from_certificate(leaf)));
                                conn.serve(tls, peer, identity, drain).await
                            }
                            Ok(Err(e)) => debug!(%peer, err = %e, "TLS handshake failed"),
                            Err(_) => debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                }
                metrics::connections(-1.0);
            });
        }

        info!("shutdown requested: NOT_SERVING, no new connections, draining");
        let deadline = tokio::time::Instant::now() + config.drain;
        reporter.set_not_serving::<Svc>().await;
        reporter.set_not_serving::<ExtProcSvc>().await;
        reporter.set_service_status("", ServingStatus::NotServing).await;
        // No new connection; a Unix socket's file goes with it.
        drop(listener);
        reloads.abort();
        keeper.abort();
        reporter
            .set_service_status(memory::HEALTH_SERVICE, ServingStatus::NotServing)
            .await;
        let _ = drain_tx.send(true);
        let open_connections = || (limits.max_connections as usize).saturating_sub(slots.available_permits());
        // Assembler calls not yet answered (streams end themselves on the
        // drain), and work in progress.
        let busy = || calls.open() + admission.in_flight();
        match tokio::time::timeout_at(deadline, drained(busy, open_connections)).await {
            Ok(0) => info!("drained cleanly"),
            Ok(streams) => info!(
                connections = streams,
                "drained: calls answered; connections holding only health or reflection streams closed"
            ),
            Err(_) => {
                let abandoned = calls.open();
                // Each call not yet answered is answered UNAVAILABLE; the
                // answers get a moment to reach their clients.
                let _ = abandon_tx.send(true);
                let flushed = tokio::time::timeout(ABANDON_FLUSH, async {
                    while calls.open() > 0 {
                        tokio::time::sleep(DRAIN_POLL).await;
                    }
                })
                .await
                .is_ok();
                warn!(
                    grace_secs = config.drain.as_secs(),
                    calls = abandoned,
                    answered = flushed,
                    "drain timed out: calls in flight abandoned and answered UNAVAILABLE"
                );
            }
        }
        // The render node stopped accepting on the drain signal; its
        // connections close as they answer, within the same deadline.
        if let Some(mut node) = render_node
            && tokio::time::timeout_at(deadline, &mut node).await.is_err()
        {
            node.abort();
            warn!("render node connections still open at the drain deadline: closed");
        }
        // The store closes within the drain deadline (at least a moment,
        // for its last commit), never holding the exit.
        let close_by = deadline.max(tokio::time::Instant::now() + STORE_CLOSE_MIN);
        if !memories
            .close_within(close_by.saturating_duration_since(tokio::time::Instant::now()))
            .await
        {
            warn!("memory store did not close within the drain deadline: its connections are dropped");
        }
        if let Some(exporter) = exporter {
            let flush_by = deadline.max(tokio::time::Instant::now() + TRACE_FLUSH_MIN);
            if !exporter
                .flush(flush_by.saturating_duration_since(tokio::time::Instant::now()))
                .await
            {
                warn!("trace spans not exported within the drain deadline: dropped");
            }
        }
        Ok(())
    }
}

/// Resolves once every connection has closed (0), or once nothing has been
/// `busy` for [`FLUSH_GRACE`] while connections with only long-lived streams
/// remain (their number).
async fn drained(busy: impl Fn() -> usize, open_connections: impl Fn() -> usize) -> usize {
    let mut quiet_since: Option<std::time::Instant> = None;
    loop {
        let connections = open_connections();
        if connections == 0 {
            return 0;
        }
        if busy() == 0 {
            let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= FLUSH_GRACE {
                return connections;
            }
        } else {
            quiet_since = None;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}
