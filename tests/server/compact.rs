//! The Compact RPC through the real server: compaction with provenance and
//! counts recounted by tiktoken-rs, pair safety, the breaker and emergency
//! paths with their metrics, bad input and limits.

use crate::common::{TestServer, violations};
use context_assembler::grpc::pb;
use pb::content_block::Block;
use tonic::Code;
use tonic_types::StatusExt;

fn text(id: &str, role: pb::Role, t: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        id: id.to_owned(),
        role: role.into(),
        content: vec![pb::ContentBlock {
            block: Some(Block::Text(t.to_owned())),
        }],
    }
}

fn call(id: &str, call_id: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        id: id.to_owned(),
        role: pb::Role::Assistant.into(),
        content: vec![
            pb::ContentBlock {
                block: Some(Block::Text("Let me look.".to_owned())),
            },
            pb::ContentBlock {
                block: Some(Block::ToolUse(pb::ToolUse {
                    id: call_id.to_owned(),
                    name: "read_file".to_owned(),
                    input: format!(r#"{{"path": "src/{call_id}.rs"}}"#),
                })),
            },
        ],
    }
}

fn result(id: &str, call_id: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        id: id.to_owned(),
        role: pb::Role::Tool.into(),
        content: vec![pb::ContentBlock {
            block: Some(Block::ToolResult(pb::ToolResult {
                tool_use_id: call_id.to_owned(),
                output: format!("// {call_id}\nfn main() {{ println!(\"hi\"); }}\n").repeat(20),
                is_error: false,
            })),
        }],
    }
}

/// An agent session: a system message, then 12 rounds of request, call,
/// result and answer.
fn session() -> Vec<pb::ConversationMessage> {
    let mut msgs = vec![text("sys", pb::Role::System, "You are a coding agent.")];
    for r in 0..12 {
        msgs.push(text(
            &format!("u{r}"),
            pb::Role::User,
            &format!("Step {r}: fix src/mod{r}.rs. TODO: keep the tests green."),
        ));
        msgs.push(call(&format!("a{r}"), &format!("t{r}")));
        msgs.push(result(&format!("r{r}"), &format!("t{r}")));
        msgs.push(text(
            &format!("d{r}"),
            pb::Role::Assistant,
            &format!("Done with step {r}."),
        ));
    }
    msgs
}

fn request(messages: Vec<pb::ConversationMessage>) -> pb::CompactRequest {
    pb::CompactRequest {
        request_id: "c-1".to_owned(),
        model: "gpt-4o".to_owned(),
        session_id: "it-session".to_owned(),
        messages,
        trigger_tokens: Some(0),
        preserve_recent: Some(3),
        pinned: vec![pb::PinnedItem {
            id: "task".to_owned(),
            kind: "task".to_owned(),
            content: "Fix every module; keep tests green.".to_owned(),
        }],
        ..Default::default()
    }
}

/// The compaction formula recounted with OpenAI's encoding in tiktoken-rs.
fn recount(messages: &[pb::ConversationMessage]) -> usize {
    let bpe = tiktoken_rs::o200k_base().unwrap();
    let n = |t: &str| bpe.encode_ordinary(t).len();
    3 + messages
        .iter()
        .map(|m| {
            let role = pb::Role::try_from(m.role).unwrap().as_str_name();
            let role = role.trim_start_matches("ROLE_").to_lowercase();
            3 + n(&role)
                + m.content
                    .iter()
                    .map(|c| match c.block.as_ref().unwrap() {
                        Block::Text(t) => n(t),
                        Block::ToolUse(u) => n(&u.name) + n(&u.input),
                        Block::ToolResult(r) => n(&r.output),
                        // gpt-4o's provider does not read thinking.
                        Block::Thinking(_) => 0,
                    })
                    .sum::<usize>()
        })
        .sum::<usize>()
}

fn first_text(m: &pb::ConversationMessage) -> &str {
    match m.content[0].block.as_ref() {
        Some(Block::Text(t)) => t,
        _ => "",
    }
}

