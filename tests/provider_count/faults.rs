//! A provider that fails, refuses, throttles or is slow: the breaker, the
//! sink's `refused`, the bucket's pause, the timeout.

use std::time::Duration;

use context_assembler::provider_count::{Api, CountError, Failure, PieceKind, Submitted};

use crate::standin::{Mode, StandIn, text_tokens};
use crate::{piece, settings, start, until};

#[tokio::test]
async fn the_breaker_opens_after_the_failures_and_a_trial_after_the_cooldown_closes_it() {
    let provider = StandIn::start().await;
    provider.set_mode(Mode::Failing);
    // Long enough that the measurement by hand below comes within it on a
    // busy machine.
    let cooldown = Duration::from_secs(2);
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.concurrency = 1;
    s.breaker_failures = 3;
    s.breaker_cooldown = cooldown;
    let (counter, sink) = start(s);
    // Each piece's first probe fails: the piece is given up.
    for i in 0..3 {
        counter.submit(piece("m", PieceKind::Turn, &format!("doomed {i}")));
    }
    until("three failed", || counter.stats().failed == 3).await;
    assert!(counter.stats().breaker_open);
    assert_eq!(provider.requests().len(), 3);
    // Open: a piece waits, and a measurement by hand fails at once.
    counter.submit(piece("m", PieceKind::Turn, "patient piece"));
    assert_eq!(counter.measure_frames("m").await, Err(CountError::BreakerOpen));
    provider.set_mode(Mode::Normal);
    until("the patient piece learned", || sink.learned_len() == 1).await;
    assert_eq!(
        sink.learned_of("patient piece"),
        Some(text_tokens("patient piece"))
    );
    let requests = provider.requests();
    let third_failure = requests[2].at;
    assert!(
        requests[3].at >= third_failure + cooldown,
        "the trial came {:?} after the breaker opened",
        requests[3].at - third_failure
    );
    let stats = counter.stats();
    assert!(!stats.breaker_open);
    assert_eq!((stats.failed, stats.learned, stats.sent), (3, 1, 3 + 3 + 1));
}

#[tokio::test]
async fn a_failed_trial_keeps_the_breaker_open_for_another_cooldown() {
    let provider = StandIn::start().await;
    provider.set_mode(Mode::Failing);
    let cooldown = Duration::from_millis(300);
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.concurrency = 1;
    s.breaker_failures = 2;
    s.breaker_cooldown = cooldown;
    let (counter, _sink) = start(s);
    for i in 0..3 {
        counter.submit(piece("m", PieceKind::Turn, &format!("doomed {i}")));
    }
    until("three failed", || counter.stats().failed == 3).await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].at >= requests[1].at + cooldown, "the trial waited");
    assert!(counter.stats().breaker_open, "the failed trial reopened it");
}

#[tokio::test]
async fn a_refused_piece_goes_to_the_sink_as_refused_and_is_not_retried() {
    let provider = StandIn::start().await;
    let (counter, sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Refusing);
    counter.submit(piece(
        "m",
        PieceKind::Tools,
        r#"[{"name":"fetch","type":"image_by_url"}]"#,
    ));
    until("refused", || sink.refused_texts().len() == 1).await;
    // Give a retry the time it would take, then look.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(provider.requests().len(), 3 + 1, "not retried");
    let stats = counter.stats();
    assert_eq!((stats.refused, stats.failed, stats.learned), (1, 0, 0));
    assert!(!stats.breaker_open, "a refusal is an answer");
}

#[tokio::test]
async fn a_throttled_piece_is_retried_after_the_providers_pause() {
    let provider = StandIn::start().await;
    let (counter, sink) = start(settings(Api::Gemini, provider.gemini_url()));
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Throttling {
        retry_after: Some(1),
        times: 1,
    });
    counter.submit(piece("m", PieceKind::Turn, "throttled piece"));
    until("learned after the pause", || sink.learned_len() == 1).await;
    assert_eq!(
        sink.learned_of("throttled piece"),
        Some(text_tokens("throttled piece"))
    );
    let requests = provider.requests();
    assert_eq!(requests.len(), 3 + 2);
    let gap = requests[4].at - requests[3].at;
    assert!(
        gap >= Duration::from_secs(1),
        "retried {gap:?} after a retry-after of 1 s"
    );
    let stats = counter.stats();
    assert_eq!((stats.throttled, stats.failed), (1, 0));
    assert!(!stats.breaker_open);
}

