//! The server's metrics registry and the `/metrics` HTTP endpoint.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming};
use tokio::net::TcpListener;

use super::ServeError;
use crate::http1;
use crate::telemetry::metrics::{self, Registry};

/// A scrape whose request headers have not all arrived by then is closed: a
/// client that opens connections and sends nothing cannot hold them (and
/// their file descriptors) for ever. hyper applies it only with a timer.
pub const METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The registry this server records into and serves: its thread's (a
/// server started on a runtime whose threads entered a registry of its
/// own, as the integration tests start theirs), else the process's, built
/// by the first server (production runs one per process).
pub fn install_metrics() -> Result<Arc<Registry>, ServeError> {
    metrics::serving().map_err(ServeError::Metrics)
}

/// Serves `GET /metrics` in the Prometheus text format; 404 elsewhere.
pub(super) async fn serve_metrics(listener: TcpListener, registry: Arc<Registry>) {
    let settings = http1::Settings {
        name: "metrics",
        header_timeout: METRICS_HEADER_TIMEOUT,
        max_connections: None,
    };
    http1::serve(listener, settings, move |req| {
        let answer = scrape(&registry, &req);
        async move { answer }
    })
    .await;
}

/// The answer to one request.
fn scrape(registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let resp = if req.uri().path() == "/metrics" {
        Response::builder()
            .header("content-type", "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(registry.render())))
    } else {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(b"not found\n")))
    };
    resp.unwrap_or_default()
}
