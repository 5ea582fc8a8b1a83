//! The plain HTTP/1.1 listener the sidecar's non-gRPC endpoints share
//! (`/metrics`, the preview page): keep-alive connections, a header-read
//! timeout (a client that opens a connection and sends nothing cannot hold
//! it, or its file descriptor, for ever), an optional cap on open
//! connections (one more is closed at once, as the gRPC listener does), and
//! an accept loop that backs off instead of spinning when accept fails (out
//! of file descriptors, say), and a drain: on shutdown it stops accepting,
//! lets each connection finish the request it is answering, and returns once
//! every connection has closed. It accepts from anything that hands out
//! byte streams ([`Accept`]: a TCP listener here, a Unix socket from the
//! server). A leaf: it knows nothing of the crate.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

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

/// What hands out connections.
pub trait Accept: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Io>> + Send;
}

impl Accept for TcpListener {
    type Io = TcpStream;

    async fn accept(&self) -> io::Result<TcpStream> {
        let (stream, _) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// Serves connections on `listener` with `handler` until the task is
/// dropped. Each request gets `handler(request)`'s response.
pub async fn serve<L, H, F>(listener: L, settings: Settings, handler: H)
where
    L: Accept,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    serve_until(listener, settings, handler, std::future::pending()).await;
}

/// [`serve`] until `shutdown` resolves; then the listener is dropped (no
/// new connection), each connection closes once its request in progress is
/// answered (an idle keep-alive connection at once), and this returns when
/// all have closed. The caller bounds that wait with its drain deadline.
pub async fn serve_until<L, H, F>(
    listener: L,
    settings: Settings,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    L: Accept,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let slots = settings
        .max_connections
        .map(|n| Arc::new(Semaphore::new(n as usize)));
    let name = settings.name;
    let (closing_tx, closing_rx) = watch::channel(false);
    // Each connection holds a sender; `recv` ends once all are gone.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok(stream) => stream,
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
        let handler = handler.clone();
        let closing = closing_rx.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            let _held = (slot, open);
            let svc = service_fn(move |req: Request<Incoming>| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(settings.header_timeout)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = closed(closing) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(err = %e, listener = name, "connection ended");
            }
        });
    }
    drop(listener);
    let _ = closing_tx.send(true);
    drop(open_tx);
    let _ = open_rx.recv().await;
}

/// Resolves once `closing` is true; never if its sender is gone first (the
/// serving task was dropped: its connections carry on as before).
async fn closed(mut closing: watch::Receiver<bool>) {
    if closing.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Why a request's body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Its content type is not `application/json`.
    #[error("send the body as application/json")]
    NotJson,
    /// Over the limit (`declared`: the Content-Length that said so).
    #[error("the body is larger than {limit} bytes")]
    TooLarge {
        /// The Content-Length, when it was what said so.
        declared: Option<u64>,
        /// The limit.
        limit: u32,
    },
    /// Not received in full within the timeout.
    #[error("the body did not arrive within {} s", .0.as_secs())]
    Timeout(Duration),
    /// The connection failed while it was read.
    #[error("cannot read the body: {0}")]
    Broken(String),
}

/// The body of a JSON request, at most `limit` bytes (refused from its
/// Content-Length before a byte is read when that says more), received
/// within `timeout`: a slow client cannot hold a connection and its buffer
/// for ever.
pub async fn read_json(req: Request<Incoming>, limit: u32, timeout: Duration) -> Result<Bytes, BodyError> {
    let json_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json_type {
        return Err(BodyError::NotJson);
    }
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::from(limit)) {
        return Err(BodyError::TooLarge { declared, limit });
    }
    let body = Limited::new(req.into_body(), limit as usize);
    match tokio::time::timeout(timeout, body.collect()).await {
        Err(_) => Err(BodyError::Timeout(timeout)),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge {
            declared: None,
            limit,
        }),
        Ok(Err(e)) => Err(BodyError::Broken(e.to_string())),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// Routes a room above serves on a listener beside its own (the gateway's
/// HTTP fit endpoints beside the render node's): the listener only hands
/// them their requests.
pub trait Extra: Send + Sync + 'static {
    /// Whether `path` is one of its routes.
    fn serves(&self, path: &str) -> bool;
    /// Answers a request to one of its routes.
    fn answer(
        &self,
        req: Request<Incoming>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Response<Full<Bytes>>> + Send + '_>>;
}

/// The `code` label of an HTTP status, in gRPC's words (the request series
/// is shared with the gRPC listener).
pub fn code_label(status: StatusCode) -> &'static str {
    match status {
        StatusCode::OK => "OK",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => "RESOURCE_EXHAUSTED",
        StatusCode::REQUEST_TIMEOUT => "DEADLINE_EXCEEDED",
        s if s.is_server_error() => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    }
}

/// A JSON answer, never cached, never sniffed.
pub fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}
