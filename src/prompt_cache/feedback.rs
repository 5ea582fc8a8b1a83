//! The provider feedback loop: gateways report what the provider counted and
//! cached for a request; the sidecar compares it with its own count (kept
//! briefly by request id) and exports both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::telemetry::metrics;
use crate::tokens::digest;
use crate::tokens::estimate::Features;

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
    /// Cache-write tokens (OpenAI GPT-5.6 and later, `cache_write_tokens`).
    pub cache_write_tokens: u32,
    /// The provider's cache diagnostic, when the gateway has one
    /// (Anthropic's `model_changed`, `system_changed`, `tools_changed`,
    /// `messages_changed`; OpenAI's comparison's reason).
    pub diagnostic: String,
    /// The assistant's answer as the session's next request will send it
    /// (empty: not sent), for the provider to count ahead of that request.
    pub answer: String,
}

/// Provider cache diagnostics counted by name; any other counts as `other`.
pub const DIAGNOSTICS: [&str; 4] = [
    "model_changed",
    "system_changed",
    "tools_changed",
    "messages_changed",
];

/// The bounded label of a provider's cache diagnostic (`None`: none sent).
pub fn diagnostic_label(diagnostic: &str) -> Option<&'static str> {
    if diagnostic.is_empty() {
        return None;
    }
    Some(
        DIAGNOSTICS
            .into_iter()
            .find(|d| d.eq_ignore_ascii_case(diagnostic))
            .unwrap_or("other"),
    )
}

/// What a request's usage report can teach a content estimate: the prompt
/// cost `known` tokens counted by the provider (its learned pieces, its
/// measured frames) and an estimate of texts with `features`; the report's
/// total less `known` is what those texts cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimated {
    /// The tokenizer generation's label.
    pub generation: Arc<str>,
    /// The features of the estimated texts, summed.
    pub features: Features,
    /// The tokens the provider counted.
    pub known: u32,
}

/// What the sidecar keeps of an assembled request for its usage report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    /// The model-table entry it was assembled for.
    pub model: Arc<str>,
    /// The estimate margin its count was made with (0 = exact).
    pub margin_percent: u32,
    /// Its count (prompt plus tools).
    pub tokens: u32,
    /// Tokens its cache plan expected the provider to serve from cache
    /// (0: none expected).
    pub expected_cached: u32,
    /// The first bytes of its static prefix's digest (the prefix whose
    /// expected hits are tracked).
    pub prefix: [u8; 8],
    /// For a request counted by content (a model whose provider counts):
    /// what its report can teach the estimate. Such a request's margin is
    /// not the table's to adapt.
    pub estimated: Option<Box<Estimated>>,
    /// The model as requested, when its provider counts its texts: what an
    /// answer reported for it is counted for.
    pub counted_for: Option<Arc<str>>,
}

/// Consecutive reports of one prefix whose expected hits did not happen
/// before the prefix is flagged.
pub const FLAG_AFTER_MISSES: u32 = 3;
/// How often the time a prefix was last assembled is renewed: the gaps
/// [`Feedback::seen`] answers are at most this much too long, against
/// cache lifetimes of minutes.
pub const SEEN_GRANULARITY: Duration = Duration::from_secs(1);
/// Most prefixes whose misses are tracked.
const PREFIXES_TRACKED: u64 = 10_000;

/// The comparison made for a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The model-table entry the request was assembled for.
    pub model: Arc<str>,
    /// The estimate margin the count was made with (0 = exact).
    pub margin_percent: u32,
    /// The sidecar's count for the request (prompt plus tools).
    pub ours: u32,
    /// `(ours - provider) / provider`.
    pub relative_error: f64,
    /// Tokens the cache plan expected the provider to serve from cache.
    pub expected_cached: u32,
    /// Tokens the provider served from cache.
    pub cached: u32,
    /// Whether an expected hit did not happen: less than half of what was
    /// expected was served.
    pub missed_expected: bool,
    /// Whether the request's prefix has now missed its expected hits
    /// [`FLAG_AFTER_MISSES`] times in a row (the provider evicts or
    /// partitions it).
    pub prefix_flagged: bool,
    /// What the request was estimated by content with, if it was.
    pub estimated: Option<Box<Estimated>>,
    /// The model as requested, when its provider counts its texts.
    pub counted_for: Option<Arc<str>>,
}

/// Reports an estimated model needs before its margin may change.
pub const ADAPT_AFTER_REPORTS: u32 = 20;
/// The least time between two margin changes of one model.
pub const ADAPT_EVERY: Duration = Duration::from_secs(60);
/// Most points one margin change moves the margin: with [`ADAPT_EVERY`],
/// a margin moves at most this much a minute, however many reports arrive.
pub const ADAPT_MAX_STEP_PERCENT: u32 = 15;
/// Headroom kept above the observed under-count, in percent.
pub const ADAPT_HEADROOM_PERCENT: f64 = 2.0;
/// Weight of each new report in the moving average.
const ADAPT_WEIGHT: f64 = 0.1;

