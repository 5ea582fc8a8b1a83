//! Trace export through the real server to a real OTLP/gRPC receiver (the
//! `opentelemetry-proto` trace service on 127.0.0.1:0): one server span per
//! call continuing the caller's `traceparent`, phase spans as its children
//! within its time, ids and counts as attributes, and no prompt content
//! anywhere in what is exported. With the collector down, calls succeed and
//! the spans that do not fit the queue are counted as dropped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{self, TestServer};
use context_assembler::grpc::pb;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use tonic::metadata::MetadataValue;

/// Collects every export request it receives.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Serves on 127.0.0.1:0; returns the endpoint.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// Waits (at most 30 s) until `done` holds for the spans received.
    async fn wait_for(&self, what: &str, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(Instant::now() < until, "timed out waiting for {what}: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A marker no id or label could contain by chance.
const MARKER: &str = "Zq7MARKERxk3";

/// An Assemble request with the marker in every text field, ids included
/// where they are content-like (query, contents, sources, tools).
fn marked_request(id: &str) -> pb::AssembleRequest {
    let m = |field: &str| format!("{MARKER} {field} text.");
    pb::AssembleRequest {
        request_id: id.to_owned(),
        model: "gpt-4o-mini".to_owned(),
        static_segments: vec![pb::Segment {
            id: "sys".to_owned(),
            kind: pb::SegmentKind::System.into(),
            content: m("system"),
        }],
        blocks: vec![pb::Block {
            name: "evidence".to_owned(),
            kind: pb::BlockKind::Evidence.into(),
            items: vec![
                pb::Item {
                    id: "d1".to_owned(),
                    content: m("item one"),
                    score: 0.9,
                    source: m("source"),
                    ..Default::default()
                },
                pb::Item {
                    id: "d2".to_owned(),
                    content: m("item two"),
                    score: 0.8,
                    required_scopes: vec!["finance".to_owned()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        query: m("query"),
        principal: Some(pb::Principal {
            id: "u1".to_owned(),
            scopes: vec!["support".to_owned()],
        }),
        session_id: "s1".to_owned(),
        ..Default::default()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::IntValue(n)) => *n,
        other => panic!("{key} is {other:?} on {}", span.name),
    }
}

fn string<'a>(span: &'a Span, key: &str) -> &'a str {
    match attr(span, key) {
        Some(Value::StringValue(s)) => s,
        other => panic!("{key} is {other:?} on {}", span.name),
    }
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

fn with_traceparent<T>(message: T, traceparent: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("traceparent", MetadataValue::try_from(traceparent).unwrap());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_spans_continuing_the_callers_trace_with_phase_children_and_no_content() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        otlp_endpoint: Some(endpoint),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let answer = client
        .assemble(with_traceparent(marked_request("otel-1"), &traceparent))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.messages.iter().any(|m| m.content.contains(MARKER)));
    let batch = pb::AssembleBatchRequest {
        requests: vec![marked_request("otel-b1"), marked_request("otel-b2")],
    };
    client
        .assemble_batch(with_traceparent(batch, &traceparent))
        .await
        .unwrap();
    // A stream: one span, a phase child per phase of each message.
    let messages = vec![marked_request("otel-s1"), marked_request("otel-s2")];
    let mut answers = client
        .assemble_stream(with_traceparent(tokio_stream::iter(messages), &traceparent))
        .await
        .unwrap()
        .into_inner();
    let mut streamed = 0;
    while let Some(a) = answers.message().await.unwrap() {
        let result = a.result.and_then(|r| r.result);
        assert!(
            matches!(result, Some(pb::assemble_result::Result::Response(_))),
            "{result:?}"
        );
        streamed += 1;
    }
    assert_eq!(streamed, 2);
    // An invalid traceparent starts a new trace; the call still succeeds.
    client
        .assemble(with_traceparent(marked_request("otel-2"), "00-XYZ-bad-01"))
        .await
        .unwrap();
    // A refused call is a span too, with its code.
    let mut unknown = marked_request("otel-3");
    unknown.model = "no-such-model".to_owned();
    let refused = client.assemble(unknown).await.unwrap_err();

    let rpc = |s: &Span| s.kind == 2;
    let spans = receiver
        .wait_for("five server spans", |spans| {
            spans.iter().filter(|s| rpc(s)).count() >= 5
        })
        .await;
    let servers: Vec<&Span> = spans.iter().filter(|s| rpc(s)).collect();
    let assemble = servers
        .iter()
        .find(|s| attr(s, "context_assembler.request_id") == Some(&Value::StringValue("otel-1".into())))
        .expect("the Assemble span");
    assert_eq!(assemble.name, "context_assembler.v1.Assembler/Assemble");
    assert_eq!(hex(&assemble.trace_id), TRACE_ID);
    assert_eq!(hex(&assemble.parent_span_id), CALLER_SPAN);
    assert_eq!(string(assemble, "rpc.system"), "grpc");
    assert_eq!(string(assemble, "rpc.service"), "context_assembler.v1.Assembler");
    assert_eq!(string(assemble, "rpc.method"), "Assemble");
    assert_eq!(int(assemble, "rpc.grpc.status_code"), 0);
    assert_eq!(string(assemble, "context_assembler.model"), "gpt-4o-mini");
    assert_eq!(int(assemble, "context_assembler.blocks"), 1);
    let usage = answer.usage.as_ref().unwrap();
    assert_eq!(int(assemble, "context_assembler.budget"), i64::from(usage.budget));
    assert_eq!(
        int(assemble, "context_assembler.tokens.total"),
        i64::from(usage.total_tokens)
    );
    assert_eq!(
        string(assemble, "context_assembler.prefix_hash"),
        answer.cache.as_ref().unwrap().prefix_hash
    );
    assert_eq!(int(assemble, "context_assembler.items.kept"), 1);

    // Its phases: children within its time, every domain phase present.
    let children: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == assemble.span_id)
        .collect();
    let names: Vec<&str> = children.iter().map(|s| s.name.as_str()).collect();
    for phase in ["decode", "convert", "tokenize", "allocate", "render", "encode"] {
        assert!(names.contains(&phase), "no {phase} span among {names:?}");
    }
    for child in &children {
        assert_eq!(child.trace_id, assemble.trace_id);
        assert_eq!(child.kind, 1, "{} is internal", child.name);
        assert!(
            child.start_time_unix_nano >= assemble.start_time_unix_nano
                && child.end_time_unix_nano <= assemble.end_time_unix_nano
                && child.start_time_unix_nano <= child.end_time_unix_nano,
            "{} is outside its call: {child:?} in {assemble:?}",
            child.name
        );
    }

    let batch = servers
        .iter()
        .find(|s| s.name.ends_with("/AssembleBatch"))
        .expect("the batch span");
    assert_eq!(hex(&batch.trace_id), TRACE_ID);
    assert_eq!(int(batch, "context_assembler.batch.requests"), 2);
    let batch_phases = spans
        .iter()
        .filter(|s| s.parent_span_id == batch.span_id && s.name == "tokenize")
        .count();
    assert_eq!(batch_phases, 2, "one tokenize per member");

    let stream = servers
        .iter()
        .find(|s| s.name.ends_with("/AssembleStream"))
        .expect("the stream span");
    assert_eq!(hex(&stream.trace_id), TRACE_ID);
    let stream_phases = |name: &str| {
        spans
            .iter()
            .filter(|s| s.parent_span_id == stream.span_id && s.name == name)
            .count()
    };
    for phase in ["decode", "tokenize", "allocate", "render", "encode"] {
        assert_eq!(stream_phases(phase), 2, "one {phase} per message of the stream");
    }

    let fresh = servers
        .iter()
        .find(|s| attr(s, "context_assembler.request_id") == Some(&Value::StringValue("otel-2".into())))
        .expect("the span of the call with a bad traceparent");
    assert_ne!(hex(&fresh.trace_id), TRACE_ID);
    assert!(fresh.parent_span_id.is_empty(), "a new root");
    assert_eq!(fresh.trace_id.len(), 16);
    assert_ne!(fresh.trace_id, vec![0; 16]);

    let refused_span = servers
        .iter()
        .find(|s| int(s, "rpc.grpc.status_code") != 0)
        .expect("the refused call's span");
    assert_eq!(
        int(refused_span, "rpc.grpc.status_code"),
        i64::from(refused.code() as i32)
    );

    // No content anywhere: names, attributes, events, links, resource.
    let requests = receiver.0.lock().unwrap().clone();
    for r in &requests {
        let bytes = r.encode_to_vec();
        assert!(
            !bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
            "prompt content exported: {r:#?}"
        );
    }
    let resource = requests[0].resource_spans[0].resource.as_ref().unwrap();
    assert!(resource.attributes.iter().any(|kv| kv.key == "service.name"
        && kv.value.as_ref().and_then(|v| v.value.as_ref())
            == Some(&Value::StringValue("context-assembler".into()))));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_still_queued_at_shutdown_are_flushed_by_the_drain() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        otlp_endpoint: Some(endpoint),
        ..TestServer::args()
    })
    .await;
    server.client().assemble(marked_request("flushed")).await.unwrap();
    // Stopped at once: before the export interval has passed, so only the
    // drain's flush can have sent the span.
    server.stop().await;
    let received = receiver.spans();
    assert!(
        received
            .iter()
            .any(|s| attr(s, "context_assembler.request_id") == Some(&Value::StringValue("flushed".into()))),
        "{received:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_calls_succeed_and_dropped_spans_are_counted() {
    // A port that was just free: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        config.path(),
        "[memory]\nrecall_timeout_ms = 10000\n[telemetry]\nmax_queue_spans = 16\n",
    )
    .unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        otlp_endpoint: Some(endpoint),
        config: Some(config.path().to_owned()),
        ..TestServer::args()
    })
    .await;
    let lost = |page: &str, reason: &str| {
        common::counter(page, "assembler_trace_spans_dropped_total", &[("reason", reason)])
    };
    let (_, page) = server.http_get("/metrics").await;
    let full_before = lost(&page, "queue_full");
    let failed_before = lost(&page, "export_failed");
    let ok = |page: &str| {
        common::counter(
            page,
            "assembler_requests_total",
            &[("rpc", "Assemble"), ("code", "OK")],
        )
    };
    let ok_before = ok(&page);
    let mut client = server.client();
    for k in 0..20 {
        client
            .assemble(marked_request(&format!("down-{k}")))
            .await
            .unwrap();
    }
    // About eight spans a call: two calls fill the queue of sixteen, which
    // is not exported before the export interval has passed; the export
    // then fails. Every span is lost, and counted.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, page) = server.http_get("/metrics").await;
        let full = lost(&page, "queue_full") - full_before;
        let failed = lost(&page, "export_failed") - failed_before;
        if full > 0.0 && full + failed >= 20.0 * 7.0 {
            assert_eq!(ok(&page) - ok_before, 20.0);
            break;
        }
        assert!(
            Instant::now() < until,
            "spans lost: {full} (queue full) + {failed} (export failed)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}
