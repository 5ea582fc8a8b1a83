//! Content digests: blake3 (and, for the count keys of short texts on a CPU
//! with SHA instructions, SHA-256: [`TextHasher`]), with a tally of the
//! bytes each thread has hashed. Hashing is a large share of a warm request (a cache lookup costs
//! one digest of the text it counts), so the rule is that an `Assemble`
//! request's text is hashed once; every digest on that path (count keys,
//! prefix keys, turn-summary keys, request and session ids) goes through
//! here ([`Hasher`], [`TextHasher`]), so a test holds the path to the rule by a byte count, whatever the
//! machine's speed. (Compaction's seals and markers hash on their own. A
//! recall digests an item's normalized text again only when it is as long
//! as a recalled memory's, to compare them: `memory/keeper/distinct.rs`.)

use std::cell::Cell;

use sha2::Digest as _;

thread_local! {
    static HASHED: Cell<u64> = const { Cell::new(0) };
}

/// Bytes this thread has hashed through [`Hasher`] and [`TextHasher`] since
/// it started.
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

/// Texts shorter than this are keyed with SHA-256 where the CPU has SHA
/// instructions ([`TextHasher`]). blake3 hashes a text under 1 KiB one
/// 64-byte block at a time and only spreads longer ones over its SIMD lanes:
/// on the project's machine (AMD EPYC, SHA-NI, AVX-512) SHA-256 hashed 1-4
/// KiB texts at 1.9-2.0 GB/s against blake3's 0.68-0.97, the two met at
/// 16 KiB (2.1 and 2.2 GB/s), and blake3 ran ahead beyond (3.5 GB/s at
/// 32 KiB, 7.5 at 1 MiB).
pub const SHORT_TEXT_BYTES: usize = 16 << 10;

/// What a SHA-256 text key hashes before the tokenizer's key and the text
/// (a blake3 key is keyed instead).
const SHA_TEXT_DOMAIN: &[u8] = b"context-assembler/text-key/sha256/v1\0";

/// Whether this CPU runs SHA-256 in hardware as the `sha2` crate uses it
/// (x86-64's SHA extensions; `sha2` uses the ARM ones only with its `asm`
/// feature, so not there). Detected once; the same all the process long, so
/// a text's key never changes while a cache holds it.
fn sha_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sha")
            && std::arch::is_x86_feature_detected!("sse2")
            && std::arch::is_x86_feature_detected!("ssse3")
            && std::arch::is_x86_feature_detected!("sse4.1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The hasher of a text's count key, keyed by its tokenizer, chosen by the
/// length of what it will hash: SHA-256 of the domain, the key and the text
/// for a text under [`SHORT_TEXT_BYTES`] where SHA-256 runs in hardware,
/// else keyed blake3 of the text. Either is collision resistant (the 32-byte
/// key is what a cache entry is found by: equal keys mean equal bytes), and
/// one length always takes the same hash, so equal texts always get equal
/// keys, however they are fed.
#[derive(Clone)]
pub struct TextHasher {
    state: TextState,
    /// The length the hash was chosen by, less what was fed so far: all of
    /// it must be fed (checked in debug builds, so a caller that declared
    /// another length than it feeds fails its tests on any CPU).
    #[cfg(debug_assertions)]
    unfed: usize,
}

// On the stack for the few lines it lives (blake3's hasher is about 1.9
// KB): boxing it cost an allocation per key.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum TextState {
    Sha(sha2::Sha256),
    Blake(blake3::Hasher),
}

impl TextHasher {
    /// A hasher for `len` bytes (the caller feeds exactly that many) keyed
    /// by `key`.
    pub fn new(key: &[u8; 32], len: usize) -> Self {
        Self::choosing(key, len, sha_in_hardware())
    }

    /// As [`TextHasher::new`], but chosen by length alone, so every
    /// machine computes the same key ([`portable_text_key`]).
    pub fn portable(key: &[u8; 32], len: usize) -> Self {
        Self::choosing(key, len, true)
    }

    /// As [`TextHasher::new`], SHA-256 for short texts only when `sha`.
    fn choosing(key: &[u8; 32], len: usize, sha: bool) -> Self {
        let state = if sha && len < SHORT_TEXT_BYTES {
            let mut h = sha2::Sha256::new();
            h.update(SHA_TEXT_DOMAIN);
            h.update(key);
            TextState::Sha(h)
        } else {
            TextState::Blake(blake3::Hasher::new_keyed(key))
        };
        TextHasher {
            state,
            #[cfg(debug_assertions)]
            unfed: len,
        }
    }

