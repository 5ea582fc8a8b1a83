use std::sync::LazyLock;

use proptest::prelude::*;
use tokenizers::PreTokenizer;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;

use super::*;
use crate::tokens::pretok::class_ranges;

/// DeepSeek V3's `pre_tokenizer` less its byte-level step, as the folder's
/// `tokenizer.json` spells it (JSON escapes and all).
const FILE_PRE_TOKENIZER: &str = r##"{"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}
]}"##;

/// Hugging Face's own pre-tokenizer of [`FILE_PRE_TOKENIZER`].
static REFERENCE: LazyLock<PreTokenizerWrapper> = LazyLock::new(|| {
    serde_json::from_str(FILE_PRE_TOKENIZER).unwrap_or_else(|e| panic!("the pre-tokenizer: {e}"))
});

fn ours(text: &str) -> Vec<&str> {
    match split(text) {
        Some(pieces) => pieces.collect(),
        None => panic!("the class tables did not build"),
    }
}

fn theirs(text: &str) -> Vec<String> {
    let mut pre = tokenizers::PreTokenizedString::from(text);
    REFERENCE
        .pre_tokenize(&mut pre)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"));
    pre.get_splits(
        tokenizers::OffsetReferential::Original,
        tokenizers::OffsetType::Byte,
    )
    .into_iter()
    .map(|(s, _, _)| s.to_owned())
    .collect()
}

fn assert_same_pieces(text: &str) {
    assert_eq!(ours(text), theirs(text), "{text:?}");
}

/// The patterns recognised are the file's, character for character.
#[test]
fn the_patterns_are_the_files() {
    let json: serde_json::Value = serde_json::from_str(FILE_PRE_TOKENIZER).unwrap();
    let patterns: Vec<&str> = json["pretokenizers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["pattern"]["Regex"].as_str().unwrap())
        .collect();
    assert_eq!(patterns, [DIGITS, CJK, WORDS]);
}

/// Every scalar value: the decoder reads its length, and its class bits are
/// its membership in each class as regex-syntax parses the class; no
/// character is both a number and CJK (the segments do not overlap); the
/// first alternative's punctuation is ASCII.
#[test]
fn every_code_point_has_the_regex_classes() {
    let classes = classes().unwrap_or_else(|| panic!("tables"));
    let ranges: Vec<(u8, Vec<(u32, u32)>)> = CLASSES
        .iter()
        .map(|&(bit, pattern)| (bit, class_ranges(pattern).unwrap_or_else(|| panic!("{pattern}"))))
        .collect();
    let within = |ranges: &[(u32, u32)], cp: u32| ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp));
    let mut buf = [0u8; 4];
    let mut checked = 0u32;
    for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
        let cp = u32::from(c);
        let text: &str = c.encode_utf8(&mut buf);
        let pieces = Pieces {
            text,
            pos: 0,
            classes,
            next_end: None,
        };
        let read = pieces.at(0);
        assert_eq!(read.len, c.len_utf8(), "{cp:#x}");
        for (bit, ranges) in &ranges {
            assert_eq!(read.flags & bit != 0, within(ranges, cp), "{cp:#x} class {bit}");
        }
        assert_ne!(read.flags & SEGMENT, SEGMENT, "{cp:#x}");
        assert!(
            read.flags & ASCII_PUNCT == 0 || c.is_ascii_punctuation(),
            "{cp:#x}"
        );
        checked += 1;
    }
    assert_eq!(checked, 0x110000 - 0x800);
}

/// One text at each seam between the three splits and the alternatives.
const SEAMS: [&str; 86] = [
    "",
    "a",
    "1",
    "12",
    "123",
    "1234",
    "1234567",
    "a1b22c333d4444",
    "x  1",
    "x \n 1",
    "  1  ",
    "1 2 3",
    "3.14159",
    "1,000,000",
    "١٢٣٤٥",
    "½¼²³Ⅻ",
    "v1.2.3-rc4",
    "日本語のテキストと中文。한국어",
    "中文abc中文",
    "abc中文def",
    " 中文",
    "中 文",
    "中\n文",
    "カタカナ・ひらがな゠ー",
    "゛゜ゝゞ\u{3099}\u{309a}",
    "\u{3040}中",
    "中\u{301}",
    "a\u{301}",
    "\u{301}",
    " \u{301}",
    "\u{301}\u{301}a",
    "Hello, world! It's a test: don't panic.",
    "'s",
    "'S",
    "don't",
    "U.S.A.",
    ".com",
    "foo_bar",
    "__init__",
    "$HOME",
    "#include",
    "@user",
    "a.b.c",
    "'中",
    ".é",
    "é.é",
    "!!!",
    " !!!",
    "  !!!",
    " !!!\n\n\r",
    " !\n x",
    "}\n}\n",
    "«»“”„",
    "…—–",
    "+-*/=<>",
    "    indented\n\n\n\tcode();  \r\n  ",
    "\n\n\n\n",
    " \n",
    "  \n  ",
    "\n \n ",
    "\r\n\r\n",
    "   ",
    "   x",
    "\t\tx",
    "\tx",
    "\x0b\x0cx",
    "\u{85}x",
    "\u{85}\u{85}x",
    "\u{2028}\u{2029}a",
    "\u{a0}\u{a0}x",
    "\u{a0}\u{3000}\u{2028}mixed\u{85}spaces",
    "\u{3000}中文",
    "emoji 😀🎉👍🏽 and é (e\u{301}) and ﬁ",
    "👨\u{200d}👩\u{200d}👧",
    "❤\u{fe0f}",
    "\u{200d}a",
    "\u{200d}\u{200d}",
    "\x01\x02a",
    "\x01\x02 a",
    "\x01!",
    "a\x01",
    "\u{e000}x\u{e000}",
    "<｜User｜>hi<｜Assistant｜>",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "https://example.com/path?q=1&r=2#frag",
    "Ω≈ç√∫˜µ≤≥÷ ∑œ∑´®†¥¨ˆøπ“‘",
];

