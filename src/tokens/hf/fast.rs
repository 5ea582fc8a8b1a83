//! The fast count and ids of a model folder whose tokenizer is, piece for
//! piece, one this crate already splits fast: a byte-level BPE whose
//! pre-tokenizer is exactly cl100k's split pattern (Llama 3), that pattern
//! with numbers taken one at a time (Qwen 2 and 3), or DeepSeek V3's three
//! splits ([`super::pattern`] reads which), with no normalizer or NFC.
//! Such a text is cut at its added tokens (each one token, as Hugging
//! Face's added vocabulary cuts them first), the rest by the hand-written
//! split (`pretok`, `pretok::deepseek`); under `ignore_merges` a piece that
//! is itself a token is that token ([`Singles`] answers the count in one
//! probe), any other is merged by the folder's merge list, lowest rank
//! first and leftmost on a tie, which is Hugging Face's BPE without
//! dropout. Within one text each distinct piece is merged once. (Llama 3's
//! vocabulary is not rank-consistent the way tiktoken's are: some of its
//! tokens are not what BPE by token rank makes of their own bytes, so an
//! encoder by rank, such as the one under bpe-openai, cannot stand in for
//! the merge list.) Text that NFC would change is left to the reference.
//!
//! Recognised only when the file says so (see [`FastCount::of`]), and then
//! trusted only after it agrees with Hugging Face's tokenizer on a sample of
//! awkward texts at load ([`super::pattern::SAMPLES`]); otherwise the
//! reference counts, and one warning in the log names the folder.
//! The reference cross-checks against `transformers`
//! (`tests/reference/hf_check.py`, `render_check.py`) run Llama 3.1's, Qwen
//! 3's and DeepSeek V3's real folders through this path.
//!
//! # A new folder on the fast path
//!
//! A folder the load warns is counted by the reference (Mistral's, Phi's,
//! GLM's) comes here in four steps, none of which trusts the file further
//! than it is read:
//!
//! 1. Read its `normalizer`, `pre_tokenizer` and `model` exactly. A
//!    byte-level BPE with a `Sequence` of `Split`s then a plain `ByteLevel`
//!    needs only its split; a SentencePiece-style BPE belongs to
//!    [`super::pieces`]; another normalizer than none or NFC, a `Split`
//!    that is not `Isolated`, or dropout and byte fallback in a byte-level
//!    model are not reproduced: leave it to the reference.
//! 2. Write its split by hand beside `pretok` (as `pretok::deepseek`): each
//!    `Split` runs alone on the pieces of the one before, so cut segments
//!    first and run the last regex within one; character classes from
//!    `regex-syntax`, checked on every code point; a test that counts the
//!    characters read (linear on degenerate runs).
//! 3. Recognise its regexes character for character in
//!    [`super::pattern::PreSplit::of`], and add samples for its seams to
//!    `SAMPLES` (the load-time check).
//! 4. Prove it: a property test and a fuzz target comparing the pieces with
//!    `tokenizers`' own pre-tokenizer built from the same JSON, a property
//!    test of counts and ids on a small folder of its shape (`hf::tests`),
//!    the real folder in `tests/reference/hf_check.py` and
//!    `render_check.py`, and the `count_1mb_hf` bench.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;
use serde_json::Value;

use super::pattern::{Pieces, PreSplit, one_pass_cuts_alike};
use crate::tokens::singles::Singles;
use crate::vocab::saturating_u32;

/// The fast count of one recognised folder.
pub(super) struct FastCount {
    /// Every token's bytes, for the single-token probe (`ignore_merges`).
    singles: Singles,
    /// Every token's id by its bytes (`ignore_merges`; empty otherwise).
    whole: ByBytes<u32>,
    /// The token id of each byte's symbol.
    byte_ids: [u32; 256],
    /// (left id, right id) to (merge rank, merged id).
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    added: Option<Added>,
    /// The pre-tokenizer's hand-written split.
    split: PreSplit,
    /// Whether the text is NFC-normalized first (Qwen).
    nfc: bool,
    /// Whether a piece that is a token is that token, unmerged.
    ignore_merges: bool,
}

impl std::fmt::Debug for FastCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastCount").finish_non_exhaustive()
    }
}

/// GPT-2's byte-level map, inverted: the byte each printable symbol stands
/// for.
fn symbol_bytes() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
    let mut out = std::collections::HashMap::with_capacity(256);
    let mut next = 256u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
        out.insert(c, b);
    }
    out
}

