//! The model table: which tokenizer, window and output reserve a model name
//! resolves to. Names match exactly or, for prefix entries, by longest prefix.

use std::sync::Arc;

use super::provider::ProviderRules;
use super::tokenizer::{Encoding, Tokenizer};

/// What a request naming a model the table does not resolve is told.
pub const UNKNOWN_MODEL: &str = "unknown model: not in the model table (see ListModels)";

/// One model table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Model name, or a name prefix when `prefix` is set.
    pub name: String,
    /// Whether `name` matches every model name it prefixes.
    pub prefix: bool,
    /// How to count.
    pub tokenizer: Tokenizer,
    /// Context window in tokens.
    pub context_window: u32,
    /// Default output reserve in tokens.
    pub output_reserve: u32,
    /// What the model's provider or engine caches need.
    pub cache: CacheSettings,
    /// For an estimating tokenizer: the bounds (min, max percent) its
    /// margin may adapt within from provider feedback; `None` = fixed.
    pub margin_bounds: Option<(u32, u32)>,
    /// The tokenizer generation the model shares with others (counts and
    /// estimates are kept per generation); `None` for a public tokenizer.
    pub generation: Option<Arc<str>>,
}

/// The generation label of an estimated model the table names none for:
/// its counts borrow no other model's figures.
pub const UNKNOWN_GENERATION: &str = "unknown";

/// Whether `name` can be a generation label: 1 to 32 of `a-z`, `0-9`, `.`
/// and `-`, starting with a letter (it is a bounded metric label).
pub fn valid_generation(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// Prompt-cache settings of a model's provider or serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    /// The provider's minimum cacheable prefix, in tokens (the model's
    /// `cache_min_tokens`, else its provider's; always `provider.min_tokens`).
    pub min_tokens: u32,
    /// The engine's cache block size (vLLM 16, TensorRT-LLM 32), in tokens.
    pub engine_block_tokens: u32,
    /// Shards of the OpenAI `prompt_cache_key`, to keep each key under the
    /// provider's ~15 requests/minute spill-over.
    pub key_shards: u32,
    /// Who serves the model and the rules of its cache, for the cache plan.
    pub provider: ProviderRules,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            min_tokens: 1024,
            engine_block_tokens: 16,
            key_shards: 1,
            provider: ProviderRules::default(),
        }
    }
}

impl ModelSpec {
    /// The generation label counts of this model are kept under: its
    /// table's, `unknown` for an estimate without one, `None` when its
    /// tokenizer is public (exact).
    pub fn generation_label(&self) -> Option<&str> {
        match (&self.generation, self.tokenizer.is_exact()) {
            (Some(g), _) => Some(g),
            (None, false) => Some(UNKNOWN_GENERATION),
            (None, true) => None,
        }
    }

    /// Whether the model's provider reads a turn's thinking passed back
    /// (and bills it as input): Anthropic and Bedrock do.
    pub fn reads_thinking(&self) -> bool {
        self.cache.provider.provider.reads_thinking()
    }

    /// Whether `model` is this entry's name or, for a prefix entry, continues
    /// it with `-`.
    pub fn matches(&self, model: &str) -> bool {
        match model.strip_prefix(self.name.as_str()) {
            Some("") => true,
            Some(rest) => self.prefix && rest.starts_with('-'),
            None => false,
        }
    }
}

/// The known models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelTable {
    entries: Vec<Arc<ModelSpec>>,
}

impl ModelTable {
    /// A table of `entries`, sorted by name.
    pub fn new(mut entries: Vec<ModelSpec>) -> Self {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        ModelTable {
            entries: entries.into_iter().map(Arc::new).collect(),
        }
    }

    /// The entry for `model`: an exact name wins, else the longest prefix
    /// entry that `model` continues with `-`.
    pub fn resolve(&self, model: &str) -> Option<&Arc<ModelSpec>> {
        self.entries
            .iter()
            .filter(|e| e.matches(model))
            .max_by_key(|e| (e.name == model, e.name.len()))
    }

    /// Every entry, sorted by name.
    pub fn entries(&self) -> &[Arc<ModelSpec>] {
        &self.entries
    }

