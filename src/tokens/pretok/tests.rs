use proptest::prelude::*;

use super::*;
use crate::tokens::tokenizer::tests::adversarial_text;

fn regex(encoding: Encoding) -> &'static bpe_openai::Tokenizer {
    match encoding {
        Encoding::Cl100kBase => bpe_openai::cl100k_base(),
        Encoding::O200kBase => bpe_openai::o200k_base(),
    }
}

fn ours(encoding: Encoding, text: &str) -> Vec<&str> {
    match split(encoding, text) {
        Some(pieces) => pieces.collect(),
        None => panic!("the class tables did not build"),
    }
}

fn theirs(encoding: Encoding, text: &str) -> Vec<&str> {
    regex(encoding).split(text).collect()
}

fn reference_count(encoding: Encoding, text: &str) -> usize {
    let bpe = match encoding {
        Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
    };
    bpe.encode_ordinary(text).len()
}

/// Every scalar value: the decoder reads it back whole, and its class bits
/// are its membership in each class as regex-syntax parses the class (the
/// ranges both regex engines compile); the contraction letters fold as
/// `(?i:x)` does.
#[test]
fn every_code_point_has_the_regex_classes() {
    let classes = Classes::get().unwrap_or_else(|| panic!("tables"));
    let ranges: Vec<(u8, Vec<(u32, u32)>)> = CLASSES
        .iter()
        .map(|&(bit, pattern)| (bit, class_ranges(pattern).unwrap_or_else(|| panic!("{pattern}"))))
        .collect();
    let folds: Vec<(u8, Vec<(u32, u32)>)> = b"stmdrvle"
        .iter()
        .map(|&x| {
            let pattern = format!("(?i:{})", x as char);
            (x, class_ranges(&pattern).unwrap_or_else(|| panic!("{pattern}")))
        })
        .collect();
    let within = |ranges: &[(u32, u32)], cp: u32| {
        ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < cp {
                    std::cmp::Ordering::Less
                } else if lo > cp {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    };
    let mut buf = [0u8; 4];
    let mut checked = 0u32;
    for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
        let cp = u32::from(c);
        let text: &str = c.encode_utf8(&mut buf);
        let pieces = Pieces {
            text,
            pos: 0,
            classes,
            o200k: false,
            max_digits: 3,
        };
        let read = pieces.at(0);
        assert_eq!((read.cp, read.len), (cp, c.len_utf8()), "{cp:#x}");
        for (bit, ranges) in &ranges {
            assert_eq!(read.flags & bit != 0, within(ranges, cp), "{cp:#x} class {bit}");
        }
        for (x, ranges) in &folds {
            assert_eq!(
                fold(cp) == Some(*x),
                within(ranges, cp),
                "{cp:#x} (?i:{})",
                *x as char
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 0x110000 - 0x800);
}

/// Counting splits the text as given: bpe-openai's `normalize` (which its
/// own split follows) leaves both encodings' text alone, even text that NFC
/// would change.
#[test]
fn the_encodings_do_not_normalize() {
    for encoding in Encoding::ALL {
        for text in ["e\u{301}", "\u{212b}", "\u{1100}\u{1161}", "Å"] {
            assert_eq!(regex(encoding).normalize(text).as_str(), text, "{encoding:?}");
        }
    }
}

/// Both splitters on one text: the same pieces, in order.
fn assert_same_pieces(text: &str) {
    for encoding in Encoding::ALL {
        assert_eq!(
            ours(encoding, text),
            theirs(encoding, text),
            "{encoding:?} {text:?}"
        );
    }
}

/// One text at each seam between the alternatives, both encodings.
#[test]
fn fixed_seams_split_as_the_regex() {
    let cases = [
        "",
        "a",
        "'s",
        "'S",
        "'Ll",
        "'lL",
        "'re",
        "'RE",
        "'ve",
        "'m",
        "'d",
        "'t",
        "'ſ",
        "'x",
        "''s",
        "it's",
        "IT'S",
        "they'll",
        "We'VE",
        "don't'",
        "'",
        "''",
        "'\u{301}",
        "a'sb",
        "A'sB",
        "x'llama",
        " 's",
        "\t's",
        "hello world",
        "  hello",
        "   hello",
        "\thello",
        "\u{a0}hello",
        "\u{3000}hello",
        "\r\nhello",
        "\rhello",
        "\nhello",
        ".hello",
        "'hello",
        "\u{301}hello",
        "😀hello",
        "123",
        "1234",
        "12345",
        "a123",
        "123a",
        "١٢٣٤",
        "½¼",
        " 1",
        "  1",
        "x  1",
        " !",
        "  !",
        "!!!",
        " !!!\n\n",
        " !\r\n/",
        "}\n/",
        "}\n//\n/a",
        "/ /",
        " /",
        "//",
        "a//b",
        " \n",
        "  \n  ",
        "\n \n ",
        "\n  x",
        " \r\n x",
        "\r\n\r\n",
        "   ",
        "   x",
        " x",
        "\t\tx",
        "\x0b\x0cx",
        "\u{85}x",
        "\u{85}\u{85}x",
        "\u{2028}",
        "\u{2028}\u{2029}a",
        "\u{a0}\u{a0}",
        "\u{1680}\u{2000}\u{200a}\u{202f}\u{205f}\u{3000}.",
        "a\u{301}",
        "A\u{301}b",
        "\u{301}",
        "\u{301}\u{301}",
        " \u{301}",
        "\u{903}x",
        "ǅ",
        "ǅa",
        "aǅ",
        "Aǅb",
        "ʰ",
        "ʰa",
        "Aʰ",
        "中",
        "中文",
        "A中b",
        "HTTPServer",
        "HTTPServer's",
        "ABC'S",
        "abcDEF",
        "DEFabc",
        "ÀÉÎ",
        "é",
        "e\u{301}",
        "Ωmega",
        "ΩMEGA's",
        "ß",
        "ẞ",
        "AB\u{301}CD",
        "AB\u{301}CDe",
        "\u{301}AB",
        "\u{301}ABc",
        ".\u{301}AB",
        ". \u{301}",
        "!\u{301}!",
        "a\u{301}\u{302}\u{323}",
        "\u{200d}",
        "\u{1f468}\u{200d}\u{1f469}",
        "1\u{fe0f}\u{20e3}",
        "fn main() {\n    x\n}\n",
        "<|endoftext|>",
        "a\r",
        "a\r\r\n\n",
        "  \t\u{b}\u{c}",
        "x \u{a0}y",
        "Ǆǅǆ",
        "ǅǅa",
    ];
    for text in cases {
        assert_same_pieces(text);
        for encoding in Encoding::ALL {
            let count: usize = ours(encoding, text)
                .iter()
                .map(|p| regex(encoding).bpe.count(p.as_bytes()))
                .sum();
            assert_eq!(count, reference_count(encoding, text), "{encoding:?} {text:?}");
        }
    }
}

/// 1 MiB of one character (or one short unit) splits into non-empty pieces
/// that are the text again, as the regex splits it (a scan that rereads
/// what it has read, quadratic, would not finish here).
#[test]
fn degenerate_megabytes_split_into_themselves() {
    for unit in [
        "a", "A", " ", "'", "1", "\u{301}", "\r\n", "\n", "\t", "'s", "A\u{301}", "中", ".", "/", " \n",
        "\u{a0}", "\u{3000}", "a ", "A'", "\u{301}A",
    ] {
        let text = unit.repeat((1 << 20) / unit.len());
        for encoding in Encoding::ALL {
            let pieces = ours(encoding, &text);
            assert_eq!(pieces.concat(), text, "{encoding:?} {unit:?}");
            assert!(pieces.iter().all(|p| !p.is_empty()), "{encoding:?} {unit:?}");
            assert_eq!(pieces, theirs(encoding, &text), "{encoding:?} {unit:?}");
        }
    }
}

/// Characters read while splitting `text` with both encodings.
fn reads(text: &str) -> usize {
    let before = READS.with(std::cell::Cell::get);
    for encoding in Encoding::ALL {
        assert_eq!(ours(encoding, text).concat(), text);
    }
    READS.with(std::cell::Cell::get) - before
}

/// The scans read each byte a few times at most, on every degenerate
/// input and its mixes (a scan that rereads a run per piece, quadratic,
/// reads thousands per byte here), so the work is linear, counted rather
/// than timed; 8 times the text costs 8 times the reads.
#[test]
fn every_scan_reads_each_byte_a_bounded_number_of_times() {
    for unit in [
        "a", "A", " ", "'", "1", "\u{301}", "\r\n", "\n", "\t", "'s", "A\u{301}", "中", ".", "/", " \n",
        "\u{a0}", "\u{3000}", "a ", "A'", "\u{301}A", "  a", " .", ".\n/", "'l", "'L", "a'", "Aa", "aA",
        " \u{301}", "\u{2b0}", "\u{1c5}", "1 ", ". ", "\r", " \r", "  \n ",
    ] {
        let n = 4096 / unit.len();
        let small = reads(&unit.repeat(n));
        let large = reads(&unit.repeat(8 * n));
        let bytes = unit.len() * n;
        assert!(
            small <= 8 * bytes,
            "{unit:?}: {small} reads for {bytes} bytes, both encodings"
        );
        assert!(
            large <= 8 * small + 64,
            "{unit:?}: {small} reads at n, {large} at 8n"
        );
    }
}

proptest! {
    #[test]
    fn any_text_is_read_a_bounded_number_of_times(text in prop_oneof![tricky_text(), "\\PC{0,300}"]) {
        let n = reads(&text);
        prop_assert!(n <= 8 * text.len() + 8, "{} reads for {} bytes: {:?}", n, text.len(), text);
    }
}

/// The tricky alphabet: letters of every class the regexes tell apart,
/// contractions in mixed case, every kind of whitespace, digits, `/`,
/// punctuation, combining marks, emoji; runs of whitespace kept short so
/// that tiktoken-rs does not hit its backtrack limit.
fn tricky_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "b",
        "s",
        "Z",
        "S",
        "L",
        "'",
        "'s",
        "'S",
        "'t",
        "'T",
        "'re",
        "'rE",
        "'Ve",
        "'m",
        "'M",
        "'ll",
        "'lL",
        "'LL",
        "'d",
        "'D",
        "'ſ",
        "0",
        "7",
        "123",
        " ",
        "\t",
        "\r",
        "\n",
        "\x0b",
        "\x0c",
        "\u{85}",
        "\u{a0}",
        "\u{2028}",
        "\u{3000}",
        "/",
        ".",
        ",",
        "!",
        "-",
        "(",
        "\"",
        "\u{1c5}",
        "\u{1c4}",
        "\u{1c6}",
        "\u{2b0}",
        "\u{4e2d}",
        "\u{301}",
        "\u{903}",
        "\u{1f600}",
        "\u{ff21}",
        "\u{3b1}",
        "\u{391}",
        "\u{660}",
        "\u{bd}",
        "\u{200d}",
    ]);
    let atom = prop_oneof![12 => atoms.prop_map(str::to_owned), 1 => any::<char>().prop_map(String::from)];
    prop::collection::vec(atom, 0..48).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn pieces_equal_bpe_openai_and_counts_tiktoken_on_the_tricky_alphabet(text in tricky_text()) {
        for encoding in Encoding::ALL {
            let pieces = ours(encoding, &text);
            prop_assert_eq!(&pieces, &theirs(encoding, &text), "{:?} {:?}", encoding, text);
            let count: usize = pieces.iter().map(|p| regex(encoding).bpe.count(p.as_bytes())).sum();
            prop_assert_eq!(count, reference_count(encoding, &text), "{:?} {:?}", encoding, text);
        }
    }

    #[test]
    fn pieces_equal_bpe_openai_on_arbitrary_unicode(text in "\\PC{0,200}", any_text in any::<String>()) {
        for text in [&text, &any_text] {
            for encoding in Encoding::ALL {
                prop_assert_eq!(ours(encoding, text), theirs(encoding, text), "{:?} {:?}", encoding, text);
            }
        }
    }

    /// The house's adversarial text, and long runs of whitespace (past
    /// tiktoken-rs's backtrack limit: bpe-openai is the reference there).
    #[test]
    fn pieces_equal_bpe_openai_on_long_runs(
        text in adversarial_text(),
        runs in prop::collection::vec((prop::sample::select(vec![" ", "\t", "\n", "\r\n", " \n", "\u{a0}", "\u{3000}", "'s", "1", "\u{301}", "A"]), 0usize..300), 0..4),
    ) {
        let mut text = text;
        for (unit, n) in runs {
            text.push_str(&unit.repeat(n));
            text.push('x');
        }
        assert_same_pieces(&text);
    }
}

