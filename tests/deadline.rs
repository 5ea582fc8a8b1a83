//! Deadlines through the real server: an expired `grpc-timeout` answers
//! DEADLINE_EXCEEDED and the domain work stops (its own test binary, so the
//! cache metrics it reads are its own).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{TestServer, heavy_request};
use tonic::Code;

#[tokio::test]
async fn an_expired_deadline_is_deadline_exceeded_and_the_work_stops() {
    let server = TestServer::start().await;
    const ITEMS: usize = 3000;
    // How long a cold request of this size takes here (debug or release,
    // fast or slow machine), so the deadline lands inside the work: after the
    // upload and decoding, which are a small part of it.
    let timed = Instant::now();
    server
        .client()
        .assemble(heavy_request(1, ITEMS, 1000))
        .await
        .unwrap();
    let full = timed.elapsed();
    let deadline_ms = (full.as_millis() / 3).max(20);

    let before = misses(&server).await;
    // Over a bare HTTP/2 connection: tonic's client would enforce the
    // header itself and answer CANCELLED locally before the server answers.
    let (code, message) = common::raw_unary(
        server.addr,
        "/context_assembler.v1.Assembler/Assemble",
        &heavy_request(2, ITEMS, 1000),
        &[("grpc-timeout", &format!("{deadline_ms}m"))],
    )
    .await;
    assert_eq!(code, Code::DeadlineExceeded as i32, "{message}");

    // The worker gives its slot back once it notices, and it counted only a
    // part of the items.
    let mut in_flight = 1.0;
    for _ in 0..200 {
        in_flight = server.metric("assembler_in_flight_requests", &[]).await;
        if in_flight == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(in_flight, 0.0, "the cancelled work did not stop");
    let counted = misses(&server).await - before;
    eprintln!("counted {counted} of {ITEMS} items in {deadline_ms} ms of a {full:?} request");
    assert!(counted > 0.0, "the work never started: the test proves nothing");
    assert!(
        counted < ITEMS as f64,
        "counted {counted} of {ITEMS} items after the deadline"
    );
    let refused = server
        .counter(
            "assembler_requests_refused_total",
            &[("rpc", "Assemble"), ("reason", "deadline_exceeded")],
        )
        .await;
    assert_eq!(refused, 1.0);

    // A generous deadline is met.
    let mut req = tonic::Request::new(heavy_request(2, 3, 100));
    req.set_timeout(Duration::from_secs(30));
    assert!(server.client().assemble(req).await.is_ok());
    server.stop().await;
}

async fn misses(server: &TestServer) -> f64 {
    server
        .counter("assembler_segment_cache_lookups_total", &[("result", "miss")])
        .await
}
