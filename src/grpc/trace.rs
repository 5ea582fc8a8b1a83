//! One trace span per call of the Assembler service, with a child span per
//! phase, continuing the caller's W3C `traceparent`.
//!
//! [`Traced`] wraps the gated router. With tracing on, it enters a
//! [`Recorder`] around every poll of the call's future and of its response
//! body: decoding, the handler's own work, and encoding then record their
//! phases on it, and the handler enters it on the blocking pool too (see
//! `service::blocking`). When the response body ends (or is dropped) the
//! spans are built from the recorded instants and handed to the
//! [`Exporter`], which never waits. With tracing off, a call passes
//! through untouched.
//!
//! Only ids, counts, sizes, hashes and codes become attributes (set by the
//! handlers through [`crate::telemetry::trace::attribute`]); prompt content
//! never does: `tests/metrics/otel.rs` puts a marker in every text field and looks
//! for it in every exported span.

use std::convert::Infallible;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use futures_util::future::Either;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tower_service::Service;

use crate::telemetry::metrics;
use crate::telemetry::trace::{Exporter, FinishedSpan, Kind, Recorder, Value, spans_dropped};

/// The traced service's package and name (`rpc.service`).
pub const RPC_SERVICE: &str = "context_assembler.v1.Assembler";
/// Path prefix of the traced service's calls.
const PATH_PREFIX: &str = "/context_assembler.v1.Assembler/";

type Response = http::Response<tonic::body::Body>;
type BoxFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The caller's span, from a `traceparent` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The caller's trace.
    pub trace_id: [u8; 16],
    /// The caller's span.
    pub span_id: [u8; 8],
}

/// Parses a W3C `traceparent` (version `00` only, lowercase hex, ids not all
/// zeros, nothing after the flags). Anything else is `None`: the call
/// starts a new trace, it never fails.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    // 00-<32 hex>-<16 hex>-<2 hex>
    if value.len() != 55 || &value[..3] != b"00-" || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    hex(&value[3..35], &mut trace_id)?;
    hex(&value[36..52], &mut span_id)?;
    let mut flags = [0u8; 1];
    hex(&value[53..55], &mut flags)?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent { trace_id, span_id })
}

/// Lowercase hex into `out` (exactly twice its length).
fn hex(text: &[u8], out: &mut [u8]) -> Option<()> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(())
}

/// A fresh, non-zero 64-bit id: not secret, only unique (randomly keyed
/// SipHash of a process-wide counter).
fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    RandomState::new().hash_one(n).max(1)
}

/// The traced method's name, if the path is one of the service's RPCs
/// (never a caller's arbitrary string).
fn method(path: &str) -> Option<&'static str> {
    let name = path.strip_prefix(PATH_PREFIX)?;
    metrics::RPCS.iter().copied().find(|&rpc| rpc == name)
}

/// Wraps the router: spans for the Assembler service's calls, exported by
/// `exporter` (`None`: tracing off, calls pass through).
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
    exporter: Option<Exporter>,
}

impl<S> Traced<S> {
    /// `inner`, traced when `exporter` is given.
    pub fn new(inner: S, exporter: Option<Exporter>) -> Self {
        Traced { inner, exporter }
    }
}

impl<S, B> Service<http::Request<B>> for Traced<S>
where
    S: Service<http::Request<B>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, BoxFuture>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let Some(exporter) = &self.exporter else {
            return Either::Left(self.inner.call(req));
        };
        let Some(method) = method(req.uri().path()) else {
            return Either::Left(self.inner.call(req));
        };
        let parent = req
            .headers()
            .get("traceparent")
            .and_then(|v| parse_traceparent(v.as_bytes()));
        let call = Call {
            method,
            parent,
            span_id: random_u64().to_be_bytes(),
            trace_id: parent.map_or_else(
                || {
                    let mut id = [0u8; 16];
                    id[..8].copy_from_slice(&random_u64().to_be_bytes());
                    id[8..].copy_from_slice(&random_u64().to_be_bytes());
                    id
                },
                |p| p.trace_id,
            ),
            wall: SystemTime::now(),
            started: Instant::now(),
            recorder: Recorder::new(),
            code: None,
            exporter: exporter.clone(),
            finished: false,
        };
        let inner = Armed {
            inner: Box::pin(self.inner.call(req)),
            recorder: call.recorder.clone(),
        };
        Either::Right(Box::pin(async move {
            let mut call = call;
            let Ok(response) = inner.await;
            call.code = grpc_status(response.headers());
            let (parts, body) = response.into_parts();
            let body = TracedBody { inner: body, call };
            Ok(http::Response::from_parts(parts, tonic::body::Body::new(body)))
        }))
    }
}

/// `future`, polled with `recorder` entered when there is one (tracing on):
/// work a call hands to a task of its own (a stream's messages) records its
/// phases into the call's span.
pub fn within<F: Future>(recorder: Option<Recorder>, future: F) -> impl Future<Output = F::Output> {
    match recorder {
        Some(recorder) => Either::Left(Armed {
            inner: Box::pin(future),
            recorder,
        }),
        None => Either::Right(future),
    }
}