/// The moving average of provider count / base count of one model.
#[derive(Debug, Default, Clone, Copy)]
struct Adapting {
    ratio: f64,
    reports: u32,
    changed: Option<std::time::Instant>,
    /// The margin last answered: where the next step starts from (a report
    /// carries the margin of its own, possibly old, request).
    margin: Option<u32>,
}

/// The cache key of a request id.
fn request_key(request_id: &str) -> [u8; 32] {
    *digest::hash(request_id.as_bytes()).as_bytes()
}

/// Recent request counts, by request id.
#[derive(Clone)]
pub struct Feedback {
    /// By blake3 of the request id: an id of any length costs 32 bytes.
    recent: Cache<[u8; 32], Remembered>,
    /// Consecutive missed expected hits, by prefix.
    misses: Cache<[u8; 8], u32>,
    /// When each prefix was last assembled.
    seen: Cache<[u8; 8], Instant>,
    adapting: Arc<std::sync::Mutex<std::collections::HashMap<Arc<str>, Adapting>>>,
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
            misses: Cache::builder()
                .max_capacity(PREFIXES_TRACKED)
                .time_to_idle(REMEMBER_FOR)
                .build(),
            seen: Cache::builder()
                .max_capacity(PREFIXES_TRACKED)
                .time_to_idle(REMEMBER_FOR)
                .build(),
            adapting: Arc::default(),
        }
    }
}

impl Feedback {
    /// Records that `prefix` is assembled at `now`; returns how long ago it
    /// was last (`None`: not within [`REMEMBER_FOR`], or never). A cache
    /// entry the provider wrote then may have expired since.
    /// The time kept is renewed at most once a [`SEEN_GRANULARITY`], so a
    /// busy prefix costs a lookup per request, not a write.
    pub fn seen(&self, prefix: [u8; 8], now: Instant) -> Option<Duration> {
        let gap = self.seen.get(&prefix).map(|t| now.saturating_duration_since(t));
        if gap.is_none_or(|g| g >= SEEN_GRANULARITY) {
            self.seen.insert(prefix, now);
        }
        gap
    }

    /// Keeps what request `request_id` was assembled with, for its report.
    pub fn remember(&self, request_id: &str, what: Remembered) {
        if !request_id.is_empty() {
            self.recent.insert(request_key(request_id), what);
        }
    }

    /// Folds one comparison of an estimated model into its moving average
    /// and returns the margin it should now have, within `bounds`: the
    /// observed under-count plus [`ADAPT_HEADROOM_PERCENT`], rounded up,
    /// but at most [`ADAPT_MAX_STEP_PERCENT`] points from the current margin.
    /// `None` until [`ADAPT_AFTER_REPORTS`] reports, and within
    /// [`ADAPT_EVERY`] of the last change: so whatever a caller reports, and
    /// however often, a margin moves at most one step a minute.
    pub fn adapt(
        &self,
        c: &Comparison,
        provider_tokens: u32,
        bounds: (u32, u32),
        now: std::time::Instant,
    ) -> Option<u32> {
        let base = f64::from(c.ours) / (1.0 + f64::from(c.margin_percent) / 100.0);
        if base <= 0.0 || provider_tokens == 0 {
            return None;
        }
        let ratio = f64::from(provider_tokens) / base;
        let mut all = self
            .adapting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let a = all.entry(c.model.clone()).or_default();
        a.ratio = if a.reports == 0 {
            ratio
        } else {
            a.ratio * (1.0 - ADAPT_WEIGHT) + ratio * ADAPT_WEIGHT
        };
        a.reports = a.reports.saturating_add(1);
        if a.reports < ADAPT_AFTER_REPORTS || a.changed.is_some_and(|t| now.duration_since(t) < ADAPT_EVERY) {
            return None;
        }
        // Rounded up, ignoring floating-point noise (12.000000000000002 is 12).
        let wanted = ((a.ratio - 1.0) * 100.0 + ADAPT_HEADROOM_PERCENT - 1e-9).ceil();
        let wanted = wanted.clamp(f64::from(bounds.0), f64::from(bounds.1)) as u32;
        let current = a.margin.unwrap_or(c.margin_percent);
        let wanted = wanted.clamp(
            current.saturating_sub(ADAPT_MAX_STEP_PERCENT),
            current.saturating_add(ADAPT_MAX_STEP_PERCENT),
        );
        if wanted != current {
            a.changed = Some(now);
        }
        a.margin = Some(wanted);
        Some(wanted)
    }

