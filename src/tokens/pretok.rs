//! The cl100k_base and o200k_base pre-tokenizers, written out by hand: the
//! same pieces as the reference regexes (tiktoken's, as bpe-openai runs
//! them), found by one scan over the text with a byte-table fast path for
//! ASCII instead of a regex engine. DeepSeek V3's three splits, with class
//! tables built the same way, are in [`deepseek`].
//!
//! The regexes are alternations tried in order at each position (the first
//! alternative that matches wins, its quantifiers greedy with backtracking);
//! each alternative is a function below that returns where that
//! alternative's match ends, written from the regex's backtracking order:
//!
//! - cl100k: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//!   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
//! - o200k: `[^\r\n\p{L}\p{N}]?[U]*[W]+C?|[^\r\n\p{L}\p{N}]?[U]+[W]*C?|
//!   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+` with
//!   `U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, `W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]`
//!   and `C` cl100k's first alternative.
//!
//! The character classes come from `regex-syntax` itself (the crate both
//! regex engines use), so they are the regexes' tables to the code point;
//! `every_code_point_has_the_regex_classes` checks each class on every
//! scalar value. The pieces equal bpe-openai's and the counts tiktoken-rs's
//! (`pieces_equal_bpe_openai_*`, the fuzz target `pretok`). Every scan is
//! linear: a character is read at most a few times (an alternative that
//! fails reads a run that the next piece then covers).

pub(crate) use self::classes::Classes;
#[cfg(test)]
pub(crate) use self::classes::{CLASSES, class_ranges};
use self::classes::{LETTER, LOWER, NEWLINE, NUMBER, PREFIX, PUNCT, SPACE, UPPER};
use super::encoding::Encoding;

#[cfg(test)]
thread_local! {
    /// Characters the scans read on this thread (a test bounds it by the
    /// bytes split: the linear worst case, counted rather than timed).
    static READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The high bit of each byte of a word.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Each byte of `v` (all below 0x80) that is in `lo..=hi`, as its high bit:
/// adding `0x80 - lo` sets a byte's high bit from `lo` up, adding
/// `0x7f - hi` from past `hi`; no byte carries into the next.
#[inline(always)]
const fn in_range(v: u64, lo: u8, hi: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let from_lo = v + ONES * (0x80 - lo as u64);
    let past_hi = v + ONES * (0x7f - hi as u64);
    from_lo & !past_hi & HIGH
}

/// The first eight bytes of `bytes` (which holds eight).
#[inline(always)]
fn array8(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(bytes);
    out
}

/// One character: its class bits, its length in bytes and its code point;
/// past the end, no class, length 0.
#[derive(Clone, Copy)]
struct Ch {
    flags: u8,
    len: usize,
    cp: u32,
}

const END: Ch = Ch {
    flags: 0,
    len: 0,
    cp: u32::MAX,
};

/// The pieces of a text, in order; their concatenation is the text.
pub struct Pieces<'a> {
    text: &'a str,
    pos: usize,
    classes: &'static Classes,
    o200k: bool,
    /// The longest run of numbers one piece takes (`\p{N}{1,3}`: 3).
    max_digits: usize,
}

/// The pre-tokenizer's pieces of `text` for `encoding` (the same as
/// bpe-openai's `split` and tiktoken's regex), or `None` if the class
/// tables could not be built (never; see `Classes::get`).
pub fn split(encoding: Encoding, text: &str) -> Option<Pieces<'_>> {
    split_digits(encoding, text, 3)
}

