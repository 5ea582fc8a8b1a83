//! The page's answer for one assembly: the `AssembleResponse` as proto3 JSON
//! (what a gRPC client gets) and a `view` of it for drawing: one bar per
//! block, each item's outcome in block order, warnings pointed at their
//! block or items, the cacheable share.
//!
//! Built from the assembly and its decision report; the request is read for
//! its block and item ids (their order) and for the compact forms of
//! compacted items, which are kept text. No other request text is read here,
//! so a filtered item's content cannot reach the answer.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::assemble::{Assembler, CountTarget};
use crate::grpc::json::response_to_json;
use crate::prompt::{AssembleRequest, Assembly, BlockDecision};
use crate::vocab::{Warning, codes};

/// The answer to `POST /api/assemble` for `assembly` of `request`, which
/// took `micros` to assemble.
pub(super) fn answer(
    assembler: &Assembler,
    request: &AssembleRequest,
    assembly: Assembly,
    micros: u64,
) -> Value {
    let counter = CountTarget::Model(assembly.model.clone());
    let count = |text: &str| assembler.count_tokens(&counter, text).map_or(0, |c| c.tokens);
    let blocks: Vec<Value> = assembly
        .decisions
        .iter()
        .zip(&request.blocks)
        .map(|(d, b)| {
            let compact: HashMap<&str, &str> = b
                .items
                .iter()
                .filter_map(|i| Some((i.id.as_str(), i.compact_form.as_deref()?)))
                .collect();
            let ids = b.items.iter().map(|i| i.id.as_str());
            block(d, ids, |id| compact.get(id).map_or(0, |t| count(t)))
        })
        .collect();
    let pointers = Pointers::new(&assembly.decisions);
    let warnings: Vec<Value> = assembly.warnings.iter().map(|w| pointers.warning(w)).collect();
    let u = &assembly.usage;
    let c = &assembly.cache;
    // What a provider can serve from its prompt cache on the next request
    // with this prefix: tools and static prefix, unless below its minimum.
    let cacheable = if assembly.hints.below_provider_minimum {
        0
    } else {
        u.tools_tokens.saturating_add(c.prefix_tokens)
    };
    let whole = u.total_tokens.saturating_add(u.tools_tokens);
    let share = if whole == 0 {
        0.0
    } else {
        f64::from(cacheable) / f64::from(whole)
    };
    let view = json!({
        "blocks": blocks,
        "warnings": warnings,
        "cacheableTokens": cacheable,
        "promptTokens": whole,
        "cacheableShare": share,
        "staticMessages": c.prefix_message_count,
        "assembleMicros": micros,
    });
    json!({ "response": response_to_json(assembly), "view": view })
}

/// One block's bar and items. `ids` are the request's item ids in block
/// order; `compact_tokens` counts an item's compact form.
fn block<'a>(
    d: &'a BlockDecision,
    ids: impl Iterator<Item = &'a str>,
    compact_tokens: impl Fn(&str) -> u32,
) -> Value {
    let set = |v: &'a [String]| -> HashSet<&'a str> { v.iter().map(String::as_str).collect() };
    let (filtered, compacted, kept) = (
        set(&d.filtered_item_ids),
        set(&d.compacted_item_ids),
        set(&d.kept_item_ids),
    );
    let (summarized, dropped) = (set(&d.summarized_item_ids), set(&d.dropped_item_ids));
    let mut seen: HashSet<&str> = HashSet::new();
    let mut items: Vec<Value> = Vec::new();
    for id in ids {
        seen.insert(id);
        let outcome = if filtered.contains(id) {
            "filtered"
        } else if compacted.contains(id) {
            "compacted"
        } else if kept.contains(id) {
            "kept"
        } else if summarized.contains(id) {
            "summarized"
        } else if dropped.contains(id) {
            "dropped"
        } else {
            // Not a candidate: e.g. an empty item.
            "unused"
        };
        items.push(json!({ "id": id, "outcome": outcome }));
    }
    // Kept items the request did not hold (a generated turn summary).
    for id in d.kept_item_ids.iter().filter(|id| !seen.contains(id.as_str())) {
        items.push(json!({ "id": id, "outcome": "generated" }));
    }
    let compacted_tokens: u32 = d
        .compacted_item_ids
        .iter()
        .map(|id| compact_tokens(id))
        .fold(0, u32::saturating_add)
        .min(d.tokens_kept);
    json!({
        "name": d.name,
        "kind": d.kind.as_str(),
        "priority": d.priority,
        "outcome": d.outcome.as_str(),
        "reason": d.reason,
        "offeredTokens": d.tokens_offered,
        "offeredIsLowerBound": d.tokens_offered_is_lower_bound,
        "keptTokens": d.tokens_kept,
        "keptFullTokens": d.tokens_kept - compacted_tokens,
        "compactedTokens": compacted_tokens,
        "cutTokens": d.tokens_offered.saturating_sub(d.tokens_kept),
        "windowUnusedTokens": d.tokens_window_unused,
        "items": items,
    })
}

