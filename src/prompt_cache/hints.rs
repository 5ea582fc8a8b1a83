//! Cache hints: what a gateway needs to make provider, engine and router
//! caches pay for the static prefix the sidecar has just made stable.

use super::prefix::PREFIX_VERSION;
use crate::prompt::{Breakpoint, BreakpointKind, CacheHints, Segment, SegmentKind};
use crate::tokens::{CacheSettings, digest};
use crate::vocab::saturating_u32;

/// Header that SGLang's gateway hashes for consistent routing.
pub const SGLANG_ROUTING_HEADER: &str = "X-SMG-Routing-Key";
/// Header that session-affinity routers (vLLM router, production stack) hash.
pub const SESSION_HEADER: &str = "x-session-id";
/// Hex characters of the prefix hash used in keys (128 bits).
const KEY_HEX: usize = 32;

/// What the hints are made from: plain facts of one assembled prompt.
#[derive(Debug, Clone, Copy)]
pub struct Prompt<'a> {
    /// The static segments: messages `0..n` of the prompt, in order.
    pub segments: &'a [Segment],
    /// The request's session id (may be empty).
    pub session_id: &'a str,
    /// Tool definitions sent with the prompt.
    pub tools: usize,
    /// The index of the last conversation turn among the messages.
    pub last_turn: Option<usize>,
    /// The static prefix hash (hex).
    pub prefix_hash: &'a str,
    /// Tokens of the static messages.
    pub prefix_tokens: u32,
    /// Tokens of the messages up to and including the last conversation
    /// turn (the static prefix alone when there is none): what stays
    /// byte-identical in the session's next request.
    pub stable_tokens: u32,
    /// Tokens of the tool definitions that precede them.
    pub tools_tokens: u32,
}

/// The hints for one assembled prompt under a model's cache settings.
pub fn of(cache: &CacheSettings, p: &Prompt<'_>) -> CacheHints {
    let Prompt {
        segments,
        session_id,
        tools,
        last_turn,
        prefix_hash,
        prefix_tokens,
        stable_tokens,
        tools_tokens,
    } = *p;
    let mut breakpoints = Vec::new();
    if tools > 0 {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfTools,
            index: saturating_u32(tools - 1),
        });
    }
    // Static messages are messages[0..n] in segment order.
    let last_of = |examples: bool| {
        segments
            .iter()
            .rposition(|s| (s.kind == SegmentKind::Examples) == examples)
    };
    let (system, examples) = (last_of(false), last_of(true));
    if let Some(i) = system {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfSystem,
            index: saturating_u32(i),
        });
    }
    if let Some(i) = examples.filter(|&e| system.is_none_or(|s| e > s)) {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::EndOfExamples,
            index: saturating_u32(i),
        });
    }
    // The conversation is append-only and cut at anchors that stay put (the
    // window): through its last turn it stays byte-identical in the next
    // request of the session, until the cut moves by a step.
    if let Some(i) = last_turn {
        breakpoints.push(Breakpoint {
            kind: BreakpointKind::LastStableMessage,
            index: saturating_u32(i),
        });
    }

    let short = &prefix_hash[..KEY_HEX.min(prefix_hash.len())];
    let shard = if cache.key_shards <= 1 || session_id.is_empty() {
        0
    } else {
        let h = digest::hash(session_id.as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&h.as_bytes()[..8]);
        u64::from_le_bytes(first) % u64::from(cache.key_shards)
    };
    let affinity_key = short.to_owned();
    let session = if session_id.is_empty() {
        affinity_key.clone()
    } else {
        session_id.to_owned()
    };
    let cacheable = prefix_tokens.saturating_add(tools_tokens);
    let block = cache.engine_block_tokens.max(1);
    CacheHints {
        prefix_version: PREFIX_VERSION.to_owned(),
        breakpoints,
        prompt_cache_key: format!("{short}-{shard}"),
        routing_headers: vec![
            (SGLANG_ROUTING_HEADER.to_owned(), affinity_key.clone()),
            (SESSION_HEADER.to_owned(), session),
        ],
        affinity_key,
        engine_cacheable_tokens: stable_tokens.max(prefix_tokens) / block * block,
        provider_minimum_tokens: cache.min_tokens,
        below_provider_minimum: cacheable < cache.min_tokens,
    }
}