/// [`split`] with `\p{N}{1,max_digits}` for the numbers' alternative: Qwen
/// 2 and 3 split cl100k's way but take each number alone (`\p{N}`).
pub(crate) fn split_digits(encoding: Encoding, text: &str, max_digits: usize) -> Option<Pieces<'_>> {
    Some(Pieces {
        text,
        pos: 0,
        classes: Classes::get()?,
        o200k: encoding == Encoding::O200kBase,
        max_digits: max_digits.max(1),
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
        // Most pieces of prose and code are settled by their ASCII bytes
        // alone; the scan by characters takes the rest.
        let ascii = if self.o200k {
            self.o200k_ascii(start)
        } else {
            self.cl100k_ascii(start)
        };
        let end = match ascii {
            Some(end) => end,
            None if self.o200k => self.o200k_end(start),
            None => self.cl100k_end(start),
        };
        take(self.text, &mut self.pos, start, end)
    }
}

/// The piece of `text` from `start` to `end`, `pos` moved past it. Every
/// piece holds a character; the guard keeps a broken invariant from
/// looping (an empty or misplaced piece makes the rest one piece).
pub(super) fn take<'a>(text: &'a str, pos: &mut usize, start: usize, end: usize) -> Option<&'a str> {
    let end = if end > start { end } else { text.len() };
    *pos = end;
    match text.get(start..end) {
        Some(piece) => Some(piece),
        None => {
            *pos = text.len();
            text.get(start..)
        }
    }
}

