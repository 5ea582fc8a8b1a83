//! A model folder in the Hugging Face layout, the one vLLM, SGLang and TGI
//! load: `tokenizer.json` (pre-tokenizer, BPE or Unigram model, added and
//! special tokens) and `tokenizer_config.json` (its `chat_template`, or a
//! `chat_template.jinja` beside it, and the special tokens a template reads).
//!
//! Counting runs Hugging Face's own Rust tokenizer (the `tokenizers` crate,
//! which `transformers`' fast tokenizers wrap) on the folder's file, so a
//! count is `len(tokenizer.encode(text, add_special_tokens=False))` of the
//! reference by construction: text that spells a special token
//! (`<|im_end|>`) is that token, as the engine will tokenize it. The
//! reference cross-check (`tests/reference/hf_check.py`) compares both
//! against Python `transformers` on real vocabularies. Where the folder's
//! tokenizer is one `fast` or `pieces` reproduces (Llama 3, Qwen 2 and
//! 3, DeepSeek V3, Gemma 3), a hand-written count and ids stand in for it,
//! once they agree with it on awkward samples at load; any other folder is
//! counted by the reference and named in one warning, at load or at its
//! first count (how one joins the fast path: `fast`'s module doc).
//!
//! Reading and checking a folder's files is `load`'s; here, counting,
//! encoding and cutting with the folder once loaded.

use std::path::PathBuf;
use std::sync::Arc;

use self::fast::FastCount;
use self::pieces::PieceCount;
pub use self::split::Piece;
use self::split::Splitter;
use super::template::ChatTemplate;
use crate::vocab::saturating_u32;

/// What breaks a special token's spelling: a word joiner, invisible and
/// without meaning, which no special token of the supported families holds.
pub const NEUTRALIZER: char = '\u{2060}';

/// Why a model folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file is missing or unreadable.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
    /// A file is not what the layout says it is.
    #[error("{path}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// How a model folder's tokenizer counts and renders.
pub struct HfModel {
    /// The folder's name, shown as `hf:<name>`.
    name: String,
    tokenizer: tokenizers::Tokenizer,
    template: Option<ChatTemplate>,
    /// blake3 of the folder's files, in a fixed order: the tokenizer's
    /// identity in cache keys (the same files give the same counts).
    digest: [u8; 32],
    /// Bytes of the longest token's text (an upper bound on the input
    /// bytes one token covers).
    longest_token: usize,
    /// The texts of the special added tokens, longest first.
    specials: Vec<String>,
    /// Finds them in a text, longest first.
    finder: aho_corasick::AhoCorasick,
    /// The fast count and ids, for a tokenizer it reproduces ([`fast`],
    /// [`pieces`]).
    fast: Option<Fast>,
    /// What `encode(text, add_special_tokens=True)` puts before and after
    /// a text's ids, when the fast ids are used.
    affixes: Option<Affixes>,
    /// Where the added vocabulary cuts a text ([`split`]).
    splitter: Option<Splitter>,
    /// Why the reference counts, when it does, and whether the log has
    /// said so ([`HfModel::say_slow`]).
    slow: Option<(&'static str, std::sync::Once)>,
}

impl std::fmt::Debug for HfModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfModel")
            .field("name", &self.name)
            .field("template", &self.template.is_some())
            .field("digest", &blake3::Hash::from(self.digest).to_hex().as_str())
            .finish_non_exhaustive()
    }
}

impl HfModel {
    /// Logs once, as a warning naming the folder, that the reference
    /// tokenizer counts it (tens of times the fast path's CPU: an operator
    /// should know which folder, and why; `fast`'s module doc says how a
    /// folder joins the fast path). The server calls it when it warms up
    /// (a folder loaded before the log was set up says it then).
    pub fn say_slow(&self) {
        if let Some((why, once)) = &self.slow {
            once.call_once(|| {
                tracing::warn!(folder = %self.name, reason = why, "model folder counted by the slow reference tokenizer");
            });
        }
    }

