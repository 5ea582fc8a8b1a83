//! Who serves a model and the rules of its prompt cache, from the model
//! table.
//!
//! The numbers are configuration (`[providers.*]` in the embedded default,
//! each with the documentation it comes from); this file holds only their
//! shape: a [`Provider`], its [`ProviderRules`] and the cache lifetimes
//! ([`Ttl`]) it offers. [`ProviderRules`] is `Copy` (the lifetimes are a small
//! fixed array, [`Ttls`]), so every model entry carries its own.

use std::fmt;

/// Who serves a model: a hosted API or a self-hosted engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    /// OpenAI: implicit prefix caching; explicit breakpoints on GPT-5.6+.
    OpenAi,
    /// Anthropic: explicit `cache_control` markers.
    Anthropic,
    /// Amazon Bedrock: explicit `cachePoint` blocks.
    Bedrock,
    /// Google Gemini: implicit caching.
    Gemini,
    /// vLLM automatic prefix caching (blocks).
    Vllm,
    /// SGLang RadixAttention.
    Sglang,
    /// TensorRT-LLM (blocks).
    TrtLlm,
}

impl Provider {
    /// Whether thinking passed back on an assistant turn is input the
    /// provider bills: Anthropic and Bedrock read it (inside a tool cycle
    /// it is required); an engine's chat template decides for itself (the
    /// rendered prompt is what is counted); OpenAI and Gemini take
    /// reasoning back as opaque items the prompt does not bill.
    pub fn reads_thinking(self) -> bool {
        !matches!(self, Provider::OpenAi | Provider::Gemini)
    }

    /// Every provider, in the order of [`Provider::as_str`]'s list.
    pub const ALL: [Provider; 7] = [
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::Bedrock,
        Provider::Gemini,
        Provider::Vllm,
        Provider::Sglang,
        Provider::TrtLlm,
    ];

    /// The configuration name (and bounded metric label) of the provider.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Bedrock => "bedrock",
            Provider::Gemini => "gemini",
            Provider::Vllm => "vllm",
            Provider::Sglang => "sglang",
            Provider::TrtLlm => "trtllm",
        }
    }

    /// The provider named `name` (exactly as [`Provider::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether this is a self-hosted engine (its cache is one of blocks).
    pub fn is_engine(self) -> bool {
        matches!(self, Provider::Vllm | Provider::Sglang | Provider::TrtLlm)
    }

    /// Whether the provider has a syntax for explicit cache markers
    /// (Anthropic, Bedrock, OpenAI from GPT-5.6).
    pub fn takes_markers(self) -> bool {
        matches!(self, Provider::OpenAi | Provider::Anthropic | Provider::Bedrock)
    }

    /// Whether the provider caches without markers (all but Anthropic and
    /// Bedrock, which cache only at explicit markers).
    pub fn caches_implicitly(self) -> bool {
        !matches!(self, Provider::Anthropic | Provider::Bedrock)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Provider {
    type Err = UnknownProvider;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Provider::from_name(s).ok_or_else(|| UnknownProvider(s.to_owned()))
    }
}

/// A provider name that is none of [`Provider::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a provider (openai, anthropic, bedrock, gemini, vllm, sglang, trtllm)")]
pub struct UnknownProvider(pub String);

/// A cache lifetime, in seconds, written as providers write it (`"5m"`,
/// `"1h"`, `"30m"`, `"24h"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ttl(u32);

/// The longest lifetime a [`Ttl`] may say: a week (providers offer a day).
pub const MAX_TTL_SECS: u32 = 7 * 24 * 3600;

impl Ttl {
    /// Five minutes: Anthropic's and Bedrock's default.
    pub const FIVE_MINUTES: Ttl = Ttl(300);
    /// One hour: Anthropic's long lifetime.
    pub const ONE_HOUR: Ttl = Ttl(3600);

    /// A lifetime of `secs` seconds, if positive and at most [`MAX_TTL_SECS`].
    pub fn from_secs(secs: u32) -> Option<Ttl> {
        (1..=MAX_TTL_SECS).contains(&secs).then_some(Ttl(secs))
    }

    /// The lifetime in seconds.
    pub fn secs(self) -> u32 {
        self.0
    }

