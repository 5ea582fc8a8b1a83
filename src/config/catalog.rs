//! The catalog a file describes: its model table, policies, prefix families
//! and compaction settings, each checked and named by its file key. This is
//! what SIGHUP swaps in, and what `assemble` and `preview` use without a server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::ConfigError;
use super::file::{CompactionSection, FileConfig, ModelEntry, PolicyEntry, PrioritiesEntry, Secret};
use super::providers::{self, ProviderTable};
use crate::assemble::{Catalog, Policy};
use crate::compact::{CompactionSettings, MarkerKey};
use crate::prompt::{BlockKind, MAX_TOOL_NAME_BYTES};
use crate::tokens::hf::HfModel;
use crate::tokens::models::CacheSettings;
use crate::tokens::{Encoding, ModelSpec, ModelTable, Tokenizer};
use crate::vocab::Role;

mod folders;

/// Fewest characters of `compaction.marker_key`.
pub const MIN_MARKER_KEY_CHARS: usize = 32;
/// Most characters of `compaction.marker_key`.
pub const MAX_MARKER_KEY_CHARS: usize = 1024;

impl FileConfig {
    /// The model table and policies, validated.
    pub fn catalog(&self) -> Result<Catalog, ConfigError> {
        let entries = self
            .models
            .as_deref()
            .ok_or_else(|| ConfigError::new("models", "the model table is empty"))?;
        let providers = providers::providers(&self.providers)?;
        let models = model_table(entries, &providers)?;
        let mut policies = BTreeMap::new();
        for (name, entry) in self.policies.iter().flatten() {
            policies.insert(name.clone(), Arc::new(policy(name, entry)?));
        }
        let mut catalog = Catalog::new(models, policies);
        catalog.families = families(self.cache.families.as_deref().unwrap_or_default())?;
        catalog.compaction = compaction(&self.compaction)?;
        Ok(catalog)
    }
}

/// What a model entry counts with.
enum Counter {
    Encoding(Encoding),
    Folder(Arc<HfModel>),
}

/// The model folder `dir` for the setting `key`, once per table (`loaded`
/// holds the folders of this table so far, by path), and shared with the
/// catalogs before it while its files are unchanged ([`folders`]).
fn load_folder(
    dir: &Path,
    key: &str,
    loaded: &mut BTreeMap<PathBuf, Arc<HfModel>>,
) -> Result<Arc<HfModel>, ConfigError> {
    if let Some(m) = loaded.get(dir) {
        return Ok(m.clone());
    }
    let model = folders::load(dir).map_err(|e| ConfigError::new(key, e.to_string()))?;
    loaded.insert(dir.to_owned(), model.clone());
    Ok(model)
}

fn model_table(entries: &[ModelEntry], providers: &ProviderTable) -> Result<ModelTable, ConfigError> {
    if entries.is_empty() {
        return Err(ConfigError::new("models", "the model table is empty"));
    }
    let mut specs: Vec<ModelSpec> = Vec::with_capacity(entries.len());
    let mut loaded = BTreeMap::new();
    for (i, m) in entries.iter().enumerate() {
        let key = |f: &str| format!("models[{i}].{f}");
        if m.name.trim().is_empty() || m.name.len() > 128 {
            return Err(ConfigError::new(key("name"), "must be 1 to 128 characters"));
        }
        if specs.iter().any(|s| s.name == m.name) {
            return Err(ConfigError::new(
                key("name"),
                format!("duplicate model {:?}", m.name),
            ));
        }
        specs.push(model_spec(m, providers, &mut loaded, &key)?);
    }
    Ok(ModelTable::new(specs))
}

