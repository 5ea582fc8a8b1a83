//! DeepSeek V3's pre-tokenizer, written out by hand: the pieces Hugging
//! Face's `tokenizers` cuts with the folder's `Sequence` of three `Split`s
//! (each `Isolated`, not inverted), found in one scan instead of three
//! regex passes.
//!
//! Each `Split` runs its regex on every piece the one before left, alone,
//! and keeps both the matches and the stretches between them as pieces:
//!
//! 1. [`DIGITS`], `\p{N}{1,3}`: numbers in groups of three from the left
//!    of each run;
//! 2. [`CJK`], `[一-龥぀-ゟ゠-ヿ]+`: runs of CJK ideographs, hiragana and
//!    katakana;
//! 3. [`WORDS`]: `[!"#…~][A-Za-z]+` (ASCII punctuation with the ASCII
//!    letters after it) | `[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+` (a word,
//!    with one character before it that is no letter, punctuation, symbol
//!    or newline) | ` ?[\p{P}\p{S}]+[\r\n]*` | `\s*[\r\n]+` | `\s+(?!\S)` |
//!    `\s+`.
//!
//! So the text is first cut into segments, digit groups, CJK runs and the
//! runs of everything else (no character is both a number and CJK), and
//! the third regex runs within one segment at a time: its runs stop at a
//! segment's end, and there its `(?!\S)` sees the end of the string, so
//! `"a  1"` cuts `"a"`, `"  "`, `"1"` where one regex over the whole text
//! would cut `" "`, `" "`. A character the third regex matches nowhere (a
//! control or format character, a digit group, a lone mark after nothing)
//! joins the run of such characters before the next match, as a `Split`
//! keeps the stretch between two matches whole.
//!
//! The classes come from `regex-syntax`, the parser of the regex engine
//! `tokenizers` runs here (fancy-regex over regex), as for [`super`]'s
//! splits; `every_code_point_has_the_regex_classes` checks each on every
//! scalar value, and the tests and the fuzz target `deepseek` compare the
//! pieces with `tokenizers`' own pre-tokenizer built from these patterns.
//! The scan is linear: an alternative reads a run only when it takes it.

use std::sync::OnceLock;

use super::Classes;

/// The first `Split`'s pattern, as `tokenizer.json` writes it.
pub const DIGITS: &str = r"\p{N}{1,3}";
/// The second's.
pub const CJK: &str = "[一-龥\u{3040}-ゟ゠-ヿ]+";
/// The third's (with a carriage return and a line feed, not their
/// escapes, inside its classes, as the file has them).
pub const WORDS: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

/// `\p{N}`.
const NUMBER: u8 = 1;
/// `[一-龥぀-ゟ゠-ヿ]`.
const HAN_KANA: u8 = 2;
/// `[\p{L}\p{M}]`.
const WORD: u8 = 4;
/// `[\p{P}\p{S}]`.
const PUNCT: u8 = 8;
/// `[^\r\n\p{L}\p{P}\p{S}]`: what may stand before a word.
const PREFIX: u8 = 16;
/// `\s` (Unicode White_Space).
const SPACE: u8 = 32;
/// `[\r\n]`.
const NEWLINE: u8 = 64;
/// The ASCII punctuation of the third pattern's first alternative.
const ASCII_PUNCT: u8 = 128;
/// The bits that say which segment a character is in.
const SEGMENT: u8 = NUMBER | HAN_KANA;

/// Each class bit and the regex class it stands for.
pub(crate) const CLASSES: [(u8, &str); 8] = [
    (NUMBER, r"\p{N}"),
    (HAN_KANA, "[一-龥\u{3040}-ゟ゠-ヿ]"),
    (WORD, r"[\p{L}\p{M}]"),
    (PUNCT, r"[\p{P}\p{S}]"),
    (PREFIX, "[^\r\n\\p{L}\\p{P}\\p{S}]"),
    (SPACE, r"\s"),
    (NEWLINE, "[\r\n]"),
    (ASCII_PUNCT, "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~]"),
];

