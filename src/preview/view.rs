//! The page's answer for one assembly: the `AssembleResponse` as proto3 JSON
//! (what a gRPC client gets) and a `view` of it for drawing: one bar per
//! block, each item's outcome in block order, warnings pointed at their
//! block or items, the cacheable share, the cache plan in the provider's
//! own terms, the fingerprint and, when the page sent the previous one,
//! where the prompt diverges from it.
//!
//! Built from the assembly and its decision report; of the request only an
//! [`Outline`] is read: its block and item ids (their order) and the compact
//! forms of compacted items, which are kept text. No other request text is
//! read here, so a filtered item's content cannot reach the answer.
//!
//! The plan, the fingerprint and the divergence carry no text: field names
//! and JSON the planner writes, counts, hashes, and the id of a part of the
//! prompt (never a filtered item: it is in no prompt).
//!
//! Warnings are pointed at their blocks and items by the references the
//! pipeline gives them ([`Warning::about`]), never by reading their text:
//! each warning costs what it lists.

use std::collections::{HashMap, HashSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::assemble::{Assembler, CountTarget};
use crate::grpc::json::response_to_json;
use crate::prompt::{
    AssembleRequest, Assembly, BlockDecision, BreakpointKind, CachePlan, Divergence, MarkerTarget, Message,
};
use crate::vocab::{Warning, WarningRef, codes};

/// What the view reads of a request, taken before the request moves into
/// the assembler: per block, its item ids in order and the compact forms.
#[derive(Debug)]
pub(super) struct Outline {
    /// Per block of the request, its items as (id, compact form).
    blocks: Vec<Vec<(String, Option<String>)>>,
}

impl Outline {
    /// The outline of `request`.
    pub(super) fn of(request: &AssembleRequest) -> Self {
        Outline {
            blocks: request
                .blocks
                .iter()
                .map(|b| {
                    b.items
                        .iter()
                        .map(|i| (i.id.clone(), i.compact_form.clone()))
                        .collect()
                })
                .collect(),
        }
    }
}

/// The answer to `POST /api/assemble` for `assembly` of the request
/// `outline` was taken from, which took `micros` to assemble.
pub(super) fn answer(assembler: &Assembler, outline: &Outline, assembly: Assembly, micros: u64) -> Value {
    let counter = CountTarget::Model(assembly.model.clone());
    let count = |text: &str| assembler.count_tokens(&counter, text).map_or(0, |c| c.tokens);
    let blocks: Vec<Value> = assembly
        .decisions
        .iter()
        .zip(&outline.blocks)
        .enumerate()
        .map(|(index, (d, items))| {
            let compact: HashMap<&str, &str> = items
                .iter()
                .filter_map(|(id, form)| Some((id.as_str(), form.as_deref()?)))
                .collect();
            let ids = items.iter().map(|(id, _)| id.as_str());
            block(index, d, ids, |id| compact.get(id).map_or(0, |t| count(t)))
        })
        .collect();
    let warnings: Vec<Value> = assembly
        .warnings
        .iter()
        .map(|w| warning(&assembly.decisions, w))
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
        "cachePlan": cache_plan(&assembly.cache_plan, &assembly.messages),
        // As the response's `fingerprint` (proto3 JSON bytes): what the
        // page sends back as `previousFingerprint`.
        "fingerprint": BASE64.encode(&assembly.fingerprint),
        "divergence": assembly.divergence.as_deref().map(|d| divergence(d, &assembly.messages)),
    });
    json!({ "response": response_to_json(assembly), "view": view })
}

/// The role of message `index` of `messages`, if there is one.
fn role(messages: &[Message], index: u32) -> Option<&'static str> {
    let i = usize::try_from(index).ok()?;
    messages.get(i).map(|m| m.role.as_str())
}

/// The cache plan: per marker where it goes (a tool, or a message and its
/// role), the field to set, its lifetime, its prefix, and whether it takes
/// effect or why not.
fn cache_plan(plan: &CachePlan, messages: &[Message]) -> Value {
    let markers: Vec<Value> = plan
        .markers
        .iter()
        .map(|m| {
            let (target, index, role) = match m.target {
                MarkerTarget::Tool(i) => ("tool", i, None),
                MarkerTarget::Message(i) => ("message", i, role(messages, i)),
            };
            json!({
                "kind": breakpoint(m.kind),
                "target": target,
                "index": index,
                "role": role,
                "field": { "name": m.field.name, "json": m.field.json },
                "ttlSeconds": m.ttl_seconds,
                "prefixTokens": m.prefix_tokens,
                "effective": m.effective,
                "reason": m.reason.map(|r| r.as_str()),
            })
        })
        .collect();
    let fields: Vec<Value> = plan
        .request_fields
        .iter()
        .map(|f| json!({ "name": f.name, "json": f.json }))
        .collect();
    json!({
        "provider": plan.provider,
        "markers": markers,
        "requestFields": fields,
        "cacheableTokens": plan.cacheable_tokens,
    })
}

