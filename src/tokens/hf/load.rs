//! A model folder read and checked: each file bounded in size before it
//! is read; `tokenizer.json` of a supported model type, its fast count
//! checked against it; the chat template compiled and tried on one
//! message; the texts that can forge a turn gathered. The folder's digest
//! covers every file read, in a fixed order.

use std::path::Path;

use super::split::Splitter;
use super::{Affixes, Fast, HfModel, LoadError};
use crate::tokens::template::{ChatMessage, ChatTemplate, TemplateError};

/// The tokenizer model types counted here (the LLM vocabularies: byte-level
/// and SentencePiece BPE, SentencePiece Unigram).
const MODEL_TYPES: [&str; 2] = ["BPE", "Unigram"];
/// The largest `tokenizer.json` read (Gemma 3's is 33 MB).
const MAX_TOKENIZER_BYTES: u64 = 256 * 1024 * 1024;
/// The largest `tokenizer_config.json` or `chat_template.jinja` read.
const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;
/// The named special tokens `transformers` hands a chat template.
const SPECIAL_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

impl HfModel {
    /// Loads and checks the folder `dir`: `tokenizer.json` must parse as a
    /// tokenizer of a supported model type; `tokenizer_config.json` is
    /// optional, and so is its template (`chat_template.jinja` wins over the
    /// config's `chat_template`, as in `transformers`); a template must
    /// compile and render a one-message conversation.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        check_folder(dir)?;
        let tok_path = dir.join("tokenizer.json");
        let (tok_bytes, tok_json, tokenizer) = read_tokenizer(&tok_path)?;
        let (fast, slow) = Fast::checked(&tok_json, &tokenizer);
        let affixes = fast.as_ref().and_then(|_| special_affixes(&tokenizer));
        let splitter = Splitter::of(&tok_json);
        drop(tok_json);

        let mut hasher = blake3::Hasher::new();
        hasher.update(b"hf-folder/v1\0");
        hasher.update(&(tok_bytes.len() as u64).to_le_bytes());
        hasher.update(&tok_bytes);
        drop(tok_bytes);
        let template = read_template(dir, &mut hasher)?;

        let vocab = tokenizer.get_vocab(true);
        let longest_token = vocab.keys().map(String::len).max().unwrap_or(1).max(1);
        let specials = forging_texts(&tokenizer, template.as_ref());
        let finder = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&specials)
            .map_err(|e| malformed(&tok_path, format!("special tokens: {e}")))?;
        let model = HfModel {
            name: folder_name(dir),
            tokenizer,
            template,
            digest: *hasher.finalize().as_bytes(),
            longest_token,
            specials,
            finder,
            fast,
            affixes,
            splitter,
            slow: slow.map(|why| (why, std::sync::Once::new())),
        };
        // A reload logs here; the first load of a process runs before its
        // log is set up, and says it at the first count instead.
        if tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>()) {
            model.say_slow();
        }
        Ok(model)
    }
}

/// A file of the folder that is not what the layout says it is.
fn malformed(path: &Path, reason: String) -> LoadError {
    LoadError::Malformed {
        path: path.to_owned(),
        reason,
    }
}

