//! Bind, serve and drain: the gRPC service with health and reflection, the
//! Prometheus endpoint, readiness as a latch, shutdown under a deadline.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tracing::{info, warn};

use crate::assemble::{Assembler, ModelTable};
use crate::config::ServerConfig;
use crate::grpc::{AssemblerService, pb};
use crate::telemetry::metrics;

/// HTTP/2 receive windows. Prompts are large (a 32k-token request is about
/// 150 KB); with the 64 KiB protocol default every request waits for window
/// updates, so the sidecar advertises room for a whole request at once.
const HTTP2_STREAM_WINDOW_BYTES: u32 = 8 << 20;
const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 16 << 20;

/// How often histogram storage is compacted.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Errors while starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listener could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics recorder could not be installed.
    #[error("metrics: {0}")]
    Metrics(String),
    /// Reflection could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(String),
    /// The gRPC server failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// A server whose listeners are bound but which does not serve yet.
#[derive(Debug)]
pub struct Bound {
    grpc: TcpListener,
    metrics: Option<TcpListener>,
    assembler: Arc<Assembler>,
    drain: Duration,
}

impl Bound {
    /// Binds the configured addresses (port 0 picks a free port).
    pub async fn bind(config: &ServerConfig) -> Result<Bound, ServeError> {
        let grpc = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind {
                addr: config.listen,
                source,
            })?;
        let metrics = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServeError::Bind { addr, source })?,
            ),
            None => None,
        };
        Ok(Bound {
            grpc,
            metrics,
            assembler: Arc::new(Assembler::new(ModelTable::default(), config.cache_bytes)),
            drain: config.drain,
        })
    }

    /// The bound gRPC address.
    pub fn grpc_addr(&self) -> std::io::Result<SocketAddr> {
        self.grpc.local_addr()
    }

    /// The bound metrics address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then reports NOT_SERVING, stops
    /// accepting and waits up to the drain period for in-flight requests.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let handle = install_metrics()?;
        metrics::initialize(self.assembler.models().entries().iter().map(|m| m.name.clone()));
        if let Some(listener) = self.metrics {
            tokio::spawn(serve_metrics(listener, handle.clone()));
        }

        let (reporter, health) = tonic_health::server::health_reporter();
        type Svc = pb::assembler_server::AssemblerServer<AssemblerService>;
        reporter.set_not_serving::<Svc>().await;
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

        // Readiness latch: SERVING once every vocabulary is loaded.
        let warm_assembler = self.assembler.clone();
        let warm_reporter = reporter.clone();
        tokio::spawn(async move {
            match tokio::task::spawn_blocking(move || warm_assembler.warm()).await {
                Ok(()) => {
                    warm_reporter.set_serving::<Svc>().await;
                    warm_reporter.set_service_status("", ServingStatus::Serving).await;
                    info!("tokenizers loaded: serving");
                }
                Err(e) => warn!(err = %e, "tokenizer warm-up failed: staying NOT_SERVING"),
            }
        });

        let addr = self.grpc.local_addr().ok();
        // Nagle's algorithm would hold small response frames behind delayed
        // ACKs (tens of milliseconds): accepted sockets get TCP_NODELAY.
        info!(addr = ?addr, "gRPC listening");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let incoming = TcpIncoming::from(self.grpc).with_nodelay(Some(true));
        let server = tonic::transport::Server::builder()
            .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES)
            .add_service(health)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(Svc::new(AssemblerService::new(self.assembler.clone())))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stop_rx.await;
            });
        tokio::pin!(server);
        tokio::select! {
            res = &mut server => return res.map_err(ServeError::from),
            () = shutdown => {}
        }
        info!("shutdown requested: draining");
        reporter.set_not_serving::<Svc>().await;
        reporter.set_service_status("", ServingStatus::NotServing).await;
        let _ = stop_tx.send(());
        match tokio::time::timeout(self.drain, &mut server).await {
            Ok(res) => {
                info!("drained cleanly");
                res.map_err(ServeError::from)
            }
            Err(_) => {
                warn!(
                    grace_secs = self.drain.as_secs(),
                    "drain timed out: in-flight requests abandoned"
                );
                Ok(())
            }
        }
    }
}

/// Installs the process-wide Prometheus recorder once; later calls (several
/// servers in one test process) share it. Histogram upkeep runs on its own
/// thread so it outlives any one runtime.
pub fn install_metrics() -> Result<PrometheusHandle, ServeError> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let (recorder, handle) = metrics::build_recorder()?;
            ::metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
            metrics::describe();
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name("metrics-upkeep".to_owned())
                .spawn(move || {
                    loop {
                        std::thread::sleep(METRICS_UPKEEP_INTERVAL);
                        upkeep.run_upkeep();
                    }
                })
                .map_err(|e| e.to_string())?;
            Ok(handle)
        })
        .clone()
        .map_err(ServeError::Metrics)
}

/// Serves `GET /metrics` in the Prometheus text format; 404 elsewhere.
async fn serve_metrics(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                warn!(err = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: Request<Incoming>| {
                let handle = handle.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(handle.render())))
                    } else {
                        Response::builder()
                            .status(StatusCode::NOT_FOUND)
                            .body(Full::new(Bytes::from_static(b"not found\n")))
                    };
                    Ok::<_, Infallible>(resp.unwrap_or_default())
                }
            });
            if let Err(e) = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(err = %e, "metrics connection ended");
            }
        });
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
