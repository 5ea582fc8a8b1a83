//! The count keys one request has made, so that it hashes each text once.
//!
//! A request keys some texts more than once: a fresh one sent to the server
//! is tried where it was received (`assemble::flow`) and, once it meets more
//! new text than a try may count, handed back and run again in full (a cold
//! 4k request's try has hashed about 0.6 of its text by then); a full run
//! keys some texts twice itself (a turn's content, then the same text as a
//! message). A served fresh request hashed 2.08 times its text. Here each
//! text hashed is kept with its key (a copy of its bytes, the request's
//! own memory: nothing is shared between requests), and found again by the
//! fast hash its [`KnownKeys`](super::KnownKeys) slot was chosen by,
//! compared byte for byte, so every key is still exactly the digest of its
//! bytes.
//!
//! Only the texts [`KnownKeys`](super::KnownKeys) keys by their bytes (256
//! bytes to 16 KiB, the SHA-256-keyed ones) and not kept there, and at most
//! [`MAX_BYTES`] of them: shorter texts hash in about the time of a lookup,
//! longer ones by blake3 across its SIMD lanes, several times faster than
//! a copy and a compare pay back.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use super::Key;

/// Bytes kept at most, each text's entry and allocator rounding included
/// ([`cost`]): a request tried where it was received is at most 64 KiB on
/// the wire, its units a little more once framed. Per request in flight,
/// beside the upload budget.
pub const MAX_BYTES: usize = 192 << 10;

/// Bytes a kept text costs beyond its own and its rounding: its entry and
/// its share of the table.
const ENTRY_BYTES: usize = std::mem::size_of::<(u64, Handed)>() * 2 + 16;

/// What keeping `len` bytes of text costs: the text, an eighth more for the
/// allocator's size classes, and [`ENTRY_BYTES`].
fn cost(len: usize) -> usize {
    len + len.div_ceil(8) + ENTRY_BYTES
}

/// One hashed text.
struct Handed {
    /// What keys its count key (`Tokenizer::text_key_name`).
    name: ([u8; 32], bool),
    key: Key,
    text: Box<[u8]>,
}

/// The keys one request made, by the fast hash of their texts (see the
/// module). Not shared: one request's, on one thread at a time.
#[derive(Default)]
pub struct RequestKeys {
    by_tag: RefCell<HashMap<u64, Handed>>,
    bytes: Cell<usize>,
}

impl std::fmt::Debug for RequestKeys {
    // Never the texts.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestKeys")
            .field("texts", &self.by_tag.borrow().len())
            .field("bytes", &self.bytes.get())
            .finish()
    }
}

impl RequestKeys {
    /// None yet.
    pub fn new() -> Self {
        RequestKeys::default()
    }

    /// The key of `text` (fast hash `tag`, under the key name `name`) kept
    /// here, else `make`'s, kept while there is room. A text whose tag
    /// another text holds is not kept (a collision of the fast hash costs a
    /// digest, never a wrong key).
    pub fn key(&self, tag: u64, name: ([u8; 32], bool), text: &[u8], make: impl FnOnce() -> Key) -> Key {
        if let Some(h) = self.by_tag.borrow().get(&tag)
            && h.name == name
            && *h.text == *text
        {
            return h.key;
        }
        let key = make();
        let bytes = self.bytes.get() + cost(text.len());
        if bytes <= MAX_BYTES {
            let mut by_tag = self.by_tag.borrow_mut();
            if let std::collections::hash_map::Entry::Vacant(at) = by_tag.entry(tag) {
                at.insert(Handed {
                    name,
                    key,
                    text: text.into(),
                });
                self.bytes.set(bytes);
            }
        }
        key
    }

    /// Bytes the kept texts cost ([`MAX_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.bytes.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: ([u8; 32], bool) = ([7; 32], false);

    fn key_of(n: u8) -> Key {
        [n; 32]
    }

    #[test]
    fn a_kept_text_is_found_and_nothing_is_made_again() {
        let h = RequestKeys::new();
        let made = Cell::new(0);
        let make = |k| {
            made.set(made.get() + 1);
            key_of(k)
        };
        assert_eq!(h.key(1, NAME, b"some text", || make(1)), key_of(1));
        assert_eq!(h.key(1, NAME, b"some text", || make(2)), key_of(1));
        assert_eq!(made.get(), 1);
        assert_eq!(h.bytes(), cost(9));
    }

    #[test]
    fn a_collision_or_another_key_name_makes_the_key() {
        let h = RequestKeys::new();
        h.key(1, NAME, b"some text", || key_of(1));
        // The same tag, other bytes: made, and not kept in its place.
        assert_eq!(h.key(1, NAME, b"other text", || key_of(2)), key_of(2));
        assert_eq!(h.key(1, NAME, b"some text", || key_of(9)), key_of(1));
        // The same bytes under another key name.
        let other = ([8; 32], false);
        assert_eq!(h.key(1, other, b"some text", || key_of(3)), key_of(3));
        let framed = ([7; 32], true);
        assert_eq!(h.key(1, framed, b"some text", || key_of(4)), key_of(4));
        assert_eq!(h.bytes(), cost(9));
    }

    #[test]
    fn kept_bytes_stay_within_the_bound() {
        let h = RequestKeys::new();
        let text = vec![b'x'; 16 << 10];
        let mut tag = 0;
        while h.bytes() + cost(text.len()) <= MAX_BYTES {
            tag += 1;
            h.key(tag, NAME, &text, || key_of(1));
        }
        let kept = h.bytes();
        h.key(tag + 1, NAME, &text, || key_of(2));
        assert_eq!(h.bytes(), kept);
        assert!(kept <= MAX_BYTES && kept + cost(text.len()) > MAX_BYTES);
        // Past the bound, a text is made again each time.
        assert_eq!(h.key(tag + 1, NAME, &text, || key_of(3)), key_of(3));
    }
}
