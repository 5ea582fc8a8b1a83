//! What a text is made of, counted in one pass over its characters: the
//! [`Features`] an estimate weighs, and the [`ContentClass`] they suggest.
//!
//! Every character falls in exactly one of six classes (Latin letter, digit,
//! whitespace, punctuation, CJK, other), so every character costs something
//! once every coefficient is positive: no text is free however it is built.
//! Runs (words, whitespace runs) are counted beside the characters because
//! tokenizers pay per run as well as per character: a word is often one
//! token whatever its length, a run of spaces often one token.

use std::iter::Sum;
use std::ops::{Add, AddAssign};

/// How many features a [`Features`] holds.
pub const FEATURES: usize = 11;

/// The features' names, in the order of [`Features::values`].
pub const FEATURE_NAMES: [&str; FEATURES] = [
    "latin",
    "digits",
    "whitespace_runs",
    "whitespace",
    "punctuation",
    "cjk",
    "other",
    "words",
    "latin_extended",
    "digit_runs",
    "punctuation_runs",
];

/// The counts an estimate is made of, for one text or the sum of several.
///
/// The six character counts partition the text's characters (they sum to
/// its `chars().count()`); `words`, `whitespace_runs`, `digit_runs` and
/// `punctuation_runs` count maximal runs; `latin_extended` counts again the
/// Latin letters beyond ASCII (an umlaut, an accent: vocabularies hold far
/// fewer words with them, so they cost more, and the tokenizers without a
/// public vocabulary may cut a word at them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Features {
    /// Latin letters: ASCII letters, and the letters of Latin-1, Latin
    /// Extended-A and -B (U+00C0-U+024F but × and ÷) and Latin Extended
    /// Additional (U+1E00-U+1EFF).
    pub latin: u64,
    /// ASCII digits (other scripts' digits are `other`).
    pub digits: u64,
    /// Maximal runs of whitespace.
    pub whitespace_runs: u64,
    /// Whitespace characters (`char::is_whitespace`), ideographic space
    /// included: a long run costs more than a short one (a megabyte of
    /// spaces is one run, and no tokenizer makes it one token).
    pub whitespace: u64,
    /// ASCII punctuation and symbols, and the Unicode punctuation and symbol
    /// blocks of [`PUNCTUATION`] (CJK punctuation is `cjk`).
    pub punctuation: u64,
    /// Han, Hiragana, Katakana, Hangul, Bopomofo, CJK punctuation and
    /// full-width forms ([`CJK`]).
    pub cjk: u64,
    /// Everything else: Cyrillic, Greek, Arabic, Devanagari, emoji,
    /// combining marks, control characters, other scripts' digits.
    pub other: u64,
    /// Words: maximal runs of Latin letters. A combining mark ends a word
    /// (decomposed "é" is a Latin letter and an `other`).
    pub words: u64,
    /// Latin letters beyond ASCII (also counted in `latin`).
    pub latin_extended: u64,
    /// Maximal runs of ASCII digits (tokenizers group digits: a number
    /// costs by its runs as well as its digits).
    pub digit_runs: u64,
    /// Maximal runs of punctuation (`"},{"` is often one token).
    pub punctuation_runs: u64,
}

/// Unicode ranges (inclusive) counted as CJK, beyond ASCII.
pub const CJK: &[(u32, u32)] = &[
    (0x1100, 0x11FF),   // Hangul Jamo
    (0x2E80, 0x2FFF),   // CJK and Kangxi radicals, ideographic description
    (0x3000, 0x4DBF),   // CJK punctuation, kana, Bopomofo, Hangul jamo, Extension A
    (0x4E00, 0x9FFF),   // CJK Unified Ideographs
    (0xA960, 0xA97F),   // Hangul Jamo Extended-A
    (0xAC00, 0xD7FF),   // Hangul syllables, Jamo Extended-B
    (0xF900, 0xFAFF),   // CJK Compatibility Ideographs
    (0xFE30, 0xFE4F),   // CJK Compatibility Forms
    (0xFF00, 0xFFEF),   // half-width and full-width forms
    (0x1B000, 0x1B16F), // kana supplement and extensions
    (0x20000, 0x3FFFF), // Extensions B-H, compatibility supplement
];

/// Unicode ranges (inclusive) counted as punctuation and symbols, beyond
/// ASCII (ASCII's are `char::is_ascii_punctuation`).
pub const PUNCTUATION: &[(u32, u32)] = &[
    (0x00A1, 0x00BF), // Latin-1 punctuation and symbols
    (0x00D7, 0x00D7), // ×
    (0x00F7, 0x00F7), // ÷
    (0x2010, 0x2027), // General Punctuation: dashes, quotes, bullets
    (0x2030, 0x205E), // General Punctuation: per mille to four dots
    (0x20A0, 0x20CF), // currency symbols
    (0x2190, 0x23FF), // arrows, mathematical operators, technical
    (0x2500, 0x25FF), // box drawing, blocks, geometric shapes
    (0x2E00, 0x2E7F), // Supplemental Punctuation
    (0xFE50, 0xFE6F), // small form variants
];

