//! The `Assembler` gRPC service: check the shape, run the domain off the
//! reactor holding the slot the gate admitted the request with, encode.
//! Deadlines and shedding happen in [`super::gate`]. Records request
//! metrics; logs ids, sizes and codes only.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};
use tracing::{Instrument as _, instrument, warn};

use super::admission::{Admission, Permit, Refusal};
use super::auth::ClientIdentity;
use super::auth::{Authority, Denied, Grant};
use super::convert;
use super::gate::Slot;
use super::pb;
use super::status::{
    code_label, compact_status, denied_status, internal_status, invalid_status, memory_status, to_status,
};
use crate::assemble::Assembler;
use crate::assemble::flow::{Flow, Prepared, WARM_TRY_BYTES, now_ms};
use crate::compact::{self, Compactor};
use crate::memory::{Memories, MemorySettings, RetainInput};
use crate::prompt;
use crate::prompt_cache;
use crate::telemetry::metrics;
use crate::telemetry::trace;
use crate::vocab::{self, FieldViolation};

mod outcome;

use outcome::{blocking, failed, finish, refuse, response, traced};

/// The service over a shared [`Assembler`].
#[derive(Debug, Clone)]
pub struct AssemblerService {
    assembler: Arc<Assembler>,
    compactor: Compactor,
    admission: Admission,
    memories: Arc<Memories>,
    flow: Flow,
    authority: Authority,
}

impl AssemblerService {
    /// A service over `assembler` (and a compactor sharing its caches and
    /// catalog), admitting requests by `admission`.
    pub fn new(assembler: Arc<Assembler>, admission: Admission) -> Self {
        let memories = Arc::new(Memories::new(None, MemorySettings::default()));
        AssemblerService {
            compactor: Compactor::new(assembler.clone()),
            flow: Flow::new(assembler.clone(), memories.clone()),
            assembler,
            admission,
            memories,
            authority: Authority::default(),
        }
    }

    /// The same service checking claims against `authority` (`[auth]`).
    pub fn with_authority(mut self, authority: Authority) -> Self {
        self.authority = authority;
        self
    }

    /// The same service with a memory store for Retain, Forget,
    /// ListMemories and recall.
    pub fn with_memories(mut self, memories: Arc<Memories>) -> Self {
        self.flow = Flow::new(self.assembler.clone(), memories.clone());
        self.memories = memories;
        self
    }

    /// Runs one unary RPC, timed from its start: `hold` takes what the
    /// request holds before its claims are checked ([`slot`] or
    /// [`no_slot`]); `check` is the claim check given to
    /// [`Authority::check`], and a denial is the answer; otherwise `body`
    /// answers from the request's message and what `hold` took. Either way
    /// [`finish`] records the outcome.
    async fn unary<Req, Resp, Held, Fut>(
        &self,
        rpc: &'static str,
        mut request: Request<Req>,
        hold: impl FnOnce(&Admission, &mut Request<Req>) -> Held,
        check: impl FnOnce(&Grant, &Req) -> Result<(), Denied>,
        body: impl FnOnce(Req, Held) -> Fut,
    ) -> Result<Response<Resp>, Status>
    where
        Fut: Future<Output = Result<Resp, Status>>,
    {
        let started = Instant::now();
        let held = hold(&self.admission, &mut request);
        if let Err(denied) = self.authority.check(&request, check) {
            return finish(rpc, started, Err(denied_status(rpc, &denied)));
        }
        let result = body(request.into_inner(), held).await;
        finish(rpc, started, result)
    }

    /// Converts a wire request and checks the recall it asks for, if any
    /// (no I/O: the flow runs the recall). Returns the time the conversion
    /// took.
    fn prepare(&self, mut wire: pb::AssembleRequest) -> Result<(Prepared, Duration), Status> {
        let converting = Instant::now();
        let recall = wire
            .recall
            .take()
            .map(|r| convert::memory::recall(r, &wire.query));
        let req = prompt::AssembleRequest::try_from(wire).map_err(|e| to_status(&e))?;
        let converted = converting.elapsed();
        if let Some((spec, _)) = &recall {
            let violations = self.flow.check_recall(spec);
            if !violations.is_empty() {
                return Err(invalid_status(&violations));
            }
        }
        Ok((Prepared { req, recall }, converted))
    }

