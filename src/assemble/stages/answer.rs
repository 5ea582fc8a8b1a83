//! Stage 4, answer: the laid-out messages moved out of the request, the
//! usage by where its counts came from, the prompt remembered for usage
//! reports, token ids when asked: the [`Assembly`].

use std::sync::Arc;
use std::time::Instant;

use super::super::layout;
use super::super::lighten;
use super::super::pipeline::RunOutput;
use super::Shared;
use super::account::Accounted;
use super::admit::Admitted;
use crate::prompt::{Assembly, Message, TokenIds};
use crate::prompt_cache::block_keys::block_keys;
use crate::prompt_cache::feedback::Remembered;
use crate::telemetry::metrics;
use crate::tokens::{ChatMessage, ModelSpec};
use crate::vocab::{Warning, codes};

/// The answer to `admitted`, fitted as `out` and accounted as `accounted`;
/// its render phase began at `render_started`.
pub(in crate::assemble) fn answer(
    shared: Shared<'_>,
    admitted: Admitted,
    out: RunOutput,
    accounted: Accounted,
    render_started: Instant,
) -> Assembly {
    let Admitted {
        req,
        spec,
        tools,
        tokenizer,
        ..
    } = admitted;
    let request_id = req.request_id.clone();
    let asked = req
        .return_token_ids
        .then(|| (req.model.clone(), req.cache_salt.clone()));
    let counted_for = shared
        .learning
        .counts(&spec)
        .then(|| Arc::from(req.model.as_str()));
    let messages = layout::materialize(out.plan, req);
    let mut usage = out.usage;
    let (sources, estimated) = shared.learning.sources(
        &spec,
        counted_for.as_deref().unwrap_or_default(),
        &tokenizer,
        &messages,
        (usage.total_tokens, usage.tools_tokens),
        &shared.caches.keys,
    );
    usage.sources = sources;
    usage.exact = usage.sources.estimated == 0;
    shared.feedback.remember(
        &request_id,
        Remembered {
            model: Arc::from(spec.name.as_str()),
            margin_percent: spec.tokenizer.margin_percent(),
            tokens: usage.total_tokens.saturating_add(usage.tools_tokens),
            expected_cached: accounted.expected_cached,
            prefix: accounted.prefix,
            estimated,
            counted_for,
        },
    );
    let s = usage.sources;
    metrics::prompt_tokens_by_source(&spec.name, s.exact, s.provider, s.estimated);
    let mut warnings = out.warnings;
    let token_ids = asked.and_then(|(model, salt)| {
        let ids = token_ids(&spec, &messages, &tools, &model, &salt);
        if ids.is_none() {
            warnings.push(Warning::new(
                codes::TOKEN_IDS_UNAVAILABLE,
                format!(
                    "token ids need a model folder with a chat template; {} counts with {}",
                    spec.name, spec.tokenizer
                ),
            ));
        }
        ids
    });
    let assembly = Assembly {
        request_id,
        model: spec.name.clone(),
        messages,
        usage,
        cache: out.cache,
        decisions: out.decisions,
        warnings,
        tools,
        hints: out.hints,
        token_ids,
        cache_plan: Box::new(accounted.plan),
        fingerprint: accounted.fingerprint,
        divergence: accounted.divergence.map(Box::new),
    };
    metrics::phase(metrics::PHASE_RENDER, render_started.elapsed());
    assembly
}

/// The prompt's ids as the engine computes them from `spec`'s folder (the
/// messages and tools rendered with its chat template, tokenized without
/// adding special tokens), with the engine's block keys for `model` (the
/// name as asked for, as a router knows it) and `salt`. `None` for a model
/// without a folder or a template, or a template that refuses.
fn token_ids(
    spec: &ModelSpec,
    messages: &[Message],
    tools: &[String],
    model: &str,
    salt: &str,
) -> Option<TokenIds> {
    let folder = spec.tokenizer.hf_model()?;
    let reasoning = reasonings(messages);
    let chat = chat_messages(messages, &reasoning);
    let tools: Vec<serde_json::Value> = tools
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    let tools = (!tools.is_empty()).then_some(tools.as_slice());
    let text = spec.tokenizer.rendered_text(&chat, tools)?.ok()?;
    let ids = folder.encode(&text, false).ok()?;
    let block_tokens = spec.cache.engine_block_tokens;
    Some(TokenIds {
        block_keys: block_keys(model, &ids, block_tokens as usize, salt),
        ids,
        block_tokens,
    })
}

/// Each assembled message's thinking as a chat template reads it.
pub(in crate::assemble) fn reasonings(messages: &[Message]) -> Vec<Option<String>> {
    messages
        .iter()
        .map(|m| lighten::readable_thinking(&m.thinking))
        .collect()
}

/// Assembled messages as a chat template reads them, with their thinking
/// (`reasoning`: [`reasonings`] of them).
pub(in crate::assemble) fn chat_messages<'m>(
    messages: &'m [Message],
    reasoning: &'m [Option<String>],
) -> Vec<ChatMessage<'m>> {
    messages
        .iter()
        .zip(reasoning)
        .map(|(m, r)| ChatMessage {
            role: m.role.as_str(),
            content: &m.content,
            reasoning: r.as_deref(),
        })
        .collect()
}
