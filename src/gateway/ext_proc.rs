//! Envoy's external processor (`envoy.service.ext_proc.v3.ExternalProcessor`):
//! one stream per HTTP request. Its headers say the path and the caller's
//! asks; its body is gathered (at most the body limit) and fitted
//! ([`Fitter::fit`]); the answer is Envoy's mutations: the fitted body with
//! its `content-length`, the count headers (the input tokens, whether
//! exact, and where they came from: [`crate::render::SOURCE_HEADERS`]) and
//! the dynamic metadata, or an immediate response in the provider's shape.
//!
//! Both body modes, read from the first message's `protocol_config`:
//! - `BUFFERED`: one answer per message; the body's answer carries the
//!   header mutations (Envoy holds the headers until the body is in).
//! - `FULL_DUPLEX_STREAMED`: nothing is answered until the body is whole;
//!   then the headers' answer, the body as `streamed_response` chunks of at
//!   most 64 KiB, and the trailers' answer, in that order.
//!
//! Whatever goes wrong on a stream ends it quietly or passes the request on
//! as it came: a stalled stream runs out its deadline and ends (Envoy goes
//! on without the processor), a message out of order is answered as a
//! pass-through, and no stream touches another. Nothing here turns a
//! request the upstream would have served into a 5xx.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};
use tonic_types::StatusExt as _;
use tracing::{Instrument as _, debug};

use super::body::Api;
use super::fit::{Asks, Fitter, Outcome, Pass};
use super::pb::ext_proc::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse, HttpBody, HttpHeaders,
    ProcessingRequest, ProcessingResponse, TrailersResponse, body_mutation, common_response::ResponseStatus,
    external_processor_server, processing_request, processing_response,
};
use super::pb::mode::processing_mode::BodySendMode;
use crate::grpc::admission::Reserved;
use crate::grpc::auth::Authority;
use crate::grpc::status::{REASON_OVERLOADED, REASON_REQUEST_TOO_LARGE, denied_status};
use crate::telemetry::metrics;

mod mutations;

pub use mutations::header_map;
use mutations::{body_response, immediate, metadata, mutation, streamed};

/// The metric label of the processor's streams.
pub const RPC: &str = "ExtProc";
/// The largest body chunk sent back in full-duplex mode (Envoy's limit).
pub const STREAMED_CHUNK_BYTES: usize = 64 * 1024;
/// The dynamic metadata's namespace.
pub const NAMESPACE: &str = "context_assembler";
/// The header carrying the fitted prompt's input tokens.
pub const INPUT_TOKENS_HEADER: &str = "x-context-assembler-input-tokens";
/// The header saying whether that count is the provider's own.
pub const EXACT_HEADER: &str = "x-context-assembler-exact";

/// The processor.
#[derive(Debug, Clone)]
pub struct ExtProc {
    fitter: Fitter,
    drain: watch::Receiver<bool>,
    deadline: Duration,
    authority: Authority,
}

impl ExtProc {
    /// A processor fitting with `fitter`; a stream passes its request on
    /// once `drain` is true, and stops waiting for Envoy's next message
    /// after `deadline`.
    pub fn new(fitter: Fitter, drain: watch::Receiver<bool>, deadline: Duration) -> Self {
        ExtProc {
            fitter,
            drain,
            deadline,
            authority: Authority::default(),
        }
    }

    /// The same processor admitting only the clients `[auth]` lists (with
    /// mutual TLS): an Envoy whose certificate names no listed identity is
    /// refused, as any other client is.
    pub fn with_authority(mut self, authority: Authority) -> Self {
        self.authority = authority;
        self
    }

