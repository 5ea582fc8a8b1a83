//! Why a compaction failed; `grpc::status` maps it to gRPC codes.

use crate::vocab::violation::describe;
use crate::vocab::{Cancelled, FieldViolation};

/// Why a conversation could not be compacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactError {
    /// The request is malformed; every bad field is listed.
    #[error("invalid request: {}", describe(.0))]
    InvalidArgument(Vec<FieldViolation>),
    /// The request was cancelled (deadline or caller gone) before it finished.
    #[error("cancelled before the conversation was compacted")]
    Cancelled,
}

impl From<Cancelled> for CompactError {
    fn from(_: Cancelled) -> Self {
        CompactError::Cancelled
    }
}
