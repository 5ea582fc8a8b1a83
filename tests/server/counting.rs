//! Counting by the provider (issue 52) through the real server: a model
//! without a public tokenizer (`claude-sonnet-5`, generation claude-2026)
//! learns each piece's count from a stand-in of Anthropic's counting
//! endpoint, off the request path; once learned, an assembled prompt's count
//! is the provider's count of that prompt.

use std::time::{Duration, Instant};

use context_assembler::grpc::pb;

use super::common::TestServer;

#[path = "../provider_count/standin.rs"]
#[allow(dead_code)]
mod standin;

use standin::{KEY, StandIn};

const SYSTEM: &str = "You answer questions about the harbour's tide tables, briefly and with sources.";
const TURNS: [(&str, pb::Role); 4] = [
    ("When is high water on Tuesday?", pb::Role::User),
    (
        "High water on Tuesday is at 06:42 and again at 19:05, 4.1 metres.",
        pb::Role::Assistant,
    ),
    ("And the lowest tide of the week?", pb::Role::User),
    (
        "Thursday at 13:10, 0.6 metres; the chart datum is noted in table 3.",
        pb::Role::Assistant,
    ),
];
const QUERY: &str = "Is Saturday morning safe for a boat drawing 1.2 metres?";

fn request(model: &str) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: "tides".to_owned(),
        model: model.to_owned(),
        max_input_tokens: Some(20_000),
        static_segments: vec![pb::Segment {
            id: "system".to_owned(),
            kind: pb::SegmentKind::System.into(),
            content: SYSTEM.to_owned(),
        }],
        blocks: vec![pb::Block {
            name: "conversation".to_owned(),
            kind: pb::BlockKind::RecentTurns.into(),
            items: TURNS
                .iter()
                .enumerate()
                .map(|(i, (text, role))| pb::Item {
                    id: format!("t{i}"),
                    content: (*text).to_owned(),
                    role: (*role).into(),
                    trusted: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        query: QUERY.to_owned(),
        ..Default::default()
    }
}

async fn server_counting_with(standin: &StandIn) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("anthropic.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let config = dir.path().join("counting.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.anthropic.counting]\nurl = \"{}\"\napi_key_file = \"{}\"\nrequests_per_minute = 6000\ntimeout_ms = 2000\n",
            standin.anthropic_url(),
            key.display()
        ),
    )
    .unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        config: Some(config),
        ..TestServer::args()
    })
    .await;
    (dir, server)
}

#[tokio::test]
async fn once_every_piece_is_learned_a_prompt_counts_what_the_provider_counts() {
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let first = client
        .assemble(request("claude-sonnet-5"))
        .await
        .unwrap()
        .into_inner();
    let messages: Vec<String> = first.messages.iter().map(|m| m.content.clone()).collect();
    assert_eq!(messages.len(), 6, "{messages:?}");
    let turns: Vec<&str> = messages[1..].iter().map(String::as_str).collect();
    let expected = StandIn::count_with(Some(&messages[0]), None, &turns);

    // Learned in the background: the same request comes to the provider's
    // count once its pieces and the model's frames are in.
    let u = first.usage.clone().unwrap();
    assert!(!u.exact && u.tokens_estimated > 0 && u.tokens_exact == 0, "{u:?}");
    assert_eq!(u.tokens_provider + u.tokens_estimated, u.total_tokens);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut usage = u.clone();
    while usage.total_tokens != expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = client
            .assemble(request("claude-sonnet-5"))
            .await
            .unwrap()
            .into_inner();
        usage = again.usage.unwrap();
    }
    assert_eq!(
        usage.total_tokens, expected,
        "the first request's estimate was {}",
        u.total_tokens
    );
    // Every token now says it is the provider's.
    assert!(usage.exact, "{usage:?}");
    assert_eq!(
        (usage.tokens_provider, usage.tokens_estimated, usage.tokens_exact),
        (expected, 0, 0)
    );

    // Each piece went to the provider once, however often it was counted:
    // three calls measure the model's frames, then one per text.
    let calls = standin.requests();
    let pieces = calls.len() - 3;
    assert_eq!(
        pieces,
        6,
        "{:?}",
        calls.iter().map(|c| c.text()).collect::<Vec<_>>()
    );
    // Another model of the same generation needs no call for the same texts.
    let other = client
        .assemble(request("claude-opus-5"))
        .await
        .unwrap()
        .into_inner();
    assert!(other.usage.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = standin.requests().len();
    assert_eq!(
        later,
        calls.len() + 3,
        "only claude-opus-5's frames were measured"
    );
    server.stop().await;
}

#[tokio::test]
async fn with_the_provider_down_requests_answer_on_time_estimated() {
    let standin = StandIn::start().await;
    standin.set_mode(standin::Mode::Down);
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    for _ in 0..3 {
        let started = Instant::now();
        let answer = client
            .assemble(request("claude-sonnet-5"))
            .await
            .unwrap()
            .into_inner();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a request never waits for the provider"
        );
        let u = answer.usage.unwrap();
        assert!(!u.exact);
        assert_eq!((u.tokens_provider, u.tokens_estimated), (0, u.total_tokens));
    }
    // A model with a public tokenizer is exact whatever the provider does.
    let gpt = client.assemble(request("gpt-4o")).await.unwrap().into_inner();
    let u = gpt.usage.unwrap();
    assert!(u.exact);
    assert_eq!(
        (u.tokens_exact, u.tokens_provider, u.tokens_estimated),
        (u.total_tokens, 0, 0)
    );
    server.stop().await;
}