    /// Adds `bytes` to the input (tallied as [`Hasher`]'s are).
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        HASHED.with(|h| h.set(h.get() + bytes.len() as u64));
        #[cfg(debug_assertions)]
        {
            assert!(
                bytes.len() <= self.unfed,
                "a text hasher fed more bytes than its length"
            );
            self.unfed -= bytes.len();
        }
        match &mut self.state {
            TextState::Sha(h) => h.update(bytes),
            TextState::Blake(h) => {
                h.update(bytes);
            }
        }
        self
    }

    /// The key.
    pub fn finalize(self) -> [u8; 32] {
        #[cfg(debug_assertions)]
        assert_eq!(self.unfed, 0, "a text hasher fed fewer bytes than its length");
        match self.state {
            TextState::Sha(h) => h.finalize().into(),
            TextState::Blake(h) => *h.finalize().as_bytes(),
        }
    }
}

/// The key of `text` under `key` that every machine computes alike:
/// [`TextHasher`]'s choice made by length alone (SHA-256 under
/// [`SHORT_TEXT_BYTES`] even where the CPU runs it in software), so a key
/// shared across a fleet (a learned count in a shared store) means the same
/// bytes on every node. Tallied.
pub fn portable_text_key(key: &[u8; 32], text: &[u8]) -> [u8; 32] {
    let mut h = TextHasher::portable(key, text.len());
    h.update(text);
    h.finalize()
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

    fn text_key(key: &[u8; 32], text: &[u8], sha: bool) -> [u8; 32] {
        let mut h = TextHasher::choosing(key, text.len(), sha);
        h.update(text);
        h.finalize()
    }

    /// A short text's key is SHA-256 of the domain, the key and the text
    /// where chosen, else (and for a long text) keyed blake3; fed in
    /// pieces, the same key; tallied.
    #[test]
    fn a_text_key_is_sha256_below_the_threshold_and_blake3_above() {
        let key = [9u8; 32];
        let short = b"the build log says the lock file is out of date";
        let mut sha = sha2::Sha256::new();
        sha.update(SHA_TEXT_DOMAIN);
        sha.update(key);
        sha.update(short);
        let want: [u8; 32] = sha.finalize().into();
        assert_eq!(text_key(&key, short, true), want);
        assert_eq!(
            text_key(&key, short, false),
            *blake3::keyed_hash(&key, short).as_bytes()
        );
        for len in [SHORT_TEXT_BYTES - 1, SHORT_TEXT_BYTES] {
            let text = vec![b'a'; len];
            let blake = *blake3::keyed_hash(&key, &text).as_bytes();
            assert_eq!(
                text_key(&key, &text, true) == blake,
                len >= SHORT_TEXT_BYTES,
                "{len}"
            );
            assert_eq!(text_key(&key, &text, false), blake, "{len}");
        }
        let before = hashed_bytes();
        let mut h = TextHasher::choosing(&key, short.len(), true);
        h.update(&short[..10]).update(&short[10..]);
        assert_eq!(h.finalize(), want);
        assert_eq!(hashed_bytes() - before, short.len() as u64);
        // The portable key takes SHA-256 by length alone, on any CPU.
        assert_eq!(portable_text_key(&key, short), want);
        let long = vec![b'a'; SHORT_TEXT_BYTES];
        assert_eq!(
            portable_text_key(&key, &long),
            *blake3::keyed_hash(&key, &long).as_bytes()
        );
    }

    /// A hasher fed other than the length it was chosen by fails (in the
    /// debug builds the tests run), whichever hash it took.
    #[test]
    #[cfg(debug_assertions)]
    fn a_text_hasher_must_be_fed_its_length() {
        for sha in [true, false] {
            let short = std::panic::catch_unwind(|| {
                let mut h = TextHasher::choosing(&[1; 32], 5, sha);
                h.update(b"four");
                h.finalize()
            });
            assert!(short.is_err(), "fed less, sha {sha}");
            let long = std::panic::catch_unwind(|| {
                let mut h = TextHasher::choosing(&[1; 32], 3, sha);
                h.update(b"four");
            });
            assert!(long.is_err(), "fed more, sha {sha}");
        }
    }

    proptest::proptest! {
        /// Equal bytes, equal keys, however they are split; other bytes
        /// or another tokenizer's key, another key. Lengths around the
        /// threshold take both hashes.
        #[test]
        fn text_keys_depend_on_the_bytes_and_the_key_only(
            len in proptest::prop_oneof![0usize..200, (SHORT_TEXT_BYTES - 70)..(SHORT_TEXT_BYTES + 70)],
            cut in 0usize..1_000_000,
            flip in 0usize..1_000_000,
            sha in proptest::bool::ANY,
            seed in 0u8..255,
        ) {
            let text: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
            let key = [seed; 32];
            let whole = text_key(&key, &text, sha);
            let cut = if len == 0 { 0 } else { cut % (len + 1) };
            let mut h = TextHasher::choosing(&key, len, sha);
            h.update(&text[..cut]).update(&text[cut..]);
            proptest::prop_assert_eq!(h.finalize(), whole);
            let mut other_key = key;
            other_key[0] ^= 1;
            proptest::prop_assert_ne!(text_key(&other_key, &text, sha), whole);
            if len > 0 {
                let mut other = text.clone();
                other[flip % len] ^= 0x20;
                proptest::prop_assert_ne!(text_key(&key, &other, sha), whole);
            }
        }
    }
}
