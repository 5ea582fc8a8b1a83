//! Integration tests through the real server: status codes and structured
//! details for bad input, exact usage, health, reflection and metrics.

use crate::common::{self, TestServer, overflow_detail, violations};
use context_assembler::grpc::pb;
use context_assembler::workload::{self, Shape};
use tonic::Code;
use tonic_types::StatusExt;

fn request() -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: "it-1".to_owned(),
        model: "gpt-4o-mini".to_owned(),
        static_segments: vec![pb::Segment {
            id: "sys".to_owned(),
            kind: pb::SegmentKind::System.into(),
            content: "You answer from the documents only.".to_owned(),
        }],
        blocks: vec![pb::Block {
            name: "evidence".to_owned(),
            kind: pb::BlockKind::Evidence.into(),
            items: vec![
                pb::Item {
                    id: "d1".to_owned(),
                    content: "Refunds within 30 days.".to_owned(),
                    score: 0.9,
                    ..Default::default()
                },
                pb::Item {
                    id: "d2".to_owned(),
                    content: "Internal margin table.".to_owned(),
                    score: 0.8,
                    required_scopes: vec!["finance".to_owned()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        query: "Can I get a refund?".to_owned(),
        principal: Some(pb::Principal {
            id: "u1".to_owned(),
            scopes: vec!["support".to_owned()],
        }),
        ..Default::default()
    }
}

/// The chat formula recounted with the reference tokenizer.
fn recount(messages: &[pb::Message]) -> u32 {
    let bpe = tiktoken_rs::o200k_base_singleton();
    let role = |r: i32| match pb::Role::try_from(r).unwrap() {
        pb::Role::System => "system",
        pb::Role::User => "user",
        pb::Role::Assistant => "assistant",
        pb::Role::Tool => "tool",
        pb::Role::Unspecified => panic!("unspecified role in output"),
    };
    3 + messages
        .iter()
        .map(|m| 3 + bpe.encode_ordinary(role(m.role)).len() + bpe.encode_ordinary(&m.content).len())
        .sum::<usize>() as u32
}

#[tokio::test]
async fn assemble_returns_exact_usage_and_filters_by_permission() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let resp = client.assemble(request()).await.unwrap().into_inner();
    let usage = resp.usage.unwrap();
    assert_eq!(usage.total_tokens, recount(&resp.messages));
    assert!(usage.exact);
    assert_eq!(usage.tokenizer, "o200k_base");
    assert_eq!(resp.model, "gpt-4o");
    let d = &resp.decisions[0];
    assert_eq!(d.kept_item_ids, vec!["d1"]);
    assert_eq!(d.filtered_item_ids, vec!["d2"]);
    assert!(resp.messages.iter().all(|m| !m.content.contains("margin")));
    assert_eq!(resp.messages.last().unwrap().content, "Can I get a refund?");

    let again = client.assemble(request()).await.unwrap().into_inner();
    let cache = again.cache.unwrap();
    assert!(cache.prefix_cache_hit);
    assert_eq!(cache.prefix_hash, resp.cache.unwrap().prefix_hash);
    server.stop().await;
}

#[tokio::test]
async fn bad_requests_name_their_fields() {
    let server = TestServer::start().await;
    let mut client = server.client();

    let mut unknown_model = request();
    unknown_model.model = "llama-7b".to_owned();
    assert_eq!(
        violations(&client.assemble(unknown_model).await.unwrap_err()),
        vec!["model"]
    );

    let mut empty_query = request();
    empty_query.query = String::new();
    assert_eq!(
        violations(&client.assemble(empty_query).await.unwrap_err()),
        vec!["query"]
    );

    let mut duplicate = request();
    let copy = duplicate.blocks[0].clone();
    duplicate.blocks.push(copy);
    assert_eq!(
        violations(&client.assemble(duplicate).await.unwrap_err()),
        vec!["blocks[1].name"]
    );

    let mut min_over_max = request();
    min_over_max.blocks[0].min_tokens = 100;
    min_over_max.blocks[0].max_tokens = 10;
    assert_eq!(
        violations(&client.assemble(min_over_max).await.unwrap_err()),
        vec!["blocks[0].min_tokens"]
    );

    let mut bad_kind = request();
    bad_kind.blocks[0].kind = 0;
    assert_eq!(
        violations(&client.assemble(bad_kind).await.unwrap_err()),
        vec!["blocks[0].kind"]
    );

    let bad_count = pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding("p50k".to_owned())),
        text: "x".into(),
    };
    assert_eq!(
        violations(&client.count_tokens(bad_count).await.unwrap_err()),
        vec!["encoding"]
    );
    server.stop().await;
}

