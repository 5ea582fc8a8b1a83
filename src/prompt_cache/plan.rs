//! The cache plan: where a prompt's cache markers go in its provider's own
//! terms, and whether each takes effect.
//!
//! Pure: a prompt's shape (tokens per tool block and message, which parts are
//! static, which carry a volatile value) and a model's [`ProviderRules`] in,
//! a [`CachePlan`] out. The candidate places are the hints' breakpoints (end
//! of tools, end of system, end of examples, the last turn); each becomes a
//! [`Marker`] written as its provider writes it:
//!
//! | provider | marker | request fields |
//! |---|---|---|
//! | Anthropic | `cache_control` `{"type":"ephemeral"}`, `"ttl":"1h"` when not the default | none |
//! | Bedrock | a `cachePoint` block `{"type":"default"}` after the target, `"ttl"` likewise | none |
//! | OpenAI, explicit (GPT-5.6+) | `prompt_cache_breakpoint` `{"mode":"explicit"}` | `prompt_cache_options` `{"mode":"explicit","ttl":..}`, never `prompt_cache_retention` |
//! | OpenAI, implicit | none | `prompt_cache_retention` for a TTL other than the default |
//! | Gemini, engines | none | none: `cacheable_tokens` only |
//!
//! Decisions, each proven by a test in `plan/tests.rs`:
//!
//! - A marker is ineffective, in this order of blame, when a volatile
//!   message lies at or before its target ([`Ineffective::VolatileBefore`]:
//!   its prefix changes every request), when its prefix is below the
//!   minimum ([`Ineffective::BelowMinimum`]), or when more markers remain
//!   than the provider takes ([`Ineffective::OverBreakpointLimit`]). A
//!   gateway sends the `field` of every effective marker and of no other.
//! - The lookback (`lookback_blocks`, a tool or a message each) limits how
//!   far a marker searches for an entry an earlier request wrote, so only
//!   the session's previous prompt can tell when it is exceeded
//!   ([`after_append`]): the last turn's marker then says
//!   [`Ineffective::LookbackExceeded`] and stays effective (it writes the
//!   entry the next request reads).
//! - Over the limit, the last stable message's marker is kept first (it
//!   reads the longest prefix that recurs), then the static ones by length,
//!   longest first (a longer prefix reads more on a hit).
//! - The requested TTL (else the provider's default) is for the static
//!   markers, which outlive a conversation; the last turn's marker moves
//!   with every turn, so it takes the provider's default, whose writes cost
//!   least (Anthropic bills 1h writes 2x, 5m writes 1.25x). A longer entry
//!   may not follow a shorter one (Anthropic, Bedrock): such a marker is
//!   lowered to the shortest lifetime before it and reported with
//!   [`Ineffective::TtlOrder`] (it still takes effect). OpenAI's lifetime is
//!   per request: every marker has the requested one.
//! - A TTL the provider does not offer is the caller's error ([`PlanError`]).

use crate::prompt::BreakpointKind;
use crate::tokens::provider::{Provider, ProviderRules, Ttl, Ttls};
use crate::vocab::{Role, saturating_u32};

/// Longest part of an unknown TTL string an error repeats (it is request
/// input).
const MAX_ECHO_CHARS: usize = 32;

/// One message of the prompt, in prompt order, as the plan sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanMessage {
    /// Whose message it is.
    pub role: Role,
    /// Its tokens (with the chat formula's framing).
    pub tokens: u32,
    /// Which part of the assembled prompt it is.
    pub part: PlanPart,
    /// Whether it carries a value that changes between requests (a
    /// timestamp, a request id): nothing after it can be read from a cache.
    pub volatile: bool,
}

/// The part of an assembled prompt a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanPart {
    /// A static segment that is not examples (instructions).
    System,
    /// A static segment of examples.
    Examples,
    /// The summary message.
    Summary,
    /// A conversation turn.
    Turn,
    /// The context message (state, evidence, memory).
    Context,
    /// The query.
    Query,
}

