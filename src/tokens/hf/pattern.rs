//! Which of this crate's hand-written splits a folder's pre-tokenizer is,
//! read off `tokenizer.json` exactly, and the awkward texts every fast
//! count must count as the reference does before it is used.
//!
//! A byte-level BPE folder is counted fast when its `pre_tokenizer` is a
//! `Sequence` of `Split`s (each `Isolated`, not inverted) whose regexes are,
//! in order and character for character, one of the known lists below,
//! followed by a `ByteLevel` step without its own regex or prefix space:
//!
//! | folder | splits | hand split |
//! |---|---|---|
//! | Llama 3 | cl100k's pattern | [`pretok::split`] |
//! | Qwen 2, 3 | cl100k's with `\p{N}` for `\p{N}{1,3}` | [`pretok::split`], one number a piece |
//! | DeepSeek V3 | digits, CJK, words | [`deepseek::split`] |
//!
//! Anything else (another pattern, one character different, another step)
//! is not recognised and the folder is counted by the reference.

use serde_json::Value;

use crate::tokens::Encoding;
use crate::tokens::pretok::{self, deepseek};

/// The split pattern of cl100k_base (and of Llama 3), as `tokenizer.json`
/// writes it.
const CL100K_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's and 3's: cl100k's with each number alone.
const QWEN_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Texts a fast count must count (and encode) as the reference does before
/// it is used: whitespace runs, digits and digit groups, contractions, CJK
/// and kana against Latin, punctuation runs, emoji with joiners, code,
/// special token text, combining marks, controls.
pub(super) const SAMPLES: [&str; 24] = [
    "",
    "Hello, world! It's a test: don't panic.",
    "    indented\n\n\n\tcode();  \r\n  ",
    "1234567890 3.14159 1,000,000",
    "日本語のテキストと中文。한국어",
    "emoji 😀🎉👍🏽 and é (e\u{301}) and ﬁ",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "          many spaces           ",
    "\n\n\n\n\n\n\n\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "THE QUICK BROWN FOX'S JUMP'LL'VE'D",
    "<document id=\"x\">\ntext\n</document>\n",
    "\u{a0}\u{3000}\u{2028}mixed\u{85}spaces",
    "https://example.com/path?q=1&r=2#frag",
    "Ω≈ç√∫˜µ≤≥÷ ∑œ∑´®†¥¨ˆøπ“‘",
    "x  1  22 333 4444 55555\n١٢٣٤٥ ½² v1.2.3",
    "中文abc 中文 カタカナ・ひらがな゠ー\u{3099}「引用」。x中",
    "!!! ?!... --- === ***\n\n»«—… $HOME #include @user .com __init__",
    "👨\u{200d}👩\u{200d}👧 ❤\u{fe0f} \u{200d}a \u{2060} \x01\x02 \u{e000}",
    "line\r\n\r\n  \n \t\nend \n",
    "<｜begin▁of▁sentence｜><｜User｜>hi\n<｜Assistant｜>ok<｜end▁of▁sentence｜>",
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": 1}<｜tool▁call▁end｜>",
    "\u{301}\u{301}a \u{301} a\u{301} 中\u{301}",
];

/// The hand-written split of a recognised pre-tokenizer.
#[derive(Debug, Clone, Copy)]
pub(super) enum PreSplit {
    /// cl100k's pattern, with numbers in runs of up to `max_digits`
    /// (Llama 3: 3; Qwen: 1).
    Cl100k {
        /// The longest run of numbers one piece takes.
        max_digits: usize,
    },
    /// DeepSeek V3's three splits.
    DeepSeek,
}

/// A `Split` step's regex, when it keeps matches as pieces of their own
/// (`Isolated`, not inverted).
fn isolated_regex(step: &Value) -> Option<&str> {
    let ok = step.get("type")?.as_str()? == "Split"
        && step.get("behavior")?.as_str()? == "Isolated"
        && !step.get("invert")?.as_bool()?;
    ok.then(|| step.pointer("/pattern/Regex")?.as_str())?
}

impl PreSplit {
    /// The split `pre` (a `tokenizer.json`'s `pre_tokenizer`) is, when it is
    /// one of the known lists of `Split`s followed by a plain `ByteLevel`
    /// step (see the module doc); `None` otherwise, or if the split's
    /// tables do not build.
    pub(super) fn of(pre: &Value) -> Option<PreSplit> {
        if pre.get("type")?.as_str()? != "Sequence" {
            return None;
        }
        let (byte_level, splits) = pre.get("pretokenizers")?.as_array()?.split_last()?;
        let byte_level_ok = byte_level.get("type")?.as_str()? == "ByteLevel"
            && !byte_level.get("use_regex")?.as_bool()?
            && !byte_level
                .get("add_prefix_space")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        if !byte_level_ok {
            return None;
        }
        let regexes: Vec<&str> = splits.iter().map(isolated_regex).collect::<Option<_>>()?;
        let split = match regexes.as_slice() {
            [CL100K_PATTERN] => PreSplit::Cl100k { max_digits: 3 },
            [QWEN_PATTERN] => PreSplit::Cl100k { max_digits: 1 },
            [deepseek::DIGITS, deepseek::CJK, deepseek::WORDS] => PreSplit::DeepSeek,
            _ => return None,
        };
        // The split tables must build (they always do for this crate's
        // Unicode tables; if not, the reference counts).
        split.pieces("")?;
        Some(split)
    }

    /// The pieces of `text`, or `None` if the tables could not be built.
    pub(super) fn pieces(self, text: &str) -> Option<Pieces<'_>> {
        Some(match self {
            PreSplit::Cl100k { max_digits } => {
                Pieces::Cl100k(pretok::split_digits(Encoding::Cl100kBase, text, max_digits)?)
            }
            PreSplit::DeepSeek => Pieces::DeepSeek(deepseek::split(text)?),
        })
    }
}

/// The pieces of a text by one of the hand-written splits.
pub(super) enum Pieces<'t> {
    Cl100k(pretok::Pieces<'t>),
    DeepSeek(deepseek::Pieces<'t>),
}

impl<'t> Iterator for Pieces<'t> {
    type Item = &'t str;

    #[inline]
    fn next(&mut self) -> Option<&'t str> {
        match self {
            Pieces::Cl100k(p) => p.next(),
            Pieces::DeepSeek(p) => p.next(),
        }
    }
}

/// Whether `tokenizers`' two passes over the added tokens (those matched
/// on raw text first, leftmost-longest; then, between them, those matched
/// on normalized text) cut every text as one leftmost-longest pass over
/// both does, with a normalizer that changes nothing: true when no token of
/// one kind overlaps or holds a token of the other, so neither pass can
/// take a place the other would have taken first.
pub(super) fn one_pass_cuts_alike(raw: &[&str], normalized: &[&str]) -> bool {
    // Bytes: an end of `a` equal to a start of `b` begins at a character
    // (`b` does), so it is the same text.
    let overlap = |a: &str, b: &str| {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        (1..a.len().min(b.len())).any(|k| b.get(..k).is_some_and(|head| a.ends_with(head)))
    };
    let holds = |a: &str, b: &str| a.contains(b) || b.contains(a);
    normalized.iter().all(|n| {
        raw.iter()
            .all(|r| !holds(n, r) && !overlap(n, r) && !overlap(r, n))
    })
}