    /// The distinct encodings the table uses, for warming at start.
    pub fn encodings(&self) -> Vec<Encoding> {
        let mut out: Vec<Encoding> = Vec::new();
        for e in self.entries.iter().filter_map(|e| e.tokenizer.encoding()) {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let t = crate::config::default_catalog().models;
        let name = |m: &str| t.resolve(m).map(|s| s.name.clone());
        assert_eq!(name("gpt-4o-mini").as_deref(), Some("gpt-4o"));
        assert_eq!(name("gpt-4-0613").as_deref(), Some("gpt-4"));
        assert_eq!(name("gpt-4-turbo-2024-04-09").as_deref(), Some("gpt-4-turbo"));
        assert_eq!(name("gpt-4.1-nano").as_deref(), Some("gpt-4.1"));
        assert_eq!(name("gpt-5").as_deref(), Some("gpt-5"));
        assert_eq!(name("claude-sonnet-4-5").as_deref(), Some("claude-sonnet-4"));
        assert_eq!(
            name("claude-opus-4-7-20260416").as_deref(),
            Some("claude-opus-4-7")
        );
        assert_eq!(name("claude-next").as_deref(), Some("claude"));
        assert_eq!(name("gpt-4.5-preview").as_deref(), Some("gpt-4.5"));
        assert_eq!(name("gpt-4-1106-preview").as_deref(), Some("gpt-4-1106-preview"));
        assert_eq!(name("gpt-4-turbo-preview").as_deref(), Some("gpt-4-turbo"));
        assert_eq!(name("gpt-4ox"), None);
        assert_eq!(name("llama-3"), None);
        assert_eq!(name(""), None);
    }

    /// Every model tiktoken knows an o200k/cl100k encoding for resolves to
    /// the same encoding here.
    #[test]
    fn encodings_agree_with_tiktoken() {
        let t = crate::config::default_catalog().models;
        for model in [
            "gpt-5",
            "gpt-5-mini",
            "gpt-5-nano",
            "gpt-4.1",
            "gpt-4.1-mini",
            "gpt-4.5-preview",
            "gpt-4o",
            "gpt-4o-mini",
            "gpt-4o-2024-08-06",
            "chatgpt-4o-latest",
            "o1",
            "o1-mini",
            "o1-preview",
            "o3",
            "o3-mini",
            "o4-mini",
            "o4-mini-2025-04-16",
            "gpt-4",
            "gpt-4-0613",
            "gpt-4-32k",
            "gpt-4-turbo",
            "gpt-4-turbo-2024-04-09",
            "gpt-4-1106-preview",
            "gpt-4-0125-preview",
            "gpt-3.5-turbo",
            "gpt-3.5-turbo-0125",
            "gpt-35-turbo",
            "gpt-35-turbo-16k",
        ] {
            let ours = t.resolve(model).and_then(|s| s.tokenizer.encoding());
            let theirs = match tiktoken_rs::tokenizer::get_tokenizer(model) {
                Some(tiktoken_rs::tokenizer::Tokenizer::O200kBase) => Some(Encoding::O200kBase),
                Some(tiktoken_rs::tokenizer::Tokenizer::Cl100kBase) => Some(Encoding::Cl100kBase),
                other => panic!("{model}: unexpected reference encoding {other:?}"),
            };
            assert_eq!(ours, theirs, "{model}");
        }
    }

    #[test]
    fn encodings_follow_the_model_families() {
        let t = crate::config::default_catalog().models;
        let enc = |m: &str| t.resolve(m).and_then(|s| s.tokenizer.encoding());
        assert_eq!(enc("gpt-4o"), Some(Encoding::O200kBase));
        assert_eq!(enc("o3-mini"), Some(Encoding::O200kBase));
        assert_eq!(enc("gpt-3.5-turbo"), Some(Encoding::Cl100kBase));
        assert!(t.resolve("gpt-5-mini").is_some_and(|s| s.tokenizer.is_exact()));
        assert!(
            t.resolve("claude-3-haiku")
                .is_some_and(|s| !s.tokenizer.is_exact())
        );
    }
}