impl PlanPart {
    /// Whether the part is a static segment.
    fn is_static(self) -> bool {
        matches!(self, PlanPart::System | PlanPart::Examples)
    }
}

/// What a plan is made from: one assembled prompt and the TTL asked for.
#[derive(Debug, Clone, Copy)]
pub struct PlanPrompt<'a> {
    /// Tool definitions sent with the prompt (rendered before every message).
    pub tools: u32,
    /// Their tokens.
    pub tools_tokens: u32,
    /// The messages, in prompt order.
    pub messages: &'a [PlanMessage],
    /// The cache lifetime asked for (`"5m"`, `"1h"`, ...); `None` or empty:
    /// the provider's default.
    pub ttl: Option<&'a str>,
}

pub use crate::prompt::{Ineffective, MarkerTarget, ProviderField};

/// A field named `name` whose value is `json`.
fn provider_field(name: &str, json: String) -> ProviderField {
    ProviderField {
        name: name.to_owned(),
        json,
    }
}

/// One cache marker of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Which breakpoint of the hints it is.
    pub kind: BreakpointKind,
    /// Where it goes.
    pub target: MarkerTarget,
    /// What to put there (sent only when `effective`).
    pub field: ProviderField,
    /// The lifetime of the entry it writes, if the provider offers a choice.
    pub ttl: Option<Ttl>,
    /// Tokens from the start of the prompt (tools first) through its target.
    pub prefix_tokens: u32,
    /// Whether it takes effect (its field is sent).
    pub effective: bool,
    /// Why it does not take effect, or, on an effective marker,
    /// [`Ineffective::TtlOrder`] when its lifetime was lowered.
    pub reason: Option<Ineffective>,
}

/// A prompt's cache plan under its provider's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachePlan {
    /// Whose rules.
    pub provider: Provider,
    /// The markers, in prompt order (none for implicit caches).
    pub markers: Vec<Marker>,
    /// Fields of the request itself.
    pub request_fields: Vec<ProviderField>,
    /// Tokens a repeat of the same prefix can read under the rules.
    pub cacheable_tokens: u32,
    /// Tokens of the whole prompt (tools and messages).
    pub prompt_tokens: u32,
}

/// A TTL request the plan refuses (the caller's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Not a lifetime (`5m`, `1h`, `30m`, `24h`, ...).
    #[error("cache ttl {0:?} is not a lifetime such as \"5m\" or \"1h\"")]
    UnknownTtl(String),
    /// A lifetime the provider does not offer.
    #[error("{provider} does not offer the cache ttl {ttl} (it offers: {offered})")]
    TtlNotOffered {
        /// The lifetime asked for.
        ttl: Ttl,
        /// The model's provider.
        provider: Provider,
        /// What it offers.
        offered: Ttls,
    },
}

/// Whether `rules`' provider offers the lifetime `asked` (empty: its
/// default): the request's check, before any work.
pub fn check_ttl(rules: &ProviderRules, asked: &str) -> Result<(), PlanError> {
    chosen_ttl(rules, (!asked.is_empty()).then_some(asked)).map(|_| ())
}

/// The lifetime a request gets: the one it asks for if offered, else the
/// provider's default.
fn chosen_ttl(rules: &ProviderRules, asked: Option<&str>) -> Result<Option<Ttl>, PlanError> {
    let Some(text) = asked.filter(|t| !t.is_empty()) else {
        return Ok(rules.default_ttl);
    };
    let ttl =
        Ttl::parse(text).ok_or_else(|| PlanError::UnknownTtl(text.chars().take(MAX_ECHO_CHARS).collect()))?;
    if rules.ttls.contains(ttl) {
        Ok(Some(ttl))
    } else {
        Err(PlanError::TtlNotOffered {
            ttl,
            provider: rules.provider,
            offered: rules.ttls,
        })
    }
}

