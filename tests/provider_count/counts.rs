//! What the counter learns: frames and content tokens equal to the
//! provider's, in each API's wire format, each distinct piece sent once.

use std::time::Duration;

use context_assembler::provider_count::{Api, Frames, PieceKind, Submitted};
use serde_json::Value;

use crate::standin::{self, Mode, StandIn, text_tokens, tools_cost};
use crate::{piece, settings, start, until};

const TURN: &str = "Refunds take 5 business days, 退款需要五天! (see §4.2)";
const SYSTEM: &str = "You are the support assistant of ACME; answer in ≤3 sentences.";
const TOOLS: &str = r#"[{"name":"lookup_order","description":"Find an order by id","input_schema":{"type":"object","properties":{"id":{"type":"string"}}}}]"#;

#[test]
fn the_stand_in_counts_by_content() {
    // Letter and digit runs by thirds, punctuation runs by halves,
    // everything else but spaces one each.
    assert_eq!(text_tokens("hello world"), 4);
    assert_eq!(text_tokens("abc abcd 12 退款!"), 1 + 2 + 1 + 2 + 1);
    assert_eq!(text_tokens("1234567 a1b2 ...!? ü"), 3 + 4 + 3 + 1);
    assert_eq!(StandIn::count_of(&["a"]), 8);
    assert_eq!(StandIn::count_of(&["a", "a", "a"]), 7 + 4 + 4 + 3);
    assert_eq!(StandIn::count_with(Some("a"), None, &["a"]), 7 + 5 + 1 + 1);
    assert_eq!(tools_cost(&serde_json::json!([])), 1 + 10);
}

async fn learns_frames_and_content_tokens(api: Api) {
    let provider = StandIn::start().await;
    let url = match api {
        Api::Anthropic => provider.anthropic_url(),
        Api::Gemini => provider.gemini_url(),
    };
    let (counter, sink) = start(settings(api, url));
    let model = "model-x";
    assert_eq!(counter.frames(model), None);
    let frames = counter.measure_frames(model).await.unwrap();
    let want = Frames {
        one_message: standin::ONE_MESSAGE,
        further_message: standin::FURTHER_MESSAGE,
        system: standin::SYSTEM,
    };
    assert_eq!(frames, want, "{api:?}");
    assert_eq!(counter.frames(model), Some(want));
    for (kind, text) in [
        (PieceKind::Turn, TURN),
        (PieceKind::System, SYSTEM),
        (PieceKind::Tools, TOOLS),
    ] {
        assert_eq!(counter.submit(piece(model, kind, text)), Submitted::Queued);
    }
    until("three pieces learned", || sink.learned_len() == 3).await;
    assert_eq!(sink.learned_of(TURN), Some(text_tokens(TURN)), "{api:?} turn");
    assert_eq!(
        sink.learned_of(SYSTEM),
        Some(standin::SYSTEM + text_tokens(SYSTEM)),
        "{api:?} system"
    );
    let tools: Value = serde_json::from_str(TOOLS).unwrap();
    assert_eq!(sink.learned_of(TOOLS), Some(tools_cost(&tools)), "{api:?} tools");
    // The ratio is the content's, not a constant: the turn's mixture of
    // words, CJK, digits and marks.
    assert_eq!(text_tokens(TURN), 26);
    // Three probes, then one call per piece: the frames are kept.
    let requests = provider.requests();
    assert_eq!(requests.len(), 6, "{api:?}");
    let stats = counter.stats();
    assert_eq!(
        (stats.sent, stats.learned, stats.refused, stats.failed),
        (6, 3, 0, 0)
    );
    for r in &requests {
        match api {
            Api::Anthropic => {
                assert_eq!(r.path, "/v1/messages/count_tokens");
                assert_eq!(r.headers["anthropic-version"], "2023-06-01");
                assert_eq!(r.headers["x-api-key"], standin::KEY);
                assert!(r.headers.get("x-goog-api-key").is_none());
            }
            Api::Gemini => {
                assert_eq!(r.path, "/v1beta/models/model-x:countTokens");
                assert_eq!(r.headers["x-goog-api-key"], standin::KEY);
                assert!(r.headers.get("x-api-key").is_none());
            }
        }
        assert_eq!(r.headers["content-type"], "application/json");
    }
}