    /// The tonic service, its messages bounded by the gate in front of it.
    pub fn service(self) -> external_processor_server::ExternalProcessorServer<ExtProc> {
        external_processor_server::ExternalProcessorServer::new(self)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl external_processor_server::ExternalProcessor for ExtProc {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        // The stream claims nothing beyond the client's identity.
        if let Err(denied) = self.authority.check(&request, |_, _| Ok(())) {
            metrics::request(RPC, "PERMISSION_DENIED", Duration::ZERO);
            return Err(denied_status(RPC, &denied));
        }
        let stream = Processing {
            fitter: self.fitter.clone(),
            draining: *self.drain.borrow(),
            out: VecDeque::new(),
            duplex: false,
            api: None,
            asks: Asks::default(),
            body: Vec::new(),
            ended: false,
            reserved: None,
        };
        let span = tracing::info_span!(
            "ext_proc",
            api = tracing::field::Empty,
            outcome = tracing::field::Empty
        );
        let run = Run {
            processing: stream,
            inbound: request.into_inner(),
            idle: self.deadline,
            first: true,
            code: None,
            started: Instant::now(),
            span,
        };
        Ok(Response::new(Box::pin(futures_util::stream::unfold(
            run,
            Run::next,
        ))))
    }
}

/// A stream's run, polled as its answer stream: each poll hands out an
/// answer already made, else reads Envoy's next message and answers it.
/// No task and no channel of its own: Envoy's message wakes the one task
/// that writes the answer. Dropped (Envoy reset the stream), it drops the
/// fit in progress; it is recorded as cancelled unless its request was
/// answered.
struct Run {
    processing: Processing,
    inbound: Streaming<ProcessingRequest>,
    /// The longest wait for Envoy's next message.
    idle: Duration,
    first: bool,
    /// How the stream ended, once it has.
    code: Option<&'static str>,
    started: Instant,
    span: tracing::Span,
}

impl Run {
    /// The stream's next answer, and the run to go on with.
    async fn next(mut self) -> Option<(Result<ProcessingResponse, Status>, Run)> {
        loop {
            if let Some(answer) = self.processing.out.pop_front() {
                return Some((Ok(answer), self));
            }
            if self.code.is_some() {
                return None;
            }
            let span = self.span.clone();
            let code = self.step().instrument(span).await;
            if let Some(code) = code {
                metrics::request(RPC, code, self.started.elapsed());
                self.code = Some(code);
            }
        }
    }

    /// Reads and answers Envoy's next message; the code label recorded for
    /// the stream when it ends.
    async fn step(&mut self) -> Option<&'static str> {
        let p = &mut self.processing;
        let message = match tokio::time::timeout(self.idle, self.inbound.message()).await {
            // Answered, and Envoy keeps the stream open: done.
            Err(_) if p.ended || p.api.is_none() => return Some("OK"),
            Err(_) if p.duplex => {
                // A stalled upload: what was gathered goes on as it came,
                // and the rest as it comes (Envoy holds nothing).
                debug!("ext_proc stream idle past its deadline: passed on");
                p.flush();
                return None;
            }
            // Buffered: Envoy's own message timeout decides.
            Err(_) => return Some("DEADLINE_EXCEEDED"),
            Ok(Err(status)) => return Some(p.broken(&status)),
            Ok(Ok(None)) => return Some("OK"),
            Ok(Ok(Some(m))) => m,
        };
        if std::mem::take(&mut self.first) {
            p.duplex = message
                .protocol_config
                .as_ref()
                .is_some_and(|c| c.request_body_mode == BodySendMode::FullDuplexStreamed as i32);
        }
        p.answer(message).await;
        None
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.code.is_none() {
            // Envoy may drop a stream once its request is answered.
            let p = &self.processing;
            let answered = p.out.is_empty() && (p.ended || p.api.is_none());
            let code = if answered { "OK" } else { "CANCELLED" };
            metrics::request(RPC, code, self.started.elapsed());
        }
    }
}

/// One stream's state.
struct Processing {
    fitter: Fitter,
    draining: bool,
    /// Answers made and not yet handed out.
    out: VecDeque<ProcessingResponse>,
    /// Full-duplex mode (else buffered, or no body at all).
    duplex: bool,
    /// The API of a request to fit; `None`: passed on as it comes.
    api: Option<Api>,
    asks: Asks,
    /// The body gathered so far.
    body: Vec<u8>,
    /// The request's body was answered (or refused): later messages are
    /// answered as a pass-through.
    ended: bool,
    /// The gathered body's share of the upload budget (full duplex).
    reserved: Option<Reserved>,
}