/// The merge list of a BPE `model` as (left id, right id) to (rank, merged
/// id), with the ids of `ids`; the first (lowest-ranked) merge of a pair is
/// the one that applies. `None` if a merge names an unknown token.
pub(super) fn merge_table(
    model: &Value,
    ids: &HashMap<&str, u32>,
) -> Option<FxHashMap<(u32, u32), (u32, u32)>> {
    let list = model.get("merges")?.as_array()?;
    let mut merges = FxHashMap::default();
    merges.reserve(list.len());
    for (rank, merge) in list.iter().enumerate() {
        let (left, right) = match merge {
            Value::String(s) => s.split_once(' ')?,
            Value::Array(pair) => (pair.first()?.as_str()?, pair.get(1)?.as_str()?),
            _ => return None,
        };
        let merged = ids.get(format!("{left}{right}").as_str())?;
        let key = (*ids.get(left)?, *ids.get(right)?);
        merges.entry(key).or_insert((u32::try_from(rank).ok()?, *merged));
    }
    Some(merges)
}

/// The added tokens of a vocabulary, found leftmost-longest in raw text as
/// Hugging Face's added vocabulary cuts them before anything else, each
/// with its id.
pub(super) struct Added {
    finder: AhoCorasick,
    /// Each pattern's token id.
    ids: Vec<u32>,
}

/// A stretch of text between added tokens, or an added token's id.
pub(super) enum Segment<'t> {
    Plain(&'t str),
    Token(u32),
}

impl Added {
    /// The segments of `text` in order: the stretches between added tokens
    /// (the last one always, even empty) and the added tokens' ids.
    pub(super) fn segments<'a, 't: 'a>(
        added: Option<&'a Added>,
        text: &'t str,
    ) -> impl Iterator<Item = Segment<'t>> + 'a {
        let mut found = added.map(|a| (a, a.finder.find_iter(text)));
        let mut at = 0;
        let mut pending: Option<u32> = None;
        let mut done = false;
        std::iter::from_fn(move || {
            if let Some(id) = pending.take() {
                return Some(Segment::Token(id));
            }
            if done {
                return None;
            }
            if let Some((a, it)) = found.as_mut()
                && let Some(m) = it.next()
            {
                let plain = &text[at..m.start()];
                at = m.end();
                // An id is always there (one per pattern); a missing one
                // would only skip the token.
                pending = a.ids.get(m.pattern().as_usize()).copied();
                return Some(Segment::Plain(plain));
            }
            done = true;
            Some(Segment::Plain(&text[at..]))
        })
    }
}

/// The added tokens of `json` (`None` inside when there are none). `None`
/// when one strips text around it, is matched on normalized text unless
/// `normalized_ok`, or overlaps one matched on the other kind of text (one
/// leftmost-longest pass here would cut it otherwise than `tokenizers`'
/// two).
pub(super) fn added_finder(json: &Value, normalized_ok: bool) -> Option<Option<Added>> {
    let (mut texts, mut ids, mut normalized) = (Vec::new(), Vec::new(), Vec::new());
    for t in json.get("added_tokens")?.as_array()? {
        let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
        if flag("lstrip")
            || flag("rstrip")
            || flag("single_word")
            || (!normalized_ok && flag("normalized") && !flag("special"))
        {
            return None;
        }
        texts.push(t.get("content")?.as_str()?.to_owned());
        ids.push(u32::try_from(t.get("id")?.as_u64()?).ok()?);
        normalized.push(flag("normalized"));
    }
    let of = |n: bool| {
        texts
            .iter()
            .zip(&normalized)
            .filter(|t| *t.1 == n)
            .map(|t| t.0.as_str())
            .collect::<Vec<_>>()
    };
    if normalized.contains(&true) && !one_pass_cuts_alike(&of(false), &of(true)) {
        return None;
    }
    if texts.is_empty() {
        return Some(None);
    }
    let finder = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&texts)
        .ok()?;
    Some(Some(Added { finder, ids }))
}

/// Merges `symbols` by `merges`, lowest rank first and leftmost on a tie
/// (Hugging Face's BPE without dropout), leaving the merged ids in
/// `symbols`, and returns how many are left.
/// Short runs scan their pairs; a long one (a megabyte of one letter is one
/// piece) keeps its pairs in a heap, so a run of `k` symbols costs
/// `k log k`, never `k²`.
pub(super) fn merge(symbols: &mut Vec<u32>, merges: &FxHashMap<(u32, u32), (u32, u32)>) -> usize {
    if symbols.len() > SHORT_RUN {
        merge_long(symbols, merges)
    } else {
        merge_scan(symbols, merges)
    }
}