    /// Whether counts take the fast path (`fast`).
    pub fn counts_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// The folder's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// blake3 of the folder's files.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The chat template, when the folder has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Bytes of the longest token's text.
    pub fn longest_token(&self) -> usize {
        self.longest_token
    }

    /// Tokens of `text`: `encode(text, add_special_tokens=False)`. A text
    /// the tokenizer refuses (none of the supported types does for valid
    /// UTF-8) counts its bytes, which is never fewer than its tokens.
    pub fn count(&self, text: &str) -> u32 {
        if let Some(n) = self.fast.as_ref().and_then(|f| f.count(text)) {
            return saturating_u32(n);
        }
        self.say_slow();
        self.reference_count(text)
    }

    /// [`HfModel::count`] by Hugging Face's tokenizer itself (the
    /// reference the fast count is checked and benchmarked against).
    pub fn reference_count(&self, text: &str) -> u32 {
        match self.tokenizer.encode_fast(text, false) {
            Ok(e) => saturating_u32(e.len()),
            Err(_) => saturating_u32(text.len()),
        }
    }

    /// The ids of `text` as `transformers`' `encode(text,
    /// add_special_tokens=...)` gives them: what an engine holding this
    /// folder computes. `Err` with the tokenizer's reason where it refuses
    /// (none of the supported types does for valid UTF-8).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        if let Some(fast) = &self.fast {
            let none = Affixes::default();
            let affixes = if add_special_tokens {
                self.affixes.as_ref()
            } else {
                Some(&none)
            };
            if let Some(a) = affixes {
                let mut out = Vec::with_capacity(text.len() / 3 + a.before.len() + a.after.len());
                out.extend_from_slice(&a.before);
                if fast.ids(text, &mut out).is_some() {
                    out.extend_from_slice(&a.after);
                    return Ok(out);
                }
            }
        }
        self.say_slow();
        self.reference_encode(text, add_special_tokens)
    }

    /// [`HfModel::encode`] by Hugging Face's tokenizer itself.
    pub fn reference_encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }

    /// Calls `f` with each piece of `text` cut where the tokenizer cuts it
    /// first, at its added tokens ([`Piece`]): the count of `text` is the
    /// number of [`Piece::Added`] plus the count of each [`Piece::Text`].
    /// `None` (and no call) for a vocabulary whose added tokens strip their
    /// neighbours.
    pub fn split<'t>(&self, text: &'t str, f: impl FnMut(Piece<'t>)) -> Option<()> {
        self.splitter.as_ref()?.for_each(text, f);
        Some(())
    }

    /// Tokens of each prefix `text[..end]` for the ascending byte offsets
    /// `ends`: from one encoding, the tokens that end at or before each end
    /// (a token an end splits is not counted: an estimate, off near an end).
    pub fn prefix_counts(&self, text: &str, ends: &[usize]) -> Vec<u32> {
        let Ok(enc) = self.tokenizer.encode(text, false) else {
            return ends.iter().map(|&e| saturating_u32(e)).collect();
        };
        let offsets = enc.get_offsets();
        let mut out = Vec::with_capacity(ends.len());
        let mut i = 0;
        for &end in ends {
            while i < offsets.len() && offsets[i].1 <= end {
                i += 1;
            }
            out.push(saturating_u32(i));
        }
        out
    }

    /// The special tokens spelled in `text`, each once, longest first.
    pub fn specials_in<'s>(&'s self, text: &str) -> Vec<&'s str> {
        let mut found: Vec<usize> = self
            .finder
            .find_iter(text)
            .map(|m| m.pattern().as_usize())
            .collect();
        found.sort_unstable();
        found.dedup();
        found.into_iter().map(|i| self.specials[i].as_str()).collect()
    }

    /// `text` with every spelling of a special token broken by a word
    /// joiner (U+2060) after its first character, so it is read as text;
    /// `None` when it spells none.
    pub fn neutralize(&self, text: &str) -> Option<String> {
        let mut found = self.finder.find_iter(text).peekable();
        found.peek()?;
        let mut out = String::with_capacity(text.len() + 16);
        let mut at = 0;
        for m in found {
            let first = text[m.start()..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[at..m.start() + first]);
            out.push(NEUTRALIZER);
            at = m.start() + first;
        }
        out.push_str(&text[at..]);
        Some(out)
    }

    /// The special tokens' texts, longest first.
    pub fn specials(&self) -> &[String] {
        &self.specials
    }
}

