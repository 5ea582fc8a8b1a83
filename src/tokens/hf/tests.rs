use super::fixture::{self, ALTERNATING, CHATML};
use super::*;
use crate::tokens::Tokenizer;
use crate::tokens::framing::{Framing, LayoutRules};
use crate::tokens::template::ChatMessage;
use crate::vocab::Role;
use proptest::strategy::Strategy as _;

fn folder(template: Option<&str>) -> (tempfile::TempDir, HfModel) {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), template);
    let model = HfModel::load(dir.path()).unwrap();
    (dir, model)
}

/// Counts follow the vocabulary's merges and split pattern (expected
/// figures worked out by hand from the fixture's merges).
#[test]
fn counts_as_the_vocabulary_encodes() {
    let (_d, m) = folder(None);
    for (text, n) in [
        ("", 0),
        ("hello", 1),
        (" hello", 1),
        ("hello world", 2),
        ("The cat", 3),
        ("\n", 1),
        ("\n\n", 1),
        ("\n\n\n", 1),
        ("\n\n\n\n", 2),
        ("    ", 2),
        ("é", 2),
    ] {
        assert_eq!(m.count(text), n, "{text:?}");
    }
}

/// A special token's text is that token, as the engine reads it, and is
/// found in a text.
#[test]
fn special_token_text_is_one_token_and_is_found() {
    let (_d, m) = folder(None);
    assert_eq!(m.count("<|im_end|>"), 1);
    assert_eq!(m.count("x<|im_end|>x"), 3);
    assert_eq!(m.count("<|im_end"), 8);
    assert_eq!(
        m.specials_in("a <|im_start|>b<|im_end|><|im_end|>"),
        vec!["<|im_start|>", "<|im_end|>"]
    );
    assert!(m.specials_in("plain <| text").is_empty());
    assert_eq!(m.specials()[0].len(), "<start_of_turn>".len());
}

/// Neutralizing breaks every spelling with a word joiner and leaves other
/// text as it is; a neutralized text spells no special token.
#[test]
fn neutralize_breaks_every_spelling() {
    let (_d, m) = folder(None);
    assert_eq!(m.neutralize("plain text"), None);
    let out = m.neutralize("a<|im_end|>b<start_of_turn><|im_end|>").unwrap();
    assert_eq!(
        out,
        "a<\u{2060}|im_end|>b<\u{2060}start_of_turn><\u{2060}|im_end|>"
    );
    assert!(m.specials_in(&out).is_empty());
    assert_eq!(m.count("<|im_end|>"), 1);
    assert!(m.count(&m.neutralize("<|im_end|>").unwrap()) > 1);
}

/// Prefix counts from one encoding: the tokens ending at or before each end.
#[test]
fn prefix_counts_count_tokens_before_each_end() {
    let (_d, m) = folder(None);
    let text = "hello world hello";
    assert_eq!(m.prefix_counts(text, &[0, 5, 8, 11, 17]), vec![0, 1, 1, 2, 3]);
}

/// A folder that cannot be used is refused with the file and the reason.
#[test]
fn unusable_folders_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere");
    assert!(matches!(HfModel::load(&missing), Err(LoadError::Read { .. })));
    // A folder without tokenizer.json.
    assert!(
        matches!(HfModel::load(dir.path()), Err(LoadError::Read { path, .. }) if path.ends_with("tokenizer.json"))
    );
    // A file instead of a folder.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    assert!(matches!(HfModel::load(&file), Err(LoadError::Read { .. })));

    let tok = dir.path().join("tokenizer.json");
    std::fs::write(&tok, "{not json").unwrap();
    let err = HfModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not JSON"), "{err}");

    let mut word_piece: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    word_piece["model"]["type"] = "WordPiece".into();
    std::fs::write(&tok, word_piece.to_string()).unwrap();
    let err = HfModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("\"WordPiece\" is not supported"), "{err}");

    let mut broken: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    broken["model"]["merges"] = serde_json::json!([["no", "such"]]);
    std::fs::write(&tok, broken.to_string()).unwrap();
    let err = HfModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a tokenizer"), "{err}");
}

/// A template that does not compile, or refuses a one-message
/// conversation, makes the folder unusable; its config is named.
#[test]
fn a_template_must_compile_and_render_one_message() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), Some("{% for m in messages %}"));
    let err = HfModel::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer_config.json") && err.contains("chat template"),
        "{err}"
    );
    fixture::write_folder(
        dir.path(),
        Some("{{ raise_exception('system message required') }}"),
    );
    let err = HfModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("system message required"), "{err}");
}

