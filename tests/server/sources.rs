//! Every count says where it came from (issue 52), through the real server:
//! `CountTokens` answers the tokens counted exactly, by the provider and
//! estimated, as `Usage` does. A public tokenizer's count is all exact; a
//! Claude model's text is estimated at first sight, handed to a stand-in of
//! Anthropic's counting endpoint, and the provider's once it counted it.
//! The fitted requests' and the render node's answers are checked beside
//! their own tests (`ext_proc.rs`, `render.rs`), with [`counting_server`].

use std::time::{Duration, Instant};

use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb;

use super::common::TestServer;

// The stand-in provider, for this crate's counting tests (`counting.rs`,
// `ext_proc.rs` use it from here).
#[path = "../provider_count/standin.rs"]
#[allow(dead_code)]
pub mod standin;

use standin::{KEY, StandIn, text_tokens};

/// A text whose estimate is not what the stand-in counts.
const TEXT: &str = "The harbour master posts the tide tables each Monday; spring tides reach 4.1 metres.";

/// A server with `args` whose Anthropic models are counted by `standin`
/// (`[providers.anthropic.counting]`), and the folder of its key.
pub async fn counting_server(standin: &StandIn, args: ServeArgs) -> (tempfile::TempDir, TestServer) {
    counting_server_with(standin, args, "").await
}

/// [`counting_server`] with `extra` lines in its counting table.
pub async fn counting_server_with(
    standin: &StandIn,
    args: ServeArgs,
    extra: &str,
) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("anthropic.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let config = dir.path().join("counting.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.anthropic.counting]\nurl = \"{}\"\napi_key_file = \"{}\"\nrequests_per_minute = 6000\ntimeout_ms = 2000\n{extra}\n",
            standin.anthropic_url(),
            key.display()
        ),
    )
    .unwrap();
    let server = TestServer::start_with(ServeArgs {
        config: Some(config),
        ..args
    })
    .await;
    (dir, server)
}

fn by_model(model: &str, text: &str) -> pb::CountTokensRequest {
    pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model(model.to_owned())),
        text: text.to_owned().into(),
    }
}

/// (exact, provider, estimated) of an answer.
fn sources(c: &pb::CountTokensResponse) -> (u32, u32, u32) {
    (c.tokens_exact, c.tokens_provider, c.tokens_estimated)
}

#[tokio::test]
async fn count_tokens_of_a_public_tokenizer_is_all_exact() {
    let standin = StandIn::start().await;
    let (_dir, server) = counting_server(&standin, TestServer::args()).await;
    let mut client = server.client();
    let gpt = client
        .count_tokens(by_model("gpt-4o", TEXT))
        .await
        .unwrap()
        .into_inner();
    assert!(gpt.exact && gpt.tokens > 0, "{gpt:?}");
    assert_eq!(sources(&gpt), (gpt.tokens, 0, 0));
    let encoding = client
        .count_tokens(pb::CountTokensRequest {
            tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding(
                "cl100k_base".to_owned(),
            )),
            text: TEXT.to_owned().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(encoding.exact);
    assert_eq!(sources(&encoding), (encoding.tokens, 0, 0));
    // Counting by the provider is for the models without a public
    // tokenizer: gpt-4o's text never reaches it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(standin.requests().is_empty(), "{:?}", standin.requests());
    server.stop().await;
}

#[tokio::test]
async fn count_tokens_of_a_claude_text_is_estimated_until_the_provider_counted_it() {
    let standin = StandIn::start().await;
    let (_dir, server) = counting_server(&standin, TestServer::args()).await;
    let mut client = server.client();
    let first = client
        .count_tokens(by_model("claude-sonnet-5", TEXT))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.exact, "{first:?}");
    assert_eq!(sources(&first), (0, 0, first.tokens), "{first:?}");

    // Counted in the background; asked again, the provider's count.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut later = first.clone();
    while later.tokens_provider == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        later = client
            .count_tokens(by_model("claude-sonnet-5", TEXT))
            .await
            .unwrap()
            .into_inner();
    }
    let provider = text_tokens(TEXT);
    assert_eq!(sources(&later), (0, provider, 0), "first: {first:?}");
    assert!(later.exact && later.tokens == provider, "{later:?}");
    assert_eq!(later.tokenizer, first.tokenizer);

    // The text went to the provider once, however often it was asked for
    // (the other calls measure the model's frames); another model of the
    // same generation has it at once.
    let pieces = standin
        .requests()
        .iter()
        .filter(|r| r.text().contains("tide tables"))
        .count();
    assert_eq!(pieces, 1);
    let opus = client
        .count_tokens(by_model("claude-opus-5", TEXT))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(sources(&opus), (0, provider, 0), "{opus:?}");
    server.stop().await;
}

#[tokio::test]
async fn without_a_counter_a_claude_text_stays_estimated() {
    let server = TestServer::start().await;
    let mut client = server.client();
    for _ in 0..2 {
        let c = client
            .count_tokens(by_model("claude-sonnet-5", TEXT))
            .await
            .unwrap()
            .into_inner();
        assert!(!c.exact);
        assert_eq!(sources(&c), (0, 0, c.tokens));
    }
    server.stop().await;
}