#[tokio::test]
async fn non_cuttable_overflow_is_failed_precondition_with_error_info() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let mut req = request();
    req.max_input_tokens = Some(50);
    req.blocks.push(pb::Block {
        name: "state".to_owned(),
        kind: pb::BlockKind::State.into(),
        items: vec![pb::Item {
            id: "s".to_owned(),
            content: "fact. ".repeat(200),
            ..Default::default()
        }],
        ..Default::default()
    });
    let req_blocks = req.blocks.len();
    let status = client.assemble(req).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    let info = status.get_details_error_info().expect("ErrorInfo detail");
    assert_eq!(info.reason, "BUDGET_OVERFLOW");
    assert_eq!(info.metadata.get("budget").map(String::as_str), Some("50"));
    assert_eq!(info.metadata.get("model").map(String::as_str), Some("gpt-4o"));
    let tokens: u64 = info.metadata["non_cuttable_tokens"].parse().unwrap();
    assert!(tokens > 200);
    // The breakdown: the parts add up (checked by overflow_detail), the
    // state block named by its position, the query and framing counted.
    let detail = overflow_detail(status.details()).expect("a BudgetOverflowDetail");
    assert_eq!((detail.budget, detail.non_cuttable_tokens), (50, tokens));
    let blocks: Vec<(&str, u32, i32, bool)> = (detail.blocks.iter())
        .map(|b| (b.name.as_str(), b.index, b.kind, b.cuttable))
        .collect();
    let state = u32::try_from(req_blocks - 1).unwrap();
    assert_eq!(blocks, vec![("state", state, pb::BlockKind::State as i32, false)]);
    assert!(detail.blocks[0].tokens > 200 && detail.query_tokens > 0 && detail.framing_tokens > 0);
    assert_eq!((detail.more_blocks, detail.template_tokens), (0, 0));

    let (status_line, body) = server.http_get("/metrics").await;
    assert!(status_line.contains("200"), "{status_line}");
    assert!(
        body.contains("assembler_budget_overflow_total{model=\"gpt-4o\"}"),
        "{body}"
    );
    assert!(body.contains("assembler_requests_total{rpc=\"Assemble\",code=\"FAILED_PRECONDITION\"}"));
    assert!(body.contains("assembler_request_duration_seconds_bucket{rpc=\"Assemble\",le=\"0.00005\"}"));
    let (not_found, _) = server.http_get("/other").await;
    assert!(not_found.contains("404"));
    server.stop().await;
}

#[tokio::test]
async fn count_tokens_and_list_models() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let text = "Hello <|endoftext|> world".to_owned();
    let by_model = client
        .count_tokens(pb::CountTokensRequest {
            tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4".to_owned())),
            text: text.clone().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_model.tokenizer, "cl100k_base");
    assert_eq!(
        by_model.tokens as usize,
        tiktoken_rs::cl100k_base_singleton().encode_ordinary(&text).len()
    );
    assert!(by_model.exact);

    let models = client
        .list_models(pb::ListModelsRequest {})
        .await
        .unwrap()
        .into_inner()
        .models;
    let gpt4o = models.iter().find(|m| m.name == "gpt-4o").unwrap();
    assert_eq!(gpt4o.encoding, "o200k_base");
    assert!(gpt4o.exact && gpt4o.prefix);
    assert!(models.iter().any(|m| !m.exact && m.estimate_margin_percent > 0));
    server.stop().await;
}