    /// Records a report: provider totals and its diagnostic always; the
    /// comparison when the request is still remembered and the provider
    /// counted something: the relative error, and what its cache served
    /// against what the plan expected.
    pub fn report(&self, r: &UsageReport) -> Option<Comparison> {
        let provider = provider_label(&r.provider);
        let cached = r.cached_tokens.saturating_add(r.cache_read_tokens);
        metrics::provider_usage(
            provider,
            u64::from(r.prompt_tokens),
            u64::from(cached),
            u64::from(r.cache_creation_tokens) + u64::from(r.cache_write_tokens),
        );
        if let Some(d) = diagnostic_label(&r.diagnostic) {
            metrics::provider_cache_diagnostic(provider, d);
        }
        let kept = self.recent.get(&request_key(&r.request_id))?;
        // A provider always counts the prompt: a report of none is not one
        // to compare.
        if r.prompt_tokens == 0 {
            return None;
        }
        let relative_error =
            (f64::from(kept.tokens) - f64::from(r.prompt_tokens)) / f64::from(r.prompt_tokens);
        metrics::count_error(kept.model.to_string(), relative_error);
        let missed_expected = kept.expected_cached > 0 && cached < kept.expected_cached.div_ceil(2);
        let prefix_flagged = if kept.expected_cached == 0 {
            false
        } else if missed_expected {
            let misses = self
                .misses
                .entry(kept.prefix)
                .and_upsert_with(|m| m.map_or(1, |m| m.into_value().saturating_add(1)))
                .into_value();
            if misses == FLAG_AFTER_MISSES {
                metrics::prompt_cache_prefix_flagged(provider);
            }
            misses >= FLAG_AFTER_MISSES
        } else {
            self.misses.invalidate(&kept.prefix);
            false
        };
        metrics::prompt_cache_expected(provider, u64::from(kept.expected_cached), missed_expected);
        Some(Comparison {
            model: kept.model,
            margin_percent: kept.margin_percent,
            ours: kept.tokens,
            relative_error,
            expected_cached: kept.expected_cached,
            cached,
            missed_expected,
            prefix_flagged,
            estimated: kept.estimated,
            counted_for: kept.counted_for,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(tokens: u32, expected_cached: u32, prefix: u8) -> Remembered {
        Remembered {
            model: Arc::from("gpt-4o"),
            margin_percent: 0,
            tokens,
            expected_cached,
            prefix: [prefix; 8],
            estimated: None,
            counted_for: None,
        }
    }

    fn report(id: &str, prompt: u32, cached: u32) -> UsageReport {
        UsageReport {
            request_id: id.to_owned(),
            provider: "OpenAI".to_owned(),
            prompt_tokens: prompt,
            cached_tokens: cached,
            ..UsageReport::default()
        }
    }

    #[test]
    fn reports_compare_with_the_remembered_count() {
        let f = Feedback::default();
        f.remember("r1", kept(110, 0, 1));
        let c = f.report(&report("r1", 100, 0)).unwrap();
        assert_eq!(c.ours, 110);
        assert!((c.relative_error - 0.1).abs() < 1e-9);
        assert!(!c.missed_expected && !c.prefix_flagged, "nothing was expected");
        assert_eq!(f.report(&report("unknown", 100, 0)), None);
        assert_eq!(
            f.report(&report("r1", 0, 0)),
            None,
            "the provider counted nothing"
        );
        f.remember("", kept(5, 0, 1));
        assert_eq!(f.report(&report("", 5, 0)), None, "no id, nothing kept");
    }

    #[test]
    fn a_prefix_is_flagged_once_its_expected_hits_miss_in_a_row() {
        let f = Feedback::default();
        let send = |id: &str, cached: u32| {
            f.remember(id, kept(3000, 2048, 7));
            f.report(&report(id, 3000, cached)).unwrap()
        };
        // Half of what was expected, or more, is a hit.
        let c = send("a", 1024);
        assert!(!c.missed_expected);
        for n in 1..FLAG_AFTER_MISSES {
            let c = send(&format!("m{n}"), 0);
            assert!(c.missed_expected);
            assert!(!c.prefix_flagged, "{n} misses in a row");
        }
        assert!(send("last", 1023).prefix_flagged);
        assert!(
            send("again", 0).prefix_flagged,
            "it stays flagged while it misses"
        );
        // A hit clears it.
        assert!(!send("hit", 2048).prefix_flagged);
        assert!(!send("after", 0).prefix_flagged);
        // Another prefix's misses are its own.
        f.remember("other", kept(3000, 2048, 9));
        assert!(!f.report(&report("other", 3000, 0)).unwrap().prefix_flagged);
    }

    #[test]
    fn a_prefix_remembers_when_it_was_last_assembled() {
        let f = Feedback::default();
        let t0 = Instant::now();
        assert_eq!(f.seen([1; 8], t0), None, "never before");
        let later = t0 + Duration::from_secs(90);
        assert_eq!(f.seen([1; 8], later), Some(Duration::from_secs(90)));
        assert_eq!(f.seen([2; 8], later), None, "another prefix is its own");
        assert_eq!(
            f.seen([1; 8], later + Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
        // Within the granularity the time kept is not renewed: the gap runs on.
        let busy = later + Duration::from_secs(1);
        let ms = Duration::from_millis;
        assert_eq!(f.seen([1; 8], busy + ms(400)), Some(ms(400)));
        assert_eq!(f.seen([1; 8], busy + ms(800)), Some(ms(800)));
        assert_eq!(f.seen([1; 8], busy + ms(1200)), Some(ms(1200)));
        assert_eq!(f.seen([1; 8], busy + ms(1300)), Some(ms(100)));
    }

    #[test]
    fn diagnostics_are_bounded_labels() {
        assert_eq!(diagnostic_label(""), None);
        assert_eq!(diagnostic_label("Tools_Changed"), Some("tools_changed"));
        assert_eq!(diagnostic_label("something new"), Some("other"));
    }

    #[test]
    fn an_estimate_margin_follows_the_provider_within_bounds() {
        let f = Feedback::default();
        let start = std::time::Instant::now();
        // Counted with +20%: base 100 -> 120; the provider says 110 (+10%).
        let c = Comparison {
            model: Arc::from("claude"),
            margin_percent: 20,
            ours: 120,
            relative_error: 0.0,
            expected_cached: 0,
            cached: 0,
            missed_expected: false,
            prefix_flagged: false,
            estimated: None,
            counted_for: None,
        };
        for _ in 1..ADAPT_AFTER_REPORTS {
            assert_eq!(f.adapt(&c, 110, (5, 30), start), None, "too few reports");
        }
        assert_eq!(
            f.adapt(&c, 110, (5, 30), start),
            Some(12),
            "10% under-count + 2% headroom"
        );
        let lowered = Comparison {
            margin_percent: 12,
            ours: 112,
            ..c.clone()
        };
        let soon = start + Duration::from_secs(1);
        assert_eq!(f.adapt(&lowered, 110, (5, 30), soon), None, "rate-limited");
        // The provider now counts 156 for base 100: raised, but not past 30.
        let mut changed = Vec::new();
        for i in 0..60 {
            let at = start + ADAPT_EVERY * (2 + i);
            changed.extend(f.adapt(&lowered, 156, (5, 30), at));
        }
        assert!(
            changed.windows(2).all(|w| w[0] <= w[1]),
            "rises steadily: {changed:?}"
        );
        assert_eq!(changed.last(), Some(&30));
        // And not under the lower bound.
        let g = Feedback::default();
        let mut low = None;
        for _ in 0..ADAPT_AFTER_REPORTS {
            low = g.adapt(&c, 80, (5, 30), start);
        }
        assert_eq!(low, Some(5));
    }

    #[test]
    fn a_flood_of_hostile_reports_moves_a_margin_no_faster_than_the_rate() {
        let f = Feedback::default();
        let t0 = std::time::Instant::now();
        let c = Comparison {
            model: Arc::from("claude"),
            margin_percent: 10,
            ours: 110,
            relative_error: 0.0,
            expected_cached: 0,
            cached: 0,
            missed_expected: false,
            prefix_flagged: false,
            estimated: None,
            counted_for: None,
        };
        // Ten thousand reports at once, each claiming the provider counted
        // ten times more: one change, of at most one step.
        let mut margin = 10;
        for _ in 0..10_000 {
            if let Some(m) = f.adapt(&c, 1_000, (5, 500), t0) {
                margin = m;
            }
        }
        assert!(margin > 10, "the margin still follows the reports");
        assert!(margin <= 10 + ADAPT_MAX_STEP_PERCENT, "{margin}");
        // The flood goes on for five minutes: at most one step a minute.
        for s in 1..=300 {
            let now = t0 + Duration::from_secs(s);
            let c = Comparison {
                margin_percent: margin,
                ..c.clone()
            };
            for _ in 0..100 {
                if let Some(m) = f.adapt(&c, 1_000, (5, 500), now) {
                    margin = m;
                }
            }
        }
        assert!(margin <= 10 + 6 * ADAPT_MAX_STEP_PERCENT, "{margin}");
        assert!(margin < 500, "not at the bound after five minutes: {margin}");
    }

    #[test]
    fn provider_labels_are_bounded() {
        assert_eq!(provider_label("Anthropic"), "anthropic");
        assert_eq!(provider_label("my-own-llm"), "other");
    }
}
