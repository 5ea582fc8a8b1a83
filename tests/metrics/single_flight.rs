//! Single flight through the real server: many identical cold requests at
//! once tokenize every segment once (the cache metrics it reads are each
//! server's own).

use crate::common::{TestServer, heavy_request};
use context_assembler::grpc::pb;

async fn misses(server: &TestServer, metric: &str) -> f64 {
    server.counter(metric, &[("result", "miss")]).await
}

const SEGMENTS: &str = "assembler_segment_cache_lookups_total";
const PREFIXES: &str = "assembler_prefix_cache_lookups_total";

fn request() -> pb::AssembleRequest {
    let mut req = heavy_request(42, 40, 3000);
    req.static_segments = vec![pb::Segment {
        id: "system".to_owned(),
        kind: pb::SegmentKind::System.into(),
        content: "You answer from the documents only. ".repeat(200),
    }];
    req
}

#[tokio::test]
async fn identical_cold_requests_at_once_tokenize_each_segment_once() {
    // What one request tokenizes on a cold cache.
    let single = TestServer::start().await;
    let (seg0, pre0) = (misses(&single, SEGMENTS).await, misses(&single, PREFIXES).await);
    single.client().assemble(request()).await.unwrap();
    let one_segments = misses(&single, SEGMENTS).await - seg0;
    let one_prefixes = misses(&single, PREFIXES).await - pre0;
    single.stop().await;
    assert!(one_segments > 40.0, "{one_segments}");
    assert_eq!(one_prefixes, 1.0);

    // 32 at once on another cold server: the same tokenizations, no more.
    let server = TestServer::start().await;
    let (seg0, pre0) = (misses(&server, SEGMENTS).await, misses(&server, PREFIXES).await);
    let calls: Vec<_> = (0..32)
        .map(|_| {
            let mut client = server.client();
            tokio::spawn(async move { client.assemble(request()).await })
        })
        .collect();
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.unwrap().unwrap().into_inner());
    }
    assert_eq!(misses(&server, SEGMENTS).await - seg0, one_segments);
    assert_eq!(misses(&server, PREFIXES).await - pre0, one_prefixes);
    // And every answer is the same prompt.
    for a in &answers[1..] {
        assert_eq!(a.messages, answers[0].messages);
        assert_eq!(a.usage, answers[0].usage);
    }
    server.stop().await;
}
