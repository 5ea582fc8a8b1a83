//! The `[providers.*]` tables and a model entry's cache overrides, checked
//! into the [`ProviderRules`] each model carries, every error named by its
//! file key.

use super::ConfigError;
use super::file::{ModelEntry, ProviderEntry, ProvidersSection};
use crate::tokens::provider::{MAX_TTLS, Provider, ProviderRules, Ttl, Ttls};

/// Largest `min_tokens` (far past any context window).
const MAX_MIN_TOKENS: u32 = 10_000_000;
/// Largest `step_tokens` (an engine block).
const MAX_STEP_TOKENS: u32 = 4096;
/// Most markers any provider takes (Anthropic, Bedrock, OpenAI: 4).
const MAX_BREAKPOINTS: u32 = 4;
/// Largest `lookback_blocks`.
const MAX_LOOKBACK_BLOCKS: u32 = 1000;

/// Every provider's rules, in [`Provider::ALL`] order.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProviderTable([ProviderRules; Provider::ALL.len()]);

impl ProviderTable {
    /// The rules of `provider`.
    pub(super) fn get(&self, provider: Provider) -> ProviderRules {
        let i = Provider::ALL.iter().position(|p| *p == provider).unwrap_or(0);
        self.0[i]
    }
}

/// The `[providers.*]` tables, each field required (the embedded default
/// sets them all) and checked.
pub(super) fn providers(section: &ProvidersSection) -> Result<ProviderTable, ConfigError> {
    let mut table = [ProviderRules::default(); Provider::ALL.len()];
    for (slot, provider) in table.iter_mut().zip(Provider::ALL) {
        let entry = entry_of(section, provider);
        let key = |f: &str| format!("providers.{provider}.{f}");
        let need = |v: Option<u32>, f: &str| {
            v.ok_or_else(|| ConfigError::new(key(f), "missing (and no embedded default)"))
        };
        let ttls = ttl_list(entry.ttls.as_deref(), &key("ttls"))?;
        let rules = ProviderRules {
            provider,
            min_tokens: need(entry.min_tokens, "min_tokens")?,
            step_tokens: need(entry.step_tokens, "step_tokens")?,
            max_breakpoints: need(entry.max_breakpoints, "max_breakpoints")?,
            default_ttl: default_ttl(entry.default_ttl.as_deref(), None, &key("default_ttl"))?,
            ttls,
            lookback_blocks: need(entry.lookback_blocks, "lookback_blocks")?,
            explicit_breakpoints: entry.explicit_breakpoints.ok_or_else(|| {
                ConfigError::new(key("explicit_breakpoints"), "missing (and no embedded default)")
            })?,
        };
        check(&rules, &key)?;
        *slot = rules;
    }
    Ok(ProviderTable(table))
}

fn entry_of(section: &ProvidersSection, provider: Provider) -> &ProviderEntry {
    match provider {
        Provider::OpenAi => &section.openai,
        Provider::Anthropic => &section.anthropic,
        Provider::Bedrock => &section.bedrock,
        Provider::Gemini => &section.gemini,
        Provider::Vllm => &section.vllm,
        Provider::Sglang => &section.sglang,
        Provider::TrtLlm => &section.trtllm,
    }
}

/// The lifetimes of `list` (absent: none), each a lifetime, at most
/// [`MAX_TTLS`], no two alike.
fn ttl_list(list: Option<&[String]>, key: &str) -> Result<Ttls, ConfigError> {
    let list = list.unwrap_or_default();
    if list.len() > MAX_TTLS {
        return Err(ConfigError::new(key, format!("at most {MAX_TTLS} lifetimes")));
    }
    let mut parsed = Vec::with_capacity(list.len());
    for (i, text) in list.iter().enumerate() {
        let t = Ttl::parse(text).ok_or_else(|| {
            ConfigError::new(
                format!("{key}[{i}]"),
                format!("{text:?} is not a lifetime such as \"5m\", \"1h\" or \"24h\""),
            )
        })?;
        if parsed.contains(&t) {
            return Err(ConfigError::new(
                format!("{key}[{i}]"),
                format!("{t} is listed twice"),
            ));
        }
        parsed.push(t);
    }
    Ttls::new(&parsed).ok_or_else(|| ConfigError::new(key, format!("at most {MAX_TTLS} lifetimes")))
}

/// `text` as a lifetime (`""` = none); absent: `inherited`.
fn default_ttl(text: Option<&str>, inherited: Option<Ttl>, key: &str) -> Result<Option<Ttl>, ConfigError> {
    match text {
        None => Ok(inherited),
        Some("") => Ok(None),
        Some(t) => Ttl::parse(t).map(Some).ok_or_else(|| {
            ConfigError::new(
                key,
                format!("{t:?} is not a lifetime such as \"5m\", \"1h\" or \"24h\""),
            )
        }),
    }
}

