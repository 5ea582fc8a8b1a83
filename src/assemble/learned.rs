//! What the providers counted (issue 52): for a model without a public
//! tokenizer (Claude, Gemini without a folder), every text the assembler
//! counts is a piece; a piece first seen is estimated and handed to its
//! provider's [`Counter`], off the request path; once the provider has
//! counted it, its count (less the frame of a one-message request) is the
//! piece's count from then on, for every model of the same tokenizer
//! generation. The provider's frames, measured per model, replace the
//! estimate's.
//!
//! A piece not counted yet is estimated by its content ([`crate::tokens::estimate`]):
//! each generation's [`Calibrator`] learns from every count the provider
//! gives, and a request counts with the calibrator's state frozen when it
//! starts ([`ContentEstimate`]). A new state is frozen every few
//! observations (more apart as they accumulate), since each one is a new
//! tokenizer identity to the count caches, and at once after a count the
//! frozen state missed by more than [`SURPRISE`] where the calibrator's
//! state now misses it by half that or less (a kind of text not seen yet:
//! its next pieces are estimated with what its first taught; a tokenizer
//! no estimate fits keeps missing, and freezes on the schedule alone).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::prompt::{Message, Sources};
use crate::prompt_cache::feedback::Estimated;
use crate::provider_count::{self, CountError, Counter, Piece, PieceKind, Settings};
use crate::telemetry::metrics;
use crate::tokens::digest;
use crate::tokens::estimate::{Calibrator, Features, Generation, SURPRISE, Snapshot};
use crate::tokens::provider::Provider;
use crate::tokens::tokenizer::{ContentEstimate, MeasuredFrames, Tokenizer};
use crate::tokens::{KnownKeys, ModelSpec};

/// Most model names learned for: each costs the provider a few calls to
/// measure its frames, and a caller may name any model a prefix entry
/// takes; past this, further names are estimated only.
const MAX_MODELS: usize = 64;

/// Most pieces remembered (a piece costs its key and count, about 64 bytes
/// with the table's own: 1M pieces, about 64 MiB at most).
const MAX_PIECES: u64 = 1 << 20;

/// The counts learned, by piece key (the generation is in the key).
#[derive(Debug, Clone)]
pub struct Learned {
    table: moka::sync::Cache<[u8; 32], u32>,
    /// Counts inserted so far, and the waiters for more
    /// ([`Learned::wait_for`]).
    inserted: Arc<(Mutex<u64>, Condvar)>,
}

impl Learned {
    /// An empty table holding at most `pieces`.
    pub fn new(pieces: u64) -> Self {
        Learned {
            table: moka::sync::Cache::builder().max_capacity(pieces).build(),
            inserted: Arc::default(),
        }
    }

    /// The key of `text` counted by a tokenizer of `generation`: pieces of
    /// two generations never share one, and every machine computes the
    /// same (a fleet shares them: [`digest::portable_text_key`]). It is
    /// the text's count key under a content estimate of `generation`
    /// ([`Tokenizer::generation_text_key`]), so a request looks a text up
    /// with the key it already has.
    pub fn key(generation: &str, text: &str) -> [u8; 32] {
        digest::portable_text_key(&Tokenizer::generation_text_key(generation), text.as_bytes())
    }

    /// The provider's count of the piece keyed `key`, once learned.
    pub fn get(&self, key: &[u8; 32]) -> Option<u32> {
        self.table.get(key)
    }

    /// Remembers a piece's count, and wakes whoever waits for one.
    pub fn insert(&self, key: [u8; 32], tokens: u32) {
        self.table.insert(key, tokens);
        let (count, woken) = &*self.inserted;
        *count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        woken.notify_all();
    }

