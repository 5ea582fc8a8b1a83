//! The `Assembler` gRPC service: check the shape, run the domain off the
//! reactor holding the slot the gate admitted the request with, encode.
//! Deadlines and shedding happen in [`super::gate`]. Records request
//! metrics; logs ids, sizes and codes only.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};
use tracing::{instrument, warn};

use super::admission::{Admission, Permit, Refusal};
use super::convert;
use super::gate::Slot;
use super::pb;
use super::status::{code_label, refusal_status, to_status};
use crate::assemble::{self as domain, AssembleError, Assembler, Cancel};
use crate::telemetry::metrics;

/// The service over a shared [`Assembler`].
#[derive(Debug, Clone)]
pub struct AssemblerService {
    assembler: Arc<Assembler>,
    admission: Admission,
}

impl AssemblerService {
    /// A service over `assembler`, admitting requests by `admission`.
    pub fn new(assembler: Arc<Assembler>, admission: Admission) -> Self {
        AssemblerService { assembler, admission }
    }
}

/// Counts a refusal and turns it into its status.
fn refuse(rpc: &'static str, refusal: Refusal) -> Status {
    metrics::refused(rpc, refusal.reason());
    refusal_status(&refusal)
}

/// The slot the gate admitted `request` with; without a gate (or one that
/// did not admit it), one is taken here.
fn slot<T>(admission: &Admission, request: &mut Request<T>) -> Result<Permit, Refusal> {
    match request.extensions_mut().remove::<Slot>().and_then(|s| s.take()) {
        Some(permit) => Ok(permit),
        None => admission.admit(),
    }
}

/// Sets the cancellation flag when dropped: when the gate's deadline drops
/// the handler, and when the caller goes away.
struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs CPU-bound domain work on the blocking pool, holding `permit` until
/// the work itself ends. A panic there becomes INTERNAL instead of taking the
/// connection down.
async fn blocking<T: Send + 'static>(
    permit: Permit,
    f: impl FnOnce(&Cancel) -> T + Send + 'static,
) -> Result<T, Status> {
    let cancel = Cancel::new();
    let _on_drop = CancelOnDrop(cancel.clone());
    let span = tracing::Span::current();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        span.in_scope(|| f(&cancel))
    });
    task.await.map_err(|e| {
        // Never the panic payload: it may quote request content.
        warn!(panicked = e.is_panic(), "domain task failed");
        Status::internal("internal error while assembling")
    })
}

/// Records the RPC's metrics and its span's `code` field.
fn finish<T>(rpc: &'static str, started: Instant, result: Result<T, Status>) -> Result<Response<T>, Status> {
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    };
    tracing::Span::current().record("code", code_label(code));
    metrics::request(rpc, code_label(code), started.elapsed());
    result.map(Response::new)
}

#[tonic::async_trait]
impl pb::assembler_server::Assembler for AssemblerService {
    #[instrument(skip_all, fields(rpc = "Assemble", request_id, model, blocks, code))]
    async fn assemble(
        &self,
        mut request: Request<pb::AssembleRequest>,
    ) -> Result<Response<pb::AssembleResponse>, Status> {
        const RPC: &str = "Assemble";
        let started = Instant::now();
        let permit = slot(&self.admission, &mut request);
        let wire = request.into_inner();
        let span = tracing::Span::current();
        span.record("request_id", wire.request_id.as_str());
        span.record("model", wire.model.as_str());
        span.record("blocks", wire.blocks.len());
        let result = async {
            let items = wire.blocks.iter().map(|b| b.items.len()).sum();
            self.admission
                .check_shape(wire.blocks.len(), items)
                .map_err(|r| refuse(RPC, r))?;
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let req = domain::AssembleRequest::try_from(wire).map_err(|e| to_status(&e))?;
            let assembler = self.assembler.clone();
            let outcome = blocking(permit, move |cancel| assembler.assemble_cancellable(req, cancel)).await?;
            match outcome {
                Ok(a) => {
                    metrics::assembly(&a);
                    Ok(pb::AssembleResponse::from(a))
                }
                Err(e) => {
                    if let AssembleError::BudgetOverflow { model, .. } = &e {
                        metrics::budget_overflow(model.clone());
                    }
                    Err(to_status(&e))
                }
            }
        }
        .await;
        finish(RPC, started, result)
    }

    #[instrument(skip_all, fields(rpc = "CountTokens", bytes, code))]
    async fn count_tokens(
        &self,
        mut request: Request<pb::CountTokensRequest>,
    ) -> Result<Response<pb::CountTokensResponse>, Status> {
        const RPC: &str = "CountTokens";
        let started = Instant::now();
        let permit = slot(&self.admission, &mut request);
        let wire = request.into_inner();
        tracing::Span::current().record("bytes", wire.text.len());
        let result = async {
            let permit = permit.map_err(|r| refuse(RPC, r))?;
            let target = convert::count_target(wire.tokenizer).map_err(|e| to_status(&e))?;
            let text = wire.text;
            let assembler = self.assembler.clone();
            let count = blocking(permit, move |_| assembler.count_tokens(&target, &text))
                .await?
                .map_err(|e| to_status(&e))?;
            Ok(pb::CountTokensResponse {
                tokens: count.tokens,
                tokenizer: count.tokenizer,
                exact: count.exact,
            })
        }
        .await;
        finish(RPC, started, result)
    }

    #[instrument(skip_all, fields(rpc = "ListModels", code))]
    async fn list_models(
        &self,
        _request: Request<pb::ListModelsRequest>,
    ) -> Result<Response<pb::ListModelsResponse>, Status> {
        let started = Instant::now();
        let result = Ok(convert::model_infos(&self.assembler.catalog().models));
        finish("ListModels", started, result)
    }
}
