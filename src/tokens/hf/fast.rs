//! The fast count of a model folder whose tokenizer is, piece for piece, one
//! this crate already counts fast: a byte-level BPE whose pre-tokenizer is
//! exactly cl100k's split pattern and whose merges are not needed for a
//! piece that is a token (Llama 3's `tokenizer.json`: OpenAI's pattern,
//! byte-level symbols, `ignore_merges`). Such a text is cut at its added
//! tokens (each one token, as Hugging Face's added vocabulary cuts them
//! first), the rest by [`pretok`]'s hand-written cl100k split; a piece that
//! is itself a token counts one ([`Singles`], one probe), any other is
//! merged by the folder's merge list, lowest rank first and leftmost on a
//! tie, which is Hugging Face's BPE without dropout. (Llama 3's vocabulary
//! is not rank-consistent the way tiktoken's are: some of its tokens are
//! not what BPE by token rank makes of their own bytes, so an encoder by
//! rank, such as the one under bpe-openai, cannot stand in for the merge
//! list.)
//!
//! Recognised only when the file says so (see [`FastCount::of`]), and then
//! trusted only after it agrees with Hugging Face's tokenizer on a sample of
//! awkward texts at load; otherwise the reference counts. The reference
//! cross-check against `transformers` (`tests/reference/hf_check.py`) runs
//! Llama 3.1's real folder through this path.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::tokens::Encoding;
use crate::tokens::pretok;
use crate::tokens::singles::Singles;

/// The split pattern of cl100k_base (and of Llama 3), as `tokenizer.json`
/// writes it.
const CL100K_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Texts the fast count must count as the reference does before it is
/// used: whitespace runs, digits, contractions, CJK, emoji, code, special
/// token text, combining marks.
pub(super) const SAMPLES: [&str; 16] = [
    "",
    "Hello, world! It's a test: don't panic.",
    "    indented\n\n\n\tcode();  \r\n  ",
    "1234567890 3.14159 1,000,000",
    "日本語のテキストと中文。한국어",
    "emoji 😀🎉👍🏽 and é (e\u{301}) and ﬁ",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "          many spaces           ",
    "\n\n\n\n\n\n\n\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "THE QUICK BROWN FOX'S JUMP'LL'VE'D",
    "<document id=\"x\">\ntext\n</document>\n",
    "\u{a0}\u{3000}\u{2028}mixed\u{85}spaces",
    "https://example.com/path?q=1&r=2#frag",
    "Ω≈ç√∫˜µ≤≥÷ ∑œ∑´®†¥¨ˆøπ“‘",
];

/// The fast count of one recognised folder.
pub(super) struct FastCount {
    /// Every token's bytes, for the single-token probe.
    singles: Singles,
    /// The token id of each byte's symbol.
    byte_ids: [u32; 256],
    /// (left id, right id) to (merge rank, merged id).
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// The added tokens' texts, found leftmost-longest.
    added: Option<AhoCorasick>,
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

/// The added tokens of `json` found leftmost-longest in raw text, as
/// Hugging Face's added vocabulary cuts them before anything else (`None`
/// inside when there are none). `None` when one strips text around it, or
/// (unless `normalized_ok`) is matched on normalized text.
pub(super) fn added_finder(json: &Value, normalized_ok: bool) -> Option<Option<AhoCorasick>> {
    let mut texts = Vec::new();
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
    }
    if texts.is_empty() {
        return Some(None);
    }
    let finder = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&texts)
        .ok()?;
    Some(Some(finder))
}

