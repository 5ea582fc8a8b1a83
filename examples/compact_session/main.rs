//! Conversation compaction end to end, through the domain API (no gRPC).
//!
//! Generates a deterministic 200-message coding-agent session: a system
//! prompt, user requests, assistant plans naming pending work, calls to
//! `read_file`, `bash`, `edit_file` and `grep` (some two at a time, answered
//! by two tool messages) and their multi-line results. Then it shows:
//!
//! 1. a compaction past the trigger: the summary that replaces the older
//!    messages, what it covers, and its token count checked by a recount;
//! 2. a re-compaction 40 messages later, which merges the earlier summary
//!    instead of nesting it, so the summary stays bounded;
//! 3. the per-session circuit breaker: a target that cannot be met fails
//!    three times, and the fourth request is trimmed instead of compacted;
//! 4. the emergency trim after a provider refused the conversation as too
//!    long.
//!
//! ```text
//! cargo run --release --example compact_session
//! ```

use std::error::Error;
use std::sync::Arc;
use std::time::Instant;

use context_assembler::assemble::Assembler;
use context_assembler::compact::compactor::recount;
use context_assembler::compact::{
    CompactOutcome, CompactRequest, Compaction, Compactor, Content, Msg, Pinned, Provenance, TrimStep,
};
use context_assembler::config::default_catalog;
use context_assembler::tokens::Tokenizer;
use context_assembler::vocab::{Cancel, Role};

mod session;

use session::Agent;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MODEL: &str = "gpt-5";
const SEED: u64 = 0x00C0_FFEE_2024;
const CACHE_BYTES: u64 = 64 << 20;
/// Messages in the generated session.
const MESSAGES: usize = 200;
/// Messages appended before the second compaction.
const MORE_MESSAGES: usize = 40;
const TRIGGER_TOKENS: u32 = 20_000;
const TARGET_TOKENS: u32 = 30_000;
/// A target no compaction of this session can meet (the summary alone is larger).
const UNREACHABLE_TARGET: u32 = 500;
const EMERGENCY_TARGET: u32 = 40_000;
/// Requests sent to the breaker session: three failures open it, the fourth is trimmed.
const BREAKER_ATTEMPTS: u32 = 4;
/// Trim steps printed per line.
const STEPS_PER_LINE: usize = 3;

