//! Counting for one request: every text through the shared count cache,
//! tallying hits and misses, and the inline rule (a try where the request
//! was received counts at most its [`Allowance`] of new text: past it the
//! try is cancelled, to be run again in full). Once the request is
//! cancelled nothing more is counted.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::caches::Caches;
use super::learned::Scope;
use crate::telemetry::metrics;
use crate::tokens::hf::{HfModel, Piece};
use crate::tokens::{RequestKeys, Tokenizer, cache};
use crate::vocab::{Cancel, Role};

/// What a run may count or summarize anew, in bytes of text: unbounded for
/// a full run; for a try where the request was received (on the async
/// reactor, which must not be held long), [`INLINE_COUNT_BYTES`], so that a
/// session's next request (a new exchange, a summary extended by the turns
/// that left the window) is assembled there, while one with much new text
/// goes to the blocking pool. A quiet server's try may be given more
/// (`flow::try_allowance`, for a tokenizer that counts fast whatever the
/// text: the fit stage): past [`INLINE_COUNT_BYTES`] it counts only within
/// [`TRY_TIME`] of its start.
#[derive(Debug)]
pub struct Allowance(Option<Bounded>);

/// A try's allowance.
#[derive(Debug)]
struct Bounded {
    given: usize,
    left: Cell<usize>,
    started: Instant,
}

/// New text an inline try may count or summarize: a session's next
/// exchange and the turns its window gives up (counting runs at about 0.5
/// GB/s, so tens of microseconds at most). Past it, the request goes to
/// the blocking pool (but for a quiet server's try, [`Allowance`]).
pub const INLINE_COUNT_BYTES: usize = 16 * 1024;

/// Past [`INLINE_COUNT_BYTES`], a try counts more new text only this long
/// after it began.
pub const TRY_TIME: Duration = Duration::from_millis(1);

impl Allowance {
    /// No bound: a full run.
    pub const fn unbounded() -> Self {
        Allowance(None)
    }

    /// At most `bytes` of new text counted or summarized, from now.
    pub fn bytes(bytes: usize) -> Self {
        Allowance::bytes_from(bytes, Instant::now())
    }

    /// [`Allowance::bytes`] of a try that began at `started`.
    fn bytes_from(bytes: usize, started: Instant) -> Self {
        Allowance(Some(Bounded {
            given: bytes,
            left: Cell::new(bytes),
            started,
        }))
    }

    /// Whether it bounds the run (a try where the request was received).
    pub fn is_bounded(&self) -> bool {
        self.0.is_some()
    }

    /// Takes `bytes` from what is left: `false`, taking nothing, when that
    /// is not enough (or, past [`INLINE_COUNT_BYTES`], the try's time is
    /// up).
    pub fn take(&self, bytes: usize) -> bool {
        let Some(b) = &self.0 else {
            return true;
        };
        let Some(rest) = b.left.get().checked_sub(bytes) else {
            return false;
        };
        let past = b.given - rest > INLINE_COUNT_BYTES;
        if past && b.started.elapsed() > TRY_TIME {
            return false;
        }
        b.left.set(rest);
        true
    }
}

/// One request's counter.
pub(super) struct Counter<'a> {
    pub caches: &'a Caches,
    pub tok: &'a Tokenizer,
    pub cancel: &'a Cancel,
    /// What the run may still count or summarize anew: unbounded, or a try
    /// where the request was received, which is abandoned (`cancel` set, to
    /// be run again in full elsewhere) once it would go past it.
    pub allowance: &'a Allowance,
    /// The count keys this request made (by an inline try it was handed
    /// back from, too): a text is hashed once.
    keys: Option<&'a RequestKeys>,
    /// For a model without a public tokenizer: the counts its provider
    /// gave, which a text's count is taken from once there.
    learn: Option<Scope<'a>>,
    /// What the learned counts said of each text this request counted, by
    /// its count-cache key: a text counted again (the window's steps, the
    /// units, the final sum) is looked up once.
    learned_seen: RefCell<HashMap<cache::Key, Option<u32>>>,
    /// A content estimate's counts of the texts this request counted, by
    /// count-cache key (never kept past the request: they follow the
    /// calibrator's state).
    by_content: RefCell<HashMap<cache::Key, u32>>,
    /// Counts answered by a content estimate (not by the provider).
    estimated: Cell<u64>,
    hits: Cell<u64>,
    misses: Cell<u64>,
}