/// The most numbers one digit group takes.
const GROUP: usize = 3;

#[cfg(test)]
thread_local! {
    /// Characters the scan reads on this thread (a test bounds it by the
    /// bytes split: the linear worst case, counted rather than timed).
    static READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The class tables, built once.
fn classes() -> Option<&'static Classes> {
    static TABLES: OnceLock<Option<Classes>> = OnceLock::new();
    TABLES.get_or_init(|| Classes::build(&CLASSES)).as_ref()
}

/// One character: its class bits and its length in bytes; past the end or
/// outside the segment being scanned, no class and length 0.
#[derive(Clone, Copy)]
struct Ch {
    flags: u8,
    len: usize,
}

const OUT: Ch = Ch { flags: 0, len: 0 };

/// The pieces of a text, in order; their concatenation is the text.
pub struct Pieces<'a> {
    text: &'a str,
    pos: usize,
    classes: &'static Classes,
    /// Where the piece at `pos` ends, when a gap before it was returned
    /// with the match that ends it already found.
    next_end: Option<usize>,
}

/// DeepSeek V3's pieces of `text`, or `None` if the class tables could not
/// be built (never: the patterns are constants, and a test builds them).
pub fn split(text: &str) -> Option<Pieces<'_>> {
    Some(Pieces {
        text,
        pos: 0,
        classes: classes()?,
        next_end: None,
    })
}

impl<'a> Iterator for Pieces<'a> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        let start = self.pos;
        if start >= self.text.len() {
            return None;
        }
        let end = match self.next_end.take() {
            Some(end) => end,
            None => self.piece_end(start),
        };
        super::take(self.text, &mut self.pos, start, end)
    }
}

