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
use crate::vocab::Warning;

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
    let warnings: Vec<Value> = assembly
        .warnings
        .iter()
        .map(|w| warning(w, &assembly.decisions))
        .collect();
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

/// A warning with the block and items it is about: blocks named in its
/// message (quoted, as the pipeline writes them), items listed after
/// `dropped:`, the static prefix for `VOLATILE_PREFIX`.
fn warning(w: &Warning, decisions: &[BlockDecision]) -> Value {
    let blocks: Vec<&str> = decisions
        .iter()
        .map(|d| d.name.as_str())
        .filter(|name| w.message.contains(&format!("{name:?}")))
        .collect();
    let mut items: Vec<Value> = Vec::new();
    if let Some((_, list)) = w.message.rsplit_once("dropped: ") {
        let listed: HashSet<&str> = list.split(", ").collect();
        for d in decisions {
            for id in d
                .dropped_item_ids
                .iter()
                .filter(|id| listed.contains(id.as_str()))
            {
                items.push(json!({ "block": d.name, "id": id }));
            }
        }
    }
    json!({
        "code": w.code,
        "message": w.message,
        "blocks": blocks,
        "items": items,
        "staticPrefix": w.code == crate::vocab::codes::VOLATILE_PREFIX,
    })
}