/// The ASCII fast path: the same alternatives as the scans by character
/// below, for a piece whose end its ASCII bytes settle. Each returns `None`
/// as soon as it meets a byte of a longer character that could change the
/// piece (a letter, mark, number, space or symbol outside ASCII, or the
/// `ſ` of a contraction); the scan by characters then runs from the
/// piece's start, so the fast path never decides what it cannot see. ASCII
/// has no `\p{Lm}`, `\p{Lo}` or `\p{M}`: its `U` is `[A-Z]` and its `W`
/// `[a-z]`.
impl Pieces<'_> {
    /// The class bits of the byte at `pos`: 0 past the end, `None` for a
    /// byte of a longer character.
    #[inline(always)]
    fn ascii_at(&self, pos: usize) -> Option<u8> {
        #[cfg(test)]
        READS.with(|n| n.set(n.get() + 1));
        match self.text.as_bytes().get(pos) {
            Some(&b) if b < 0x80 => Some(self.classes.ascii.get(usize::from(b)).copied().unwrap_or(0)),
            Some(_) => None,
            None => Some(0),
        }
    }

    /// Past the ASCII run of `mask` from `pos`; `None` at a byte of a
    /// longer character inside it.
    #[inline(always)]
    fn ascii_run(&self, mut pos: usize, mask: u8) -> Option<usize> {
        while self.ascii_at(pos)? & mask != 0 {
            pos += 1;
        }
        Some(pos)
    }

    /// The eight bytes at `pos` as a word, low byte first: their low seven
    /// bits, and their high bits (the bytes of longer characters); `None`
    /// within eight bytes of the end.
    #[inline(always)]
    fn window(&self, pos: usize) -> Option<(u64, u64)> {
        let bytes = self.text.as_bytes().get(pos..pos + 8)?;
        // One load and a few word operations, whatever the run.
        #[cfg(test)]
        READS.with(|n| n.set(n.get() + 1));
        let w = u64::from_le_bytes(array8(bytes));
        Some((w & !HIGH, w & HIGH))
    }

    /// `\p{L}+`'s ASCII run (`[A-Za-z]`) from `pos`, eight bytes at a time:
    /// the run's length comes from a bit scan, not from a branch per byte
    /// (a word's length is what a branch predictor cannot guess).
    #[inline(always)]
    fn letter_run(&self, mut pos: usize) -> Option<usize> {
        while let Some((v, high)) = self.window(pos) {
            let letters = in_range(v, b'A', b'Z') | in_range(v, b'a', b'z');
            let stop = !letters & HIGH | high;
            if stop == 0 {
                pos += 8;
                continue;
            }
            let bit = stop.trailing_zeros();
            return (high >> bit & 1 == 0).then_some(pos + (bit / 8) as usize);
        }
        self.ascii_run(pos, LETTER)
    }

    /// `[A-Z]*[a-z]*` from `pos`, eight bytes at a time: both runs come
    /// from one load where the word fits in it (most do). `None` at a byte
    /// of a longer character before the end.
    #[inline(always)]
    fn upper_lower_run(&self, mut pos: usize) -> Option<usize> {
        let mut upper = true;
        while let Some((v, high)) = self.window(pos) {
            // Bytes of this word before the lower run starts.
            let mut from = 0;
            if upper {
                let stop = !in_range(v, b'A', b'Z') & HIGH | high;
                if stop == 0 {
                    pos += 8;
                    continue;
                }
                upper = false;
                from = stop.trailing_zeros() - 7;
            }
            let stop = (!in_range(v, b'a', b'z') & HIGH | high) & (u64::MAX << from);
            if stop == 0 {
                pos += 8;
                continue;
            }
            let bit = stop.trailing_zeros();
            return (high >> bit & 1 == 0).then_some(pos + (bit / 8) as usize);
        }
        if upper {
            pos = self.ascii_run(pos, UPPER)?;
        }
        self.ascii_run(pos, LOWER)
    }

    fn o200k_ascii(&self, pos: usize) -> Option<usize> {
        let f0 = self.ascii_at(pos)?;
        // P?U*W+C? and P?U+W*C?: for ASCII, [A-Z]*[a-z]* (a letter at
        // least) after the prefix, then the contraction.
        let word = if f0 & LETTER != 0 {
            Some(pos)
        } else if f0 & PREFIX != 0 && self.ascii_at(pos + 1)? & LETTER != 0 {
            Some(pos + 1)
        } else {
            None
        };
        if let Some(start) = word {
            let end = self.upper_lower_run(start)?;
            return self.ascii_contraction(end).map(|c| c.unwrap_or(end));
        }
        self.ascii_rest(pos, f0, b'/')
    }

    fn cl100k_ascii(&self, pos: usize) -> Option<usize> {
        if let Some(end) = self.ascii_contraction(pos)? {
            return Some(end);
        }
        let f0 = self.ascii_at(pos)?;
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if f0 & LETTER != 0 {
            return self.letter_run(pos + 1);
        }
        if f0 & PREFIX != 0 && self.ascii_at(pos + 1)? & LETTER != 0 {
            return self.letter_run(pos + 2);
        }
        self.ascii_rest(pos, f0, b'\n')
    }

    /// The alternatives after the words, in order: numbers, punctuation
    /// (then `\r`, `\n` and `tail`), whitespace.
    #[inline(always)]
    fn ascii_rest(&self, pos: usize, f0: u8, tail: u8) -> Option<usize> {
        if f0 & NUMBER != 0 {
            let mut q = pos + 1;
            for _ in 1..self.max_digits {
                if self.ascii_at(q)? & NUMBER == 0 {
                    break;
                }
                q += 1;
            }
            return Some(q);
        }
        let from = if f0 & PUNCT != 0 {
            Some(pos + 1)
        } else if self.text.as_bytes().get(pos) == Some(&b' ') && self.ascii_at(pos + 1)? & PUNCT != 0 {
            Some(pos + 2)
        } else {
            None
        };
        if let Some(from) = from {
            let mut end = self.ascii_run(from, PUNCT)?;
            while let Some(&b) = self.text.as_bytes().get(end) {
                if b != b'\r' && b != b'\n' && b != tail {
                    break;
                }
                end += 1;
            }
            return Some(end);
        }
        if f0 & SPACE == 0 {
            return None;
        }
        // \s*[\r\n]+|\s+(?!\S)|\s+, as `whitespace` reads it.
        let mut q = pos;
        let mut after_newline = None;
        loop {
            let f = self.ascii_at(q)?;
            if f & SPACE == 0 {
                break;
            }
            if f & NEWLINE != 0 {
                after_newline = Some(q + 1);
            }
            q += 1;
        }
        Some(match after_newline {
            Some(end) => end,
            None if q >= self.text.len() || q == pos + 1 => q,
            None => q - 1,
        })
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: `Some(Some(end))` if it
    /// matches, `Some(None)` if it does not, `None` when the character after
    /// the apostrophe is not ASCII (it may be `ſ`).
    #[inline(always)]
    fn ascii_contraction(&self, pos: usize) -> Option<Option<usize>> {
        let bytes = self.text.as_bytes();
        if bytes.get(pos) != Some(&b'\'') {
            return Some(None);
        }
        let lower = |i: usize| bytes.get(i).map(u8::to_ascii_lowercase);
        Some(match lower(pos + 1) {
            Some(b) if b >= 0x80 => return None,
            Some(b's' | b't' | b'm' | b'd') => Some(pos + 2),
            Some(second @ (b'r' | b'v' | b'l')) => {
                let third = if second == b'l' { b'l' } else { b'e' };
                (lower(pos + 2) == Some(third)).then_some(pos + 3)
            }
            _ => None,
        })
    }
}

