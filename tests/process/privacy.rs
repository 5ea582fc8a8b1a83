//! Privacy through the real binary: prompt content never appears in its logs
//! (at the most verbose level, `RUST_LOG=trace`, in the JSON and the plain
//! format, dependencies included) nor on its metrics page.
//!
//! Every content-bearing field of every RPC carries a secret made of one
//! random token, the same for the whole run, followed by the field's name;
//! identifiers carry another token. Requests succeed and fail in every way
//! the sidecar knows (invalid, over budget, over the limits, past their
//! deadline, undecodable), then the metrics page and every captured line are
//! searched for the tokens, and for their first half (a content prefix cut
//! short in a log would still show).
//!
//! Identifiers (request, session, block, item, segment, message, tool-call
//! and principal ids, model and policy names, cache salt, prefix family,
//! provider) are not prompt content: the sidecar logs some of them on
//! purpose (request ids, model names, dropped item ids). They must never
//! become metric labels, and they are only reported for the logs.

use std::time::{Duration, Instant};

use crate::common::{ChildServer, RawClient, frame};
use context_assembler::grpc::pb;
use context_assembler::workload::{Rng, prose};
use pb::assembler_client::AssemblerClient;
use prost::Message as _;
use tonic::Code;
use tonic::transport::Channel;

/// The two random tokens of a run: one for content, one for identifiers.
struct Secrets {
    content: String,
    id: String,
}

impl Secrets {
    fn new() -> Secrets {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let mut rng = Rng::new(nanos ^ u64::from(std::process::id()) << 32);
        Secrets {
            content: format!("{:016x}{:08x}", rng.next_u64(), rng.next_u64() as u32),
            id: format!("{:016x}{:08x}", rng.next_u64(), rng.next_u64() as u32),
        }
    }

    /// Content for `field`: the secret first (so a truncated copy still
    /// holds it), then ordinary prose.
    fn text(&self, field: &str) -> String {
        format!(
            "SECRET{}{field} {}",
            self.content,
            prose(&mut Rng::new(field.len() as u64), 200)
        )
    }

    /// A short content value (a scope, a tool name).
    fn word(&self, field: &str) -> String {
        format!("SECRET{}{field}", self.content)
    }

    fn id(&self, field: &str) -> String {
        format!("ID{}{field}", self.id)
    }

    /// A valid tool definition whose keys and values carry the secret.
    fn tool(&self, n: usize) -> String {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.word(&format!("toolname{n}")),
                "description": self.text(&format!("tooldescription{n}")),
                "parameters": {
                    "type": "object",
                    "properties": { self.word(&format!("toolproperty{n}")): { "type": "string" } }
                }
            }
        })
        .to_string()
    }
}

fn item(s: &Secrets, block: &str, i: usize) -> pb::Item {
    pb::Item {
        id: s.id(&format!("{block}item{i}")),
        content: s.text(&format!("{block}content{i}")),
        score: 1.0 / (1.0 + i as f64),
        source: s.word(&format!("{block}source{i}")),
        trusted: i.is_multiple_of(2),
        required_scopes: if i == 3 {
            vec![s.word(&format!("{block}requiredscope{i}"))]
        } else {
            Vec::new()
        },
        compact_form: (i % 2 == 1).then(|| s.text(&format!("{block}compactform{i}"))),
        ..Default::default()
    }
}

