//! What becomes of a call of the service: its answer's wire form and trace
//! attributes, the status of a failure, and the metrics of its outcome.

use std::time::Instant;

use tonic::{Response, Status};

use super::super::admission::{Permit, Refusal};
use super::super::pb;
use super::super::status::{code_label, flow_status, internal_status, refusal_status};
use crate::assemble::flow::{self, Answered, FlowError};
use crate::telemetry::{metrics, trace};
use crate::vocab::Cancel;

/// Sets the trace attributes of an answered Assemble (when traced): sizes,
/// counts and the prefix hash, never content.
pub(super) fn traced(a: &pb::AssembleResponse) {
    if !trace::armed() {
        return;
    }
    if let Some(u) = &a.usage {
        trace::attribute("context_assembler.budget", u.budget);
        trace::attribute("context_assembler.tokens.total", u.total_tokens);
        trace::attribute("context_assembler.tokens.static", u.static_tokens);
        trace::attribute("context_assembler.tokens.dynamic", u.dynamic_tokens);
        trace::attribute("context_assembler.tokenizer", u.tokenizer.as_str());
    }
    if let Some(c) = &a.cache {
        trace::attribute("context_assembler.prefix_hash", c.prefix_hash.as_str());
        trace::attribute("context_assembler.prefix_cache_hit", c.prefix_cache_hit);
    }
    let kept: usize = a.decisions.iter().map(|d| d.kept_item_ids.len()).sum();
    let dropped: usize = a.decisions.iter().map(|d| d.dropped_item_ids.len()).sum();
    trace::attribute("context_assembler.items.kept", kept);
    trace::attribute("context_assembler.items.dropped", dropped);
    trace::attribute("context_assembler.messages", a.messages.len());
    trace::attribute("context_assembler.warnings", a.warnings.len());
    if let Some(r) = &a.recall {
        trace::attribute("context_assembler.memories.recalled", r.recalled_ids.len());
    }
}

/// The wire response of an answered Assemble, with its recall report.
pub(super) fn response(answered: Answered) -> pb::AssembleResponse {
    let mut wire = pb::AssembleResponse::from(answered.assembly);
    wire.recall = answered.recall.map(Into::into);
    wire
}

/// The status of a failed flow; a refusal is counted as the RPC's.
pub(super) fn failed(rpc: &'static str, err: FlowError<Refusal>) -> Status {
    match err {
        FlowError::Refused(r) => refuse(rpc, r),
        e => flow_status(&e),
    }
}

/// Counts a refusal and turns it into its status.
pub(super) fn refuse(rpc: &'static str, refusal: Refusal) -> Status {
    metrics::refused(rpc, refusal.reason());
    refusal_status(&refusal)
}

/// [`flow::blocking`] for an RPC's own domain work: a panic is INTERNAL.
pub(super) async fn blocking<T: Send + 'static>(
    permit: Permit,
    f: impl FnOnce(&Cancel) -> T + Send + 'static,
) -> Result<T, Status> {
    flow::blocking::<_, _, ()>(permit, f)
        .await
        .map_err(|_| internal_status("assembling"))
}

/// Records the RPC's metrics. (The status is not a field of the call's
/// span: no event follows it there, and a field recorded late costs the JSON
/// log format a parse and a rewrite of the span's fields.)
pub(super) fn finish<T>(
    rpc: &'static str,
    started: Instant,
    result: Result<T, Status>,
) -> Result<Response<T>, Status> {
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    };
    metrics::request(rpc, code_label(code), started.elapsed());
    result.map(Response::new)
}
