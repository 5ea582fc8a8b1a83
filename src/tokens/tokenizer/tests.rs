use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;

fn reference(encoding: Encoding) -> &'static tiktoken_rs::CoreBPE {
    match encoding {
        Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
    }
}

fn reference_count(encoding: Encoding, text: &str) -> u32 {
    reference(encoding).encode_ordinary(text).len() as u32
}

/// Text drawn from the character classes the pre-tokenizers distinguish:
/// letters of both cases, digits, apostrophes and contractions, punctuation,
/// spaces, tabs, CR/LF, non-Latin letters, combining marks and emoji.
pub(crate) fn adversarial_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "Z",
        "hello",
        "World",
        "HTTP",
        "x",
        "7",
        "42",
        "1234",
        "'s",
        "'LL",
        "'",
        "\"",
        ".",
        ",",
        "!?",
        "<",
        ">",
        "/",
        "</",
        "&",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\n\n",
        " \n",
        "é",
        "e\u{301}",
        "日本",
        "ß",
        "Ω",
        "😀",
        "<|endoftext|>",
        "fn main() {",
        "}",
        "_",
        "-",
        "==",
        // Combining marks, stacked; zero-width and bidirectional controls.
        "a\u{301}\u{302}\u{323}",
        "\u{200b}",
        "\u{200d}",
        "\u{feff}",
        "\u{5e9}\u{5dc}\u{5d5}\u{5dd}\u{200f}",
        "\u{645}\u{631}\u{62d}\u{628}\u{627}",
        "\u{2066}x\u{2069}",
        "\u{202e}abc\u{202c}",
        // Emoji sequences: a ZWJ family, a flag, a skin tone, a keycap.
        "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}\u{200d}\u{1f466}",
        "\u{1f1fa}\u{1f1f8}",
        "\u{1f44d}\u{1f3fd}",
        "1\u{fe0f}\u{20e3}",
        // CJK, Hangul, Devanagari, Thai: scripts without spaces or with
        // their own.
        "\u{4e2d}\u{6587}\u{5b57}\u{7b26}",
        "\u{d55c}\u{ad6d}\u{c5b4}",
        "\u{928}\u{92e}\u{938}\u{94d}\u{924}\u{947}",
        "\u{e2a}\u{e27}\u{e31}\u{e2a}\u{e14}\u{e35}",
        "\u{ff21}\u{ff22}",
    ]);
    // Long runs of one kind, where pre-tokenizers split (and where counts
    // and byte offsets go wrong first): whitespace, digits, punctuation,
    // one letter, one CJK character.
    let runs = (
        prop::sample::select(vec![
            " ", "\n", "\t", " \n", "\r\n", "0", "9", "!", ".", "-", "a", "\u{4e00}", "\u{301}",
        ]),
        8usize..96,
    )
        .prop_map(|(unit, n)| unit.repeat(n));
    let atom = prop_oneof![24 => atoms.prop_map(str::to_owned), 1 => runs];
    prop::collection::vec(atom, 0..40).prop_map(|v| v.concat())
}

#[test]
fn special_token_text_is_ordinary_text() {
    for encoding in Encoding::ALL {
        let t = Tokenizer::exact(encoding);
        let text = "before <|endoftext|> after";
        assert_eq!(t.count(text), reference_count(encoding, text));
        assert!(
            t.count("<|endoftext|>") > 1,
            "special token text counted as one token"
        );
    }
}

#[test]
fn hostile_inputs_count_without_panicking() {
    let spaces = " ".repeat(1 << 20);
    let letters = "a".repeat(1 << 20);
    for encoding in Encoding::ALL {
        let t = Tokenizer::exact(encoding);
        assert!(t.count(&spaces) > 0);
        assert!(t.count(&letters) > 0);
    }
}

#[test]
fn estimate_adds_its_margin_and_is_not_exact() {
    let exact = Tokenizer::exact(Encoding::Cl100kBase);
    let est = Tokenizer::estimate(Encoding::Cl100kBase, 20);
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(10);
    let base = exact.count(&text);
    assert_eq!(est.count(&text), (base * 120).div_ceil(100));
    assert!(!est.is_exact());
    assert_eq!(est.to_string(), "estimate(cl100k_base,+20%)");
    assert_eq!(exact.to_string(), "cl100k_base");
}

