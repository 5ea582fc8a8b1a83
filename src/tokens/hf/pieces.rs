//! The fast count of a SentencePiece-style BPE folder (Gemma 3's, whose
//! vocabulary is Gemini's): spaces normalized to `▁`, no pre-tokenizer that
//! cuts anything, merges by rank, and byte fallback for a character the
//! vocabulary lacks. Hugging Face's tokenizer runs its BPE over each whole
//! text between added tokens (a megabyte is one word to it); here the text
//! is cut where no token can cross, before each run of `▁` that follows
//! another character, and each cut is merged alone, once per distinct cut:
//! no merge crosses a cut, so each cut's merges happen in the same order as
//! in the whole text and give the same tokens. A vocabulary with tokens
//! that do cross such a place (Gemma 3 has one, `>▁</`) keeps the cut
//! closed wherever such a token's text stands around it.
//!
//! Like [`super::fast`], recognised from the file and trusted only after it
//! agrees with the reference on awkward samples at load.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::fast::{Added, Segment, added_finder, merge, merge_table};

/// The word-boundary mark SentencePiece writes for a space.
const SPACE: char = '\u{2581}';
/// The most tokens that may cross a cut before the vocabulary is not
/// counted fast (each is tried at every cut).
const MAX_CROSSING: usize = 64;

/// The fast count of one recognised folder.
pub(super) struct PieceCount {
    /// Each single character's token id.
    chars: FxHashMap<char, u32>,
    /// The token id of each byte's fallback token `<0xXX>`.
    byte_ids: [u32; 256],
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    added: Option<Added>,
    /// Tokens holding a `▁` after another character, with that `▁`'s byte
    /// offset in them: a cut there stays closed where the token's text
    /// stands.
    crossing: Vec<(String, usize)>,
}

impl std::fmt::Debug for PieceCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceCount").finish_non_exhaustive()
    }
}

impl PieceCount {
    /// The fast count of the tokenizer `json` describes, when it is one
    /// this module reproduces: a normalizer that only replaces `" "` with
    /// `▁`; no pre-tokenizer, or a split on `" "` (which the normalized
    /// text no longer holds); a BPE model with byte fallback, without
    /// dropout or subword affixes, with every `<0xXX>` token; added tokens
    /// matched on the raw text that strip nothing. `None` otherwise.
    pub(super) fn of(json: &Value) -> Option<PieceCount> {
        let n = json.get("normalizer")?;
        let replaces_spaces = n.get("type")?.as_str()? == "Replace"
            && n.pointer("/pattern/String")?.as_str()? == " "
            && n.get("content")?.as_str()? == "\u{2581}";
        let pre_ok = match json.get("pre_tokenizer") {
            None | Some(Value::Null) => true,
            Some(p) => {
                p.get("type")?.as_str()? == "Split"
                    && p.pointer("/pattern/String")?.as_str()? == " "
                    && !p.get("invert")?.as_bool()?
            }
        };
        let model = json.get("model")?;
        let unset = |k: &str| match model.get(k) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        let ignore_merges = model
            .get("ignore_merges")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if !replaces_spaces
            || !pre_ok
            || model.get("type")?.as_str()? != "BPE"
            || !model.get("byte_fallback")?.as_bool()?
            || ignore_merges
            || !["dropout", "continuing_subword_prefix", "end_of_word_suffix"]
                .into_iter()
                .all(unset)
        {
            return None;
        }
        let vocab = model.get("vocab")?.as_object()?;
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(vocab.len());
        let mut chars = FxHashMap::default();
        let mut byte_ids = [u32::MAX; 256];
        let mut crossing = Vec::new();
        for (text, id) in vocab {
            let id = u32::try_from(id.as_u64()?).ok()?;
            ids.insert(text.as_str(), id);
            let mut it = text.chars();
            if let (Some(c), None) = (it.next(), it.next()) {
                chars.insert(c, id);
            }
            if let Some(b) = text
                .strip_prefix("<0x")
                .and_then(|h| h.strip_suffix('>'))
                .filter(|h| h.len() == 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                byte_ids[usize::from(b)] = id;
            }
            let mut prev: Option<char> = None;
            for (at, c) in text.char_indices() {
                if c == SPACE && prev.is_some_and(|p| p != SPACE) {
                    crossing.push((text.clone(), at));
                }
                prev = Some(c);
            }
        }
        if byte_ids.contains(&u32::MAX) || crossing.len() > MAX_CROSSING {
            return None;
        }
        let merges = merge_table(model, &ids)?;
        let added = added_finder(json, false)?;
        Some(PieceCount {
            chars,
            byte_ids,
            merges,
            added,
            crossing,
        })
    }

