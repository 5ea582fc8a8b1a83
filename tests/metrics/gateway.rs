//! The gateway edge's series, through Envoy's processor on the real server
//! (the counts it reads are its own server's).

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::common::{self, TestServer};
use context_assembler::gateway::ext_proc::header_map;
use context_assembler::gateway::pb::ext_proc::external_processor_client::ExternalProcessorClient;
use context_assembler::gateway::pb::ext_proc::{
    HttpBody, HttpHeaders, ProcessingRequest, ProtocolConfiguration, processing_request,
};
use context_assembler::gateway::pb::mode::processing_mode::BodySendMode;

/// One buffered request through the processor; waits for both answers.
async fn once(server: &TestServer, path: &str, body: &[u8]) {
    let mut client = ExternalProcessorClient::new(server.channel.clone());
    let (tx, rx) = mpsc::channel(4);
    let mut answers = client
        .process(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(ProcessingRequest {
        request: Some(processing_request::Request::RequestHeaders(HttpHeaders {
            headers: Some(header_map(&[
                (":method", "POST"),
                (":path", path),
                ("x-context-budget", "300"),
            ])),
            end_of_stream: false,
        })),
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: BodySendMode::Buffered as i32,
            ..ProtocolConfiguration::default()
        }),
        ..ProcessingRequest::default()
    })
    .await
    .unwrap();
    let wait = Duration::from_secs(30);
    tokio::time::timeout(wait, answers.message())
        .await
        .unwrap()
        .unwrap();
    tx.send(ProcessingRequest {
        request: Some(processing_request::Request::RequestBody(HttpBody {
            body: Bytes::copy_from_slice(body),
            end_of_stream: true,
        })),
        ..ProcessingRequest::default()
    })
    .await
    .unwrap();
    tokio::time::timeout(wait, answers.message())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn fits_passes_and_refusals_are_counted_by_api_outcome_and_reason() {
    let server = TestServer::start().await;
    let count = |page: &str, outcome: &str, reason: &str| {
        common::metric(
            page,
            "assembler_gateway_requests_total",
            &[
                ("api", "chat_completions"),
                ("outcome", outcome),
                ("reason", reason),
            ],
        )
        .unwrap_or(-1.0)
    };
    let page = server.http_get("/metrics").await.1;
    // Started at zero, before any request.
    assert_eq!(count(&page, "passed", "unknown_model"), 0.0);
    assert_eq!(count(&page, "refused", "context_length_exceeded"), 0.0);
    let fitted = count(&page, "fitted", "none");
    let cut = common::metric(
        &page,
        "assembler_gateway_tokens_cut_total",
        &[("api", "chat_completions")],
    )
    .unwrap();
    let streams = common::metric(
        &page,
        "assembler_requests_total",
        &[("rpc", "ExtProc"), ("code", "OK")],
    )
    .unwrap();

    let turns: Vec<String> = (0..20)
        .map(|i| {
            format!(r#"{{"role":"user","content":"turn {i} says a few words about refunds and cards"}}"#)
        })
        .collect();
    let long = format!(r#"{{"model":"gpt-4o","messages":[{}]}}"#, turns.join(","));
    once(&server, "/v1/chat/completions", long.as_bytes()).await;
    once(
        &server,
        "/v1/chat/completions",
        br#"{"model":"nope","messages":[]}"#,
    )
    .await;
    let big = format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"system","content":"{}"}},{{"role":"user","content":"x"}}]}}"#,
        "w ".repeat(2000)
    );
    once(&server, "/v1/chat/completions", big.as_bytes()).await;

    // The streams are recorded when they end: wait for the three.
    let mut page = String::new();
    for _ in 0..100 {
        page = server.http_get("/metrics").await.1;
        let now = common::metric(
            &page,
            "assembler_requests_total",
            &[("rpc", "ExtProc"), ("code", "OK")],
        )
        .unwrap_or(0.0);
        if now >= streams + 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(count(&page, "fitted", "none"), fitted + 1.0);
    assert_eq!(count(&page, "passed", "unknown_model"), 1.0);
    assert_eq!(count(&page, "refused", "context_length_exceeded"), 1.0);
    let now = common::metric(
        &page,
        "assembler_gateway_tokens_cut_total",
        &[("api", "chat_completions")],
    )
    .unwrap();
    assert!(now > cut, "{now} > {cut}");
    let now = common::metric(
        &page,
        "assembler_requests_total",
        &[("rpc", "ExtProc"), ("code", "OK")],
    )
    .unwrap();
    assert_eq!(now, streams + 3.0);
    server.stop().await;
}