/// A place a marker could go.
struct Candidate {
    kind: BreakpointKind,
    target: MarkerTarget,
    /// Tokens through the target.
    prefix: u64,
    /// Whether a volatile message lies at or before the target.
    volatile_before: bool,
}

/// The hints' breakpoints, in prompt order.
fn candidates(p: &PlanPrompt<'_>) -> Vec<Candidate> {
    let mut out = Vec::with_capacity(4);
    if p.tools > 0 {
        out.push(Candidate {
            kind: BreakpointKind::EndOfTools,
            target: MarkerTarget::Tool(p.tools - 1),
            prefix: u64::from(p.tools_tokens),
            volatile_before: false,
        });
    }
    // The static segments lead the messages.
    let statics = p.messages.iter().take_while(|m| m.part.is_static()).count();
    let last = |part: PlanPart| p.messages[..statics].iter().rposition(|m| m.part == part);
    let system = last(PlanPart::System);
    let examples = last(PlanPart::Examples).filter(|&e| system.is_none_or(|s| e > s));
    let turn = p.messages.iter().rposition(|m| m.part == PlanPart::Turn);
    let places = [
        (BreakpointKind::EndOfSystem, system),
        (BreakpointKind::EndOfExamples, examples),
        (BreakpointKind::LastStableMessage, turn),
    ];
    let (mut prefix, mut volatile, mut next) = (u64::from(p.tools_tokens), false, 0usize);
    for (kind, at) in places {
        let Some(i) = at else { continue };
        for m in &p.messages[next..=i] {
            prefix += u64::from(m.tokens);
            volatile |= m.volatile;
        }
        next = i + 1;
        out.push(Candidate {
            kind,
            target: MarkerTarget::Message(saturating_u32(i)),
            prefix,
            volatile_before: volatile,
        });
    }
    out
}

/// Which of `candidates` (each still eligible) the limit keeps: the last
/// stable message's first, then the static ones, longest prefix first.
fn within_limit(candidates: &[Candidate], eligible: &[bool], limit: u32) -> Vec<bool> {
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| eligible[i]).collect();
    order.sort_by_key(|&i| {
        let c = &candidates[i];
        (
            c.kind != BreakpointKind::LastStableMessage,
            std::cmp::Reverse(c.prefix),
        )
    });
    let mut kept = vec![false; candidates.len()];
    for &i in order.iter().take(usize::try_from(limit).unwrap_or(usize::MAX)) {
        kept[i] = true;
    }
    kept
}

/// The marker field of `rules`' provider for an entry of `ttl`.
fn marker_field(rules: &ProviderRules, ttl: Option<Ttl>) -> ProviderField {
    let ttl_member = match ttl {
        Some(t) if Some(t) != rules.default_ttl => format!(",\"ttl\":\"{t}\""),
        _ => String::new(),
    };
    match rules.provider {
        Provider::Bedrock => provider_field("cachePoint", format!("{{\"type\":\"default\"{ttl_member}}}")),
        Provider::OpenAi => provider_field("prompt_cache_breakpoint", "{\"mode\":\"explicit\"}".to_owned()),
        _ => provider_field("cache_control", format!("{{\"type\":\"ephemeral\"{ttl_member}}}")),
    }
}

