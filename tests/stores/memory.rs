//! Retention and recall through the real server: Retain from model output,
//! recall into Assemble under budget and scopes, ranking, idempotency,
//! Forget and ListMemories, metrics, a store that is off, and crash safety
//! (the process killed right after an OK). Every test runs on SQLite, and
//! on PostgreSQL when `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL` is set (`.ci/run`
//! sets it; `CONTEXT_ASSEMBLER_REQUIRE_POSTGRES=1` makes its absence fail).

use crate::common::{self, ChildServer, SqliteStall, TestServer, postgres};
use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb;
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use tonic_types::StatusExt;

/// The store flags of each backend under test.
fn backends() -> Vec<(&'static str, Vec<String>)> {
    let mut out = vec![("sqlite", Vec::new())];
    if let Some(url) = postgres::url() {
        out.push((
            "postgres",
            vec![
                "--memory-store".to_owned(),
                "postgres".to_owned(),
                "--memory-postgres-url".to_owned(),
                url,
            ],
        ));
    }
    out
}

/// A server on `backend` (its flags applied over the test defaults).
async fn server(flags: &[String]) -> TestServer {
    use clap::Parser as _;
    let mut argv = vec!["context-assembler".to_owned()];
    argv.extend(flags.iter().cloned());
    let parsed = context_assembler::config::Cli::try_parse_from(argv).unwrap();
    let defaults = TestServer::args();
    let args = ServeArgs {
        memory_store: parsed.serve.memory_store,
        memory_postgres_url: parsed.serve.memory_postgres_url,
        ..defaults
    };
    TestServer::start_with(args).await
}

/// A subject no other test (or earlier run on a shared database) uses.
fn subject(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tenant-{nanos:x}/{name}")
}

fn retain(subject: &str, key: &str, output: &str, scopes: &[&str]) -> pb::RetainRequest {
    pb::RetainRequest {
        idempotency_key: format!("{subject}/{key}"),
        subject: subject.to_owned(),
        required_scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        request_id: "r-1".to_owned(),
        turn: 1,
        model_output: output.to_owned(),
        ..Default::default()
    }
}

fn observation(kind: &str, text: &str) -> String {
    format!("<observation><type>{kind}</type><text>{text}</text></observation>")
}