/// [`merge`] of a short run: each step scans the pairs for the lowest.
fn merge_scan(symbols: &mut Vec<u32>, merges: &FxHashMap<(u32, u32), (u32, u32)>) -> usize {
    loop {
        let best = symbols
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| merges.get(&(w[0], w[1])).map(|&(rank, id)| (rank, i, id)))
            .min_by_key(|&(rank, i, _)| (rank, i));
        let Some((_, i, id)) = best else {
            return symbols.len();
        };
        symbols[i] = id;
        symbols.remove(i + 1);
    }
}

/// Runs longer than this are merged through a heap.
const SHORT_RUN: usize = 48;

/// [`merge`] of a long run: the symbols as a linked list in place, the
/// candidate pairs in a heap by (rank, position of the left symbol); a
/// popped pair that no longer stands (a side merged away, or the pair
/// changed) is skipped. Positions keep their order, so the leftmost pair of
/// a rank pops first, as the scan would choose it.
fn merge_long(symbols: &mut Vec<u32>, merges: &FxHashMap<(u32, u32), (u32, u32)>) -> usize {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // Positions as u32 (a run is at most a request's 4 MiB): the links and
    // the heap's entries take 12 bytes per symbol, not 24.
    const END: u32 = u32::MAX;
    let Ok(n) = u32::try_from(symbols.len()) else {
        return merge_scan(symbols, merges);
    };
    let at = |i: u32| i as usize;
    let mut next: Vec<u32> = (1..=n).map(|i| if i == n { END } else { i }).collect();
    let mut prev: Vec<u32> = (0..n).map(|i| i.checked_sub(1).unwrap_or(END)).collect();
    let mut left = symbols.len();
    let mut heap = BinaryHeap::new();
    let pair = |symbols: &[u32], i: u32, j: u32| merges.get(&(symbols[at(i)], symbols[at(j)])).copied();
    for i in 0..n.saturating_sub(1) {
        if let Some((rank, id)) = pair(symbols, i, i + 1) {
            heap.push(Reverse((rank, i, id)));
        }
    }
    while let Some(Reverse((rank, i, id))) = heap.pop() {
        let j = next[at(i)];
        // A merged-away symbol's next is END, so a stale entry for it stops
        // here, as does one whose pair has changed.
        if j == END || pair(symbols, i, j) != Some((rank, id)) {
            continue;
        }
        symbols[at(i)] = id;
        let after = next[at(j)];
        next[at(i)] = after;
        next[at(j)] = END;
        prev[at(j)] = END;
        if after != END {
            prev[at(after)] = i;
        }
        left -= 1;
        let before = prev[at(i)];
        if before != END
            && let Some((r, m)) = pair(symbols, before, i)
        {
            heap.push(Reverse((r, before, m)));
        }
        if after != END
            && let Some((r, m)) = pair(symbols, i, after)
        {
            heap.push(Reverse((r, i, m)));
        }
    }
    // The first symbol is never merged away (a merge keeps its left side):
    // the survivors are the list from it, moved to the front in order.
    let mut i = if n == 0 { END } else { 0 };
    let mut kept = 0;
    while i != END {
        symbols[kept] = symbols[at(i)];
        kept += 1;
        i = next[at(i)];
    }
    symbols.truncate(kept);
    debug_assert_eq!(kept, left);
    left
}

/// Whether the tokenizer `json` describes normalizes its text to NFC
/// (`Some(true)`) or not at all (`Some(false)`: no normalizer, or an empty
/// sequence of them); `None` for any other normalizer.
fn nfc_normalizer(json: &Value) -> Option<bool> {
    match json.get("normalizer") {
        None | Some(Value::Null) => Some(false),
        Some(n) => match n.get("type")?.as_str()? {
            "NFC" => Some(true),
            "Sequence" if n.get("normalizers")?.as_array()?.is_empty() => Some(false),
            _ => None,
        },
    }
}

/// What a piece that is itself a token is looked up in, under
/// `ignore_merges`: every token's bytes (the single-token probe) and its
/// id by its bytes, from `tokens` (bytes, id); both empty otherwise.
fn whole_tokens(tokens: &[(Vec<u8>, u32)], ignore_merges: bool) -> (Singles, ByBytes<u32>) {
    if ignore_merges {
        let singles = Singles::new(tokens.iter().map(|(b, _)| b.as_slice()));
        let mut whole = ByBytes::default();
        for (bytes, id) in tokens {
            whole.insert(bytes, *id);
        }
        (singles, whole)
    } else {
        (Singles::new(std::iter::empty()), ByBytes::default())
    }
}