/// The plan of prompt `p` under `rules`. Errors only for a TTL that is not
/// a lifetime or that the provider does not offer.
pub fn plan(rules: &ProviderRules, p: &PlanPrompt<'_>) -> Result<CachePlan, PlanError> {
    let ttl = chosen_ttl(rules, p.ttl)?;
    let candidates = candidates(p);
    let total = u64::from(p.tools_tokens) + p.messages.iter().map(|m| u64::from(m.tokens)).sum::<u64>();
    let prompt_tokens = saturating_u32(total);
    let limit = rules.marker_limit();
    if limit == 0 {
        return Ok(implicit(rules, p, &candidates, ttl, prompt_tokens));
    }
    let reasons = ineffective_reasons(rules, &candidates, limit);
    let markers = markers(rules, &candidates, reasons, ttl);
    let cacheable_tokens = markers
        .iter()
        .filter(|m| m.effective)
        .map(|m| m.prefix_tokens)
        .max()
        .unwrap_or(0);
    Ok(CachePlan {
        provider: rules.provider,
        markers,
        request_fields: explicit_request_fields(rules, ttl),
        cacheable_tokens,
        prompt_tokens,
    })
}

/// Why each of `candidates` would not take effect, before lifetimes are
/// ordered: a volatile message before it, a prefix below the minimum, or
/// (of those left) more than the `limit` of markers.
fn ineffective_reasons(
    rules: &ProviderRules,
    candidates: &[Candidate],
    limit: u32,
) -> Vec<Option<Ineffective>> {
    let min = u64::from(rules.min_tokens);
    let mut reasons: Vec<Option<Ineffective>> = candidates
        .iter()
        .map(|c| {
            if c.volatile_before {
                Some(Ineffective::VolatileBefore)
            } else if c.prefix < min {
                Some(Ineffective::BelowMinimum)
            } else {
                None
            }
        })
        .collect();
    let eligible: Vec<bool> = reasons.iter().map(Option::is_none).collect();
    let kept = within_limit(candidates, &eligible, limit);
    // Two markers of one prompt are two entries, each read where it is
    // written: how far apart they are does not matter. The lookback limits
    // how far a marker searches for an entry an *earlier request* wrote,
    // which only the session's previous prompt can tell ([`after_append`]).
    for (i, reason) in reasons.iter_mut().enumerate() {
        if reason.is_none() && !kept[i] {
            *reason = Some(Ineffective::OverBreakpointLimit);
        }
    }
    reasons
}

/// The markers of `candidates`, given why each is ineffective (`reasons`),
/// with their lifetimes: per marker (Anthropic, Bedrock: the last turn's
/// takes the default, and none outlives one before it) or per request
/// (OpenAI).
fn markers(
    rules: &ProviderRules,
    candidates: &[Candidate],
    reasons: Vec<Option<Ineffective>>,
    ttl: Option<Ttl>,
) -> Vec<Marker> {
    let per_marker = rules.provider != Provider::OpenAi;
    let mut shortest: Option<Ttl> = None;
    let mut markers = Vec::with_capacity(candidates.len());
    for (c, mut reason) in candidates.iter().zip(reasons) {
        let effective = reason.is_none();
        let mut marker_ttl = match c.kind {
            BreakpointKind::LastStableMessage if per_marker => rules.default_ttl.or(ttl),
            _ => ttl,
        };
        if effective && per_marker {
            if let (Some(t), Some(floor)) = (marker_ttl, shortest)
                && t > floor
            {
                marker_ttl = Some(floor);
                reason = Some(Ineffective::TtlOrder);
            }
            if let Some(t) = marker_ttl {
                shortest = Some(shortest.map_or(t, |s| s.min(t)));
            }
        }
        markers.push(Marker {
            kind: c.kind,
            target: c.target,
            field: marker_field(rules, marker_ttl),
            ttl: marker_ttl,
            prefix_tokens: saturating_u32(c.prefix),
            effective,
            reason,
        });
    }
    markers
}

/// The request fields of a plan with markers: OpenAI's explicit mode and
/// lifetime (per request); none for the others.
fn explicit_request_fields(rules: &ProviderRules, ttl: Option<Ttl>) -> Vec<ProviderField> {
    let mut request_fields = Vec::new();
    if rules.provider == Provider::OpenAi {
        let ttl_member = ttl.map(|t| format!(",\"ttl\":\"{t}\"")).unwrap_or_default();
        request_fields.push(provider_field(
            "prompt_cache_options",
            format!("{{\"mode\":\"explicit\"{ttl_member}}}"),
        ));
    }
    request_fields
}

