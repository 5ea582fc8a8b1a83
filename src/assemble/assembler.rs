//! The facade: an [`Assembler`] holds what every request shares (the
//! catalog, swapped on reload and adapted from usage reports; the count,
//! prefix and turn-summary caches; the prefix family and usage trackers) and
//! runs one [`Pipeline`] per request.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Instant;

use super::cache_report;
use super::caches::Caches;
use super::counting::{Allowance, Counter};
use super::error::AssembleError;
use super::layout;
use super::learned::Learning;
use super::lighten;
use super::pipeline::{Pipeline, RunOutput};
use super::policy::Catalog;
use super::validate::{self, Resolved};
use crate::compact::{CompactionSettings, Counting};
use crate::prompt::{AssembleRequest, Assembly, Change, Message, Sources, TokenIds};
use crate::prompt_cache::block_keys::block_keys;
use crate::prompt_cache::families::FamilyTracker;
use crate::prompt_cache::feedback::{Comparison, Feedback, Remembered, UsageReport};
use crate::prompt_cache::plan;
use crate::prompt_cache::prefix::PrefixKey;
use crate::telemetry::metrics;
use crate::tokens::hf::HfModel;
use crate::tokens::models::UNKNOWN_MODEL;
use crate::tokens::{ChatMessage, Encoding, ModelSpec, ModelTable, Tokenizer};
use crate::vocab::{Cancel, Warning, codes, saturating_u32};