fn main() -> Result<()> {
    let assembler = Arc::new(Assembler::new(default_catalog(), CACHE_BYTES));
    let tokenizer = assembler
        .catalog()
        .models
        .resolve(MODEL)
        .map(|spec| spec.tokenizer.clone())
        .ok_or("gpt-5 is not in the default catalog")?;
    let compactor = Compactor::new(assembler);
    let cancel = Cancel::new();

    let mut agent = Agent::new(SEED);
    let conversation = agent.generate(MESSAGES);
    heading("The generated session");
    describe(&conversation, &tokenizer);

    heading("1. Compaction past the trigger");
    let first = compactor.compact(request("demo", conversation.clone(), vec![task()]), &cancel)?;
    report(&first, conversation.len());
    print_provenance(first.provenance.as_ref());
    check_recount(&first, &tokenizer)?;
    let first_summary = summary_text(&first)?;
    println!(
        "\nSummary (messages[{}]):\n",
        first.summary_index.unwrap_or_default()
    );
    println!("{first_summary}");

    heading("2. Re-compaction 40 messages later");
    let mut longer = first.messages.clone();
    longer.extend(agent.generate(MORE_MESSAGES));
    // No pinned items this time: the ones restored last time are carried forward.
    let second = compactor.compact(request("demo", longer.clone(), Vec::new()), &cancel)?;
    report(&second, longer.len());
    print_provenance(second.provenance.as_ref());
    check_recount(&second, &tokenizer)?;
    let merged = second.provenance.as_ref().and_then(|p| p.merged_summary_index);
    let Some(merged) = merged else {
        return Err("the second compaction did not merge the first summary".into());
    };
    let second_summary = summary_text(&second)?;
    println!("merged summary:    the earlier one at input index {merged}");
    println!(
        "summary size:      {} characters (first: {})",
        second_summary.chars().count(),
        first_summary.chars().count()
    );
    println!("pinned after it:   {:?} (carried forward)", pinned_ids(&second));
    println!("first scope:       {}", scope_line(&first_summary));
    println!("merged scope:      {}", scope_line(&second_summary));

    heading(&format!(
        "3. The circuit breaker (target {UNREACHABLE_TARGET}, session \"breaker-demo\")"
    ));
    // One fixed instant: the cooldown never passes between the attempts.
    let now = Instant::now();
    let mut last = None;
    for attempt in 1..=BREAKER_ATTEMPTS {
        let req = CompactRequest {
            target_tokens: Some(UNREACHABLE_TARGET),
            ..request("breaker-demo", conversation.clone(), vec![task()])
        };
        let out = compactor.compact_at(req, &cancel, now)?;
        let codes: Vec<&str> = out.warnings.iter().map(|w| w.code).collect();
        println!(
            "attempt {attempt}: {:<22} {:>6} -> {:>6} tokens  breaker: failures {}, open {}, opened_now {}  \
             warnings {codes:?}",
            out.outcome.as_str(),
            out.tokens_before,
            out.tokens_after,
            out.breaker.consecutive_failures,
            out.breaker.open,
            out.breaker.opened_now,
        );
        last = Some(out);
    }
    let Some(trimmed) = last.filter(|out| out.outcome == CompactOutcome::BreakerTrimmed) else {
        return Err("the fourth request was not trimmed by the open breaker".into());
    };
    println!("\nreason:            {}", trimmed.reason);
    print_steps(&trimmed.trim_steps);
    let kept: Vec<&str> = trimmed.messages.iter().map(|m| m.id.as_str()).collect();
    println!(
        "messages:          {} -> {} (kept {kept:?})",
        conversation.len(),
        trimmed.messages.len()
    );
    check_recount(&trimmed, &tokenizer)?;

    heading(&format!(
        "4. Emergency trim (context_length_exceeded, target {EMERGENCY_TARGET})"
    ));
    let req = CompactRequest {
        target_tokens: Some(EMERGENCY_TARGET),
        context_length_exceeded: true,
        ..request("demo", conversation.clone(), vec![task()])
    };
    let emergency = compactor.compact(req, &cancel)?;
    report(&emergency, conversation.len());
    print_steps(&emergency.trim_steps);
    println!("final tokens:      {}", emergency.tokens_after);
    check_recount(&emergency, &tokenizer)?;
    Ok(())
}

/// A Compact request with the demo's thresholds.
fn request(session: &str, messages: Vec<Msg>, pinned: Vec<Pinned>) -> CompactRequest {
    CompactRequest {
        request_id: format!("{session}-{}", messages.len()),
        model: MODEL.into(),
        session_id: session.into(),
        messages,
        trigger_tokens: Some(TRIGGER_TOKENS),
        target_tokens: Some(TARGET_TOKENS),
        preserve_recent: None,
        pinned,
        context_length_exceeded: false,
        cache_salt: String::new(),
    }
}

/// The task snapshot the gateway pins after every summary.
fn task() -> Pinned {
    Pinned {
        id: "task".into(),
        kind: "task".into(),
        content: "Ship minilang 0.4.0. Done: lexer escape fix, `check --json`. In progress: Windows path \
                  handling, parser error recovery. Left: CHANGELOG, version bump, full test run."
            .into(),
    }
}

fn heading(title: &str) {
    println!("\n{title}\n{}", "=".repeat(title.chars().count()));
}