/// Merges `symbols` by `merges`, lowest rank first and leftmost on a tie
/// (Hugging Face's BPE without dropout), and returns how many are left.
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
fn merge_long(symbols: &mut [u32], merges: &FxHashMap<(u32, u32), (u32, u32)>) -> usize {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // Positions as u32 (a run is at most a request's 4 MiB): the links and
    // the heap's entries take 12 bytes per symbol, not 24.
    const END: u32 = u32::MAX;
    let Ok(n) = u32::try_from(symbols.len()) else {
        return merge_scan(&mut symbols.to_vec(), merges);
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
    left
}

impl FastCount {
    /// The fast count of the tokenizer `json` describes, when it is one
    /// this module reproduces: no normalizer; a pre-tokenizer that is
    /// cl100k's pattern split (isolated) then byte-level symbols without
    /// their own regex; a BPE model without dropout, byte fallback or
    /// subword affixes, with `ignore_merges`, whose tokens are byte-level
    /// symbols (every byte's among them) and whose merges make tokens;
    /// added tokens that strip nothing around them. `None` otherwise.
    pub(super) fn of(json: &Value) -> Option<FastCount> {
        let empty_normalizer = match json.get("normalizer") {
            None | Some(Value::Null) => true,
            Some(n) => n.get("type")?.as_str()? == "Sequence" && n.get("normalizers")?.as_array()?.is_empty(),
        };
        if !empty_normalizer {
            return None;
        }
        let pre = json.get("pre_tokenizer")?;
        let steps = match pre.get("type")?.as_str()? {
            "Sequence" => pre.get("pretokenizers")?.as_array()?.as_slice(),
            _ => return None,
        };
        let [split, byte_level] = steps else {
            return None;
        };
        let split_ok = split.get("type")?.as_str()? == "Split"
            && split.pointer("/pattern/Regex")?.as_str()? == CL100K_PATTERN
            && split.get("behavior")?.as_str()? == "Isolated"
            && !split.get("invert")?.as_bool()?;
        let byte_level_ok = byte_level.get("type")?.as_str()? == "ByteLevel"
            && !byte_level.get("use_regex")?.as_bool()?
            && !byte_level
                .get("add_prefix_space")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        if !split_ok || !byte_level_ok {
            return None;
        }
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
        // Without `ignore_merges`, a piece that is a token could still be
        // merged into others; the one-probe shortcut needs it set.
        if !model
            .get("ignore_merges")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            return None;
        }
        let map = symbol_bytes();
        let vocab = model.get("vocab")?.as_object()?;
        let mut tokens: Vec<Vec<u8>> = Vec::with_capacity(vocab.len());
        let mut ids: HashMap<&str, u32> = HashMap::with_capacity(vocab.len());
        let mut byte_ids = [u32::MAX; 256];
        for (text, id) in vocab {
            let id = u32::try_from(id.as_u64()?).ok()?;
            let bytes: Vec<u8> = text
                .chars()
                .map(|c| map.get(&c).copied())
                .collect::<Option<_>>()?;
            if let [b] = bytes.as_slice() {
                byte_ids[usize::from(*b)] = id;
            }
            ids.insert(text.as_str(), id);
            tokens.push(bytes);
        }
        if byte_ids.contains(&u32::MAX) {
            return None;
        }
        let merges = merge_table(model, &ids)?;
        let added = added_finder(json, true)?;
        // The split tables must build (they always do for this crate's
        // Unicode tables; if not, the reference counts).
        pretok::split(Encoding::Cl100kBase, "")?;
        let singles = Singles::new(tokens.iter().map(Vec::as_slice));
        Some(FastCount {
            singles,
            byte_ids,
            merges,
            added,
        })
    }

    /// Tokens the merge list makes of `piece` (not itself a token): its
    /// bytes' symbols, merged lowest rank first, leftmost on a tie.
    fn merged(&self, piece: &[u8]) -> usize {
        let mut symbols: Vec<u32> = piece.iter().map(|&b| self.byte_ids[usize::from(b)]).collect();
        merge(&mut symbols, &self.merges)
    }

    /// Tokens of `text`, as the reference encodes it without added special
    /// tokens (`None` only if the split tables are gone, which they never
    /// are once built).
    pub(super) fn count(&self, text: &str) -> Option<usize> {
        let Some(added) = &self.added else {
            return self.count_plain(text);
        };
        let mut n = 0;
        let mut at = 0;
        for m in added.find_iter(text) {
            n += self.count_plain(&text[at..m.start()])? + 1;
            at = m.end();
        }
        Some(n + self.count_plain(&text[at..])?)
    }

    /// Tokens of a text holding no added token.
    fn count_plain(&self, text: &str) -> Option<usize> {
        let pieces = pretok::split(Encoding::Cl100kBase, text)?;
        Some(
            pieces
                .map(|piece| {
                    let bytes = piece.as_bytes();
                    if self.singles.contains(bytes) {
                        1
                    } else {
                        self.merged(bytes)
                    }
                })
                .sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The heap leaves as many tokens as the scan does, on random merge
        /// tables over a small alphabet (many ties and chains).
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
    }
}
