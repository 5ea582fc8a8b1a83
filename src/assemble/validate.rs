//! Request validation: every bad field is reported at once, by its proto path.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::policy::{Catalog, Policy};
use crate::prompt::{
    AssembleRequest, Block, Item, MAX_PRINCIPAL_SCOPES, MAX_SCOPES_PER_ITEM, MAX_THINKING_PER_MESSAGE,
    MAX_TOOL_CALL_IDS_PER_MESSAGE, MAX_TOOL_NAME_BYTES,
};
use crate::prompt_cache::tools;
use crate::tokens::ModelSpec;
use crate::tokens::models::UNKNOWN_MODEL;
use crate::vocab::{FieldViolation, Role};

/// The input budget and output reserve a valid request resolves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Input tokens available to the prompt.
    pub input: u32,
    /// Output tokens reserved.
    pub output_reserve: u32,
}

/// What an unknown policy name is told.
pub const UNKNOWN_POLICY: &str = "unknown policy: not in the configuration's [policies]";

/// A valid request's model, policy and budget.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The model table entry.
    pub spec: Arc<ModelSpec>,
    /// The policy.
    pub policy: Arc<Policy>,
    /// The budget.
    pub budget: Budget,
    /// The tool definitions as canonical JSON.
    pub tools: Vec<String>,
}

/// Checks `req` against the catalog. Returns the model, policy and budget,
/// or every violation found.
pub fn validate(req: &AssembleRequest, catalog: &Catalog) -> Result<Resolved, Vec<FieldViolation>> {
    let mut v = Vec::new();
    let model = model(&mut v, req, catalog);
    let tools = tools::canonicalize(&req.tools).unwrap_or_else(|bad| {
        v.extend(bad);
        Vec::new()
    });
    let policy = catalog.policy(&req.policy).cloned();
    if policy.is_none() {
        v.push(FieldViolation::new("policy", UNKNOWN_POLICY));
    }
    query(&mut v, req);
    cache_fields(&mut v, req, model.as_deref());
    // Without a model there is no window to budget (and no success).
    let budget = match model.as_deref() {
        Some(spec) => budget(&mut v, req, spec),
        None => Budget {
            input: 0,
            output_reserve: 0,
        },
    };
    if req.principal.scopes.len() > MAX_PRINCIPAL_SCOPES {
        v.push(FieldViolation::new(
            "principal.scopes",
            format!("at most {MAX_PRINCIPAL_SCOPES} scopes"),
        ));
    }
    blocks(&mut v, req);
    match (model, policy) {
        (Some(spec), Some(policy)) if v.is_empty() => Ok(Resolved {
            spec,
            policy,
            budget,
            tools,
        }),
        _ => Err(v),
    }
}

/// The model `req` names, if the catalog has it.
fn model(v: &mut Vec<FieldViolation>, req: &AssembleRequest, catalog: &Catalog) -> Option<Arc<ModelSpec>> {
    let model = catalog.models.resolve(&req.model).cloned();
    if req.model.is_empty() {
        v.push(FieldViolation::new("model", "required"));
    } else if model.is_none() {
        v.push(FieldViolation::new("model", UNKNOWN_MODEL));
    }
    model
}

/// The query: text, or nothing when the prompt ends with a turn.
fn query(v: &mut Vec<FieldViolation>, req: &AssembleRequest) {
    if req.no_query {
        if !req.query.is_empty() {
            v.push(FieldViolation::new(
                "query",
                "must be empty when the prompt ends with a turn",
            ));
        }
    } else if req.query.trim().is_empty() {
        v.push(FieldViolation::new(
            "query",
            "required: must contain non-whitespace text",
        ));
    }
}

/// The previous fingerprint, and the cache TTL against the model's
/// provider (when the model is known).
fn cache_fields(v: &mut Vec<FieldViolation>, req: &AssembleRequest, model: Option<&ModelSpec>) {
    if !req.previous_fingerprint.is_empty()
        && let Err(e) = crate::prompt_cache::fingerprint::check(&req.previous_fingerprint)
    {
        v.push(FieldViolation::new("previous_fingerprint", e.to_string()));
    }
    if let Some(spec) = model
        && let Err(e) = crate::prompt_cache::plan::check_ttl(&spec.cache.provider, &req.cache_ttl)
    {
        v.push(FieldViolation::new("cache_ttl", e.to_string()));
    }
}