#[tokio::test]
async fn a_piece_throttled_twice_is_given_up_without_opening_the_breaker() {
    let provider = StandIn::start().await;
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.breaker_failures = 1;
    let (counter, sink) = start(s);
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Throttling {
        retry_after: Some(0),
        times: 2,
    });
    counter.submit(piece("m", PieceKind::Turn, "twice throttled"));
    until("given up", || counter.stats().failed == 1).await;
    let stats = counter.stats();
    assert_eq!((stats.throttled, stats.learned, stats.sent), (2, 0, 3 + 2));
    assert!(!stats.breaker_open, "a 429 is not a failure of the provider");
    // Requeued once only; the next piece goes through.
    counter.submit(piece("m", PieceKind::Turn, "after"));
    until("the next learned", || sink.learned_len() == 1).await;
    assert_eq!(provider.requests().len(), 3 + 2 + 1);
}

#[tokio::test]
async fn a_call_slower_than_the_timeout_is_a_failure() {
    let provider = StandIn::start().await;
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    // The frames are measured under the same timeout, first connect
    // included; the cooldown outlasts any stall before the last check.
    s.timeout = Duration::from_secs(1);
    s.breaker_failures = 1;
    s.breaker_cooldown = Duration::from_secs(30);
    let (counter, sink) = start(s);
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Slow(Duration::from_secs(5)));
    counter.submit(piece("m", PieceKind::Turn, "too slow"));
    until("failed", || counter.stats().failed == 1).await;
    assert!(counter.stats().breaker_open);
    assert_eq!(sink.learned_len(), 0);
    assert_eq!(
        counter.measure_frames("other").await,
        Err(CountError::BreakerOpen),
        "open after one timeout"
    );
}

#[tokio::test]
async fn a_down_provider_fails_calls_and_close_stops_the_waiting_ones() {
    let provider = StandIn::start().await;
    let (counter, _sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    counter.measure_frames("m").await.unwrap();
    provider.set_mode(Mode::Down);
    for i in 0..8 {
        counter.submit(piece("m", PieceKind::Turn, &format!("lost {i}")));
    }
    until("the breaker open", || counter.stats().breaker_open).await;
    let stats = counter.stats();
    assert!(stats.failed >= 5, "{stats:?}");
    assert_eq!(provider.requests().len(), 3, "no request reached a down provider");
    counter.close();
    until("nothing in flight", || counter.stats().in_flight == 0).await;
    assert_eq!(counter.stats().queued, 0);
    assert_eq!(
        counter.submit(piece("m", PieceKind::Turn, "late")),
        Submitted::Closed
    );
    assert_eq!(counter.measure_frames("n").await, Err(CountError::Closed));
}

#[tokio::test]
async fn an_answer_over_64_kib_is_a_failure() {
    let provider = StandIn::start().await;
    provider.set_mode(Mode::Oversized);
    let (counter, _sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    assert_eq!(
        counter.measure_frames("m").await,
        Err(CountError::Failed(Failure::TooLarge))
    );
    assert_eq!(counter.stats().sent, 1);
}

#[tokio::test]
async fn an_https_endpoint_that_speaks_no_tls_is_a_tls_failure() {
    let provider = StandIn::start().await;
    let url = provider.anthropic_url().replacen("http://", "https://", 1);
    let (counter, _sink) = start(settings(Api::Anthropic, url));
    assert_eq!(
        counter.measure_frames("m").await,
        Err(CountError::Failed(Failure::Tls))
    );
}