    /// Waits until every key of `keys` is learned, or `until`; whether they
    /// all are. Blocks the calling thread: only where a request may wait
    /// (the blocking pool, never a warm try on the reactor).
    pub fn wait_for(&self, keys: &[[u8; 32]], until: Instant) -> bool {
        let (count, woken) = &*self.inserted;
        let mut seen = count.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // Checked under the lock: an insert between the check and the
            // wait would have to take it first, and so wakes this wait.
            if keys.iter().all(|k| self.table.contains_key(k)) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            seen = woken
                .wait_timeout(seen, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The key of the tool set `text` (a JSON array of definitions)
    /// counted for `generation`: apart from any message's key, for a tool
    /// set costs what the provider's tool use adds, not its text.
    pub fn tools_key(generation: &str, text: &str) -> [u8; 32] {
        let key = blake3::derive_key("context-assembler learned tool set v1", generation.as_bytes());
        digest::portable_text_key(&key, text.as_bytes())
    }

    /// Whether the piece keyed `key` is learned.
    pub fn contains(&self, key: &[u8; 32]) -> bool {
        self.table.contains_key(key)
    }

    /// Pieces remembered.
    pub fn len(&self) -> u64 {
        self.table.run_pending_tasks();
        self.table.entry_count()
    }

    /// Whether no piece is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Learned {
    fn default() -> Self {
        Learned::new(MAX_PIECES)
    }
}

/// Most observations between two frozen states of a calibrator.
const MOST_BETWEEN_FREEZES: u64 = 16;

/// One tokenizer generation's calibrator and the state requests count with.
#[derive(Debug)]
pub struct GenerationEstimate {
    calibrator: Calibrator,
    frozen: RwLock<Arc<ContentEstimate>>,
}

impl GenerationEstimate {
    fn new(label: &str) -> Self {
        let calibrator = Calibrator::new(Generation::of_label(label));
        let frozen = Arc::new(ContentEstimate {
            generation: Arc::from(label),
            snapshot: calibrator.snapshot(),
        });
        GenerationEstimate {
            calibrator,
            frozen: RwLock::new(frozen),
        }
    }

    /// The calibrator.
    pub fn calibrator(&self) -> &Calibrator {
        &self.calibrator
    }

    /// The state requests count with now.
    pub fn current(&self) -> Arc<ContentEstimate> {
        self.frozen.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Learns from the provider's count of a text (or texts) with
    /// `features`, records the error the estimate made, and freezes a new
    /// state once a quarter more observations (at least one, at most
    /// [`MOST_BETWEEN_FREEZES`]) came in since the last, or at once when the
    /// frozen state misses this count by more than [`SURPRISE`] and the
    /// calibrator's now by half that or less.
    fn observe(&self, features: &Features, tokens: u32) {
        let Some((class, error)) = self.calibrator.observe(features, u64::from(tokens)) else {
            return;
        };
        let mut frozen = self.frozen.write().unwrap_or_else(PoisonError::into_inner);
        metrics::piece_estimate_error(&frozen.generation, class.as_str(), error);
        let since = frozen.snapshot.observations;
        let now = self.calibrator.snapshot();
        let due = now.observations >= since + (since / 4).clamp(1, MOST_BETWEEN_FREEZES);
        // How far the state requests count with, and the calibrator's
        // now, are from this count: a state that misses it, where the new
        // one would not, is replaced at once.
        let miss = |s: &Snapshot| (s.estimate(features) / f64::from(tokens) - 1.0).abs();
        let (stale, fresh) = (miss(&frozen.snapshot), miss(&now));
        if due || (stale > SURPRISE && fresh < stale / 2.0) {
            *frozen = Arc::new(ContentEstimate {
                generation: frozen.generation.clone(),
                snapshot: now,
            });
        }
    }
}

/// Each tokenizer generation's estimate, by label (bounded by the model
/// table's labels).
#[derive(Debug, Default)]
pub struct Estimates {
    by_label: RwLock<HashMap<Arc<str>, Arc<GenerationEstimate>>>,
}

impl Estimates {
    /// The estimate of generation `label` (made at its prior when new).
    pub fn get(&self, label: &str) -> Arc<GenerationEstimate> {
        if let Some(e) = self
            .by_label
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(label)
        {
            return e.clone();
        }
        let mut all = self.by_label.write().unwrap_or_else(PoisonError::into_inner);
        all.entry(Arc::from(label))
            .or_insert_with(|| Arc::new(GenerationEstimate::new(label)))
            .clone()
    }
}

/// Where the counters put what they learn.
struct Sink {
    learned: Learned,
    estimates: Arc<Estimates>,
}

impl provider_count::Sink for Sink {
    fn learned(&self, piece: &Piece, content_tokens: u32) {
        self.learned.insert(piece.key, content_tokens);
        if piece.kind == PieceKind::Tools {
            // What tool use adds is not what the definitions' text costs:
            // nothing for the text estimate to learn.
            return;
        }
        self.estimates
            .get(&piece.generation)
            .observe(&Features::of(&piece.text), content_tokens);
    }

    fn refused(&self, _piece: &Piece) {
        // The piece stays estimated; the counter counts the refusal.
    }
}

/// The learned counts and the providers' counters.
#[derive(Debug, Default)]
pub struct Learning {
    learned: Learned,
    estimates: Arc<Estimates>,
    counters: OnceLock<Vec<(Provider, Counter, Duration)>>,
    /// The runtime the counters run on.
    runtime: OnceLock<tokio::runtime::Handle>,
    /// The model names learned for (at most [`MAX_MODELS`]).
    models: Mutex<HashSet<String>>,
}

impl Learning {
    /// Starts a counter for each configured provider (once; on the current
    /// runtime). A provider the table does not know by that name is
    /// skipped; a counter that cannot start is an error (at server start).
    pub fn start(&self, settings: Vec<(&str, Settings)>) -> Result<(), CountError> {
        let sink: Arc<dyn provider_count::Sink> = Arc::new(Sink {
            learned: self.learned.clone(),
            estimates: self.estimates.clone(),
        });
        let mut counters = Vec::new();
        for (name, s) in settings {
            if let Some(provider) = Provider::from_name(name) {
                let wait = s.wait;
                counters.push((provider, Counter::start(s, sink.clone())?, wait));
            }
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let _ = self.runtime.set(handle);
        }
        let _ = self.counters.set(counters);
        Ok(())
    }

    /// Whether requests for `model` learn from `counter`: a name already
    /// learned for, or a new one while there is room, whose frames are then
    /// measured in the background.
    fn admit(&self, counter: &Counter, model: &str) -> bool {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        if models.contains(model) {
            return true;
        }
        if models.len() >= MAX_MODELS || model.len() > provider_count::MAX_MODEL_BYTES {
            return false;
        }
        models.insert(model.to_owned());
        if let Some(runtime) = self.runtime.get() {
            let (counter, model) = (counter.clone(), model.to_owned());
            runtime.spawn(async move {
                // A failure leaves the frames estimated; the next piece of
                // the model tries again.
                let _ = counter.measure_frames(&model).await;
            });
        }
        true
    }

    /// The learned counts.
    pub fn learned(&self) -> &Learned {
        &self.learned
    }

    /// Each generation's content-aware estimate.
    pub fn estimates(&self) -> &Estimates {
        &self.estimates
    }

    /// The counter of `provider`, when one is configured.
    pub fn counter(&self, provider: Provider) -> Option<&Counter> {
        self.configured(provider).map(|(c, _)| c)
    }

    /// The counter of `provider` and how long a request may wait for it.
    fn configured(&self, provider: Provider) -> Option<(&Counter, Duration)> {
        self.counters
            .get()?
            .iter()
            .find(|(p, _, _)| *p == provider)
            .map(|(_, c, wait)| (c, *wait))
    }

    /// Whether `spec`'s texts are counted by its provider: no public
    /// tokenizer, a generation, and a counter configured for its provider.
    pub fn counts(&self, spec: &ModelSpec) -> bool {
        spec.generation_label().is_some()
            && !spec.tokenizer.is_exact()
            && self.counter(spec.cache.provider.provider).is_some()
    }

    /// Hands `answer`, the assistant's answer to a request for `model`
    /// (resolved to `spec`), to the provider's counter unless it is learned
    /// already, so that the session's next request, which sends it as a
    /// turn, finds it counted.
    pub fn learn_answer(&self, spec: &ModelSpec, model: &str, answer: &str) {
        if let Some(scope) = self.scope(spec, model).filter(|_| !answer.is_empty()) {
            scope.count(answer);
        }
    }

    /// What counting a request for `model` (resolved to `spec`) learns from
    /// and feeds: `None` for a model with a public tokenizer, or whose
    /// provider has no counter configured (nothing to learn: the lookups,
    /// a hash of every text, are not made).
    pub fn scope<'a>(&'a self, spec: &'a ModelSpec, model: &'a str) -> Option<Scope<'a>> {
        let generation = spec.generation_label().filter(|_| !spec.tokenizer.is_exact())?;
        let (counter, wait) = self.configured(spec.cache.provider.provider)?;
        let counter = Some(counter).filter(|c| self.admit(c, model));
        Some(Scope {
            learned: &self.learned,
            generation,
            model,
            counter,
            wait,
        })
    }

    /// Where the `total` tokens of `messages`, assembled for `spec` with
    /// `tokenizer`, came from: a public tokenizer's are exact; an
    /// estimate's are the provider's for each message whose text it
    /// counted, and for the frames once it measured them, and estimated for
    /// the rest (a message made of several pieces, thinking, tool calls).
    /// With it, for a prompt counted by content whose usage report can
    /// teach the estimate (its frames measured, no tools, no thinking and
    /// no tool calls: only message texts estimated), what it can teach.
    ///
    /// A message whose text is not learned is handed to the counter as a
    /// piece of its own (a message joined from several pieces, such as the
    /// context or a summary, is not one yet), so that a request repeating
    /// it finds it counted. `keys` finds a text's key by its bytes when it
    /// was seen again (at 16k this pass hashed every message once more:
    /// 1.6-1.8x the request path without a counter, against 1.3x at 4k).
    pub fn sources(
        &self,
        spec: &ModelSpec,
        model: &str,
        tokenizer: &Tokenizer,
        messages: &[Message],
        (total, tools_tokens): (u32, u32),
        keys: &KnownKeys,
    ) -> (Sources, Option<Box<Estimated>>) {
        let counted = self.counter(spec.cache.provider.provider).is_some();
        let generation = spec
            .generation_label()
            .filter(|_| counted && !tokenizer.is_exact());
        let Some(generation) = generation else {
            return (Sources::all(total, tokenizer.is_exact()), None);
        };
        let mut provider = 0u64;
        let framed = tokenizer.measured_frames().is_some() && !messages.is_empty();
        if framed {
            provider += u64::from(tokenizer.priming_tokens());
            for m in messages {
                provider += u64::from(tokenizer.frame_tokens(m.role));
            }
        }
        let mut unlearned = Vec::new();
        let scope = self.scope(spec, model);
        for m in messages {
            let key = learned_key(generation, tokenizer, keys, &m.content);
            match self.learned.get(&key) {
                Some(n) => provider += u64::from(n),
                None => {
                    unlearned.push(m.content.as_str());
                    if let Some(scope) = scope.filter(|_| !m.content.is_empty()) {
                        scope.count_keyed(key, &m.content);
                    }
                }
            }
        }
        let provider = u32::try_from(provider).unwrap_or(u32::MAX).min(total);
        let plain = framed
            && tools_tokens == 0
            && tokenizer.content_estimate().is_some()
            && messages
                .iter()
                .all(|m| m.thinking.is_empty() && m.tool_call_ids.is_empty() && m.tool_call_id.is_empty());
        let features: Features = unlearned.iter().filter(|_| plain).map(|t| Features::of(t)).sum();
        let teaches = (!features.is_empty()).then(|| {
            Box::new(Estimated {
                generation: Arc::from(generation),
                features,
                known: provider,
            })
        });
        let sources = Sources {
            exact: 0,
            provider,
            estimated: total - provider,
        };
        (sources, teaches)
    }

    /// Learns from a usage report of a prompt counted by content: its
    /// provider's `total` less what was known is what the estimated texts
    /// cost.
    pub fn observe_report(&self, estimated: &Estimated, total: u32) {
        if let Some(cost) = total.checked_sub(estimated.known).filter(|&n| n > 0) {
            self.estimates
                .get(&estimated.generation)
                .observe(&estimated.features, cost);
        }
    }

    /// `spec`'s tokenizer for a request of `model`. For a model without a
    /// public tokenizer whose provider counts: the frames its provider
    /// measured for that model once it has, and each text not counted yet
    /// estimated by its content, by the generation's calibrator as it is
    /// now. Otherwise the table's tokenizer.
    pub fn tokenizer(&self, spec: &ModelSpec, model: &str) -> Tokenizer {
        let Some(counter) = self
            .counter(spec.cache.provider.provider)
            .filter(|_| !spec.tokenizer.is_exact())
        else {
            return spec.tokenizer.clone();
        };
        let mut t = match counter.frames(model) {
            Some(f) => spec.tokenizer.with_frames(MeasuredFrames {
                priming: f.one_message.saturating_sub(f.further_message),
                message: f.further_message,
                system: f.system,
            }),
            None => spec.tokenizer.clone(),
        };
        if let Some(label) = spec.generation_label() {
            t = t.with_content(self.estimates.get(label).current());
        }
        t
    }
}

/// One request's view of the learned counts.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    learned: &'a Learned,
    generation: &'a str,
    model: &'a str,
    counter: Option<&'a Counter>,
    /// How long a request may wait for its static prefix at first sight.
    wait: Duration,
}