    /// Parses `<n>s`, `<n>m` or `<n>h` (`n` decimal digits, the lifetime
    /// positive and at most [`MAX_TTL_SECS`]); anything else is `None`.
    pub fn parse(text: &str) -> Option<Ttl> {
        let unit = match text.as_bytes().last()? {
            b's' => 1,
            b'm' => 60,
            b'h' => 3600,
            _ => return None,
        };
        let digits = &text[..text.len() - 1];
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u32 = digits.parse().ok()?;
        Ttl::from_secs(n.checked_mul(unit)?)
    }
}

/// Formats in the largest whole unit: `300` seconds is `5m`, `3600` is `1h`,
/// `86400` is `24h`; [`Ttl::parse`] reads it back.
impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            s if s % 3600 == 0 => write!(f, "{}h", s / 3600),
            s if s % 60 == 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// Most lifetimes one provider offers.
pub const MAX_TTLS: usize = 4;

/// The lifetimes a provider offers: at most [`MAX_TTLS`], distinct, in
/// ascending order (a fixed array, so [`ProviderRules`] stays `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ttls {
    items: [Option<Ttl>; MAX_TTLS],
}

impl Ttls {
    /// None offered (implicit caches with no choice of lifetime).
    pub const NONE: Ttls = Ttls {
        items: [None; MAX_TTLS],
    };

    /// The set of `ttls`, sorted; `None` when more than [`MAX_TTLS`] are
    /// distinct.
    pub fn new(ttls: &[Ttl]) -> Option<Ttls> {
        let mut sorted = ttls.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() > MAX_TTLS {
            return None;
        }
        let mut items = [None; MAX_TTLS];
        for (slot, t) in items.iter_mut().zip(sorted) {
            *slot = Some(t);
        }
        Some(Ttls { items })
    }

    /// Whether `ttl` is offered.
    pub fn contains(&self, ttl: Ttl) -> bool {
        self.iter().any(|t| t == ttl)
    }

    /// Whether none is offered.
    pub fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    /// The lifetimes, shortest first.
    pub fn iter(&self) -> impl Iterator<Item = Ttl> + '_ {
        self.items.iter().flatten().copied()
    }
}

/// Lists the lifetimes as `5m, 1h` (`none` when empty).
impl fmt::Display for Ttls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, t) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

/// The rules of one provider's prompt cache, as a model entry sees them
/// (its own `cache_min_tokens` and other overrides already applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderRules {
    /// Who serves the model.
    pub provider: Provider,
    /// The shortest prefix the provider caches; below it nothing is cached,
    /// silently.
    pub min_tokens: u32,
    /// Implicit hits grow in steps of this many tokens (OpenAI 128, an
    /// engine its block size, 1 where a hit is exact). At least 1.
    pub step_tokens: u32,
    /// Most breakpoint markers one request may carry (Anthropic and Bedrock
    /// 4, OpenAI's explicit mode 4); 0 = implicit only.
    pub max_breakpoints: u32,
    /// The lifetimes a request may ask for.
    pub ttls: Ttls,
    /// The lifetime when a request asks for none (one of `ttls`); `None`
    /// when `ttls` is empty.
    pub default_ttl: Option<Ttl>,
    /// Content blocks a marker looks back for an earlier entry (Anthropic
    /// and Bedrock 20); 0 = no limit the plan checks.
    pub lookback_blocks: u32,
    /// Whether the provider takes explicit breakpoint markers (Anthropic,
    /// Bedrock; OpenAI from GPT-5.6 with `prompt_cache_breakpoint`).
    pub explicit_breakpoints: bool,
}

/// OpenAI's implicit cache: 1,024 tokens, hits in 128-token steps, no
/// markers; lifetimes 5m (in memory, the default) and 24h (extended
/// retention). The behaviour of a model entry that names no provider rules.
impl Default for ProviderRules {
    fn default() -> Self {
        ProviderRules {
            provider: Provider::OpenAi,
            min_tokens: 1024,
            step_tokens: 128,
            max_breakpoints: 4,
            ttls: Ttls::new(&[Ttl::FIVE_MINUTES, Ttl(86_400)]).unwrap_or_default(),
            default_ttl: Some(Ttl::FIVE_MINUTES),
            lookback_blocks: 0,
            explicit_breakpoints: false,
        }
    }
}