impl Processing {
    /// The stream failed at the listener (a message over its bound, the
    /// upload budget spent) or Envoy reset it: a request still to answer is
    /// answered as it can be (413, or 429 when the configuration refuses
    /// under load); otherwise the stream ends and Envoy goes on by its own
    /// rules.
    fn broken(&mut self, status: &Status) -> &'static str {
        use processing_response::Response as Out;
        let Some(api) = self.api.filter(|_| !self.ended) else {
            // Envoy may reset a stream once its request is answered.
            return "OK";
        };
        let reason = status
            .get_details_error_info()
            .map(|i| i.reason)
            .unwrap_or_default();
        let refusal = if reason == REASON_REQUEST_TOO_LARGE {
            let limit = self.fitter.settings().max_body_bytes;
            Some(super::fit::too_large(api, limit.saturating_add(1), limit))
        } else if reason == REASON_OVERLOADED && self.fitter.settings().refuse_overloaded {
            Some(super::fit::overloaded(api))
        } else {
            None
        };
        self.ended = true;
        if let Some(r) = refusal {
            metrics::gateway_request(api.as_str(), "refused", r.reason);
            self.send(Out::ImmediateResponse(immediate(r.status, r.body)), None);
            return "RESOURCE_EXHAUSTED";
        }
        "CANCELLED"
    }

    /// Full duplex: passes the request on as it came, from here on: the
    /// headers' answer, what was gathered, and each chunk after it as it
    /// comes.
    fn flush(&mut self) {
        use processing_response::Response as Out;
        let Some(api) = self.api.take().filter(|_| self.duplex && !self.ended) else {
            return;
        };
        metrics::gateway_request(api.as_str(), "passed", Pass::Stalled.as_str());
        self.reserved = None;
        self.send(Out::RequestHeaders(HeadersResponse::default()), None);
        let held = Bytes::from(std::mem::take(&mut self.body));
        for c in held.chunks(STREAMED_CHUNK_BYTES) {
            let chunk = streamed(held.slice_ref(c), false);
            self.send(Out::RequestBody(body_response(chunk, Vec::new())), None);
        }
    }

    fn send(&mut self, response: processing_response::Response, metadata: Option<prost_types::Struct>) {
        let answer = ProcessingResponse {
            response: Some(response),
            dynamic_metadata: metadata,
            mode_override: None,
        };
        self.out.push_back(answer);
    }

    async fn answer(&mut self, message: ProcessingRequest) {
        use processing_request::Request as In;
        use processing_response::Response as Out;
        match message.request {
            Some(In::RequestHeaders(h)) => self.headers(h).await,
            Some(In::RequestBody(b)) => self.body(b).await,
            Some(In::RequestTrailers(_)) => {
                if self.duplex && self.api.is_some() && !self.ended {
                    // The body ends with its trailers: fit what came.
                    self.finish(true).await;
                }
                self.send(Out::RequestTrailers(TrailersResponse::default()), None)
            }
            // The response path is not asked for; answer it unchanged if
            // a filter sends it anyway.
            Some(In::ResponseHeaders(_)) => self.send(Out::ResponseHeaders(HeadersResponse::default()), None),
            Some(In::ResponseBody(b)) if self.duplex => {
                let chunk = streamed(b.body, b.end_of_stream);
                self.send(Out::ResponseBody(body_response(chunk, Vec::new())), None)
            }
            Some(In::ResponseBody(_)) => self.send(Out::ResponseBody(BodyResponse::default()), None),
            Some(In::ResponseTrailers(_)) => {
                self.send(Out::ResponseTrailers(TrailersResponse::default()), None)
            }
            None => {}
        }
    }

    async fn headers(&mut self, h: HttpHeaders) {
        use processing_response::Response as Out;
        let headers = h.headers.unwrap_or_default().headers;
        // A value is `value`, or `raw_value` (UTF-8) in the Envoys that send
        // that instead.
        let get = |name: &str| {
            headers
                .iter()
                .find(|v| v.key.eq_ignore_ascii_case(name))
                .and_then(|v| match v.raw_value.is_empty() {
                    true => Some(v.value.as_str()),
                    false => std::str::from_utf8(&v.raw_value).ok(),
                })
        };
        let post = get(":method") == Some("POST");
        let api = get(":path").and_then(Api::of_path).filter(|_| post);
        self.asks = Asks::from_headers(get);
        let fit = api.is_some() && !h.end_of_stream && !self.draining && !self.ended;
        if !fit {
            let reason = if self.draining { "draining" } else { "path" };
            metrics::gateway_request(api.map_or("other", Api::as_str), "passed", reason);
            self.api = None;
            return self.send(Out::RequestHeaders(HeadersResponse::default()), None);
        }
        self.api = api;
        if self.duplex {
            // Answered once the body is whole.
            return;
        }
        self.send(Out::RequestHeaders(HeadersResponse::default()), None)
    }

    async fn body(&mut self, b: HttpBody) {
        use processing_response::Response as Out;
        if self.api.is_none() || self.ended {
            // Passed on as it came.
            return if self.duplex {
                let chunk = streamed(b.body, b.end_of_stream);
                self.send(Out::RequestBody(body_response(chunk, Vec::new())), None)
            } else {
                self.send(Out::RequestBody(BodyResponse::default()), None)
            };
        }
        let limit = self.fitter.settings().max_body_bytes;
        if self.body.len() + b.body.len() > limit {
            let api = self.api.unwrap_or(Api::Chat);
            let refusal = super::fit::too_large(api, self.body.len() + b.body.len(), limit);
            metrics::gateway_request(api.as_str(), "refused", refusal.reason);
            self.ended = true;
            self.body = Vec::new();
            return self.send(
                Out::ImmediateResponse(immediate(refusal.status, refusal.body)),
                None,
            );
        }
        if self.duplex && !self.hold(self.body.len() + b.body.len()) {
            // No room to gather it: the request goes on unfitted (or is
            // refused, if the configuration says so under load).
            let api = self.api.unwrap_or(Api::Chat);
            if self.fitter.settings().refuse_overloaded {
                let r = super::fit::overloaded(api);
                metrics::gateway_request(api.as_str(), "refused", r.reason);
                self.ended = true;
                self.body = Vec::new();
                return self.send(Out::ImmediateResponse(immediate(r.status, r.body)), None);
            }
            self.flush();
            let chunk = streamed(b.body, b.end_of_stream);
            return self.send(Out::RequestBody(body_response(chunk, Vec::new())), None);
        }
        self.body.extend_from_slice(&b.body);
        if b.end_of_stream {
            return self.finish(false).await;
        }
        if self.duplex {
            return;
        }
        // A buffered body arrives whole: a chunk without its end is not
        // one; it goes on untouched.
        self.ended = true;
        self.send(Out::RequestBody(BodyResponse::default()), None)
    }

    /// Holds `bytes` of gathered body from the upload budget (what the
    /// listener held for each chunk goes once the next is read); false when
    /// the budget has no room.
    fn hold(&mut self, bytes: usize) -> bool {
        let admission = self.fitter.admission();
        let wanted = u64::try_from(bytes).unwrap_or(u64::MAX);
        match &mut self.reserved {
            Some(r) => admission.reserve_up_to(r, wanted).is_ok(),
            None => match admission.reserve_upload(u32::try_from(bytes).unwrap_or(u32::MAX)) {
                Ok(r) => {
                    self.reserved = Some(r);
                    true
                }
                Err(_) => false,
            },
        }
    }

    /// Fits the gathered body and answers it; `trailers`: the body ended
    /// with trailers still to answer (full duplex).
    async fn finish(&mut self, trailers: bool) {
        use processing_response::Response as Out;
        self.ended = true;
        let Some(api) = self.api else { return };
        let body = std::mem::take(&mut self.body);
        // Held until the answer is written (the fit's copies are of it).
        let _held = self.reserved.take();
        // Envoy gone (a reset, its message timeout): the stream, and the
        // fit with it, is dropped, and the assembler's work stops at its
        // next check.
        let outcome = self.fitter.fit(api, &self.asks, &body).await;
        let span = tracing::Span::current();
        span.record("api", api.as_str());
        span.record("outcome", outcome.label());
        let (mutation, replaced, metadata) = match outcome {
            Outcome::Refused(r) => {
                return self.send(Out::ImmediateResponse(immediate(r.status, r.body)), None);
            }
            Outcome::Passed(_) => (HeaderMutation::default(), None, None),
            Outcome::Fitted(f) => {
                let metadata = metadata(&f);
                let mutation = mutation(&f);
                (mutation, f.body, Some(metadata))
            }
        };
        if !self.duplex {
            let body_mutation = replaced.map(|b| BodyMutation {
                mutation: Some(body_mutation::Mutation::Body(b.into())),
            });
            let common = CommonResponse {
                status: ResponseStatus::Continue as i32,
                header_mutation: Some(mutation),
                body_mutation,
                ..CommonResponse::default()
            };
            return self.send(
                Out::RequestBody(BodyResponse {
                    response: Some(common),
                }),
                metadata,
            );
        }
        let common = CommonResponse {
            status: ResponseStatus::Continue as i32,
            header_mutation: Some(mutation),
            ..CommonResponse::default()
        };
        self.send(
            Out::RequestHeaders(HeadersResponse {
                response: Some(common),
            }),
            metadata,
        );
        let out = replaced.map_or_else(|| Bytes::from(body), |b| Bytes::from(b.into_bytes()));
        let mut chunks = out.chunks(STREAMED_CHUNK_BYTES).peekable();
        if chunks.peek().is_none() {
            let chunk = streamed(Bytes::new(), !trailers);
            return self.send(Out::RequestBody(body_response(chunk, Vec::new())), None);
        }
        while let Some(c) = chunks.next() {
            let last = chunks.peek().is_none();
            let chunk = streamed(out.slice_ref(c), last && !trailers);
            self.send(Out::RequestBody(body_response(chunk, Vec::new())), None);
        }
    }
}