#[tokio::test]
async fn anthropic_frames_and_content_tokens_equal_the_providers() {
    learns_frames_and_content_tokens(Api::Anthropic).await;
}

#[tokio::test]
async fn gemini_frames_and_content_tokens_equal_the_providers() {
    learns_frames_and_content_tokens(Api::Gemini).await;
}

#[tokio::test]
async fn a_models_frames_are_measured_once_before_its_first_piece_is_learned() {
    let provider = StandIn::start().await;
    let (counter, sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    let texts: Vec<String> = (0..6).map(|i| format!("turn number {i}")).collect();
    for t in &texts {
        counter.submit(piece("model-y", PieceKind::Turn, t));
    }
    until("six pieces learned", || sink.learned_len() == 6).await;
    for t in &texts {
        assert_eq!(sink.learned_of(t), Some(text_tokens(t)));
    }
    assert!(counter.frames("model-y").is_some());
    let requests = provider.requests();
    assert_eq!(requests.len(), 3 + 6, "the probes went once for six pieces");
    // The probes came first: none of the pieces' texts before the third.
    let first_piece = requests
        .iter()
        .position(|r| r.text().contains("turn number"))
        .unwrap();
    assert_eq!(first_piece, 3);
    // Another model is measured on its own.
    counter.submit(piece("model-z", PieceKind::Turn, "other"));
    until("the other model's piece learned", || sink.learned_len() == 7).await;
    assert_eq!(provider.requests().len(), 9 + 3 + 1);
    assert_eq!(counter.frames("model-z"), counter.frames("model-y"));
}

#[tokio::test]
async fn each_distinct_piece_is_sent_once_whether_queued_or_in_flight() {
    let provider = StandIn::start().await;
    let (counter, sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Slow(Duration::from_millis(300)));
    let a = piece("m", PieceKind::Turn, "piece alpha");
    let b = piece("m", PieceKind::Turn, "piece beta");
    assert_eq!(counter.submit(a.clone()), Submitted::Queued);
    assert_eq!(counter.submit(a.clone()), Submitted::Duplicate, "queued");
    assert_eq!(counter.submit(b.clone()), Submitted::Queued);
    until("alpha on the wire", || {
        provider
            .requests()
            .iter()
            .any(|r| r.text().contains("piece alpha"))
    })
    .await;
    assert_eq!(counter.submit(a.clone()), Submitted::Duplicate, "in flight");
    // The same key in another generation is another piece.
    let mut a2 = a.clone();
    a2.generation = "g2".into();
    assert_eq!(counter.submit(a2), Submitted::Queued);
    until("three learned", || sink.learned_len() == 3).await;
    let sent = |text: &str| {
        provider
            .requests()
            .iter()
            .filter(|r| r.text().contains(text))
            .count()
    };
    assert_eq!(sent("piece alpha"), 2, "once per generation");
    assert_eq!(sent("piece beta"), 1);
    let stats = counter.stats();
    assert_eq!((stats.queued, stats.in_flight, stats.learned), (0, 0, 3));
}

#[tokio::test]
async fn pieces_it_will_not_send_are_refused_without_a_call() {
    let provider = StandIn::start().await;
    let (counter, sink) = start(settings(Api::Gemini, provider.gemini_url()));
    counter.submit(piece("../admin", PieceKind::Turn, "bad model"));
    counter.submit(piece("m", PieceKind::Tools, "{\"not\": \"an array\"}"));
    counter.submit(piece("m", PieceKind::Tools, "[unclosed"));
    until("three refused", || sink.refused_texts().len() == 3).await;
    assert!(provider.requests().is_empty());
    assert_eq!(counter.stats().refused, 3);
}