/// The proof is made on words and stops there; a text of fewer runs than
/// the limit is never claimed.
#[test]
fn a_text_of_more_words_than_the_limit_is_surely_over_it() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    assert!(tok.surely_over("one two three four", 3));
    assert!(!tok.surely_over("one two three four", 4));
    assert!(!tok.surely_over("  one\ttwo\n\n", 2));
    assert!(tok.surely_over("  one\ttwo\n\nthree", 2));
    // Non-ASCII whitespace does not separate here: one run.
    assert!(!tok.surely_over("one\u{a0}two\u{3000}three", 1));
    // A run that may be all whitespace (no ASCII non-whitespace character
    // begins it) is not counted: o200k counts these three as one token.
    assert!(!tok.surely_over("\u{a0} \u{a0}", 1));
    assert!(!tok.surely_over("\u{a0} \u{a0} \u{3000}", 1));
    assert!(tok.surely_over(&"word ".repeat(1_000_000), 10));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn counts_equal_the_reference_tokenizer(text in adversarial_text()) {
        for encoding in Encoding::ALL {
            prop_assert_eq!(Tokenizer::exact(encoding).count(&text), reference_count(encoding, &text));
        }
    }

    #[test]
    fn counts_equal_the_reference_on_arbitrary_unicode(text in "\\PC{0,200}") {
        for encoding in Encoding::ALL {
            prop_assert_eq!(Tokenizer::exact(encoding).count(&text), reference_count(encoding, &text));
        }
    }

    /// Counting against a limit answers the exact count when it fits, and
    /// nothing when it does not, at every limit around the count.
    #[test]
    fn counting_up_to_a_limit_agrees_with_counting(text in adversarial_text(), slack in -3i64..3) {
        for tok in [Tokenizer::exact(Encoding::Cl100kBase), Tokenizer::exact(Encoding::O200kBase), Tokenizer::estimate(Encoding::O200kBase, 20)] {
            let n = tok.count(&text);
            let limit = u32::try_from((i64::from(n) + slack).max(0)).unwrap_or(0);
            let expected = Some(n).filter(|&n| n <= limit);
            prop_assert_eq!(tok.count_at_most(&text, limit), expected, "{} {:?} at {}", tok, text, limit);
        }
    }

    /// A text has at most as many whitespace-separated runs as tokens: the
    /// proof that it cannot fit never claims one that does (at its own
    /// count, for both encodings and an estimate; tiktoken's count too).
    #[test]
    fn a_text_is_never_surely_over_its_count(
        text in prop_oneof![adversarial_text(), "\\PC{0,200}", "[a-z \\t\\n\\x0b\\x0c\\r\\u{a0}\\u{3000}'.,!]{0,200}"],
    ) {
        for tok in [Tokenizer::exact(Encoding::Cl100kBase), Tokenizer::exact(Encoding::O200kBase), Tokenizer::estimate(Encoding::O200kBase, 20)] {
            let n = tok.count(&text);
            prop_assert!(!tok.surely_over(&text, n), "{} {:?}: {} tokens", tok, text, n);
            if tok.is_exact() {
                prop_assert!(!tok.surely_over(&text, reference_count(tok.encoding().unwrap(), &text)));
            }
        }
    }

    /// The block-wise scan answers as a byte-by-byte count of runs would,
    /// at every limit around the count, across block seams.
    #[test]
    fn the_block_scan_counts_runs_as_a_byte_loop(
        text in prop_oneof!["[a \t\n\x0b\x0c\r\u{a0}\u{1c}\u{1f}]{0,300}", "\\PC{0,300}"],
        pad in 0usize..64,
        slack in -2i64..2,
    ) {
        let text = format!("{}{text}", "x ".repeat(pad));
        let mut runs = 0i64;
        let mut in_run = false;
        for &b in text.as_bytes() {
            let space = matches!(b, b'\t'..=b'\r' | b' ');
            runs += i64::from(b.is_ascii() && !space && !in_run);
            in_run = !space;
        }
        let limit = u32::try_from((runs + slack).max(0)).unwrap_or(0);
        let tok = Tokenizer::exact(Encoding::O200kBase);
        prop_assert_eq!(tok.surely_over(&text, limit), runs > i64::from(limit), "{:?} at {}", text, limit);
    }

    /// No text holds more bytes than its count allows: the bound truncation
    /// uses to stop looking.
    #[test]
    fn a_text_is_within_the_bytes_its_count_allows(text in adversarial_text(), run in 0usize..400) {
        // Long runs too: the longest tokens are runs of one character.
        let text = format!("{text}{}{}", " ".repeat(run), "=".repeat(run));
        for tok in [Tokenizer::exact(Encoding::Cl100kBase), Tokenizer::exact(Encoding::O200kBase), Tokenizer::estimate(Encoding::O200kBase, 20)] {
            prop_assert!(text.len() <= tok.most_bytes_within(tok.count(&text)), "{} {:?}", tok, text);
        }
    }

    /// Texts made of the vocabulary's own tokens: pieces that are tokens
    /// (the fast path) next to pieces that are not, and the seams between.
    #[test]
    fn texts_of_vocabulary_tokens_count_as_the_reference(
        picks in prop::collection::vec(any::<prop::sample::Index>(), 1..40),
        gluing in prop::collection::vec(prop::sample::select(vec!["", "", " ", "\n", "'s", "1", "é"]), 40),
    ) {
        for encoding in Encoding::ALL {
            let tokens = utf8_tokens(encoding);
            let text: String = picks
                .iter()
                .zip(&gluing)
                .map(|(i, glue)| format!("{}{glue}", tokens[i.index(tokens.len())]))
                .collect();
            prop_assert_eq!(
                Tokenizer::exact(encoding).count(&text),
                reference_count(encoding, &text),
                "{:?}",
                text
            );
        }
    }
}

