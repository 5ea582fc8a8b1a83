//! The caches every request shares, by what they remember: counts of texts
//! (segments, items, tools, the query), what is known of each static prefix,
//! and the turn summaries tried. All bounded in bytes, all keyed by the
//! tokenizer, so a catalog reload leaves them valid.

use super::turn_memo::TurnMemo;
use crate::prompt_cache::prefix::PrefixFacts;
use crate::tokens::{CountCache, KnownKeys, MemoCache};

/// The shared caches.
#[derive(Debug)]
pub(super) struct Caches {
    /// Counts of segments, items, tools and the query.
    pub segments: CountCache,
    /// The count keys of texts seen again, found by their bytes (the
    /// digest a warm request's texts would otherwise cost).
    pub keys: KnownKeys,
    /// What is known of each static prefix, by tokenizer, hash and salt.
    pub prefixes: CountCache<PrefixFacts>,
    /// Every turn summary tried (each eviction step's: its count and
    /// running summary), by the turns it summarizes.
    pub summaries: MemoCache<TurnMemo>,
}

impl Caches {
    /// Caches that take at most `cache_bytes` together, shared as
    /// [`super::Assembler::new`] says.
    pub fn new(cache_bytes: u64) -> Self {
        Caches {
            segments: CountCache::new(cache_bytes / 32 * 17),
            keys: KnownKeys::new(cache_bytes / 16),
            prefixes: CountCache::new(cache_bytes / 8),
            summaries: MemoCache::new(cache_bytes / 32 * 9),
        }
    }
}