/// What a warning may point at: block names as the pipeline quotes them,
/// and dropped items by id. Built once per answer, so pointing costs each
/// warning its own length, not a product with the blocks or items (a
/// request of many broken tool calls has as many warnings).
struct Pointers<'a> {
    /// `"name"` (Rust debug quoting, as in `block "name" dropped`) to name.
    blocks: HashMap<String, &'a str>,
    /// A dropped item's id to the blocks it was dropped from.
    dropped: HashMap<&'a str, Vec<&'a str>>,
}

impl<'a> Pointers<'a> {
    fn new(decisions: &'a [BlockDecision]) -> Self {
        let mut dropped: HashMap<&str, Vec<&str>> = HashMap::new();
        for d in decisions {
            for id in &d.dropped_item_ids {
                dropped.entry(id.as_str()).or_default().push(d.name.as_str());
            }
        }
        Pointers {
            blocks: decisions
                .iter()
                .map(|d| (format!("{:?}", d.name), d.name.as_str()))
                .collect(),
            dropped,
        }
    }

    /// A warning with the block and items it is about: the block a
    /// `block "NAME" ...` message names, the items a tool-call warning lists
    /// after `dropped: `, the static prefix for `VOLATILE_PREFIX`.
    fn warning(&self, w: &Warning) -> Value {
        let mut blocks: Vec<&str> = Vec::new();
        if let Some(rest) = w.message.strip_prefix("block ") {
            // The quoted name ends at one of the quotes after the first.
            let ends = rest.char_indices().skip(1).filter(|&(_, c)| c == '"');
            if let Some(name) = ends.filter_map(|(at, _)| self.blocks.get(&rest[..=at])).next() {
                blocks.push(name);
            }
        }
        let mut items: Vec<Value> = Vec::new();
        let tool_call = matches!(w.code, codes::ORPHAN_TOOL_RESULT | codes::INCOMPLETE_TOOL_CALL);
        if let Some((_, list)) = w.message.rsplit_once("dropped: ").filter(|_| tool_call) {
            for id in list.split(", ") {
                for block in self.dropped.get(id).into_iter().flatten() {
                    items.push(json!({ "block": block, "id": id }));
                }
            }
        }
        json!({
            "code": w.code,
            "message": w.message,
            "blocks": blocks,
            "items": items,
            "staticPrefix": w.code == codes::VOLATILE_PREFIX,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::{BlockKind, Outcome};

    fn decision(name: &str, dropped: &[&str]) -> BlockDecision {
        BlockDecision {
            name: name.to_owned(),
            kind: BlockKind::History,
            priority: 9,
            outcome: Outcome::Dropped,
            tokens_offered: 10,
            tokens_offered_is_lower_bound: false,
            tokens_kept: 0,
            kept_item_ids: Vec::new(),
            dropped_item_ids: dropped.iter().map(|s| (*s).to_owned()).collect(),
            filtered_item_ids: Vec::new(),
            compacted_item_ids: Vec::new(),
            summarized_item_ids: Vec::new(),
            tokens_window_unused: 0,
            reason: String::new(),
        }
    }

    #[test]
    fn warnings_point_at_their_block_or_items() {
        let decisions = [
            decision("history", &["h1", "h2"]),
            decision("his\"tory", &[]),
            decision("recent", &["r1"]),
        ];
        let p = Pointers::new(&decisions);
        let gap = p.warning(&Warning::new(
            codes::CHRONOLOGY_GAP,
            format!("block {:?} dropped: newer turns were cut", "his\"tory"),
        ));
        assert_eq!(gap["blocks"], json!(["his\"tory"]));
        assert_eq!(gap["items"], json!([]));
        let orphan = p.warning(&Warning::new(
            codes::ORPHAN_TOOL_RESULT,
            "tool result without its call, dropped: h2, r1",
        ));
        assert_eq!(orphan["blocks"], json!([]));
        assert_eq!(
            orphan["items"],
            json!([{"block": "history", "id": "h2"}, {"block": "recent", "id": "r1"}])
        );
        let volatile = p.warning(&Warning::new(codes::VOLATILE_PREFIX, "a timestamp"));
        assert_eq!(volatile["staticPrefix"], true);
    }
}
