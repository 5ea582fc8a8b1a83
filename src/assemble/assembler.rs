//! The facade: an [`Assembler`] holds what every request shares (the
//! catalog, swapped on reload and adapted from usage reports; the count,
//! prefix and turn-summary caches; the prefix family and usage trackers) and
//! runs the stages of one request (`stages`: admit, fit, account, answer).

use std::sync::{Arc, PoisonError, RwLock};

use super::caches::Caches;
use super::error::AssembleError;
use super::learned::Learning;
use super::policy::Catalog;
use super::stages::account::account;
use super::stages::admit::admit;
use super::stages::answer::answer;
use super::stages::fit::{Fitted, fit};
use super::stages::{Attempt, Options, Shared};
use crate::compact::{CompactionSettings, Counting};
use crate::prompt::{AssembleRequest, Assembly, Sources};
use crate::prompt_cache::families::FamilyTracker;
use crate::prompt_cache::feedback::{Comparison, Feedback, UsageReport};
use crate::telemetry::metrics;
use crate::tokens::models::UNKNOWN_MODEL;
use crate::tokens::{Encoding, ModelSpec, ModelTable, Tokenizer};
use crate::vocab::Cancel;

/// Default weight of the token-count caches.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Assembles prompts. Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Assembler {
    catalog: RwLock<Arc<Catalog>>,
    /// The caches every request shares.
    pub(super) caches: Caches,
    families: FamilyTracker,
    feedback: Feedback,
    /// What providers counted, and their counters.
    learning: Learning,
}

/// Which tokenizer `CountTokens` should use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountTarget {
    /// A model name from the table.
    Model(String),
    /// An encoding name.
    Encoding(String),
}

/// A token count and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount {
    /// Tokens.
    pub tokens: u32,
    /// Tokenizer id.
    pub tokenizer: String,
    /// Whether exact (nothing estimated: a public tokenizer's count, or
    /// the provider's).
    pub exact: bool,
    /// Where the tokens came from (they add up to `tokens`).
    pub sources: Sources,
}

impl Assembler {
    /// An assembler over `catalog` whose caches hold about `cache_bytes`
    /// (17/32 for segments and items, 1/16 for the texts seen again with
    /// their count keys, 1/8 for prefixes, 9/32 for the turn summaries
    /// tried, each eviction step's). A summary hit
    /// saves summarizing every turn it covers and counting the result; at
    /// 1/16 the replay's summaries missed at the default 64 MiB while the
    /// segment cache held everything with room to spare (warm 4k: allocate
    /// 81 against 20 µs per request).
    pub fn new(catalog: Catalog, cache_bytes: u64) -> Self {
        Assembler {
            catalog: RwLock::new(Arc::new(catalog)),
            caches: Caches::new(cache_bytes),
            families: FamilyTracker::default(),
            feedback: Feedback::default(),
            learning: Learning::default(),
        }
    }

    /// What providers counted, and their counters (started once, by the
    /// server, from `[providers.NAME.counting]`).
    pub fn learning(&self) -> &Learning {
        &self.learning
    }

    /// The current catalog (models and policies).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the catalog; requests already running keep the one they
    /// started with. Cached counts stay valid: they are keyed by tokenizer.
    pub fn set_catalog(&self, catalog: Catalog) {
        for e in catalog.models.encodings() {
            e.warm();
        }
        *self.catalog.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(catalog);
    }

    /// Loads every vocabulary the table uses (readiness waits for this).
    pub fn warm(&self) {
        let catalog = self.catalog();
        for e in catalog.models.encodings() {
            e.warm();
        }
        // Said once the log is set up: at first startup the folders load
        // before it is.
        for spec in catalog.models.entries() {
            if let Some(model) = spec.tokenizer.hf_model() {
                model.say_slow();
            }
        }
    }

    /// Compares a provider's usage report with the sidecar's count for the
    /// request, and records both.
    pub fn report_usage(&self, report: &UsageReport) -> Option<Comparison> {
        let c = self.feedback.report(report)?;
        if let Some(model) = c.counted_for.as_deref().filter(|_| !report.answer.is_empty()) {
            // Counted now, so that the session's next request finds the
            // answer, one of its turns, counted by the provider.
            let catalog = self.catalog();
            if let Some(spec) = catalog.models.entries().iter().find(|e| *e.name == *c.model) {
                self.learning.learn_answer(spec, model, &report.answer);
            }
        }
        if let Some(e) = &c.estimated {
            // Counted by content: the report teaches the estimate, and the
            // table's margin (which such requests do not use) stays.
            self.learning.observe_report(e, report.prompt_tokens);
            return Some(c);
        }
        let catalog = self.catalog();
        let spec = catalog.models.entries().iter().find(|e| *e.name == *c.model)?;
        if let (Some(bounds), false) = (spec.margin_bounds, spec.tokenizer.is_exact()) {
            let wanted = self
                .feedback
                .adapt(&c, report.prompt_tokens, bounds, std::time::Instant::now());
            if let Some(margin) = wanted.filter(|&m| m != spec.tokenizer.margin_percent()) {
                self.set_margin(&c.model, margin);
            }
        }
        Some(c)
    }

