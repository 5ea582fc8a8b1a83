//! The one error type of the domain; `grpc::status` maps it to gRPC codes.

/// A field of the request that is wrong, named by its proto path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldViolation {
    /// Proto path, e.g. `blocks[2].min_tokens`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

impl FieldViolation {
    /// A violation of `field`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        FieldViolation {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// Why a request could not be assembled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AssembleError {
    /// The request is malformed; every bad field is listed.
    #[error("invalid request: {}", summarize(.0))]
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
    /// The request was cancelled (deadline or caller gone) before it finished.
    #[error("cancelled before the prompt was assembled")]
    Cancelled,
}

impl AssembleError {
    /// An invalid-argument error about one field.
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        AssembleError::InvalidArgument(vec![FieldViolation::new(field, description)])
    }
}

fn summarize(violations: &[FieldViolation]) -> String {
    violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ")
}