impl Pieces<'_> {
    /// The character at byte `pos` (a character boundary), or [`END`].
    #[inline(always)]
    fn at(&self, pos: usize) -> Ch {
        #[cfg(test)]
        READS.with(|n| n.set(n.get() + 1));
        let bytes = self.text.as_bytes();
        let Some(&b0) = bytes.get(pos) else {
            return END;
        };
        if b0 < 0x80 {
            return Ch {
                flags: self.classes.ascii.get(usize::from(b0)).copied().unwrap_or(0),
                len: 1,
                cp: u32::from(b0),
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
            cp,
        }
    }

    /// Past the run of characters with any of `mask`'s bits from `pos`.
    #[inline(always)]
    fn run(&self, mut pos: usize, mask: u8) -> usize {
        let bytes = self.text.as_bytes();
        loop {
            // ASCII without decoding.
            match bytes.get(pos) {
                Some(&b) if b < 0x80 => {
                    #[cfg(test)]
                    READS.with(|n| n.set(n.get() + 1));
                    if self.classes.ascii.get(usize::from(b)).copied().unwrap_or(0) & mask == 0 {
                        return pos;
                    }
                    pos += 1;
                }
                Some(_) => {
                    let c = self.at(pos);
                    if c.flags & mask == 0 {
                        return pos;
                    }
                    pos += c.len;
                }
                None => return pos,
            }
        }
    }

    /// `\p{N}{1,3}` (or up to `max_digits`) at `pos`, whose character is
    /// a number.
    fn digits(&self, mut pos: usize) -> usize {
        for _ in 0..self.max_digits {
            let c = self.at(pos);
            if c.flags & NUMBER == 0 {
                break;
            }
            pos += c.len;
        }
        pos
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: where it ends, if it matches.
    fn contraction(&self, pos: usize) -> Option<usize> {
        if self.text.as_bytes().get(pos) != Some(&b'\'') {
            return None;
        }
        let c1 = self.at(pos + 1);
        let after = pos + 1 + c1.len;
        match fold(c1.cp) {
            Some(b's' | b't' | b'm' | b'd') => Some(after),
            Some(second @ (b'r' | b'v' | b'l')) => {
                let c2 = self.at(after);
                let third = if second == b'l' { b'l' } else { b'e' };
                (fold(c2.cp) == Some(third)).then_some(after + c2.len)
            }
            _ => None,
        }
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`, whose character is whitespace:
    /// through the last newline of the run if it holds one, else the run
    /// less its last character when a non-space follows (and the run is
    /// longer than one), else the run.
    fn whitespace(&self, pos: usize) -> usize {
        let mut q = pos;
        let mut last = pos;
        let mut after_newline = None;
        loop {
            let c = self.at(q);
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
            None if q >= self.text.len() || last == pos => q,
            None => last,
        }
    }

    /// ` ?[^\s\p{L}\p{N}]+` then `[\r\n]*` (cl100k) or `[\r\n/]*` (o200k)
    /// at `pos`, if it matches.
    fn punctuation(&self, pos: usize, c0: Ch, tail: u8) -> Option<usize> {
        let from = if c0.flags & PUNCT != 0 {
            pos + c0.len
        } else if c0.cp == u32::from(b' ') && self.at(pos + 1).flags & PUNCT != 0 {
            pos + 1
        } else {
            return None;
        };
        let mut end = self.run(from, PUNCT);
        loop {
            match self.text.as_bytes().get(end) {
                Some(b'\r' | b'\n') => end += 1,
                Some(&b) if b == tail => end += 1,
                _ => return Some(end),
            }
        }
    }

    fn cl100k_end(&self, pos: usize) -> usize {
        if let Some(end) = self.contraction(pos) {
            return end;
        }
        let c0 = self.at(pos);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if c0.flags & LETTER != 0 {
            return self.run(pos + c0.len, LETTER);
        }
        if c0.flags & PREFIX != 0 {
            let c1 = self.at(pos + c0.len);
            if c1.flags & LETTER != 0 {
                return self.run(pos + c0.len + c1.len, LETTER);
            }
        }
        if c0.flags & NUMBER != 0 {
            return self.digits(pos);
        }
        // No tail: `\r` and `\n` are matched by the loop itself.
        if let Some(end) = self.punctuation(pos, c0, b'\n') {
            return end;
        }
        self.whitespace(pos)
    }

    fn o200k_end(&self, pos: usize) -> usize {
        let c0 = self.at(pos);
        if let Some(end) = self.o200k_word(pos, c0) {
            return end;
        }
        if c0.flags & NUMBER != 0 {
            return self.digits(pos);
        }
        if let Some(end) = self.punctuation(pos, c0, b'/') {
            return end;
        }
        self.whitespace(pos)
    }

    /// o200k's two word alternatives, `P?U*W+C?` then `P?U+W*C?` (`P` the
    /// prefix class), each trying the prefix taken before the prefix left.
    fn o200k_word(&self, pos: usize, c0: Ch) -> Option<usize> {
        let word = UPPER | LOWER;
        let after_prefix = if c0.flags & PREFIX != 0 && self.at(pos + c0.len).flags & word != 0 {
            Some(pos + c0.len)
        } else {
            None
        };
        if after_prefix.is_none() && c0.flags & word == 0 {
            return None;
        }
        let starts = [after_prefix, Some(pos)];
        // U*W+: the longest U* after which a W stands, then W+ greedy.
        for start in starts.into_iter().flatten() {
            let mut q = start;
            let mut last_lower = None;
            loop {
                let c = self.at(q);
                if c.flags & LOWER != 0 {
                    last_lower = Some(q);
                }
                if c.flags & UPPER == 0 {
                    break;
                }
                q += c.len;
            }
            if let Some(w) = last_lower {
                return Some(self.with_contraction(self.run(w, LOWER)));
            }
        }
        // U+W*: both greedy.
        for start in starts.into_iter().flatten() {
            if self.at(start).flags & UPPER != 0 {
                let upper = self.run(start, UPPER);
                return Some(self.with_contraction(self.run(upper, LOWER)));
            }
        }
        None
    }

    /// `C?` at `pos`.
    fn with_contraction(&self, pos: usize) -> usize {
        self.contraction(pos).unwrap_or(pos)
    }
}

/// The ASCII lower-case letter a code point matches case-insensitively, for
/// the letters of the contractions (`ſ`, U+017F, folds to `s`).
fn fold(cp: u32) -> Option<u8> {
    match cp {
        0x17f => Some(b's'),
        _ => u8::try_from(cp)
            .ok()
            .filter(u8::is_ascii_alphabetic)
            .map(|b| b.to_ascii_lowercase()),
    }
}

mod classes;
pub mod deepseek;
#[cfg(test)]
mod tests;
