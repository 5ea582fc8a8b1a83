//! Wire <-> domain conversions. Decoding checks what only the wire can get
//! wrong (unknown enum values); the domain validates the rest.

use super::pb;
use crate::assemble::{self as domain, AssembleError};
use crate::prompt;
use crate::prompt::{Assembly, BlockKind, Outcome, SegmentKind};
use crate::prompt_cache;
use crate::tokens;
use crate::vocab;
use crate::vocab::{FieldViolation, Role};

/// Declares both directions of a domain <-> wire enum mapping from one list
/// of pairs; the wire's UNSPECIFIED value maps to `None`.
macro_rules! wire_enum {
    ($to:ident, $from:ident, $domain:ty, $wire:ty, { $($d:path => $w:path),+ $(,)? }) => {
        pub(super) fn $to(v: $domain) -> $wire {
            match v {
                $($d => $w,)+
            }
        }

        #[allow(dead_code)]
        fn $from(v: $wire) -> Option<$domain> {
            match v {
                $($w => Some($d),)+
                #[allow(unreachable_patterns)]
                _ => None,
            }
        }
    };
}

mod cache;
mod compact;
pub mod memory;

pub use compact::{items as compact_items, message_to_wire};

wire_enum!(role_to_wire, role_from_wire_enum, Role, pb::Role, {
    Role::System => pb::Role::System,
    Role::User => pb::Role::User,
    Role::Assistant => pb::Role::Assistant,
    Role::Tool => pb::Role::Tool,
});

wire_enum!(kind_to_wire, kind_from_wire_enum, BlockKind, pb::BlockKind, {
    BlockKind::State => pb::BlockKind::State,
    BlockKind::Evidence => pb::BlockKind::Evidence,
    BlockKind::Memory => pb::BlockKind::Memory,
    BlockKind::Summary => pb::BlockKind::Summary,
    BlockKind::RecentTurns => pb::BlockKind::RecentTurns,
    BlockKind::History => pb::BlockKind::History,
});

wire_enum!(segment_kind_to_wire, segment_kind_from_wire_enum, SegmentKind, pb::SegmentKind, {
    SegmentKind::System => pb::SegmentKind::System,
    SegmentKind::Policy => pb::SegmentKind::Policy,
    SegmentKind::OutputSchema => pb::SegmentKind::OutputSchema,
    SegmentKind::Examples => pb::SegmentKind::Examples,
});

wire_enum!(outcome_to_wire, outcome_from_wire_enum, Outcome, pb::Outcome, {
    Outcome::Kept => pb::Outcome::Kept,
    Outcome::Compacted => pb::Outcome::Compacted,
    Outcome::Truncated => pb::Outcome::Truncated,
    Outcome::Dropped => pb::Outcome::Dropped,
    Outcome::Filtered => pb::Outcome::Filtered,
});

/// A turn's role: `Err` for a value the wire does not define, `Ok(None)` when unset.
fn role_from_wire(v: i32) -> Result<Option<Role>, ()> {
    pb::Role::try_from(v).map(role_from_wire_enum).map_err(drop)
}

/// A thinking block off the wire.
fn thinking_from_wire(t: pb::Thinking) -> prompt::Thinking {
    prompt::Thinking {
        text: t.text,
        signature: t.signature,
        redacted: t.redacted,
    }
}

/// A thinking block onto the wire.
fn thinking_to_wire(t: prompt::Thinking) -> pb::Thinking {
    pb::Thinking {
        text: t.text,
        signature: t.signature,
        redacted: t.redacted,
    }
}

/// A block kind; `None` when unset or unknown (both invalid).
fn kind_from_wire(v: i32) -> Option<BlockKind> {
    pb::BlockKind::try_from(v).ok().and_then(kind_from_wire_enum)
}

/// A segment kind; unset means a system segment, `None` means unknown.
fn segment_kind_from_wire(v: i32) -> Option<SegmentKind> {
    match pb::SegmentKind::try_from(v).ok()? {
        pb::SegmentKind::Unspecified => Some(SegmentKind::System),
        w => segment_kind_from_wire_enum(w),
    }
}

impl TryFrom<pb::AssembleRequest> for prompt::AssembleRequest {
    type Error = AssembleError;