    /// Tokens of `text`, as the reference encodes it without added special
    /// tokens.
    pub(super) fn count(&self, text: &str) -> usize {
        let mut out = Vec::new();
        self.ids(text, &mut out);
        out.len()
    }

    /// The ids of `text`, as the reference encodes it without added special
    /// tokens, appended to `out`.
    pub(super) fn ids(&self, text: &str, out: &mut Vec<u32>) {
        /// A segment with its text normalized.
        enum Normalized {
            Text(String),
            Token(u32),
        }
        let segments: Vec<Normalized> = Added::segments(self.added.as_ref(), text)
            .map(|s| match s {
                Segment::Plain(plain) => Normalized::Text(plain.replace(' ', "\u{2581}")),
                Segment::Token(id) => Normalized::Token(id),
            })
            .collect();
        // Each distinct cut's ids, as where they already stand in `out`.
        let mut memo = FxHashMap::default();
        let mut scratch = Vec::new();
        for segment in &segments {
            match segment {
                Normalized::Token(id) => out.push(*id),
                Normalized::Text(t) => self.ids_normalized(t, out, &mut memo, &mut scratch),
            }
        }
    }

    /// The ids of a normalized text without added tokens, cut by cut.
    fn ids_normalized<'t>(
        &self,
        text: &'t str,
        out: &mut Vec<u32>,
        memo: &mut FxHashMap<&'t str, (usize, usize)>,
        scratch: &mut Vec<u32>,
    ) {
        let mut start = 0;
        let mut prev: Option<char> = None;
        for (i, c) in text.char_indices() {
            let cut = c == SPACE && prev.is_some_and(|p| p != SPACE) && !self.crossed(text, i);
            if cut {
                self.cut_ids(&text[start..i], out, memo, scratch);
                start = i;
            }
            prev = Some(c);
        }
        self.cut_ids(&text[start..], out, memo, scratch);
    }

    /// Whether a token that crosses the cut before byte `i` stands there.
    fn crossed(&self, text: &str, i: usize) -> bool {
        self.crossing.iter().any(|(token, at)| {
            i.checked_sub(*at)
                .and_then(|s| text.get(s..s + token.len()))
                .is_some_and(|t| t == token)
        })
    }

    /// The ids of one cut, merged once per distinct cut.
    fn cut_ids<'t>(
        &self,
        cut: &'t str,
        out: &mut Vec<u32>,
        memo: &mut FxHashMap<&'t str, (usize, usize)>,
        symbols: &mut Vec<u32>,
    ) {
        if cut.is_empty() {
            return;
        }
        if let Some(&(at, len)) = memo.get(cut) {
            out.extend_from_within(at..at + len);
            return;
        }
        symbols.clear();
        for c in cut.chars() {
            match self.chars.get(&c) {
                Some(&id) => symbols.push(id),
                None => {
                    let mut buf = [0u8; 4];
                    for &b in c.encode_utf8(&mut buf).as_bytes() {
                        symbols.push(self.byte_ids[usize::from(b)]);
                    }
                }
            }
        }
        merge(symbols, &self.merges);
        memo.insert(cut, (out.len(), symbols.len()));
        out.extend_from_slice(symbols);
    }
}
