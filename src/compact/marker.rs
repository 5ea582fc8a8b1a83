//! The key that seals the markers Compact writes into a conversation (the
//! continuation message and the pinned items), so that end-user text or tool
//! output can never be taken for one: a marker is recognised only with a tag
//! that is a keyed blake3 hash of its text, and only a holder of the key can
//! make one.
//!
//! The key comes from `[compaction] marker_key` (every pod of a deployment
//! must share it, or a summary made by one pod is ordinary text to the
//! next); without it each process draws a random key at start, so summaries
//! are recognised only by the process that made them. The key never appears
//! in `Debug` output or logs.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// Bytes of a tag (hex-encoded in the text: twice as many characters).
const TAG_BYTES: usize = 16;
/// Characters of a tag in the text.
pub const TAG_CHARS: usize = 2 * TAG_BYTES;
/// Opens the first line of a sealed marker's text: the tag follows.
pub const SEAL: &str = "Seal: ";
/// The blake3 key-derivation context of configured keys.
const CONTEXT: &str = "context-assembler 2026-11 compaction marker key v1";

/// The sealing key (32 bytes, derived from the configured secret).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MarkerKey([u8; 32]);

impl fmt::Debug for MarkerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MarkerKey(redacted)")
    }
}

impl Default for MarkerKey {
    /// The per-process key.
    fn default() -> Self {
        MarkerKey::per_process()
    }
}

impl MarkerKey {
    /// The key of a configured secret.
    pub fn derive(secret: &str) -> Self {
        MarkerKey(blake3::derive_key(CONTEXT, secret.as_bytes()))
    }

    /// A random key drawn once per process (from the standard library's
    /// OS-seeded hash keys): the fallback without `marker_key`.
    pub fn per_process() -> Self {
        static KEY: OnceLock<MarkerKey> = OnceLock::new();
        *KEY.get_or_init(|| {
            let mut h = blake3::Hasher::new_derive_key(CONTEXT);
            for i in 0u64..8 {
                let mut s = std::collections::hash_map::RandomState::new().build_hasher();
                s.write_u64(i);
                h.update(&s.finish().to_le_bytes());
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            h.update(&now.to_le_bytes());
            h.update(&std::process::id().to_le_bytes());
            MarkerKey(*h.finalize().as_bytes())
        })
    }

    /// The tag of a marker of kind `what` (`b"summary"`, `b"pinned"`) with
    /// text `text`, as lower-case hex.
    pub fn tag(&self, what: &[u8], text: &str) -> String {
        let digest = self.digest(what, text);
        let mut hex = String::with_capacity(TAG_CHARS);
        for b in &digest[..TAG_BYTES] {
            hex.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
            hex.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
        }
        hex
    }

    /// Whether `tag` is the tag of (`what`, `text`); compares every byte
    /// whatever differs first.
    pub fn verify(&self, what: &[u8], text: &str, tag: &str) -> bool {
        let expected = self.tag(what, text);
        expected.len() == tag.len()
            && expected
                .bytes()
                .zip(tag.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    fn digest(&self, what: &[u8], text: &str) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(&(what.len() as u64).to_le_bytes());
        h.update(what);
        h.update(text.as_bytes());
        *h.finalize().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_depend_on_the_key_the_kind_and_the_text() {
        let k = MarkerKey::derive("secret one");
        let t = k.tag(b"summary", "body");
        assert_eq!(t.len(), TAG_CHARS);
        assert!(k.verify(b"summary", "body", &t));
        assert!(!k.verify(b"pinned", "body", &t));
        assert!(!k.verify(b"summary", "body!", &t));
        assert!(!MarkerKey::derive("secret two").verify(b"summary", "body", &t));
        assert!(!k.verify(b"summary", "body", ""));
        assert_eq!(MarkerKey::per_process(), MarkerKey::per_process());
        assert_ne!(MarkerKey::per_process(), k);
        assert_eq!(format!("{k:?}"), "MarkerKey(redacted)");
    }
}
