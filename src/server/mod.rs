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
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tonic_reflection::server::{v1, v1alpha};
use tracing::{info, warn};

use crate::assemble::Assembler;
use crate::assemble::flow::Flow;
use crate::config::{ListenAddr, ServerConfig};
use crate::gateway::http::FitRoutes;
use crate::gateway::{self, ExtProc, Fitter};
use crate::grpc::admission::Admission;
use crate::grpc::auth::Authority;
use crate::grpc::gate::Gate;
use crate::grpc::trace::Traced;
use crate::grpc::{AssemblerService, pb};
use crate::memory::Memories;
use crate::memory::store::Backend;
use crate::telemetry::metrics::Registry;
use crate::telemetry::trace::Exporter;
use crate::tokens::provider::Provider;

mod accept;
mod conn;
pub mod dial;
mod drain;
mod listener;
pub mod memory;
mod metrics_http;
mod render_node;
mod series;
mod shared_counts;
mod signals;

use accept::Acceptor;
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
/// Bytes a response may take per byte of the request limit: it echoes the
/// request's kept text, escaped (at most 5 bytes for 1), plus its report.
const RESPONSE_BYTES_PER_REQUEST_BYTE: usize = 8;
/// The least any response may take (a ListModels or ListMemories page).
const MIN_RESPONSE_BYTES: usize = 16 << 20;

/// How long one processor stream may take when `default_timeout_ms` is 0
/// (none): a stalled stream must still end.
const EXT_PROC_DEADLINE: Duration = Duration::from_secs(60);

/// The Assembler's tonic service.
type AssemblerSvc = pb::assembler_server::AssemblerServer<AssemblerService>;
/// The processor's tonic service, for its health status.
type ExtProcSvc = gateway::pb::ext_proc::external_processor_server::ExternalProcessorServer<ExtProc>;

/// The encoded size limit of responses.
fn max_response_bytes(max_request_bytes: u32) -> usize {
    (max_request_bytes as usize)
        .saturating_mul(RESPONSE_BYTES_PER_REQUEST_BYTE)
        .max(MIN_RESPONSE_BYTES)
}

/// Keep-alive pings find dead peers so their connections are freed.
const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

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
        let running = self.start().await?;
        running.acceptor.run(&running.listener, shutdown).await;
        running.drain().await;
        Ok(())
    }

    /// Starts everything but accepting: metrics, tracing, health (NOT_SERVING
    /// until the tokenizers are loaded), the render node, the services and
    /// the background tasks.
    async fn start(self) -> Result<Running, ServeError> {
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
        let registry = install_metrics()?;
        let exporter = start_exporter(&config)?;
        series::start(&assembler.catalog(), &memories.settings().types);
        if let Some(l) = metrics_listener {
            spawn_metrics(l, &registry);
        }
        let (reporter, health) = tonic_health::server::health_reporter();
        report_health(&reporter, ServingStatus::NotServing).await;
        let (reflection_v1, reflection_v1alpha) = reflection()?;
        let limits = config.limits;
        let admission = Admission::new(limits);
        let (drain_tx, drain_rx) = watch::channel(false);
        let fitter = fitter(&config, &assembler, &memories, &admission);
        let render_node =
            render_listener.map(|l| spawn_render_node(l, &assembler, &admission, &fitter, &drain_rx));
        let authority = Authority::new(&config.auth);
        let assembler_svc = assembler_service(&config, &assembler, &memories, &admission, &authority);
        let ext_proc = ExtProc::new(
            fitter,
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
        spawn_readiness_latch(assembler.clone(), reporter.clone());
        let reloads = tokio::spawn(hangups.reload_on_each(config.clone(), assembler.clone(), authority));
        let keeper = tokio::spawn(memory::keep(
            config.memory_backend.clone(),
            memories.clone(),
            reporter.clone(),
            shared,
        ));
        let calls = Calls::default();
        let (abandon_tx, abandon_rx) = watch::channel(false);
        let conn = Conn {
            http2: http2(),
            service: Traced::new(
                Gate::new(routes, admission.clone(), drain_rx.clone()),
                exporter.clone(),
            ),
            calls: calls.clone(),
            abandon: abandon_rx,
        };
        let tls = config.tls.as_ref().map(|t| TlsAcceptor::from(t.config.clone()));
        log_listening(&listener, &config);
        Ok(Running {
            acceptor: Acceptor::new(conn, tls, limits.max_connections, drain_rx),
            listener,
            config,
            reporter,
            tasks: [reloads, keeper],
            draining: drain_tx,
            abandon: abandon_tx,
            calls,
            admission,
            render_node,
            memories,
            exporter,
        })
    }
}

/// A server accepting connections, and what its drain takes down.
struct Running {
    acceptor: Acceptor,
    listener: Listener,
    config: Arc<ServerConfig>,
    reporter: HealthReporter,
    /// SIGHUP reloads and the memory store's keeper.
    tasks: [JoinHandle<()>; 2],
    /// Set once shutdown is requested: no new calls, connections finish.
    draining: watch::Sender<bool>,
    /// Set once the drain deadline has run out (see `conn`).
    abandon: watch::Sender<bool>,
    calls: Calls,
    admission: Admission,
    render_node: Option<JoinHandle<()>>,
    memories: Arc<Memories>,
    exporter: Option<Exporter>,
}