    /// One Assemble: slot, conversion, the domain, metrics.
    async fn assemble_one(
        &self,
        rpc: &'static str,
        permit: Result<Permit, Refusal>,
        wire: pb::AssembleRequest,
    ) -> Result<pb::AssembleResponse, Status> {
        if trace::armed() {
            trace::attribute("context_assembler.request_id", logged(&wire.request_id));
            trace::attribute("context_assembler.model", logged(&wire.model));
            trace::attribute("context_assembler.blocks", wire.blocks.len());
            trace::attribute(
                "context_assembler.items",
                wire.blocks.iter().map(|b| b.items.len()).sum::<usize>(),
            );
        }
        let permit = permit.map_err(|r| refuse(rpc, r))?;
        let small = prost::Message::encoded_len(&wire) <= WARM_TRY_BYTES;
        // The catalog in force at admission.
        let catalog = self.assembler.catalog();
        let (prepared, mut converted) = self.prepare(wire)?;
        let answered = self
            .flow
            .one(&self.admission, permit, catalog, prepared, small)
            .await
            .map_err(|e| failed(rpc, e))?;
        let converting = Instant::now();
        let answer = response(answered);
        converted += converting.elapsed();
        metrics::phase(metrics::PHASE_CONVERT, converted);
        traced(&answer);
        Ok(answer)
    }
}

/// An identifier as logged: at most [`LOGGED_ID_CHARS`] characters, so a
/// caller's oversized id cannot flood the logs.
fn logged(id: &str) -> &str {
    id.char_indices()
        .nth(LOGGED_ID_CHARS)
        .map_or(id, |(at, _)| &id[..at])
}

/// The span of one unary Assemble (as `#[instrument]` names it), its
/// request's fields given as it opens: the request is decoded before the
/// handler runs. Each field recorded later costs the JSON log format a parse
/// and a rewrite of every field already there (tracing-subscriber's
/// `JsonFields`). No event follows the answer in it, so the status is not
/// one of them (metrics count it). Public for `examples/span_cost`, which
/// times it alone.
pub fn assemble_span(wire: &pb::AssembleRequest) -> tracing::Span {
    tracing::info_span!(
        "assemble",
        rpc = "Assemble",
        request_id = logged(&wire.request_id),
        model = logged(&wire.model),
        blocks = wire.blocks.len(),
    )
}

/// Characters of a request id or model name kept in log fields.
const LOGGED_ID_CHARS: usize = 128;

/// Checks a wire request against the block and item limits: for a stream's
/// message and a batch's request, which fail alone (the gate refuses a unary
/// Assemble's counts and a batch's size before they are decoded).
fn check_shape(admission: &Admission, r: &pb::AssembleRequest) -> Result<(), Refusal> {
    let items = r.blocks.iter().map(|b| b.items.len()).sum();
    admission.check_shape(r.blocks.len(), items)
}

/// Answers buffered per AssembleStream.
const STREAM_BUFFER: usize = 16;

/// The slot the gate admitted `request` with; without a gate (or one that
/// did not admit it), one is taken here.
fn slot<T>(admission: &Admission, request: &mut Request<T>) -> Result<Permit, Refusal> {
    match request.extensions_mut().remove::<Slot>().and_then(|s| s.take()) {
        Some(permit) => Ok(permit),
        None => admission.admit(),
    }
}

/// Takes nothing before the claim check: for an RPC that does no admitted
/// work (see [`AssemblerService::unary`]).
fn no_slot<T>(_: &Admission, _: &mut Request<T>) {}

/// The claim check of an RPC whose request claims nothing: any client the
/// rules admit may call it.
fn no_claims<T>(_: &Grant, _: &T) -> Result<(), Denied> {
    Ok(())
}

#[tonic::async_trait]
impl pb::assembler_server::Assembler for AssemblerService {
    async fn assemble(
        &self,
        request: Request<pb::AssembleRequest>,
    ) -> Result<Response<pb::AssembleResponse>, Status> {
        const RPC: &str = "Assemble";
        let span = assemble_span(request.get_ref());
        let check = |g: &Grant, r: &pb::AssembleRequest| g.assemble(r, "");
        self.unary(RPC, request, slot, check, |wire, permit| {
            self.assemble_one(RPC, permit, wire)
        })
        .instrument(span)
        .await
    }

