//! The provider feedback loop: gateways report what the provider counted and
//! cached for a request; the sidecar compares it with its own count (kept
//! briefly by request id) and exports both.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::telemetry::metrics;

/// Provider labels; any other name counts as `other`.
pub const PROVIDERS: [&str; 7] = [
    "openai",
    "anthropic",
    "bedrock",
    "gemini",
    "azure",
    "vertex",
    "self_hosted",
];
/// How long an assembled request's count is kept for its report.
pub const REMEMBER_FOR: Duration = Duration::from_secs(900);
/// Most request counts kept.
const REMEMBER_AT_MOST: u64 = 100_000;

/// The bounded label of a provider name.
pub fn provider_label(provider: &str) -> &'static str {
    let lower = provider.to_ascii_lowercase();
    PROVIDERS.into_iter().find(|p| *p == lower).unwrap_or("other")
}

/// What a gateway reports after the provider answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageReport {
    /// The request's id, as sent to Assemble.
    pub request_id: String,
    /// The provider's name.
    pub provider: String,
    /// Prompt tokens the provider counted.
    pub prompt_tokens: u32,
    /// Cached prompt tokens (OpenAI `cached_tokens`).
    pub cached_tokens: u32,
    /// Cache-read tokens (Anthropic/Bedrock).
    pub cache_read_tokens: u32,
    /// Cache-creation tokens (Anthropic/Bedrock).
    pub cache_creation_tokens: u32,
}

/// The comparison made for a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// The sidecar's count for the request (prompt plus tools).
    pub ours: u32,
    /// `(ours - provider) / provider`.
    pub relative_error: f64,
}

/// Recent request counts, by request id.
#[derive(Clone)]
pub struct Feedback {
    recent: Cache<String, (Arc<str>, u32)>,
}

impl std::fmt::Debug for Feedback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feedback").finish_non_exhaustive()
    }
}

impl Default for Feedback {
    fn default() -> Self {
        Feedback {
            recent: Cache::builder()
                .max_capacity(REMEMBER_AT_MOST)
                .time_to_live(REMEMBER_FOR)
                .build(),
        }
    }
}

impl Feedback {
    /// Keeps `tokens` (the prompt plus tools) of request `request_id`,
    /// assembled for model-table entry `model`.
    pub fn remember(&self, request_id: &str, model: &str, tokens: u32) {
        if !request_id.is_empty() {
            self.recent
                .insert(request_id.to_owned(), (Arc::from(model), tokens));
        }
    }

    /// Records a report: provider totals always; the relative error when the
    /// request is still remembered and the provider counted something.
    pub fn report(&self, r: &UsageReport) -> Option<Comparison> {
        let provider = provider_label(&r.provider);
        metrics::provider_usage(
            provider,
            u64::from(r.prompt_tokens),
            u64::from(r.cached_tokens) + u64::from(r.cache_read_tokens),
        );
        let (model, ours) = self.recent.get(&r.request_id)?;
        if r.prompt_tokens == 0 {
            return None;
        }
        let relative_error = (f64::from(ours) - f64::from(r.prompt_tokens)) / f64::from(r.prompt_tokens);
        metrics::count_error(model.to_string(), relative_error);
        Some(Comparison { ours, relative_error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_compare_with_the_remembered_count() {
        let f = Feedback::default();
        f.remember("r1", "gpt-4o", 110);
        let report = |id: &str, prompt| UsageReport {
            request_id: id.to_owned(),
            provider: "OpenAI".to_owned(),
            prompt_tokens: prompt,
            ..UsageReport::default()
        };
        let c = f.report(&report("r1", 100)).unwrap();
        assert_eq!(c.ours, 110);
        assert!((c.relative_error - 0.1).abs() < 1e-9);
        assert_eq!(f.report(&report("unknown", 100)), None);
        assert_eq!(f.report(&report("r1", 0)), None);
        f.remember("", "gpt-4o", 5);
        assert_eq!(f.report(&report("", 5)), None, "no id, nothing kept");
    }

    #[test]
    fn provider_labels_are_bounded() {
        assert_eq!(provider_label("Anthropic"), "anthropic");
        assert_eq!(provider_label("my-own-llm"), "other");
    }
}