/// One model entry's spec, its settings checked in the order they are
/// listed (the first wrong one is named); `key` names a setting of it.
fn model_spec(
    m: &ModelEntry,
    providers: &ProviderTable,
    loaded: &mut BTreeMap<PathBuf, Arc<HfModel>>,
    key: &dyn Fn(&str) -> String,
) -> Result<ModelSpec, ConfigError> {
    let counter = counter(m, loaded, key)?;
    if m.message_overhead_tokens.is_some() && m.tokenizer_dir.is_none() {
        return Err(ConfigError::new(
            key("message_overhead_tokens"),
            "applies to a tokenizer_dir (OpenAI models use their chat formula)",
        ));
    }
    if m.estimate_margin_percent > 100 {
        return Err(ConfigError::new(
            key("estimate_margin_percent"),
            "must be between 0 and 100",
        ));
    }
    if m.context_window == 0 {
        return Err(ConfigError::new(key("context_window"), "must be positive"));
    }
    if m.output_reserve >= m.context_window {
        return Err(ConfigError::new(
            key("output_reserve"),
            "must be less than context_window",
        ));
    }
    Ok(ModelSpec {
        cache: cache_settings(m, providers, key)?,
        margin_bounds: margin_bounds(m, key)?,
        generation: generation(m, key)?,
        name: m.name.clone(),
        prefix: m.prefix,
        tokenizer: match counter {
            Counter::Folder(model) => Tokenizer::hf(model, m.message_overhead_tokens.unwrap_or(0)),
            Counter::Encoding(e) if m.estimate_margin_percent == 0 => Tokenizer::exact(e),
            Counter::Encoding(e) => Tokenizer::estimate(e, m.estimate_margin_percent),
        },
        context_window: m.context_window,
        output_reserve: m.output_reserve,
    })
}

/// What the entry counts with: an encoding, or a tokenizer folder (loaded
/// once per table, see [`load_folder`]).
fn counter(
    m: &ModelEntry,
    loaded: &mut BTreeMap<PathBuf, Arc<HfModel>>,
    key: &dyn Fn(&str) -> String,
) -> Result<Counter, ConfigError> {
    match (&m.encoding, &m.tokenizer_dir) {
        (Some(name), None) => Ok(Counter::Encoding(Encoding::from_name(name).ok_or_else(|| {
            ConfigError::new(
                key("encoding"),
                format!("{name:?} is not cl100k_base or o200k_base"),
            )
        })?)),
        (None, Some(dir)) => {
            if m.estimate_margin_percent > 0 {
                return Err(ConfigError::new(
                    key("estimate_margin_percent"),
                    "a model counted with its own tokenizer_dir is exact: no margin",
                ));
            }
            let model = load_folder(dir, &key("tokenizer_dir"), loaded)?;
            if model.template().is_some() && m.message_overhead_tokens.is_some() {
                return Err(ConfigError::new(
                    key("message_overhead_tokens"),
                    "applies to a tokenizer_dir without a chat template (the template frames each message)",
                ));
            }
            Ok(Counter::Folder(model))
        }
        (Some(_), Some(_)) => Err(ConfigError::new(
            key("tokenizer_dir"),
            "set encoding or tokenizer_dir, not both",
        )),
        (None, None) => Err(ConfigError::new(
            key("encoding"),
            "set encoding (cl100k_base or o200k_base) or tokenizer_dir",
        )),
    }
}

/// The entry's prompt cache settings: its own, else its provider's, else
/// the defaults.
fn cache_settings(
    m: &ModelEntry,
    providers: &ProviderTable,
    key: &dyn Fn(&str) -> String,
) -> Result<CacheSettings, ConfigError> {
    let defaults = CacheSettings::default();
    let base = providers.get(providers::provider_of(m, key)?);
    let min_tokens = m
        .cache_min_tokens
        .unwrap_or(base.min_tokens.min(m.context_window));
    let engine_block_tokens = m.engine_block_tokens.unwrap_or(if base.provider.is_engine() {
        base.step_tokens
    } else {
        defaults.engine_block_tokens
    });
    let cache = CacheSettings {
        min_tokens,
        engine_block_tokens,
        key_shards: m.prompt_cache_key_shards.unwrap_or(defaults.key_shards),
        provider: providers::model_rules(m, base, min_tokens, key)?,
    };
    if cache.min_tokens > m.context_window {
        return Err(ConfigError::new(
            key("cache_min_tokens"),
            "must not exceed context_window",
        ));
    }
    if !(1..=4096).contains(&cache.engine_block_tokens) {
        return Err(ConfigError::new(
            key("engine_block_tokens"),
            "must be between 1 and 4096",
        ));
    }
    if !(1..=1024).contains(&cache.key_shards) {
        return Err(ConfigError::new(
            key("prompt_cache_key_shards"),
            "must be between 1 and 1024",
        ));
    }
    Ok(cache)
}

