//! The `deepseek` target: DeepSeek V3's hand-written pre-tokenizer
//! (`context_assembler::tokens::pretok::deepseek`) against Hugging Face's
//! `tokenizers` running the same `pre_tokenizer` JSON, and the whole fast
//! count and ids of a small folder of DeepSeek's shape against the
//! reference tokenizer, on arbitrary bytes read as UTF-8 (lossily).
//!
//! The JSON is written here, as DeepSeek V3's `tokenizer.json` spells it,
//! not taken from the crate: a pattern the crate got wrong would not be
//! recognised on the real folder, and would differ here.

use std::sync::OnceLock;

use context_assembler::tokens::hf::HfModel;
use context_assembler::tokens::pretok::deepseek;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

/// DeepSeek V3's `pre_tokenizer`, as its `tokenizer.json` writes it.
const PRE_TOKENIZER: &str = r##"{"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false},
  {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
]}"##;

/// Words the small folder merges whole (byte by byte, left to right):
/// digit groups, CJK and kana, punctuation runs, prefixed words, newlines.
const MERGED: [&str; 14] = [
    "123",
    "12",
    "中文",
    "日本語",
    "カタカナ",
    "...",
    "!!",
    "'s",
    " the",
    " hello",
    "hello",
    "\n\n",
    "  ",
    "ing",
];

/// The three `Split`s alone (no byte-level step), whose pieces are text.
fn splits() -> &'static PreTokenizerWrapper {
    static SPLITS: OnceLock<PreTokenizerWrapper> = OnceLock::new();
    SPLITS.get_or_init(|| {
        let mut json: serde_json::Value =
            serde_json::from_str(PRE_TOKENIZER).expect("the pre-tokenizer is JSON");
        json["pretokenizers"].as_array_mut().expect("a sequence").pop();
        serde_json::from_value(json).expect("tokenizers reads the pre-tokenizer")
    })
}

/// GPT-2's printable symbol for each byte (unprintable ones from U+0100 on,
/// in byte order).
fn byte_symbols() -> Vec<char> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                char::from(b)
            } else {
                next += 1;
                char::from_u32(next - 1).expect("below U+0200")
            }
        })
        .collect()
}

/// A `tokenizer.json` of DeepSeek V3's shape: its normalizer (an empty
/// sequence), pre-tokenizer, post-processor and decoder; a byte-level BPE
/// over the 256 byte symbols with [`MERGED`]'s merges; a special token in
/// the model's vocabulary that is not byte symbols, and two added tokens
/// that are normalized and not special, as DeepSeek's.
fn tokenizer_json() -> String {
    let symbols = byte_symbols();
    let mut vocab: Vec<String> = symbols.iter().map(char::to_string).collect();
    let mut merges: Vec<[String; 2]> = Vec::new();
    for word in MERGED {
        let mut acc = symbols[usize::from(word.as_bytes()[0])].to_string();
        for &b in &word.as_bytes()[1..] {
            let s = symbols[usize::from(b)].to_string();
            let merged = format!("{acc}{s}");
            if !vocab.contains(&merged) {
                merges.push([acc.clone(), s]);
                vocab.push(merged.clone());
            }
            acc = merged;
        }
    }
    let bos = "<｜begin▁of▁sentence｜>";
    vocab.push(bos.to_owned());
    let added = [
        (bos, false, true),
        ("<｜User｜>", true, false),
        ("<｜Assistant｜>", true, false),
    ];
    let added: Vec<serde_json::Value> = added
        .iter()
        .enumerate()
        .map(|(i, (content, normalized, special))| {
            serde_json::json!({"id": vocab.len() - 1 + i, "content": content, "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": normalized, "special": special})
        })
        .collect();
    let vocab: serde_json::Map<String, serde_json::Value> = vocab
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, i.into()))
        .collect();
    let byte_level = serde_json::json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true});
    let pre: serde_json::Value = serde_json::from_str(PRE_TOKENIZER).expect("the pre-tokenizer is JSON");
    serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": []},
        "pre_tokenizer": pre, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": vocab, "merges": merges}
    })
    .to_string()
}

/// The small folder, loaded once (written to a temporary folder, loaded,
/// and the folder removed: the model holds what it read).
fn model() -> &'static HfModel {
    static MODEL: OnceLock<HfModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("context-assembler-fuzz-deepseek-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).expect("tokenizer.json written");
        let model = HfModel::load(&dir).expect("the small folder loads");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            model.counts_fast(),
            "the small folder of DeepSeek's shape is not counted fast"
        );
        model
    })
}

/// Panics unless the hand split cuts `data` (as lossy UTF-8) into the
/// reference's pieces, and the small folder's fast count and ids (with and
/// without the post-processor's tokens) are the reference's, on the text
/// alone and with added tokens around it.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Some(pieces) = deepseek::split(&text) else {
        panic!("the class tables did not build");
    };
    let ours: Vec<&str> = pieces.collect();
    let mut pre = PreTokenizedString::from(text.as_ref());
    splits()
        .pre_tokenize(&mut pre)
        .expect("the reference pre-tokenizes");
    let theirs: Vec<&str> = pre
        .get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(s, _, _)| s)
        .collect();
    assert_eq!(ours, theirs, "{text:?}");

    let m = model();
    let framed = format!("<｜User｜>{text}<｜Assistant｜>{text}");
    for t in [text.as_ref(), framed.as_str()] {
        assert_eq!(m.count(t), m.reference_count(t), "count {t:?}");
        for special in [false, true] {
            assert_eq!(
                m.encode(t, special),
                m.reference_encode(t, special),
                "ids ({special}) {t:?}"
            );
        }
    }
}