    fn try_from(r: pb::AssembleRequest) -> Result<Self, Self::Error> {
        let mut v = Vec::new();
        let static_segments = r
            .static_segments
            .into_iter()
            .enumerate()
            .map(|(i, s)| segment_from_wire(i, s, &mut v))
            .collect();
        let mut blocks = Vec::with_capacity(r.blocks.len());
        for (bi, b) in r.blocks.into_iter().enumerate() {
            blocks.push(block_from_wire(bi, b, &mut v));
        }
        if !v.is_empty() {
            return Err(AssembleError::InvalidArgument(v));
        }
        let principal = r.principal.unwrap_or_default();
        Ok(prompt::AssembleRequest {
            request_id: r.request_id,
            model: r.model,
            max_input_tokens: r.max_input_tokens,
            output_reserve: r.output_reserve,
            static_segments,
            blocks,
            query: r.query,
            principal: prompt::Principal {
                id: principal.id,
                scopes: principal.scopes,
            },
            session_id: r.session_id,
            policy: r.policy,
            tools: r.tools,
            cache_salt: r.cache_salt,
            prefix_family: r.prefix_family,
            return_token_ids: r.return_token_ids,
            previous_fingerprint: r.previous_fingerprint,
            cache_ttl: r.cache_ttl,
            // The contract's prompts always end with the query.
            no_query: false,
        })
    }
}

/// Static segment `i` off the wire; an unknown kind is a violation in `v`.
fn segment_from_wire(i: usize, s: pb::Segment, v: &mut Vec<FieldViolation>) -> prompt::Segment {
    prompt::Segment {
        kind: segment_kind_from_wire(s.kind).unwrap_or_else(|| {
            v.push(FieldViolation::new(
                format!("static_segments[{i}].kind"),
                "unknown segment kind",
            ));
            SegmentKind::System
        }),
        id: s.id,
        content: s.content,
    }
}

/// Block `bi` off the wire; an unknown kind or role is a violation in `v`.
fn block_from_wire(bi: usize, b: pb::Block, v: &mut Vec<FieldViolation>) -> prompt::Block {
    let kind = kind_from_wire(b.kind).unwrap_or_else(|| {
        v.push(FieldViolation::new(
            format!("blocks[{bi}].kind"),
            "required: a known block kind",
        ));
        BlockKind::Evidence
    });
    let items = b
        .items
        .into_iter()
        .enumerate()
        .map(|(ii, it)| item_from_wire(bi, ii, it, v))
        .collect();
    prompt::Block {
        name: b.name,
        kind,
        priority: b.priority,
        cuttable: b.cuttable,
        min_tokens: b.min_tokens,
        max_tokens: b.max_tokens,
        items,
    }
}

/// Item `ii` of block `bi` off the wire; an unknown role is a violation in
/// `v`.
fn item_from_wire(bi: usize, ii: usize, it: pb::Item, v: &mut Vec<FieldViolation>) -> prompt::Item {
    prompt::Item {
        role: role_from_wire(it.role).unwrap_or_else(|()| {
            v.push(FieldViolation::new(
                format!("blocks[{bi}].items[{ii}].role"),
                "unknown role",
            ));
            None
        }),
        id: it.id,
        content: it.content,
        score: it.score,
        source: it.source,
        trusted: it.trusted,
        required_scopes: it.required_scopes,
        tool_call_ids: it.tool_call_ids,
        tool_call_id: it.tool_call_id,
        compact_form: it.compact_form,
        tool_name: it.tool_name,
        thinking: it.thinking.into_iter().map(thinking_from_wire).collect(),
    }
}