/// A stable lower-case name of a breakpoint kind.
fn breakpoint(k: BreakpointKind) -> &'static str {
    match k {
        BreakpointKind::EndOfTools => "end_of_tools",
        BreakpointKind::EndOfSystem => "end_of_system",
        BreakpointKind::EndOfExamples => "end_of_examples",
        BreakpointKind::LastStableMessage => "last_stable_message",
    }
}

/// Where the prompt first differs from the previous one: the change, the
/// part (its kind, its id, the message holding it and that message's role)
/// and the tokens before it, of which the provider can still serve some.
fn divergence(d: &Divergence, messages: &[Message]) -> Value {
    json!({
        "change": d.change.as_str(),
        "breaksPrefix": d.change.breaks_prefix(),
        "part": d.kind.map(|k| k.as_str()),
        "id": d.id,
        "messageIndex": d.message_index,
        "role": role(messages, d.message_index),
        "tokenOffset": d.token_offset,
        "servableTokens": d.servable_tokens,
    })
}

/// One block's bar and items. `ids` are the request's item ids in block
/// order; `compact_tokens` counts an item's compact form.
fn block<'a>(
    index: usize,
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
    // Both subsets of the kept ones: a tool result sent cleared (its
    // placeholder or compact form), an assistant turn sent without its
    // thinking.
    let (cleared, unthought) = (set(&d.cleared_item_ids), set(&d.thinking_dropped_item_ids));
    let mut seen: HashSet<&str> = HashSet::new();
    let mut items: Vec<Value> = Vec::new();
    for id in ids {
        seen.insert(id);
        let outcome = if filtered.contains(id) {
            "filtered"
        } else if compacted.contains(id) {
            "compacted"
        } else if cleared.contains(id) {
            "cleared"
        } else if unthought.contains(id) {
            "thinking-dropped"
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
        "index": index,
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
        // Offered but not sent: what dropping and cutting took, apart from
        // what clearing kept results' content saved.
        "cutTokens": d.tokens_offered.saturating_sub(d.tokens_kept).saturating_sub(d.tokens_cleared),
        "clearedTokens": d.tokens_cleared,
        "windowUnusedTokens": d.tokens_window_unused,
        "items": items,
    })
}

