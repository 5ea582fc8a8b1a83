//! Cache hints: what a gateway needs to make provider, engine and router
//! caches pay for the static prefix the sidecar has just made stable.

use super::layout::{Content, Plan};
use super::models::ModelSpec;
use super::render::PREFIX_VERSION;
use super::request::{AssembleRequest, SegmentKind};
use super::response::{Breakpoint, BreakpointKind, CacheHints};

/// Header that SGLang's gateway hashes for consistent routing.
pub const SGLANG_ROUTING_HEADER: &str = "X-SMG-Routing-Key";
/// Header that session-affinity routers (vLLM router, production stack) hash.
pub const SESSION_HEADER: &str = "x-session-id";
/// Hex characters of the prefix hash used in keys (128 bits).
const KEY_HEX: usize = 32;

/// The hints for one assembled prompt. `prefix_tokens` counts the static
/// messages; `tools_tokens` the tool definitions that precede them.
pub(crate) fn of(
    spec: &ModelSpec,
    req: &AssembleRequest,
    tools: usize,
    plan: &Plan,
    prefix_hash: &str,
    prefix_tokens: u32,
    tools_tokens: u32,
) -> CacheHints {
    let mut breakpoints = Vec::new();
    if tools > 0 {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfTools,
            index: u32::try_from(tools - 1).unwrap_or(u32::MAX),
        });
    }
    // Static messages are messages[0..n] in segment order.
    let last_of = |examples: bool| {
        req.static_segments
            .iter()
            .rposition(|s| (s.kind == SegmentKind::Examples) == examples)
    };
    let (system, examples) = (last_of(false), last_of(true));
    if let Some(i) = system {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfSystem,
            index: u32::try_from(i).unwrap_or(u32::MAX),
        });
    }
    if let Some(i) = examples.filter(|&e| system.is_none_or(|s| e > s)) {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfExamples,
            index: u32::try_from(i).unwrap_or(u32::MAX),
        });
    }
    // The conversation is append-only: its last turn stays byte-identical in
    // the next request of the session.
    if let Some(i) = plan.iter().rposition(|(_, c)| matches!(c, Content::Turn { .. })) {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::LastStableMessage,
            index: u32::try_from(i).unwrap_or(u32::MAX),
        });
    }

    let short = &prefix_hash[..KEY_HEX.min(prefix_hash.len())];
    let shard = if spec.cache.key_shards <= 1 || req.session_id.is_empty() {
        0
    } else {
        let h = blake3::hash(req.session_id.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&h.as_bytes()[..8]);
        u64::from_le_bytes(first) % u64::from(spec.cache.key_shards)
    };
    let affinity_key = short.to_owned();
    let session = if req.session_id.is_empty() {
        affinity_key.clone()
    } else {
        req.session_id.clone()
    };
    let cacheable = prefix_tokens.saturating_add(tools_tokens);
    let block = spec.cache.engine_block_tokens.max(1);
    CacheHints {
        prefix_version: PREFIX_VERSION.to_owned(),
        breakpoints,
        prompt_cache_key: format!("{short}-{shard}"),
        routing_headers: vec![
            (SGLANG_ROUTING_HEADER.to_owned(), affinity_key.clone()),
            (SESSION_HEADER.to_owned(), session),
        ],
        affinity_key,
        engine_cacheable_tokens: prefix_tokens / block * block,
        provider_minimum_tokens: spec.cache.min_tokens,
        below_provider_minimum: cacheable < spec.cache.min_tokens,
    }
}