    #[instrument(skip_all, fields(rpc = "AssembleBatch", requests))]
    async fn assemble_batch(
        &self,
        request: Request<pb::AssembleBatchRequest>,
    ) -> Result<Response<pb::AssembleBatchResponse>, Status> {
        const RPC: &str = "AssembleBatch";
        // Any member claiming more than the client may fails the whole
        // batch: the caller is at fault, not one request.
        let check = |g: &Grant, b: &pb::AssembleBatchRequest| {
            b.requests
                .iter()
                .enumerate()
                .try_for_each(|(k, r)| g.assemble(r, &format!("requests[{k}].")))
        };
        self.unary(RPC, request, slot, check, |wire, permit| async move {
            tracing::Span::current().record("requests", wire.requests.len());
            trace::attribute("context_assembler.batch.requests", wire.requests.len());
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            // One catalog for the whole batch, the one in force at admission.
            let catalog = self.assembler.catalog();
            let n = wire.requests.len();
            // Shape and conversion per request: one bad request fails alone.
            let mut early: Vec<Option<Status>> = (0..n).map(|_| None).collect();
            let mut prepared = Vec::with_capacity(n);
            let mut at = Vec::with_capacity(n);
            let mut converted = Duration::ZERO;
            for (i, r) in wire.requests.into_iter().enumerate() {
                let checked = check_shape(&self.admission, &r).map_err(|x| refuse(RPC, x));
                match checked.and_then(|()| self.prepare(r)) {
                    Ok((p, took)) => {
                        converted += took;
                        prepared.push(p);
                        at.push(i);
                    }
                    Err(status) => early[i] = Some(status),
                }
            }
            let outcome = self
                .flow
                .batch(&self.admission, permit, catalog, prepared)
                .await
                .map_err(|e| failed(RPC, e))?;
            let converting = Instant::now();
            let mut results: Vec<pb::AssembleResult> = early
                .into_iter()
                .map(|e| pb::AssembleResult {
                    result: e.map(|s| pb::assemble_result::Result::Error(convert::request_error(&s))),
                })
                .collect();
            for (k, r) in outcome.results.into_iter().enumerate() {
                results[at[k]] = convert::wire_result(r.map(response).map_err(|e| failed(RPC, e)));
            }
            converted += converting.elapsed();
            // Per request, as the domain phases are.
            let per_request = converted / vocab::saturating_u32(n.max(1));
            for _ in 0..n {
                metrics::phase(metrics::PHASE_CONVERT, per_request);
            }
            Ok(convert::batch_response(
                results,
                outcome.groups,
                &outcome.order,
                &at,
            ))
        })
        .await
    }

    type AssembleStreamStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::AssembleStreamResponse, Status>> + Send>,
    >;