impl<'a> Counter<'a> {
    /// A counter with `tok` through `caches`, stopping once `cancel` is set.
    pub fn new(caches: &'a Caches, tok: &'a Tokenizer, cancel: &'a Cancel, allowance: &'a Allowance) -> Self {
        Counter {
            caches,
            tok,
            cancel,
            allowance,
            keys: None,
            learn: None,
            learned_seen: RefCell::new(HashMap::new()),
            by_content: RefCell::new(HashMap::new()),
            estimated: Cell::new(0),
            hits: Cell::new(0),
            misses: Cell::new(0),
        }
    }

    /// This counter, keeping the keys it makes in `keys`, and finding there
    /// those the request made before.
    pub fn keys(mut self, keys: &'a RequestKeys) -> Self {
        self.keys = Some(keys);
        self
    }

    /// This counter, taking each text's count from what its provider
    /// counted once it has (and handing it the texts it has not).
    pub fn learning(mut self, scope: Option<Scope<'a>>) -> Self {
        self.learn = scope;
        self
    }

    /// Whether this request's texts are handed to a provider's counter: a
    /// text a later request will likely send may be counted ahead.
    pub fn counts_ahead(&self) -> bool {
        self.learn.as_ref().is_some_and(Scope::has_counter)
    }

    /// Hands `text`, a message a later request will likely send, to the
    /// provider's counter unless it is learned already.
    pub fn learn_ahead(&self, text: &str) {
        if let Some(scope) = &self.learn {
            scope.count(text);
        }
    }

    /// How many counts so far a content estimate answered rather than the
    /// provider: what is derived from counts made while it grows must not
    /// be kept, for its texts' counts change once the provider counts them.
    pub fn estimated(&self) -> u64 {
        self.estimated.get()
    }

    /// Records the segment-cache lookups made (not by a warm try that
    /// missed: the full run records its own).
    pub fn record_lookups(&self) {
        metrics::cache_lookups(
            metrics::SEGMENT_CACHE_LOOKUPS_TOTAL,
            self.hits.get(),
            self.misses.get(),
        );
    }

