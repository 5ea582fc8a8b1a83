//! Why an assembly failed; `grpc::status` maps it to gRPC codes.

use crate::prompt::BlockKind;
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
        /// What each part that may never be cut needs.
        needs: Box<Needs>,
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

/// What each part of a request that may never be cut needs of a budget it
/// overflowed, so a caller can decide what to drop. The parts add up to the
/// overflow's `non_cuttable_tokens` ([`Needs::total`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Needs {
    /// The static prefix's segments, as messages.
    pub static_prefix: u64,
    /// The tool definitions.
    pub tools: u64,
    /// The query's message.
    pub query: u64,
    /// Fixed per-prompt overheads of the model's formula (the reply's
    /// priming).
    pub framing: u64,
    /// The blocks with parts that may never be cut, most tokens first (ties
    /// in request order).
    pub blocks: Vec<BlockNeed>,
    /// What the rendered prompt adds beyond the parts (a chat template's
    /// markup, known only once rendered); 0 without a template.
    pub template: u64,
}

impl Needs {
    /// The tokens of all the parts.
    pub fn total(&self) -> u64 {
        self.static_prefix
            + self.tools
            + self.query
            + self.framing
            + self.template
            + self.blocks.iter().map(|b| b.tokens).sum::<u64>()
    }
}

/// What one block needs of a budget that overflowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockNeed {
    /// Position in the request's blocks.
    pub index: usize,
    /// The block's name.
    pub name: String,
    /// Its kind.
    pub kind: BlockKind,
    /// Tokens of its parts that may never be cut, with the opening of the
    /// message they are the first to open.
    pub tokens: u64,
    /// Whether the rest of the block may be cut (only pinned items are
    /// reserved).
    pub cuttable: bool,
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
