//! The plain HTTP/1.1 listener the sidecar's non-gRPC endpoints share
//! (`/metrics`, the preview page): keep-alive connections, a header-read
//! timeout (a client that opens a connection and sends nothing cannot hold
//! it, or its file descriptor, for ever), an optional cap on open
//! connections (one more is closed at once, as the gRPC listener does), and
//! an accept loop that backs off instead of spinning when accept fails (out
//! of file descriptors, say). A leaf: it knows nothing of the crate.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long the accept loop waits after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Names the listener in log lines (`"metrics"`, `"preview"`).
    pub name: &'static str,
    /// A connection whose request headers have not all arrived by then is
    /// closed.
    pub header_timeout: Duration,
    /// Open connections at most; `None`: no cap.
    pub max_connections: Option<u32>,
}

/// Serves connections on `listener` with `handler` until the task is
/// dropped. Each request gets `handler(request)`'s response.
pub async fn serve<H, F>(listener: TcpListener, settings: Settings, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let slots = settings
        .max_connections
        .map(|n| Arc::new(Semaphore::new(n as usize)));
    let name = settings.name;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(err = %e, listener = name, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let slot = match &slots {
            None => None,
            Some(slots) => match Arc::clone(slots).try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    tracing::debug!(
                        listener = name,
                        limit = settings.max_connections,
                        "connection limit reached: closed"
                    );
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let svc = service_fn(move |req: Request<Incoming>| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            if let Err(e) = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(settings.header_timeout)
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(err = %e, listener = name, "connection ended");
            }
        });
    }
}