fn turn(s: &Secrets, block: &str, i: usize) -> pb::Item {
    let call = s.id(&format!("{block}call{}", i / 3));
    let (role, tool_call_ids, tool_call_id) = match i % 3 {
        0 => (pb::Role::User, Vec::new(), String::new()),
        1 => (pb::Role::Assistant, vec![call], String::new()),
        _ => (pb::Role::Tool, Vec::new(), call),
    };
    let thinking = if role == pb::Role::Assistant {
        vec![pb::Thinking {
            text: s.text(&format!("{block}thinking{i}")),
            signature: s.text(&format!("{block}signature{i}")),
            redacted: i.is_multiple_of(2),
        }]
    } else {
        Vec::new()
    };
    let tool_name = if role == pb::Role::Tool {
        s.id(&format!("{block}toolname{i}"))
    } else {
        String::new()
    };
    pb::Item {
        id: s.id(&format!("{block}turn{i}")),
        content: s.text(&format!("{block}turn{i}")),
        role: role.into(),
        tool_call_ids,
        tool_call_id,
        compact_form: (i % 6 == 5).then(|| s.text(&format!("{block}turncompact{i}"))),
        tool_name,
        thinking,
        ..Default::default()
    }
}

/// A request with a secret in every field, every block kind, tools and a
/// conversation long enough to be compacted under `budget`.
fn assemble_request(s: &Secrets, n: usize, budget: Option<u32>) -> pb::AssembleRequest {
    let block = |name: &str, kind: pb::BlockKind, items: Vec<pb::Item>| pb::Block {
        name: s.id(&format!("{name}{n}")),
        kind: kind.into(),
        items,
        ..Default::default()
    };
    let items = |name: &str| (0..6).map(|i| item(s, name, i)).collect::<Vec<_>>();
    let turns = |name: &str, count: usize| (0..count).map(|i| turn(s, name, i)).collect::<Vec<_>>();
    pb::AssembleRequest {
        request_id: s.id(&format!("request{n}")),
        model: ["gpt-4o", "claude-3-5-sonnet", "gpt-4"][n % 3].to_owned(),
        max_input_tokens: budget,
        output_reserve: None,
        static_segments: [
            pb::SegmentKind::System,
            pb::SegmentKind::Policy,
            pb::SegmentKind::Examples,
        ]
        .into_iter()
        .enumerate()
        .map(|(k, kind)| pb::Segment {
            id: s.id(&format!("segment{k}")),
            kind: kind.into(),
            // A timestamp makes the volatile-prefix scan report it.
            content: format!("{} 2024-05-01T12:34:56Z", s.text(&format!("segment{k}"))),
        })
        .collect(),
        blocks: vec![
            block("state", pb::BlockKind::State, items("state")),
            block("evidence", pb::BlockKind::Evidence, items("evidence")),
            block("memory", pb::BlockKind::Memory, items("memory")),
            block("summary", pb::BlockKind::Summary, items("summary")),
            block("history", pb::BlockKind::History, turns("history", 30)),
            block("recent", pb::BlockKind::RecentTurns, turns("recent", 6)),
        ],
        query: s.text("query"),
        principal: Some(pb::Principal {
            id: s.id("principal"),
            scopes: vec![s.word("scope")],
        }),
        session_id: s.id("session"),
        policy: String::new(),
        tools: (0..2).map(|k| s.tool(k)).collect(),
        cache_salt: s.id("cachesalt"),
        prefix_family: s.id("prefixfamily"),
        recall: None,
        return_token_ids: false,
        previous_fingerprint: Vec::new(),
        cache_ttl: String::new(),
    }
}