/// Each seam splits as the reference splits it.
#[test]
fn fixed_seams_split_as_the_reference() {
    for text in SEAMS {
        assert_same_pieces(text);
    }
}

/// The alphabet of the tests: every class the three patterns tell apart,
/// the seams between them (digits, CJK and kana against Latin, marks,
/// punctuation runs, every kind of whitespace, newlines), emoji with
/// joiners and selectors, controls and format characters.
pub(crate) fn deepseek_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a", "Z", "hello", " world", "x", "é", "e\u{301}", "\u{301}", "ß", "Ω", "한", "ا", "7", "42", "1234",
        "١", "½", "²", "Ⅻ", "中", "文字", "の", "カ", "・", "ー", "゛", "\u{3099}", "\u{3040}", "\u{3000}",
        "。", "「", "」", "'", "'s", "\"", ".", ",", "!?", "-", "_", "/", "$", "#", "@", "`", "~", "(", ")",
        "{", "}", "<", ">", "«", "—", "…", "+", "=", "😀", "👍", "🏽", "\u{200d}", "\u{fe0f}", "\u{2060}",
        "\u{e000}", "\x01", "\x7f", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u{a0}", "\u{85}",
        "\u{2028}", "\x0b",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// The hand split is the reference's, piece for piece, on the alphabet.
    #[test]
    fn pieces_equal_the_references_on_the_alphabet(text in deepseek_text()) {
        prop_assert_eq!(ours(&text), theirs(&text));
    }

    /// And on arbitrary text.
    #[test]
    fn pieces_equal_the_references_on_arbitrary_text(text in "\\PC{0,200}", any_text in any::<String>()) {
        prop_assert_eq!(ours(&text), theirs(&text));
        prop_assert_eq!(ours(&any_text), theirs(&any_text));
    }
}

/// 64 KiB of one character (or one short unit) splits into non-empty
/// pieces that are the text again, as the reference splits it.
#[test]
fn degenerate_runs_split_into_themselves() {
    for unit in [
        "a", " ", "1", "\u{301}", "\r\n", "\n", "\t", "中", ".", " .", "'s", "a ", " \n", "\u{200d}", "\x01",
        "1a", "中a", "  a", "\u{a0}",
    ] {
        let text = unit.repeat((1 << 16) / unit.len());
        let pieces = ours(&text);
        assert_eq!(pieces.concat(), text, "{unit:?}");
        assert!(pieces.iter().all(|p| !p.is_empty()), "{unit:?}");
        assert_eq!(pieces, theirs(&text), "{unit:?}");
    }
}

/// Characters read while splitting `text`.
fn reads(text: &str) -> usize {
    let before = READS.with(std::cell::Cell::get);
    assert_eq!(ours(text).concat(), text);
    READS.with(std::cell::Cell::get) - before
}

/// The scan reads each byte a few times at most on every degenerate input
/// (a scan that rereads a run per piece, quadratic, reads thousands per
/// byte here), so the work is linear, counted rather than timed; 8 times
/// the text costs 8 times the reads.
#[test]
fn the_scan_reads_each_byte_a_bounded_number_of_times() {
    for unit in [
        "a",
        " ",
        "1",
        "\u{301}",
        "\r\n",
        "\n",
        "\t",
        "中",
        ".",
        " .",
        "'s",
        "a ",
        " \n",
        "\u{200d}",
        "\x01",
        "\x01 ",
        "1a",
        "中a",
        "  a",
        "\u{a0}",
        " 中",
        "\u{200d}\u{301}",
        ".\n",
        "!a",
    ] {
        let n = 4096 / unit.len();
        let small = reads(&unit.repeat(n));
        let large = reads(&unit.repeat(8 * n));
        let bytes = unit.len() * n;
        assert!(small <= 6 * bytes, "{unit:?}: {small} reads for {bytes} bytes");
        assert!(
            large <= 8 * small + 64,
            "{unit:?}: {small} reads at n, {large} at 8n"
        );
    }
}

proptest! {
    #[test]
    fn any_text_is_read_a_bounded_number_of_times(text in prop_oneof![deepseek_text(), "\\PC{0,300}"]) {
        let n = reads(&text);
        prop_assert!(n <= 6 * text.len() + 8, "{} reads for {} bytes: {:?}", n, text.len(), text);
    }
}
