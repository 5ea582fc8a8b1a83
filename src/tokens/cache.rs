//! Token-count caches keyed by a digest of (tokenizer id, bytes), bounded in
//! bytes: SHA-256 or keyed blake3 by the text's length and the CPU
//! ([`crate::tokens::digest::TextHasher`], through
//! [`Tokenizer::text_hasher`]), so one pass over the bytes makes the key.
//!
//! Counts live in a purpose-built table ([`clock`]): a few dozen bytes per
//! entry, CLOCK eviction, single flight. Turn summaries ([`MemoCache`]) are
//! values of any size, weighed one by one, and stay in moka.

use moka::sync::Cache;

use super::tokenizer::Tokenizer;

pub mod clock;
pub mod known;
pub mod request_keys;

use clock::Clock;
pub use known::KnownKeys;
pub use request_keys::RequestKeys;

/// The memo cache's table hasher: foldhash, seeded at random per process.
/// The keys are blake3 digests already, so the table needs only a cheap mix
/// that a caller cannot aim at one bucket; moka's default (SipHash-1-3)
/// cost 8% of a cold request's CPU hashing 32-byte keys.
type Hasher = foldhash::fast::RandomState;

/// A cache key: the digest of the counted bytes, keyed by the tokenizer id
/// ([`crate::tokens::digest::TextHasher`]).
pub type Key = clock::Key;

/// Bytes a [`MemoCache`] entry costs beyond its value's heap: the 32-byte key
/// and the `Arc` plus moka's bookkeeping (its hash-table bucket, the entry's
/// `Arc`, the access-order deque node and the frequency sketch). Measured,
/// not guessed: filling a moka cache of counts with a million keys grew the
/// resident set by 357 bytes per entry held.
const MEMO_ENTRY_BYTES: u32 = 384;

/// The key of `bytes` counted with `tokenizer`.
pub fn key(tokenizer: &Tokenizer, bytes: &[u8]) -> Key {
    let mut h = tokenizer.text_hasher(bytes.len());
    h.update(bytes);
    h.finalize()
}

/// A bounded map from content digest to token count (or, for static
/// prefixes, to a small `Copy` record of facts about it).
pub struct CountCache<V = u32> {
    inner: Clock<V>,
}

impl<V: Copy> std::fmt::Debug for CountCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountCache")
            .field("entries", &self.inner.held())
            .finish()
    }
}

impl<V: Copy> CountCache<V> {
    /// Bytes one entry costs: its key, value and reference bit, and its
    /// share of the index. `tests/cache_memory.rs` checks the resident set
    /// grows by no more than this per entry held.
    pub const ENTRY_BYTES: u32 = clock::entry_bytes::<V>();

    /// A cache whose entries take at most `max_bytes`. Lookups are not
    /// counted here: callers tally them per request and record once.
    pub fn new(max_bytes: u64) -> Self {
        CountCache {
            inner: Clock::new(max_bytes),
        }
    }

    /// The cached value.
    pub fn get(&self, key: &Key) -> Option<V> {
        self.inner.get(key)
    }

    /// Remembers a value.
    pub fn insert(&self, key: Key, value: V) {
        self.inner.insert(key, value);
    }

    /// The value under `key`, made by `init` on a miss (single flight: of
    /// callers that miss the same key at once, one runs `init` and the
    /// others wait for its value and see a hit); an `Err` from `init` is
    /// returned and nothing is cached (a waiter then tries itself). Returns
    /// the value and whether it was a hit.
    pub fn get_or_try_count<E>(&self, key: Key, init: impl FnOnce() -> Result<V, E>) -> Result<(V, bool), E> {
        let (v, made) = self.inner.get_or_try_insert_with(key, init)?;
        Ok((v, !made))
    }

    /// Entries currently held.
    pub fn entry_count(&self) -> u64 {
        self.inner.held()
    }

    /// The bytes held: entries held times [`CountCache::ENTRY_BYTES`].
    pub fn weighted_bytes(&self) -> u64 {
        self.inner.held() * u64::from(Self::ENTRY_BYTES)
    }

    /// Entries the cache can hold.
    pub fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
}

impl CountCache<u32> {
    /// The key of `bytes` counted with `tokenizer`.
    pub fn key(tokenizer: &Tokenizer, bytes: &[u8]) -> Key {
        key(tokenizer, bytes)
    }

    /// Counts `text` through the cache: a hit costs a hash and a lookup.
    /// Returns the count and whether it was a hit. Single flight: callers
    /// that miss the same key at once tokenize it once; the others wait for
    /// that count and see a hit (they tokenized nothing).
    pub fn count(&self, tokenizer: &Tokenizer, text: &str) -> (u32, bool) {
        self.count_keyed(tokenizer, key(tokenizer, text.as_bytes()), text)
    }