/// The ASCII fast path's word scan compares bytes with `A-Z` and `a-z`:
/// the regexes' classes agree on every ASCII byte, so the ranges say what
/// the classes say.
#[test]
fn ascii_letters_are_the_ranges_the_word_scan_compares() {
    let classes = Classes::get().unwrap();
    for b in 0u8..0x80 {
        let flags = classes.ascii[usize::from(b)];
        assert_eq!(flags & UPPER != 0, b.is_ascii_uppercase(), "{b:#x}");
        assert_eq!(flags & LOWER != 0, b.is_ascii_lowercase(), "{b:#x}");
        assert_eq!(flags & LETTER != 0, b.is_ascii_alphabetic(), "{b:#x}");
    }
}

/// Words of ASCII letters, long and short, in both cases, against what ends
/// or continues them outside ASCII (a letter, a mark, a number, a space, a
/// symbol, the `ſ` of a contraction): where the fast path must hand the
/// piece to the scan by characters, and where its word-at-a-time scan
/// crosses eight-byte windows and the end of the text.
fn ascii_words() -> impl Strategy<Value = String> {
    let word = "[a-zA-Z]{1,20}";
    let seam = prop::sample::select(vec![
        " ",
        "  ",
        "\n",
        "\r\n",
        "'",
        "'s",
        "'ll",
        "'Re",
        "'ſ",
        ".",
        ", ",
        "/",
        "1",
        "123",
        "\u{e9}",
        "\u{c9}",
        "\u{301}",
        "\u{2b0}",
        "\u{4e2d}",
        "\u{a0}",
        "\u{3000}",
        "\u{660}",
        "\u{2014}",
        "\u{1f600}",
        "\t",
        "",
    ]);
    prop::collection::vec((word, seam), 0..12).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(w, s)| format!("{w}{s}"))
            .collect::<String>()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn ascii_words_and_their_seams_split_as_the_regex(text in ascii_words()) {
        assert_same_pieces(&text);
        for encoding in Encoding::ALL {
            let ours = crate::tokens::Tokenizer::exact(encoding).count(&text) as usize;
            prop_assert_eq!(ours, reference_count(encoding, &text), "{:?} {:?}", encoding, text);
        }
        let n = reads(&text);
        prop_assert!(n <= 8 * text.len() + 8, "{} reads for {} bytes: {:?}", n, text.len(), text);
    }
}

/// Qwen's pattern (cl100k's with `\p{N}` for `\p{N}{1,3}`), as Hugging
/// Face's own `Split` pre-tokenizer runs it.
fn qwen_reference(text: &str) -> Vec<String> {
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{
        OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior,
    };
    const QWEN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let split = Split::new(
        SplitPattern::Regex(QWEN.to_owned()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .unwrap();
    let mut pre = PreTokenizedString::from(text);
    split.pre_tokenize(&mut pre).unwrap();
    pre.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, _, _)| s.to_owned())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// With numbers one at a time the split is Qwen's, piece for piece.
    #[test]
    fn single_digit_pieces_equal_qwens_split(
        text in prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "[ \t\n\r0-9\u{660}-\u{669}\u{b2}\u{bd}a-zA-Z'.,]{0,120}",
        ],
    ) {
        let ours: Vec<&str> = super::split_digits(Encoding::Cl100kBase, &text, 1).unwrap().collect();
        prop_assert_eq!(ours, qwen_reference(&text));
    }
}
