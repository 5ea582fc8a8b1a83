//! Limits and load shedding through the real server: request size (refused
//! from the frame header), blocks and items, the concurrency limit, and
//! hostile input that must not stall other requests.

use crate::common::{self, TestServer, heavy_request, reason};
use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb;
use tonic::Code;
use tonic_types::StatusExt;

const REFUSED: &str = "assembler_requests_refused_total";

async fn refused(server: &TestServer, rpc: &str, why: &str) -> f64 {
    server.counter(REFUSED, &[("rpc", rpc), ("reason", why)]).await
}

#[tokio::test]
async fn an_oversized_request_is_resource_exhausted_by_default_limit() {
    let server = TestServer::start().await;
    let before = refused(&server, "Assemble", "request_too_large").await;
    // Default limit: 4 MiB. One 5 MiB item.
    let req = heavy_request(1, 1, 5 << 20);
    let status = server.client().assemble(req).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), "REQUEST_TOO_LARGE");
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get("limit").map(String::as_str), Some("4194304"));
    assert_eq!(
        refused(&server, "Assemble", "request_too_large").await - before,
        1.0
    );
    // The connection is still good for the next request.
    let ok = server.client().assemble(heavy_request(2, 2, 1000)).await;
    assert!(ok.is_ok(), "{ok:?}");
    server.stop().await;
}

#[tokio::test]
async fn size_block_and_item_limits_are_configurable() {
    let server = TestServer::start_with(ServeArgs {
        max_request_bytes: Some(64 * 1024),
        max_blocks: Some(2),
        max_items: Some(5),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();
    let counts = [
        ("Assemble", "request_too_large"),
        ("CountTokens", "request_too_large"),
        ("Assemble", "too_many_items"),
        ("Assemble", "too_many_blocks"),
    ];
    let mut before = Vec::new();
    for (rpc, why) in counts {
        before.push(refused(&server, rpc, why).await);
    }

    let status = client
        .assemble(heavy_request(1, 1, 100 * 1024))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), "REQUEST_TOO_LARGE");
    let status = client
        .count_tokens(pb::CountTokensRequest {
            text: "x".repeat(100 * 1024).into(),
            tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned())),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);

    let status = client.assemble(heavy_request(2, 6, 100)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), "TOO_MANY_ITEMS");

    let mut req = heavy_request(3, 1, 100);
    for i in 0..2 {
        let mut b = req.blocks[0].clone();
        b.name = format!("more-{i}");
        b.items.clear();
        req.blocks.push(b);
    }
    let status = client.assemble(req).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), "TOO_MANY_BLOCKS");

    // At the limits exactly: accepted.
    assert!(client.assemble(heavy_request(4, 5, 100)).await.is_ok());

    for ((rpc, why), before) in counts.into_iter().zip(before) {
        assert_eq!(refused(&server, rpc, why).await - before, 1.0, "{rpc} {why}");
    }
    server.stop().await;
}

/// The code of one part's outcome: OK, or its error's code.
fn part_code(result: Option<pb::AssembleResult>) -> i32 {
    match result.and_then(|r| r.result) {
        Some(pb::assemble_result::Result::Response(_)) => 0,
        Some(pb::assemble_result::Result::Error(e)) => e.code,
        None => -1,
    }
}

#[tokio::test]
async fn a_stream_message_or_a_batch_request_over_the_limits_fails_alone() {
    let server = TestServer::start_with(ServeArgs {
        max_items: Some(5),
        max_batch_requests: Some(3),
        ..TestServer::args()
    })
    .await;
    let mut client = server.client();
    let before = refused(&server, "AssembleStream", "too_many_items").await;
    let messages = vec![heavy_request(1, 6, 100), heavy_request(2, 5, 100)];
    let mut answers = client
        .assemble_stream(tokio_stream::iter(messages))
        .await
        .unwrap()
        .into_inner();
    let first = answers.message().await.unwrap().unwrap();
    assert_eq!(part_code(first.result), Code::ResourceExhausted as i32);
    let second = answers.message().await.unwrap().unwrap();
    assert_eq!(part_code(second.result), 0);
    assert_eq!(
        refused(&server, "AssembleStream", "too_many_items").await - before,
        1.0
    );

    let before = refused(&server, "AssembleBatch", "too_many_items").await;
    let batch = pb::AssembleBatchRequest {
        requests: vec![heavy_request(3, 5, 100), heavy_request(4, 6, 100)],
    };
    let out = client.assemble_batch(batch).await.unwrap().into_inner();
    let codes: Vec<i32> = out.results.into_iter().map(|r| part_code(Some(r))).collect();
    assert_eq!(codes, [0, Code::ResourceExhausted as i32]);
    assert_eq!(
        refused(&server, "AssembleBatch", "too_many_items").await - before,
        1.0
    );

    // A batch over its size is refused whole, before it is decoded.
    let before = refused(&server, "AssembleBatch", "too_many_requests").await;
    let batch = pb::AssembleBatchRequest {
        requests: (0..4).map(|k| heavy_request(10 + k, 1, 10)).collect(),
    };
    let status = client.assemble_batch(batch).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(reason(&status), "TOO_MANY_REQUESTS");
    assert_eq!(
        refused(&server, "AssembleBatch", "too_many_requests").await - before,
        1.0
    );
    server.stop().await;
}