/// The plan of an implicit cache: no markers; the stable prefix (through
/// the last breakpoint place, cut before the first volatile message) read
/// in the provider's steps.
fn implicit(
    rules: &ProviderRules,
    p: &PlanPrompt<'_>,
    candidates: &[Candidate],
    ttl: Option<Ttl>,
    prompt_tokens: u32,
) -> CachePlan {
    let end = candidates.last().map_or(0, |c| match c.target {
        MarkerTarget::Tool(_) => 0,
        MarkerTarget::Message(i) => usize::try_from(i).map_or(p.messages.len(), |i| i + 1),
    });
    let stable_messages = p.messages[..end]
        .iter()
        .take_while(|m| !m.volatile)
        .map(|m| u64::from(m.tokens))
        .sum::<u64>();
    let stable = saturating_u32(u64::from(p.tools_tokens) + stable_messages);
    let mut request_fields = Vec::new();
    if rules.provider == Provider::OpenAi
        && let Some(t) = ttl.filter(|&t| Some(t) != rules.default_ttl)
    {
        request_fields.push(provider_field("prompt_cache_retention", format!("\"{t}\"")));
    }
    CachePlan {
        provider: rules.provider,
        markers: Vec::new(),
        request_fields,
        cacheable_tokens: if rules.provider.caches_implicitly() {
            rules.implicit_hit(stable)
        } else {
            0
        },
        prompt_tokens,
    }
}

/// What the plan of a prompt that appends turns to the session's previous
/// one (the first new message at `first_new`, `common_tokens` shared) can
/// still read: the previous request's last-turn entry, which ends where the
/// prompts part, is found by this prompt's last-turn marker if no more than
/// the provider's lookback of blocks lie between them. If more do, that
/// marker is marked [`Ineffective::LookbackExceeded`] (it still writes, for
/// the next request: it stays effective) and only what [`servable`] finds
/// at this prompt's own markers counts. Returns the tokens servable.
pub fn after_append(rules: &ProviderRules, plan: &mut CachePlan, first_new: u32, common_tokens: u32) -> u32 {
    // The blocks from the first new message through the marked one.
    let within = |m: &Marker| match m.target {
        MarkerTarget::Message(i) => {
            let (last, first) = (u64::from(i), u64::from(first_new));
            (last + 1).saturating_sub(first) <= u64::from(rules.lookback_blocks)
        }
        MarkerTarget::Tool(_) => false,
    };
    let last_turn = plan
        .markers
        .iter_mut()
        .find(|m| m.kind == BreakpointKind::LastStableMessage && m.effective);
    match last_turn {
        Some(m) if (rules.lookback_blocks == 0 || within(m)) && common_tokens >= rules.min_tokens => {
            return common_tokens;
        }
        Some(m) if rules.lookback_blocks > 0 && !within(m) => m.reason = Some(Ineffective::LookbackExceeded),
        Some(_) => {}
        None => {}
    }
    servable(rules, common_tokens, plan)
}

/// Tokens a provider cache can still serve when the next prompt shares its
/// first `common_tokens` tokens with the one `plan` was made for: with
/// markers, the longest effective marker's prefix within the common part
/// (entries are read exactly at markers); implicitly, the common part of
/// the prompt in the provider's steps (0 below the minimum).
pub fn servable(rules: &ProviderRules, common_tokens: u32, plan: &CachePlan) -> u32 {
    if rules.marker_limit() == 0 {
        if !plan.provider.caches_implicitly() {
            return 0;
        }
        return rules.implicit_hit(common_tokens.min(plan.prompt_tokens));
    }
    plan.markers
        .iter()
        .filter(|m| m.effective && m.prefix_tokens <= common_tokens)
        .map(|m| m.prefix_tokens)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