    /// [`CountCache::count`] of `text` whose key ([`key`] of `tokenizer` and
    /// `text`, nothing else) the caller has: a caller that needs the key for
    /// more than the count hashes the text once.
    pub(crate) fn count_keyed(&self, tokenizer: &Tokenizer, key: Key, text: &str) -> (u32, bool) {
        if tokenizer.content_estimate().is_some() {
            // A content estimate's count follows its calibrator's state,
            // which its text keys do not name: never cached.
            return (tokenizer.count(text), false);
        }
        let exact = |tokenizer: &Tokenizer| tokenizer.count(text).min(AT_LEAST - 1);
        let (n, made) = self.inner.get_or_insert_with(key, || exact(tokenizer));
        if n & AT_LEAST != 0 {
            // Only a lower bound is known: count, and keep the count.
            let n = exact(tokenizer);
            self.insert(key, n);
            return (n, false);
        }
        (n, !made)
    }

    /// The count of the text whose key is `key` when the cache holds it (a
    /// lower bound is not a count), counting nothing.
    pub(crate) fn cached_keyed(&self, key: &Key) -> Option<u32> {
        self.get(key).filter(|n| n & AT_LEAST == 0)
    }

    /// What [`CountCache::count_at_most`] answers for `text` and `limit`,
    /// when the cache alone can say it, counting nothing.
    pub fn cached_at_most(&self, tokenizer: &Tokenizer, text: &str, limit: u32) -> Option<Option<u32>> {
        if tokenizer.content_estimate().is_some() {
            // Never cached, and as cheap to count as to look up.
            return Some(tokenizer.count_at_most(text, limit));
        }
        self.cached_at_most_keyed(&key(tokenizer, text.as_bytes()), limit)
    }

    /// [`CountCache::cached_at_most`] of the text whose key (under a
    /// tokenizer that is not a content estimate) is `key`.
    pub(crate) fn cached_at_most_keyed(&self, key: &Key, limit: u32) -> Option<Option<u32>> {
        answer(self.get(key)?, limit)
    }

    /// The count of `text` when it is at most `limit`, else `None`, through
    /// the cache: a text counted before answers from it, and one known to
    /// be past the limit (a lower bound kept from an earlier try) answers
    /// `None` without counting. Otherwise counting stops past `limit`, and a
    /// text that goes past it leaves `limit + 1` as its known lower bound.
    /// Returns whether nothing was counted (a hit).
    pub fn count_at_most(&self, tokenizer: &Tokenizer, text: &str, limit: u32) -> (Option<u32>, bool) {
        if tokenizer.content_estimate().is_some() {
            // Never cached, as in `count_keyed`.
            return (tokenizer.count_at_most(text, limit), false);
        }
        self.count_at_most_keyed(tokenizer, key(tokenizer, text.as_bytes()), text, limit)
    }

    /// [`CountCache::count_at_most`] of `text` whose key ([`key`] of
    /// `tokenizer`, not a content estimate, and `text`) the caller has: a
    /// caller that looked the key up first hashes the text once.
    pub(crate) fn count_at_most_keyed(
        &self,
        tokenizer: &Tokenizer,
        key: Key,
        text: &str,
        limit: u32,
    ) -> (Option<u32>, bool) {
        let answer = |v: u32| answer(v, limit);
        let count = || match tokenizer.count_at_most(text, limit) {
            Some(n) => n.min(AT_LEAST - 1),
            None => limit.saturating_add(1).min(AT_LEAST - 1) | AT_LEAST,
        };
        // Single flight, as for full counts: of identical requests that
        // miss at once, one counts and the others answer from its value.
        let (stored, made) = self.inner.get_or_insert_with(key, count);
        if let Some(known) = answer(stored) {
            return (known, !made);
        }
        // A bound below this limit (an earlier request offered less room):
        // count again against this one.
        let v = count();
        self.insert(key, v);
        (answer(v).flatten(), false)
    }
}

/// What a stored count-cache value says against `limit`, when it says
/// enough: a count answers (itself, or `None` past the limit); a lower bound
/// answers `None` only when it is already past the limit.
fn answer(v: u32, limit: u32) -> Option<Option<u32>> {
    if v & AT_LEAST == 0 {
        Some(Some(v).filter(|&n| n <= limit))
    } else if v & !AT_LEAST > limit {
        Some(None)
    } else {
        None
    }
}

/// The flag of a count cache value that is a lower bound (the text was
/// counted only until it passed a limit), not a count. No text the server
/// accepts comes near 2^31 tokens.
const AT_LEAST: u32 = 1 << 31;

/// What a [`MemoCache`] value costs in memory beyond its entry: its heap.
pub trait Weigh {
    /// Bytes held on the heap.
    fn heap_bytes(&self) -> usize;
}

/// A bounded map from a digest of everything a value was made from to the
/// value (keyed by tokenizer, like the counts): the turn summaries Assemble
/// keeps, so a warm request whose dropped turns are the same as before gets
/// the same summary and count for a hash and a lookup, and a session's next
/// request extends the summary it left. Bounded by the values' heap
/// bytes plus a fixed cost per entry.
pub struct MemoCache<V> {
    inner: Cache<Key, std::sync::Arc<V>, Hasher>,
}