/// The vocabulary's tokens whose bytes are UTF-8 text.
fn utf8_tokens(encoding: Encoding) -> &'static [&'static str] {
    static CL100K: OnceLock<Vec<&'static str>> = OnceLock::new();
    static O200K: OnceLock<Vec<&'static str>> = OnceLock::new();
    let cell = match encoding {
        Encoding::Cl100kBase => &CL100K,
        Encoding::O200kBase => &O200K,
    };
    cell.get_or_init(|| {
        let bpe = &encoding.bpe().bpe;
        (0..bpe.num_tokens())
            .filter_map(|id| std::str::from_utf8(bpe.token_bytes(saturating_u32(id))).ok())
            .collect()
    })
}

#[test]
fn every_token_alone_counts_as_the_reference() {
    for encoding in Encoding::ALL {
        let ours = Tokenizer::exact(encoding);
        let tokens = utf8_tokens(encoding);
        assert!(
            tokens.len() > 90_000,
            "{encoding:?}: {} UTF-8 tokens",
            tokens.len()
        );
        for t in tokens {
            assert_eq!(ours.count(t), reference_count(encoding, t), "{encoding:?} {t:?}");
        }
    }
}

#[test]
fn role_tokens_equal_counting_the_role_name() {
    for t in [
        Tokenizer::exact(Encoding::O200kBase),
        Tokenizer::exact(Encoding::Cl100kBase),
        Tokenizer::estimate(Encoding::Cl100kBase, 20),
    ] {
        for role in Role::ALL {
            assert_eq!(t.role_tokens(role), t.count(role.as_str()), "{t} {role:?}");
        }
    }
}

#[test]
fn measured_frames_replace_an_estimates_formula_and_key_its_caches() {
    use crate::vocab::Role;
    let estimate = Tokenizer::estimate(Encoding::Cl100kBase, 20);
    let frames = MeasuredFrames {
        priming: 3,
        message: 4,
        system: 5,
    };
    let framed = estimate.with_frames(frames);
    assert_eq!(framed.priming_tokens(), 3);
    assert_eq!(framed.frame_tokens(Role::User), 4);
    assert_eq!(framed.frame_tokens(Role::Assistant), 4);
    assert_eq!(framed.frame_tokens(Role::System), 5);
    assert_eq!(
        framed.count("hello world"),
        estimate.count("hello world"),
        "contents stay the estimate's"
    );
    assert_ne!(framed, estimate);
    assert_ne!(
        crate::tokens::cache::key(&framed, b"x"),
        crate::tokens::cache::key(&estimate, b"x"),
        "framed sums are cached apart"
    );
    assert_eq!(framed.measured_frames(), Some(frames));
    let exact = Tokenizer::exact(Encoding::O200kBase);
    assert_eq!(
        exact.with_frames(frames),
        exact,
        "an exact tokenizer's frames are known"
    );
}

