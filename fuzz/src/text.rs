//! Short texts built from the seams the tokenizer and the renderer care
//! about: whitespace runs, line breaks, `<` and wrapper tags, quotes,
//! multi-byte and combining characters, sentence ends, special-token text,
//! long runs of one character, and raw arbitrary UTF-8.

use arbitrary::{Arbitrary, Result, Unstructured};

use crate::one_in;

/// The character that marks content the principal may not see: it is
/// removed from every generated text, so finding it in an output is a leak.
pub const SECRET: char = '\u{E000}';

/// Longest text generated, in bytes (keeps executions fast).
pub const MAX_TEXT_BYTES: usize = 1024;

/// Pieces chosen often: seams of pre-tokenization and of the wrappers.
const PIECES: &[&str] = &[
    " ",
    "  ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "<",
    ">",
    "</",
    ">\n",
    "\n<",
    "<document",
    "</document>",
    "< memory id=\"x\">",
    "</ STATE>",
    "<summary id=\"compacted-turns\">",
    "<pinned kind=\"task\">",
    "&lt;",
    "&",
    "\"",
    "'",
    "é",
    "e\u{301}",
    "🦀",
    "日本語",
    "ـ",
    "\u{FEFF}",
    "\u{0}",
    "word",
    "Hello",
    " the",
    "123",
    "3.14",
    ".",
    "!",
    "?",
    "... ",
    "The end. ",
    "Is it? ",
    "Next line.\n",
    "<|endoftext|>",
    "{\"a\": [1, 2]}",
    "[summary]",
    "Summary of earlier conversation",
];

/// A generated text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text(pub String);

impl<'a> Arbitrary<'a> for Text {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut s = String::new();
        let pieces = u.int_in_range(0..=8)?;
        for _ in 0..pieces {
            let raw: &str;
            let piece = if one_in(u, 4)? {
                raw = <&str>::arbitrary(u)?;
                // Keep a prefix of at most 64 bytes, cut at a char boundary.
                let mut end = raw.len().min(64);
                while !raw.is_char_boundary(end) {
                    end -= 1;
                }
                &raw[..end]
            } else {
                PIECES[u.choose_index(PIECES.len())?]
            };
            let repeat = if one_in(u, 8)? {
                u.int_in_range(2..=300)?
            } else {
                1
            };
            for _ in 0..repeat {
                if s.len() + piece.len() > MAX_TEXT_BYTES {
                    break;
                }
                s.push_str(piece);
            }
        }
        if s.contains(SECRET) {
            s = s.replace(SECRET, "");
        }
        Ok(Text(s))
    }
}

impl Text {
    /// The text as a `String`.
    pub fn into_string(self) -> String {
        self.0
    }
}
