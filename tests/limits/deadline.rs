//! Deadlines through the real server: an expired `grpc-timeout` answers
//! DEADLINE_EXCEEDED and the domain work stops (the cache metrics it reads
//! are its own server's).
//!
//! No clock decides the verdict: the test looks for a deadline that lands
//! inside the work by halving and doubling it, and reads from a counter (the
//! items counted) whether it did. A server that never stops cancelled work
//! counts every item at every deadline and fails; one that ignores deadlines
//! answers OK at every deadline and fails.

use std::time::Duration;

use crate::common::{self, TestServer, heavy_request};
use tonic::Code;

const ITEMS: usize = 3000;
/// Deadlines tried before the test gives up finding one inside the work.
const ATTEMPTS: u64 = 12;

#[tokio::test]
async fn an_expired_deadline_is_deadline_exceeded_and_the_work_stops() {
    let server = TestServer::start().await;
    let refused_before = refused(&server).await;
    let mut deadline_ms: u64 = 40;
    let mut exceeded = 0.0;
    let mut tried = Vec::new();
    let mut found = false;
    for attempt in 0..ATTEMPTS {
        let before = misses(&server).await;
        // Over a bare HTTP/2 connection: tonic's client would enforce the
        // header itself and answer CANCELLED locally before the server
        // answers. A new seed each time: no cache answers the items.
        let (code, message) = common::raw_unary(
            server.addr,
            "/context_assembler.v1.Assembler/Assemble",
            &heavy_request(2 + attempt, ITEMS, 1000),
            &[("grpc-timeout", &format!("{deadline_ms}m"))],
        )
        .await;
        // The worker gives its slot back once it notices; only then is the
        // count final.
        idle(&server).await;
        let counted = misses(&server).await - before;
        tried.push(format!("{deadline_ms} ms: code {code}, counted {counted}"));
        if code == Code::Ok as i32 {
            // The whole request fit in the deadline: shorter.
            deadline_ms = (deadline_ms / 2).max(1);
            continue;
        }
        assert_eq!(code, Code::DeadlineExceeded as i32, "{message}");
        exceeded += 1.0;
        if counted == 0.0 {
            // Expired before the work began: longer.
            deadline_ms *= 2;
        } else if counted < ITEMS as f64 {
            found = true;
            break;
        } else {
            // Every item counted: the work ended at the deadline, or did not
            // stop. A shorter deadline tells which.
            deadline_ms = (deadline_ms * 2 / 3).max(1);
        }
    }
    assert!(
        found,
        "no deadline stopped the work part way (of {ITEMS} items): {tried:#?}"
    );
    eprintln!("{tried:?}");
    assert_eq!(
        refused(&server).await - refused_before,
        exceeded,
        "each expired deadline is counted once"
    );

    // A generous deadline is met.
    let mut req = tonic::Request::new(heavy_request(1, 3, 100));
    req.set_timeout(Duration::from_secs(30));
    assert!(server.client().assemble(req).await.is_ok());
    server.stop().await;
}

/// Waits (10 s at most) until no request holds a work slot.
async fn idle(server: &TestServer) {
    for _ in 0..200 {
        if server.metric("assembler_in_flight_requests", &[]).await == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the cancelled work did not stop");
}

async fn refused(server: &TestServer) -> f64 {
    server
        .counter(
            "assembler_requests_refused_total",
            &[("rpc", "Assemble"), ("reason", "deadline_exceeded")],
        )
        .await
}

async fn misses(server: &TestServer) -> f64 {
    server
        .counter("assembler_segment_cache_lookups_total", &[("result", "miss")])
        .await
}