/// What every provider's rules must satisfy; `key` names a field.
fn check(r: &ProviderRules, key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    let p = r.provider;
    if r.min_tokens > MAX_MIN_TOKENS {
        return Err(ConfigError::new(
            key("min_tokens"),
            format!("must be at most {MAX_MIN_TOKENS}"),
        ));
    }
    if !(1..=MAX_STEP_TOKENS).contains(&r.step_tokens) {
        return Err(ConfigError::new(
            key("step_tokens"),
            format!("must be between 1 and {MAX_STEP_TOKENS}"),
        ));
    }
    let takes_markers = p.takes_markers();
    if takes_markers && r.max_breakpoints > MAX_BREAKPOINTS {
        return Err(ConfigError::new(
            key("max_breakpoints"),
            format!("{p} takes at most {MAX_BREAKPOINTS} breakpoints per request"),
        ));
    }
    if !takes_markers && (r.max_breakpoints > 0 || r.explicit_breakpoints) {
        let field = if r.explicit_breakpoints {
            "explicit_breakpoints"
        } else {
            "max_breakpoints"
        };
        return Err(ConfigError::new(
            key(field),
            format!(
                "{p} caches implicitly: it takes no breakpoint markers (max_breakpoints = 0, explicit_breakpoints = false)"
            ),
        ));
    }
    if !p.caches_implicitly() && !r.explicit_breakpoints {
        return Err(ConfigError::new(
            key("explicit_breakpoints"),
            format!("{p} caches only at explicit markers: must be true"),
        ));
    }
    if r.explicit_breakpoints && r.max_breakpoints == 0 {
        return Err(ConfigError::new(
            key("explicit_breakpoints"),
            "explicit breakpoints need max_breakpoints of at least 1",
        ));
    }
    if r.lookback_blocks > MAX_LOOKBACK_BLOCKS {
        return Err(ConfigError::new(
            key("lookback_blocks"),
            format!("must be at most {MAX_LOOKBACK_BLOCKS}"),
        ));
    }
    match r.default_ttl {
        Some(t) if !r.ttls.contains(t) => Err(ConfigError::new(
            key("default_ttl"),
            format!("{t} is not among the lifetimes offered ({})", r.ttls),
        )),
        None if !r.ttls.is_empty() => Err(ConfigError::new(
            key("default_ttl"),
            format!("must be one of the lifetimes offered ({})", r.ttls),
        )),
        _ => Ok(()),
    }
}

/// A model entry's rules: its provider's (`base`), under its own overrides
/// (`cache_min_tokens` for the minimum, `engine_block_tokens` for an
/// engine's step, `explicit_breakpoints`, `cache_ttls`, `cache_default_ttl`).
/// `min_tokens` is the model's minimum, already checked.
pub(super) fn model_rules(
    m: &ModelEntry,
    base: ProviderRules,
    min_tokens: u32,
    key: &dyn Fn(&str) -> String,
) -> Result<ProviderRules, ConfigError> {
    let ttls = match &m.cache_ttls {
        Some(list) => ttl_list(Some(list), &key("cache_ttls"))?,
        None => base.ttls,
    };
    let rules = ProviderRules {
        min_tokens,
        step_tokens: match m.engine_block_tokens {
            Some(block) if base.provider.is_engine() => block,
            _ => base.step_tokens,
        },
        explicit_breakpoints: m.explicit_breakpoints.unwrap_or(base.explicit_breakpoints),
        default_ttl: default_ttl(
            m.cache_default_ttl.as_deref(),
            base.default_ttl,
            &key("cache_default_ttl"),
        )?,
        ttls,
        ..base
    };
    // Only a model's own keys can be wrong here: the provider's are checked.
    let model_key = |f: &str| {
        key(match f {
            "min_tokens" => "cache_min_tokens",
            "step_tokens" => "engine_block_tokens",
            "ttls" => "cache_ttls",
            "default_ttl" => "cache_default_ttl",
            "explicit_breakpoints" => "explicit_breakpoints",
            _ => "provider",
        })
    };
    check(&rules, &model_key)?;
    Ok(rules)
}

/// The provider a model entry names, or its default: `vllm` for a model
/// folder, `openai` for an encoding.
pub(super) fn provider_of(m: &ModelEntry, key: &dyn Fn(&str) -> String) -> Result<Provider, ConfigError> {
    match m.provider.as_deref() {
        Some(name) => name
            .parse()
            .map_err(|e: crate::tokens::provider::UnknownProvider| {
                ConfigError::new(key("provider"), e.to_string())
            }),
        None if m.tokenizer_dir.is_some() => Ok(Provider::Vllm),
        None => Ok(Provider::OpenAi),
    }
}