/// Default weight of the token-count caches.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Allocations of one request under a chat template before it is refused
/// as over its budget: the first, one lowered by the overshoot (the
/// per-message estimate is off by a few tokens, so it nearly always fits),
/// then a search between budgets that refused and budgets that went over.
const MAX_RENDER_TRIES: u32 = 8;

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
    /// (19/32 for segments and items, 1/8 for prefixes, 9/32 for the turn
    /// summaries tried, each eviction step's). A summary hit
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
    pub fn run(&self, catalog: &Catalog, req: AssembleRequest, options: Options<'_>) -> Attempt {
        self.assemble_inner(catalog, req, options)
    }

    fn assemble_inner(&self, catalog: &Catalog, mut req: AssembleRequest, options: Options<'_>) -> Attempt {
        let Options {
            cancel,
            prefix,
            inline,
        } = options;
        let allowance = inline.map_or(Allowance::unbounded(), Allowance::bytes);
        let warm_only = inline.is_some();
        // A batch cancelled midway hands every later request over at once.
        if cancel.is_cancelled() {
            return Attempt::Done(Err(AssembleError::Cancelled), None);
        }
        // Token ids tokenize the whole prompt: never on an inline try.
        if warm_only && req.return_token_ids {
            return Attempt::Cold(req, None);
        }
        let started = Instant::now();
        let Resolved {
            spec,
            policy,
            budget,
            tools,
        } = match validate::validate(&req, catalog) {
            Ok(r) => r,
            Err(e) => return Attempt::Done(Err(AssembleError::InvalidArgument(e)), None),
        };
        if let Some(model) = spec.tokenizer.hf_model()
            && policy.neutralize_special_tokens
        {
            neutralize(&mut req, model);
        }
        let key = prefix
            .cloned()
            .unwrap_or_else(|| PrefixKey::of(&tools, &req.static_segments));
        // A request may wait, as configured, for its provider to count its
        // static prefix at first sight; a warm try (on the reactor, where
        // nothing may block) hands such a request over instead.
        let waiting = self.learning.scope(&spec, &req.model).and_then(|scope| {
            let texts: Vec<&str> = req.static_segments.iter().map(|s| s.content.as_str()).collect();
            scope.should_wait(&texts)
        });
        if let Some(keys) = waiting {
            if warm_only {
                return Attempt::Cold(req, Some(key));
            }
            if let Some(scope) = self.learning.scope(&spec, &req.model) {
                scope.wait_for(&keys);
            }
        }
        // A template's frames are estimated per message; the rendered count
        // is exact. A prompt the estimate let past the budget is allocated
        // again under a lower budget: first lowered by the overshoot, then,
        // once a lowered budget leaves no room for what cannot be cut (the
        // overshoot may have been in messages that a cut drops), halfway
        // between the highest budget that refused and the lowest that went
        // over. The answer always names the request's budget, and the first
        // try's prefix lookup (later tries find the prefix it cached).
        let mut allowed = budget;
        let mut tries = 0;
        let mut first_hit = None;
        // Budgets at or above `over_at` render over; at or below `refused_at`
        // leave no room.
        let mut over_at = u32::MAX;
        let mut refused_at: Option<u32> = None;
        let mut least_over = u64::MAX;
        let tokenizer = self.learning.tokenizer(&spec, &req.model);
        let (result, pipeline) = loop {
            let counter = Counter::new(&self.caches, &tokenizer, cancel, &allowance)
                .learning(self.learning.scope(&spec, &req.model));
            let mut pipeline = Pipeline::new(counter, &spec, &policy, &req, &tools, allowed, started);
            let result = pipeline.run(key.clone());
            tries += 1;
            if warm_only && cancel.is_cancelled() {
                break (result, pipeline);
            }
            let rendered = match &result {
                Ok(RunOutput { usage, cache, .. }) => {
                    first_hit.get_or_insert(cache.prefix_cache_hit);
                    Some(u64::from(usage.total_tokens) + u64::from(usage.tools_tokens))
                }
                Err(_) => None,
            };
            let next = match (rendered, &result) {
                (Some(n), _) if n <= u64::from(budget.input) => {
                    let result = result.map(|mut r| {
                        r.usage.budget = budget.input;
                        r.cache.prefix_cache_hit = first_hit.unwrap_or(r.cache.prefix_cache_hit);
                        r
                    });
                    break (result, pipeline);
                }
                (Some(n), _) => {
                    over_at = allowed.input;
                    least_over = least_over.min(n);
                    match refused_at {
                        None => allowed
                            .input
                            .saturating_sub(saturating_u32(n - u64::from(budget.input))),
                        Some(r) => r + (over_at - r) / 2,
                    }
                }
                // A lowered budget that leaves no room: search above it.
                (None, Err(AssembleError::BudgetOverflow { .. })) if tries > 1 => {
                    refused_at = Some(allowed.input);
                    allowed.input + (over_at - allowed.input) / 2
                }
                (None, _) => break (result, pipeline),
            };
            let exhausted = refused_at.is_some_and(|r| next <= r) || next >= over_at;
            if tries >= MAX_RENDER_TRIES || exhausted {
                // The parts as the allocator counted them; what the closest
                // render added beyond them is the template's (so they add up
                // to at least that render).
                let mut needs = pipeline.needs().cloned().unwrap_or_default();
                needs.template = least_over.saturating_sub(needs.total());
                let overflow = AssembleError::BudgetOverflow {
                    non_cuttable_tokens: needs.total(),
                    budget: budget.input,
                    model: spec.name.clone(),
                    needs: Box::new(needs),
                };
                break (Err(overflow), pipeline);
            }
            allowed.input = next;
        };
        if warm_only && cancel.is_cancelled() {
            drop(pipeline);
            return Attempt::Cold(req, Some(key));
        }
        // Observed once per request: after a warm try that missed, by the
        // full run.
        if let Some(family) = catalog.family_label(&req.prefix_family) {
            self.families
                .observe(family, &key.digest, std::time::Instant::now());
        }
        pipeline.record_lookups();
        let render_started = pipeline.lap;
        let out: RunOutput = match result {
            Ok(r) => r,
            Err(e) => return Attempt::Done(Err(e), None),
        };
        let rules = &spec.cache.provider;
        let roles = out.plan.iter().map(|(role, _)| *role);
        let mut plan = match cache_report::cache_plan(rules, roles, &out.parts, tools.len(), &req.cache_ttl) {
            Ok(p) => p,
            Err(e) => return Attempt::Done(Err(e), None),
        };
        let header = cache_report::header(&spec.name, &out.usage.tokenizer, &req.cache_salt);
        let (fingerprint, divergence) = match cache_report::fingerprint(&req, header, &out.parts) {
            Ok(f) => f,
            Err(e) => return Attempt::Done(Err(e), None),
        };
        if let Some(d) = &divergence {
            let family = catalog
                .family_label(&req.prefix_family)
                .unwrap_or(metrics::FAMILY_NONE);
            metrics::prompt_cache_divergence(d.change.as_str(), family);
        }
        let mut divergence = divergence;
        if let Some(d) = &mut divergence {
            d.servable_tokens = if d.change == Change::Appended {
                plan::after_append(rules, &mut plan, d.message_index, d.token_offset)
            } else {
                plan::servable(rules, d.token_offset, &plan)
            };
        }
        let mut prefix = [0u8; 8];
        prefix.copy_from_slice(&key.digest[..8]);
        // What the provider should serve: what the previous prompt left it,
        // or, without one, the part of a prefix seen before that it can read;
        // nothing when this prefix was last assembled longer ago than the
        // entries it wrote live.
        let lifetime = cache_report::lifetime(rules, &plan);
        let fresh = self
            .feedback
            .seen(prefix, std::time::Instant::now())
            .is_some_and(|gap| gap <= lifetime);
        let expected_cached = match &divergence {
            _ if !fresh => 0,
            Some(d) => d.servable_tokens,
            None if out.cache.prefix_cache_hit => plan::servable(
                rules,
                out.usage.tools_tokens.saturating_add(out.usage.static_tokens),
                &plan,
            ),
            None => 0,
        };
        let request_id = req.request_id.clone();
        let asked = req
            .return_token_ids
            .then(|| (req.model.clone(), req.cache_salt.clone()));
        let counted_for = self.learning.counts(&spec).then(|| Arc::from(req.model.as_str()));
        let messages = layout::materialize(out.plan, req);
        let mut usage = out.usage;
        let (sources, estimated) = self.learning.sources(
            &spec,
            counted_for.as_deref().unwrap_or_default(),
            &tokenizer,
            &messages,
            usage.total_tokens,
            usage.tools_tokens,
        );
        usage.sources = sources;
        usage.exact = usage.sources.estimated == 0;
        self.feedback.remember(
            &request_id,
            Remembered {
                model: Arc::from(spec.name.as_str()),
                margin_percent: spec.tokenizer.margin_percent(),
                tokens: usage.total_tokens.saturating_add(usage.tools_tokens),
                expected_cached,
                prefix,
                estimated,
                counted_for,
            },
        );
        let s = usage.sources;
        metrics::prompt_tokens_by_source(&spec.name, s.exact, s.provider, s.estimated);
        let mut warnings = out.warnings;
        let token_ids = asked.and_then(|(model, salt)| {
            let ids = token_ids(&spec, &messages, &tools, &model, &salt);
            if ids.is_none() {
                warnings.push(Warning::new(
                    codes::TOKEN_IDS_UNAVAILABLE,
                    format!(
                        "token ids need a model folder with a chat template; {} counts with {}",
                        spec.name, spec.tokenizer
                    ),
                ));
            }
            ids
        });
        let assembly = Assembly {
            request_id,
            model: spec.name.clone(),
            messages,
            usage,
            cache: out.cache,
            decisions: out.decisions,
            warnings,
            tools,
            hints: out.hints,
            token_ids,
            cache_plan: Box::new(cache_report::answer_plan(plan)),
            fingerprint,
            divergence: divergence.map(Box::new),
        };
        metrics::phase(metrics::PHASE_RENDER, render_started.elapsed());
        Attempt::Done(Ok(assembly), Some(key))
    }
}

