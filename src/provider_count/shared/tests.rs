use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A store that answers each call as told, and counts the calls.
struct Fake {
    answer: fn() -> SharedFuture<'static, ()>,
    calls: AtomicUsize,
}

impl Fake {
    fn new(answer: fn() -> SharedFuture<'static, ()>) -> Arc<Fake> {
        Arc::new(Fake {
            answer,
            calls: AtomicUsize::new(0),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Shared for Fake {
    fn get<'a>(&'a self, _: &'a str, keys: &'a [[u8; 32]]) -> SharedFuture<'a, Vec<Option<u32>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = (self.answer)();
        Box::pin(async move {
            answer.await?;
            Ok(vec![Some(7); keys.len()])
        })
    }

    fn put<'a>(&'a self, _: &'a str, _: &'a [([u8; 32], u32)]) -> SharedFuture<'a, ()> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (self.answer)()
    }
}

fn ok() -> SharedFuture<'static, ()> {
    Box::pin(async { Ok(()) })
}

fn down() -> SharedFuture<'static, ()> {
    Box::pin(async { Err(SharedUnavailable) })
}

fn hangs() -> SharedFuture<'static, ()> {
    Box::pin(std::future::pending())
}

#[test]
fn a_count_is_plausible_up_to_one_token_a_byte_plus_the_slack() {
    assert!(plausible(0, 0));
    assert!(plausible(SLACK_TOKENS, 0));
    assert!(!plausible(SLACK_TOKENS + 1, 0));
    assert!(plausible(SLACK_TOKENS + 100, 100));
    assert!(!plausible(u32::MAX, 1000));
    assert!(plausible(u32::MAX, usize::MAX), "no overflow");
}

#[test]
fn frame_keys_differ_by_api_endpoint_model_and_probe() {
    let k = frame_keys(Api::Anthropic, "https://a/count", "claude-sonnet-5");
    assert_eq!(
        k,
        frame_keys(Api::Anthropic, "https://a/count", "claude-sonnet-5")
    );
    assert!(k[0] != k[1] && k[1] != k[2] && k[0] != k[2]);
    for other in [
        frame_keys(Api::Gemini, "https://a/count", "claude-sonnet-5"),
        frame_keys(Api::Anthropic, "https://b/count", "claude-sonnet-5"),
        frame_keys(Api::Anthropic, "https://a/count", "claude-opus-5"),
        // The parts are length-prefixed: moving a byte between them is
        // another key.
        frame_keys(Api::Anthropic, "https://a/coun", "tclaude-sonnet-5"),
    ] {
        assert!(other.iter().all(|o| !k.contains(o)));
    }
}

#[test]
fn probes_are_all_three_plausible_or_none() {
    let probes = Probes {
        base: 8,
        three: 18,
        system: 14,
    };
    let keys = frame_keys(Api::Anthropic, "u", "m");
    let rows = probe_rows(keys, probes);
    assert_eq!(rows.map(|(k, _)| k), keys);
    let found: Vec<Option<u32>> = rows.iter().map(|&(_, n)| Some(n)).collect();
    assert_eq!(probes_from(&found), Some(probes));
    assert_eq!(probes_from(&[Some(8), None, Some(14)]), None);
    assert_eq!(probes_from(&[Some(8), Some(18)]), None, "an answer too short");
    assert_eq!(probes_from(&[Some(8), Some(u32::MAX), Some(14)]), None);
}

#[tokio::test]
async fn an_answering_store_is_used() {
    let store = Fake::new(ok);
    let sharing = Sharing::new(store.clone());
    let keys = [[1; 32], [2; 32]];
    assert_eq!(
        sharing.get("g", &keys).await,
        Used::Answered(vec![Some(7), Some(7)])
    );
    assert_eq!(sharing.put("g", &[([1; 32], 3)]).await, Used::Answered(()));
    assert_eq!(store.calls(), 2);
}

/// After the failures in a row the store is not called until the
/// cooldown; a failure of any kind counts.
#[tokio::test]
async fn a_failing_store_opens_the_breaker_and_is_not_called_again() {
    let store = Fake::new(down);
    let sharing = Sharing::new(store.clone());
    for _ in 0..BREAKER_FAILURES {
        assert_eq!(sharing.get("g", &[[1; 32]]).await, Used::Failed);
    }
    for _ in 0..10 {
        assert_eq!(sharing.get("g", &[[1; 32]]).await, Used::Skipped);
        assert_eq!(sharing.put("g", &[([1; 32], 3)]).await, Used::Skipped);
    }
    assert_eq!(store.calls() as u32, BREAKER_FAILURES);
}

/// A store that never answers costs a call its timeout, not more.
#[tokio::test]
async fn a_hanging_store_is_given_up_at_the_timeout() {
    let store = Fake::new(hangs);
    let sharing = Sharing::new(store.clone());
    let started = Instant::now();
    assert_eq!(sharing.get("g", &[[1; 32]]).await, Used::Failed);
    assert!(started.elapsed() >= TIMEOUT);
    assert!(started.elapsed() < TIMEOUT * 50, "given up");
}

/// A trial call whose caller gives up hands its place to the next caller:
/// the breaker never sticks half-open.
#[tokio::test]
async fn an_abandoned_trial_frees_its_place() {
    let store = Fake::new(hangs);
    let sharing = Sharing::new(store.clone());
    let t0 = Instant::now();
    {
        let mut breaker = sharing.lock();
        for _ in 0..BREAKER_FAILURES {
            breaker.failure(t0.checked_sub(BREAKER_COOLDOWN).unwrap());
        }
    }
    let trial = sharing.get("g", &[[1; 32]]);
    let gave_up = tokio::time::timeout(Duration::from_millis(5), trial).await;
    assert!(gave_up.is_err());
    assert_eq!(
        sharing.lock().admit(Instant::now()),
        Admit::Trial,
        "the next caller tries"
    );
}