/// Long runs of one kind of character are where BPE pre-tokenizers
/// disagree: each is recounted with tiktoken-rs, exactly. (That they cost
/// n log n is `limits::complexity`'s `long_runs_are_counted_in_n_log_n`.)
#[tokio::test]
async fn hostile_runs_are_counted_exactly_without_panicking() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let runs = [
        " ",
        "a",
        "\n",
        "\r\n",
        "7",
        "!",
        " \n\t",
        "e\u{301}",
        "\u{1f469}\u{200d}\u{1f4bb}",
        "\u{5d0}\u{200f}",
        "\u{4e2d}",
    ];
    for (i, run) in runs.iter().enumerate() {
        let mut req = request();
        // Odd and even lengths, past tiktoken's 4 KiB-ish pieces.
        req.blocks[0].items[0].content = run.repeat(4_093 + i);
        req.blocks[0].items[1].content = format!("x{}y", run.repeat(1_000));
        req.blocks[0].items[1].required_scopes.clear();
        let resp = client.assemble(req).await.unwrap().into_inner();
        assert_eq!(
            resp.usage.unwrap().total_tokens,
            recount(&resp.messages),
            "runs of {run:?}"
        );
        assert!(
            resp.messages
                .iter()
                .any(|m| m.content.contains(&run.repeat(4_093 + i)))
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn a_large_synthetic_request_round_trips() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let req = pb::AssembleRequest::from(workload::request(Shape::new(32_000, 24), 5));
    let resp = client.assemble(req).await.unwrap().into_inner();
    let usage = resp.usage.unwrap();
    assert_eq!(usage.total_tokens, recount(&resp.messages));
    assert!(usage.total_tokens > 25_000, "{}", usage.total_tokens);
    server.stop().await;
}

#[tokio::test]
async fn health_and_reflection_v1_and_v1alpha_answer() {
    use tonic_reflection::pb::{v1, v1alpha};
    let server = TestServer::start().await;

    let mut health = tonic_health::pb::health_client::HealthClient::new(server.channel.clone());
    let overall = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        overall.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let mut alpha = v1alpha::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1alpha::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = alpha
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let msg = stream.message().await.unwrap().unwrap();
    let Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        msg.message_response
    else {
        panic!("unexpected reflection answer");
    };
    assert!(
        list.service
            .iter()
            .any(|s| s.name == "context_assembler.v1.Assembler")
    );

    let mut v1c = v1::server_reflection_client::ServerReflectionClient::new(server.channel.clone());
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = v1c
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let msg = stream.message().await.unwrap().unwrap();
    assert!(matches!(
        msg.message_response,
        Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(_))
    ));
    server.stop().await;
}

