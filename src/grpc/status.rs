//! The one map from domain errors to gRPC status, with rich details.

use prost::Message as _;
use tonic::{Code, Status};
use tonic_types::pb as rpc;
use tonic_types::{ErrorDetails, StatusExt};

use super::admission::Refusal;
use super::auth::{CLAIM_IDENTITY, Denied, REASON_CLAIM_DENIED};
use super::convert::kind_to_wire;
use super::pb;
use crate::assemble::AssembleError;
use crate::assemble::error::Needs;
use crate::assemble::flow::FlowError;
use crate::compact::CompactError;
use crate::memory::MemoryError;
use crate::memory::store::StoreError;
use crate::telemetry::metrics;
use crate::vocab::{FieldViolation, saturating_u32};

/// `ErrorInfo.domain` of our errors.
pub const ERROR_DOMAIN: &str = "context-assembler";
/// `ErrorInfo.reason` when non-cuttable content exceeds the budget.
pub const REASON_BUDGET_OVERFLOW: &str = "BUDGET_OVERFLOW";
/// `ErrorInfo.reason` when the model's chat template refuses the prompt.
pub const REASON_TEMPLATE_REFUSED: &str = "TEMPLATE_REFUSED";
/// `ErrorInfo.reason` when the concurrency limit sheds a request.
pub const REASON_OVERLOADED: &str = "OVERLOADED";
/// `ErrorInfo.reason` when a request message exceeds the size limit.
pub const REASON_REQUEST_TOO_LARGE: &str = "REQUEST_TOO_LARGE";
/// `ErrorInfo.reason` when a request has more blocks than allowed.
pub const REASON_TOO_MANY_BLOCKS: &str = "TOO_MANY_BLOCKS";
/// `ErrorInfo.reason` when a request has more items than allowed.
pub const REASON_TOO_MANY_ITEMS: &str = "TOO_MANY_ITEMS";
/// `ErrorInfo.reason` when a batch has more requests than allowed.
pub const REASON_TOO_MANY_REQUESTS: &str = "TOO_MANY_REQUESTS";
/// `ErrorInfo.reason` when a message would take too much memory to decode.
pub const REASON_REQUEST_TOO_COMPLEX: &str = "REQUEST_TOO_COMPLEX";
/// `ErrorInfo.reason` when a draining sidecar admits no new message.
pub const REASON_SHUTTING_DOWN: &str = "SHUTTING_DOWN";
/// `ErrorInfo.reason` when the sidecar runs without a memory store.
pub const REASON_MEMORY_DISABLED: &str = "MEMORY_DISABLED";
/// `ErrorInfo.reason` when the memory store cannot be reached.
pub const REASON_MEMORY_UNAVAILABLE: &str = "MEMORY_UNAVAILABLE";
/// The back-off a shed request is told to wait (`google.rpc.RetryInfo`).
const SHED_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(50);
/// The back-off a call is told to wait when the memory store cannot answer
/// (`google.rpc.RetryInfo`): long enough for a reconnect attempt.
pub const MEMORY_RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Violations an error lists (in the message and the `BadRequest` detail,
/// and in the preview's error body); it then says how many more there were.
pub const MAX_REPORTED_VIOLATIONS: usize = 16;
/// Characters kept of one field path or description.
pub const MAX_VIOLATION_CHARS: usize = 100;

/// The violations an error reports, as (field, description) with each
/// clipped to [`MAX_VIOLATION_CHARS`] characters, at most
/// [`MAX_REPORTED_VIOLATIONS`] of them; and how many more there were.
///
/// Bounded: every header a client accepts has a size limit (10,000
/// violations made one the client refused, failing the whole connection),
/// and a description may quote an id of any length.
pub fn reported_violations(violations: &[FieldViolation]) -> (Vec<(String, String)>, usize) {
    let clip = |s: &str| -> String {
        match s.char_indices().nth(MAX_VIOLATION_CHARS) {
            Some((at, _)) => format!("{}...", &s[..at]),
            None => s.to_owned(),
        }
    };
    let reported = violations
        .iter()
        .take(MAX_REPORTED_VIOLATIONS)
        .map(|v| (clip(&v.field), clip(&v.description)))
        .collect();
    (reported, violations.len().saturating_sub(MAX_REPORTED_VIOLATIONS))
}

/// The message of an INVALID_ARGUMENT for the [`reported_violations`].
pub fn invalid_message(reported: &[(String, String)], more: usize) -> String {
    let mut message = String::from("invalid request: ");
    for (i, (field, description)) in reported.iter().enumerate() {
        if i > 0 {
            message.push_str("; ");
        }
        message.push_str(&format!("{field}: {description}"));
    }
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    message
}

/// INVALID_ARGUMENT listing the bad fields in the message and a
/// `BadRequest` detail, clipped ([`reported_violations`]).
pub fn invalid_status(violations: &[FieldViolation]) -> Status {
    let (reported, more) = reported_violations(violations);
    let message = invalid_message(&reported, more);
    let mut details = ErrorDetails::new();
    for (field, description) in reported {
        details.add_bad_request_violation(field, description);
    }
    Status::with_error_details(Code::InvalidArgument, message, details)
}

/// The status for an assembly error.
pub fn to_status(err: &AssembleError) -> Status {
    match err {
        AssembleError::InvalidArgument(violations) => invalid_status(violations),
        AssembleError::BudgetOverflow {
            non_cuttable_tokens,
            budget,
            model,
            needs,
        } => {
            let info = rpc::ErrorInfo {
                reason: REASON_BUDGET_OVERFLOW.to_owned(),
                domain: ERROR_DOMAIN.to_owned(),
                metadata: [
                    ("non_cuttable_tokens".to_owned(), non_cuttable_tokens.to_string()),
                    ("budget".to_owned(), budget.to_string()),
                    ("model".to_owned(), model.clone()),
                ]
                .into(),
            };
            let detail = overflow_detail(*non_cuttable_tokens, *budget, model, needs);
            let details = vec![
                packed("google.rpc.ErrorInfo", &info),
                packed("context_assembler.v1.BudgetOverflowDetail", &detail),
            ];
            status_with(Code::FailedPrecondition, err.to_string(), details)
        }
        AssembleError::TemplateRefused { model, .. } => {
            let details = ErrorDetails::with_error_info(
                REASON_TEMPLATE_REFUSED,
                ERROR_DOMAIN,
                [("model".to_owned(), model.clone())],
            );
            Status::with_error_details(Code::FailedPrecondition, err.to_string(), details)
        }
        AssembleError::Cancelled => Status::cancelled(err.to_string()),
    }
}

/// Blocks a `BudgetOverflowDetail` lists, most tokens first: the whole
/// status must stay well inside the smallest header list a client accepts
/// (8 KiB in grpc-java), so each listed name is clipped too
/// ([`MAX_BLOCK_NAME_BYTES`]).
pub const MAX_REPORTED_BLOCKS: usize = 16;
/// Bytes kept of a block's name in a `BudgetOverflowDetail` (cut at a
/// character boundary).
pub const MAX_BLOCK_NAME_BYTES: usize = 64;

/// The wire form of an overflow's parts: at most [`MAX_REPORTED_BLOCKS`]
/// blocks, the rest counted in `more_blocks`.
fn overflow_detail(
    non_cuttable_tokens: u64,
    budget: u32,
    model: &str,
    needs: &Needs,
) -> pb::BudgetOverflowDetail {
    let blocks = needs.blocks.iter().take(MAX_REPORTED_BLOCKS);
    pb::BudgetOverflowDetail {
        model: model.to_owned(),
        budget,
        non_cuttable_tokens,
        static_prefix_tokens: needs.static_prefix,
        tools_tokens: needs.tools,
        query_tokens: needs.query,
        framing_tokens: needs.framing,
        blocks: blocks
            .map(|b| pb::BlockNeed {
                name: clip_bytes(&b.name, MAX_BLOCK_NAME_BYTES).to_owned(),
                index: saturating_u32(b.index),
                kind: kind_to_wire(b.kind) as i32,
                tokens: b.tokens,
                cuttable: b.cuttable,
            })
            .collect(),
        more_blocks: saturating_u32(needs.blocks.len().saturating_sub(MAX_REPORTED_BLOCKS)),
        template_tokens: needs.template,
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends at a
/// character boundary.
fn clip_bytes(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `message` packed as a `google.protobuf.Any` of type `name`.
fn packed(name: &str, message: &impl prost::Message) -> prost_types::Any {
    prost_types::Any {
        type_url: format!("type.googleapis.com/{name}"),
        value: message.encode_to_vec(),
    }
}

/// A status whose `grpc-status-details-bin` is a `google.rpc.Status` with
/// `details` (for details beyond the standard ones).
fn status_with(code: Code, message: String, details: Vec<prost_types::Any>) -> Status {
    let encoded = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details,
    }
    .encode_to_vec();
    Status::with_details(code, message, encoded.into())
}

/// The status for a compaction error.
pub fn compact_status(err: &CompactError) -> Status {
    match err {
        CompactError::InvalidArgument(violations) => invalid_status(violations),
        CompactError::Cancelled => Status::cancelled(err.to_string()),
    }
}

/// The status for a memory error. Store failures are logged here (their
/// text names tables and positions, never memory content) and answered
/// without detail.
pub fn memory_status(err: &MemoryError) -> Status {
    match err {
        MemoryError::Invalid(violations) => invalid_status(violations),
        MemoryError::Disabled => Status::with_error_details(
            Code::FailedPrecondition,
            err.to_string(),
            ErrorDetails::with_error_info(REASON_MEMORY_DISABLED, ERROR_DOMAIN, []),
        ),
        MemoryError::Store(StoreError::Unavailable(e)) => {
            tracing::warn!(err = %e, "memory store unavailable");
            let mut details = ErrorDetails::with_error_info(REASON_MEMORY_UNAVAILABLE, ERROR_DOMAIN, []);
            details.set_retry_info(Some(MEMORY_RETRY_DELAY));
            Status::with_error_details(Code::Unavailable, "memory store unavailable; retry", details)
        }
        MemoryError::Store(e) => {
            tracing::error!(err = %e, "memory store failed");
            Status::internal("memory store failed")
        }
    }
}

/// The status of a failed Assemble flow: each domain error by its own map,
/// a panic as INTERNAL (never its payload, which may quote content).
pub fn flow_status(err: &FlowError<Refusal>) -> Status {
    match err {
        FlowError::Assemble(e) => to_status(e),
        FlowError::Memory(e) => memory_status(e),
        FlowError::Invalid(v) => invalid_status(v),
        FlowError::Refused(r) => refusal_status(r),
        FlowError::Panicked => internal_status("assembling"),
    }
}

/// INTERNAL for work that panicked or was lost while `doing` it: nothing of
/// the request (a panic's payload may quote its content).
pub fn internal_status(doing: &str) -> Status {
    Status::internal(format!("internal error while {doing}"))
}

/// PERMISSION_DENIED for `d` (counted and logged without values).
pub fn denied_status(rpc: &'static str, d: &Denied) -> Status {
    metrics::claim_denied(&d.identity, d.claim);
    tracing::warn!(rpc, identity = %d.identity, claim = d.claim, field = %d.field, "claim denied");
    let message = if d.claim == CLAIM_IDENTITY {
        "permission denied: the client certificate's names match no [[auth.clients]] identity".to_owned()
    } else {
        format!(
            "permission denied: {}: client {} may not claim this {}",
            d.field, d.identity, d.claim
        )
    };
    Status::with_error_details(
        Code::PermissionDenied,
        message,
        ErrorDetails::with_error_info(
            REASON_CLAIM_DENIED,
            ERROR_DOMAIN,
            [
                ("field".to_owned(), d.field.clone()),
                ("claim".to_owned(), d.claim.to_owned()),
                ("identity".to_owned(), d.identity.clone()),
            ],
        ),
    )
}

/// INVALID_ARGUMENT for a message that could not be read as its type
/// (`detail` names the fault and the field path, never content).
pub fn malformed_status(detail: &str) -> Status {
    Status::invalid_argument(format!("malformed request message: {detail}"))
}

/// ABORTED for a request body that ended abnormally (a reset stream).
pub fn broken_body_status() -> Status {
    Status::aborted("request body ended abnormally")
}

/// The status for a request refused before or instead of being worked on.
pub fn refusal_status(refusal: &Refusal) -> Status {
    let message = refusal.to_string();
    let info = |reason: &str, limit: u64, value: u64| {
        ErrorDetails::with_error_info(
            reason,
            ERROR_DOMAIN,
            [
                ("limit".to_owned(), limit.to_string()),
                ("value".to_owned(), value.to_string()),
            ],
        )
    };
    let exhausted = |reason: &str, limit: u64, value: u64| {
        Status::with_error_details(
            Code::ResourceExhausted,
            message.clone(),
            info(reason, limit, value),
        )
    };
    match *refusal {
        Refusal::Overloaded { limit } => {
            let mut details = info(REASON_OVERLOADED, u64::from(limit), u64::from(limit));
            details.set_retry_info(Some(SHED_RETRY_DELAY));
            Status::with_error_details(Code::ResourceExhausted, message, details)
        }
        Refusal::UploadBudget { budget_bytes } => {
            let mut details = info(REASON_OVERLOADED, budget_bytes, budget_bytes);
            details.set_retry_info(Some(SHED_RETRY_DELAY));
            Status::with_error_details(Code::ResourceExhausted, message, details)
        }
        Refusal::TooManyRequests { count, limit } => {
            exhausted(REASON_TOO_MANY_REQUESTS, u64::from(limit), count as u64)
        }
        Refusal::TooComplex { decoded_bytes, limit } => {
            exhausted(REASON_REQUEST_TOO_COMPLEX, limit, decoded_bytes)
        }
        Refusal::TooLarge { bytes, limit } => {
            exhausted(REASON_REQUEST_TOO_LARGE, u64::from(limit), u64::from(bytes))
        }
        Refusal::TooManyBlocks { count, limit } => {
            exhausted(REASON_TOO_MANY_BLOCKS, u64::from(limit), count as u64)
        }
        Refusal::TooManyItems { count, limit } => {
            exhausted(REASON_TOO_MANY_ITEMS, u64::from(limit), count as u64)
        }
        Refusal::DeadlineExceeded => Status::deadline_exceeded(message),
    }
}

/// UNAVAILABLE for a stream's next message once the server drains (the
/// client retries it on another instance).
pub fn shutting_down_status() -> Status {
    Status::with_error_details(
        Code::Unavailable,
        "the sidecar is shutting down: this stream admits no new message; retry on another instance",
        ErrorDetails::with_error_info(REASON_SHUTTING_DOWN, ERROR_DOMAIN, []),
    )
}

/// UNAVAILABLE for a call still unanswered when the drain deadline ran out
/// (the client retries it on another instance).
pub fn abandoned_status() -> Status {
    Status::with_error_details(
        Code::Unavailable,
        "the sidecar is shutting down: its drain deadline ran out before this call was answered; \
         retry on another instance",
        ErrorDetails::with_error_info(REASON_SHUTTING_DOWN, ERROR_DOMAIN, []),
    )
}

/// A bounded label for a status code: its name in [`metrics::GRPC_CODES`],
/// which is indexed by the code's number.
pub fn code_label(code: Code) -> &'static str {
    metrics::GRPC_CODES
        .get(code as usize)
        .copied()
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::error::BlockNeed;
    use crate::prompt::BlockKind;

    /// However many blocks overflow and however long their names, the
    /// status fits a client's 8 KiB header list (grpc-java's default), and
    /// what is left out is counted.
    #[test]
    fn an_overflow_detail_is_bounded_and_counts_what_it_leaves_out() {
        let blocks: Vec<BlockNeed> = (0..64)
            .map(|i| BlockNeed {
                index: i,
                name: format!("{i:02}{}", "é".repeat(127)),
                kind: BlockKind::State,
                tokens: 1000 - i as u64,
                cuttable: false,
            })
            .collect();
        let needs = Needs {
            static_prefix: 5,
            blocks,
            ..Needs::default()
        };
        let err = AssembleError::BudgetOverflow {
            non_cuttable_tokens: needs.total(),
            budget: 100,
            model: "gpt-4o".to_owned(),
            needs: Box::new(needs),
        };
        let status = to_status(&err);
        // Base64 in the trailer, beside the message.
        assert!(
            status.details().len() * 4 / 3 + status.message().len() < 4096,
            "{}",
            status.details().len()
        );
        let decoded = rpc::Status::decode(status.details()).unwrap();
        assert_eq!(decoded.code, Code::FailedPrecondition as i32);
        let detail = decoded
            .details
            .iter()
            .find(|a| a.type_url.ends_with(".BudgetOverflowDetail"))
            .unwrap();
        let detail = pb::BudgetOverflowDetail::decode(detail.value.as_slice()).unwrap();
        assert_eq!(
            (detail.blocks.len(), detail.more_blocks),
            (MAX_REPORTED_BLOCKS, 48)
        );
        assert_eq!(detail.blocks[0].name, format!("00{}", "é".repeat(31)));
        assert_eq!(detail.blocks[15].index, 15);
        assert_eq!(
            status.get_details_error_info().unwrap().reason,
            REASON_BUDGET_OVERFLOW
        );
    }

    /// The label of every code is its name in SCREAMING_SNAKE_CASE.
    #[test]
    fn every_code_is_labelled_by_its_name() {
        for n in 0..=16 {
            let code = Code::from_i32(n);
            let mut name = String::new();
            for (k, c) in format!("{code:?}").chars().enumerate() {
                if c.is_uppercase() && k > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            assert_eq!(code_label(code), name);
        }
        assert_eq!(metrics::GRPC_CODES.len(), 17);
    }
}