impl Running {
    /// Reports NOT_SERVING, stops accepting and drains under the deadline.
    async fn drain(self) {
        info!("shutdown requested: NOT_SERVING, no new connections, draining");
        let deadline = tokio::time::Instant::now() + self.config.drain;
        report_health(&self.reporter, ServingStatus::NotServing).await;
        // No new connection; a Unix socket's file goes with it.
        drop(self.listener);
        for task in &self.tasks {
            task.abort();
        }
        self.reporter
            .set_service_status(memory::HEALTH_SERVICE, ServingStatus::NotServing)
            .await;
        let _ = self.draining.send(true);
        // Assembler calls not yet answered (streams end themselves on the
        // drain), and work in progress.
        let busy = || self.calls.open() + self.admission.in_flight();
        let open_connections = || self.acceptor.open();
        let grace = self.config.drain;
        drain::calls(
            deadline,
            grace,
            &self.calls,
            busy,
            open_connections,
            &self.abandon,
        )
        .await;
        drain::render_node(deadline, self.render_node).await;
        drain::close_store(deadline, &self.memories).await;
        drain::flush_traces(deadline, self.exporter.as_ref()).await;
    }
}

/// Starts the OTLP trace exporter, if configured.
fn start_exporter(config: &ServerConfig) -> Result<Option<Exporter>, ServeError> {
    let Some(settings) = &config.tracing else {
        return Ok(None);
    };
    info!(
        endpoint = %settings.endpoint,
        service_name = %settings.service_name,
        "exporting trace spans over OTLP"
    );
    Exporter::start(settings).map(Some).map_err(ServeError::Tracing)
}

/// Serves the Prometheus endpoint of `registry` on `listener`.
fn spawn_metrics(listener: TcpListener, registry: &Arc<Registry>) {
    info!(
        addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
        "metrics listening"
    );
    tokio::spawn(metrics_http::serve_metrics(listener, registry.clone()));
}

/// Reports `status` for the Assembler service, the processor and the
/// server as a whole.
async fn report_health(reporter: &HealthReporter, status: ServingStatus) {
    reporter
        .set_service_status(<AssemblerSvc as NamedService>::NAME, status)
        .await;
    reporter
        .set_service_status(<ExtProcSvc as NamedService>::NAME, status)
        .await;
    reporter.set_service_status("", status).await;
}

/// Server reflection, v1 and v1alpha, over our descriptors and health's.
fn reflection() -> Result<
    (
        v1::ServerReflectionServer<impl v1::ServerReflection>,
        v1alpha::ServerReflectionServer<impl v1alpha::ServerReflection>,
    ),
    ServeError,
> {
    let v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    let v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    Ok((v1, v1alpha))
}

/// The gateway's fitter, shared by the processor and the HTTP fit
/// endpoints.
fn fitter(
    config: &ServerConfig,
    assembler: &Arc<Assembler>,
    memories: &Arc<Memories>,
    admission: &Admission,
) -> Fitter {
    let limits = config.limits;
    Fitter::new(
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
    )
}

/// Serves the render node (and the HTTP fit endpoints) on `listener` until
/// the drain.
fn spawn_render_node(
    listener: Listener,
    assembler: &Arc<Assembler>,
    admission: &Admission,
    fitter: &Fitter,
    drain: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    info!(addr = %listener.shown(), "render node listening");
    tokio::spawn(render_node::serve(
        listener,
        assembler.clone(),
        admission.clone(),
        Arc::new(FitRoutes::new(fitter.clone())),
        drain.clone(),
    ))
}

/// The Assembler service, its messages bounded.
fn assembler_service(
    config: &ServerConfig,
    assembler: &Arc<Assembler>,
    memories: &Arc<Memories>,
    admission: &Admission,
    authority: &Authority,
) -> AssemblerSvc {
    let limits = config.limits;
    let service = AssemblerService::new(assembler.clone(), admission.clone())
        .with_memories(memories.clone())
        .with_authority(authority.clone());
    AssemblerSvc::new(service)
        // A backstop behind the gate (which answers first, with
        // RESOURCE_EXHAUSTED). Responses echo the request, escaped (at
        // most 5 bytes for 1), plus the report: bounded all the same.
        .max_decoding_message_size(limits.max_request_bytes as usize)
        .max_encoding_message_size(max_response_bytes(limits.max_request_bytes))
}

/// The readiness latch: SERVING once every vocabulary is loaded.
fn spawn_readiness_latch(assembler: Arc<Assembler>, reporter: HealthReporter) {
    tokio::spawn(async move {
        match tokio::task::spawn_blocking(move || assembler.warm()).await {
            Ok(()) => {
                report_health(&reporter, ServingStatus::Serving).await;
                info!("tokenizers loaded: serving");
            }
            Err(e) => warn!(err = %e, "tokenizer warm-up failed: staying NOT_SERVING"),
        }
    });
}

/// The HTTP/2 settings of every gRPC connection.
fn http2() -> hyper::server::conn::http2::Builder<TokioExecutor> {
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
    http2
}

/// Logs the gRPC listener and how it is secured.
fn log_listening(listener: &Listener, config: &ServerConfig) {
    info!(
        addr = %listener.shown(),
        tls = config.tls.is_some(),
        mutual_tls = config.tls.as_ref().is_some_and(|t| t.mutual),
        auth_clients = config.auth.clients.len(),
        "gRPC listening"
    );
}
