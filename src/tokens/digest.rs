//! Content digests: blake3, with a tally of the bytes each thread has
//! hashed. Hashing is a large share of a warm request (a cache lookup costs
//! one digest of the text it counts), so the rule is that an `Assemble`
//! request's text is hashed once; every digest on that path (count keys,
//! prefix keys, turn-summary keys, request and session ids) goes through
//! here, so a test holds the path to the rule by a byte count, whatever the
//! machine's speed. (Compaction's seals and markers hash on their own. A
//! recall digests an item's normalized text again only when it is as long
//! as a recalled memory's, to compare them: `memory/keeper/distinct.rs`.)

use std::cell::Cell;

thread_local! {
    static HASHED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes this thread has hashed through [`Hasher`] since it started.
pub fn hashed_bytes() -> u64 {
    HASHED.with(Cell::get)
}

/// The blake3 digest of `bytes`, tallied.
pub fn hash(bytes: &[u8]) -> blake3::Hash {
    Hasher::new().update(bytes).finalize()
}

/// A blake3 hasher whose input is tallied (the tally is one add per
/// update).
#[derive(Clone)]
pub struct Hasher(blake3::Hasher);

impl Hasher {
    /// An unkeyed hasher.
    pub fn new() -> Self {
        Hasher(blake3::Hasher::new())
    }

    /// A hasher keyed by `key`.
    pub fn new_keyed(key: &[u8; 32]) -> Self {
        Hasher(blake3::Hasher::new_keyed(key))
    }

    /// Adds `bytes` to the input.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        HASHED.with(|h| h.set(h.get() + bytes.len() as u64));
        self.0.update(bytes);
        self
    }

    /// The digest of the input so far.
    pub fn finalize(&self) -> blake3::Hash {
        self.0.finalize()
    }
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_what_was_hashed_and_the_digest_is_blake3s() {
        let before = hashed_bytes();
        let mut h = Hasher::new();
        h.update(b"hello ").update(b"world");
        assert_eq!(hashed_bytes() - before, 11);
        assert_eq!(h.finalize(), blake3::hash(b"hello world"));
        let key = [7u8; 32];
        let mut k = Hasher::new_keyed(&key);
        k.update(b"x");
        assert_eq!(k.finalize(), blake3::keyed_hash(&key, b"x"));
    }
}
