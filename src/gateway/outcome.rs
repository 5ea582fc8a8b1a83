//! What the fit made of a request: fitted (or already fitting), passed on
//! untouched and why, or refused in the provider's shape. Each edge
//! converts an [`Outcome`] into its own answer.

use crate::prompt::Sources;

/// Why a request was passed on untouched (a bounded metric label each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Not a path the fit knows, or not a POST.
    Path,
    /// The body is not its API's JSON.
    Malformed,
    /// Valid JSON, but not a chat request.
    NotChat,
    /// A part the fit does not know how to cut.
    Unsupported,
    /// The model table has no such model.
    UnknownModel,
    /// The assembler refused the request as given (a duplicate call id, an
    /// unknown policy, a budget the window cannot hold).
    Invalid,
    /// Every work slot was taken.
    Overloaded,
    /// The server is draining.
    Draining,
    /// A continuation over its budget: what came before is the
    /// provider's, so it is not refused here.
    Continued,
    /// The assembly's messages could not be matched to the body's.
    Layout,
    /// The work failed (cancelled, panicked).
    Failed,
    /// More messages or turns than `limits.max_items`.
    TooMany,
    /// A full-duplex upload stalled, or its body found no room in the
    /// upload budget: passed on as it came.
    Stalled,
}

impl Pass {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Pass::Path => "path",
            Pass::Malformed => "malformed",
            Pass::NotChat => "not_chat",
            Pass::Unsupported => "unsupported",
            Pass::UnknownModel => "unknown_model",
            Pass::Invalid => "invalid",
            Pass::Overloaded => "overloaded",
            Pass::Draining => "draining",
            Pass::Continued => "continued",
            Pass::Layout => "layout",
            Pass::Failed => "failed",
            Pass::TooMany => "too_many_turns",
            Pass::Stalled => "stalled",
        }
    }

    /// Every reason, for starting the series at zero.
    pub const ALL: [Pass; 13] = [
        Pass::Path,
        Pass::Malformed,
        Pass::NotChat,
        Pass::Unsupported,
        Pass::UnknownModel,
        Pass::Invalid,
        Pass::Overloaded,
        Pass::Draining,
        Pass::Continued,
        Pass::Layout,
        Pass::Failed,
        Pass::TooMany,
        Pass::Stalled,
    ];
}

/// A refusal in the provider's own shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The provider's error body.
    pub body: String,
    /// The metric label (`context_length_exceeded`, `too_large`,
    /// `malformed`, `unknown_model`, `overloaded`).
    pub reason: &'static str,
}

/// A request fitted (or found to fit as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    /// The body to send; `None`: the caller's, unchanged.
    pub body: Option<String>,
    /// The prompt's input tokens, as the provider bills them.
    pub input_tokens: u32,
    /// Whether that count is the provider's own (else an estimate).
    pub exact: bool,
    /// Where `input_tokens` came from (they add up to it): none estimated
    /// when `exact`.
    pub sources: Sources,
    /// The static prefix's hash.
    pub prefix_hash: String,
    /// Turns not sent.
    pub turns_cut: u32,
    /// Tool results sent cleared.
    pub results_cleared: u32,
    /// Tokens the fit took out of the conversation.
    pub tokens_cut: u64,
    /// Whether the conversation itself changed (turns cut, cleared or
    /// summarized); a body with only cache fields added did not.
    pub changed: bool,
}

/// What the fit made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed on untouched, and why.
    Passed(Pass),
    /// Fitted, or already fitting.
    Fitted(Fitted),
    /// Refused.
    Refused(Refusal),
}

impl Outcome {
    /// The `outcome` metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Passed(_) => "passed",
            Outcome::Fitted(f) if f.changed => "fitted",
            Outcome::Fitted(_) => "unchanged",
            Outcome::Refused(_) => "refused",
        }
    }

    /// The `reason` metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Outcome::Passed(p) => p.as_str(),
            Outcome::Fitted(_) => "none",
            Outcome::Refused(r) => r.reason,
        }
    }
}
