//! The character classes the pre-tokenizers read: a bit per regex class,
//! and a two-level table of every code point's bits built once from
//! `regex-syntax`'s own class tables (so the splits agree with the regexes
//! to the code point; `every_code_point_has_the_regex_classes` checks it).

use std::sync::OnceLock;

use rustc_hash::FxHashMap;

/// `\p{L}`.
pub(super) const LETTER: u8 = 1;
/// `\p{N}`.
pub(super) const NUMBER: u8 = 2;
/// `\s` (Unicode White_Space).
pub(super) const SPACE: u8 = 4;
/// o200k's `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`.
pub(super) const UPPER: u8 = 8;
/// o200k's `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`.
pub(super) const LOWER: u8 = 16;
/// `[^\r\n\p{L}\p{N}]`: what may stand before a word.
pub(super) const PREFIX: u8 = 32;
/// `[^\s\p{L}\p{N}]`: punctuation and symbols.
pub(super) const PUNCT: u8 = 64;
/// `[\r\n]`.
pub(super) const NEWLINE: u8 = 128;

/// Each class bit and the regex class it stands for.
pub(crate) const CLASSES: [(u8, &str); 8] = [
    (LETTER, r"\p{L}"),
    (NUMBER, r"\p{N}"),
    (SPACE, r"\s"),
    (UPPER, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
    (LOWER, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"),
    (PREFIX, r"[^\r\n\p{L}\p{N}]"),
    (PUNCT, r"[^\s\p{L}\p{N}]"),
    (NEWLINE, r"[\r\n]"),
];

/// Code points per block of the two-level table.
const BLOCK: usize = 256;

/// The class bits of every code point: a table for ASCII, and for the rest
/// an index of deduplicated blocks (about a hundred distinct blocks).
pub(crate) struct Classes {
    pub(super) ascii: [u8; 128],
    index: Vec<u16>,
    blocks: Vec<u8>,
}

impl Classes {
    /// The tables, built once from `regex-syntax`; `None` only if a class
    /// failed to parse (never: the patterns are constants, and a test
    /// builds them).
    pub(crate) fn get() -> Option<&'static Classes> {
        static TABLES: OnceLock<Option<Classes>> = OnceLock::new();
        TABLES.get_or_init(|| Classes::build(&CLASSES)).as_ref()
    }

    /// The tables of `classes`, each a bit and the regex class it stands
    /// for (another pre-tokenizer's classes: [`deepseek`](super::deepseek)).
    pub(crate) fn build(classes: &[(u8, &str)]) -> Option<Classes> {
        let mut flat = vec![0u8; char::MAX as usize + 1];
        for &(bit, pattern) in classes {
            for (lo, hi) in class_ranges(pattern)? {
                flat.get_mut(lo as usize..=hi as usize)?
                    .iter_mut()
                    .for_each(|f| *f |= bit);
            }
        }
        let mut ascii = [0u8; 128];
        ascii.copy_from_slice(flat.get(..128)?);
        let mut seen: FxHashMap<&[u8], u16> = FxHashMap::default();
        let mut blocks = Vec::new();
        let mut index = Vec::with_capacity(flat.len() / BLOCK);
        for chunk in flat.chunks(BLOCK) {
            let next = u16::try_from(seen.len()).ok()?;
            let id = *seen.entry(chunk).or_insert_with(|| {
                blocks.extend_from_slice(chunk);
                next
            });
            index.push(id);
        }
        Some(Classes { ascii, index, blocks })
    }

    /// The class bits of an ASCII byte (0 for any other byte).
    #[inline(always)]
    pub(crate) fn ascii(&self, b: u8) -> u8 {
        self.ascii.get(usize::from(b)).copied().unwrap_or(0)
    }

    /// The class bits of a code point.
    #[inline]
    pub(crate) fn of(&self, cp: u32) -> u8 {
        let cp = cp as usize;
        match self.index.get(cp / BLOCK) {
            Some(&block) => self
                .blocks
                .get(usize::from(block) * BLOCK + cp % BLOCK)
                .copied()
                .unwrap_or(0),
            None => 0,
        }
    }
}

/// The ranges of a regex character class, as `regex-syntax` parses it.
pub(crate) fn class_ranges(pattern: &str) -> Option<Vec<(u32, u32)>> {
    use regex_syntax::hir::{Class, HirKind};
    let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => Some(
            class
                .ranges()
                .iter()
                .map(|r| (u32::from(r.start()), u32::from(r.end())))
                .collect(),
        ),
        _ => None,
    }
}