impl From<Assembly> for pb::AssembleResponse {
    fn from(a: Assembly) -> Self {
        pb::AssembleResponse {
            request_id: a.request_id,
            model: a.model,
            tools: a.tools,
            token_ids: a.token_ids.map(|t| pb::TokenIds {
                ids: t.ids,
                block_keys: t.block_keys,
                block_tokens: t.block_tokens,
            }),
            hints: Some(hints_to_wire(a.hints)),
            messages: a
                .messages
                .into_iter()
                .map(|m| pb::Message {
                    role: role_to_wire(m.role).into(),
                    content: m.content,
                    tool_call_ids: m.tool_call_ids,
                    tool_call_id: m.tool_call_id,
                    thinking: m.thinking.into_iter().map(thinking_to_wire).collect(),
                })
                .collect(),
            usage: Some(pb::Usage {
                budget: a.usage.budget,
                total_tokens: a.usage.total_tokens,
                static_tokens: a.usage.static_tokens,
                dynamic_tokens: a.usage.dynamic_tokens,
                tokenizer: a.usage.tokenizer,
                exact: a.usage.exact,
                output_reserve: a.usage.output_reserve,
                context_window: a.usage.context_window,
                tools_tokens: a.usage.tools_tokens,
                tools_exact: a.usage.tools_exact,
                tokens_exact: a.usage.sources.exact,
                tokens_provider: a.usage.sources.provider,
                tokens_estimated: a.usage.sources.estimated,
            }),
            cache: Some(pb::CacheInfo {
                prefix_hash: a.cache.prefix_hash,
                prefix_tokens: a.cache.prefix_tokens,
                prefix_bytes: a.cache.prefix_bytes,
                prefix_message_count: a.cache.prefix_message_count,
                prefix_cache_hit: a.cache.prefix_cache_hit,
            }),
            decisions: a
                .decisions
                .into_iter()
                .map(|d| pb::BlockDecision {
                    name: d.name,
                    kind: kind_to_wire(d.kind).into(),
                    priority: d.priority,
                    outcome: outcome_to_wire(d.outcome).into(),
                    tokens_offered: d.tokens_offered,
                    tokens_offered_is_lower_bound: d.tokens_offered_is_lower_bound,
                    tokens_kept: d.tokens_kept,
                    kept_item_ids: d.kept_item_ids,
                    dropped_item_ids: d.dropped_item_ids,
                    filtered_item_ids: d.filtered_item_ids,
                    compacted_item_ids: d.compacted_item_ids,
                    reason: d.reason,
                    summarized_item_ids: d.summarized_item_ids,
                    tokens_window_unused: d.tokens_window_unused,
                    cleared_item_ids: d.cleared_item_ids,
                    thinking_dropped_item_ids: d.thinking_dropped_item_ids,
                    tokens_cleared: d.tokens_cleared,
                })
                .collect(),
            warnings: a.warnings.into_iter().map(warning_to_wire).collect(),
            recall: None,
            cache_plan: Some(cache::plan_to_wire(*a.cache_plan)),
            fingerprint: a.fingerprint,
            divergence: a.divergence.map(|d| cache::divergence_to_wire(*d)),
        }
    }
}

/// A warning on the wire.
fn warning_to_wire(w: vocab::Warning) -> pb::Warning {
    pb::Warning {
        code: w.code.to_owned(),
        message: w.message,
    }
}

/// The domain's count target from the wire's oneof.
pub fn count_target(
    t: Option<pb::count_tokens_request::Tokenizer>,
) -> Result<domain::CountTarget, AssembleError> {
    match t {
        Some(pb::count_tokens_request::Tokenizer::Model(m)) => Ok(domain::CountTarget::Model(m)),
        Some(pb::count_tokens_request::Tokenizer::Encoding(e)) => Ok(domain::CountTarget::Encoding(e)),
        None => Err(AssembleError::invalid("tokenizer", "set model or encoding")),
    }
}

/// The wire view of the model table.
pub fn model_infos(table: &tokens::ModelTable) -> pb::ListModelsResponse {
    pb::ListModelsResponse {
        models: table
            .entries()
            .iter()
            .map(|m| pb::ModelInfo {
                name: m.name.clone(),
                encoding: m
                    .tokenizer
                    .encoding()
                    .map(|e| e.name().to_owned())
                    .unwrap_or_default(),
                context_window: m.context_window,
                default_output_reserve: m.output_reserve,
                exact: m.tokenizer.is_exact(),
                estimate_margin_percent: m.tokenizer.margin_percent(),
                prefix: m.prefix,
                tokenizer: m.tokenizer.to_string(),
                chat_template: m.tokenizer.hf_model().is_some_and(|h| h.template().is_some()),
                tokenizer_generation: m.generation_label().unwrap_or_default().to_owned(),
            })
            .collect(),
    }
}

impl From<prompt::AssembleRequest> for pb::AssembleRequest {
    /// The wire form of a domain request (load generator, benches, tests).
    fn from(r: prompt::AssembleRequest) -> Self {
        pb::AssembleRequest {
            request_id: r.request_id,
            model: r.model,
            max_input_tokens: r.max_input_tokens,
            output_reserve: r.output_reserve,
            static_segments: r
                .static_segments
                .into_iter()
                .map(|s| pb::Segment {
                    id: s.id,
                    kind: segment_kind_to_wire(s.kind).into(),
                    content: s.content,
                })
                .collect(),
            blocks: r
                .blocks
                .into_iter()
                .map(|b| pb::Block {
                    name: b.name,
                    kind: kind_to_wire(b.kind).into(),
                    priority: b.priority,
                    cuttable: b.cuttable,
                    min_tokens: b.min_tokens,
                    max_tokens: b.max_tokens,
                    items: b
                        .items
                        .into_iter()
                        .map(|it| pb::Item {
                            id: it.id,
                            content: it.content,
                            score: it.score,
                            source: it.source,
                            trusted: it.trusted,
                            required_scopes: it.required_scopes,
                            role: it.role.map_or(pb::Role::Unspecified, role_to_wire).into(),
                            tool_call_ids: it.tool_call_ids,
                            tool_call_id: it.tool_call_id,
                            compact_form: it.compact_form,
                            tool_name: it.tool_name,
                            thinking: it.thinking.into_iter().map(thinking_to_wire).collect(),
                        })
                        .collect(),
                })
                .collect(),
            query: r.query,
            principal: Some(pb::Principal {
                id: r.principal.id,
                scopes: r.principal.scopes,
            }),
            session_id: r.session_id,
            policy: r.policy,
            tools: r.tools,
            cache_salt: r.cache_salt,
            prefix_family: r.prefix_family,
            recall: None,
            return_token_ids: r.return_token_ids,
            previous_fingerprint: r.previous_fingerprint,
            cache_ttl: r.cache_ttl,
        }
    }
}

