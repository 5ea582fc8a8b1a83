//! DeepSeek V3 on the fast path: a small folder of its shape built here
//! (the fixture's byte-level vocabulary with DeepSeek's normalizer,
//! pre-tokenizer and kinds of added tokens), its real folder when one was
//! fetched, and the recognition of its pre-tokenizer to the character.

use proptest::prelude::*;

use super::super::fixture;
use super::super::pattern::PreSplit;
use super::*;
use crate::tokens::pretok::deepseek::tests::deepseek_text;
use crate::tokens::pretok::deepseek::{CJK, DIGITS, WORDS};

/// DeepSeek V3's `pre_tokenizer` with the three patterns given.
fn pre_tokenizer(patterns: [&str; 3]) -> serde_json::Value {
    let split = |p: &str| serde_json::json!({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": false});
    serde_json::json!({"type": "Sequence", "pretokenizers": [
        split(patterns[0]), split(patterns[1]), split(patterns[2]),
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
    ]})
}

/// Words merged whole beyond the fixture's: digit groups, CJK and kana,
/// punctuation runs, a prefixed word.
const WORDS_MERGED: [&str; 8] = ["123", "12", "中文", "日本語", "カタカナ", "...", "!!", "'s"];

/// The fixture's vocabulary in DeepSeek V3's shape, its `pre_tokenizer`
/// made of `patterns`: an empty normalizer sequence, a byte-level
/// post-processor and decoder that add a prefix space, DeepSeek's added
/// tokens that are normalized and not special (`<｜User｜>`), and a special
/// token in the model's vocabulary that is not byte-level symbols (as
/// DeepSeek's `<｜begin▁of▁sentence｜>`).
fn deepseek_json(patterns: [&str; 3]) -> serde_json::Value {
    let mut json: serde_json::Value = serde_json::from_str(&fixture::tokenizer_json()).unwrap();
    json["normalizer"] = serde_json::json!({"type": "Sequence", "normalizers": []});
    json["pre_tokenizer"] = pre_tokenizer(patterns);
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true});
    json["post_processor"] = byte_level.clone();
    json["decoder"] = byte_level;
    let model = &mut json["model"];
    let mut next = model["vocab"].as_object().unwrap().len();
    model["ignore_merges"] = false.into();
    for word in WORDS_MERGED {
        let symbols: Vec<String> = word
            .bytes()
            .map(|b| fixture::byte_symbol(b).to_string())
            .collect();
        let mut acc = symbols[0].clone();
        for s in &symbols[1..] {
            let merged = format!("{acc}{s}");
            if model["vocab"].get(&merged).is_none() {
                model["merges"]
                    .as_array_mut()
                    .unwrap()
                    .push(serde_json::json!([acc, s]));
                model["vocab"][&merged] = next.into();
                next += 1;
            }
            acc = merged;
        }
    }
    let bos = "<｜begin▁of▁sentence｜>";
    model["vocab"][bos] = next.into();
    let added = json["added_tokens"].as_array_mut().unwrap();
    added.push(
        serde_json::json!({"id": next, "content": bos, "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true}),
    );
    for content in ["<｜User｜>", "<｜Assistant｜>"] {
        added.push(
            serde_json::json!({"id": 0, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": true, "special": false}),
        );
    }
    // The added tokens not in the vocabulary take the ids after it, in
    // order, as `tokenizers` gives them (it keeps no other id).
    for t in added.iter_mut().filter(|t| t["content"] != bos) {
        next += 1;
        t["id"] = next.into();
    }
    json
}

fn load(json: &serde_json::Value) -> (tempfile::TempDir, HfModel) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), json.to_string()).unwrap();
    let m = HfModel::load(dir.path()).unwrap();
    (dir, m)
}

static DEEPSEEK: std::sync::LazyLock<(tempfile::TempDir, HfModel)> =
    std::sync::LazyLock::new(|| load(&deepseek_json([DIGITS, CJK, WORDS])));

/// The folder of DeepSeek's shape is counted fast; its counts follow the
/// three splits (digit groups of three, CJK runs apart from the Latin
/// around them, the space before a CJK run a piece of its own), worked out
/// by hand from the merges.
#[test]
fn a_folder_of_deepseeks_shape_is_counted_fast() {
    let m = &DEEPSEEK.1;
    assert!(m.counts_fast());
    for (text, n) in [
        ("123", 1),
        ("1234", 2),
        ("12312", 2),
        ("中文", 1),
        ("hello中文", 2),
        (" 中文", 2),
        (" hello", 1),
        ("...!!", 2),
        ("it's", 3),
        ("<｜User｜>hello<｜Assistant｜>", 3),
    ] {
        assert_eq!(m.count(text), n, "{text:?}");
        assert_eq!(m.count(text), m.reference_count(text), "{text:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Counts and ids (with and without the post-processor's special
    /// tokens) are the reference's on the folder of DeepSeek's shape.
    #[test]
    fn the_fast_count_of_deepseeks_shape_is_the_references(
        text in prop_oneof![deepseek_text(), crate::tokens::tokenizer::tests::adversarial_text(), "\\PC{0,200}"],
        special in proptest::sample::select(vec!["", "<｜User｜>", "<｜begin▁of▁sentence｜>", "<|im_end|>"]),
    ) {
        counted_fast_as_the_reference(Some(&DEEPSEEK.1), &format!("{text}{special}{text}"))?;
    }
}

/// A pattern one character off, a `Split` that is not `Isolated`, or a
/// step missing is not DeepSeek's: the folder is counted by the reference
/// (and still counts as it does).
#[test]
fn a_pre_tokenizer_not_exactly_deepseeks_is_left_to_the_reference() {
    let off_by_one = deepseek_json([r"\p{N}{1,2}", CJK, WORDS]);
    let mut merged = deepseek_json([DIGITS, CJK, WORDS]);
    merged["pre_tokenizer"]["pretokenizers"][1]["behavior"] = "MergedWithPrevious".into();
    let mut two_steps = deepseek_json([DIGITS, CJK, WORDS]);
    two_steps["pre_tokenizer"]["pretokenizers"]
        .as_array_mut()
        .unwrap()
        .remove(1);
    let mut prefix_space = deepseek_json([DIGITS, CJK, WORDS]);
    prefix_space["pre_tokenizer"]["pretokenizers"][3]["add_prefix_space"] = true.into();
    for (what, json) in [
        ("off by one", off_by_one),
        ("merged", merged),
        ("two steps", two_steps),
        ("prefix space", prefix_space),
    ] {
        assert!(PreSplit::of(&json["pre_tokenizer"]).is_none(), "{what}");
        let (_d, m) = load(&json);
        assert!(!m.counts_fast(), "{what}");
        for text in ["1234 中文x", " hello 12"] {
            assert_eq!(m.count(text), m.reference_count(text), "{what}: {text:?}");
        }
    }
    assert!(matches!(
        PreSplit::of(&pre_tokenizer([DIGITS, CJK, WORDS])),
        Some(PreSplit::DeepSeek)
    ));
}

/// A normalized added token that overlaps a raw one would be cut by
/// `tokenizers`' two passes where one leftmost-longest pass cuts
/// differently (`<a` raw, `b<a>` normalized: the raw pass takes `<a` out of
/// `b<a>` first); such a folder is left to the reference, which counts it
/// as it cuts.
#[test]
fn added_tokens_that_two_passes_cut_otherwise_are_left_to_the_reference() {
    let mut json = deepseek_json([DIGITS, CJK, WORDS]);
    let next = 1 + json["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .max()
        .unwrap();
    let added = json["added_tokens"].as_array_mut().unwrap();
    for (i, (content, normalized)) in [("<a", false), ("b<a>", true)].into_iter().enumerate() {
        added.push(
            serde_json::json!({"id": next + i as u64, "content": content, "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": normalized, "special": !normalized}),
        );
    }
    let (_d, m) = load(&json);
    assert!(!m.counts_fast());
    assert_eq!(m.count("xb<a>y"), m.reference_count("xb<a>y"));
}

static REAL: std::sync::LazyLock<Option<HfModel>> = std::sync::LazyLock::new(|| real_folder("deepseek_v3"));

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// DeepSeek V3's real folder is counted and encoded fast, with the
    /// reference's counts and ids on every text (the added tokens its
    /// template writes included).
    #[test]
    fn deepseek_v3_is_counted_fast_and_exactly(
        text in prop_oneof![
            deepseek_text(),
            crate::tokens::tokenizer::tests::adversarial_text(),
            "\\PC{0,300}",
        ],
        special in proptest::sample::select(vec![
            "", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<｜tool▁sep｜>", "<|EOT|>",
        ]),
    ) {
        counted_fast_as_the_reference(REAL.as_ref(), &format!("{text}{special}{text}"))?;
    }
}

/// What a test's subscriber wrote.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines written while `f` runs, under a subscriber of its own.
///
/// A second dispatcher stays alive for the whole binary: with one alone,
/// tracing-core asks only the registering thread's default whether a call
/// site is of interest, so a site another test's thread meets first while
/// this scoped subscriber is the only one would be cached as never.
fn logged(f: impl FnOnce()) -> String {
    static ANOTHER: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    ANOTHER.get_or_init(|| tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default()));
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
}

/// A folder left to the reference is named in a warning, once, whether the
/// log is set up before it loads (a reload) or only after (a process's
/// first load: at the server's warm-up, or at its first count); a folder
/// counted fast is not.
#[test]
fn a_folder_left_to_the_reference_is_named_in_one_warning() {
    let off_by_one = deepseek_json([r"\p{N}{1,2}", CJK, WORDS]);
    let line = "model folder counted by the slow reference tokenizer";
    let mut held = None;
    let at_load = logged(|| {
        let (d, m) = load(&off_by_one);
        m.count("a 1234");
        held = Some((d, m));
    });
    assert_eq!(at_load.matches(line).count(), 1, "{at_load}");
    assert!(at_load.contains("pre-tokenizer or model is not one"), "{at_load}");
    let (dir, m) = held.unwrap();
    let name = dir.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(at_load.contains(&name), "{at_load}");
    assert!(logged(|| drop(m.encode("a", false))).is_empty());

    // Loaded where no log is set up (as before the subscriber of a
    // process): said at the first count, and only then.
    let json = off_by_one.clone();
    let (_d, later) = std::thread::spawn(move || load(&json)).join().unwrap();
    let first = logged(|| {
        later.count("x");
    });
    assert_eq!(first.matches(line).count(), 1, "{first}");
    assert!(
        logged(|| {
            later.count("x");
        })
        .is_empty()
    );

    // Loaded where no log is set up, then warmed up under one (as the
    // server does once its log is set up): said at the warm-up, not again.
    let (_d, warmed) = std::thread::spawn(move || load(&off_by_one)).join().unwrap();
    let at_warm_up = logged(|| warmed.say_slow());
    assert_eq!(at_warm_up.matches(line).count(), 1, "{at_warm_up}");
    assert!(
        logged(|| {
            warmed.count("x");
        })
        .is_empty()
    );

    let fast = logged(|| {
        let (_d, m) = load(&deepseek_json([DIGITS, CJK, WORDS]));
        m.say_slow();
        m.count("x");
    });
    assert!(!fast.contains(line), "{fast}");
}