/// `chat_template.jinja` wins over the config's template (as in
/// `transformers`), and the folder's digest covers it.
#[test]
fn chat_template_jinja_wins_and_is_in_the_digest() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), Some(CHATML));
    let before = HfModel::load(dir.path()).unwrap();
    std::fs::write(
        dir.path().join("chat_template.jinja"),
        "X{{ messages[0]['content'] }}\n",
    )
    .unwrap();
    let after = HfModel::load(dir.path()).unwrap();
    let hi = [ChatMessage::new("user", "hi")];
    assert_eq!(after.template().unwrap().render(&hi, None, true).unwrap(), "Xhi");
    assert_ne!(before.digest(), after.digest());
    assert_eq!(before.digest(), folder(Some(CHATML)).1.digest());
}

/// A template named in a list of templates is the one named "default".
#[test]
fn a_list_of_templates_uses_the_default() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), None);
    let config = serde_json::json!({"chat_template": [
        {"name": "tool_use", "template": "T"},
        {"name": "default", "template": "D{{ messages | length }}"}
    ]});
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let m = HfModel::load(dir.path()).unwrap();
    let hi = [ChatMessage::new("user", "hi")];
    assert_eq!(m.template().unwrap().render(&hi, None, true).unwrap(), "D1");
}

/// Frames measured by running the template: ChatML frames every role with
/// `<|im_start|>`, its name, a newline, `<|im_end|>` and a newline (5
/// tokens here, 8 for `tool`, whose name is 4 byte tokens in the fixture),
/// and primes the reply with 3; Gemma's manner needs roles joined and tool
/// results sent as user turns.
#[test]
fn framing_is_measured_from_the_template() {
    let (_d, chatml) = folder(Some(CHATML));
    let f = Framing::of(&chatml, 0);
    assert_eq!(f.frames, [5, 5, 5, 8]);
    assert_eq!(f.priming, 3);
    assert_eq!(f.rules, LayoutRules::default());

    let (_d, alternating) = folder(Some(ALTERNATING));
    let f = Framing::of(&alternating, 0);
    assert_eq!(
        f.rules,
        LayoutRules {
            merge_consecutive: true,
            tool_as_user: true,
            system_only_first: true,
            user_first: true,
        }
    );

    let (_d, plain) = folder(None);
    let f = Framing::of(&plain, 4);
    assert_eq!((f.frames, f.priming), ([4; 4], 0));
}

/// The real folders `.ci/hf_vocab.sh` fetched, when
/// `CONTEXT_ASSEMBLER_HF_VOCAB` names where (CI sets it; elsewhere these
/// tests have nothing to load and say so).
fn real_folder(family: &str) -> Option<HfModel> {
    let Some(root) = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB") else {
        // CI fetches the folders: there, a missing one is a failure.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs without CONTEXT_ASSEMBLER_HF_VOCAB"
        );
        return None;
    };
    let dir = std::path::Path::new(&root).join(family);
    Some(HfModel::load(&dir).unwrap_or_else(|e| panic!("{family}: {e}")))
}

/// The fixture's vocabulary merges a piece that is itself a token
/// (`ignore_merges` is off): the one-probe shortcut would be wrong there, so
/// every piece is merged, and counts and ids stay the reference's.
#[test]
fn a_vocabulary_that_merges_its_own_tokens_is_merged_piece_by_piece() {
    let (_d, m) = folder(None);
    assert!(m.counts_fast());
    for text in ["    ", "hello world    the cat", "  \n\n\n"] {
        assert_eq!(m.count(text), m.reference_count(text), "{text:?}");
        assert_eq!(m.encode(text, false), m.reference_encode(text, false), "{text:?}");
    }
}