/// The prompt's ids as the engine computes them from `spec`'s folder (the
/// messages and tools rendered with its chat template, tokenized without
/// adding special tokens), with the engine's block keys for `model` (the
/// name as asked for, as a router knows it) and `salt`. `None` for a model
/// without a folder or a template, or a template that refuses.
fn token_ids(
    spec: &ModelSpec,
    messages: &[Message],
    tools: &[String],
    model: &str,
    salt: &str,
) -> Option<TokenIds> {
    let folder = spec.tokenizer.hf_model()?;
    let reasoning = reasonings(messages);
    let chat = chat_messages(messages, &reasoning);
    let tools: Vec<serde_json::Value> = tools
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    let tools = (!tools.is_empty()).then_some(tools.as_slice());
    let text = spec.tokenizer.rendered_text(&chat, tools)?.ok()?;
    let ids = folder.encode(&text, false).ok()?;
    let block_tokens = spec.cache.engine_block_tokens;
    Some(TokenIds {
        block_keys: block_keys(model, &ids, block_tokens as usize, salt),
        ids,
        block_tokens,
    })
}

/// Each assembled message's thinking as a chat template reads it.
pub(super) fn reasonings(messages: &[Message]) -> Vec<Option<String>> {
    messages
        .iter()
        .map(|m| lighten::readable_thinking(&m.thinking))
        .collect()
}