#[tokio::test]
async fn tools_in_any_key_order_give_one_prefix_hash_and_bad_tools_are_named() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let with_tools = |tools: &[&str]| {
        let mut r = request();
        r.tools = tools.iter().map(|t| (*t).to_owned()).collect();
        r
    };
    let a = client
        .assemble(with_tools(&[
            r#"{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"id":{"type":"string"}}}}}"#,
        ]))
        .await
        .unwrap()
        .into_inner();
    let b = client
        .assemble(with_tools(&[
            "{\n \"function\": {\"parameters\": {\"properties\": {\"id\": {\"type\": \"string\"}}, \"type\": \"object\"}, \"name\": \"lookup\"},\n \"type\": \"function\"\n}",
        ]))
        .await
        .unwrap()
        .into_inner();
    let none = client.assemble(request()).await.unwrap().into_inner();
    let hash = |r: &pb::AssembleResponse| r.cache.as_ref().unwrap().prefix_hash.clone();
    assert_eq!(hash(&a), hash(&b));
    assert_eq!(a.tools, b.tools);
    assert_ne!(hash(&a), hash(&none), "tools are part of the prefix");
    let usage = a.usage.unwrap();
    assert!(usage.tools_tokens > 10);
    assert!(usage.total_tokens + usage.tools_tokens <= usage.budget);
    assert_eq!(
        usage.total_tokens,
        none.usage.unwrap().total_tokens,
        "tools are not messages"
    );

    let status = client
        .assemble(with_tools(&[r#"{"ok":1}"#, "{not json", "[]"]))
        .await
        .unwrap_err();
    assert_eq!(violations(&status), ["tools[1]", "tools[2]"]);
    server.stop().await;
}

#[tokio::test]
async fn a_timestamp_in_the_system_prompt_is_warned_about_cold_and_warm() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let mut req = request();
    req.static_segments[0].content =
        "You answer from the documents only. Current time: 2026-11-22T03:05:43Z.".to_owned();
    for _ in 0..2 {
        let resp = client.assemble(req.clone()).await.unwrap().into_inner();
        let warning = resp
            .warnings
            .iter()
            .find(|w| w.code == "VOLATILE_PREFIX")
            .expect("a volatile-prefix warning");
        assert!(warning.message.contains("timestamp") && warning.message.contains("static_segments[0]"));
        assert!(
            !warning.message.contains("03:05"),
            "the value itself is not echoed"
        );
    }
    let page = server.http_get("/metrics").await.1;
    let n = common::metric(&page, "assembler_prefix_volatile_total", &[("kind", "timestamp")]);
    assert!(n >= Some(2.0), "{n:?}");
    // A stable prompt gets no such warning.
    let resp = client.assemble(request()).await.unwrap().into_inner();
    assert!(resp.warnings.iter().all(|w| w.code != "VOLATILE_PREFIX"));
    server.stop().await;
}

#[tokio::test]
async fn prefix_hash_changes_are_counted_per_family() {
    use std::io::Write as _;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[cache]\nfamilies = [\"support\", \"stable\"]\n")
        .unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        config: Some(file.path().to_owned()),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();
    let changes = |page: &str, family: &str| {
        common::metric(page, "assembler_prefix_hash_changes_total", &[("family", family)]).unwrap_or(-1.0)
    };
    let page = server.http_get("/metrics").await.1;
    assert_eq!(changes(&page, "stable"), 0.0, "configured families start at zero");
    assert_eq!(changes(&page, "other"), 0.0);
    for i in 0..5 {
        // A prompt with a per-request id: a new hash every time.
        let mut volatile = request();
        volatile.prefix_family = "support".to_owned();
        volatile.static_segments[0].content = format!("You answer from the documents. Request {i}.");
        client.assemble(volatile).await.unwrap();
        // A stable prompt: one hash.
        let mut stable = request();
        stable.prefix_family = "stable".to_owned();
        client.assemble(stable).await.unwrap();
        // An unknown family name is counted as "other", never as a label.
        let mut unknown = request();
        unknown.prefix_family = format!("tenant-{i}");
        client.assemble(unknown).await.unwrap();
    }
    let page = server.http_get("/metrics").await.1;
    assert_eq!(changes(&page, "support"), 5.0);
    assert_eq!(changes(&page, "stable"), 1.0);
    assert_eq!(changes(&page, "other"), 1.0);
    assert!(!page.contains("tenant-"), "request strings never become labels");
    server.stop().await;
}

#[tokio::test]
async fn provider_usage_reports_are_compared_with_the_sidecars_count() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let mut req = request();
    req.request_id = "feedback-1".to_owned();
    let assembled = client.assemble(req).await.unwrap().into_inner();
    let ours = assembled.usage.unwrap().total_tokens;
    let report = |id: &str, provider: &str, prompt: u32| pb::ReportUsageRequest {
        request_id: id.to_owned(),
        provider: provider.to_owned(),
        prompt_tokens: prompt,
        cached_tokens: prompt / 2,
        ..Default::default()
    };
    let exact = client
        .report_usage(report("feedback-1", "openai", ours))
        .await
        .unwrap()
        .into_inner();
    assert!(exact.matched);
    assert_eq!(exact.sidecar_tokens, ours);
    assert_eq!(exact.relative_error, 0.0);
    let unknown = client
        .report_usage(report("never-assembled", "openai", 100))
        .await
        .unwrap()
        .into_inner();
    assert!(!unknown.matched);
    let status = client
        .report_usage(report("feedback-1", "", 1))
        .await
        .unwrap_err();
    assert_eq!(violations(&status), ["provider"]);
    let page = server.http_get("/metrics").await.1;
    let prompt = common::metric(
        &page,
        "assembler_provider_prompt_tokens_total",
        &[("provider", "openai")],
    );
    assert!(prompt >= Some(f64::from(ours) + 100.0), "{prompt:?}");
    assert!(page.contains("assembler_token_count_relative_error_bucket"));
    server.stop().await;
}

