//! The Prometheus recorder (installed once per process) and the `/metrics`
//! HTTP endpoint.

use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tracing::warn;

use super::ServeError;
use crate::telemetry::metrics;

/// How often histogram storage is compacted.
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// A scrape whose request headers have not all arrived by then is closed: a
/// client that opens connections and sends nothing cannot hold them (and
/// their file descriptors) for ever. hyper applies it only with a timer.
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

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
pub(super) async fn serve_metrics(listener: TcpListener, handle: PrometheusHandle) {
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
                        metrics::refresh_process();
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
                .timer(TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(err = %e, "metrics connection ended");
            }
        });
    }
}
