//! Connections: each is served until it closes, until it has been idle (no
//! open stream) for [`IDLE_TIMEOUT`], or until the drain asks it to finish.
//! The drain waits for every call of the Assembler service (unary calls and
//! AssembleStream, which ends itself on drain), not for the long-lived
//! streams of health `Watch` and reflection, which never end on their own.
//! Once the drain deadline runs out, every Assembler call not yet answered
//! is answered UNAVAILABLE (its work is dropped), so that its client
//! retries elsewhere at once instead of seeing the connection reset.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tower_service::Service;
use tracing::debug;

use crate::grpc::auth::ClientIdentity;
use crate::grpc::status::abandoned_status;

use super::listener::Peer;

/// A connection with no open stream for this long is closed (gracefully:
/// clients reconnect), so idle connections cannot hold every slot.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The paths of the Assembler service's calls.
const ASSEMBLER_PATH: &str = "/context_assembler.v1.Assembler/";

/// Calls of the Assembler service whose responses are not yet over, on all
/// connections: the drain waits for these.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<AtomicUsize>);

impl Calls {
    /// How many are open.
    pub fn open(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// One connection's open streams and when the last one ended.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    open: AtomicUsize,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Release);
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::Acquire));
        Some(self.epoch.elapsed().saturating_sub(last))
    }
}

/// Ends a stream's accounting when its response body is dropped.
struct StreamGuard {
    activity: Arc<Activity>,
    call: Option<Calls>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.activity.open.fetch_sub(1, Ordering::AcqRel);
        self.activity.touch();
        if let Some(c) = &self.call {
            c.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A response body that carries its stream's guard.
struct Guarded {
    inner: tonic::body::Body,
    _guard: StreamGuard,
}

impl HttpBody for Guarded {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Counts a connection's streams (and the Assembler service's globally),
/// and hands each request the connection's client identity.
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
    calls: Calls,
    identity: Option<Arc<ClientIdentity>>,
    abandon: watch::Receiver<bool>,
}

/// Resolves once `abandon` is true; never if its sender is gone first.
async fn abandoned(mut abandon: watch::Receiver<bool>) {
    if abandon.wait_for(|a| *a).await.is_err() {
        std::future::pending::<()>().await;
    }
}

type Response = http::Response<tonic::body::Body>;

impl<S> Service<http::Request<Incoming>> for Tracked<S>
where
    S: Service<http::Request<Incoming>, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Incoming>) -> Self::Future {
        if let Some(identity) = &self.identity {
            req.extensions_mut().insert(identity.clone());
        }
        let call = req
            .uri()
            .path()
            .starts_with(ASSEMBLER_PATH)
            .then(|| self.calls.clone());
        self.activity.open.fetch_add(1, Ordering::AcqRel);
        if let Some(c) = &call {
            c.0.fetch_add(1, Ordering::AcqRel);
        }
        // Created before the call, so a handler dropped mid-way still ends
        // the stream's accounting.
        let guard = StreamGuard {
            activity: self.activity.clone(),
            call,
        };
        let fut = self.inner.call(req);
        let abandon = guard.call.as_ref().map(|_| self.abandon.clone());
        Box::pin(async move {
            let response = match abandon {
                None => fut.await?,
                Some(abandon) => tokio::select! {
                    biased;
                    r = fut => r?,
                    () = abandoned(abandon) => abandoned_status().into_http(),
                },
            };
            Ok(response.map(|inner| tonic::body::Body::new(Guarded { inner, _guard: guard })))
        })
    }
}

/// What every connection shares.
pub struct Conn<S> {
    /// The HTTP/2 settings.
    pub http2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// The gated router.
    pub service: S,
    /// Assembler calls in flight.
    pub calls: Calls,
    /// True once the drain deadline has run out: calls not yet answered are
    /// answered UNAVAILABLE.
    pub abandon: watch::Receiver<bool>,
}

impl<S> Conn<S>
where
    S: Service<http::Request<Incoming>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    /// Serves one connection until it closes, idles out, or `drain` flips.
    /// `identity` is its client certificate's, with mutual TLS.
    pub async fn serve<IO>(
        &self,
        io: IO,
        peer: Peer,
        identity: Option<Arc<ClientIdentity>>,
        mut drain: watch::Receiver<bool>,
    ) where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity {
            epoch: Instant::now(),
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        });
        let service = Tracked {
            inner: self.service.clone(),
            activity: activity.clone(),
            calls: self.calls.clone(),
            identity,
            abandon: self.abandon.clone(),
        };
        let conn = self
            .http2
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
        tokio::pin!(conn);
        let mut idle_check = tokio::time::interval(IDLE_TIMEOUT / 10);
        let mut closing = *drain.borrow();
        if closing {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        debug!(%peer, err = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = drain.changed(), if !closing => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                _ = idle_check.tick(), if !closing => {
                    if activity.idle_for().is_some_and(|d| d >= IDLE_TIMEOUT) {
                        debug!(%peer, "closing an idle connection");
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}
