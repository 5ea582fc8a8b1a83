//! Refusals in the provider's own error shape: OpenAI's `{"error": {...}}`
//! or Anthropic's `{"type": "error", "error": {...}}`, with the message of
//! what does not fit.

use super::body::Api;
use super::outcome::Refusal;
use crate::assemble::error::Needs;

/// The message of a refusal for a budget overflow: what does not fit.
pub(super) fn overflow_message(needed: u64, budget: u32, model: &str, needs: &Needs) -> String {
    let newest: u64 = needs.blocks.iter().map(|b| b.tokens).sum();
    let mut parts = Vec::new();
    for (what, n) in [
        ("the system prompt", needs.static_prefix),
        ("the tools", needs.tools),
        ("the newest turn", newest),
        ("the chat format", needs.framing + needs.template),
    ] {
        if n > 0 {
            parts.push(format!("{what} {n}"));
        }
    }
    format!(
        "This request needs at least {needed} input tokens, over its budget of {budget} for model {model}, \
         although older turns may be cut: {}. Shorten what is never cut, or raise max_tokens' room.",
        parts.join(", ")
    )
}

/// A refusal in `api`'s error shape.
pub fn refusal(api: Api, status: u16, reason: &'static str, param: &str, message: &str) -> Refusal {
    let body = if api.anthropic() {
        let kind = match status {
            413 => "request_too_large",
            429 => "rate_limit_error",
            _ => "invalid_request_error",
        };
        serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        let (kind, code) = match (status, reason) {
            (413, _) => ("invalid_request_error", "request_too_large"),
            (429, _) => ("rate_limit_error", "rate_limit_exceeded"),
            (_, "context_length_exceeded") => ("invalid_request_error", "context_length_exceeded"),
            (_, "unknown_model") => ("invalid_request_error", "model_not_found"),
            _ => ("invalid_request_error", "invalid_request"),
        };
        let param = (!param.is_empty()).then_some(param);
        serde_json::json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
    };
    Refusal {
        status,
        body: body.to_string(),
        reason,
    }
}

/// The 429 of a sidecar over its limits.
pub fn overloaded(api: Api) -> Refusal {
    let message = "the context assembler is over its limits; retry shortly";
    refusal(api, 429, "overloaded", "", message)
}

/// The 413 of a body over the limit.
pub fn too_large(api: Api, bytes: usize, limit: usize) -> Refusal {
    let message = format!("the request body ({bytes} bytes) is over the limit of {limit} bytes");
    refusal(api, 413, "too_large", "", &message)
}

/// A caller's string as quoted in a message: at most 64 characters.
pub(super) fn clip(s: &str) -> &str {
    s.char_indices().nth(64).map_or(s, |(at, _)| &s[..at])
}
