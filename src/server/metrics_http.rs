//! The Prometheus recorder (installed once per process) and the `/metrics`
//! HTTP endpoint.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

use super::ServeError;
use crate::http1;
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
            metrics::install(recorder)?;
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
    let settings = http1::Settings {
        name: "metrics",
        header_timeout: METRICS_HEADER_TIMEOUT,
        max_connections: None,
    };
    http1::serve(listener, settings, move |req| {
        let answer = scrape(&handle, &req);
        async move { answer }
    })
    .await;
}

/// The answer to one request.
fn scrape(handle: &PrometheusHandle, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let resp = if req.uri().path() == "/metrics" {
        Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(metrics::render_page(handle))))
    } else {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"not found\n")))
    };
    resp.unwrap_or_default()
}