/// The class of one character; each feature's count is one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CharClass {
    Latin,
    Digit,
    Space,
    Punct,
    Cjk,
    Other,
}

/// How many [`CharClass`]es there are (their discriminants index arrays).
const CLASSES: usize = 6;

/// The class of each ASCII character, by code.
pub(super) const ASCII_CLASSES: [CharClass; 128] = {
    let mut table = [CharClass::Other; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        table[b] = match c {
            b'a'..=b'z' | b'A'..=b'Z' => CharClass::Latin,
            b'0'..=b'9' => CharClass::Digit,
            // `char::is_whitespace` of ASCII: tab, line feed, vertical tab,
            // form feed, carriage return, space.
            b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ' => CharClass::Space,
            c if c.is_ascii_punctuation() => CharClass::Punct,
            _ => CharClass::Other,
        };
        b += 1;
    }
    table
};

fn within(c: char, ranges: &[(u32, u32)]) -> bool {
    let c = u32::from(c);
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

fn class_of(c: char) -> CharClass {
    if let Ok(b) = u8::try_from(c)
        && let Some(&class) = ASCII_CLASSES.get(usize::from(b))
    {
        return class;
    }
    if c.is_whitespace() {
        CharClass::Space
    } else if matches!(c, '\u{C0}'..='\u{24F}' | '\u{1E00}'..='\u{1EFF}') && c != '×' && c != '÷' {
        CharClass::Latin
    } else if within(c, CJK) {
        CharClass::Cjk
    } else if within(c, PUNCTUATION) {
        CharClass::Punct
    } else {
        CharClass::Other
    }
}

impl Features {
    /// The features of `text`, in one pass over its characters: ASCII by
    /// a table a byte at a time without a branch on the class (prose
    /// changes class every few characters, which a branch mispredicts),
    /// other characters decoded.
    pub fn of(text: &str) -> Features {
        // By class: characters, and runs begun.
        let mut counts = [0u64; CLASSES];
        let mut starts = [0u64; CLASSES];
        let mut latin_extended = 0u64;
        // No class yet: the first character begins a run.
        let mut previous = CLASSES;
        let bytes = text.as_bytes();
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            let class = if b.is_ascii() {
                i += 1;
                ASCII_CLASSES[usize::from(b)]
            } else {
                // `i` is on a character boundary: ASCII bytes are whole
                // characters, and other characters are skipped whole.
                let c = text[i..].chars().next().unwrap_or(char::REPLACEMENT_CHARACTER);
                i += c.len_utf8();
                let class = class_of(c);
                latin_extended += u64::from(class == CharClass::Latin);
                class
            };
            let k = class as usize;
            counts[k] += 1;
            starts[k] += u64::from(k != previous);
            previous = k;
        }
        let [latin, digits, whitespace, punctuation, cjk, other] = counts;
        Features {
            latin,
            digits,
            whitespace_runs: starts[CharClass::Space as usize],
            whitespace,
            punctuation,
            cjk,
            other,
            words: starts[CharClass::Latin as usize],
            latin_extended,
            digit_runs: starts[CharClass::Digit as usize],
            punctuation_runs: starts[CharClass::Punct as usize],
        }
    }

    /// Whether `Features::of(left) + Features::of(right)` is exactly
    /// `Features::of` of the two joined: always, unless the join continues
    /// a run, that is `left` ends and `right` begins with a Latin letter
    /// (the sum then counts one word too many), whitespace, a digit or
    /// punctuation (one run of that kind too many). In particular texts
    /// joined at a whitespace boundary (one side's edge whitespace, the
    /// other's not) add exactly, and an empty side always does. The
    /// character counts always add.
    pub fn adds_up(left: &str, right: &str) -> bool {
        match (left.chars().next_back(), right.chars().next()) {
            (Some(a), Some(b)) => {
                let (a, b) = (class_of(a), class_of(b));
                a != b || !Features::runs(a)
            }
            _ => true,
        }
    }

    /// Whether maximal runs of `class` are counted.
    fn runs(class: CharClass) -> bool {
        matches!(
            class,
            CharClass::Latin | CharClass::Space | CharClass::Digit | CharClass::Punct
        )
    }

    /// The indexes in [`FEATURE_NAMES`] of the run counts: a join of two
    /// texts merges at most one run, of one of these.
    pub const RUNS: [usize; 4] = [2, 7, 9, 10];

    /// The counts as numbers, in the order of [`FEATURE_NAMES`].
    pub fn values(&self) -> [f64; FEATURES] {
        [
            self.latin,
            self.digits,
            self.whitespace_runs,
            self.whitespace,
            self.punctuation,
            self.cjk,
            self.other,
            self.words,
            self.latin_extended,
            self.digit_runs,
            self.punctuation_runs,
        ]
        .map(|n| n as f64)
    }

    /// Characters counted (the six character classes together).
    pub fn chars(&self) -> u64 {
        self.latin
            .saturating_add(self.digits)
            .saturating_add(self.whitespace)
            .saturating_add(self.punctuation)
            .saturating_add(self.cjk)
            .saturating_add(self.other)
    }

    /// Whether nothing was counted (the features of the empty text).
    pub fn is_empty(&self) -> bool {
        self.chars() == 0
    }
}

