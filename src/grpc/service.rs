//! The `Assembler` gRPC service: decode, run the domain off the reactor,
//! encode. Records request metrics; logs ids, sizes and codes only.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};
use tracing::{Instrument, info_span, instrument, warn};

use super::convert;
use super::pb;
use super::status::{code_label, to_status};
use crate::assemble::{self as domain, AssembleError, Assembler};
use crate::telemetry::metrics;

/// The service over a shared [`Assembler`].
#[derive(Debug, Clone)]
pub struct AssemblerService {
    assembler: Arc<Assembler>,
}

impl AssemblerService {
    /// A service over `assembler`.
    pub fn new(assembler: Arc<Assembler>) -> Self {
        AssemblerService { assembler }
    }
}

/// Runs CPU-bound domain work on the blocking pool; a panic there becomes
/// INTERNAL instead of taking the connection down.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
        .await
        .map_err(|e| {
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
        request: Request<pb::AssembleRequest>,
    ) -> Result<Response<pb::AssembleResponse>, Status> {
        let started = Instant::now();
        let wire = request.into_inner();
        let span = tracing::Span::current();
        span.record("request_id", wire.request_id.as_str());
        span.record("model", wire.model.as_str());
        span.record("blocks", wire.blocks.len());
        let assembler = self.assembler.clone();
        let result = async move {
            let req = domain::AssembleRequest::try_from(wire).map_err(|e| to_status(&e))?;
            let outcome = blocking(move || assembler.assemble(req)).await?;
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
        .instrument(info_span!("assemble"))
        .await;
        finish("Assemble", started, result)
    }

    #[instrument(skip_all, fields(rpc = "CountTokens", bytes, code))]
    async fn count_tokens(
        &self,
        request: Request<pb::CountTokensRequest>,
    ) -> Result<Response<pb::CountTokensResponse>, Status> {
        let started = Instant::now();
        let wire = request.into_inner();
        tracing::Span::current().record("bytes", wire.text.len());
        let assembler = self.assembler.clone();
        let result = async move {
            let target = convert::count_target(wire.tokenizer).map_err(|e| to_status(&e))?;
            let text = wire.text;
            let count = blocking(move || assembler.count_tokens(&target, &text))
                .await?
                .map_err(|e| to_status(&e))?;
            Ok(pb::CountTokensResponse {
                tokens: count.tokens,
                tokenizer: count.tokenizer,
                exact: count.exact,
            })
        }
        .await;
        finish("CountTokens", started, result)
    }

    #[instrument(skip_all, fields(rpc = "ListModels", code))]
    async fn list_models(
        &self,
        _request: Request<pb::ListModelsRequest>,
    ) -> Result<Response<pb::ListModelsResponse>, Status> {
        let started = Instant::now();
        let result = Ok(convert::model_infos(self.assembler.models()));
        finish("ListModels", started, result)
    }
}