/// A future polled with a recorder entered.
struct Armed<F> {
    inner: Pin<Box<F>>,
    recorder: Recorder,
}

impl<F: Future> Future for Armed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _entered = self.recorder.enter();
        self.inner.as_mut().poll(cx)
    }
}

/// The `grpc-status` of a header or trailer map, if any.
fn grpc_status(headers: &HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// A call being traced: its ids, start, recorder and outcome. Finished
/// (spans built and queued) once, when its body ends or it is dropped.
struct Call {
    method: &'static str,
    parent: Option<Parent>,
    trace_id: [u8; 16],
    span_id: [u8; 8],
    wall: SystemTime,
    started: Instant,
    recorder: Recorder,
    code: Option<i32>,
    exporter: Exporter,
    finished: bool,
}

/// gRPC codes a server span reports as errors (OpenTelemetry's RPC
/// conventions: the server's faults, not the caller's).
const SERVER_ERROR_CODES: [i32; 6] = [2, 4, 12, 13, 14, 15];
/// CANCELLED: the call was dropped before its answer ended.
const CODE_CANCELLED: i32 = 1;

impl Call {
    /// The wall-clock time of `at`.
    fn wall_at(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.started) {
            Some(after) => self.wall + after,
            None => self.wall - self.started.duration_since(at),
        }
    }

    fn finish(&mut self) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let ended = Instant::now();
        let recording = self.recorder.take();
        if recording.phases_dropped > 0 {
            spans_dropped(metrics::TRACE_DROPPED_TOO_MANY_PHASES, recording.phases_dropped);
        }
        // With the collector down the queue stays full: count, never build.
        if !self.exporter.has_room(recording.phases.len() + 1) {
            self.exporter.dropped(recording.phases.len() + 1);
            return;
        }
        let code = self.code.unwrap_or(CODE_CANCELLED);
        let mut spans = Vec::with_capacity(recording.phases.len() + 1);
        // A phase may have begun before the call (decoding starts as the
        // body arrives): the call's span covers all of its phases.
        let mut start = self.started;
        for phase in &recording.phases {
            let begun = phase.end.checked_sub(phase.took).unwrap_or(phase.end);
            start = start.min(begun);
            spans.push(FinishedSpan {
                trace_id: self.trace_id,
                span_id: random_u64().to_be_bytes(),
                parent_span_id: self.span_id,
                name: phase.name.to_owned(),
                kind: Kind::Internal,
                start: self.wall_at(begun),
                end: self.wall_at(phase.end),
                attributes: vec![("context_assembler.phase", Value::Str(phase.name.to_owned()))],
                error: false,
            });
        }
        let mut attributes: Vec<(&'static str, Value)> = vec![
            ("rpc.system", Value::Str("grpc".to_owned())),
            ("rpc.service", Value::Str(RPC_SERVICE.to_owned())),
            ("rpc.method", Value::Str(self.method.to_owned())),
            ("rpc.grpc.status_code", Value::Int(i64::from(code))),
        ];
        attributes.extend(recording.attributes);
        spans.push(FinishedSpan {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent_span_id: self.parent.map_or([0; 8], |p| p.span_id),
            name: format!("{RPC_SERVICE}/{}", self.method),
            kind: Kind::Server,
            start: self.wall_at(start),
            end: self.wall_at(ended),
            attributes,
            error: SERVER_ERROR_CODES.contains(&code),
        });
        self.exporter.submit(spans);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The response body, polled with the call's recorder entered (encoding is
/// a phase); the call finishes when the body ends.
struct TracedBody {
    inner: tonic::body::Body,
    call: Call,
}

impl Body for TracedBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.call.recorder.enter();
            Pin::new(&mut this.inner).poll_frame(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    this.call.code = Some(code);
                    this.call.finish();
                }
            }
            Poll::Ready(Some(Err(status))) => {
                this.call.code = Some(status.code() as i32);
                this.call.finish();
            }
            Poll::Ready(None) => this.call.finish(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_the_parent() {
        let p = parse_traceparent(VALID);
        assert_eq!(
            p.map(|p| (p.trace_id[0], p.trace_id[15], p.span_id[0], p.span_id[7])),
            Some((0x4b, 0x36, 0x00, 0xb7))
        );
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        let bad: [&[u8]; 9] = [
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"",
        ];
        for b in bad {
            assert_eq!(parse_traceparent(b), None, "{}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn only_the_services_methods_are_named() {
        assert_eq!(
            method("/context_assembler.v1.Assembler/Assemble"),
            Some("Assemble")
        );
        assert_eq!(method("/context_assembler.v1.Assembler/Secret"), None);
        assert_eq!(method("/grpc.health.v1.Health/Check"), None);
    }
}