/// The fixture with `ignore_merges` on, as Llama 3's.
fn ignoring_merges() -> (tempfile::TempDir, HfModel) {
    let dir = tempfile::tempdir().unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    json["model"]["ignore_merges"] = true.into();
    std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
    let m = HfModel::load(dir.path()).unwrap();
    (dir, m)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, ..Default::default() })]

    /// With `ignore_merges` the fixture is counted fast, and every count is
    /// the reference's: added tokens cut first, cl100k's pieces, a piece
    /// that is a token one, any other merged by the merge list.
    #[test]
    fn the_fast_count_is_the_references(
        text in proptest::prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "[ \\t\\n\\r\\u{a0}hel owrdTca.<|>_mise]{0,200}",
        ],
        special in proptest::sample::select(vec!["", "<|im_end|>", "<start_of_turn>", "<|im_start|>"]),
    ) {
        counted_fast_as_the_reference(Some(&IGNORING.1), &format!("{text}{special}{text}"))?;
    }

    /// Without `ignore_merges` (every piece merged, the one-probe shortcut
    /// off), counts and ids are still the reference's.
    #[test]
    fn the_fast_count_merging_every_piece_is_the_references(
        text in proptest::prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "[ \t\n\r\u{a0}hel owrdTca.<|>_mise]{0,200}",
        ],
        special in proptest::sample::select(vec!["", "<|im_end|>", "<start_of_turn>", "<|im_start|>"]),
    ) {
        counted_fast_as_the_reference(Some(&MERGING.1), &format!("{text}{special}{text}"))?;
    }
}

/// `model` (a real folder, when one was fetched) counts `text` fast, and as
/// the reference does.
fn counted_fast_as_the_reference(
    model: Option<&HfModel>,
    text: &str,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let Some(m) = model else {
        eprintln!("CONTEXT_ASSEMBLER_HF_VOCAB not set: no real folder to check");
        return Ok(());
    };
    proptest::prop_assert!(m.counts_fast());
    proptest::prop_assert_eq!(m.count(text), m.reference_count(text));
    // The fast ids too, with and without the special tokens the
    // post-processor adds.
    for special in [false, true] {
        proptest::prop_assert_eq!(m.encode(text, special), m.reference_encode(text, special));
    }
    Ok(())
}

static IGNORING: std::sync::LazyLock<(tempfile::TempDir, HfModel)> =
    std::sync::LazyLock::new(ignoring_merges);
static MERGING: std::sync::LazyLock<(tempfile::TempDir, HfModel)> = std::sync::LazyLock::new(|| folder(None));

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// Llama 3.1's folder is counted fast, with the reference's count on
    /// every text (adversarial Unicode, whitespace runs, special-token text).
    #[test]
    fn llama_3_is_counted_fast_and_exactly(
        text in proptest::prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "\\PC{0,300}",
            "[ \\t\\n\\r\\u{a0}\\u{3000}a-z0-9'.,!<|>_]{0,300}",
        ],
        special in proptest::sample::select(vec!["", "<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>"]),
    ) {
        counted_fast_as_the_reference(LLAMA.as_ref(), &format!("{text}{special}{text}"))?;
    }
}

static LLAMA: std::sync::LazyLock<Option<HfModel>> = std::sync::LazyLock::new(|| real_folder("llama3_1"));
static QWEN: std::sync::LazyLock<Option<HfModel>> = std::sync::LazyLock::new(|| real_folder("qwen3"));

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// Qwen 3's folder (NFC, numbers one by one, every piece merged) is
    /// counted and encoded fast, with the reference's counts and ids; text
    /// NFC would change (a decomposed accent) is left to the reference.
    #[test]
    fn qwen_3_is_counted_fast_and_exactly(
        text in proptest::prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "\\PC{0,300}",
            "[ \t\n\r\u{a0}\u{3000}\u{301}a-z0-9'.,!<|>_]{0,300}",
        ],
        special in proptest::sample::select(vec!["", "<|im_end|>", "<|im_start|>", "<tool_call>", "<think>"]),
    ) {
        counted_fast_as_the_reference(QWEN.as_ref(), &format!("{text}{special}{text}"))?;
    }
}
static GEMMA: std::sync::LazyLock<Option<HfModel>> = std::sync::LazyLock::new(|| real_folder("gemma3"));

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// Gemma 3's folder is counted fast (cut where no token crosses, each
    /// cut merged alone), with the reference's count on every text.
    #[test]
    fn gemma_3_is_counted_fast_and_exactly(
        text in proptest::prop_oneof![
            crate::tokens::tokenizer::tests::adversarial_text(),
            "\\PC{0,300}",
            "[ \\t\\n\\r\\u{a0}\\u{2581}a-z0-9'.,!<|>/_]{0,300}",
            proptest::sample::select(vec!["a > </b>", "x>  </y", "<p> </p>", " >\n</ "]).prop_map(str::to_owned),
        ],
        special in proptest::sample::select(vec!["", "<start_of_turn>", "<end_of_turn>", "<unused3>", "<bos>"]),
    ) {
        counted_fast_as_the_reference(GEMMA.as_ref(), &format!("{text}{special}{text}"))?;
    }
}

