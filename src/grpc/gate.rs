//! The gate every request passes before tonic decodes it. Every message of
//! every RPC goes through one `Meter`:
//!
//! 1. its 5-byte gRPC frame header is read first: a message over the size
//!    limit is RESOURCE_EXHAUSTED without a byte of it buffered;
//! 2. its declared size is reserved from the upload budget of
//!    `max_concurrency x max_request_bytes` (or RESOURCE_EXHAUSTED at once),
//!    and the message is received within 10 s;
//! 3. its encoded bytes are measured ([`super::shape`]) before prost decodes
//!    them: the root counts (blocks, items, batch requests) against their
//!    limits, and what decoding would allocate against a constant times the
//!    message's size, so no message of empty sub-messages is materialized;
//!    the reservation then grows to that decoded size and is held until the
//!    message has been answered, so the budget bounds the memory of all
//!    messages in flight, not only their uploads.
//!
//! Unary calls of the Assembler service also get a deadline (the client's
//! `grpc-timeout` or the configured default) covering upload, decoding and
//! work, and (those that work) a work slot or RESOURCE_EXHAUSTED at once,
//! taken only once the message is in: a slow uploader holds memory it
//! declared but never a work slot. A unary call carries one message; a
//! second is refused before it is decoded. AssembleStream messages are
//! metered one by one; when the server drains, a stream admits no new
//! message and ends with UNAVAILABLE once its admitted ones are answered.
//! Health and reflection messages get a small size limit and are never
//! shed. (tonic's own decode limit, behind this, would answer OUT_OF_RANGE;
//! its transport would answer CANCELLED on deadlines.)

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt as _;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tokio::sync::watch;
use tower_service::Service;

use super::admission::{Admission, Permit, Refusal, Reserved};
use super::shape::{Root, Schema};
use super::status::{broken_body_status, malformed_status, refusal_status, shutting_down_status};
use crate::telemetry::metrics;

mod received;

use received::Received;

/// Length of a gRPC frame header: compression flag and big-endian u32 length.
const FRAME_HEADER_BYTES: usize = 5;
/// The service whose RPCs are metered as work.
const SERVICE_PREFIX: &str = "/context_assembler.v1.Assembler/";
/// The unary RPCs that take a work slot (the others do no work worth one).
const WORKING: [&str; 7] = [
    "Assemble",
    "CountTokens",
    "AssembleBatch",
    "Compact",
    "Retain",
    "Forget",
    "ListMemories",
];
/// Envoy's external processor: one stream per HTTP request, its messages
/// the request's headers and body (chunks).
const EXT_PROC_PATH: &str = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";
/// Room for a processor message's headers and framing beside a body of
/// `max_request_bytes`.
const EXT_PROC_HEADROOM_BYTES: u32 = 64 << 10;
/// The largest health or reflection message: theirs are a service or
/// symbol name.
pub const PROBE_MAX_MESSAGE_BYTES: u32 = 64 << 10;
/// The longest a client may take to send a message once its header is in
/// (within its deadline): a stalled upload is cut off and its memory
/// released.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(10);

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
    drain: watch::Receiver<bool>,
}

impl<S> Gate<S> {
    /// Gates `inner` by `admission`; streams stop admitting messages once
    /// `drain` is true.
    pub fn new(inner: S, admission: Admission, drain: watch::Receiver<bool>) -> Self {
        Gate {
            inner,
            admission,
            drain,
        }
    }
}

/// The RPC label for a request path (bounded: unknown paths are `other`).
fn rpc_label(path: &str) -> &'static str {
    if path == EXT_PROC_PATH {
        return "ExtProc";
    }
    let method = path.rsplit('/').next().unwrap_or_default();
    metrics::RPCS
        .into_iter()
        .find(|&r| r == method)
        .unwrap_or("other")
}

/// How the gate treats a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A unary call of the Assembler service: deadline, budget, measure; a
    /// work slot when `slot`.
    Unary { root: Root, slot: bool },
    /// AssembleStream: each message budgeted and measured; ends on drain.
    Stream { root: Root },
    /// Envoy's processor: each message bounded by the body limit (plus its
    /// headers) and budgeted, none measured (a body is bytes); the stream
    /// answers the drain itself (it passes its request on).
    ExtProc,
    /// Health, reflection and unknown paths: small messages, never shed.
    Probe,
}

fn classify(path: &str) -> Class {
    if path == EXT_PROC_PATH {
        return Class::ExtProc;
    }
    let Some(method) = path.strip_prefix(SERVICE_PREFIX) else {
        return Class::Probe;
    };
    match Root::of_method(method) {
        Some(root) if method == "AssembleStream" => Class::Stream { root },
        Some(root) => Class::Unary {
            root,
            slot: WORKING.contains(&method),
        },
        None => Class::Probe,
    }
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
        let drain = self.drain.clone();
        Box::pin(async move {
            let started = Instant::now();
            let rpc = rpc_label(req.uri().path());
            let class = classify(req.uri().path());
            let timeout = admission.timeout(req.headers());
            let (parts, body) = req.into_parts();
            let meter = Meter::new(body, class, &admission, rpc, drain);
            let Class::Unary { slot, .. } = class else {
                return Ok(forward(inner, parts, meter, Bytes::new()).await);
            };
            let call = unary(inner, parts, meter, &admission, slot, rpc, started);
            Ok(match timeout {
                None => call.await,
                Some(timeout) => tokio::time::timeout(timeout, call)
                    .await
                    // Dropping the handler sets its cancellation flag.
                    .unwrap_or_else(|_| refuse(rpc, Refusal::DeadlineExceeded, started)),
            })
        })
    }
}

