//! Token-count caches keyed by blake3(tokenizer id, bytes), bounded by weight.
//! The tokenizer id is the hash key (see [`Tokenizer::hasher`]), so one pass
//! over the bytes makes the cache key.
//!
//! Values are plain `u32` counts, so a lookup copies four bytes; the key is a
//! 32-byte digest, so memory per entry is constant and the bound in MiB holds.

use moka::sync::Cache;

use super::tokenizer::Tokenizer;

/// A cache key: blake3 of the counted bytes, keyed by the tokenizer id.
pub type Key = [u8; 32];

/// Bytes one entry costs in memory: the 32-byte key and the value plus moka's
/// bookkeeping (its hash-table bucket, the entry's `Arc`, the access-order
/// deque node and the frequency sketch). Measured, not guessed: filling a
/// cache with a million keys grows the resident set by 357 bytes per entry
/// held (`tests/cache_memory.rs` checks it stays within this weight), so the
/// configured MiB bounds real memory. (128, the first guess, let a 64 MiB
/// cache take 178 MiB.)
pub const ENTRY_WEIGHT_BYTES: u32 = 384;

/// The key of `bytes` counted with `tokenizer`.
pub fn key(tokenizer: &Tokenizer, bytes: &[u8]) -> Key {
    let mut h = tokenizer.hasher();
    h.update(bytes);
    *h.finalize().as_bytes()
}

/// A bounded map from content digest to token count (or, for static
/// prefixes, to a small `Copy` record of facts about it).
#[derive(Clone)]
pub struct CountCache<V = u32> {
    inner: Cache<Key, V>,
}

impl<V: Copy + Send + Sync + 'static> std::fmt::Debug for CountCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountCache")
            .field("entries", &self.inner.entry_count())
            .finish()
    }
}

impl<V: Copy + Send + Sync + 'static> CountCache<V> {
    /// A cache holding at most about `max_bytes` of entries. Lookups are not
    /// counted here: callers tally them per request and record once.
    pub fn new(max_bytes: u64) -> Self {
        CountCache {
            inner: Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_: &Key, _: &V| ENTRY_WEIGHT_BYTES)
                .build(),
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
    /// returned and nothing is cached. Returns the value and whether it was
    /// a hit.
    pub fn get_or_try_count<E: Send + Sync + 'static>(
        &self,
        key: Key,
        init: impl FnOnce() -> Result<V, E>,
    ) -> Result<(V, bool), std::sync::Arc<E>> {
        if let Some(v) = self.get(&key) {
            return Ok((v, true));
        }
        let entry = self.inner.entry(key).or_try_insert_with(init)?;
        Ok((entry.value().to_owned(), !entry.is_fresh()))
    }

    /// Entries currently held (approximate until pending work runs).
    pub fn entry_count(&self) -> u64 {
        self.inner.run_pending_tasks();
        self.inner.entry_count()
    }

    /// The weight held, in bytes (after pending work runs).
    pub fn weighted_bytes(&self) -> u64 {
        self.inner.run_pending_tasks();
        self.inner.weighted_size()
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
        let key = key(tokenizer, text.as_bytes());
        if let Some(n) = self.get(&key) {
            return (n, true);
        }
        let entry = self.inner.entry(key).or_insert_with(|| tokenizer.count(text));
        (entry.value().to_owned(), !entry.is_fresh())
    }
}

/// Rendered texts with their exact token counts, keyed by a digest of
/// everything the text was made from (keyed by tokenizer, like the counts).
/// Holds the turn summaries of Assemble: a warm request whose dropped turns
/// are the same as before gets the same unit and count for a hash and a
/// lookup, instead of summarizing and counting again. Bounded by the texts'
/// bytes plus a fixed cost per entry.
#[derive(Clone)]
pub struct TextCache {
    inner: Cache<Key, std::sync::Arc<(String, u32)>>,
}

impl std::fmt::Debug for TextCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextCache")
            .field("entries", &self.inner.entry_count())
            .finish()
    }
}

impl TextCache {
    /// A cache holding at most about `max_bytes` of texts and entries.
    pub fn new(max_bytes: u64) -> Self {
        TextCache {
            inner: Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_: &Key, v: &std::sync::Arc<(String, u32)>| {
                    u32::try_from(v.0.len())
                        .unwrap_or(u32::MAX)
                        .saturating_add(ENTRY_WEIGHT_BYTES)
                })
                .build(),
        }
    }

    /// The text and count under `key`.
    pub fn get(&self, key: &Key) -> Option<std::sync::Arc<(String, u32)>> {
        self.inner.get(key)
    }

    /// Remembers a text and its count.
    pub fn insert(&self, key: Key, text: String, tokens: u32) {
        self.inner.insert(key, std::sync::Arc::new((text, tokens)));
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

    #[test]
    fn text_cache_is_bounded_by_text_bytes() {
        let cache = TextCache::new(64 * 1024);
        for i in 0..1000u32 {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.to_le_bytes());
            cache.insert(key, "x".repeat(1024), i);
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
        let cache = CountCache::new(u64::from(ENTRY_WEIGHT_BYTES) * 10);
        let t = Tokenizer::exact(Encoding::O200kBase);
        for i in 0..1000 {
            cache.insert(CountCache::key(&t, format!("{i}").as_bytes()), i);
        }
        assert!(cache.entry_count() <= 10);
    }
}
