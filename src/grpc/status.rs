//! The one map from domain errors to gRPC status, with rich details.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::assemble::AssembleError;

/// `ErrorInfo.domain` of our errors.
pub const ERROR_DOMAIN: &str = "context-assembler";
/// `ErrorInfo.reason` when non-cuttable content exceeds the budget.
pub const REASON_BUDGET_OVERFLOW: &str = "BUDGET_OVERFLOW";

/// The status for a domain error.
pub fn to_status(err: &AssembleError) -> Status {
    match err {
        AssembleError::InvalidArgument(violations) => {
            let mut details = ErrorDetails::new();
            for v in violations {
                details.add_bad_request_violation(v.field.clone(), v.description.clone());
            }
            Status::with_error_details(Code::InvalidArgument, err.to_string(), details)
        }
        AssembleError::BudgetOverflow {
            non_cuttable_tokens,
            budget,
            model,
        } => {
            let details = ErrorDetails::with_error_info(
                REASON_BUDGET_OVERFLOW,
                ERROR_DOMAIN,
                [
                    ("non_cuttable_tokens".to_owned(), non_cuttable_tokens.to_string()),
                    ("budget".to_owned(), budget.to_string()),
                    ("model".to_owned(), model.clone()),
                ],
            );
            Status::with_error_details(Code::FailedPrecondition, err.to_string(), details)
        }
    }
}

/// A bounded label for a status code.
pub fn code_label(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