#[tokio::test]
async fn compacts_with_provenance_and_exact_counts() {
    let server = TestServer::start().await;
    let input = session();
    let out = server
        .client()
        .compact(request(input.clone()))
        .await
        .unwrap()
        .into_inner();
    assert!(out.compacted);
    assert_eq!(out.outcome(), pb::CompactOutcome::Compacted);
    assert_eq!(out.tokens_before as usize, recount(&input));
    assert_eq!(out.tokens_after as usize, recount(&out.messages));
    assert!(out.tokens_after < out.tokens_before / 3, "{out:?}");
    // System first, then the summary, the pinned task, the recent messages.
    assert_eq!(out.messages[0], input[0]);
    assert_eq!(out.summary_index, Some(1));
    assert!(first_text(&out.messages[1]).contains("<summary>"));
    assert!(first_text(&out.messages[1]).contains("read_file"));
    assert!(first_text(&out.messages[2]).starts_with("<pinned kind=\"task\" id=\"task\">"));
    // preserve 3 lands on [result, answer] of round 11 plus its call: the cut
    // walks back to keep the call with its result.
    let p = out.provenance.unwrap();
    assert_eq!((p.start, p.end), (1, 46));
    assert_eq!(p.message_ids.first().map(String::as_str), Some("u0"));
    assert_eq!(p.message_ids.last().map(String::as_str), Some("u11"));
    assert_eq!(out.messages[3..], input[46..]);
    assert_eq!(out.tokenizer, "o200k_base");
    assert!(out.exact);
    server.stop().await;
}