fn assemble(subject: &str, query: &str, scopes: &[&str]) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: "a-1".to_owned(),
        model: "gpt-4o".to_owned(),
        static_segments: vec![pb::Segment {
            id: "system".to_owned(),
            kind: pb::SegmentKind::System.into(),
            content: "You are a helpful engineer.".to_owned(),
        }],
        query: query.to_owned(),
        principal: Some(pb::Principal {
            id: "p".to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        }),
        recall: Some(pb::Recall {
            subject: subject.to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The whole prompt's text.
fn prompt(r: &pb::AssembleResponse) -> String {
    r.messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fields a status's `BadRequest` detail names, sorted.
fn bad_fields(status: &tonic::Status) -> Vec<String> {
    let mut fields: Vec<String> = status
        .get_details_bad_request()
        .unwrap()
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect();
    fields.sort();
    fields
}

async fn retained(client: &mut AssemblerClient<Channel>, r: pb::RetainRequest) -> pb::RetainResponse {
    client.retain(r).await.unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_observations_are_recalled_into_a_later_prompt_under_scopes() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("recall");
        let output = format!(
            "Thinking about it...\n```xml\n{}\n{}\n```\n<summary><request>Add JWT refresh</request>\
             <learned>Sessions use cookies</learned></summary> trailing prose",
            observation("decision", "Tokens are signed with Ed25519 keys rotated weekly."),
            observation(
                "bugfix",
                "Fixed the refresh race in the auth middleware with a mutex."
            ),
        );
        let open = retained(&mut client, retain(&who, "k1", &output, &[])).await;
        assert_eq!(open.memory_ids.len(), 3, "{backend}: {open:?}");
        assert!(open.problems.is_empty(), "{backend}: {open:?}");
        let secret = retained(
            &mut client,
            retain(
                &who,
                "k2",
                &observation(
                    "discovery",
                    "The payroll export runs at 02:00 with admin credentials.",
                ),
                &["payroll"],
            ),
        )
        .await;
        let secret_id = secret.memory_ids[0].clone();

        // Without the scope the payroll memory is never a candidate, even
        // when the query matches it best.
        let answer = client
            .assemble(assemble(&who, "When does the payroll export run?", &[]))
            .await
            .unwrap()
            .into_inner();
        let report = answer.recall.clone().unwrap();
        assert_eq!(report.block, "recalled_memories", "{backend}");
        assert_eq!(report.recalled_ids.len(), 3, "{backend}: {report:?}");
        assert!(!report.recalled_ids.contains(&secret_id), "{backend}");
        let text = prompt(&answer);
        assert!(!text.contains("payroll export runs"), "{backend}: {text}");
        assert!(text.contains("Ed25519"), "{backend}");
        // Wrapped as untrusted hints.
        let unit = format!("<memory id=\"memory:{}\"", open.memory_ids[0]);
        let at = text.find(&unit).unwrap_or_else(|| panic!("{backend}: {text}"));
        let tag_end = at + text[at..].find('>').unwrap();
        assert!(text[at..tag_end].contains("trust=\"untrusted\""), "{backend}");
        assert!(
            text[at..tag_end].contains("source=\"recalled hint: decision of "),
            "{backend}"
        );

        // With it, the matching memory ranks first.
        let answer = client
            .assemble(assemble(&who, "When does the payroll export run?", &["payroll"]))
            .await
            .unwrap()
            .into_inner();
        let report = answer.recall.unwrap();
        assert_eq!(
            report.recalled_ids.first(),
            Some(&secret_id),
            "{backend}: {report:?}"
        );
        assert_eq!(report.kept_ids.len(), 4, "{backend}: {report:?}");
        assert!(report.dropped_ids.is_empty(), "{backend}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_ranks_by_relevance_and_the_budget_drops_the_weakest() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("rank");
        let topics = [
            "PostgreSQL replication lag is alerted at 30 seconds.",
            "The frontend build uses Vite with React 19.",
            "Billing webhooks retry five times with exponential backoff.",
            "Logs are shipped to the central collector over TLS.",
            "The mobile app caches feature flags for an hour.",
        ];
        let mut ids = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            let r = retained(
                &mut client,
                retain(&who, &format!("t{i}"), &observation("discovery", t), &[]),
            )
            .await;
            ids.push(r.memory_ids[0].clone());
        }
        let mut req = assemble(&who, "what threshold alerts on replication lag in postgres?", &[]);
        let answer = client.assemble(req.clone()).await.unwrap().into_inner();
        let report = answer.recall.unwrap();
        assert_eq!(report.recalled_ids[0], ids[0], "{backend}: {report:?}");
        // Otherwise newest first (recency), as none of the rest matches.
        assert_eq!(
            report.recalled_ids[1..],
            [ids[4].clone(), ids[3].clone(), ids[2].clone(), ids[1].clone()],
            "{backend}"
        );

        // A tight block keeps the best and reports the rest as dropped.
        req.recall.as_mut().unwrap().max_tokens = 70;
        let answer = client.assemble(req.clone()).await.unwrap().into_inner();
        let report = answer.recall.unwrap();
        assert_eq!(report.kept_ids, [ids[0].clone()], "{backend}: {report:?}");
        assert_eq!(report.dropped_ids.len(), 4, "{backend}");
        let decision = answer
            .decisions
            .iter()
            .find(|d| d.name == "recalled_memories")
            .unwrap();
        assert!(decision.tokens_kept <= 70, "{backend}: {decision:?}");

        // max_memories keeps the best of the ranking: two of the five.
        req.recall = Some(pb::Recall {
            subject: who.clone(),
            max_memories: 2,
            ..Default::default()
        });
        let report = client
            .assemble(req.clone())
            .await
            .unwrap()
            .into_inner()
            .recall
            .unwrap();
        assert_eq!(
            report.recalled_ids,
            [ids[0].clone(), ids[4].clone()],
            "{backend}: {report:?}"
        );
        assert_eq!(report.kept_ids.len(), 2, "{backend}: {report:?}");
        // types narrow it: none of the five is a decision.
        req.recall = Some(pb::Recall {
            subject: who.clone(),
            max_memories: 2,
            types: vec!["decision".to_owned()],
            ..Default::default()
        });
        let report = client.assemble(req).await.unwrap().into_inner().recall.unwrap();
        assert!(report.recalled_ids.is_empty(), "{backend}: {report:?}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_joins_a_named_memory_block_and_refuses_other_kinds() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("join");
        retained(
            &mut client,
            retain(&who, "k", &observation("feature", "Dark mode ships in 4.2."), &[]),
        )
        .await;
        let mut req = assemble(&who, "dark mode", &[]);
        req.blocks = vec![
            pb::Block {
                name: "profile".to_owned(),
                kind: pb::BlockKind::Memory.into(),
                items: vec![pb::Item {
                    id: "pref".to_owned(),
                    content: "Prefers short answers.".to_owned(),
                    trusted: true,
                    ..Default::default()
                }],
                ..Default::default()
            },
            pb::Block {
                name: "docs".to_owned(),
                kind: pb::BlockKind::Evidence.into(),
                ..Default::default()
            },
        ];
        req.recall.as_mut().unwrap().block = "profile".to_owned();
        let answer = client.assemble(req.clone()).await.unwrap().into_inner();
        assert_eq!(answer.decisions.len(), 2, "{backend}");
        let kept = &answer.decisions[0].kept_item_ids;
        assert_eq!(kept.len(), 2, "{backend}: {kept:?}");
        assert!(kept.contains(&"pref".to_owned()), "{backend}");

        req.recall.as_mut().unwrap().block = "docs".to_owned();
        let status = client.assemble(req.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        let fields = bad_fields(&status);
        assert_eq!(fields, ["recall.block"], "{backend}");

        req.recall = Some(pb::Recall {
            subject: String::new(),
            max_memories: 100_000,
            types: vec!["gossip".to_owned()],
            ..Default::default()
        });
        let status = client.assemble(req).await.unwrap_err();
        let fields = bad_fields(&status);
        assert_eq!(
            fields,
            ["recall.max_memories", "recall.subject", "recall.types[0]"],
            "{backend}"
        );
        server.stop().await;
    }
}

/// Regression (recall once): the same fact retained twice (in another
/// layout) is recalled once, a memory that repeats an item of the request
/// is not recalled, a MEMORY_DUPLICATE warning names the ones left out by
/// id, and a retry gives the same prompt byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_gives_a_fact_retained_twice_once_and_names_the_repeat() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("once");
        let fact = "Tokens are signed with Ed25519 keys rotated weekly.";
        let mut ids = Vec::new();
        for (key, text) in [
            ("first", fact.to_owned()),
            ("again", format!("  {}\n", fact.replace(" with ", "\n  with "))),
            ("other", "Logs are shipped to the collector over TLS.".to_owned()),
            ("known", "Dark mode ships in release 4.2.".to_owned()),
        ] {
            let r = retained(
                &mut client,
                retain(&who, key, &observation("decision", &text), &[]),
            )
            .await;
            assert_eq!(r.memory_ids.len(), 1, "{backend}: {r:?}");
            ids.push(r.memory_ids[0].clone());
        }
        let mut req = assemble(&who, "How are tokens signed?", &[]);
        req.blocks = vec![pb::Block {
            name: "notes".to_owned(),
            kind: pb::BlockKind::Evidence.into(),
            items: vec![pb::Item {
                id: "release".to_owned(),
                content: "Dark mode ships in release 4.2.".to_owned(),
                ..Default::default()
            }],
            ..Default::default()
        }];
        let answer = client.assemble(req.clone()).await.unwrap().into_inner();
        let text = prompt(&answer);
        assert_eq!(text.matches("Ed25519").count(), 1, "{backend}: {text}");
        assert_eq!(text.matches("Dark mode").count(), 1, "{backend}: {text}");
        let report = answer.recall.clone().unwrap();
        let (first, again, other, known) = (&ids[0], &ids[1], &ids[2], &ids[3]);
        let recalled_fact: Vec<&String> = report
            .recalled_ids
            .iter()
            .filter(|id| *id == first || *id == again)
            .collect();
        assert_eq!(recalled_fact.len(), 1, "{backend}: {report:?}");
        assert!(report.recalled_ids.contains(other), "{backend}: {report:?}");
        assert!(!report.recalled_ids.contains(known), "{backend}: {report:?}");
        assert_eq!(warning_codes(&answer), ["MEMORY_DUPLICATE"], "{backend}");
        let message = &answer.warnings[0].message;
        let repeat = if recalled_fact[0] == first { again } else { first };
        assert!(
            message.contains(&format!("{repeat} (as memory {})", recalled_fact[0])),
            "{backend}: {message}"
        );
        assert!(
            message.contains(&format!("{known} (as item \"release\" of block \"notes\")")),
            "{backend}: {message}"
        );
        assert!(!message.contains("Ed25519"), "{backend}: {message}");

        // A retry: the same memories, in the same order, the same prompt.
        let retry = client.assemble(req).await.unwrap().into_inner();
        assert_eq!(retry.messages, answer.messages, "{backend}");
        assert_eq!(retry.recall, answer.recall, "{backend}");
        assert_eq!(retry.warnings, answer.warnings, "{backend}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_is_idempotent_strips_private_text_and_reports_bad_blocks() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("retain");
        let output = format!(
            "{} <observation><type>rumor</type><text>x</text></observation> \
             <observation><type>bugfix</type></observation> {} \
             <private>the customer's card ends 4242</private>",
            observation(
                "decision",
                "Use <private>hunter2 is the password</private>blue-green deploys."
            ),
            observation("refactor", "Split the parser & renderer; a < b now."),
        );
        let request = retain(&who, "once", &output, &[]);
        let first = retained(&mut client, request.clone()).await;
        assert_eq!(first.memory_ids.len(), 2, "{backend}: {first:?}");
        assert!(!first.replayed);
        assert_eq!(first.private_spans_removed, 2, "{backend}");
        let elements: Vec<(&str, u32)> = first
            .problems
            .iter()
            .map(|p| (p.element.as_str(), p.index))
            .collect();
        assert_eq!(
            elements,
            [("observation", 1), ("observation", 2)],
            "{backend}: {first:?}"
        );
        for p in &first.problems {
            assert!(
                output[p.offset as usize..].starts_with("<observation"),
                "{backend}: {p:?}"
            );
        }
        let again = retained(&mut client, request).await;
        assert!(again.replayed, "{backend}");
        assert_eq!(again.memory_ids, first.memory_ids, "{backend}");

        let page = client
            .list_memories(pb::ListMemoriesRequest {
                subject: who.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.memories.len(), 2, "{backend}: stored twice?");
        // Words, not the card's digits: the random hex ids may hold "4242".
        let all = format!("{page:?}");
        assert!(
            !all.contains("hunter2") && !all.contains("card ends"),
            "{backend}: {all}"
        );
        let texts: Vec<String> = page
            .memories
            .iter()
            .map(|m| match &m.content {
                Some(pb::stored_memory::Content::Observation(o)) => o.text.clone(),
                other => panic!("{backend}: {other:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [
                "Split the parser & renderer; a < b now.",
                "Use blue-green deploys."
            ],
            "{backend}"
        );

        // Structured input is checked field by field.
        let status = client
            .retain(pb::RetainRequest {
                idempotency_key: String::new(),
                subject: who.clone(),
                observations: vec![pb::Observation {
                    r#type: "gossip".to_owned(),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        let fields = bad_fields(&status);
        assert_eq!(
            fields,
            ["idempotency_key", "observations[0].text", "observations[0].type"],
            "{backend}"
        );
        server.stop().await;
    }
}

/// A value that is `keep`, with a `<private>` span naming `field` inside.
fn with_private(field: &str, keep: &str) -> String {
    let (head, tail) = keep.split_at(keep.len() / 2);
    format!("{head}<private>SECRET {field}</private>{tail}")
}

/// Regression: a `<private>` span left in a structured observation's title
/// (the `observations` form, not `model_output`) once passed the whole
/// suite. Every text field of both structured forms carries one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_spans_in_every_structured_field_are_never_stored_nor_recalled() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("structured-private");
        let request = pb::RetainRequest {
            observations: vec![pb::Observation {
                r#type: "decision".to_owned(),
                title: with_private("title", "Rotate signing keys"),
                text: with_private("text", "Signing keys rotate weekly."),
                facts: vec![with_private("fact", "Ed25519 keys")],
                files_read: vec![with_private("files_read", "src/keys.rs")],
                files_modified: vec![with_private("files_modified", "src/rotate.rs")],
            }],
            summaries: vec![pb::SessionSummary {
                request: with_private("request", "Add key rotation"),
                investigated: with_private("investigated", "The signer"),
                learned: with_private("learned", "Keys never expired"),
                completed: with_private("completed", "Weekly rotation"),
                next_steps: with_private("next_steps", "Alert on failures"),
                files_read: vec![with_private("summary files_read", "src/signer.rs")],
                files_edited: vec![with_private("files_edited", "src/rotate.rs")],
                notes: with_private("notes", "Keys rotate on Mondays"),
            }],
            ..retain(&who, "structured", "", &[])
        };
        let stored = retained(&mut client, request).await;
        assert_eq!(stored.memory_ids.len(), 2, "{backend}: {stored:?}");
        assert_eq!(stored.private_spans_removed, 13, "{backend}");

        let page = client
            .list_memories(pb::ListMemoriesRequest {
                subject: who.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(page.memories.len(), 2, "{backend}");
        let listed = format!("{page:?}");
        assert!(!listed.contains("SECRET"), "{backend}: {listed}");
        let titles: Vec<&str> = page.memories.iter().map(|m| m.title.as_str()).collect();
        assert!(titles.contains(&"Rotate signing keys"), "{backend}: {titles:?}");

        let answer = client
            .assemble(assemble(&who, "signing keys rotation", &[]))
            .await
            .unwrap()
            .into_inner();
        let text = prompt(&answer);
        assert_eq!(answer.recall.unwrap().recalled_ids.len(), 2, "{backend}");
        assert!(text.contains("Rotate signing keys"), "{backend}: {text}");
        assert!(!text.contains("SECRET"), "{backend}: {text}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_and_list_manage_a_subjects_memories_and_metrics_count_them() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("manage");
        for i in 0..5 {
            let kind = if i % 2 == 0 { "decision" } else { "bugfix" };
            retained(
                &mut client,
                retain(
                    &who,
                    &format!("m{i}"),
                    &observation(kind, &format!("Memory {i}.")),
                    &[],
                ),
            )
            .await;
        }
        let list = |token: String| pb::ListMemoriesRequest {
            subject: who.clone(),
            page_size: 2,
            page_token: token,
            principal: None,
        };
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let page = client.list_memories(list(token)).await.unwrap().into_inner();
            seen.extend(page.memories.iter().map(|m| m.title.clone()));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(
            seen,
            ["Memory 4.", "Memory 3.", "Memory 2.", "Memory 1.", "Memory 0."],
            "{backend}"
        );

        let forget = |ids: Vec<String>, subject: &str, kind: &str| pb::ForgetRequest {
            ids,
            subject: subject.to_owned(),
            r#type: kind.to_owned(),
        };
        let bugfixes = client
            .forget(forget(vec![], &who, "bugfix"))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(bugfixes.deleted, 2, "{backend}");
        let first = client
            .list_memories(list(String::new()))
            .await
            .unwrap()
            .into_inner();
        let one = client
            .forget(forget(vec![first.memories[0].id.clone()], &who, ""))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(one.deleted, 1, "{backend}");
        let rest = client
            .forget(forget(vec![], &who, ""))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(rest.deleted, 2, "{backend}");
        let status = client
            .forget(forget(vec!["1".to_owned()], &who, ""))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        let status = client.forget(forget(vec![], "", "")).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        assert_eq!(bad_fields(&status), ["subject"], "{backend}");

        client.assemble(assemble(&who, "anything", &[])).await.unwrap();
        assert!(
            server
                .counter("assembler_memories_stored_total", &[("type", "decision")])
                .await
                >= 3.0
        );
        assert!(
            server
                .counter("assembler_memories_stored_total", &[("type", "bugfix")])
                .await
                >= 2.0
        );
        assert!(
            server
                .counter("assembler_memory_recall_duration_seconds_count", &[])
                .await
                >= 1.0
        );
        assert!(
            server
                .counter("assembler_memories_deleted_total", &[("cause", "forget")])
                .await
                >= 5.0
        );
        let (_, page) = server.http_get("/metrics").await;
        assert!(page.contains("assembler_memories_recalled_total"), "{backend}");
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_memory_calls_are_failed_precondition() {
    let server = server(&["--memory-store".to_owned(), "off".to_owned()]).await;
    let mut client = server.client();
    let status = client
        .retain(retain("s", "k", &observation("decision", "x"), &[]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.get_details_error_info().unwrap().reason, "MEMORY_DISABLED");
    let status = client.assemble(assemble("s", "q", &[])).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let mut plain = assemble("s", "q", &[]);
    plain.recall = None;
    client.assemble(plain).await.unwrap();
    server.stop().await;
}

/// Kills the process right after each OK; every acknowledged memory is
/// there after a restart on the same store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_retain_survives_a_kill_right_after_ok() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db").display().to_string();
    let mut cases = vec![("sqlite", vec!["--memory-sqlite-path".to_owned(), db])];
    for (backend, flags) in backends() {
        if backend == "postgres" {
            cases.push((backend, flags));
        }
    }
    for (backend, flags) in cases {
        let args: Vec<&str> = flags.iter().map(String::as_str).collect();
        let who = subject("crash");
        let mut acknowledged = Vec::new();
        for round in 0..3 {
            let mut server = ChildServer::spawn(&args, &[]);
            let mut client = AssemblerClient::new(server.serving_channel().await);
            let page = client
                .list_memories(pb::ListMemoriesRequest {
                    subject: who.clone(),
                    page_size: 1000,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let mut ids: Vec<String> = page.memories.iter().map(|m| m.id.clone()).collect();
            ids.sort();
            let mut expected = acknowledged.clone();
            expected.sort();
            assert_eq!(
                ids, expected,
                "{backend}: round {round} lost acknowledged memories"
            );
            let r = retained(
                &mut client,
                retain(
                    &who,
                    &format!("round{round}"),
                    &observation("decision", &format!("Round {round}.")),
                    &[],
                ),
            )
            .await;
            // SIGKILL at once: no drain, no close, no checkpoint.
            server.child.kill().unwrap();
            server.child.wait().unwrap();
            acknowledged.extend(r.memory_ids);
        }
    }
}

/// A server on the SQLite file `db` with `memory` (TOML) in its [memory]
/// section; the second value keeps the configuration file.
async fn server_on(db: &std::path::Path, memory: &str) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[memory]\n{memory}")).unwrap();
    let args = ServeArgs {
        memory_sqlite_path: Some(db.to_owned()),
        config: Some(config),
        ..TestServer::args()
    };
    (TestServer::start_with(args).await, dir)
}

/// The health of the memory store as the server on `channel` reports it.
async fn health_of(channel: &Channel) -> i32 {
    HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: MEMORY_HEALTH.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

const MEMORY_HEALTH: &str = "context_assembler.v1.Memory";

fn warning_codes(r: &pb::AssembleResponse) -> Vec<&str> {
    r.warnings.iter().map(|w| w.code.as_str()).collect()
}

fn without_recall(mut r: pb::AssembleRequest) -> pb::AssembleRequest {
    r.recall = None;
    r
}

/// In a child process: `assembler_memory_store_up` is one gauge per process,
/// which every in-process server of the other tests sets too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_open_leaves_assemble_serving_and_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    // The store's directory cannot be created while a file has its name.
    let volume = dir.path().join("volume");
    std::fs::write(&volume, "not a directory").unwrap();
    let db = volume.join("memory.db");
    let server = ChildServer::spawn(&["--memory-sqlite-path", db.to_str().unwrap()], &[]);
    let channel = server.serving_channel().await;
    let mut client = AssemblerClient::new(channel.clone());
    let who = subject("unreachable");

    client
        .assemble(without_recall(assemble(&who, "q", &[])))
        .await
        .unwrap();
    let recalled = client
        .assemble(assemble(&who, "q", &[]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(warning_codes(&recalled), ["RECALL_UNAVAILABLE"]);
    assert!(recalled.recall.unwrap().recalled_ids.is_empty());

    let statuses = [
        client
            .retain(retain(&who, "k", &observation("decision", "x"), &[]))
            .await
            .unwrap_err(),
        client
            .forget(pb::ForgetRequest {
                subject: who.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
        client
            .list_memories(pb::ListMemoriesRequest {
                subject: who.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
    ];
    for status in statuses {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.get_details_retry_info().is_some(), "{status:?}");
    }
    assert_eq!(health_of(&channel).await, ServingStatus::NotServing as i32);
    let metrics = server.metrics_page().await;
    assert_eq!(
        common::metric(&metrics, "assembler_memory_store_up", &[]),
        Some(0.0)
    );

    // The volume comes back: the store opens, health says so, writes work.
    std::fs::remove_file(&volume).unwrap();
    let mut watch = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: MEMORY_HEALTH.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(m) = watch.message().await.unwrap() {
            if m.status == ServingStatus::Serving as i32 {
                return;
            }
        }
        panic!("health stream ended before the store opened");
    })
    .await
    .expect("the store reopened");
    retained(
        &mut client,
        retain(&who, "k", &observation("decision", "Tokens rotate weekly."), &[]),
    )
    .await;
    let metrics = server.metrics_page().await;
    assert_eq!(
        common::metric(&metrics, "assembler_memory_store_up", &[]),
        Some(1.0)
    );
}

/// Asks `who`'s recall of its one memory until an answer comes without a
/// warning (the store answered within the recall timeout), within 30 s
/// (else fails with `what`), and checks it recalled that memory.
async fn recalls_once_answering(client: &mut AssemblerClient<Channel>, who: &str, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = client
            .assemble(assemble(who, "Ed25519", &[]))
            .await
            .unwrap()
            .into_inner();
        if r.warnings.is_empty() {
            assert_eq!(r.recall.unwrap().recalled_ids.len(), 1, "{what}");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recall_answers_within_its_timeout_while_the_store_is_stalled() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let (server, _config) = server_on(&db, "recall_timeout_ms = 50\n").await;
    let mut client = server.client();
    let who = subject("stall");
    retained(
        &mut client,
        retain(
            &who,
            "k",
            &observation("decision", "Tokens are signed with Ed25519."),
            &[],
        ),
    )
    .await;
    // Before the stall the store answers; a busy machine may still take
    // past 50 ms once, so a degraded answer is asked again.
    recalls_once_answering(&mut client, &who, "recall before the stall").await;

    // The stall holds for about 10 s; every answer must come long before.
    let stall = SqliteStall::hold(&db);
    let started = Instant::now();
    let recalls: Vec<_> = (0..8)
        .map(|_| {
            let mut c = server.client();
            let request = assemble(&who, "Ed25519", &[]);
            tokio::spawn(async move { c.assemble(request).await })
        })
        .collect();
    for _ in 0..8 {
        client
            .assemble(without_recall(assemble(&who, "q", &[])))
            .await
            .unwrap();
    }
    for r in recalls {
        let r = r.await.unwrap().unwrap().into_inner();
        assert_eq!(warning_codes(&r), ["RECALL_UNAVAILABLE"]);
        assert!(r.recall.unwrap().recalled_ids.is_empty());
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "answers took {took:?} under a 10 s stall"
    );

    // Configured to fail instead: UNAVAILABLE, with a retry delay.
    let strict_dir = tempfile::tempdir().unwrap();
    let strict_db = strict_dir.path().join("memory.db");
    let (strict, _strict_config) = server_on(&strict_db, "recall_failure = \"fail\"\n").await;
    let strict_stall = SqliteStall::hold(&strict_db);
    let status = strict
        .client()
        .assemble(assemble(&who, "Ed25519", &[]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.get_details_retry_info().is_some());
    drop(strict_stall);
    strict.stop().await;

    // Once the stall ends, recall finds the memory again.
    drop(stall);
    recalls_once_answering(&mut client, &who, "recall did not recover").await;
    let (_, metrics) = server.http_get("/metrics").await;
    assert!(common::metric(&metrics, "assembler_memory_recall_unavailable_total", &[]).unwrap() >= 8.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_recalls_and_list_pages_are_bounded_in_bytes() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let who = subject("bytes");

        // One memory over 16 KiB is refused, naming its largest field.
        let big = "x".repeat(20_000);
        let note = |text: &str| pb::Observation {
            r#type: "decision".to_owned(),
            text: text.to_owned(),
            ..Default::default()
        };
        let status = client
            .retain(pb::RetainRequest {
                idempotency_key: format!("{who}/big"),
                subject: who.clone(),
                observations: vec![note("small"), note(&big)],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        assert_eq!(bad_fields(&status), ["observations[1].text"], "{backend}");
        // In model output, a block over it is a problem; the others are stored.
        let out = retained(
            &mut client,
            retain(
                &who,
                "blocks",
                &format!(
                    "{}{}",
                    observation("decision", &big),
                    observation("bugfix", "small")
                ),
                &[],
            ),
        )
        .await;
        assert_eq!(out.memory_ids.len(), 1, "{backend}");
        assert_eq!(out.problems.len(), 1, "{backend}");
        assert_eq!(out.problems[0].index, 0, "{backend}");

        // 320 memories of 15,000 bytes: 4.8 MB.
        for k in 0..2 {
            let observations = (0..160)
                .map(|i| note(&format!("ledger {k} {i} {}", "entry ".repeat(2_500))))
                .collect();
            client
                .retain(pb::RetainRequest {
                    idempotency_key: format!("{who}/bulk{k}"),
                    subject: who.clone(),
                    observations,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
        // A page of up to 1,000 ends at 1 MiB, and says there is more.
        let page = client
            .list_memories(pb::ListMemoriesRequest {
                subject: who.clone(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let bytes: usize = page
            .memories
            .iter()
            .map(|m| match &m.content {
                Some(pb::stored_memory::Content::Observation(o)) => o.text.len(),
                _ => 0,
            })
            .sum();
        assert!(bytes <= 1 << 20, "{backend}: a page of {bytes} bytes");
        assert!(page.memories.len() < 321, "{backend}");
        assert!(!page.next_page_token.is_empty(), "{backend}");
        // A recall loads at most 1 MiB of candidates.
        let mut request = assemble(&who, "ledger entry", &[]);
        request.recall.as_mut().unwrap().max_memories = 200;
        let r = client.assemble(request).await.unwrap().into_inner();
        let recalled = r.recall.unwrap().recalled_ids.len();
        assert!(recalled > 0, "{backend}");
        assert!(
            recalled * 15_000 <= 1 << 20,
            "{backend}: {recalled} memories recalled"
        );
        server.stop().await;
    }
}

/// Regression (issue 16, "Memory tenancy"), through the server: Forget
/// names its subject (INVALID_ARGUMENT on `subject` without one) and never
/// deletes another subject's memory, answering how many ids it did not
/// find; ListMemories shows a principal only what recall would, and says
/// how many it hid; ids are random, the same in Retain, recall reports,
/// ListMemories and Forget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_names_its_subject_and_lists_show_only_what_the_principal_may_see() {
    for (backend, flags) in backends() {
        let server = server(&flags).await;
        let mut client = server.client();
        let (alice, bob) = (subject("alice"), subject("bob"));
        let open = retained(
            &mut client,
            retain(
                &alice,
                "open",
                &observation("decision", "Open rollout plan."),
                &[],
            ),
        )
        .await
        .memory_ids;
        let eng = retained(
            &mut client,
            retain(
                &alice,
                "eng",
                &observation("decision", "Eng rollout plan."),
                &["eng"],
            ),
        )
        .await
        .memory_ids;
        let bobs = retained(
            &mut client,
            retain(&bob, "bob", &observation("decision", "Bob plan."), &[]),
        )
        .await
        .memory_ids;
        for id in open.iter().chain(&eng).chain(&bobs) {
            assert_eq!(id.len(), 32, "{backend}: {id}");
            assert!(id.parse::<u64>().is_err(), "{backend}: {id} looks like a counter");
        }
        let report = client
            .assemble(assemble(&alice, "rollout", &["eng"]))
            .await
            .unwrap()
            .into_inner()
            .recall
            .unwrap();
        let mut recalled = report.recalled_ids.clone();
        recalled.sort();
        let mut expected = vec![open[0].clone(), eng[0].clone()];
        expected.sort();
        assert_eq!(recalled, expected, "{backend}: recall reports the same ids");

        let list = |who: &str, scopes: Option<Vec<String>>| pb::ListMemoriesRequest {
            subject: who.to_owned(),
            principal: scopes.map(|scopes| pb::Principal {
                id: "p".to_owned(),
                scopes,
            }),
            ..Default::default()
        };
        let ids = |page: &pb::ListMemoriesResponse| -> Vec<String> {
            page.memories.iter().map(|m| m.id.clone()).collect()
        };
        let anonymous = client
            .list_memories(list(&alice, None))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            ids(&anonymous),
            open,
            "{backend}: no principal sees no scoped memory"
        );
        assert_eq!(anonymous.hidden, 1, "{backend}");
        let wrong = client
            .list_memories(list(&alice, Some(vec!["hr".to_owned()])))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((ids(&wrong), wrong.hidden), (open.clone(), 1), "{backend}");
        let engineer = client
            .list_memories(list(&alice, Some(vec!["eng".to_owned()])))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(ids(&engineer), [eng[0].clone(), open[0].clone()], "{backend}");
        assert_eq!(engineer.hidden, 0, "{backend}");
        let too_many = (0..=4096).map(|i| format!("s{i}")).collect();
        let status = client
            .list_memories(list(&alice, Some(too_many)))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        assert_eq!(bad_fields(&status), ["principal.scopes"], "{backend}");

        let status = client
            .forget(pb::ForgetRequest {
                ids: bobs.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{backend}");
        assert_eq!(bad_fields(&status), ["subject"], "{backend}");
        let forgotten = client
            .forget(pb::ForgetRequest {
                ids: vec![bobs[0].clone(), open[0].clone()],
                subject: alice.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((forgotten.deleted, forgotten.not_found), (1, 1), "{backend}");
        let bob_left = client.list_memories(list(&bob, None)).await.unwrap().into_inner();
        assert_eq!(
            ids(&bob_left),
            bobs,
            "{backend}: another subject's id is never deleted"
        );
        let alice_left = client
            .list_memories(list(&alice, Some(vec!["eng".to_owned()])))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(ids(&alice_left), eng, "{backend}");
        server.stop().await;
    }
}