#[tokio::test]
async fn over_the_concurrency_limit_requests_are_shed_not_queued() {
    let server = TestServer::start_with(ServeArgs {
        max_concurrency: Some(1),
        ..TestServer::args()
    })
    .await;
    // Shed by the work slot or by the upload budget (one request's worth of
    // decoded bytes here): both are OVERLOADED.
    let shed_total = async |server: &TestServer| {
        refused(server, "Assemble", "concurrency").await + refused(server, "Assemble", "upload_budget").await
    };
    let before = shed_total(&server).await;
    // Cold requests big enough to overlap: each tokenizes ~600 KB.
    let calls = (0..12u64).map(|seed| {
        let mut client = server.client();
        tokio::spawn(async move { client.assemble(heavy_request(100 + seed, 60, 10_000)).await })
    });
    let mut ok = 0;
    let mut shed = 0;
    for call in calls.collect::<Vec<_>>() {
        match call.await.unwrap() {
            Ok(_) => ok += 1,
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                assert_eq!(reason(&s), "OVERLOADED");
                assert!(
                    s.get_details_retry_info().is_some(),
                    "tells the client to back off"
                );
                shed += 1;
            }
        }
    }
    assert!(ok >= 1 && shed >= 1, "ok={ok} shed={shed}");
    assert_eq!(shed_total(&server).await - before, f64::from(shed));
    // Every permit came back: the next request is admitted.
    assert!(server.client().assemble(heavy_request(7, 1, 100)).await.is_ok());
    assert_eq!(server.metric("assembler_in_flight_requests", &[]).await, 0.0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pathological_input_neither_crashes_nor_blocks_others() {
    let server = TestServer::start().await;
    // Just under 4 MiB of one character, and of alternating whitespace: the
    // worst cases for regex pre-tokenization and BPE merging.
    let huge = |content: String| {
        let mut req = heavy_request(9, 1, 10);
        req.blocks[0].items[0].content = content;
        req
    };
    let mut a = server.client();
    let mut b = server.client();
    let big_a = tokio::spawn(async move { a.assemble(huge("a".repeat(4_000_000))).await });
    let big_b = tokio::spawn(async move { b.assemble(huge(" \n\t".repeat(1_300_000))).await });
    // Both hold a work slot (uploaded and decoded, now counted)...
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.metric("assembler_in_flight_requests", &[]).await < 2.0 {
        assert!(
            std::time::Instant::now() < deadline && !big_a.is_finished() && !big_b.is_finished(),
            "the pathological requests were never in flight together"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // ...and a small request is answered before either of them: an order,
    // not a clock (one costs hundreds of small ones, so a small request
    // that queued behind them, or a runtime thread they blocked, would come
    // back after them).
    let mut client = server.client();
    let r = client.assemble(heavy_request(199, 3, 200)).await;
    assert!(r.is_ok(), "{r:?}");
    assert!(
        !big_a.is_finished() && !big_b.is_finished(),
        "a small request waited for the pathological ones"
    );
    // More small requests are answered while they finish.
    for seed in 0..20 {
        let r = client.assemble(heavy_request(200 + seed, 3, 200)).await;
        assert!(r.is_ok(), "{r:?}");
    }
    for big in [big_a, big_b] {
        let r = big.await.unwrap();
        assert!(r.is_ok(), "{r:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_stalled_upload_holds_no_work_slot() {
    let server = TestServer::start_with(ServeArgs {
        max_concurrency: Some(1),
        ..TestServer::args()
    })
    .await;
    // Declares 64 KiB, sends 16 bytes, stalls.
    let (upload, _answer) = common::stalled_upload(
        server.addr,
        "/context_assembler.v1.Assembler/Assemble",
        64 * 1024,
        16,
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    // The only work slot is free: requests are served, not shed.
    for seed in 0..3 {
        let r = server.client().assemble(heavy_request(300 + seed, 2, 200)).await;
        assert!(r.is_ok(), "{r:?}");
    }
    assert_eq!(server.metric("assembler_in_flight_requests", &[]).await, 0.0);
    // Ending the upload lets the drain finish at once.
    drop(upload);
    server.stop().await;
}

#[tokio::test]
async fn at_the_connection_limit_new_connections_fail_fast() {
    let server = TestServer::start_with(ServeArgs {
        max_connections: Some(2),
        ..TestServer::args()
    })
    .await;
    let before = server.counter("assembler_connections_refused_total", &[]).await;
    // The test server's own channel holds one connection; one more idles.
    let idle = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let third = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        pb::assembler_client::AssemblerClient::new(channel)
            .list_models(pb::ListModelsRequest {})
            .await
            .map(|_| ())
            .map_err(|s| s.to_string())
    })
    .await;
    let refused_fast = matches!(third, Ok(Err(_)));
    assert!(
        refused_fast,
        "the third connection was not refused promptly: {third:?}"
    );
    assert!(server.counter("assembler_connections_refused_total", &[]).await > before);
    // The connections inside the limit still work.
    assert!(
        server
            .client()
            .list_models(pb::ListModelsRequest {})
            .await
            .is_ok()
    );
    drop(idle);
    server.stop().await;
}

#[tokio::test]
async fn a_scrape_that_never_sends_its_headers_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    // Half a request line, then nothing: the connection must not stay open.
    let mut idle = tokio::net::TcpStream::connect(server.metrics).await.unwrap();
    idle.write_all(b"GET /metr").await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        context_assembler::server::METRICS_HEADER_TIMEOUT * 6,
        idle.read_to_end(&mut rest),
    )
    .await;
    assert!(
        closed.is_ok(),
        "the metrics listener kept a connection with no headers open for six times its timeout"
    );
    // Scrapes still work.
    let (status, _) = server.http_get("/metrics").await;
    assert!(status.contains("200"), "{status}");
    server.stop().await;
}