    #[instrument(skip_all, fields(rpc = "AssembleStream"))]
    async fn assemble_stream(
        &self,
        request: Request<tonic::Streaming<pb::AssembleRequest>>,
    ) -> Result<Response<Self::AssembleStreamStream>, Status> {
        const RPC: &str = "AssembleStream";
        // The rules and the caller's grant as the stream opens: every
        // message is checked against them.
        let rules = self.authority.rules();
        let identity = request.extensions().get::<Arc<ClientIdentity>>().cloned();
        if let Err(d) = rules.grant(identity.as_deref()) {
            return Err(denied_status(RPC, &d));
        }
        let mut inbound = request.into_inner();
        let service = self.clone();
        // One message at a time; a small buffer of answers. A client that
        // stops reading stops the stream's work.
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_BUFFER);
        // The stream's span gets a phase child per phase of every message
        // (and the attributes of the last one).
        let recorder = trace::current();
        tokio::spawn(super::trace::within(recorder, async move {
            let mut index = 0u64;
            loop {
                let wire = match inbound.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    // The gate's refusal of a message (size, budget,
                    // shape), the drain, or a malformed message: the last
                    // answer of the stream.
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        break;
                    }
                };
                let started = Instant::now();
                let request_id = wire.request_id.clone();
                let claims = match rules.grant(identity.as_deref()) {
                    Ok(Some(grant)) => grant.assemble(&wire, ""),
                    Ok(None) => Ok(()),
                    Err(d) => Err(d),
                };
                let result = match claims {
                    Err(d) => Err(denied_status(RPC, &d)),
                    // The gate measures a stream's messages but leaves their
                    // shape to this check, so that one fails alone.
                    Ok(()) => match check_shape(&service.admission, &wire) {
                        Err(r) => Err(refuse(RPC, r)),
                        Ok(()) => {
                            // Each message is worked on under the configured deadline.
                            let one = service.assemble_one(RPC, service.admission.admit(), wire);
                            match service.admission.limits().default_timeout {
                                None => one.await,
                                Some(deadline) => tokio::time::timeout(deadline, one)
                                    .await
                                    .unwrap_or_else(|_| Err(refuse(RPC, Refusal::DeadlineExceeded))),
                            }
                        }
                    },
                };
                let code = result.as_ref().map_or_else(|s| s.code(), |_| tonic::Code::Ok);
                metrics::request(RPC, code_label(code), started.elapsed());
                let answer = pb::AssembleStreamResponse {
                    index,
                    request_id,
                    result: Some(convert::wire_result(result)),
                };
                if tx.send(Ok(answer)).await.is_err() {
                    break;
                }
                index += 1;
            }
        }));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    #[instrument(skip_all, fields(rpc = "CountTokens", bytes))]
    async fn count_tokens(
        &self,
        request: Request<pb::CountTokensRequest>,
    ) -> Result<Response<pb::CountTokensResponse>, Status> {
        const RPC: &str = "CountTokens";
        self.unary(RPC, request, slot, no_claims, |mut wire, permit| async move {
            tracing::Span::current().record("bytes", wire.text.len());
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let target = convert::count_target(wire.tokenizer.take()).map_err(|e| to_status(&e))?;
            let assembler = self.assembler.clone();
            // The text is checked and counted where it was received (see
            // `count_request`), off the reactor: both are a pass over it.
            let count = blocking(permit, move |_| {
                let text = wire.text()?;
                assembler.count_tokens(&target, text).map_err(|e| to_status(&e))
            })
            .await??;
            Ok(pb::CountTokensResponse {
                tokens: count.tokens,
                tokenizer: count.tokenizer,
                exact: count.exact,
                tokens_exact: count.sources.exact,
                tokens_provider: count.sources.provider,
                tokens_estimated: count.sources.estimated,
            })
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "ReportUsage"))]
    async fn report_usage(
        &self,
        request: Request<pb::ReportUsageRequest>,
    ) -> Result<Response<pb::ReportUsageResponse>, Status> {
        const RPC: &str = "ReportUsage";
        let check = |g: &Grant, _: &pb::ReportUsageRequest| g.report_usage();
        self.unary(RPC, request, no_slot, check, |r, ()| async move {
            if r.provider.is_empty() {
                Err(invalid_status(&[FieldViolation::new("provider", "required")]))
            } else {
                let report = prompt_cache::feedback::UsageReport {
                    request_id: r.request_id,
                    provider: r.provider,
                    prompt_tokens: r.prompt_tokens,
                    cached_tokens: r.cached_tokens,
                    cache_read_tokens: r.cache_read_tokens,
                    cache_creation_tokens: r.cache_creation_tokens,
                    cache_write_tokens: r.cache_write_tokens,
                    diagnostic: r.diagnostic,
                    answer: r.answer,
                };
                Ok(match self.assembler.report_usage(&report) {
                    Some(c) => pb::ReportUsageResponse {
                        matched: true,
                        sidecar_tokens: c.ours,
                        relative_error: c.relative_error,
                        expected_cached_tokens: c.expected_cached,
                        cached_tokens: c.cached,
                        missed_expected: c.missed_expected,
                        prefix_flagged: c.prefix_flagged,
                    },
                    None => pb::ReportUsageResponse::default(),
                })
            }
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "Compact", request_id, model, messages))]
    async fn compact(
        &self,
        request: Request<pb::CompactRequest>,
    ) -> Result<Response<pb::CompactResponse>, Status> {
        const RPC: &str = "Compact";
        self.unary(RPC, request, slot, no_claims, |wire, permit| async move {
            let span = tracing::Span::current();
            span.record("request_id", logged(&wire.request_id));
            span.record("model", logged(&wire.model));
            span.record("messages", wire.messages.len());
            self.admission
                .check_shape(0, convert::compact_items(&wire))
                .map_err(|r| refuse(RPC, r))?;
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let req = compact::CompactRequest::try_from(wire).map_err(|e| compact_status(&e))?;
            let compactor = self.compactor.clone();
            blocking(permit, move |cancel| compactor.compact(req, cancel))
                .await?
                .map(pb::CompactResponse::from)
                .map_err(|e| compact_status(&e))
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "Retain", request_id, observations, output_bytes))]
    async fn retain(
        &self,
        request: Request<pb::RetainRequest>,
    ) -> Result<Response<pb::RetainResponse>, Status> {
        const RPC: &str = "Retain";
        let check = |g: &Grant, r: &pb::RetainRequest| g.subject(&r.subject, || "subject".into());
        self.unary(RPC, request, slot, check, |wire, permit| async move {
            let span = tracing::Span::current();
            span.record("request_id", logged(&wire.request_id));
            span.record("observations", wire.observations.len() + wire.summaries.len());
            span.record("output_bytes", wire.model_output.len());
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let input = RetainInput::from(wire);
            let memories = self.memories.clone();
            let now = now_ms();
            // Parsing a large model output is CPU work: off the reactor.
            let prepared = tokio::task::spawn_blocking(move || memories.prepare_retain(input, now))
                .await
                .map_err(|e| {
                    warn!(panicked = e.is_panic(), "retain parse task failed");
                    internal_status("parsing")
                })?
                .map_err(|e| memory_status(&e))?;
            // The write holds a store slot, not the CPU work slot.
            drop(permit);
            let out = self
                .memories
                .commit_retain(prepared)
                .await
                .map_err(|e| memory_status(&e))?;
            if !out.replayed {
                metrics::memories_stored(&out.types, out.evicted);
                metrics::memories_evicted_for_space(out.evicted_for_space);
            }
            Ok(pb::RetainResponse::from(out))
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "Forget"))]
    async fn forget(
        &self,
        request: Request<pb::ForgetRequest>,
    ) -> Result<Response<pb::ForgetResponse>, Status> {
        const RPC: &str = "Forget";
        let check = |g: &Grant, r: &pb::ForgetRequest| g.subject(&r.subject, || "subject".into());
        self.unary(RPC, request, slot, check, |wire, permit| async move {
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let filter = convert::memory::forget_filter(wire).map_err(|v| invalid_status(&v))?;
            // The store call holds a store slot, not the CPU work slot.
            drop(permit);
            let forgotten = self
                .memories
                .forget(&filter)
                .await
                .map_err(|e| memory_status(&e))?;
            metrics::memories_forgotten(forgotten.deleted);
            Ok(pb::ForgetResponse::from(forgotten))
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "ListMemories"))]
    async fn list_memories(
        &self,
        request: Request<pb::ListMemoriesRequest>,
    ) -> Result<Response<pb::ListMemoriesResponse>, Status> {
        const RPC: &str = "ListMemories";
        let check = |g: &Grant, r: &pb::ListMemoriesRequest| {
            g.subject(&r.subject, || "subject".into())?;
            r.principal
                .as_ref()
                .map_or(Ok(()), |p| g.scopes(&p.scopes, "principal.scopes"))
        };
        self.unary(RPC, request, slot, check, |wire, permit| async move {
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let before = convert::memory::page_token(&wire.page_token).map_err(|v| invalid_status(&[v]))?;
            // The store call holds a store slot, not the CPU work slot.
            drop(permit);
            let scopes = convert::memory::list_scopes(wire.principal);
            let page = self
                .memories
                .list(&wire.subject, &scopes, wire.page_size, before)
                .await
                .map_err(|e| memory_status(&e))?;
            Ok(pb::ListMemoriesResponse::from(page))
        })
        .await
    }

    #[instrument(skip_all, fields(rpc = "ListModels"))]
    async fn list_models(
        &self,
        request: Request<pb::ListModelsRequest>,
    ) -> Result<Response<pb::ListModelsResponse>, Status> {
        const RPC: &str = "ListModels";
        self.unary(
            RPC,
            request,
            no_slot,
            |_, _| Ok(()),
            |_, ()| async move { Ok(convert::model_infos(&self.assembler.catalog().models)) },
        )
        .await
    }
}
