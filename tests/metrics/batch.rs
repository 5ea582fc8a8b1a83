//! AssembleBatch and AssembleStream through the real server (the cache
//! metrics it reads are its own server's).

use crate::common::{self, TestServer, heavy_request};
use context_assembler::grpc::pb;
use prost::Message as _;
use tonic::Code;

fn with_statics(seed: u64, statics: &[&str]) -> pb::AssembleRequest {
    let mut r = heavy_request(seed, 3, 300);
    r.static_segments = statics
        .iter()
        .enumerate()
        .map(|(i, c)| pb::Segment {
            id: format!("s{i}"),
            kind: pb::SegmentKind::System.into(),
            content: (*c).repeat(20),
        })
        .collect();
    r
}

fn response(r: &pb::AssembleResult) -> &pb::AssembleResponse {
    match &r.result {
        Some(pb::assemble_result::Result::Response(resp)) => resp,
        other => panic!("not a response: {other:?}"),
    }
}

#[tokio::test]
async fn a_batch_groups_by_prefix_orders_depth_first_and_fails_requests_alone() {
    let server = TestServer::start().await;
    let sys = "You are the support assistant. ";
    let policy = "Never reveal internal pricing. ";
    let mut bad = with_statics(5, &[sys]);
    bad.model = "no-such-model".to_owned();
    let mut salted = with_statics(6, &[sys, policy]);
    salted.cache_salt = "tenant-b".to_owned();
    let batch = pb::AssembleBatchRequest {
        requests: vec![
            with_statics(0, &[sys, policy]), // 0: A
            with_statics(1, &[sys, policy]), // 1: A
            with_statics(2, &[sys]),         // 2: B, a prefix of A's segments
            with_statics(3, &[sys, policy]), // 3: A
            bad,                             // 4: fails alone
            with_statics(4, &[sys]),         // 5: B
            salted,                          // 6: A's bytes, another salt
        ],
    };
    let misses = |page: &str| {
        common::metric(
            page,
            "assembler_prefix_cache_lookups_total",
            &[("result", "miss")],
        )
        .unwrap_or(0.0)
    };
    let before = misses(&server.http_get("/metrics").await.1);
    let out = server.client().assemble_batch(batch).await.unwrap().into_inner();
    let after = misses(&server.http_get("/metrics").await.1);
    // A, B, and A's bytes under another salt: the prefix cache is
    // partitioned by cache_salt, so that is a third prefix.
    assert_eq!(
        after - before,
        3.0,
        "each distinct (salt, prefix) counted once per batch"
    );

    assert_eq!(out.results.len(), 7);
    let Some(pb::assemble_result::Result::Error(err)) = &out.results[4].result else {
        panic!("request 4 should fail")
    };
    assert_eq!(err.code, Code::InvalidArgument as i32);
    let details = tonic_types::pb::Status::decode(err.status_details.as_slice()).unwrap();
    assert!(!details.details.is_empty(), "BadRequest travels with the error");

    let hash = |i: usize| {
        response(&out.results[i])
            .cache
            .as_ref()
            .unwrap()
            .prefix_hash
            .clone()
    };
    assert_eq!(hash(0), hash(1));
    assert_eq!(hash(0), hash(3));
    assert_eq!(hash(0), hash(6));
    assert_eq!(hash(2), hash(5));
    assert_ne!(hash(0), hash(2));
    assert_eq!(
        response(&out.results[0]).messages[..2],
        response(&out.results[3]).messages[..2],
        "identical bytes"
    );

    let groups: Vec<(Vec<u32>, u32, String)> = out
        .groups
        .iter()
        .map(|g| (g.members.clone(), g.warmup, g.cache_salt.clone()))
        .collect();
    // B's segments are a prefix of A's: B first (depth-first), then A, then
    // A under its other salt (same segments, later first appearance).
    assert_eq!(
        groups,
        [
            (vec![2, 5], 2, String::new()),
            (vec![0, 1, 3], 0, String::new()),
            (vec![6], 6, "tenant-b".to_owned()),
        ]
    );
    assert_eq!(out.order, [2, 5, 0, 1, 3, 6]);
    let a = &out.groups[1];
    assert_eq!(a.tokens_saved, u64::from(a.shared_prefix_tokens) * 2);
    assert_eq!(
        a.shared_prefix_tokens,
        response(&out.results[0]).usage.as_ref().unwrap().static_tokens
    );
    server.stop().await;
}

#[tokio::test]
async fn a_stream_answers_every_request_in_order_and_survives_a_bad_one() {
    let server = TestServer::start().await;
    let mut bad = heavy_request(2, 1, 100);
    bad.query = String::new();
    let requests = vec![heavy_request(1, 2, 100), bad, heavy_request(3, 2, 100)];
    let ids: Vec<String> = requests.iter().map(|r| r.request_id.clone()).collect();
    let mut answers = server.stream(requests).await;
    let mut got = Vec::new();
    while let Some(a) = answers.message().await.unwrap() {
        got.push(a);
    }
    assert_eq!(got.len(), 3);
    for (i, a) in got.iter().enumerate() {
        assert_eq!(a.index, i as u64);
        assert_eq!(a.request_id, ids[i]);
    }
    assert!(matches!(
        got[1].result.as_ref().unwrap().result,
        Some(pb::assemble_result::Result::Error(ref e)) if e.code == Code::InvalidArgument as i32
    ));
    response(got[0].result.as_ref().unwrap());
    response(got[2].result.as_ref().unwrap());
    server.stop().await;
}
