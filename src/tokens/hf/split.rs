//! Cutting a text where Hugging Face's added vocabulary cuts it, so that a
//! long text's count is the sum of its pieces' counts and each piece can be
//! counted (and cached) on its own.
//!
//! `tokenizers` encodes a text in this order: it finds the added tokens
//! that match raw text (those not `normalized`), leftmost-longest; it
//! normalizes every piece between them and finds the `normalized` added
//! tokens in it; then it pre-tokenizes and runs the model on each piece
//! left, alone. No token of the model crosses an added token, and every
//! added token is one token. So for any text
//!
//! ```text
//! count(text) = added tokens found + sum of count(piece) over the pieces
//! ```
//!
//! exactly, whatever the pre-tokenizer or model (a SentencePiece BPE that
//! merges across spaces and newlines included). This is what makes a
//! rendered prompt countable piece by piece: each message's text sits
//! between the special tokens of its frame, so a prompt that differs from
//! the last one by a turn costs the count of that turn's piece, and the
//! others are cache hits. `split::tests` checks the identity against the
//! tokenizer on texts thick with added tokens.
//!
//! The second step (normalized added tokens) is taken here only where the
//! normalizer changes nothing (none, or an empty sequence); elsewhere a
//! piece keeps its normalized added tokens and its count finds them itself,
//! as the tokenizer does. A vocabulary with an added token that strips the
//! text around it, or matches single words only, is not cut at all: its
//! pieces would depend on their neighbours.

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

/// One piece of a cut text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'t> {
    /// An added token (one token).
    Added,
    /// Text between added tokens (never empty).
    Text(&'t str),
}

/// The added vocabulary's cuts of one tokenizer.
#[derive(Debug)]
pub(super) struct Splitter {
    /// Added tokens matched on raw text.
    raw: Option<AhoCorasick>,
    /// Added tokens matched on normalized text, where normalizing is the
    /// identity.
    normalized: Option<AhoCorasick>,
}

fn finder(texts: &[String]) -> Option<Option<AhoCorasick>> {
    if texts.is_empty() {
        return Some(None);
    }
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(texts)
        .ok()
        .map(Some)
}

/// Whether the normalizer `n` changes no text: none, or a sequence of such.
fn is_identity(n: Option<&Value>) -> bool {
    match n {
        None | Some(Value::Null) => true,
        Some(n) => {
            n.get("type").and_then(Value::as_str) == Some("Sequence")
                && n.get("normalizers")
                    .and_then(Value::as_array)
                    .is_some_and(|list| list.iter().all(|m| is_identity(Some(m))))
        }
    }
}

impl Splitter {
    /// The cuts of the tokenizer `json`, or `None` when its added tokens
    /// cannot be cut apart from their neighbours (see the module doc).
    pub(super) fn of(json: &Value) -> Option<Splitter> {
        let mut raw = Vec::new();
        let mut normalized = Vec::new();
        for t in json.get("added_tokens")?.as_array()? {
            let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
            if flag("lstrip") || flag("rstrip") || flag("single_word") {
                return None;
            }
            let content = t.get("content")?.as_str()?;
            if content.is_empty() {
                continue;
            }
            if flag("normalized") {
                normalized.push(content.to_owned());
            } else {
                raw.push(content.to_owned());
            }
        }
        let normalized = if is_identity(json.get("normalizer")) {
            finder(&normalized)?
        } else {
            None
        };
        Some(Splitter {
            raw: finder(&raw)?,
            normalized,
        })
    }

    /// Calls `f` with each piece of `text`, in order.
    pub(super) fn for_each<'t>(&self, text: &'t str, mut f: impl FnMut(Piece<'t>)) {
        let normalized = self.normalized.as_ref();
        let mut second = |piece: Piece<'t>| match (piece, normalized) {
            (Piece::Text(t), Some(n)) => cut(n, t, &mut f),
            (p, _) => f(p),
        };
        match &self.raw {
            Some(raw) => cut(raw, text, &mut second),
            None if !text.is_empty() => second(Piece::Text(text)),
            None => {}
        }
    }
}

/// Calls `f` with the pieces of `text` cut at `finder`'s matches.
fn cut<'t>(finder: &AhoCorasick, text: &'t str, f: &mut impl FnMut(Piece<'t>)) {
    let mut at = 0;
    for m in finder.find_iter(text) {
        if m.start() > at {
            f(Piece::Text(&text[at..m.start()]));
        }
        f(Piece::Added);
        at = m.end();
    }
    if at < text.len() {
        f(Piece::Text(&text[at..]));
    }
}