/// Which real folders are counted fast: all four, Llama 3.1 (cl100k's
/// split, `ignore_merges`), Qwen 3 (cl100k's split with single numbers,
/// NFC), DeepSeek V3 (three splits of its own) and Gemma 3
/// (SentencePiece-style BPE).
#[test]
fn the_real_folders_that_are_counted_fast() {
    for (family, fast) in [
        ("llama3_1", true),
        ("qwen3", true),
        ("deepseek_v3", true),
        ("gemma3", true),
    ] {
        let Some(m) = real_folder(family) else {
            eprintln!("CONTEXT_ASSEMBLER_HF_VOCAB not set: no real folder to check");
            return;
        };
        assert_eq!(m.counts_fast(), fast, "{family}");
    }
}

/// An added token the template writes can forge a turn even when it is not
/// marked special (DeepSeek's `<｜User｜>`): it is found like a special one;
/// one the template never writes, and that is not special, is text.
#[test]
fn added_tokens_the_template_writes_are_found() {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), Some(CHATML));
    let mut json: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    for t in json["added_tokens"].as_array_mut().unwrap() {
        if t["content"] == "<|im_end|>" || t["content"] == "<bos>" {
            t["special"] = false.into();
        }
    }
    std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
    let m = HfModel::load(dir.path()).unwrap();
    assert_eq!(m.specials_in("a<|im_end|>b<bos>"), vec!["<|im_end|>"]);
    // Both are still one token each, as the engine reads them.
    assert_eq!(m.count("<|im_end|><bos>"), 2);
}