    /// Tokens of a `role` message holding `text` (opening the prompt when
    /// `first`; `key` is the count-cache key of `text`, when the caller has
    /// it). Where the template sets the content in a piece of its own
    /// ([`crate::tokens::chat::Glue`]) that piece is counted, seam and all,
    /// through the cache (the rendering's piece is the same bytes, so the
    /// final count finds it there); else the content, plus the role's frame.
    pub fn message_count(&self, role: Role, first: bool, text: &str, key: Option<&cache::Key>) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        let piece = match self.tok.glue(role, first) {
            Some(g) if !g.is_identity() => {
                let key = g.piece_key(self.tok, text);
                match self.caches.segments.cached_keyed(&key) {
                    Some(n) => {
                        self.hits.set(self.hits.get() + 1);
                        n
                    }
                    None => self.count_keyed(key, &g.piece(text)),
                }
            }
            _ => match key {
                Some(k) => self.count_keyed(*k, text),
                None => self.count(text),
            },
        };
        self.tok.glued_message_tokens(role, first, piece)
    }

    /// The count-cache key of `text` ([`cache::key`]), found without
    /// hashing it when it was seen again before ([`crate::tokens::KnownKeys`]).
    pub fn key(&self, text: &str) -> cache::Key {
        self.caches.keys.key_in(self.tok, text.as_bytes(), self.keys)
    }

    /// Counts through the segment cache, tallying hits and misses. Once the
    /// request is cancelled, counts nothing and returns 0 (the run is
    /// abandoned before any result is used).
    pub fn count(&self, text: &str) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        self.count_keyed(self.key(text), text)
    }

    /// [`Pipeline::count`] of `text` whose count-cache key is `key`.
    pub fn count_keyed(&self, key: cache::Key, text: &str) -> u32 {
        if self.cancel.is_cancelled() {
            return 0;
        }
        if let Some(n) = self.learned(key, text) {
            self.hits.set(self.hits.get() + 1);
            return n;
        }
        if self.tok.content_estimate().is_some() {
            return self.by_content(key, text);
        }
        if self.allowance.is_bounded() {
            if let Some(n) = self.caches.segments.cached_keyed(&key) {
                self.hits.set(self.hits.get() + 1);
                return n;
            }
            if !self.afford(text.len()) {
                return 0;
            }
        }
        let (n, hit) = self.caches.segments.count_keyed(self.tok, key, text);
        let tally = if hit { &self.hits } else { &self.misses };
        tally.set(tally.get() + 1);
        n
    }

    /// [`Pipeline::count`] when at most `limit`, else `None` (counting
    /// stops past the limit; the cache remembers the bound). Once the
    /// request is cancelled, counts nothing and returns `None`.
    pub fn count_at_most(&self, text: &str, limit: u32) -> Option<u32> {
        if self.cancel.is_cancelled() {
            return None;
        }
        // Hashed once, for the learned count and the content estimate's memo.
        let key = (self.learn.is_some() || self.tok.content_estimate().is_some()).then(|| self.key(text));
        if let Some(n) = key.and_then(|k| self.learned(k, text)) {
            self.hits.set(self.hits.get() + 1);
            return Some(n).filter(|&n| n <= limit);
        }
        if self.surely_over(text, limit) {
            return None;
        }
        if let Some(key) = key.filter(|_| self.tok.content_estimate().is_some()) {
            return Some(self.by_content(key, text)).filter(|&n| n <= limit);
        }
        // Hashed once, for the lookup of an inline try and the count.
        let key = key.unwrap_or_else(|| self.key(text));
        if self.allowance.is_bounded() {
            if let Some(n) = self.caches.segments.cached_at_most_keyed(&key, limit) {
                self.hits.set(self.hits.get() + 1);
                return n;
            }
            // At most what `limit` tokens can span is counted.
            if !self.afford(text.len().min(self.tok.most_bytes_within(limit))) {
                return None;
            }
        }
        let (n, hit) = self
            .caches
            .segments
            .count_at_most_keyed(self.tok, key, text, limit);
        let tally = if hit { &self.hits } else { &self.misses };
        tally.set(tally.get() + 1);
        n
    }

    /// Tokens the tool definitions `tools` cost, and whether that is what
    /// the provider bills: the provider's count of the set once it has
    /// counted it (for a model that learns), else the tokenizer's
    /// ([`Tokenizer::tools_tokens`]).
    pub fn tools_tokens(&self, tools: &[String]) -> (u32, bool) {
        if let Some(scope) = self.learn {
            if let Some(n) = scope.count_tools(tools) {
                return (n, true);
            }
            self.estimated.set(self.estimated.get() + 1);
        }
        self.tok.tools_tokens(tools)
    }

    /// A content estimate's count of `text` (whose count-cache key is
    /// `key`): one pass over it, as cheap as hashing it, once per request.
    /// Never put in the shared cache (the count follows the calibrator's
    /// state, which the key does not name).
    fn by_content(&self, key: cache::Key, text: &str) -> u32 {
        self.estimated.set(self.estimated.get() + 1);
        if let Some(&n) = self.by_content.borrow().get(&key) {
            return n;
        }
        let n = self.tok.count(text);
        self.by_content.borrow_mut().insert(key, n);
        n
    }

    /// The provider's count of `text` (whose count-cache key is `key`), once
    /// learned; looked up once per text per request. Under a content
    /// estimate the count key is the learned key: no hashing.
    fn learned(&self, key: cache::Key, text: &str) -> Option<u32> {
        let scope = self.learn?;
        if let Some(known) = self.learned_seen.borrow().get(&key) {
            return *known;
        }
        let found = match self.tok.content_estimate() {
            Some(_) => scope.count_keyed(key, text),
            None => scope.count(text),
        };
        self.learned_seen.borrow_mut().insert(key, found);
        found
    }

    /// Whether `text` (or any text holding its whitespace-separated runs,
    /// such as the unit rendered around it) surely counts more than
    /// `limit`. Tried only for far more bytes than the limit: a scan of its
    /// words may prove it cannot fit before it is rendered or hashed for
    /// the cache (an item offered the little room left costs what the room
    /// holds, not what it offers).
    pub fn surely_over(&self, text: &str, limit: u32) -> bool {
        let long = usize::try_from(limit).is_ok_and(|l| l < text.len() / 4);
        long && self.tok.surely_over(text, limit)
    }

    /// Whether the run may count or summarize `bytes` of new text: always
    /// for a full run; for an inline try, while its allowance lasts (taken
    /// from it), else the try is abandoned (`cancel` set).
    pub fn afford(&self, bytes: usize) -> bool {
        let fits = self.allowance.take(bytes);
        if !fits {
            self.cancel.cancel();
        }
        fits
    }

    /// Tokens of the rendering `text` of a prompt: piece by piece where
    /// `model`'s added tokens cut it ([`crate::tokens::hf::Piece`]: the sum
    /// is the whole's count, exactly), each piece through the segment cache,
    /// so a prompt that shares messages with an earlier one counts only its
    /// new pieces; else whole.
    pub fn count_rendered(&self, model: &HfModel, text: &str) -> u32 {
        let mut n = 0u32;
        let cut = model.split(text, |p| {
            n = n.saturating_add(match p {
                Piece::Added => 1,
                Piece::Text(t) => self.count(t),
            });
        });
        match cut {
            Some(()) => n,
            None => self.count(text),
        }
    }
}

#[cfg(test)]
mod tests;
