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
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
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