/// A warning with the blocks and items it is about (`decisions` are the
/// blocks in request order), and whether it is about the static prefix.
/// Linear in what the warning lists.
fn warning(decisions: &[BlockDecision], w: &Warning) -> Value {
    let name = |b: usize| decisions.get(b).map(|d| d.name.as_str());
    let mut blocks: Vec<Value> = Vec::new();
    let mut items: Vec<Value> = Vec::new();
    for r in &w.about {
        match r {
            WarningRef::Block(b) => {
                if let Some(n) = name(*b) {
                    blocks.push(json!({ "index": b, "name": n }));
                }
            }
            WarningRef::Item { block, id } => {
                if let Some(n) = name(*block) {
                    items.push(json!({ "blockIndex": block, "block": n, "id": id }));
                }
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
            cleared_item_ids: Vec::new(),
            thinking_dropped_item_ids: Vec::new(),
            tokens_cleared: 0,
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
        let gap = warning(
            &decisions,
            &Warning::new(codes::CHRONOLOGY_GAP, "block dropped: newer turns were cut")
                .with_about(vec![WarningRef::Block(1)]),
        );
        assert_eq!(gap["blocks"], json!([{"index": 1, "name": "his\"tory"}]));
        assert_eq!(gap["items"], json!([]));
        let item = |block: usize, id: &str| WarningRef::Item {
            block,
            id: id.to_owned(),
        };
        let orphan = warning(
            &decisions,
            &Warning::new(
                codes::ORPHAN_TOOL_RESULT,
                "tool result without its call, dropped: h2, r1",
            )
            .with_about(vec![item(0, "h2"), item(2, "r1")]),
        );
        assert_eq!(orphan["blocks"], json!([]));
        assert_eq!(
            orphan["items"],
            json!([
                {"blockIndex": 0, "block": "history", "id": "h2"},
                {"blockIndex": 2, "block": "recent", "id": "r1"}
            ])
        );
        let volatile = warning(&decisions, &Warning::new(codes::VOLATILE_PREFIX, "a timestamp"));
        assert_eq!(volatile["staticPrefix"], true);
        // The message is never read: a block named in it is not pointed at.
        let text = warning(
            &decisions,
            &Warning::new(codes::CHRONOLOGY_GAP, format!("block {:?} dropped", "history")),
        );
        assert_eq!(text["blocks"], json!([]));
    }

    /// The plan and the divergence as the page draws them: where each
    /// marker goes (a message's role, read from the messages), its field,
    /// and why it does not take effect; a divergence's words are the stable
    /// labels.
    #[test]
    fn the_plan_and_the_divergence_name_their_places() {
        use crate::prompt::{Change, Ineffective, Marker, PartKind, ProviderField};
        use crate::vocab::Role;
        let messages = vec![
            Message::text(Role::System, "s".to_owned()),
            Message::text(Role::User, "u".to_owned()),
        ];
        let field = ProviderField {
            name: "cache_control".to_owned(),
            json: r#"{"type":"ephemeral"}"#.to_owned(),
        };
        let plan = CachePlan {
            provider: "anthropic",
            markers: vec![
                Marker {
                    kind: BreakpointKind::EndOfTools,
                    target: MarkerTarget::Tool(2),
                    field: field.clone(),
                    ttl_seconds: Some(3600),
                    prefix_tokens: 900,
                    effective: true,
                    reason: None,
                },
                Marker {
                    kind: BreakpointKind::EndOfSystem,
                    target: MarkerTarget::Message(0),
                    field,
                    ttl_seconds: None,
                    prefix_tokens: 1000,
                    effective: false,
                    reason: Some(Ineffective::VolatileBefore),
                },
            ],
            request_fields: Vec::new(),
            cacheable_tokens: 900,
        };
        let v = cache_plan(&plan, &messages);
        assert_eq!(v["provider"], "anthropic");
        assert_eq!(v["cacheableTokens"], 900);
        assert_eq!(
            v["markers"][0],
            json!({"kind": "end_of_tools", "target": "tool", "index": 2, "role": null,
                   "field": {"name": "cache_control", "json": "{\"type\":\"ephemeral\"}"},
                   "ttlSeconds": 3600, "prefixTokens": 900, "effective": true, "reason": null})
        );
        assert_eq!(v["markers"][1]["role"], "system");
        assert_eq!(v["markers"][1]["reason"], "volatile_before");
        let d = Divergence {
            change: Change::SystemChanged,
            kind: Some(PartKind::System),
            id: "policy".to_owned(),
            message_index: 1,
            part_index: 3,
            token_offset: 20,
            servable_tokens: 0,
        };
        assert_eq!(
            divergence(&d, &messages),
            json!({"change": "system_changed", "breaksPrefix": true, "part": "system", "id": "policy",
                   "messageIndex": 1, "role": "user", "tokenOffset": 20, "servableTokens": 0})
        );
        // An index past the messages has no role rather than failing.
        assert_eq!(
            divergence(
                &Divergence {
                    message_index: 9,
                    ..d
                },
                &messages
            )["role"],
            Value::Null
        );
    }

    /// A result sent cleared and an assistant turn sent without its
    /// thinking are kept, and drawn as what was done to them; the tokens
    /// lightening saved are the block's.
    #[test]
    fn cleared_results_and_dropped_thinking_are_drawn_as_such() {
        let d = BlockDecision {
            outcome: Outcome::Kept,
            tokens_offered: 60,
            tokens_kept: 15,
            kept_item_ids: ["u", "a", "r"].map(str::to_owned).to_vec(),
            cleared_item_ids: vec!["r".to_owned()],
            thinking_dropped_item_ids: vec!["a".to_owned()],
            tokens_cleared: 40,
            ..decision("recent", &[])
        };
        let v = block(0, &d, ["u", "a", "r"].into_iter(), |_| 0);
        let outcomes: Vec<&str> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["kept", "thinking-dropped", "cleared"]);
        assert_eq!(v["clearedTokens"], 40);
        assert_eq!(v["cutTokens"], 5, "what clearing saved is not counted as cut");
    }

    /// The same id in many blocks: a warning about one of them points at
    /// that one only (ids are unique per block, not per request).
    #[test]
    fn a_warning_points_only_at_the_items_it_lists() {
        let decisions: Vec<BlockDecision> = (0..64).map(|b| decision(&format!("b{b}"), &["t"])).collect();
        let w = Warning::new(
            codes::ORPHAN_TOOL_RESULT,
            "tool result without its call, dropped: t",
        )
        .with_about(vec![WarningRef::Item {
            block: 5,
            id: "t".to_owned(),
        }]);
        assert_eq!(
            warning(&decisions, &w)["items"],
            json!([{"blockIndex": 5, "block": "b5", "id": "t"}])
        );
    }
}