/// Assembled messages as a chat template reads them, with their thinking
/// (`reasoning`: [`reasonings`] of them).
pub(super) fn chat_messages<'m>(
    messages: &'m [Message],
    reasoning: &'m [Option<String>],
) -> Vec<ChatMessage<'m>> {
    messages
        .iter()
        .zip(reasoning)
        .map(|(m, r)| ChatMessage {
            role: m.role.as_str(),
            content: &m.content,
            reasoning: r.as_deref(),
        })
        .collect()
}

/// How [`Assembler::run`] assembles a request.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Stops the run once set (a deadline passed, the caller went away): no
    /// further text is tokenized and nothing half-counted is cached.
    pub cancel: &'a Cancel,
    /// The prefix key already made for identical static parts: a batch
    /// hashes each prefix once, a warm try hands its key to the full run.
    pub prefix: Option<&'a PrefixKey>,
    /// An inline try (`Some(bytes)`): the assembly when what it needs is
    /// cached (counts, the static prefix's facts, the turn summary) but for
    /// at most `bytes` of new text to count or summarize, or the request
    /// handed back ([`Attempt::Cold`]) at the first thing that would go past
    /// that. The work is hashing, lookups and a bounded count, so a server
    /// may run it where it received the request instead of handing it to a
    /// pool of threads that may block. Nothing is recorded for a try handed
    /// back; what it counted stays cached for the full run.
    pub inline: Option<usize>,
}

impl<'a> Options<'a> {
    /// A full run that stops once `cancel` is set.
    pub fn new(cancel: &'a Cancel) -> Self {
        Options {
            cancel,
            prefix: None,
            inline: None,
        }
    }
}

/// What a run came to.
#[derive(Debug)]
pub enum Attempt {
    /// Assembled, or refused (an invalid request, a budget overflow, a
    /// cancellation); with the prefix key it used, when it got that far.
    Done(Result<Assembly, AssembleError>, Option<PrefixKey>),
    /// A warm try met something not cached: the request, back, with its
    /// prefix key, for a full run.
    Cold(AssembleRequest, Option<PrefixKey>),
}

impl Attempt {
    /// The assembly or the error; a warm try that missed is
    /// [`AssembleError::Cancelled`] (only a warm try misses).
    pub fn done(self) -> Result<Assembly, AssembleError> {
        match self {
            Attempt::Done(done, _) => done,
            Attempt::Cold(..) => Err(AssembleError::Cancelled),
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
mod templates;
/// Breaks the spellings of `model`'s special tokens in the items and the
/// query of `req` (never its static prefix); a text that spells none is
/// not copied.
fn neutralize(req: &mut AssembleRequest, model: &HfModel) {
    let fix = |text: &mut String| {
        if let Some(t) = model.neutralize(text) {
            *text = t;
        }
    };
    fix(&mut req.query);
    for item in req.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
        fix(&mut item.content);
        if let Some(c) = item.compact_form.as_mut() {
            fix(c);
        }
    }
}

#[cfg(test)]
mod tests;