/// The bounds an estimated entry's learned margin stays within, if set.
fn margin_bounds(m: &ModelEntry, key: &dyn Fn(&str) -> String) -> Result<Option<(u32, u32)>, ConfigError> {
    let margin = m.estimate_margin_percent;
    match (m.estimate_margin_min_percent, m.estimate_margin_max_percent) {
        (None, None) => Ok(None),
        (lo, hi) => {
            let (lo, hi) = (lo.unwrap_or(margin), hi.unwrap_or(margin));
            if margin == 0 {
                return Err(ConfigError::new(
                    key("estimate_margin_min_percent"),
                    "margin bounds apply to estimated models (estimate_margin_percent > 0)",
                ));
            }
            if lo == 0 || lo > margin || margin > hi || hi > 100 {
                return Err(ConfigError::new(
                    key("estimate_margin_max_percent"),
                    "needs 1 <= estimate_margin_min_percent <= estimate_margin_percent <= estimate_margin_max_percent <= 100",
                ));
            }
            Ok(Some((lo, hi)))
        }
    }
}

/// The entry's tokenizer generation, for a model without a public
/// tokenizer.
fn generation(m: &ModelEntry, key: &dyn Fn(&str) -> String) -> Result<Option<Arc<str>>, ConfigError> {
    match &m.tokenizer_generation {
        None => Ok(None),
        Some(g) if !crate::tokens::models::valid_generation(g) => Err(ConfigError::new(
            key("tokenizer_generation"),
            "must be 1 to 32 of a-z, 0-9, '.' and '-', starting with a letter",
        )),
        Some(_) if m.estimate_margin_percent == 0 && m.tokenizer_dir.is_none() => Err(ConfigError::new(
            key("tokenizer_generation"),
            "applies to a model without a public tokenizer (an estimate, or a folder standing in for one)",
        )),
        Some(g) => Ok(Some(Arc::from(g.as_str()))),
    }
}

/// Most prefix families (each is a metric label).
const MAX_FAMILIES: usize = 64;