impl ProviderRules {
    /// How many markers a plan may write: `max_breakpoints` for a provider
    /// that takes markers (Anthropic, Bedrock, OpenAI) and says it does
    /// (`explicit_breakpoints`), else 0.
    pub fn marker_limit(&self) -> u32 {
        if self.provider.takes_markers() && self.explicit_breakpoints {
            self.max_breakpoints
        } else {
            0
        }
    }

    /// What a prefix of `tokens` tokens can be read as under the implicit
    /// rules: floored to `step_tokens`, 0 when that is below `min_tokens`.
    pub fn implicit_hit(&self, tokens: u32) -> u32 {
        let step = self.step_tokens.max(1);
        let floored = tokens / step * step;
        if floored < self.min_tokens || floored == 0 {
            0
        } else {
            floored
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(Provider::from_name(p.as_str()), Some(p));
            assert_eq!(p.as_str().parse::<Provider>(), Ok(p));
        }
        assert!("OpenAI".parse::<Provider>().is_err());
        assert_eq!(Provider::from_name("azure"), None);
        assert!(Provider::Sglang.is_engine() && !Provider::Gemini.is_engine());
        let marked: Vec<_> = Provider::ALL.into_iter().filter(|p| p.takes_markers()).collect();
        assert_eq!(marked, [Provider::OpenAi, Provider::Anthropic, Provider::Bedrock]);
        let only_marked: Vec<_> = Provider::ALL
            .into_iter()
            .filter(|p| !p.caches_implicitly())
            .collect();
        assert_eq!(only_marked, [Provider::Anthropic, Provider::Bedrock]);
    }

    #[test]
    fn ttls_parse_and_format_as_providers_write_them() {
        for (text, secs) in [
            ("5m", 300),
            ("1h", 3600),
            ("30m", 1800),
            ("24h", 86_400),
            ("90s", 90),
        ] {
            let t = Ttl::parse(text).unwrap();
            assert_eq!(t.secs(), secs, "{text}");
            assert_eq!(t.to_string(), text);
        }
        assert_eq!(Ttl::parse("60m").map(|t| t.to_string()).as_deref(), Some("1h"));
        for bad in [
            "",
            "m",
            "5",
            "0m",
            "-5m",
            "5 m",
            "5M",
            "1d",
            "+5m",
            "9999999999h",
            "200h",
        ] {
            assert_eq!(Ttl::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_ttl_set_is_sorted_distinct_and_bounded() {
        let t = |s| Ttl::parse(s).unwrap();
        let set = Ttls::new(&[t("1h"), t("5m"), t("1h")]).unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), [t("5m"), t("1h")]);
        assert_eq!(set.to_string(), "5m, 1h");
        assert!(set.contains(t("60m")) && !set.contains(t("30m")));
        assert!(Ttls::new(&[t("1m"), t("2m"), t("3m"), t("4m"), t("5m")]).is_none());
        assert_eq!(Ttls::NONE.to_string(), "none");
        assert!(Ttls::NONE.is_empty());
    }

    #[test]
    fn the_default_is_openai_implicit() {
        let r = ProviderRules::default();
        assert_eq!(
            (r.provider, r.min_tokens, r.step_tokens),
            (Provider::OpenAi, 1024, 128)
        );
        assert_eq!(r.marker_limit(), 0);
        assert_eq!(r.default_ttl, Some(Ttl::FIVE_MINUTES));
        assert_eq!(r.implicit_hit(1023), 0);
        assert_eq!(r.implicit_hit(1024), 1024);
        assert_eq!(r.implicit_hit(1151), 1024);
        assert_eq!(r.implicit_hit(1152), 1152);
    }

    proptest! {
        #[test]
        fn every_ttl_formats_to_text_that_parses_back(secs in 1u32..=MAX_TTL_SECS) {
            let t = Ttl::from_secs(secs).unwrap();
            prop_assert_eq!(Ttl::parse(&t.to_string()), Some(t));
        }

        #[test]
        fn an_implicit_hit_is_a_step_multiple_at_least_the_minimum(
            tokens in 0u32..100_000, min in 0u32..5000, step in 1u32..512,
        ) {
            let r = ProviderRules { min_tokens: min, step_tokens: step, ..ProviderRules::default() };
            let hit = r.implicit_hit(tokens);
            prop_assert!(hit <= tokens);
            prop_assert_eq!(hit % step, 0);
            prop_assert!(hit == 0 || hit >= min);
        }
    }
}