/// Counts of the generated session, by role and block kind.
fn describe(msgs: &[Msg], tokenizer: &Tokenizer) {
    let by_role = |role: Role| msgs.iter().filter(|m| m.role == role).count();
    let calls = msgs.iter().flat_map(Msg::tool_uses).count();
    let doubles = msgs.iter().filter(|m| m.tool_uses().count() == 2).count();
    let errors = msgs
        .iter()
        .flat_map(|m| &m.content)
        .filter(|c| matches!(c, Content::ToolResult { is_error: true, .. }))
        .count();
    let mut sizes: Vec<usize> = msgs
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|c| match c {
            Content::ToolResult { output, .. } => Some(output.chars().count()),
            _ => None,
        })
        .collect();
    sizes.sort_unstable();
    let chars: usize = msgs
        .iter()
        .flat_map(|m| &m.content)
        .flat_map(|c| c.counted_texts(false))
        .map(str::len)
        .sum();
    let first = msgs.first().map_or("", |m| m.id.as_str());
    let last = msgs.last().map_or("", |m| m.id.as_str());
    println!("messages:          {} ({first}..{last})", msgs.len());
    println!(
        "by role:           system {}, user {}, assistant {}, tool {}",
        by_role(Role::System),
        by_role(Role::User),
        by_role(Role::Assistant),
        by_role(Role::Tool)
    );
    println!("tool calls:        {calls} ({doubles} messages with two calls, {errors} error results)");
    println!(
        "tool results:      {} chars min, {} median, {} max",
        sizes.first().copied().unwrap_or_default(),
        sizes.get(sizes.len() / 2).copied().unwrap_or_default(),
        sizes.last().copied().unwrap_or_default()
    );
    println!("counted bytes:     {chars}");
    println!("tokens (o200k):    {}", recount(tokenizer, false, msgs));
}

/// The fields every section prints.
fn report(out: &Compaction, messages_before: usize) {
    println!("outcome:           {}", out.outcome.as_str());
    println!("reason:            {}", out.reason);
    println!(
        "tokens:            {} -> {} (trigger {}, target {}, preserve_recent {})",
        out.tokens_before, out.tokens_after, out.trigger_tokens, out.target_tokens, out.preserve_recent
    );
    println!("messages:          {messages_before} -> {}", out.messages.len());
    println!("tokenizer:         {} (exact: {})", out.tokenizer, out.exact);
    let codes: Vec<&str> = out.warnings.iter().map(|w| w.code).collect();
    println!("warnings:          {codes:?}");
}

fn print_provenance(provenance: Option<&Provenance>) {
    let Some(p) = provenance else {
        println!("provenance:        none");
        return;
    };
    let first = p.message_ids.first().map_or("", String::as_str);
    let last = p.message_ids.last().map_or("", String::as_str);
    println!(
        "provenance:        input messages [{}, {}) summarized, {} ids ({first}..{last})",
        p.start,
        p.end,
        p.message_ids.len()
    );
}

/// Checks that the reported count is what a from-scratch recount of the
/// output gives.
fn check_recount(out: &Compaction, tokenizer: &Tokenizer) -> Result<()> {
    let recounted = recount(tokenizer, false, &out.messages);
    let ok = recounted == out.tokens_after;
    println!(
        "recount check:     tokens_after {} == recount {recounted}: {}",
        out.tokens_after,
        if ok { "ok" } else { "MISMATCH" }
    );
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tokens_after {} but a recount gives {recounted}",
            out.tokens_after
        )
        .into())
    }
}

/// The continuation message's text.
fn summary_text(out: &Compaction) -> Result<String> {
    let index = out.summary_index.ok_or("no summary index")?;
    let msg = out
        .messages
        .get(index as usize)
        .ok_or("summary index out of range")?;
    Ok(msg.texts().collect())
}

/// Ids of the restored pinned items in the output.
fn pinned_ids(out: &Compaction) -> Vec<&str> {
    out.messages
        .iter()
        .filter(|m| m.texts().next().is_some_and(|t| t.starts_with("<pinned")))
        .map(|m| m.id.as_str())
        .collect()
}

fn scope_line(summary: &str) -> &str {
    summary.lines().find(|l| l.starts_with("Scope: ")).unwrap_or("")
}

fn print_steps(steps: &[TrimStep]) {
    println!(
        "trim steps:        {} (input [start, end) dropped, tokens left)",
        steps.len()
    );
    for row in steps.chunks(STEPS_PER_LINE) {
        let cells: Vec<String> = row
            .iter()
            .map(|s| format!("[{:>3}, {:>3}) {:>6}", s.start, s.end, s.tokens_after))
            .collect();
        println!("  {}", cells.join("   "));
    }
}

// ---------------------------------------------------------------------------
// The generated session.
// ---------------------------------------------------------------------------