/// A template in Llama 3's manner: the content stripped, after a blank line
/// that merges with a content's own leading newlines.
const TRIMMED: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n\n{{ m['content'] | trim }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n\n{% endif %}";

/// The per-message formula: the priming, and for each message the frame
/// outside its piece plus the count of the piece (seam and all); `None`
/// when a message's role has no glue there.
fn formula(tok: &Tokenizer, msgs: &[(Role, String)]) -> Option<u32> {
    let mut n = tok.priming_tokens();
    for (i, (role, content)) in msgs.iter().enumerate() {
        let glue = tok.glue(*role, i == 0)?;
        n += tok.glued_message_tokens(*role, i == 0, tok.count(&glue.piece(content)));
    }
    Some(n)
}

/// The same without the seam: each content counted alone, plus its frame.
fn seamless(tok: &Tokenizer, msgs: &[(Role, String)]) -> u32 {
    msgs.iter()
        .map(|(role, c)| tok.frame_tokens(*role) + tok.count(c))
        .sum::<u32>()
        + tok.priming_tokens()
}

fn rendered(model: &HfModel, msgs: &[(Role, String)]) -> u32 {
    let chat: Vec<ChatMessage<'_>> = msgs
        .iter()
        .map(|(r, c)| ChatMessage::new(r.as_str(), c))
        .collect();
    model.count(&model.template().unwrap().render(&chat, None, true).unwrap())
}

/// The glue is read off the template: ChatML writes the content whole after
/// `role\n`; the Llama-like template strips it after `role\n\n`; Gemma's
/// manner folds the system prompt into the first user turn, so a system
/// message has no piece of its own.
#[test]
fn the_glue_is_read_off_the_template() {
    let (_d, m) = folder(Some(CHATML));
    let tok = Tokenizer::hf(Arc::new(m), 0);
    let g = tok.glue(Role::User, false).unwrap();
    assert_eq!((g.head.as_str(), g.tail.as_str(), g.trim), ("user\n", "", false));
    assert_eq!(tok.glue(Role::Tool, false).unwrap().head, "tool\n");
    // `<|im_start|>`, `<|im_end|>` and the newline after it.
    assert_eq!(tok.glued_message_tokens(Role::User, false, 0), 3);

    let (_d, m) = folder(Some(TRIMMED));
    let tok = Tokenizer::hf(Arc::new(m), 0);
    let g = tok.glue(Role::Assistant, false).unwrap();
    assert_eq!((g.head.as_str(), g.trim), ("assistant\n\n", true));

    let (_d, m) = folder(Some(ALTERNATING));
    let tok = Tokenizer::hf(Arc::new(m), 0);
    assert!(tok.glue(Role::System, true).is_none());
    assert_eq!(tok.glue(Role::User, true).unwrap().head, "user\n");
    assert!(tok.glue(Role::User, true).unwrap().trim);
}

/// A content that opens with newlines merges with the newline its frame
/// ends with: counted alone it misses that, counted in its piece it does
/// not.
#[test]
fn a_seam_is_counted_in_the_piece() {
    let (_d, m) = folder(Some(CHATML));
    let m = Arc::new(m);
    let tok = Tokenizer::hf(m.clone(), 0);
    let msgs = [(Role::User, "\n\nhello".to_owned())];
    assert_eq!(formula(&tok, &msgs), Some(rendered(&m, &msgs)));
    assert_ne!(
        seamless(&tok, &msgs),
        rendered(&m, &msgs),
        "the seam matters here"
    );
}

fn conversation() -> impl proptest::strategy::Strategy<Value = Vec<(Role, String)>> {
    let text = proptest::collection::vec(
        proptest::sample::select(vec![
            "hello", " hello", "\n", "\n\n", "\n\n\n", "  ", "    ", " the", ".\n", "é", "日本", "😀", "x",
            "\t",
        ]),
        0..10,
    )
    .prop_map(|p| p.concat());
    (
        proptest::option::of(text.clone()),
        proptest::collection::vec((text.clone(), text.clone(), proptest::bool::ANY), 0..5),
        text,
    )
        .prop_map(|(system, turns, last)| {
            let mut msgs = Vec::new();
            if let Some(s) = system {
                msgs.push((Role::System, s));
            }
            for (ask, answer, tool) in turns {
                msgs.push((Role::User, ask));
                msgs.push((Role::Assistant, answer.clone()));
                if tool {
                    msgs.push((Role::Tool, answer));
                }
            }
            msgs.push((Role::User, last));
            msgs
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

    /// The sum is exact: the priming plus each message's frame and piece
    /// equals the whole rendering's count, for contents that open and close
    /// with whitespace and newlines, under a template that writes them
    /// whole and one that strips them.
    #[test]
    fn the_per_message_sum_is_the_rendered_count(msgs in conversation()) {
        for template in [CHATML, TRIMMED] {
            let (_d, m) = folder(Some(template));
            let m = Arc::new(m);
            let tok = Tokenizer::hf(m.clone(), 0);
            proptest::prop_assert_eq!(formula(&tok, &msgs), Some(rendered(&m, &msgs)));
        }
    }
}

/// The sum is exact on the real templates too, wherever a role has glue:
/// every role of Qwen 3, Llama 3.1 and DeepSeek V3 (the first system
/// message of Llama 3.1 holds the dated header it is written with), and
/// Gemma 3's user and model turns.
#[test]
fn the_per_message_sum_is_the_rendered_count_on_real_templates() {
    let contents = [
        "Hello there.",
        "\n\nleading newlines",
        "trailing newlines\n\n",
        "  spaces around  ",
        "日本語のテキスト。\n",
        "😀 emoji\u{301}",
        "\tcode() {\n    return 1;\n}\n",
        "",
    ];
    for family in ["qwen3", "llama3_1", "deepseek_v3", "gemma3"] {
        let Some(m) = real_folder(family) else { return };
        let m = Arc::new(m);
        let tok = Tokenizer::hf(m.clone(), 0);
        let roles: &[Role] = if family == "gemma3" {
            &[Role::User, Role::Assistant, Role::User]
        } else {
            &[Role::System, Role::User, Role::Assistant, Role::User]
        };
        for shift in 0..contents.len() {
            let msgs: Vec<(Role, String)> = roles
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, contents[(i + shift) % contents.len()].to_owned()))
                .collect();
            let sum = formula(&tok, &msgs).unwrap_or_else(|| panic!("{family}: a role without glue"));
            assert_eq!(sum, rendered(&m, &msgs), "{family}: {msgs:?}");
        }
    }
}

mod deepseek;

/// An added token whose text is already in the model's vocabulary under
/// another id: `tokenizers` encodes it by the vocabulary's id, not the one
/// `added_tokens` names. The fast path, which cuts added tokens by the
/// ids that list names, would write other ids than the reference, so such
/// a folder is counted by the reference (and its ids are the reference's).
#[test]
fn an_added_token_under_another_id_than_the_vocabularys_is_not_fast() {
    let dir = tempfile::tempdir().unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    let next =
        json["model"]["vocab"].as_object().unwrap().len() + json["added_tokens"].as_array().unwrap().len();
    json["added_tokens"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "id": next, "content": "hello", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": false
        }));
    std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
    let m = HfModel::load(dir.path()).unwrap();
    for text in ["hello", "say hello world", "hellohello"] {
        assert_eq!(m.encode(text, false), m.reference_encode(text, false), "{text:?}");
        assert_eq!(m.count(text), m.reference_count(text), "{text:?}");
    }
    assert!(!m.counts_fast());
}
