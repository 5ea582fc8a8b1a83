//! Where prompt tokens came from, by model (issue 52), through the real
//! server (the counts it reads are its own server's).

use crate::common::{TestServer, heavy_request};

const SERIES: &str = "assembler_prompt_tokens_by_source_total";

/// The series this test moves: gpt-4o's exact tokens, claude-sonnet-5's
/// estimated and provider tokens.
async fn read(server: &TestServer) -> [f64; 3] {
    let mut out = [0.0; 3];
    let series = [
        ("gpt-4o", "exact"),
        ("claude-sonnet-5", "estimated"),
        ("claude-sonnet-5", "provider"),
    ];
    for (slot, (model, source)) in out.iter_mut().zip(series) {
        *slot = server
            .counter(SERIES, &[("model", model), ("source", source)])
            .await;
    }
    out
}

#[tokio::test]
async fn prompt_tokens_are_counted_by_model_and_source() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let before = read(&server).await;
    let mut gpt = heavy_request(3, 3, 200);
    gpt.model = "gpt-4o".to_owned();
    let mut claude = gpt.clone();
    claude.model = "claude-sonnet-5".to_owned();
    let g = client.assemble(gpt).await.unwrap().into_inner().usage.unwrap();
    let c = client.assemble(claude).await.unwrap().into_inner().usage.unwrap();
    assert_eq!(g.tokens_exact, g.total_tokens);
    assert_eq!(
        c.tokens_estimated, c.total_tokens,
        "no provider counting configured"
    );
    let after = read(&server).await;
    assert_eq!(after[0] - before[0], f64::from(g.total_tokens));
    assert_eq!(after[1] - before[1], f64::from(c.total_tokens));
    assert_eq!(after[2], before[2], "nothing the provider counted");
    server.stop().await;
}