impl FastCount {
    /// The fast count of the tokenizer `json` describes, when it is one
    /// this module reproduces: no normalizer or NFC; a pre-tokenizer that
    /// is cl100k's or Qwen's pattern split (isolated) then byte-level
    /// symbols without their own regex; a BPE model without dropout, byte
    /// fallback or subword affixes, whose tokens are byte-level symbols
    /// (every byte's among them) and whose merges make tokens; added tokens
    /// that strip nothing around them. `None` otherwise.
    pub(super) fn of(json: &Value) -> Option<FastCount> {
        let nfc = nfc_normalizer(json)?;
        let split = PreSplit::of(json.get("pre_tokenizer")?)?;
        let model = json.get("model")?;
        let unset = |k: &str| match model.get(k) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Bool(b)) => !b,
            _ => false,
        };
        if model.get("type")?.as_str()? != "BPE"
            || ![
                "dropout",
                "byte_fallback",
                "continuing_subword_prefix",
                "end_of_word_suffix",
            ]
            .into_iter()
            .all(unset)
        {
            return None;
        }
        let ignore_merges = model
            .get("ignore_merges")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let map = symbol_bytes();
        let vocab = model.get("vocab")?.as_object()?;
        let mut tokens: Vec<(Vec<u8>, u32)> = Vec::with_capacity(vocab.len());
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(vocab.len());
        let mut byte_ids = [u32::MAX; 256];
        for (text, id) in vocab {
            let id = u32::try_from(id.as_u64()?).ok()?;
            // A token that is not byte-level symbols (DeepSeek's special
            // tokens sit in its vocabulary) is never what bytes merge into.
            let Some(bytes) = text
                .chars()
                .map(|c| map.get(&c).copied())
                .collect::<Option<Vec<u8>>>()
            else {
                continue;
            };
            if let [b] = bytes.as_slice() {
                byte_ids[usize::from(*b)] = id;
            }
            ids.insert(text.as_str(), id);
            tokens.push((bytes, id));
        }
        if byte_ids.contains(&u32::MAX) {
            return None;
        }
        let merges = merge_table(model, &ids)?;
        let added = added_finder(json, !nfc)?;
        let (singles, whole) = whole_tokens(&tokens, ignore_merges);
        Some(FastCount {
            singles,
            whole,
            byte_ids,
            merges,
            added,
            split,
            nfc,
            ignore_merges,
        })
    }

    /// Tokens of `text`, as the reference encodes it without added special
    /// tokens; `None` where the reference must count (text NFC changes).
    pub(super) fn count(&self, text: &str) -> Option<usize> {
        let mut n = 0;
        let mut scratch = Vec::new();
        let mut memo: ByBytes<usize> = ByBytes::default();
        for segment in Added::segments(self.added.as_ref(), text) {
            let Segment::Plain(plain) = segment else {
                n += 1;
                continue;
            };
            for piece in self.pieces(plain)? {
                let bytes = piece.as_bytes();
                if self.ignore_merges && self.singles.contains(bytes) {
                    n += 1;
                    continue;
                }
                let key = Key::of(bytes);
                n += match memo.get(&key) {
                    Some(&k) => k,
                    None => {
                        let k = self.merged(bytes, &mut scratch).len();
                        memo.insert_key(key, k);
                        k
                    }
                };
            }
        }
        Some(n)
    }

    /// The ids of `text`, as the reference encodes it without added special
    /// tokens, appended to `out`; `None` (and `out` in any state) where the
    /// reference must encode (text NFC changes).
    pub(super) fn ids(&self, text: &str, out: &mut Vec<u32>) -> Option<()> {
        let mut scratch = Vec::new();
        // Each distinct piece's ids, as where they already stand in `out`.
        let mut memo: ByBytes<(u32, u32)> = ByBytes::default();
        for segment in Added::segments(self.added.as_ref(), text) {
            let plain = match segment {
                Segment::Plain(plain) => plain,
                Segment::Token(id) => {
                    out.push(id);
                    continue;
                }
            };
            for piece in self.pieces(plain)? {
                let bytes = piece.as_bytes();
                let key = Key::of(bytes);
                if self.ignore_merges
                    && let Some(&id) = self.whole.get(&key)
                {
                    out.push(id);
                } else if let Some(&(at, len)) = memo.get(&key) {
                    let (at, len) = (at as usize, len as usize);
                    if len == 1 {
                        out.push(out[at]);
                    } else {
                        out.extend_from_within(at..at + len);
                    }
                } else {
                    let ids = self.merged(bytes, &mut scratch);
                    // A text is at most a request's few MiB: positions fit.
                    let (at, len) = (saturating_u32(out.len()), saturating_u32(ids.len()));
                    memo.insert_key(key, (at, len));
                    out.extend_from_slice(ids);
                }
            }
        }
        Some(())
    }

    /// The pre-tokenizer's pieces of a text holding no added token, or
    /// `None` when normalizing would change it.
    fn pieces<'t>(&self, text: &'t str) -> Option<Pieces<'t>> {
        if self.nfc && !is_nfc(text) {
            return None;
        }
        self.split.pieces(text)
    }

    /// The ids the merge list makes of `piece`: its bytes' symbols, merged
    /// lowest rank first, leftmost on a tie (in `scratch`).
    fn merged<'s>(&self, piece: &[u8], scratch: &'s mut Vec<u32>) -> &'s [u32] {
        scratch.clear();
        scratch.extend(piece.iter().map(|&b| self.byte_ids[usize::from(b)]));
        merge(scratch, &self.merges);
        scratch
    }
}