#[cfg(test)]
mod tests {
    use super::super::HfModel;
    use super::super::fixture;
    use super::*;
    use proptest::prelude::*;

    fn model() -> HfModel {
        let dir = tempfile::tempdir().unwrap();
        fixture::write_folder(dir.path(), Some(fixture::CHATML));
        HfModel::load(dir.path()).unwrap()
    }

    fn pieces<'t>(m: &HfModel, text: &'t str) -> Vec<Piece<'t>> {
        let mut out = Vec::new();
        m.split(text, |p| out.push(p)).unwrap();
        out
    }

    #[test]
    fn a_text_is_cut_at_its_added_tokens_and_nowhere_else() {
        let m = model();
        assert_eq!(
            pieces(&m, "<|im_start|>user\nhi<|im_end|><|im_end|>\n"),
            [
                Piece::Added,
                Piece::Text("user\nhi"),
                Piece::Added,
                Piece::Added,
                Piece::Text("\n")
            ]
        );
        assert_eq!(pieces(&m, ""), []);
        assert_eq!(pieces(&m, "plain"), [Piece::Text("plain")]);
    }

    #[test]
    fn a_normalized_added_token_is_cut_only_where_normalizing_changes_nothing() {
        let with = |normalizer: Value| {
            serde_json::json!({
                "normalizer": normalizer,
                "added_tokens": [
                    {"content": "<s>", "normalized": false, "special": true},
                    {"content": "<U>", "normalized": true, "special": false}
                ]
            })
        };
        let s = Splitter::of(&with(Value::Null)).unwrap();
        let mut n = 0;
        s.for_each("a<U>b<s>c", |p| n += usize::from(p == Piece::Added));
        assert_eq!(n, 2);
        let s = Splitter::of(&with(serde_json::json!({"type": "NFC"}))).unwrap();
        let mut n = 0;
        s.for_each("a<U>b<s>c", |p| n += usize::from(p == Piece::Added));
        assert_eq!(n, 1, "a normalized token is left to the piece's own count");
        let strip = serde_json::json!({"added_tokens": [{"content": "<s>", "lstrip": true}]});
        assert!(Splitter::of(&strip).is_none());
    }

    /// The sum of the pieces' counts (the reference's, each alone).
    fn summed(m: &HfModel, text: &str) -> u32 {
        let mut n = 0;
        m.split(text, |p| {
            n += match p {
                Piece::Added => 1,
                Piece::Text(t) => m.reference_count(t),
            }
        })
        .unwrap();
        n
    }

    fn chunk() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("<|im_start|>".to_owned()),
            Just("<|im_end|>".to_owned()),
            Just("<start_of_turn>".to_owned()),
            Just("\n".to_owned()),
            Just("\n\n".to_owned()),
            Just("  ".to_owned()),
            Just(" hello".to_owned()),
            Just("user".to_owned()),
            "[a-z .\n]{0,6}",
            "\\PC{0,3}",
        ]
    }

    proptest! {
        /// The module's identity: counting piece by piece is counting whole.
        #[test]
        fn the_pieces_count_what_the_whole_counts(parts in proptest::collection::vec(chunk(), 0..24)) {
            let m = model();
            let text: String = parts.concat();
            prop_assert_eq!(summed(&m, &text), m.reference_count(&text));
        }
    }

    /// The identity on a real vocabulary, when the cross-check's folders are
    /// here (`CONTEXT_ASSEMBLER_HF_VOCAB`): DeepSeek V3's cuts at normalized
    /// added tokens too, Qwen 3's normalizes (NFC), Gemma 3's merges across
    /// spaces.
    #[test]
    fn the_pieces_count_what_the_whole_counts_on_real_vocabularies() {
        let Some(root) = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI sets CONTEXT_ASSEMBLER_HF_VOCAB"
            );
            return;
        };
        let texts = [
            "<｜begin▁of▁sentence｜>sys<｜User｜>\n hi <｜Assistant｜>ok<｜end▁of▁sentence｜>",
            "<|im_start|>user\n\n  e\u{301}t\u{e9} <|im_end|>\n<|im_start|>assistant\n",
            "<bos><start_of_turn>user\n  hello\n\n<end_of_turn>\n<start_of_turn>model\n",
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\n x<|eot_id|>",
        ];
        for family in ["qwen3", "llama3_1", "gemma3", "deepseek_v3"] {
            let m = HfModel::load(&std::path::Path::new(&root).join(family)).unwrap();
            for t in texts {
                assert_eq!(summed(&m, t), m.reference_count(t), "{family}: {t:?}");
            }
        }
    }
}