/// The learned key of `text` ([`Learned::key`]). Under a content estimate of
/// `generation` it is the text's count key, so it is found by its bytes when
/// seen again ([`KnownKeys`]), as the fit's are.
fn learned_key(generation: &str, tokenizer: &Tokenizer, keys: &KnownKeys, text: &str) -> [u8; 32] {
    if tokenizer
        .content_estimate()
        .is_some_and(|c| *c.generation == *generation)
    {
        keys.key(tokenizer, text.as_bytes())
    } else {
        Learned::key(generation, text)
    }
}

impl Scope<'_> {
    /// Whether texts not learned are handed to a provider's counter (not
    /// for a model past the table's room).
    pub fn has_counter(&self) -> bool {
        self.counter.is_some()
    }

    /// The provider's count of `text`, once learned; else the text is
    /// handed to the provider's counter (when there is one) and `None`.
    pub fn count(&self, text: &str) -> Option<u32> {
        self.count_keyed(Learned::key(self.generation, text), text)
    }

    /// Whether a request should wait for its provider to count `texts`
    /// (its static prefix) before it is assembled: waiting is configured,
    /// the provider answers (its breaker closed), and some text is not
    /// learned yet. Each text not learned is handed to the counter.
    /// (`tokenizer` makes the request's, `keys` is where its texts' keys
    /// are found by their bytes.)
    pub fn should_wait(
        &self,
        texts: &[&str],
        tokenizer: impl FnOnce() -> Tokenizer,
        keys: &KnownKeys,
    ) -> Option<Vec<[u8; 32]>> {
        let counter = self
            .counter
            .filter(|c| !self.wait.is_zero() && !c.stats().breaker_open)?;
        let tokenizer = &tokenizer();
        let missing: Vec<[u8; 32]> = texts
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| (learned_key(self.generation, tokenizer, keys, t), *t))
            .filter(|(key, _)| !self.learned.contains(key))
            .map(|(key, text)| {
                counter.submit(self.piece(key, text));
                key
            })
            .collect();
        (!missing.is_empty()).then_some(missing)
    }

    /// Waits, at most the configured time, for the provider to count the
    /// texts keyed `keys` ([`Scope::should_wait`]); whether it did.
    pub fn wait_for(&self, keys: &[[u8; 32]]) -> bool {
        self.learned.wait_for(keys, Instant::now() + self.wait)
    }

    fn piece(&self, key: [u8; 32], text: &str) -> Piece {
        Piece {
            model: self.model.to_owned(),
            generation: Arc::from(self.generation),
            key,
            kind: PieceKind::Turn,
            text: Arc::from(text),
        }
    }

    /// The provider's count of the tool set `tools` (each a definition's
    /// JSON), once learned; else the set is handed to the counter as one
    /// piece and `None`.
    pub fn count_tools(&self, tools: &[String]) -> Option<u32> {
        if tools.is_empty() {
            return Some(0);
        }
        let text = format!("[{}]", tools.join(","));
        let key = Learned::tools_key(self.generation, &text);
        if let Some(n) = self.learned.get(&key) {
            return Some(n);
        }
        if let Some(counter) = self.counter {
            counter.submit(Piece {
                kind: PieceKind::Tools,
                ..self.piece(key, &text)
            });
        }
        None
    }

    /// [`Scope::count`] of `text` whose learned key ([`Learned::key`] of
    /// this scope's generation and `text`) is `key`.
    pub fn count_keyed(&self, key: [u8; 32], text: &str) -> Option<u32> {
        if let Some(n) = self.learned.get(&key) {
            return Some(n);
        }
        if let Some(counter) = self.counter {
            counter.submit(self.piece(key, text));
        }
        None
    }
}

#[cfg(test)]
mod tests;