/// A piece's bytes as a map key: up to 15 bytes packed with their length
/// in one integer (no slice hashed or compared), longer ones as the slice.
enum Key<'b> {
    Short(u128),
    Long(&'b [u8]),
}

impl<'b> Key<'b> {
    fn of(bytes: &'b [u8]) -> Key<'b> {
        if bytes.len() < 16 {
            let mut b = [0u8; 16];
            b[..bytes.len()].copy_from_slice(bytes);
            b[15] = bytes.len() as u8;
            Key::Short(u128::from_le_bytes(b))
        } else {
            Key::Long(bytes)
        }
    }
}

/// A map by byte strings, short ones by [`Key::Short`].
struct ByBytes<V> {
    short: FxHashMap<u128, V>,
    long: FxHashMap<Box<[u8]>, V>,
}

impl<V> Default for ByBytes<V> {
    fn default() -> Self {
        ByBytes {
            short: FxHashMap::default(),
            long: FxHashMap::default(),
        }
    }
}

impl<V> ByBytes<V> {
    fn insert(&mut self, bytes: &[u8], v: V) {
        self.insert_key(Key::of(bytes), v);
    }

    fn insert_key(&mut self, key: Key<'_>, v: V) {
        match key {
            Key::Short(k) => {
                self.short.insert(k, v);
            }
            Key::Long(b) => {
                self.long.insert(b.into(), v);
            }
        }
    }

    fn get(&self, key: &Key<'_>) -> Option<&V> {
        match key {
            Key::Short(k) => self.short.get(k),
            Key::Long(b) => self.long.get(*b),
        }
    }
}

/// Whether NFC leaves `text` as it is (ASCII always).
pub(super) fn is_nfc(text: &str) -> bool {
    text.is_ascii() || unicode_normalization::is_nfc(text)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The heap leaves the tokens the scan leaves, in order, on random
        /// merge tables over a small alphabet (many ties and chains).
        #[test]
        fn the_heap_merges_as_the_scan_does(
            run in prop::collection::vec(0u32..4, 0..300),
            table in prop::collection::vec((0u32..12, 0u32..12, 0u32..40, 0u32..12), 0..60),
        ) {
            let mut merges = FxHashMap::default();
            for (a, b, rank, id) in table {
                merges.entry((a, b)).or_insert((rank, id));
            }
            let (mut scanned, mut heaped) = (run.clone(), run);
            let n = merge_scan(&mut scanned, &merges);
            let m = merge_long(&mut heaped, &merges);
            prop_assert_eq!(n, m);
            prop_assert_eq!(scanned, heaped);
        }
    }

    /// A megabyte of one letter is one piece: merged through the heap it
    /// ends (the scan would take about 10^12 steps), with the count the
    /// doubling merges give.
    #[test]
    fn a_long_run_costs_k_log_k() {
        // "aa" -> 1, "11" -> 2, "22" -> 3, ...: doubling tokens.
        let mut merges = FxHashMap::default();
        for (rank, id) in (0u32..20).zip(1u32..) {
            merges.insert((id - 1, id - 1), (rank, id));
        }
        let mut run = vec![0u32; 1 << 20];
        assert_eq!(merge(&mut run, &merges), 1);
        let mut run = vec![0u32; (1 << 20) + 1];
        assert_eq!(merge(&mut run, &merges), 2);
        assert_eq!(run, [20, 0]);
    }
}
