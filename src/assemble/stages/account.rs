//! Stage 3, account: what an assembled prompt tells about provider caches
//! beyond the hints, computed once per request from the run's parts: the
//! prompt's fingerprint, where it first differs from the session's previous
//! one (when the request sent that one's fingerprint), the cache plan in
//! the provider's own terms, and what the provider should serve from its
//! cache.

use super::super::error::AssembleError;
use super::super::layout::PartAt;
use super::super::pipeline::{PartFacts, RunOutput};
use super::super::policy::Catalog;
use super::Shared;
use super::admit::Admitted;
use crate::prompt::{self, AssembleRequest, Change, Divergence, PartKind};
use crate::prompt_cache::fingerprint::{self, Part};
use crate::prompt_cache::plan::{self, PlanMessage, PlanPart, PlanPrompt};
use crate::telemetry::metrics;
use crate::tokens::provider::ProviderRules;
use crate::vocab::{Role, saturating_u32};

/// A fitted prompt's account of provider caches.
pub(in crate::assemble) struct Accounted {
    /// The cache plan, as the answer carries it.
    pub plan: prompt::CachePlan,
    /// The prompt's fingerprint.
    pub fingerprint: Vec<u8>,
    /// Where it first differs from the previous prompt's, when the request
    /// sent that one's fingerprint.
    pub divergence: Option<Divergence>,
    /// The first bytes of the static prefix's key.
    pub prefix: [u8; 8],
    /// Tokens the provider should serve from its cache.
    pub expected_cached: u32,
}

/// Accounts for `out`, the prompt fitted for `admitted`; an invalid cache
/// lifetime or previous fingerprint is the caller's error.
pub(in crate::assemble) fn account(
    shared: Shared<'_>,
    catalog: &Catalog,
    admitted: &Admitted,
    out: &RunOutput,
) -> Result<Accounted, AssembleError> {
    let Admitted { req, spec, tools, .. } = admitted;
    let rules = &spec.cache.provider;
    let roles = out.plan.iter().map(|(role, _)| *role);
    let mut plan = cache_plan(rules, roles, &out.parts, tools.len(), &req.cache_ttl)?;
    let header = header(&spec.name, &out.usage.tokenizer, &req.cache_salt);
    let (fingerprint, mut divergence) = fingerprint(req, header, &out.parts)?;
    if let Some(d) = &mut divergence {
        let family = catalog
            .family_label(&req.prefix_family)
            .unwrap_or(metrics::FAMILY_NONE);
        metrics::prompt_cache_divergence(d.change.as_str(), family);
        d.servable_tokens = if d.change == Change::Appended {
            plan::after_append(rules, &mut plan, d.message_index, d.token_offset)
        } else {
            plan::servable(rules, d.token_offset, &plan)
        };
    }
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&admitted.key.digest[..8]);
    // What the provider should serve: what the previous prompt left it,
    // or, without one, the part of a prefix seen before that it can read;
    // nothing when this prefix was last assembled longer ago than the
    // entries it wrote live.
    let lifetime = lifetime(rules, &plan);
    let fresh = shared
        .feedback
        .seen(prefix, std::time::Instant::now())
        .is_some_and(|gap| gap <= lifetime);
    let expected_cached = match &divergence {
        _ if !fresh => 0,
        Some(d) => d.servable_tokens,
        None if out.cache.prefix_cache_hit => plan::servable(
            rules,
            out.usage.tools_tokens.saturating_add(out.usage.static_tokens),
            &plan,
        ),
        None => 0,
    };
    Ok(Accounted {
        plan: answer_plan(plan),
        fingerprint,
        divergence,
        prefix,
        expected_cached,
    })
}

/// The fingerprint header: the model-table entry, the tokenizer and the
/// cache salt, length-framed. Another of any of them is another prompt for
/// every cache.
fn header(model: &str, tokenizer: &str, salt: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for field in [model, tokenizer, salt] {
        h.update(&(field.len() as u64).to_le_bytes());
        h.update(field.as_bytes());
    }
    h.digest()
}

/// The id naming a part: its segment's or item's (tools, summary, query:
/// none).
fn id_of<'r>(req: &'r AssembleRequest, f: &PartFacts) -> &'r str {
    match (f.at, f.item) {
        (Some(PartAt::Static(i)), _) => req.static_segments.get(i).map_or("", |s| s.id.as_str()),
        (_, Some((b, i))) => req
            .blocks
            .get(b)
            .and_then(|block| block.items.get(i))
            .map_or("", |it| it.id.as_str()),
        _ => "",
    }
}