/// The budget `req` asks of `spec`'s context window: the output reserve
/// (the model's unless given), and the input tokens (what the reserve
/// leaves unless given).
fn budget(v: &mut Vec<FieldViolation>, req: &AssembleRequest, spec: &ModelSpec) -> Budget {
    let window = spec.context_window;
    let reserve = req.output_reserve.unwrap_or(spec.output_reserve);
    if reserve >= window {
        v.push(FieldViolation::new(
            "output_reserve",
            format!("must be less than the context window ({window})"),
        ));
    }
    let input = match req.max_input_tokens {
        Some(0) => {
            v.push(FieldViolation::new("max_input_tokens", "must be positive"));
            0
        }
        Some(n) if req.output_reserve.is_some() && u64::from(n) + u64::from(reserve) > u64::from(window) => {
            v.push(FieldViolation::new(
                "max_input_tokens",
                format!("max_input_tokens + output_reserve exceed the context window ({window})"),
            ));
            n
        }
        Some(n) if n > window => {
            v.push(FieldViolation::new(
                "max_input_tokens",
                format!("exceeds the context window ({window})"),
            ));
            n
        }
        Some(n) => n,
        None => window.saturating_sub(reserve),
    };
    Budget {
        input,
        output_reserve: reserve,
    }
}

/// The blocks and their items: names and ids unique, limits consistent,
/// turns well formed, each tool call made once in the conversation.
fn blocks(v: &mut Vec<FieldViolation>, req: &AssembleRequest) {
    let mut names = HashSet::with_capacity_and_hasher(req.blocks.len(), Hasher::default());
    // Tool calls made anywhere in the conversation (its turns may span
    // blocks): providers refuse a call id made twice, and a result could not
    // say which call it answers.
    let mut calls: HashMap<&str, (usize, usize), Hasher> = HashMap::default();
    // One set of item ids, emptied per block, its room kept.
    let mut ids = HashSet::with_hasher(Hasher::default());
    for (bi, b) in req.blocks.iter().enumerate() {
        block(v, &mut names, bi, b);
        ids.clear();
        ids.reserve(b.items.len());
        for (ii, item) in b.items.iter().enumerate() {
            let at = ItemAt { block: bi, item: ii };
            item_fields(v, &mut ids, at, item);
            if !b.kind.is_turns() {
                not_a_turn(v, at, item);
                continue;
            }
            turn(v, at, item);
            tool_calls(v, &mut calls, at, item);
        }
    }
}

/// Block `bi`'s own fields: its name (unique), its token limits.
fn block<'r>(v: &mut Vec<FieldViolation>, names: &mut HashSet<&'r str, Hasher>, bi: usize, b: &'r Block) {
    let at = |f: &str| format!("blocks[{bi}].{f}");
    unique(v, names, &b.name, || at("name"), "duplicate block name");
    if let Some(max) = b.max_tokens() {
        if b.min_tokens > max {
            v.push(FieldViolation::new(at("min_tokens"), "greater than max_tokens"));
        }
        if !b.effective_cuttable() {
            v.push(FieldViolation::new(
                at("max_tokens"),
                "applies to cuttable blocks only",
            ));
        }
    }
}

/// The fields every item has: its id (unique in its block), score, scopes
/// and the number of tool calls.
fn item_fields<'r>(
    v: &mut Vec<FieldViolation>,
    ids: &mut HashSet<&'r str, Hasher>,
    at: ItemAt,
    item: &'r Item,
) {
    unique(v, ids, &item.id, || at.field("id"), "duplicate item id in block");
    if !item.score.is_finite() {
        v.push(FieldViolation::new(at.field("score"), "must be finite"));
    }
    if item.required_scopes.len() > MAX_SCOPES_PER_ITEM {
        v.push(FieldViolation::new(
            at.field("required_scopes"),
            format!("at most {MAX_SCOPES_PER_ITEM} scopes"),
        ));
    }
    if too_many_calls(item) {
        v.push(FieldViolation::new(
            at.field("tool_call_ids"),
            format!("at most {MAX_TOOL_CALL_IDS_PER_MESSAGE} tool calls"),
        ));
    }
}