/// The special tokens a tokenizer's post-processor adds around a single
/// text's ids.
#[derive(Debug, Default)]
struct Affixes {
    before: Vec<u32>,
    after: Vec<u32>,
}

/// A fast count of one of the kinds recognised.
#[derive(Debug)]
enum Fast {
    /// Byte-level BPE with cl100k's split (Llama 3), Qwen's or DeepSeek V3's.
    ByteLevel(FastCount),
    /// SentencePiece-style BPE (Gemma 3).
    Pieces(PieceCount),
}

impl Fast {
    fn of(json: &serde_json::Value) -> Option<Fast> {
        FastCount::of(json)
            .map(Fast::ByteLevel)
            .or_else(|| PieceCount::of(json).map(Fast::Pieces))
    }

    /// The fast count of the tokenizer `json` describes, once it counts and
    /// encodes the awkward samples as `reference` does; else `None`, and
    /// why the reference counts.
    fn checked(
        json: &serde_json::Value,
        reference: &tokenizers::Tokenizer,
    ) -> (Option<Fast>, Option<&'static str>) {
        let Some(fast) = Fast::of(json) else {
            return (
                None,
                Some("its normalizer, pre-tokenizer or model is not one the fast count reproduces"),
            );
        };
        if !added_ids_agree(json, reference) {
            return (
                None,
                Some("an added token's id is not the one the reference encodes its text as"),
            );
        }
        let agrees = pattern::SAMPLES.iter().all(|t| {
            let expected = reference.encode_fast(*t, false).ok();
            let expected = expected.as_ref().map(tokenizers::Encoding::get_ids);
            let mut ids = Vec::new();
            let count_ok = fast
                .count(t)
                .is_none_or(|n| Some(n) == expected.map(<[u32]>::len));
            let ids_ok = fast.ids(t, &mut ids).is_none() || Some(ids.as_slice()) == expected;
            count_ok && ids_ok
        });
        if agrees {
            (Some(fast), None)
        } else {
            (
                None,
                Some("its fast count disagreed with the reference on a load-time sample"),
            )
        }
    }

    fn count(&self, text: &str) -> Option<usize> {
        match self {
            Fast::ByteLevel(f) => f.count(text),
            Fast::Pieces(p) => Some(p.count(text)),
        }
    }

    /// The ids of `text` appended to `out`, or `None` where the reference
    /// must encode.
    fn ids(&self, text: &str, out: &mut Vec<u32>) -> Option<()> {
        match self {
            Fast::ByteLevel(f) => f.ids(text, out),
            Fast::Pieces(p) => {
                p.ids(text, out);
                Some(())
            }
        }
    }
}

/// Whether every added token of `json` is the id `reference` encodes its
/// text as. `tokenizers` keeps a text already in the model's vocabulary
/// under the vocabulary's id, whatever id `added_tokens` names; the fast
/// path cuts added tokens by the ids named, so it must find them the same.
fn added_ids_agree(json: &serde_json::Value, reference: &tokenizers::Tokenizer) -> bool {
    let Some(added) = json.get("added_tokens").and_then(serde_json::Value::as_array) else {
        return true;
    };
    added.iter().all(|t| {
        let content = t.get("content").and_then(serde_json::Value::as_str);
        let id = t
            .get("id")
            .and_then(serde_json::Value::as_u64)
            .and_then(|id| u32::try_from(id).ok());
        matches!((content, id), (Some(c), Some(id)) if reference.token_to_id(c) == Some(id))
    })
}

/// A shared, loaded folder.
pub type SharedModel = Arc<HfModel>;

mod fast;
#[cfg(test)]
pub(crate) mod fixture;
mod load;
mod pattern;
mod pieces;
mod split;
#[cfg(test)]
mod tests;
