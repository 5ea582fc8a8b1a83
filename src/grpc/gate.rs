//! The gate every request passes before tonic decodes it. For the admitted
//! RPCs (Assemble, CountTokens, AssembleBatch, Compact), in order:
//!
//! 1. the deadline starts: the client's `grpc-timeout` or the configured
//!    default, covering the body upload, decoding and the work; on expiry the
//!    caller gets DEADLINE_EXCEEDED and the work is cancelled;
//! 2. the size limit, read from the 5-byte gRPC frame header before the body:
//!    a larger message is RESOURCE_EXHAUSTED without a byte of it buffered;
//! 3. the upload budget: the declared size is reserved from a budget of
//!    `max_concurrency x max_request_bytes` (or RESOURCE_EXHAUSTED at once)
//!    and the message is received within 10 s;
//! 4. a work slot, or RESOURCE_EXHAUSTED at once (nothing queues): at most
//!    `max_concurrency` requests are decoded or worked on, and a slow
//!    uploader never holds one.
//!
//! Other paths (health, reflection) get the size check only, with the same
//! 10 s for the frame header: probes are never shed. (tonic's own decode limit, behind this, would answer
//! OUT_OF_RANGE; its transport would answer CANCELLED on deadlines.)

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tower_service::Service;

use super::admission::{Admission, Permit, Refusal};
use super::status::refusal_status;
use crate::telemetry::metrics;

/// Length of a gRPC frame header: compression flag and big-endian u32 length.
const FRAME_HEADER_BYTES: usize = 5;
/// The RPCs that are admitted, shed and deadlined here.
const ADMITTED: [&str; 7] = [
    "Assemble",
    "CountTokens",
    "AssembleBatch",
    "Compact",
    "Retain",
    "Forget",
    "ListMemories",
];
/// The longest a client may take to send the first message (within its
/// deadline): a stalled upload is cut off and its memory released.
const UPLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A concurrency slot handed from the gate to the handler through the
/// request's extensions (which must be `Clone`, hence the shared cell).
#[derive(Debug, Clone, Default)]
pub struct Slot(Arc<Mutex<Option<Permit>>>);

impl Slot {
    /// Takes the permit out (once).
    pub fn take(&self) -> Option<Permit> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Wraps the gRPC router with the gate.
#[derive(Debug, Clone)]
pub struct Gate<S> {
    inner: S,
    admission: Admission,
}

impl<S> Gate<S> {
    /// Gates `inner` by `admission`.
    pub fn new(inner: S, admission: Admission) -> Self {
        Gate { inner, admission }
    }
}

/// The RPC label for a request path (bounded: unknown paths are `other`).
fn rpc_label(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    metrics::RPCS
        .into_iter()
        .find(|&r| r == method)
        .unwrap_or("other")
}

type Response = http::Response<tonic::body::Body>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

/// A refusal answered by the gate: counted, and recorded as the RPC's result.
fn refuse(rpc: &'static str, refusal: Refusal, started: Instant) -> Response {
    metrics::refused(rpc, refusal.reason());
    let status = refusal_status(&refusal);
    metrics::request(rpc, super::status::code_label(status.code()), started.elapsed());
    status.into_http()
}

impl<S> Service<http::Request<Incoming>> for Gate<S>
where
    S: Service<http::Request<tonic::body::Body>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Incoming>) -> Self::Future {
        // The clone is not polled ready: swap so the ready one is called.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let admission = self.admission.clone();
        Box::pin(async move {
            let started = Instant::now();
            let rpc = rpc_label(req.uri().path());
            if !ADMITTED.contains(&rpc) {
                return Ok(pass(inner, req, &admission, rpc, started, false).await);
            }
            match admission.timeout(req.headers()) {
                None => Ok(pass(inner, req, &admission, rpc, started, true).await),
                Some(timeout) => Ok(tokio::time::timeout(
                    timeout,
                    pass(inner, req, &admission, rpc, started, true),
                )
                .await
                // Dropping the handler sets its cancellation flag.
                .unwrap_or_else(|_| refuse(rpc, Refusal::DeadlineExceeded, started))),
            }
        })
    }
}