/// An item of a block that is not conversation turns: no turn fields.
fn not_a_turn(v: &mut Vec<FieldViolation>, at: ItemAt, item: &Item) {
    if !item.tool_name.is_empty() {
        v.push(FieldViolation::new(
            at.field("tool_name"),
            "conversation turns only",
        ));
    }
    if !item.thinking.is_empty() {
        v.push(FieldViolation::new(
            at.field("thinking"),
            "conversation turns only",
        ));
    }
}

/// A conversation turn: its tool name, its thinking and its role.
fn turn(v: &mut Vec<FieldViolation>, at: ItemAt, item: &Item) {
    if item.tool_name.len() > MAX_TOOL_NAME_BYTES {
        v.push(FieldViolation::new(
            at.field("tool_name"),
            format!("at most {MAX_TOOL_NAME_BYTES} bytes"),
        ));
    }
    if !item.thinking.is_empty() && item.role != Some(Role::Assistant) {
        v.push(FieldViolation::new(
            at.field("thinking"),
            "only assistant turns think",
        ));
    }
    if item.thinking.len() > MAX_THINKING_PER_MESSAGE {
        v.push(FieldViolation::new(
            at.field("thinking"),
            format!("at most {MAX_THINKING_PER_MESSAGE} thinking blocks"),
        ));
    }
    match item.role {
        None => v.push(FieldViolation::new(
            at.field("role"),
            "required for conversation turns",
        )),
        Some(Role::Tool) if item.tool_call_id.is_empty() => {
            v.push(FieldViolation::new(
                at.field("tool_call_id"),
                "required for a tool result",
            ));
        }
        _ => {}
    }
}

/// A turn's tool calls: the calls it makes (an assistant's, each id new to
/// the conversation, remembered in `calls`) and the call it answers (a tool
/// result's).
fn tool_calls<'r>(
    v: &mut Vec<FieldViolation>,
    calls: &mut HashMap<&'r str, (usize, usize), Hasher>,
    at: ItemAt,
    item: &'r Item,
) {
    if !item.tool_call_ids.is_empty() && item.role != Some(Role::Assistant) {
        v.push(FieldViolation::new(
            at.field("tool_call_ids"),
            "only assistant turns make tool calls",
        ));
    }
    // Past the bound the ids are not checked one by one: one violation
    // (see `item_fields`), not one per duplicate.
    let checked = if too_many_calls(item) {
        &[][..]
    } else {
        &item.tool_call_ids[..]
    };
    for (ci, call) in checked.iter().enumerate() {
        if let Some(&(fb, fi)) = calls.get(call.as_str()) {
            v.push(FieldViolation::new(
                at.field(&format!("tool_call_ids[{ci}]")),
                format!("duplicate tool call id (first made in blocks[{fb}].items[{fi}])"),
            ));
        } else {
            calls.insert(call, (at.block, at.item));
        }
    }
    if !item.tool_call_id.is_empty() && item.role != Some(Role::Tool) {
        v.push(FieldViolation::new(
            at.field("tool_call_id"),
            "only tool results answer a call",
        ));
    }
}

/// Whether `item` makes more tool calls than a message may.
fn too_many_calls(item: &Item) -> bool {
    item.tool_call_ids.len() > MAX_TOOL_CALL_IDS_PER_MESSAGE
}

/// Where item `item` of block `block` is in the request: its fields'
/// violations name them by this path.
#[derive(Clone, Copy)]
struct ItemAt {
    block: usize,
    item: usize,
}

impl ItemAt {
    /// The proto path of the item's field `f`.
    fn field(self, f: &str) -> String {
        format!("blocks[{}].items[{}].{f}", self.block, self.item)
    }
}

/// Adds a violation of `field` when `value` is empty ("required") or already
/// in `seen` (`duplicate`); remembers it otherwise.
fn unique<'r>(
    v: &mut Vec<FieldViolation>,
    seen: &mut HashSet<&'r str, Hasher>,
    value: &'r str,
    field: impl FnOnce() -> String,
    duplicate: &str,
) {
    if value.is_empty() {
        v.push(FieldViolation::new(field(), "required"));
    } else if !seen.insert(value) {
        v.push(FieldViolation::new(field(), duplicate));
    }
}

/// The hasher of the sets of names and ids: foldhash seeded at random per
/// process (a caller who cannot predict the seed cannot aim ids at one
/// bucket), a fraction of SipHash's cost per short key.
type Hasher = foldhash::fast::RandomState;

#[cfg(test)]
mod tests;