/// The fingerprint's view of the parts.
fn parts<'r>(req: &'r AssembleRequest, facts: &[PartFacts]) -> Vec<Part<'r>> {
    facts
        .iter()
        .map(|f| Part {
            kind: f.kind,
            id: id_of(req, f),
            hash: f.hash,
            tokens: f.tokens,
            message_index: f.message_index,
            volatile: f.volatile,
        })
        .collect()
}

/// The prompt's fingerprint and, when `req` sent the previous one, where
/// this prompt first differs from it (its `servable_tokens` left for the
/// plan to fill). A previous fingerprint that cannot be read is the
/// caller's error.
fn fingerprint(
    req: &AssembleRequest,
    header: u64,
    facts: &[PartFacts],
) -> Result<(Vec<u8>, Option<Divergence>), AssembleError> {
    let parts = parts(req, facts);
    let divergence = if req.previous_fingerprint.is_empty() {
        None
    } else {
        let d = fingerprint::diverge(&req.previous_fingerprint, header, &parts)
            .map_err(|e| AssembleError::invalid("previous_fingerprint", e.to_string()))?;
        Some(d)
    };
    Ok((fingerprint::fingerprint(header, &parts), divergence))
}

/// The plan's view of the messages (`roles`, in order): each message's
/// tokens are those of the parts it holds; a message holding none (a turn
/// unit's later messages, counted with its first) continues the part
/// before it.
fn plan_messages(roles: impl IntoIterator<Item = Role>, facts: &[PartFacts]) -> Vec<PlanMessage> {
    let mut at = facts.iter().filter(|f| f.kind != PartKind::Tools).peekable();
    let mut part = PlanPart::System;
    roles
        .into_iter()
        .enumerate()
        .map(|(i, role)| {
            let (mut tokens, mut volatile, mut first) = (0u32, false, None);
            while let Some(f) = at.next_if(|f| f.message_index as usize == i) {
                tokens = tokens.saturating_add(f.tokens);
                volatile |= f.volatile;
                first.get_or_insert(f.kind);
            }
            if let Some(kind) = first {
                part = match kind {
                    PartKind::Tools | PartKind::System => PlanPart::System,
                    PartKind::Examples => PlanPart::Examples,
                    PartKind::Summary => PlanPart::Summary,
                    PartKind::Turn => PlanPart::Turn,
                    PartKind::Evidence | PartKind::Memory | PartKind::State => PlanPart::Context,
                    PartKind::Query => PlanPart::Query,
                };
            }
            PlanMessage {
                role,
                tokens,
                part,
                volatile,
            }
        })
        .collect()
}

/// The cache plan of the prompt whose messages have `roles` and whose parts
/// are `facts`, under `rules`, with the lifetime `ttl` (empty: the
/// provider's default). A lifetime the provider does not offer is the
/// caller's error.
fn cache_plan(
    rules: &ProviderRules,
    roles: impl IntoIterator<Item = Role>,
    facts: &[PartFacts],
    tools: usize,
    ttl: &str,
) -> Result<plan::CachePlan, AssembleError> {
    let messages = plan_messages(roles, facts);
    let tools_tokens = facts
        .iter()
        .filter(|f| f.kind == PartKind::Tools)
        .fold(0u32, |a, f| a.saturating_add(f.tokens));
    plan::plan(
        rules,
        &PlanPrompt {
            tools: saturating_u32(tools),
            tools_tokens,
            messages: &messages,
            ttl: (!ttl.is_empty()).then_some(ttl),
        },
    )
    .map_err(|e| AssembleError::invalid("cache_ttl", e.to_string()))
}

/// How long the entries `plan` writes live: its longest effective
/// marker's lifetime, else the provider's default, else five minutes (the
/// shortest any provider keeps an idle entry).
fn lifetime(rules: &ProviderRules, plan: &plan::CachePlan) -> std::time::Duration {
    let secs = plan
        .markers
        .iter()
        .filter(|m| m.effective)
        .filter_map(|m| m.ttl)
        .max()
        .or(rules.default_ttl)
        .map_or(300, |t| t.secs());
    std::time::Duration::from_secs(u64::from(secs))
}

/// The plan as the answer carries it.
fn answer_plan(p: plan::CachePlan) -> prompt::CachePlan {
    prompt::CachePlan {
        provider: p.provider.as_str(),
        markers: p
            .markers
            .into_iter()
            .map(|m| prompt::Marker {
                kind: m.kind,
                target: m.target,
                field: m.field,
                ttl_seconds: m.ttl.map(|t| t.secs()),
                prefix_tokens: m.prefix_tokens,
                effective: m.effective,
                reason: m.reason,
            })
            .collect(),
        request_fields: p.request_fields,
        cacheable_tokens: p.cacheable_tokens,
    }
}

#[cfg(test)]
mod tests;