/// A unary call: its one message received and measured, then a slot (when
/// it works), then the service. The message's share of the upload budget
/// is held until the answer is ready.
async fn unary<S>(
    inner: S,
    parts: http::request::Parts,
    mut meter: Meter,
    admission: &Admission,
    slot: bool,
    rpc: &'static str,
    started: Instant,
) -> Response
where
    S: Service<http::Request<tonic::body::Body>, Response = Response, Error = Infallible>,
{
    let mut parts = parts;
    let (first, _reserved) = match meter.next().await {
        Ok(Next::Message(bytes, reserved)) => (bytes, reserved),
        // An empty or short body: tonic answers it (it is malformed or
        // empty), from what arrived.
        Ok(Next::End) => (Bytes::new(), None),
        Err(Stop::Refused(refusal)) => return refuse(rpc, refusal, started),
        Err(stop) => return stop.status(rpc).into_http(),
    };
    if slot {
        match admission.admit() {
            Ok(permit) => {
                parts.extensions.insert(Slot(Arc::new(Mutex::new(Some(permit)))));
            }
            Err(refusal) => return refuse(rpc, refusal, started),
        }
    }
    forward(inner, parts, meter, first).await
}

/// Calls the service with `first` (already read) and then the rest of the
/// body, message by message through `meter`.
async fn forward<S>(mut inner: S, parts: http::request::Parts, meter: Meter, first: Bytes) -> Response
where
    S: Service<http::Request<tonic::body::Body>, Response = Response, Error = Infallible>,
{
    let head = (!first.is_empty()).then(|| Ok(Frame::data(first)));
    let rest = futures_util::stream::unfold(Some(meter), |meter| async move {
        let mut meter = meter?;
        match meter.next().await {
            Ok(Next::Message(bytes, reserved)) => {
                // Held until the service asks for the next message, that is
                // once it has answered this one.
                meter.held = reserved;
                Some((Ok(Frame::data(bytes)), Some(meter)))
            }
            Ok(Next::End) => meter.trailers.take().map(|t| (Ok(Frame::trailers(t)), None)),
            Err(stop) => Some((Err(stop.status(meter.rpc)), None)),
        }
    });
    let frames = futures_util::stream::iter(head).chain(rest);
    let body = http_body_util::StreamBody::new(frames);
    match inner
        .call(http::Request::from_parts(parts, tonic::body::Body::new(body)))
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// What the meter read next.
enum Next {
    /// A whole message (header and payload), with its share of the upload
    /// budget (none for probes).
    Message(Bytes, Option<Reserved>),
    /// The body ended (its trailers, if any, are in [`Meter::trailers`]).
    End,
}

/// Why the meter stopped a call.
enum Stop {
    /// A limit was hit (counted by the caller).
    Refused(Refusal),
    /// The body failed.
    Broken,
    /// A unary call sent a second message.
    Extra,
    /// The server is draining: a stream admits no new message.
    Draining,
}

impl Stop {
    /// The status for stops that are not refusals.
    fn status(self, rpc: &'static str) -> tonic::Status {
        match self {
            Stop::Refused(refusal) => {
                metrics::refused(rpc, refusal.reason());
                refusal_status(&refusal)
            }
            Stop::Broken => broken_body_status(),
            Stop::Extra => malformed_status("a unary call carries exactly one message; a second was sent"),
            Stop::Draining => shutting_down_status(),
        }
    }
}

/// Reads a request body message by message, applying the limits of its
/// class to each before passing it on.
struct Meter {
    body: Incoming,
    /// Received bytes not yet passed on.
    buf: Received,
    limit: u32,
    /// The upload budget (not for probes).
    budget: Option<Admission>,
    /// What to measure, and whether the root counts are refused here
    /// (unary) or left to the service (stream messages fail alone).
    root: Option<(Root, bool)>,
    rpc: &'static str,
    /// Streams: stop at a message boundary once this is true.
    drain: Option<watch::Receiver<bool>>,
    /// Unary calls carry one message.
    one_message: bool,
    messages: usize,
    /// The last message's share of the budget, held until the next is asked
    /// for.
    held: Option<Reserved>,
    trailers: Option<HeaderMap>,
    ended: bool,
}

impl Meter {
    fn new(
        body: Incoming,
        class: Class,
        admission: &Admission,
        rpc: &'static str,
        drain: watch::Receiver<bool>,
    ) -> Meter {
        let limits = admission.limits();
        let (limit, budget, root, drain, one_message) = match class {
            Class::Unary { root, .. } => (
                limits.max_request_bytes,
                Some(admission.clone()),
                Some((root, true)),
                None,
                true,
            ),
            Class::Stream { root } => (
                limits.max_request_bytes,
                Some(admission.clone()),
                Some((root, false)),
                Some(drain),
                false,
            ),
            Class::ExtProc => (
                limits.max_request_bytes.saturating_add(EXT_PROC_HEADROOM_BYTES),
                Some(admission.clone()),
                None,
                None,
                false,
            ),
            Class::Probe => (
                PROBE_MAX_MESSAGE_BYTES.min(limits.max_request_bytes),
                None,
                None,
                None,
                false,
            ),
        };
        Meter {
            body,
            buf: Received::default(),
            limit,
            budget,
            root,
            rpc,
            drain,
            one_message,
            messages: 0,
            held: None,
            trailers: None,
            ended: false,
        }
    }

    /// Receives one more frame of the body into `buf`; false at its end.
    async fn fill(&mut self) -> Result<bool, Stop> {
        if self.ended {
            return Ok(false);
        }
        match self.body.frame().await {
            None => {
                self.ended = true;
                Ok(false)
            }
            Some(Err(_)) => Err(Stop::Broken),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    self.buf.push(data);
                    Ok(true)
                }
                Err(frame) => {
                    self.trailers = frame.into_trailers().ok();
                    self.ended = true;
                    Ok(false)
                }
            },
        }
    }

    /// Waits for the start of the next message, or for the drain (streams).
    async fn await_header(&mut self) -> Result<(), Stop> {
        while self.buf.len() < FRAME_HEADER_BYTES {
            let Some(mut drain) = self.drain.clone().filter(|_| self.buf.is_empty()) else {
                if !self.fill().await? {
                    return Ok(());
                }
                continue;
            };
            if *drain.borrow_and_update() {
                return Err(Stop::Draining);
            }
            tokio::select! {
                filled = self.fill() => {
                    if !filled? {
                        return Ok(());
                    }
                }
                _ = drain.changed() => return Err(Stop::Draining),
            }
        }
        Ok(())
    }

    /// The next message, sized, budgeted and measured.
    async fn next(&mut self) -> Result<Next, Stop> {
        self.held = None;
        self.await_header().await?;
        let Some(&[flag, a, b, c, d]) = self.buf.bytes().first_chunk::<FRAME_HEADER_BYTES>() else {
            // The end of the body, perhaps inside a header: tonic answers
            // what is left.
            return Ok(if self.buf.is_empty() {
                Next::End
            } else {
                Next::Message(self.buf.take(self.buf.len(), false), None)
            });
        };
        if self.one_message && self.messages > 0 {
            return Err(Stop::Extra);
        }
        let compressed = flag != 0;
        let bytes = u32::from_be_bytes([a, b, c, d]);
        if bytes > self.limit {
            return Err(Stop::Refused(Refusal::TooLarge {
                bytes,
                limit: self.limit,
            }));
        }
        let mut reserved = match &self.budget {
            Some(admission) => Some(admission.reserve_upload(bytes).map_err(Stop::Refused)?),
            None => None,
        };
        let whole = FRAME_HEADER_BYTES + bytes as usize;
        // The body's first message is passed on for the decoder to adopt
        // (see `Received::take`); later ones are copied by it.
        let first = self.messages == 0;
        // Room for the whole message at once (at most the limit, and held
        // from the upload budget above): growing the buffer frame by frame
        // copied a large message's received bytes again at every doubling.
        self.buf.reserve(whole, first);
        let upload = async {
            while self.buf.len() < whole {
                if !self.fill().await? {
                    break;
                }
            }
            Ok::<(), Stop>(())
        };
        match tokio::time::timeout(UPLOAD_TIMEOUT, upload).await {
            Err(_) => return Err(Stop::Refused(Refusal::DeadlineExceeded)),
            Ok(result) => result?,
        }
        self.messages += 1;
        if self.buf.len() < whole {
            // A short body: tonic answers it (it is malformed).
            return Ok(Next::Message(self.buf.take(self.buf.len(), first), reserved));
        }
        let message = self.buf.take(whole, first);
        if let Some((root, counts)) = self.root.filter(|_| !compressed) {
            let measure = Schema::get().measure(root, &message[FRAME_HEADER_BYTES..]);
            if let (Some(budget), Some(reserved)) = (&self.budget, reserved.as_mut()) {
                if counts {
                    budget.check_counts(&measure).map_err(Stop::Refused)?;
                }
                budget.check_decoded(&measure, bytes).map_err(Stop::Refused)?;
                // What decoding allocates is held from the budget too, so
                // the budget bounds the memory of every message in flight.
                budget
                    .reserve_up_to(reserved, measure.decoded_bytes)
                    .map_err(Stop::Refused)?;
            }
        }
        Ok(Next::Message(message, reserved))
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
        assert_eq!(rpc_label(EXT_PROC_PATH), "ExtProc");
        assert_eq!(classify(EXT_PROC_PATH), Class::ExtProc);
    }
}