/// Retain (parsed, structured, replayed, refused), recall into Assemble
/// (and a refused one), ListMemories and Forget, with content everywhere.
async fn exercise_memory(client: &mut AssemblerClient<Channel>, s: &Secrets) {
    let output = format!(
        "{} <observation><type>decision</type><title>{}</title><text>{}</text>\
         <facts><fact>{}</fact></facts><files_read><file>{}</file></files_read></observation>\
         <summary><request>{}</request><learned>{}</learned><notes>{}</notes></summary>\
         <observation><type>{}</type><text>{}</text></observation> <private>{}</private>\
         <observation><text>{} &{}; <observation>{}",
        s.text("prose"),
        s.text("obstitle"),
        s.text("obstext"),
        s.text("fact"),
        s.word("file"),
        s.text("sumrequest"),
        s.text("sumlearned"),
        s.text("sumnotes"),
        s.word("badtype"),
        s.text("badtypetext"),
        s.text("private"),
        s.text("malformed"),
        s.word("entity"),
        s.text("unterminated"),
    );
    let retain = pb::RetainRequest {
        idempotency_key: s.id("retainkey"),
        subject: s.id("subject"),
        required_scopes: vec![s.word("scope")],
        request_id: s.id("retainrequest"),
        turn: 3,
        model_output: output,
        observations: vec![pb::Observation {
            r#type: "bugfix".to_owned(),
            title: s.text("structuredtitle"),
            text: format!(
                "{} <private>{}</private>",
                s.text("structuredtext"),
                s.text("structuredprivate")
            ),
            facts: vec![s.text("structuredfact")],
            files_read: vec![s.word("structuredfile")],
            files_modified: vec![s.word("structuredmodified")],
        }],
        summaries: Vec::new(),
    };
    let retained = client.retain(retain.clone()).await.unwrap().into_inner();
    assert_eq!(retained.memory_ids.len(), 3, "{retained:?}");
    assert!(retained.problems.len() >= 2, "{retained:?}");
    assert!(client.retain(retain).await.unwrap().into_inner().replayed);
    let refused = client
        .retain(pb::RetainRequest {
            idempotency_key: s.id("retainkey2"),
            subject: String::new(),
            observations: vec![pb::Observation {
                r#type: s.word("unknowntype"),
                text: s.text("refusedtext"),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);

    let mut recall = assemble_request(s, 9, None);
    recall.recall = Some(pb::Recall {
        subject: s.id("subject"),
        query: format!("{} structured", s.text("recallquery")),
        ..Default::default()
    });
    let answer = client.assemble(recall.clone()).await.unwrap().into_inner();
    assert_eq!(answer.recall.unwrap().recalled_ids.len(), 3);
    recall.recall = Some(pb::Recall {
        subject: String::new(),
        types: vec![s.word("recalltype")],
        ..Default::default()
    });
    assert_eq!(
        client.assemble(recall).await.unwrap_err().code(),
        Code::InvalidArgument
    );

    let page = client
        .list_memories(pb::ListMemoriesRequest {
            subject: s.id("subject"),
            page_size: 2,
            page_token: String::new(),
            principal: Some(pb::Principal {
                id: s.id("listprincipal"),
                scopes: vec![s.word("scope")],
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.memories.len(), 2);
    let bad_token = client
        .list_memories(pb::ListMemoriesRequest {
            subject: s.id("subject"),
            page_size: 2,
            page_token: s.id("pagetoken"),
            principal: Some(pb::Principal {
                id: s.id("listprincipal"),
                scopes: vec![s.word("listscope")],
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(bad_token.code(), Code::InvalidArgument);
    let forgotten = |subject: String, kind: &str| pb::ForgetRequest {
        ids: Vec::new(),
        subject,
        r#type: kind.to_owned(),
    };
    client.forget(forgotten(s.id("subject"), "bugfix")).await.unwrap();
    let bad_ids = client
        .forget(pb::ForgetRequest {
            ids: vec![s.id("forgetid")],
            subject: s.id("subject"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad_ids.code(), Code::InvalidArgument);
    let all = client
        .forget(forgotten(s.id("subject"), ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.deleted, 2);
}

fn conversation(s: &Secrets, n: usize, turns: usize) -> pb::CompactRequest {
    use pb::content_block::Block;
    let text = |f: String| pb::ContentBlock {
        block: Some(Block::Text(s.text(&f))),
    };
    let mut messages = vec![pb::ConversationMessage {
        id: s.id("system"),
        role: pb::Role::System.into(),
        content: vec![text("system".to_owned())],
    }];
    for t in 0..turns {
        let call = s.id(&format!("use{n}x{t}"));
        messages.push(pb::ConversationMessage {
            id: s.id(&format!("user{t}")),
            role: pb::Role::User.into(),
            content: vec![text(format!("user{t} TODO: next src/secret/{}{t}.rs", s.content))],
        });
        messages.push(pb::ConversationMessage {
            id: s.id(&format!("assistant{t}")),
            role: pb::Role::Assistant.into(),
            content: vec![
                pb::ContentBlock {
                    block: Some(Block::Thinking(pb::Thinking {
                        text: s.text(&format!("compactthinking{t}")),
                        signature: s.word(&format!("compactsignature{t}")),
                        redacted: false,
                    })),
                },
                text(format!("assistant{t}")),
                pb::ContentBlock {
                    block: Some(Block::ToolUse(pb::ToolUse {
                        id: call.clone(),
                        name: s.word(&format!("toolname{t}")),
                        input: format!("{{\"path\":\"{}\"}}", s.word(&format!("toolinput{t}"))),
                    })),
                },
            ],
        });
        messages.push(pb::ConversationMessage {
            id: s.id(&format!("tool{t}")),
            role: pb::Role::Tool.into(),
            content: vec![pb::ContentBlock {
                block: Some(Block::ToolResult(pb::ToolResult {
                    tool_use_id: call,
                    output: s.text(&format!("tooloutput{t}")),
                    is_error: t % 4 == 0,
                })),
            }],
        });
    }
    pb::CompactRequest {
        request_id: s.id(&format!("compact{n}")),
        model: "gpt-4o".to_owned(),
        session_id: s.id(&format!("compactsession{n}")),
        messages,
        trigger_tokens: Some(200),
        target_tokens: Some(100_000),
        preserve_recent: Some(3),
        pinned: vec![pb::PinnedItem {
            id: s.id("pinned"),
            kind: s.id("pinnedkind"),
            content: s.text("pinned"),
        }],
        context_length_exceeded: false,
        cache_salt: String::new(),
    }
}

/// Sends every request, succeeding and failing, to a sidecar logging at
/// `trace` in `format`; returns the metrics page and every line it wrote.
async fn exercise(format: &str, s: &Secrets) -> (String, Vec<String>) {
    // The recall waits as long as it needs: this child logs every line at
    // trace into pipes, and a default 50 ms recall would degrade by chance.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[memory]\nrecall_timeout_ms = 10000\n").unwrap();
    let mut server = ChildServer::spawn(
        &["--config", config.to_str().unwrap(), "--log-format", format],
        &[("RUST_LOG", "trace")],
    );
    let channel: Channel = server.serving_channel().await;
    let mut client = AssemblerClient::new(channel.clone());
    let path = |rpc: &str| format!("/context_assembler.v1.Assembler/{rpc}");

    // Assemble: fits; cut and compacted under a small budget (turns
    // summarized, items dropped, compact forms used); warm (cache hits).
    let mut answered = Vec::new();
    for (n, budget) in [(0, None), (1, Some(3000)), (2, Some(1500)), (0, None)] {
        let resp = client
            .assemble(assemble_request(s, n, budget))
            .await
            .unwrap()
            .into_inner();
        answered.push(resp.request_id.clone());
    }
    // Assemble failing: malformed (every violation kind the validator
    // knows, with content in the fields), over budget, too many items, too
    // large, past its deadline.
    let mut bad = assemble_request(s, 3, None);
    bad.model = s.id("unknownmodel");
    bad.policy = s.id("unknownpolicy");
    bad.tools = vec![
        format!("{{\"{}\": ", s.word("invalidtooljson")),
        format!("[\"{}\"]", s.word("toolnotobject")),
    ];
    bad.blocks[1].items[1].id = bad.blocks[1].items[0].id.clone();
    bad.blocks[1].items[2].score = f64::NAN;
    bad.blocks[4].items[0].role = 0;
    bad.blocks[2].min_tokens = 10;
    bad.blocks[2].max_tokens = 5;
    let status = client.assemble(bad).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let mut blank = assemble_request(s, 4, None);
    blank.query = format!("   \n{}", " ".repeat(10));
    assert_eq!(
        client.assemble(blank).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let mut overflow = assemble_request(s, 5, Some(200));
    overflow.blocks[1].cuttable = Some(false);
    assert_eq!(
        client.assemble(overflow).await.unwrap_err().code(),
        Code::FailedPrecondition
    );
    let mut many = assemble_request(s, 6, None);
    many.blocks[1].items = (0..10_001).map(|i| item(s, "many", i)).collect();
    assert_eq!(
        client.assemble(many).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    let mut huge = assemble_request(s, 7, None);
    huge.query = s.text("hugequery").repeat(25_000);
    assert_eq!(
        client.assemble(huge).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
    let mut raw = RawClient::connect(server.grpc).await;
    let mut slow = assemble_request(s, 8, None);
    slow.blocks[1].items = (0..2000).map(|i| item(s, "slow", i)).collect();
    let answer = raw
        .call(
            &path("Assemble"),
            frame(&slow.encode_to_vec()),
            &[("grpc-timeout", "20m")],
        )
        .await;
    assert!(
        matches!(answer.code(), Code::DeadlineExceeded | Code::Ok),
        "{answer:?}"
    );
    // Undecodable: valid fields (with content) followed by garbage.
    let mut garbage = pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned())),
        text: s.text("undecodable").into(),
    }
    .encode_to_vec();
    garbage.extend([0xff, 0xff, 0xff]);
    let answer = raw.call(&path("CountTokens"), frame(&garbage), &[]).await;
    assert_eq!(answer.code(), Code::InvalidArgument, "{answer:?}");

    // CountTokens: counted; unknown model and encoding.
    for tokenizer in [
        pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned()),
        pb::count_tokens_request::Tokenizer::Model(s.id("countmodel")),
        pb::count_tokens_request::Tokenizer::Encoding(s.id("countencoding")),
    ] {
        let _ = client
            .count_tokens(pb::CountTokensRequest {
                tokenizer: Some(tokenizer),
                text: s.text("counttext").into(),
            })
            .await;
    }

    // A batch and a stream, good and bad requests mixed.
    let mut bad_in_batch = assemble_request(s, 9, None);
    bad_in_batch.model = s.id("batchmodel");
    let mut over_in_batch = assemble_request(s, 10, Some(100));
    over_in_batch.blocks[0].cuttable = Some(false);
    let batch = vec![
        assemble_request(s, 11, None),
        bad_in_batch.clone(),
        over_in_batch.clone(),
        assemble_request(s, 12, Some(2000)),
    ];
    let out = client
        .assemble_batch(pb::AssembleBatchRequest {
            requests: batch.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.results.len(), 4);
    let mut answers = client
        .assemble_stream(tokio_stream::iter(batch))
        .await
        .unwrap()
        .into_inner();
    while answers.message().await.unwrap().is_some() {}
    let mut stream_body: Vec<u8> = frame(&assemble_request(s, 13, None).encode_to_vec());
    stream_body.extend(frame(&[0xff, 0xff]));
    let answer = raw.call(&path("AssembleStream"), stream_body, &[]).await;
    assert_eq!(answer.code(), Code::InvalidArgument, "{answer:?}");

    // Compact: compacted (and merged a second time), below the trigger,
    // over target until the breaker opens and trims, emergency trim, bad.
    let first = client.compact(conversation(s, 0, 12)).await.unwrap().into_inner();
    let mut merged = conversation(s, 0, 6);
    merged.messages = [first.messages, merged.messages.split_off(1)].concat();
    client.compact(merged).await.unwrap();
    let mut below = conversation(s, 1, 3);
    below.trigger_tokens = Some(1_000_000);
    client.compact(below).await.unwrap();
    for _ in 0..5 {
        let mut over = conversation(s, 2, 12);
        over.target_tokens = Some(50);
        client.compact(over).await.unwrap();
    }
    let mut emergency = conversation(s, 3, 12);
    emergency.context_length_exceeded = true;
    emergency.target_tokens = Some(2000);
    client.compact(emergency).await.unwrap();
    let mut bad = conversation(s, 4, 4);
    bad.messages[1].role = pb::Role::Tool.into();
    bad.messages[2].content.push(pb::ContentBlock { block: None });
    bad.pinned.push(pb::PinnedItem::default());
    assert_eq!(
        client.compact(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );

    // ReportUsage: matched, unmatched, no provider; the claude entry's margin
    // adapts after 20 reports.
    for k in 0..25 {
        let request_id = answered[k % answered.len()].clone();
        client
            .report_usage(pb::ReportUsageRequest {
                request_id,
                provider: ["openai", "anthropic"][k % 2].to_owned(),
                prompt_tokens: 5000 + k as u32,
                cached_tokens: 1000,
                cache_read_tokens: 100,
                cache_creation_tokens: 10,
                cache_write_tokens: 5,
                // A diagnostic is a bounded label: an unknown one is
                // counted as "other", never exported as sent.
                diagnostic: s.word("diagnostic"),
                // The answer is counted, never logged or exported.
                answer: s.text("answer"),
            })
            .await
            .unwrap();
    }
    client
        .report_usage(pb::ReportUsageRequest {
            request_id: s.id("reportunknown"),
            provider: s.id("provider"),
            prompt_tokens: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let _ = client
        .report_usage(pb::ReportUsageRequest {
            request_id: s.id("reportnoprovider"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    client.list_models(pb::ListModelsRequest {}).await.unwrap();
    exercise_memory(&mut client, s).await;

    let page = server.metrics_page().await;
    assert!(
        page.contains("assembler_requests_total"),
        "not the metrics page: {page}"
    );
    // A clean shutdown, so the drain's lines are captured too.
    drop(client);
    drop(channel);
    drop(raw);
    server.signal("-TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.running() {
        assert!(Instant::now() < deadline, "the sidecar did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The reader threads finish once the pipes close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (page, server.logs())
}

/// The lines (or page lines) holding the token or its first half.
fn holding<'a>(lines: impl IntoIterator<Item = &'a str>, token: &str) -> Vec<String> {
    let half = &token[..token.len() / 2];
    lines
        .into_iter()
        .filter(|l| l.contains(half))
        .map(|l| l.chars().take(400).collect())
        .collect()
}

async fn no_secret_is_logged_or_exported(format: &str) {
    let s = Secrets::new();
    let (page, logs) = exercise(format, &s).await;
    assert!(
        logs.len() > 100,
        "trace logging captured only {} lines: is RUST_LOG honoured?",
        logs.len()
    );
    let in_page = holding(page.lines(), &s.content);
    assert!(in_page.is_empty(), "content on the metrics page: {in_page:#?}");
    let ids_in_page = holding(page.lines(), &s.id);
    assert!(
        ids_in_page.is_empty(),
        "request-supplied identifiers as metric labels: {ids_in_page:#?}"
    );
    let in_logs = holding(logs.iter().map(String::as_str), &s.content);
    assert!(
        in_logs.is_empty(),
        "{} of {} log lines ({format}) hold prompt content, e.g.: {:#?}",
        in_logs.len(),
        logs.len(),
        &in_logs[..in_logs.len().min(5)]
    );
    // Identifiers in logs are by design; report which ones.
    let id = s.id.as_str();
    let mut fields: Vec<String> = logs
        .iter()
        .flat_map(|l| l.split(id).skip(1))
        .map(|rest| rest.chars().take_while(char::is_ascii_alphabetic).collect())
        .collect();
    fields.sort();
    fields.dedup();
    eprintln!(
        "{format}: {} lines, {} bytes of logs; identifiers logged: {fields:?}",
        logs.len(),
        logs.iter().map(String::len).sum::<usize>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_content_never_reaches_json_trace_logs_or_metrics() {
    no_secret_is_logged_or_exported("json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_content_never_reaches_plain_trace_logs_or_metrics() {
    no_secret_is_logged_or_exported("plain").await;
}