    /// Gives the estimating model `name` a new margin (read-modify-write of
    /// the catalog under its lock, so a concurrent reload is not undone).
    fn set_margin(&self, name: &str, margin: u32) {
        let mut guard = self.catalog.write().unwrap_or_else(PoisonError::into_inner);
        let mut catalog = (**guard).clone();
        let entries = catalog
            .models
            .entries()
            .iter()
            .map(|e| {
                let mut e = (**e).clone();
                if e.name == name {
                    e.tokenizer = e.tokenizer.with_margin_percent(margin);
                }
                e
            })
            .collect();
        catalog.models = ModelTable::new(entries);
        *guard = Arc::new(catalog);
        drop(guard);
        metrics::estimate_margin(name.to_owned(), margin);
        tracing::info!(
            model = name,
            margin_percent = margin,
            "estimate margin adapted from provider feedback"
        );
    }

    /// Counts `text` for a model or an encoding as an assembly for that
    /// model counts a message's text: an encoding, an OpenAI model or a
    /// model folder exactly; a model without a public tokenizer whose
    /// provider counts (`[providers.NAME.counting]`) by the provider once it
    /// has counted the text, and until then by content, the text handed to
    /// its counter off the request path (so a caller asking twice sees it
    /// turn from estimated to the provider's); otherwise estimated.
    pub fn count_tokens(&self, target: &CountTarget, text: &str) -> Result<TokenCount, AssembleError> {
        let catalog = self.catalog();
        let (tokenizer, learned) = match target {
            CountTarget::Model(m) => {
                let spec = catalog
                    .models
                    .resolve(m)
                    .ok_or_else(|| AssembleError::invalid("model", UNKNOWN_MODEL))?;
                let learned = self.learning.scope(spec, m).and_then(|s| s.count(text));
                (self.learning.tokenizer(spec, m), learned)
            }
            CountTarget::Encoding(e) => {
                let tokenizer = Encoding::from_name(e).map(Tokenizer::exact).ok_or_else(|| {
                    AssembleError::invalid("encoding", "unknown encoding: use o200k_base or cl100k_base")
                })?;
                (tokenizer, None)
            }
        };
        let (tokens, sources, exact) = match learned {
            Some(n) => (
                n,
                Sources {
                    provider: n,
                    ..Sources::default()
                },
                true,
            ),
            None => {
                let n = tokenizer.count(text);
                (n, Sources::all(n, tokenizer.is_exact()), tokenizer.is_exact())
            }
        };
        Ok(TokenCount {
            tokens,
            tokenizer: tokenizer.to_string(),
            exact,
            sources,
        })
    }

    /// Assembles one prompt under the catalog in force now, consuming the
    /// request (its texts move into the answer). CPU-bound: call it off the
    /// async reactor. [`Assembler::run`] is the same with options.
    pub fn assemble(&self, req: AssembleRequest) -> Result<Assembly, AssembleError> {
        self.run(&self.catalog(), req, Options::new(&Cancel::new()))
            .done()
    }

    /// The one entry point: assembles `req` under `catalog` (the one in force
    /// when the request was admitted: a request that waited across a reload
    /// is assembled as it would have been at once), as `options` say.
    /// The stages, in order (the `stages` module tells each).
    pub fn run(&self, catalog: &Catalog, req: AssembleRequest, options: Options<'_>) -> Attempt {
        let shared = self.shared();
        let admitted = match admit(shared, catalog, req, &options) {
            Ok(admitted) => admitted,
            Err(answered) => return *answered,
        };
        let Some(Fitted { out, render_started }) = fit(shared, catalog, &admitted, &options) else {
            return Attempt::Cold(admitted.req, Some(admitted.key));
        };
        let out = match out {
            Ok(out) => out,
            Err(e) => return Attempt::Done(Err(e), None),
        };
        let accounted = match account(shared, catalog, &admitted, &out) {
            Ok(accounted) => accounted,
            Err(e) => return Attempt::Done(Err(e), None),
        };
        let key = admitted.key.clone();
        let assembly = answer(shared, admitted, out, accounted, render_started);
        Attempt::Done(Ok(assembly), Some(key))
    }

    /// What the stages of every request share.
    fn shared(&self) -> Shared<'_> {
        Shared {
            caches: &self.caches,
            learning: &self.learning,
            families: &self.families,
            feedback: &self.feedback,
        }
    }
}

/// The compactor counts with the assembler's model table, compaction
/// defaults and segment cache (a conversation re-sent each turn is
/// tokenized once for both RPCs).
impl Counting for Assembler {
    fn model(&self, name: &str) -> Option<(Arc<ModelSpec>, CompactionSettings)> {
        let catalog = self.catalog();
        let spec = catalog.models.resolve(name)?.clone();
        Some((spec, catalog.compaction))
    }

    fn count_cached(&self, tokenizer: &Tokenizer, text: &str) -> (u32, bool) {
        self.caches.segments.count(tokenizer, text)
    }
}

#[cfg(test)]
mod tests;
