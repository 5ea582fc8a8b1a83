//! What an answer must be: the checks of a response against its request and
//! of a batch's groups against its results, the outcome of a failed call,
//! and what the reference recount samples.

use context_assembler::grpc::pb;
use tonic::Code;

use super::{Outcome, Rpc};

/// What the reference recount needs of an answer.
pub(super) fn sample(rpc: Rpc, resp: &pb::AssembleResponse) -> serde_json::Value {
    let usage = resp.usage.clone().unwrap_or_default();
    let messages: Vec<serde_json::Value> = resp
        .messages
        .iter()
        .map(|m| {
            let role = pb::Role::try_from(m.role).unwrap_or(pb::Role::Unspecified);
            serde_json::json!({"role": role.as_str_name(), "content": m.content})
        })
        .collect();
    serde_json::json!({
        "rpc": rpc.method(),
        "requestId": resp.request_id,
        "tokenizer": usage.tokenizer,
        "totalTokens": usage.total_tokens,
        "budget": usage.budget,
        "messages": messages,
    })
}

/// Checks a batch's groups and dispatch order against its results (`salts`:
/// each request's `cache_salt`): the groups partition the OK results by
/// (model, tokenizer, salt, prefix hash), one group per key, each with its
/// members ascending, its warm-up first, its prefix tokens and savings; the
/// order lists the groups' members group after group, in the groups' order.
pub(super) fn check_groups(answer: &pb::AssembleBatchResponse, salts: &[String]) -> Result<(), &'static str> {
    let ok: Vec<Option<&pb::AssembleResponse>> = answer
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::assemble_result::Result::Response(resp)) => Some(resp),
            _ => None,
        })
        .collect();
    let mut grouped = vec![false; ok.len()];
    let mut keys = std::collections::HashSet::new();
    let mut expected_order = Vec::with_capacity(ok.len());
    for g in &answer.groups {
        if !keys.insert((&g.model, &g.tokenizer, &g.cache_salt, &g.prefix_hash)) {
            return Err("two batch groups with one key");
        }
        if g.members.is_empty() || g.members.windows(2).any(|w| w[0] >= w[1]) {
            return Err("batch group members not ascending");
        }
        if g.warmup != g.members[0] {
            return Err("batch group warm-up not its first member");
        }
        if g.tokens_saved != u64::from(g.shared_prefix_tokens) * (g.members.len() as u64 - 1) {
            return Err("batch group tokens_saved");
        }
        for &m in &g.members {
            let m = m as usize;
            let Some(Some(resp)) = ok.get(m) else {
                return Err("batch group member is not an OK result");
            };
            if std::mem::replace(&mut grouped[m], true) {
                return Err("batch result in two groups");
            }
            let (usage, cache) = (
                resp.usage.clone().unwrap_or_default(),
                resp.cache.clone().unwrap_or_default(),
            );
            if resp.model != g.model
                || usage.tokenizer != g.tokenizer
                || salts.get(m) != Some(&g.cache_salt)
                || cache.prefix_hash != g.prefix_hash
            {
                return Err("batch group member with another key");
            }
            if cache.prefix_tokens != g.shared_prefix_tokens {
                return Err("batch group prefix tokens");
            }
        }
        expected_order.extend_from_slice(&g.members);
    }
    if grouped.iter().zip(&ok).any(|(&g, r)| g != r.is_some()) {
        return Err("batch OK result in no group");
    }
    if answer.order != expected_order {
        return Err("batch order not the groups' members in turn");
    }
    Ok(())
}

/// Checks an OK answer against the request it answers.
pub(super) fn check(resp: &pb::AssembleResponse, sent: &pb::AssembleRequest) -> Outcome {
    let Some(usage) = &resp.usage else {
        return Outcome::Malformed("missing usage");
    };
    if usage.total_tokens > sent.max_input_tokens.unwrap_or(usage.budget) {
        return Outcome::Malformed("over budget");
    }
    if resp.request_id != sent.request_id {
        return Outcome::Malformed("request_id mismatch");
    }
    if resp.messages.is_empty() {
        return Outcome::Malformed("no messages");
    }
    Outcome::Ok
}

/// The outcome of a failed call. tonic reports a deadline that passed on
/// the client side first (its own `grpc-timeout` timer) as CANCELLED
/// "Timeout expired"; it is the deadline, as the server would have said.
pub(super) fn failed(status: &tonic::Status) -> Outcome {
    let code =
        if status.code() == Code::Cancelled && status.message() == tonic::TimeoutExpired(()).to_string() {
            Code::DeadlineExceeded
        } else {
            status.code()
        };
    Outcome::Status(code, status.message().to_owned())
}