impl<V> std::fmt::Debug for MemoCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoCache")
            .field("entries", &self.inner.entry_count())
            .finish()
    }
}

impl<V: Weigh + Send + Sync + 'static> MemoCache<V> {
    /// A cache holding at most about `max_bytes` of values and entries.
    pub fn new(max_bytes: u64) -> Self {
        MemoCache {
            inner: Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_: &Key, v: &std::sync::Arc<V>| {
                    u32::try_from(v.heap_bytes())
                        .unwrap_or(u32::MAX)
                        .saturating_add(MEMO_ENTRY_BYTES)
                })
                .build_with_hasher(Hasher::default()),
        }
    }

    /// The value under `key`.
    pub fn get(&self, key: &Key) -> Option<std::sync::Arc<V>> {
        self.inner.get(key)
    }

    /// Remembers a value.
    pub fn insert(&self, key: Key, value: std::sync::Arc<V>) {
        self.inner.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::tokenizer::Encoding;

    #[test]
    fn keys_differ_by_tokenizer_and_bytes() {
        let a = Tokenizer::exact(Encoding::O200kBase);
        let b = Tokenizer::exact(Encoding::Cl100kBase);
        assert_ne!(CountCache::key(&a, b"x"), CountCache::key(&b, b"x"));
        assert_ne!(CountCache::key(&a, b"x"), CountCache::key(&a, b"y"));
        assert_eq!(CountCache::key(&a, b"x"), CountCache::key(&a, b"x"));
    }

    #[test]
    fn count_goes_through_the_cache() {
        let cache = CountCache::new(1 << 20);
        let t = Tokenizer::exact(Encoding::O200kBase);
        let (n, hit) = cache.count(&t, "hello world");
        assert_eq!(n, t.count("hello world"));
        assert!(!hit);
        assert_eq!(cache.count(&t, "hello world"), (n, true));
        assert_eq!(cache.get(&CountCache::key(&t, b"hello world")), Some(n));
    }

    #[test]
    fn counting_to_a_limit_keeps_a_lower_bound_that_never_passes_for_a_count() {
        let cache = CountCache::new(1 << 20);
        let t = Tokenizer::exact(Encoding::O200kBase);
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let n = t.count(&text);
        // Past the limit: counted to it, the bound kept.
        assert_eq!(cache.count_at_most(&t, &text, 10), (None, false));
        // A smaller limit answers from the bound; a larger one counts again.
        assert_eq!(cache.count_at_most(&t, &text, 5), (None, true));
        assert_eq!(cache.count_at_most(&t, &text, 20), (None, false));
        assert_eq!(cache.count_at_most(&t, &text, 15), (None, true));
        // A full count never answers the bound as a count, and replaces it.
        assert_eq!(cache.count(&t, &text), (n, false));
        assert_eq!(cache.count(&t, &text), (n, true));
        assert_eq!(cache.count_at_most(&t, &text, n), (Some(n), true));
        assert_eq!(cache.count_at_most(&t, &text, n - 1), (None, true));
        // Within the limit at the first try: the count is kept.
        let short = "hello world";
        let m = t.count(short);
        assert_eq!(cache.count_at_most(&t, short, m), (Some(m), false));
        assert_eq!(cache.count(&t, short), (m, true));
    }

    #[test]
    fn concurrent_misses_of_one_key_count_once() {
        let cache = CountCache::new(1 << 20);
        let t = Tokenizer::exact(Encoding::O200kBase);
        let text = "a fairly long text to count. ".repeat(20_000);
        let start = std::sync::Barrier::new(8);
        let misses: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        usize::from(!cache.count(&t, &text).1)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(misses, 1);
        let failed: Result<_, _> = cache.get_or_try_count([7; 32], || Err::<u32, ()>(()));
        assert!(failed.is_err());
        assert_eq!(cache.get(&[7; 32]), None, "an error is not cached");
    }

    /// A value that weighs its text.
    struct Text(String);

    impl Weigh for Text {
        fn heap_bytes(&self) -> usize {
            self.0.len()
        }
    }

    #[test]
    fn memo_cache_is_bounded_by_heap_bytes() {
        let cache = MemoCache::new(64 * 1024);
        for i in 0..1000u32 {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.to_le_bytes());
            cache.insert(key, std::sync::Arc::new(Text("x".repeat(1024))));
        }
        cache.inner.run_pending_tasks();
        assert!(
            cache.inner.weighted_size() <= 64 * 1024,
            "{}",
            cache.inner.weighted_size()
        );
        assert!(cache.inner.entry_count() >= 32, "{}", cache.inner.entry_count());
    }

    #[test]
    fn weight_bound_holds() {
        let cache = CountCache::new(u64::from(CountCache::<u32>::ENTRY_BYTES) * 10);
        let t = Tokenizer::exact(Encoding::O200kBase);
        for i in 0..1000 {
            cache.insert(CountCache::key(&t, format!("{i}").as_bytes()), i);
        }
        assert!(cache.entry_count() <= 10);
    }
}