#[tokio::test]
async fn a_second_compaction_merges_and_below_trigger_is_reported() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let once = client.compact(request(session())).await.unwrap().into_inner();
    let mut next = once.messages.clone();
    next.extend(session().into_iter().skip(1).take(8));
    let twice = client.compact(request(next)).await.unwrap().into_inner();
    assert_eq!(twice.provenance.unwrap().merged_summary_index, Some(1));
    let summaries = twice
        .messages
        .iter()
        .filter(|m| first_text(m).contains("<summary>"))
        .count();
    assert_eq!(summaries, 1);
    assert!(first_text(&twice.messages[1]).contains("compactions: 2."));

    let below = client
        .compact(pb::CompactRequest {
            trigger_tokens: None,
            ..request(session())
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!below.compacted);
    assert_eq!(below.outcome(), pb::CompactOutcome::BelowTrigger);
    assert_eq!(below.messages, session());
    assert!(!below.reason.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn the_breaker_opens_after_three_failures_and_trims_with_metrics() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let opened = ("assembler_compaction_breaker_open_total", &[][..]);
    let trimmed = [("source", "compact"), ("outcome", "breaker_trimmed")];
    let opened_before = server.counter(opened.0, opened.1).await;
    let trimmed_before = server.counter("assembler_compactions_total", &trimmed).await;
    let failing = || pb::CompactRequest {
        session_id: "breaker-it".to_owned(),
        target_tokens: Some(50),
        ..request(session())
    };
    for i in 1..=3u32 {
        let out = client.compact(failing()).await.unwrap().into_inner();
        assert_eq!(out.outcome(), pb::CompactOutcome::CompactedOverTarget);
        assert_eq!(out.breaker.unwrap().consecutive_failures, i);
        assert!(out.warnings.iter().any(|w| w.code == "COMPACTION_OVER_TARGET"));
    }
    let out = client.compact(failing()).await.unwrap().into_inner();
    assert_eq!(out.outcome(), pb::CompactOutcome::BreakerTrimmed);
    assert!(!out.compacted);
    assert!(out.breaker.unwrap().open);
    assert!(out.warnings.iter().any(|w| w.code == "COMPACTION_BREAKER_OPEN"));
    assert!(!out.trim_steps.is_empty());
    assert_eq!(out.tokens_after as usize, recount(&out.messages));
    assert_eq!(server.counter(opened.0, opened.1).await - opened_before, 1.0);
    assert_eq!(
        server.counter("assembler_compactions_total", &trimmed).await - trimmed_before,
        1.0
    );
    let (_, page) = server.http_get("/metrics").await;
    assert!(page.contains("assembler_compaction_tokens_saved_bucket"));
    server.stop().await;
}

#[tokio::test]
async fn emergency_trim_reports_each_step_and_never_orphans_a_result() {
    let server = TestServer::start().await;
    let input = session();
    let before = recount(&input) as u32;
    let out = server
        .client()
        .compact(pb::CompactRequest {
            context_length_exceeded: true,
            trigger_tokens: None,
            target_tokens: Some(before / 2),
            ..request(input.clone())
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.outcome(), pb::CompactOutcome::EmergencyTrimmed);
    assert!(out.tokens_after <= before / 2);
    // Each step drops two turns: a user message, then a call with its result.
    let first = &out.trim_steps[0];
    assert_eq!((first.start, first.end), (1, 4));
    assert_eq!(first.message_ids, ["u0", "a0", "r0"]);
    for step in &out.trim_steps {
        let mut partial = input[..1].to_vec();
        partial.extend_from_slice(&input[step.end as usize..]);
        assert_eq!(step.tokens_after as usize, recount(&partial));
    }
    assert_eq!(out.messages[0], input[0]);
    assert_ne!(out.messages[1].role, pb::Role::Tool as i32);
    server.stop().await;
}

#[tokio::test]
async fn bad_conversations_are_invalid_argument_naming_each_field() {
    let server = TestServer::start().await;
    let mut bad = request(vec![
        pb::ConversationMessage {
            id: "x".to_owned(),
            role: 0,
            content: vec![],
        },
        call("a", "t1"),
        call("b", "t1"),
    ]);
    bad.model = "no-such-model".to_owned();
    let status = server.client().compact(bad).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let fields = violations(&status);
    assert_eq!(fields, ["messages[0].role"]);

    let mut bad = request(vec![
        pb::ConversationMessage {
            id: "x".to_owned(),
            role: pb::Role::User.into(),
            content: vec![],
        },
        call("a", "t1"),
        call("b", "t1"),
    ]);
    bad.model = "no-such-model".to_owned();
    let status = server.client().compact(bad).await.unwrap_err();
    let fields = violations(&status);
    assert_eq!(
        fields,
        [
            "messages[0].content",
            "messages[2].content[1].tool_use.id",
            "model"
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_conversation_over_the_item_limit_is_resource_exhausted() {
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        max_items: Some(20),
        ..TestServer::args()
    })
    .await;
    let status = server.client().compact(request(session())).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "TOO_MANY_ITEMS");
    server.stop().await;
}

#[tokio::test]
async fn the_readme_example_compacts_through_the_json_mapping() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/compact.json")).unwrap();
    let req: pb::CompactRequest = serde_json::from_str(&text).unwrap();
    let server = TestServer::start().await;
    let out = server.client().compact(req).await.unwrap().into_inner();
    assert_eq!(out.outcome(), pb::CompactOutcome::Compacted);
    // The cut walks back from [m4, m5] over nothing; m1..m3 (a call with its
    // result) are summarized, the task is restored, m4 and m5 stay verbatim.
    assert_eq!(out.provenance.unwrap().message_ids, ["m1", "m2", "m3"]);
    let ids: Vec<&str> = out.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m0", "", "task", "m4", "m5"]);
    assert!(first_text(&out.messages[1]).contains("src/parser/lexer.rs"));
    server.stop().await;
}

/// Thinking over the wire: returned verbatim with the kept messages (never
/// escaped), absent from the summary, not counted for gpt-4o (the tiktoken
/// recount without it matches); refused on a user message, by name.
#[tokio::test]
async fn thinking_is_returned_verbatim_and_refused_on_a_user_message() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let thought = "I should read <b>a & b</b> first &amp; then patch";
    let mut msgs = session();
    for m in msgs.iter_mut().filter(|m| m.id.starts_with('a')) {
        m.content.insert(
            0,
            pb::ContentBlock {
                block: Some(Block::Thinking(pb::Thinking {
                    text: format!("{thought} ({})", m.id),
                    signature: "c2lnbmF0dXJl".to_owned(),
                    redacted: false,
                })),
            },
        );
    }
    let out = client.compact(request(msgs.clone())).await.unwrap().into_inner();
    assert_eq!(out.tokens_before as usize, recount(&msgs));
    assert_eq!(out.tokens_after as usize, recount(&out.messages));
    let kept_calls: Vec<&pb::ConversationMessage> =
        out.messages.iter().filter(|m| m.id.starts_with('a')).collect();
    assert!(!kept_calls.is_empty());
    for m in &kept_calls {
        let original = msgs.iter().find(|o| o.id == m.id).unwrap();
        assert_eq!(*m, original, "a kept call keeps its thinking verbatim");
    }
    let summary = &out.messages[out.summary_index.unwrap() as usize];
    let Some(Block::Text(summary)) = summary.content[0].block.as_ref() else {
        panic!("a text summary")
    };
    assert!(!summary.contains("I should read"), "{summary}");

    // On a user message: refused, naming the message's role.
    let mut bad = msgs;
    bad[1].content.push(pb::ContentBlock {
        block: Some(Block::Thinking(pb::Thinking {
            text: "no".to_owned(),
            ..Default::default()
        })),
    });
    let status = client.compact(request(bad)).await.unwrap_err();
    assert_eq!(violations(&status), vec!["messages[1].role"]);
    server.stop().await;
}