fn families(names: &[String]) -> Result<Vec<String>, ConfigError> {
    if names.len() > MAX_FAMILIES {
        return Err(ConfigError::new(
            "cache.families",
            format!("at most {MAX_FAMILIES} families (each is a metric label)"),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        let ok = !n.is_empty()
            && n.len() <= 64
            && n != crate::prompt_cache::families::OTHER
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
        if !ok || out.contains(n) {
            return Err(ConfigError::new(
                format!("cache.families[{i}]"),
                "a unique name of 1 to 64 of A-Z a-z 0-9 - _ . (not \"other\")",
            ));
        }
        out.push(n.clone());
    }
    Ok(out)
}

fn compaction(c: &CompactionSection) -> Result<CompactionSettings, ConfigError> {
    let d = CompactionSettings::default();
    let percent = |v: Option<u32>, d: u32, key: &str| match v.unwrap_or(d) {
        p @ 1..=100 => Ok(p),
        _ => Err(ConfigError::new(key, "must be between 1 and 100")),
    };
    let settings = CompactionSettings {
        trigger_percent: percent(c.trigger_percent, d.trigger_percent, "compaction.trigger_percent")?,
        target_percent: percent(c.target_percent, d.target_percent, "compaction.target_percent")?,
        preserve_recent: c.preserve_recent.unwrap_or(d.preserve_recent),
        breaker_failures: c.breaker_failures.unwrap_or(d.breaker_failures),
        breaker_cooldown: c
            .breaker_cooldown_secs
            .map_or(d.breaker_cooldown, std::time::Duration::from_secs),
        marker_key: match &c.marker_key {
            // The message never shows the value: it is a secret.
            Some(Secret(k))
                if !(MIN_MARKER_KEY_CHARS..=MAX_MARKER_KEY_CHARS).contains(&k.chars().count())
                    || k.trim() != k =>
            {
                return Err(ConfigError::new(
                    "compaction.marker_key",
                    format!(
                        "must be {MIN_MARKER_KEY_CHARS} to {MAX_MARKER_KEY_CHARS} characters, without \
                         leading or trailing whitespace (e.g. `openssl rand -hex 32`)"
                    ),
                ));
            }
            Some(Secret(k)) => MarkerKey::derive(k),
            None => d.marker_key,
        },
    };
    if settings.target_percent > settings.trigger_percent {
        return Err(ConfigError::new(
            "compaction.target_percent",
            "must not exceed compaction.trigger_percent",
        ));
    }
    if settings.preserve_recent > 10_000 {
        return Err(ConfigError::new(
            "compaction.preserve_recent",
            "must be at most 10000",
        ));
    }
    if !(1..=1000).contains(&settings.breaker_failures) {
        return Err(ConfigError::new(
            "compaction.breaker_failures",
            "must be between 1 and 1000",
        ));
    }
    if settings.breaker_cooldown.is_zero() || settings.breaker_cooldown > crate::compact::breaker::IDLE_EXPIRY
    {
        return Err(ConfigError::new(
            "compaction.breaker_cooldown_secs",
            "must be between 1 and 3600",
        ));
    }
    Ok(settings)
}

/// Most tool names a policy's `exclude_tools` lists.
const MAX_EXCLUDE_TOOLS: usize = 256;

fn policy(name: &str, entry: &PolicyEntry) -> Result<Policy, ConfigError> {
    let key = |f: &str| format!("policies.{name}.{f}");
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_name {
        return Err(ConfigError::new(
            format!("policies.{name:?}"),
            "a policy name is 1 to 64 of A-Z a-z 0-9 - _ .",
        ));
    }
    let mut policy = Policy::default();
    policy.compact_turns = entry.compact_turns.unwrap_or(policy.compact_turns);
    policy.neutralize_special_tokens = entry
        .neutralize_special_tokens
        .unwrap_or(policy.neutralize_special_tokens);
    policy.clear_tool_results = entry.clear_tool_results.unwrap_or(policy.clear_tool_results);
    policy.keep_recent_tool_results = entry
        .keep_recent_tool_results
        .unwrap_or(policy.keep_recent_tool_results);
    policy.clear_at_least_tokens = entry
        .clear_at_least_tokens
        .unwrap_or(policy.clear_at_least_tokens);
    policy.drop_closed_thinking = entry.drop_closed_thinking.unwrap_or(policy.drop_closed_thinking);
    if let Some(tools) = &entry.exclude_tools {
        check_exclude_tools(tools, &key)?;
        policy.exclude_tools = tools.clone();
    }
    policy.window_low_percent = entry.window_low_percent.unwrap_or(policy.window_low_percent);
    policy.window_high_percent = entry.window_high_percent.unwrap_or(policy.window_high_percent);
    if policy.window_high_percent > 100 {
        return Err(ConfigError::new(
            key("window_high_percent"),
            format!("{} is not a percentage (0 to 100)", policy.window_high_percent),
        ));
    }
    if policy.window_low_percent > policy.window_high_percent {
        return Err(ConfigError::new(
            key("window_low_percent"),
            format!(
                "{} is above window_high_percent ({})",
                policy.window_low_percent, policy.window_high_percent
            ),
        ));
    }
    if let Some(role) = entry.context_role.as_deref() {
        policy.context_role = match role {
            "user" => Role::User,
            "system" => Role::System,
            other => {
                return Err(ConfigError::new(
                    key("context_role"),
                    format!("{other:?} is not \"user\" or \"system\""),
                ));
            }
        };
    }
    set_priorities(&entry.priorities, &mut policy.priorities, &key)?;
    Ok(policy)
}

/// Checks a policy's `exclude_tools`: a bounded list of tool names.
fn check_exclude_tools(tools: &[String], key: &dyn Fn(&str) -> String) -> Result<(), ConfigError> {
    if tools.len() > MAX_EXCLUDE_TOOLS {
        return Err(ConfigError::new(
            key("exclude_tools"),
            format!("at most {MAX_EXCLUDE_TOOLS} tool names"),
        ));
    }
    if let Some(bad) = tools
        .iter()
        .find(|t| t.is_empty() || t.len() > MAX_TOOL_NAME_BYTES)
    {
        return Err(ConfigError::new(
            key("exclude_tools"),
            format!("{bad:?}: a tool name is 1 to {MAX_TOOL_NAME_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// Sets the block priorities a policy gives (each 1 to 1000) over the
/// defaults in `priorities`, indexed as [`BlockKind::ALL`].
fn set_priorities(
    p: &PrioritiesEntry,
    priorities: &mut [u32; 6],
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let given = [
        p.state,
        p.evidence,
        p.memory,
        p.summary,
        p.recent_turns,
        p.history,
    ];
    for (i, value) in given.into_iter().enumerate() {
        if let Some(v) = value {
            if v == 0 || v > 1000 {
                let kind = BlockKind::ALL[i].as_str();
                return Err(ConfigError::new(
                    key(&format!("priorities.{kind}")),
                    "must be between 1 and 1000",
                ));
            }
            priorities[i] = v;
        }
    }
    Ok(())
}

/// The embedded default catalog (models and policies).
pub fn default_catalog() -> Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            FileConfig::embedded()
                .catalog()
                .unwrap_or_else(|_| Catalog::new(ModelTable::new(Vec::new()), BTreeMap::new()))
        })
        .clone()
}