/// A breakpoint's kind on the wire.
fn breakpoint_kind_to_wire(kind: prompt::BreakpointKind) -> pb::BreakpointKind {
    use prompt::BreakpointKind as K;
    match kind {
        K::EndOfTools => pb::BreakpointKind::EndOfTools,
        K::EndOfSystem => pb::BreakpointKind::EndOfSystem,
        K::EndOfExamples => pb::BreakpointKind::EndOfExamples,
        K::LastStableMessage => pb::BreakpointKind::LastStableMessage,
    }
}

fn hints_to_wire(h: prompt::CacheHints) -> pb::CacheHints {
    pb::CacheHints {
        prefix_version: h.prefix_version,
        breakpoints: h
            .breakpoints
            .into_iter()
            .map(|b| pb::Breakpoint {
                kind: breakpoint_kind_to_wire(b.kind).into(),
                index: b.index,
            })
            .collect(),
        prompt_cache_key: h.prompt_cache_key,
        affinity_key: h.affinity_key,
        routing_headers: h
            .routing_headers
            .into_iter()
            .map(|(name, value)| pb::RoutingHeader { name, value })
            .collect(),
        engine_cacheable_tokens: h.engine_cacheable_tokens,
        provider_minimum_tokens: h.provider_minimum_tokens,
        below_provider_minimum: h.below_provider_minimum,
    }
}

/// A batch's answer: its `results` in request order, and its groups and
/// dispatch order, whose positions count the requests that reached the
/// domain (`at[k]`: the request position of the domain's `k`th).
pub fn batch_response(
    results: Vec<pb::AssembleResult>,
    groups: Vec<prompt_cache::batch::Group>,
    order: &[usize],
    at: &[usize],
) -> pb::AssembleBatchResponse {
    let index = |k: usize| vocab::saturating_u32(at[k]);
    pb::AssembleBatchResponse {
        results,
        groups: groups
            .into_iter()
            .map(|g| pb::BatchGroup {
                model: g.model,
                tokenizer: g.tokenizer,
                cache_salt: g.cache_salt,
                prefix_hash: g.prefix_hash,
                members: g.members.iter().map(|&m| index(m)).collect(),
                warmup: index(g.warmup),
                shared_prefix_tokens: g.shared_prefix_tokens,
                tokens_saved: g.tokens_saved,
            })
            .collect(),
        order: order.iter().map(|&k| index(k)).collect(),
    }
}

/// A request's error as it travels inside a batch or stream answer.
pub fn request_error(status: &tonic::Status) -> pb::RequestError {
    pb::RequestError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        status_details: status.details().to_vec(),
    }
}

/// One request's outcome as a wire result (batches and streams).
pub fn wire_result(outcome: Result<pb::AssembleResponse, tonic::Status>) -> pb::AssembleResult {
    pb::AssembleResult {
        result: Some(match outcome {
            Ok(r) => pb::assemble_result::Result::Response(r),
            Err(s) => pb::assemble_result::Result::Error(request_error(&s)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, Shape};

    #[test]
    fn requests_survive_a_round_trip_through_the_wire() {
        let mut req = workload::request(Shape::new(2_000, 5), 3);
        req.blocks[4].items[1].tool_call_ids = vec!["c1".to_owned()];
        req.blocks[1].cuttable = Some(false);
        req.max_input_tokens = Some(1234);
        let back = prompt::AssembleRequest::try_from(pb::AssembleRequest::from(req.clone())).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn unknown_enum_values_are_field_violations() {
        let mut wire = pb::AssembleRequest::from(workload::request(Shape::new(1_000, 2), 1));
        wire.blocks[0].kind = 99;
        wire.blocks[4].items[0].role = 42;
        let Err(AssembleError::InvalidArgument(v)) = prompt::AssembleRequest::try_from(wire) else {
            panic!("accepted");
        };
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, vec!["blocks[0].kind", "blocks[4].items[0].role"]);
    }
}