/// A content estimate at `generation`'s prior with error `p99`.
fn content(generation: crate::tokens::estimate::Generation, p99: f64) -> Tokenizer {
    use crate::tokens::estimate::Snapshot;
    Tokenizer::estimate(Encoding::Cl100kBase, 20).with_content(Arc::new(ContentEstimate {
        generation: Arc::from(generation.name()),
        snapshot: Snapshot::uniform(generation.prior(), p99, 0),
    }))
}

#[test]
fn a_content_estimate_counts_by_features_and_keys_its_caches_by_its_state() {
    use crate::tokens::estimate::{Features, Generation};
    let plain = Tokenizer::estimate(Encoding::Cl100kBase, 20);
    let t = content(Generation::Claude2026, 0.35);
    let text = "Das ist ein kurzer Satz, mit 42 Zeichen und 漢字.";
    let f = Features::of(text);
    let expected = (Generation::Claude2026.prior().estimate(&f) * 1.35).ceil() as u32;
    assert_eq!(t.count(text), expected);
    assert_eq!(t.count_at_most(text, expected), Some(expected));
    assert_eq!(t.count_at_most(text, expected - 1), None);
    assert!(!t.is_exact());
    assert_eq!(t.to_string(), "estimate(content,claude-2026)");
    assert_eq!(t.content_estimate().map(|c| c.snapshot.p99), Some(0.35));
    // Another state, another identity (the prefix facts keyed by it are
    // apart), but one text key for the generation: the key its provider's
    // count is learned under. So the shared count cache never keeps a
    // content estimate's count, and each state counts afresh.
    let later = content(Generation::Claude2026, 0.05);
    assert!(later.count(text) < t.count(text));
    assert_ne!(later, t);
    assert_ne!(t, plain);
    assert_eq!(
        crate::tokens::cache::key(&t, text.as_bytes()),
        crate::tokens::cache::key(&later, text.as_bytes())
    );
    let cache = crate::tokens::cache::CountCache::<u32>::new(1 << 20);
    assert_eq!(cache.count(&t, text), (t.count(text), false));
    assert_eq!(cache.count(&later, text), (later.count(text), false));
    assert_eq!(
        cache.cached_at_most(&later, text, 1000),
        Some(Some(later.count(text)))
    );
    let exact = Tokenizer::exact(Encoding::O200kBase);
    assert_eq!(
        exact.with_content(t.content.clone().unwrap()),
        exact,
        "an exact tokenizer counts exactly"
    );
}

fn any_generation() -> impl Strategy<Value = crate::tokens::estimate::Generation> {
    prop::sample::select(crate::tokens::estimate::Generation::ALL.to_vec())
}

proptest! {
    /// A text surely over a limit by content leaves any text holding it
    /// (a unit rendered around it) over it too; and a text counting at
    /// most the limit is never called surely over it.
    #[test]
    fn a_content_estimate_proves_over_only_what_is_over(
        generation in any_generation(),
        p99 in 0.0f64..0.5,
        before in adversarial_text(),
        text in adversarial_text(),
        after in adversarial_text(),
        limit in 0u32..60,
    ) {
        let t = content(generation, p99);
        if t.surely_over(&text, limit) {
            let around = format!("{before}{text}{after}");
            prop_assert!(t.count(&around) > limit, "{:?} at {}", around, limit);
        }
        prop_assert!(!t.surely_over(&text, t.count(&text)));
    }

    /// Every prefix a content estimate says fits does fit, counted whole
    /// with the extra text; and no text counting `n` holds more bytes
    /// than `most_bytes_within(n)`.
    #[test]
    fn a_content_estimates_prefixes_fit_and_its_byte_bound_holds(
        generation in any_generation(),
        p99 in 0.0f64..0.5,
        parts in prop::collection::vec(adversarial_text(), 1..8),
        extra in adversarial_text(),
        limit in 0u32..80,
    ) {
        let t = content(generation, p99);
        let text = parts.concat();
        let ends: Vec<usize> = parts
            .iter()
            .scan(0, |end, p| {
                *end += p.len();
                Some(*end)
            })
            .collect();
        let within = t.prefixes_within(&text, &ends, &extra, limit);
        for &end in &ends[..within] {
            let whole = format!("{extra}{}", &text[..end]);
            prop_assert!(t.count(&whole) <= limit, "{:?} at {}", whole, limit);
        }
        prop_assert!(text.len() <= t.most_bytes_within(t.count(&text)));
    }
}