/// Whether `dir` is a folder: `Ok` if so, else why it cannot be read.
fn check_folder(dir: &Path) -> Result<(), LoadError> {
    let meta = std::fs::metadata(dir).map_err(|e| LoadError::Read {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?;
    if !meta.is_dir() {
        return Err(LoadError::Read {
            path: dir.to_owned(),
            reason: "not a folder".to_owned(),
        });
    }
    Ok(())
}

/// The `tokenizer.json` at `path`: its bytes, their JSON, and the
/// tokenizer they build, which must be of a model type counted here.
fn read_tokenizer(path: &Path) -> Result<(Vec<u8>, serde_json::Value, tokenizers::Tokenizer), LoadError> {
    let bytes = read(path, MAX_TOKENIZER_BYTES)?;
    let json = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| malformed(path, format!("not JSON: {e}")))?;
    let model_type = json
        .pointer("/model/type")
        .and_then(|t| t.as_str().map(str::to_owned))
        .ok_or_else(|| malformed(path, "no model.type".to_owned()))?;
    if !MODEL_TYPES.contains(&model_type.as_str()) {
        return Err(malformed(
            path,
            format!("tokenizer model type {model_type:?} is not supported (BPE or Unigram)"),
        ));
    }
    let tokenizer = tokenizers::Tokenizer::from_bytes(&bytes)
        .map_err(|e| malformed(path, format!("not a tokenizer: {e}")))?;
    Ok((bytes, json, tokenizer))
}

/// The chat template of the folder `dir`, if it has one
/// (`chat_template.jinja` wins over `tokenizer_config.json`'s
/// `chat_template`), compiled with the special tokens the config names and
/// tried on a one-message conversation. The config and the template file,
/// as read, go into `hasher` (a missing config as `u64::MAX`).
fn read_template(dir: &Path, hasher: &mut blake3::Hasher) -> Result<Option<ChatTemplate>, LoadError> {
    let cfg_path = dir.join("tokenizer_config.json");
    let config: serde_json::Value = if cfg_path.exists() {
        let bytes = read(&cfg_path, MAX_CONFIG_BYTES)?;
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
        serde_json::from_slice(&bytes).map_err(|e| malformed(&cfg_path, format!("not JSON: {e}")))?
    } else {
        hasher.update(&u64::MAX.to_le_bytes());
        serde_json::Value::Null
    };
    let jinja_path = dir.join("chat_template.jinja");
    let source = if jinja_path.exists() {
        let bytes = read(&jinja_path, MAX_CONFIG_BYTES)?;
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
        Some(String::from_utf8(bytes).map_err(|_| malformed(&jinja_path, "not UTF-8".to_owned()))?)
    } else {
        template_source(&config).map_err(|reason| malformed(&cfg_path, reason))?
    };
    let template_path = if jinja_path.exists() {
        jinja_path
    } else {
        cfg_path.clone()
    };
    let specials_named: Vec<(String, String)> = SPECIAL_NAMES
        .iter()
        .filter_map(|&k| Some((k.to_owned(), token_text(config.get(k)?)?)))
        .collect();
    source
        .map(|s| {
            let t = ChatTemplate::new(&s, specials_named)?;
            t.render(&[ChatMessage::new("user", "Hi")], None, true)?;
            Ok::<_, TemplateError>(t)
        })
        .transpose()
        .map_err(|e| malformed(&template_path, format!("chat template: {e}")))
}

/// The texts that can forge a turn, longest first: the special tokens, and
/// the added tokens the template itself writes (DeepSeek's `<｜User｜>`,
/// Qwen's `<tool_call>` are added but not special).
fn forging_texts(tokenizer: &tokenizers::Tokenizer, template: Option<&ChatTemplate>) -> Vec<String> {
    let emitted = template.map(emitted_text).unwrap_or_default();
    let mut specials: Vec<String> = tokenizer
        .get_added_tokens_decoder()
        .into_values()
        .filter(|t| !t.content.is_empty() && (t.special || emitted.contains(&t.content)))
        .map(|t| t.content)
        .collect();
    specials.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    specials.dedup();
    specials
}

/// The folder's name, shown as `hf:<name>`: the last part of its
/// canonical path.
fn folder_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .as_deref()
        .unwrap_or(dir)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned())
}

fn read(path: &Path, max: u64) -> Result<Vec<u8>, LoadError> {
    let err = |reason: String| LoadError::Read {
        path: path.to_owned(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("not a file".to_owned()));
    }
    if meta.len() > max {
        return Err(err(format!("larger than {max} bytes")));
    }
    std::fs::read(path).map_err(|e| err(e.to_string()))
}

/// A special token as `tokenizer_config.json` writes it: a string, or an
/// added-token object with its `content`.
fn token_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// What `template` writes around small conversations (with and without a
/// tool, a tool result, a system message); conversations it refuses are
/// left out.
fn emitted_text(template: &ChatTemplate) -> String {
    let msg = ChatMessage::new;
    let tool = serde_json::json!({"type": "function", "function": {"name": "f", "description": "d",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}});
    let probes: [&[ChatMessage<'_>]; 4] = [
        &[msg("system", "s"), msg("user", "u")],
        &[msg("user", "u"), msg("assistant", "a"), msg("user", "u")],
        &[msg("user", "u"), msg("assistant", "a"), msg("tool", "t")],
        &[msg("user", "u")],
    ];
    let mut out = String::new();
    for p in probes {
        for tools in [None, Some(std::slice::from_ref(&tool))] {
            if let Ok(text) = template.render(p, tools, true) {
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

/// The template source in a `tokenizer_config.json`: its `chat_template`
/// string, or from a list of named templates the one named `default`.
fn template_source(config: &serde_json::Value) -> Result<Option<String>, String> {
    match config.get("chat_template") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template").and_then(|s| s.as_str()))
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| "chat_template is a list without a \"default\" template".to_owned()),
        Some(_) => Err("chat_template is neither a string nor a list of templates".to_owned()),
    }
}

/// The ids `tokenizer` adds around a text with its special tokens, read
/// off two samples (the same for both, or `None`: the reference adds them).
fn special_affixes(tokenizer: &tokenizers::Tokenizer) -> Option<Affixes> {
    let mut found: Option<(Vec<u32>, Vec<u32>)> = None;
    for sample in ["a", "Hello, world!\n\n  12345"] {
        let with = tokenizer.encode_fast(sample, true).ok()?;
        let without = tokenizer.encode_fast(sample, false).ok()?;
        let (with, without) = (with.get_ids(), without.get_ids());
        let at = (0..=with.len().checked_sub(without.len())?).find(|&i| with[i..].starts_with(without))?;
        let pair = (with[..at].to_vec(), with[at + without.len()..].to_vec());
        if found.as_ref().is_some_and(|f| *f != pair) {
            return None;
        }
        found = Some(pair);
    }
    found.map(|(before, after)| Affixes { before, after })
}
