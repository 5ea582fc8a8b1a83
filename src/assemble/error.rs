//! Why an assembly failed; `grpc::status` maps it to gRPC codes.

use crate::vocab::violation::describe;
use crate::vocab::{Cancelled, FieldViolation};

/// Why a request could not be assembled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AssembleError {
    /// The request is malformed; every bad field is listed.
    #[error("invalid request: {}", describe(.0))]
    InvalidArgument(Vec<FieldViolation>),
    /// Content that may never be cut does not fit the budget.
    #[error(
        "non-cuttable content ({non_cuttable_tokens} tokens) exceeds the budget ({budget}) of model {model}: fix priorities, output_reserve or max_input_tokens"
    )]
    BudgetOverflow {
        /// Tokens of the static prefix, query, non-cuttable blocks and overheads.
        non_cuttable_tokens: u64,
        /// The input budget.
        budget: u32,
        /// The model table entry.
        model: String,
    },
    /// The model's chat template refuses the prompt laid out for it (after
    /// conforming it to what the template was found to need): the prompt is
    /// not sent, since the engine would refuse it too.
    #[error("the chat template of model {model} refuses the assembled prompt: {reason}")]
    TemplateRefused {
        /// The model table entry.
        model: String,
        /// The template's own message (its `raise_exception` text) or the
        /// engine's description of the failure; never prompt content.
        reason: String,
    },
    /// The request was cancelled (deadline or caller gone) before it finished.
    #[error("cancelled before the prompt was assembled")]
    Cancelled,
}

impl AssembleError {
    /// A stable upper-case code for the error (JSON answers: `assemble
    /// --jsonl`, the preview page's API).
    pub fn code(&self) -> &'static str {
        match self {
            AssembleError::InvalidArgument(_) => "INVALID_ARGUMENT",
            AssembleError::BudgetOverflow { .. } => "BUDGET_OVERFLOW",
            AssembleError::TemplateRefused { .. } => "TEMPLATE_REFUSED",
            AssembleError::Cancelled => "CANCELLED",
        }
    }

    /// An invalid-argument error about one field.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        AssembleError::InvalidArgument(vec![FieldViolation::new(field, description)])
    }
}

impl From<Cancelled> for AssembleError {
    fn from(_: Cancelled) -> Self {
        AssembleError::Cancelled
    }
}