#[tokio::test]
async fn an_estimate_margin_adapts_from_provider_reports() {
    use std::io::Write as _;
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(
        b"[[models]]\nname = \"estimated\"\nencoding = \"cl100k_base\"\nestimate_margin_percent = 20\n\
          estimate_margin_min_percent = 5\nestimate_margin_max_percent = 30\n\
          context_window = 100000\noutput_reserve = 1000\n",
    )
    .unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        config: Some(file.path().to_owned()),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();
    let mut last = None;
    for i in 0..20 {
        let mut req = request();
        req.model = "estimated".to_owned();
        req.request_id = format!("adapt-{i}");
        let usage = client.assemble(req).await.unwrap().into_inner().usage.unwrap();
        assert_eq!(usage.tokenizer, "estimate(cl100k_base,+20%)");
        // The provider counts 10% over the base count (ours / 1.2).
        let provider = (f64::from(usage.total_tokens) / 1.2 * 1.1).round() as u32;
        last = Some(
            client
                .report_usage(pb::ReportUsageRequest {
                    request_id: format!("adapt-{i}"),
                    provider: "anthropic".to_owned(),
                    prompt_tokens: provider,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner(),
        );
    }
    assert!(last.unwrap().matched);
    let mut req = request();
    req.model = "estimated".to_owned();
    let usage = client.assemble(req).await.unwrap().into_inner().usage.unwrap();
    let margin: u32 = usage
        .tokenizer
        .trim_start_matches("estimate(cl100k_base,+")
        .trim_end_matches("%)")
        .parse()
        .unwrap();
    assert!((11..=14).contains(&margin), "{}", usage.tokenizer);
    let page = server.http_get("/metrics").await.1;
    let gauge = common::metric(
        &page,
        "assembler_estimate_margin_percent",
        &[("model", "estimated")],
    );
    assert_eq!(gauge, Some(f64::from(margin)));
    server.stop().await;
}

#[tokio::test]
async fn every_phase_is_timed_and_the_process_is_described() {
    let server = TestServer::start().await;
    let phases = ["decode", "convert", "tokenize", "allocate", "render", "encode"];
    let count = |page: &str, phase: &str| {
        common::metric(
            page,
            "assembler_phase_duration_seconds_count",
            &[("phase", phase)],
        )
        .unwrap_or(0.0)
    };
    let (_, before) = server.http_get("/metrics").await;
    server.client().assemble(request()).await.unwrap();
    let (_, after) = server.http_get("/metrics").await;
    for phase in phases {
        // Other tests share the recorder: at least this request's one.
        assert!(count(&after, phase) >= count(&before, phase) + 1.0, "{phase}");
    }
    for gauge in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_threads",
        "assembler_runtime_alive_tasks",
    ] {
        let value = common::metric(&after, gauge, &[]).unwrap_or(-1.0);
        assert!(value > 0.0, "{gauge} = {value}");
    }
    // Typed as Prometheus's process collector types it.
    assert!(
        after.contains("# TYPE process_cpu_seconds_total counter\n"),
        "process_cpu_seconds_total is not a counter"
    );
    server.stop().await;
}

/// The trace-span series exist from the first scrape, at zero, also without
/// a collector: the alert ContextAssemblerTraceSpansDropped and the
/// dashboard read the same series on every sidecar (deploy/prometheus).
#[tokio::test]
async fn trace_span_series_start_at_zero_without_a_collector() {
    let server = TestServer::start().await;
    let (_, page) = server.http_get("/metrics").await;
    // No test of this binary configures a collector (trace export is tested
    // in `tests/metrics`): nothing moves them.
    for reason in ["queue_full", "export_failed", "too_many_phases"] {
        let dropped = common::present(
            &page,
            "assembler_trace_spans_dropped_total",
            &[("reason", reason)],
        );
        assert_eq!(dropped, 0.0, "{reason}");
    }
    assert_eq!(
        common::present(&page, "assembler_trace_spans_exported_total", &[]),
        0.0
    );
    server.stop().await;
}

#[tokio::test]
async fn a_message_that_is_not_protobuf_is_invalid_argument() {
    let server = TestServer::start().await;
    // Field 1 (request_id, a string) holding bytes that are not UTF-8.
    let not_utf8: Vec<u8> = vec![0xff, 0xfe, 0xfd];
    let (code, message) = common::raw_unary(
        server.addr,
        "/context_assembler.v1.Assembler/Assemble",
        &not_utf8,
        &[],
    )
    .await;
    assert_eq!(code, Code::InvalidArgument as i32, "{message}");
    // grpc-message is percent-encoded on the wire.
    assert!(message.starts_with("malformed%20request%20message"), "{message}");
    assert!(message.contains("AssembleRequest.request_id"), "{message}");
    server.stop().await;
}

/// Issue 36 through the wire: the plan, the fingerprint and the divergence
/// on the answer, the expectation on ReportUsage's, and their series.
#[tokio::test]
async fn a_session_learns_why_its_cache_missed() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let session = |turns: usize, system: &str| {
        let mut r = request();
        r.model = "gpt-4o".to_owned();
        // No prefix family: the family series other tests read (they share
        // this process's recorder) stay theirs.
        r.static_segments[0].content = system.repeat(300);
        r.blocks.push(pb::Block {
            name: "chat".to_owned(),
            kind: pb::BlockKind::RecentTurns.into(),
            items: (0..turns)
                .map(|i| pb::Item {
                    id: format!("t{i}"),
                    role: if i % 2 == 0 {
                        pb::Role::User
                    } else {
                        pb::Role::Assistant
                    }
                    .into(),
                    content: format!("Turn {i} about the refund."),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        r
    };
    let first = client
        .assemble(session(2, "Answer from the documents. "))
        .await
        .unwrap()
        .into_inner();
    let plan = first.cache_plan.clone().unwrap();
    assert_eq!(plan.provider, "openai");
    assert!(
        plan.cacheable_tokens >= 1024 && plan.cacheable_tokens.is_multiple_of(128),
        "{plan:?}"
    );
    assert!(!first.fingerprint.is_empty() && first.fingerprint.len() <= 512);
    assert!(first.divergence.is_none());

    let mut next = session(4, "Answer from the documents. ");
    next.request_id = "grown".to_owned();
    next.previous_fingerprint = first.fingerprint.clone();
    let grown = client.assemble(next).await.unwrap().into_inner();
    let d = grown.divergence.unwrap();
    assert_eq!(d.change(), pb::CacheChange::Appended);
    assert_eq!(d.part(), pb::PromptPart::Turn);
    assert_eq!(d.id, "t2");
    assert!(
        d.servable_tokens >= 1024 && d.servable_tokens <= d.token_offset,
        "{d:?}"
    );

    // The provider served nothing of what was expected: a miss to flag.
    let report = client
        .report_usage(pb::ReportUsageRequest {
            request_id: "grown".to_owned(),
            provider: "openai".to_owned(),
            prompt_tokens: 2000,
            cached_tokens: 0,
            diagnostic: "system_changed".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(report.matched);
    assert_eq!(report.expected_cached_tokens, d.servable_tokens);
    assert!(report.missed_expected);
    assert!(!report.prefix_flagged, "one miss is not a pattern");

    let mut edited = session(4, "Answer from the documents, politely. ");
    edited.previous_fingerprint = grown.fingerprint.clone();
    let d = client
        .assemble(edited)
        .await
        .unwrap()
        .into_inner()
        .divergence
        .unwrap();
    assert_eq!(d.change(), pb::CacheChange::SystemChanged);
    assert_eq!((d.id.as_str(), d.token_offset, d.servable_tokens), ("sys", 0, 0));

    let mut broken = session(4, "x");
    broken.previous_fingerprint = vec![0xff; 3];
    let status = client.assemble(broken).await.unwrap_err();
    assert_eq!(violations(&status), ["previous_fingerprint"]);
    let mut ttl = session(4, "x");
    ttl.cache_ttl = "1h".to_owned();
    let status = client.assemble(ttl).await.unwrap_err();
    assert_eq!(violations(&status), ["cache_ttl"], "gpt-4o offers 5m and 24h");

    let page = server.http_get("/metrics").await.1;
    let divergences = |change: &str| {
        common::metric(
            &page,
            "assembler_prompt_cache_divergences_total",
            &[("change", change), ("family", "none")],
        )
    };
    assert_eq!(divergences("appended"), Some(1.0));
    assert_eq!(divergences("system_changed"), Some(1.0));
    assert_eq!(
        divergences("tools_changed"),
        Some(0.0),
        "every change starts at zero"
    );
    let misses = common::metric(
        &page,
        "assembler_prompt_cache_expected_misses_total",
        &[("provider", "openai")],
    );
    // At least this one (the recorder is shared with the binary's other
    // tests).
    assert!(misses >= Some(1.0), "{misses:?}");
    let diagnostics = common::metric(
        &page,
        "assembler_provider_cache_diagnostics_total",
        &[("provider", "openai"), ("diagnostic", "system_changed")],
    );
    assert!(diagnostics >= Some(1.0), "{diagnostics:?}");
    server.stop().await;
}

/// An agent conversation over the wire: a tool call whose assistant turn
/// thinks (signed), its long result, then more steps; the budget holds the
/// newest steps whole only.
fn agent_request(budget: u32) -> pb::AssembleRequest {
    let turn = |id: &str, role: pb::Role, content: String| pb::Item {
        id: id.to_owned(),
        role: role.into(),
        content,
        ..Default::default()
    };
    let mut items = vec![turn(
        "task",
        pb::Role::User,
        "Find why the build fails.".to_owned(),
    )];
    for step in 0..6 {
        items.push(pb::Item {
            tool_call_ids: vec![format!("c{step}")],
            thinking: vec![pb::Thinking {
                text: format!("Step {step}: the log should say which crate failed. <b>&amp;</b>"),
                signature: format!("sig-{step}=="),
                redacted: false,
            }],
            ..turn(
                &format!("a{step}"),
                pb::Role::Assistant,
                format!("Reading part {step}."),
            )
        });
        items.push(pb::Item {
            tool_call_id: format!("c{step}"),
            tool_name: if step == 1 { "memory" } else { "read_file" }.to_owned(),
            ..turn(
                &format!("r{step}"),
                pb::Role::Tool,
                format!("error[E0{step}]: {} ", "a long line of the build log ".repeat(60)),
            )
        });
    }
    pb::AssembleRequest {
        request_id: "agent".to_owned(),
        model: "claude-sonnet-4-5".to_owned(),
        max_input_tokens: Some(budget),
        blocks: vec![pb::Block {
            name: "conversation".to_owned(),
            kind: pb::BlockKind::RecentTurns.into(),
            items,
            ..Default::default()
        }],
        query: "Take the next step.".to_owned(),
        policy: "agents".to_owned(),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_agent_conversation_is_lightened_over_the_wire_with_its_thinking_intact() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agents.toml");
    std::fs::write(&config, "[policies.agents]\nexclude_tools = [\"memory\"]\n").unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        config: Some(config),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();

    // Room for everything: nothing is lightened, every thinking block comes
    // back verbatim on its turn.
    let whole = client
        .assemble(agent_request(100_000))
        .await
        .unwrap()
        .into_inner();
    let d = &whole.decisions[0];
    assert!(d.cleared_item_ids.is_empty() && d.thinking_dropped_item_ids.is_empty());
    assert_eq!(d.tokens_cleared, 0);
    let calls: Vec<&pb::Message> = whole
        .messages
        .iter()
        .filter(|m| !m.tool_call_ids.is_empty())
        .collect();
    assert_eq!(calls.len(), 6);
    for (step, m) in calls.iter().enumerate() {
        assert_eq!(m.thinking.len(), 1);
        assert_eq!(m.thinking[0].signature, format!("sig-{step}=="));
        assert!(
            m.thinking[0].text.ends_with("<b>&amp;</b>"),
            "thinking is never escaped"
        );
    }

    // Tight: old results are cleared (never the newest, never the excluded
    // tool's), every call keeps its result, and the open cycle's thinking
    // (no user turn after the task) stays; the lightening is counted.
    let labels = [("source", "assemble"), ("outcome", "lightened")];
    let before = server.counter("assembler_compactions_total", &labels).await;
    let tight = client.assemble(agent_request(1_500)).await.unwrap().into_inner();
    let after = server.counter("assembler_compactions_total", &labels).await;
    assert!(after > before, "lightening not counted: {before} -> {after}");
    let d = &tight.decisions[0];
    assert!(!d.cleared_item_ids.is_empty(), "{d:?}");
    assert!(d.tokens_cleared > 0);
    assert!(
        !d.cleared_item_ids.contains(&"r5".to_owned()),
        "the newest result is kept"
    );
    assert!(
        !d.cleared_item_ids.contains(&"r1".to_owned()),
        "an excluded tool's result is kept"
    );
    assert!(d.thinking_dropped_item_ids.is_empty(), "the cycle is open");
    assert!(d.cleared_item_ids.iter().all(|id| d.kept_item_ids.contains(id)));
    for id in &d.cleared_item_ids {
        let call = format!("c{}", &id[1..]);
        let result = tight.messages.iter().find(|m| m.tool_call_id == call).unwrap();
        assert!(result.content.contains(&format!("{id:?}")) && !result.content.contains("build log"));
        assert!(
            tight
                .messages
                .iter()
                .any(|m| m.tool_call_ids == vec![call.clone()])
        );
    }
    assert!(tight.usage.unwrap().total_tokens <= 1_500);

    // Thinking on a user turn is refused, naming the field.
    let mut bad = agent_request(100_000);
    bad.blocks[0].items[0].thinking = vec![pb::Thinking::default()];
    assert_eq!(
        violations(&client.assemble(bad).await.unwrap_err()),
        vec!["blocks[0].items[0].thinking"]
    );
    server.stop().await;
}