/// Counts add field by field, saturating.
impl Add for Features {
    type Output = Features;

    fn add(self, o: Features) -> Features {
        Features {
            latin: self.latin.saturating_add(o.latin),
            digits: self.digits.saturating_add(o.digits),
            whitespace_runs: self.whitespace_runs.saturating_add(o.whitespace_runs),
            whitespace: self.whitespace.saturating_add(o.whitespace),
            punctuation: self.punctuation.saturating_add(o.punctuation),
            cjk: self.cjk.saturating_add(o.cjk),
            other: self.other.saturating_add(o.other),
            words: self.words.saturating_add(o.words),
            latin_extended: self.latin_extended.saturating_add(o.latin_extended),
            digit_runs: self.digit_runs.saturating_add(o.digit_runs),
            punctuation_runs: self.punctuation_runs.saturating_add(o.punctuation_runs),
        }
    }
}

impl AddAssign for Features {
    fn add_assign(&mut self, o: Features) {
        *self = *self + o;
    }
}

impl Sum for Features {
    fn sum<I: Iterator<Item = Features>>(iter: I) -> Features {
        iter.fold(Features::default(), Add::add)
    }
}

/// What kind of text the features suggest; used to report errors by
/// content, never to choose coefficients (an estimate weighs the features
/// alone, so a text on a class's border is not estimated twice two ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContentClass {
    /// Natural language in Latin script.
    Prose,
    /// Source code: words among dense punctuation, in lines.
    Code,
    /// JSON and similar data: punctuation outnumbers words.
    Json,
    /// Chinese, Japanese, Korean.
    Cjk,
    /// Mostly whitespace: indentation, padding, aligned tables.
    WhitespaceHeavy,
    /// Other scripts (Cyrillic, Arabic, ...), emoji, or nothing at all.
    Other,
}

impl ContentClass {
    /// Every class, in the order of their indices.
    pub const ALL: [ContentClass; 6] = [
        ContentClass::Prose,
        ContentClass::Code,
        ContentClass::Json,
        ContentClass::Cjk,
        ContentClass::WhitespaceHeavy,
        ContentClass::Other,
    ];

    /// A stable lower-case label (a bounded metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            ContentClass::Prose => "prose",
            ContentClass::Code => "code",
            ContentClass::Json => "json",
            ContentClass::Cjk => "cjk",
            ContentClass::WhitespaceHeavy => "whitespace_heavy",
            ContentClass::Other => "other",
        }
    }

    /// The class's position in [`ContentClass::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The class the features suggest, by shares of the text: CJK or other
    /// scripts when they make up a third of what is not whitespace;
    /// whitespace-heavy when whitespace is 40% of the characters or its runs
    /// average three characters; then, by punctuation per word, prose (under
    /// one in three), JSON (more than two) or code.
    pub fn of(f: &Features) -> ContentClass {
        let chars = f.chars() as f64;
        let ink = chars - f.whitespace as f64;
        if f.is_empty() {
            return ContentClass::Other;
        }
        if 3.0 * f.cjk as f64 >= ink && f.cjk > 0 {
            return ContentClass::Cjk;
        }
        if 3.0 * f.other as f64 >= ink && f.other > 0 {
            return ContentClass::Other;
        }
        let mean_run = f.whitespace as f64 / f.whitespace_runs.max(1) as f64;
        if 10.0 * f.whitespace as f64 >= 4.0 * chars || mean_run >= 3.0 {
            return ContentClass::WhitespaceHeavy;
        }
        let per_word = f.punctuation as f64 / f.words.max(1) as f64;
        if per_word < 1.0 / 3.0 {
            ContentClass::Prose
        } else if per_word > 2.0 {
            ContentClass::Json
        } else {
            ContentClass::Code
        }
    }
}
