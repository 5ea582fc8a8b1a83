//! Small model folders in the Hugging Face layout, built by the tests
//! themselves (no vocabulary is vendored): a byte-level BPE over the 256
//! byte symbols with a few merges, GPT-2's byte-to-symbol map, the cl100k
//! split pattern, ChatML special tokens, and a chat template. Shared by the
//! unit tests and (through `#[path]`) the integration tests.

#![allow(dead_code)]

use std::path::Path;

/// A ChatML template, as Qwen's (without tools or thinking).
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// A template in Gemma 3's manner: the system prompt folded into the first
/// user turn, roles that must alternate, `assistant` written `model`.
pub const ALTERNATING: &str = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}<start_of_turn>{{ role }}\n{{ (first if loop.first else '') + message['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

/// The special tokens of the fixture's vocabulary.
pub const SPECIALS: [&str; 6] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<bos>",
    "<start_of_turn>",
    "<end_of_turn>",
];

/// Words merged whole, in merge order (their byte symbols merged left to
/// right): whitespace runs that merge across a message's edge, role names,
/// and common English.
const WORDS: [&str; 22] = [
    "\n\n",
    "\n\n\n",
    "  ",
    "    ",
    "user",
    "assistant",
    "system",
    "model",
    "Ġhello",
    "hello",
    "Ġworld",
    "ĠThe",
    "Ġthe",
    "Ġand",
    "Ġof",
    "Ġto",
    ".\n",
    ".\n\n",
    "Ġis",
    "Ġa",
    "ing",
    "Ġcat",
];

/// GPT-2's printable symbol for each byte.
pub fn byte_symbol(b: u8) -> char {
    let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    if printable {
        char::from(b)
    } else {
        // The unprintable bytes take 256, 257, ... in byte order.
        let rank = (0..b)
            .filter(|&c| !((b'!'..=b'~').contains(&c) || (0xA1..=0xAC).contains(&c) || c >= 0xAE))
            .count() as u32;
        char::from_u32(256 + rank).unwrap_or('?')
    }
}

/// The byte symbols of `word` (`Ġ` stands for a leading space already).
fn symbols(word: &str) -> Vec<String> {
    if word.starts_with('Ġ') {
        let mut out = vec!["Ġ".to_owned()];
        out.extend(word.bytes().skip(2).map(|b| byte_symbol(b).to_string()));
        out
    } else {
        word.bytes().map(|b| byte_symbol(b).to_string()).collect()
    }
}

/// The `tokenizer.json` of the fixture vocabulary.
pub fn tokenizer_json() -> String {
    let mut vocab: Vec<String> = (0..=255u8).map(|b| byte_symbol(b).to_string()).collect();
    let mut merges: Vec<(String, String)> = Vec::new();
    for w in WORDS {
        let syms = symbols(w);
        let mut acc = syms[0].clone();
        for s in &syms[1..] {
            let merged = format!("{acc}{s}");
            if !vocab.contains(&merged) {
                merges.push((acc.clone(), s.clone()));
                vocab.push(merged.clone());
            }
            acc = merged;
        }
    }
    let vocab_json: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), serde_json::Value::from(i)))
        .collect();
    let added: Vec<serde_json::Value> = SPECIALS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            serde_json::json!({
                "id": vocab.len() + i, "content": s, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": true
            })
        })
        .collect();
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab_json,
            "merges": merges.iter().map(|(a, b)| vec![a.clone(), b.clone()]).collect::<Vec<_>>()
        }
    })
    .to_string()
}

/// Writes a folder at `dir`: the fixture's `tokenizer.json` and, when
/// `template` is set, a `tokenizer_config.json` carrying it.
pub fn write_folder(dir: &Path, template: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer_json()).unwrap();
    if let Some(t) = template {
        let config = serde_json::json!({
            "chat_template": t,
            "bos_token": "<bos>",
            "eos_token": {"content": "<|im_end|>", "special": true},
        });
        std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    }
}
