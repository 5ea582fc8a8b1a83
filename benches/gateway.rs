//! The gateway's reading of a provider body, side by side with its floor:
//! one validating scan of the same bytes (`serde_json` into `IgnoredAny`).
//! Chat Completions, Anthropic Messages and Responses bodies of about 8k
//! and 32k tokens of prose (45 and 175 KB), with tool calls and results.
//!
//!   cargo bench --bench gateway
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use context_assembler::gateway::{chat, messages, responses};
use context_assembler::workload::{self, Rng};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde::de::IgnoredAny;
use serde_json::json;

/// A conversation of about `bytes` of prose: alternating user and assistant
/// turns, every fifth assistant turn a tool call answered by a result.
fn turns(bytes: usize, seed: u64) -> Vec<(String, String)> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < bytes {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let text = workload::prose(&mut rng, if role == "user" { 300 } else { 1500 });
        total += text.len();
        out.push((role.to_owned(), text));
        i += 1;
    }
    out.push(("user".to_owned(), "And what follows from that?".to_owned()));
    out
}

fn chat_body(turns: &[(String, String)]) -> String {
    let mut messages = vec![json!({"role": "system", "content": "You are a careful assistant."})];
    for (i, (role, text)) in turns.iter().enumerate() {
        if role == "assistant" && i % 10 == 1 {
            let id = format!("call_{i}");
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"x\"}"}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
        } else {
            messages.push(json!({"role": role, "content": text}));
        }
    }
    json!({"model": "gpt-4o", "max_tokens": 1024, "messages": messages}).to_string()
}

fn messages_body(turns: &[(String, String)]) -> String {
    let mut messages = Vec::new();
    for (i, (role, text)) in turns.iter().enumerate() {
        if role == "assistant" && i % 10 == 1 {
            let id = format!("toolu_{i}");
            messages.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": id, "name": "search", "input": {"q": "x"}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": text}]}));
            messages.push(json!({"role": "assistant", "content": "Found it."}));
        } else {
            messages.push(json!({"role": role, "content": [{"type": "text", "text": text}]}));
        }
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You are a careful assistant.",
        "messages": messages})
    .to_string()
}

fn responses_body(turns: &[(String, String)]) -> String {
    let mut input = Vec::new();
    for (i, (role, text)) in turns.iter().enumerate() {
        if role == "assistant" && i % 10 == 1 {
            let id = format!("call_{i}");
            input.push(json!({"type": "function_call", "call_id": id, "name": "search", "arguments": "{}"}));
            input.push(json!({"type": "function_call_output", "call_id": id, "output": text}));
        } else {
            input.push(json!({"role": role, "content": text}));
        }
    }
    json!({"model": "gpt-4o", "instructions": "You are a careful assistant.", "input": input}).to_string()
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("gateway_parse");
    for (label, bytes) in [("8k", 40_000), ("32k", 160_000)] {
        let t = turns(bytes, 11);
        let bodies = [
            ("chat", chat_body(&t)),
            ("messages", messages_body(&t)),
            ("responses", responses_body(&t)),
        ];
        for (api, body) in &bodies {
            assert!(match *api {
                "chat" => chat::parse(body).is_ok(),
                "messages" => messages::parse(body).is_ok(),
                _ => responses::parse(body).is_ok(),
            });
            g.throughput(Throughput::Bytes(body.len() as u64));
            let id = format!("{api}/{label}");
            g.bench_function(BenchmarkId::new("one_scan", &id), |b| {
                b.iter(|| serde_json::from_str::<IgnoredAny>(black_box(body)).unwrap())
            });
            g.bench_function(BenchmarkId::new("parse", &id), |b| {
                b.iter(|| match *api {
                    "chat" => chat::parse(black_box(body)).map(|p| p.turns.len()),
                    "messages" => messages::parse(black_box(body)).map(|p| p.turns.len()),
                    _ => responses::parse(black_box(body)).map(|p| p.turns.len()),
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