impl Pieces<'_> {
    /// The character at byte `pos` (a character boundary), or [`OUT`] past
    /// the end.
    #[inline(always)]
    fn at(&self, pos: usize) -> Ch {
        #[cfg(test)]
        READS.with(|n| n.set(n.get() + 1));
        let bytes = self.text.as_bytes();
        let Some(&b0) = bytes.get(pos) else {
            return OUT;
        };
        if b0 < 0x80 {
            return Ch {
                flags: self.classes.ascii(b0),
                len: 1,
            };
        }
        let byte = |i: usize| u32::from(bytes.get(pos + i).copied().unwrap_or(0) & 0x3f);
        let (cp, len) = if b0 < 0xe0 {
            ((u32::from(b0 & 0x1f) << 6) | byte(1), 2)
        } else if b0 < 0xf0 {
            ((u32::from(b0 & 0x0f) << 12) | (byte(1) << 6) | byte(2), 3)
        } else {
            (
                (u32::from(b0 & 0x07) << 18) | (byte(1) << 12) | (byte(2) << 6) | byte(3),
                4,
            )
        };
        Ch {
            flags: self.classes.of(cp),
            len,
        }
    }

    /// The character at `pos` if it is in the segment `segment` (0 for the
    /// runs of everything else, [`HAN_KANA`] for a CJK run), else [`OUT`]:
    /// the third regex sees one segment as its whole string.
    #[inline(always)]
    fn within(&self, pos: usize, segment: u8) -> Ch {
        let c = self.at(pos);
        if c.flags & SEGMENT == segment { c } else { OUT }
    }

    /// Past the run, within `segment`, of characters with any of `mask`'s
    /// bits from `pos`.
    #[inline(always)]
    fn run(&self, mut pos: usize, mask: u8, segment: u8) -> usize {
        let bytes = self.text.as_bytes();
        loop {
            match bytes.get(pos) {
                // ASCII without decoding.
                Some(&b) if b < 0x80 => {
                    #[cfg(test)]
                    READS.with(|n| n.set(n.get() + 1));
                    let f = self.classes.ascii(b);
                    if f & mask == 0 || f & SEGMENT != segment {
                        return pos;
                    }
                    pos += 1;
                }
                Some(_) => {
                    let c = self.within(pos, segment);
                    if c.flags & mask == 0 {
                        return pos;
                    }
                    pos += c.len;
                }
                None => return pos,
            }
        }
    }

    /// Where the piece at `start` ends: a digit group; a match of the third
    /// regex; or the stretch up to the next match or the segment's end.
    fn piece_end(&mut self, start: usize) -> usize {
        let c0 = self.at(start);
        if c0.flags & NUMBER != 0 {
            return self.run_of_at_most(start, GROUP);
        }
        let segment = c0.flags & SEGMENT;
        if let Some(end) = self.matched(start, c0, segment) {
            return end;
        }
        let mut q = start + c0.len;
        loop {
            let c = self.within(q, segment);
            if c.len == 0 {
                return q;
            }
            if let Some(end) = self.matched(q, c, segment) {
                self.next_end = Some(end);
                return q;
            }
            q += c.len;
        }
    }

    /// Past up to `most` numbers from `pos`, whose character is one.
    fn run_of_at_most(&self, mut pos: usize, most: usize) -> usize {
        for _ in 0..most {
            let c = self.at(pos);
            if c.flags & NUMBER == 0 {
                break;
            }
            pos += c.len;
        }
        pos
    }

    /// Where the third regex's match at `pos` (character `c0`) ends within
    /// `segment`, its alternatives tried in order; `None` if none matches
    /// there.
    #[inline(always)]
    fn matched(&self, pos: usize, c0: Ch, segment: u8) -> Option<usize> {
        let after = pos + c0.len;
        // [!"#…~][A-Za-z]+
        if c0.flags & ASCII_PUNCT != 0
            && self
                .text
                .as_bytes()
                .get(after)
                .is_some_and(u8::is_ascii_alphabetic)
        {
            let letters = self.text.as_bytes().get(after..).unwrap_or_default();
            return Some(after + letters.iter().take_while(|b| b.is_ascii_alphabetic()).count());
        }
        // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: the prefix taken if a word
        // follows it, else the word from here.
        if c0.flags & PREFIX != 0 {
            let c1 = self.within(after, segment);
            if c1.flags & WORD != 0 {
                return Some(self.run(after + c1.len, WORD, segment));
            }
        }
        if c0.flags & WORD != 0 {
            return Some(self.run(after, WORD, segment));
        }
        //  ?[\p{P}\p{S}]+[\r\n]*
        let from = if c0.flags & PUNCT != 0 {
            Some(after)
        } else if self.text.as_bytes().get(pos) == Some(&b' ') {
            let c1 = self.within(after, segment);
            (c1.flags & PUNCT != 0).then_some(after + c1.len)
        } else {
            None
        };
        if let Some(from) = from {
            let end = self.run(from, PUNCT, segment);
            return Some(self.run(end, NEWLINE, segment));
        }
        (c0.flags & SPACE != 0).then(|| self.whitespace(pos, segment))
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`, whose character is whitespace,
    /// within `segment`: through the last newline of the run if it holds
    /// one; else the run less its last character when a non-space of the
    /// segment follows (and the run is longer than one); else the run (the
    /// segment's end is the string's end, where `(?!\S)` holds).
    fn whitespace(&self, pos: usize, segment: u8) -> usize {
        let mut q = pos;
        let mut last = pos;
        let mut after_newline = None;
        loop {
            let c = self.within(q, segment);
            if c.flags & SPACE == 0 {
                break;
            }
            if c.flags & NEWLINE != 0 {
                after_newline = Some(q + c.len);
            }
            last = q;
            q += c.len;
        }
        match after_newline {
            Some(end) => end,
            None if last == pos || self.within(q, segment).len == 0 => q,
            None => last,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