/// Why reading the request body stopped early.
enum Upload {
    /// The body ended (or trailers came) before `want` bytes.
    Ended(Option<HeaderMap>),
    /// The body failed.
    Broken,
}

/// Reads from `body` into `buf` until it holds `want` bytes (or more, if a
/// frame straddles), or the body ends.
async fn read_to(body: &mut Incoming, buf: &mut BytesMut, want: usize) -> Result<(), Upload> {
    while buf.len() < want {
        match body.frame().await {
            None => return Err(Upload::Ended(None)),
            Some(Err(_)) => return Err(Upload::Broken),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => buf.extend_from_slice(&data),
                Err(frame) => return Err(Upload::Ended(frame.into_trailers().ok())),
            },
        }
    }
    Ok(())
}

/// Reads the first message's frame header and checks its size. For admitted
/// RPCs it then reserves the message's bytes in the upload budget, receives
/// the whole message, and only then takes a work slot, so a slow uploader
/// holds memory it declared but never a work slot. The upload has at most
/// [`UPLOAD_TIMEOUT`] (within the request's deadline).
async fn pass<S>(
    mut inner: S,
    req: http::Request<Incoming>,
    admission: &Admission,
    rpc: &'static str,
    started: Instant,
    admit: bool,
) -> Response
where
    S: Service<http::Request<tonic::body::Body>, Response = Response, Error = Infallible>,
{
    let (mut parts, mut body) = req.into_parts();
    let mut head = BytesMut::new();
    let mut rest_ended = None;
    let mut _bytes = None;
    let upload = async {
        read_to(&mut body, &mut head, FRAME_HEADER_BYTES).await?;
        let bytes = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let limit = admission.limits().max_request_bytes;
        if bytes > limit {
            return Ok(Some(Refusal::TooLarge { bytes, limit }));
        }
        if admit {
            match admission.reserve_upload(bytes) {
                Ok(reserved) => _bytes = Some(reserved),
                Err(refusal) => return Ok(Some(refusal)),
            }
            read_to(&mut body, &mut head, FRAME_HEADER_BYTES + bytes as usize).await?;
        }
        Ok(None)
    };
    match tokio::time::timeout(UPLOAD_TIMEOUT, upload).await {
        Err(_) => return refuse(rpc, Refusal::DeadlineExceeded, started),
        Ok(Ok(Some(refusal))) => return refuse(rpc, refusal, started),
        Ok(Ok(None)) => {}
        Ok(Err(Upload::Broken)) => {
            return tonic::Status::cancelled("request body ended abnormally").into_http();
        }
        // A short or empty body: tonic answers it (it is malformed or empty).
        Ok(Err(Upload::Ended(trailers))) => rest_ended = Some(trailers),
    }
    if admit {
        match admission.admit() {
            Ok(permit) => {
                parts.extensions.insert(Slot(Arc::new(Mutex::new(Some(permit)))));
            }
            Err(refusal) => return refuse(rpc, refusal, started),
        }
    }
    let (rest, trailers) = match rest_ended {
        Some(trailers) => (None, trailers),
        None => (Some(body), None),
    };
    let body = Prefixed {
        head: Some(head.freeze()),
        rest,
        trailers,
    };
    match inner
        .call(http::Request::from_parts(parts, tonic::body::Body::new(body)))
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The bytes read while checking the header, then the rest of the body.
struct Prefixed {
    head: Option<Bytes>,
    rest: Option<Incoming>,
    trailers: Option<HeaderMap>,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(head) = self.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = self.rest.as_mut() {
            return Pin::new(rest).poll_frame(cx);
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().is_none_or(Bytes::is_empty)
            && self
                .rest
                .as_ref()
                .map_or(self.trailers.is_none(), HttpBody::is_end_stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_labels_are_bounded() {
        assert_eq!(rpc_label("/context_assembler.v1.Assembler/Assemble"), "Assemble");
        assert_eq!(
            rpc_label("/context_assembler.v1.Assembler/CountTokens"),
            "CountTokens"
        );
        assert_eq!(rpc_label("/grpc.health.v1.Health/Check"), "other");
        assert_eq!(rpc_label("/x/attacker-chosen-name"), "other");
    }
}
