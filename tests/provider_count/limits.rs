//! The limits the counter holds: the rate, the concurrency, the queue, and
//! a `submit` that never waits on the provider.

use std::time::{Duration, Instant};

use context_assembler::provider_count::{Api, Counter, PieceKind, Submitted};

use crate::standin::{Mode, StandIn};
use crate::{piece, settings, start, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rate_limit_holds_in_every_second() {
    let provider = StandIn::start().await;
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.requests_per_minute = 600;
    s.concurrency = 8;
    let (counter, sink) = start(s);
    for i in 0..30 {
        counter.submit(piece("m", PieceKind::Turn, &format!("paced piece {i}")));
    }
    until("thirty pieces learned", || sink.learned_len() == 30).await;
    let at: Vec<Instant> = provider.requests().iter().map(|r| r.at).collect();
    assert_eq!(at.len(), 3 + 30);
    for (i, &start) in at.iter().enumerate() {
        let in_second = at[i..]
            .iter()
            .filter(|&&t| t < start + Duration::from_secs(1))
            .count();
        assert!(
            in_second <= 10 + 1,
            "{in_second} calls in the second after call {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_concurrency_cap_holds_against_a_slow_provider() {
    let provider = StandIn::start().await;
    provider.set_mode(Mode::Slow(Duration::from_millis(100)));
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.concurrency = 3;
    let (counter, sink) = start(s);
    counter.measure_frames("m").await.unwrap();
    for i in 0..12 {
        counter.submit(piece("m", PieceKind::Turn, &format!("slow piece {i}")));
    }
    // Frame measurements by hand beside the pieces' own calls: they take
    // call slots too.
    let by_hand: Vec<_> = ["n1", "n2", "n3"]
        .into_iter()
        .map(|model| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.measure_frames(model).await })
        })
        .collect();
    until("twelve pieces learned", || sink.learned_len() == 12).await;
    for measured in by_hand {
        measured.await.unwrap().unwrap();
    }
    let most = provider.most_answering();
    assert!(most <= 3, "{most} calls in flight at once, over the cap of 3");
    assert!(most >= 2, "the test never had calls in flight together ({most})");
}

#[tokio::test]
async fn a_full_queue_drops_its_oldest_piece_and_counts_it() {
    let provider = StandIn::start().await;
    provider.set_mode(Mode::Slow(Duration::from_millis(200)));
    let mut s = settings(Api::Anthropic, provider.anthropic_url());
    s.concurrency = 1;
    s.queue = 3;
    let (counter, sink) = start(s);
    assert_eq!(
        counter.submit(piece("m", PieceKind::Turn, "p0")),
        Submitted::Queued
    );
    until("p0 taken from the queue", || counter.stats().in_flight == 1).await;
    let results: Vec<Submitted> = (1..=5)
        .map(|i| counter.submit(piece("m", PieceKind::Turn, &format!("p{i}"))))
        .collect();
    use Submitted::{DroppedOldest as Dropped, Queued};
    assert_eq!(results, [Queued, Queued, Queued, Dropped, Dropped]);
    let stats = counter.stats();
    assert_eq!((stats.queued, stats.dropped), (3, 2));
    until("four learned", || sink.learned_len() == 4).await;
    for kept in ["p0", "p3", "p4", "p5"] {
        assert!(sink.learned_of(kept).is_some(), "{kept}");
    }
    for dropped in ["p1", "p2"] {
        assert!(sink.learned_of(dropped).is_none(), "{dropped}");
        assert!(
            !provider
                .requests()
                .iter()
                .any(|r| r.text().contains(&format!("\"{dropped}\"")))
        );
    }
    assert_eq!(counter.stats().dropped, 2);
}

/// Submits `n` pieces from a blocking thread; fails if they do not all
/// return within a minute (they never wait on the provider, so they return
/// long before).
async fn submit_batch(counter: &Counter, n: usize) -> Vec<Submitted> {
    let counter = counter.clone();
    let batch = tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|i| counter.submit(piece("m", PieceKind::Turn, &format!("batch piece {i}"))))
            .collect::<Vec<_>>()
    });
    tokio::time::timeout(Duration::from_secs(60), batch)
        .await
        .expect("submit waited on the provider")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_never_waits_on_a_down_or_slow_provider() {
    for mode in [Mode::Down, Mode::Slow(Duration::from_secs(3))] {
        let provider = StandIn::start().await;
        provider.set_mode(mode.clone());
        let mut s = settings(Api::Anthropic, provider.anthropic_url());
        s.queue = 100;
        s.timeout = Duration::from_secs(10);
        let (counter, _sink) = start(s);
        let results = submit_batch(&counter, 1000).await;
        assert_eq!(results.len(), 1000, "{mode:?}");
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Submitted::Queued | Submitted::DroppedOldest))
        );
        // And again while calls are under way.
        until("a piece in flight", || counter.stats().in_flight > 0).await;
        let again = submit_batch(&counter, 1000).await;
        assert!(again.contains(&Submitted::DroppedOldest), "{mode:?}");
        let stats = counter.stats();
        assert!(stats.queued <= 100, "{mode:?}: {stats:?}");
        assert!(stats.dropped >= 1800, "{mode:?}: {stats:?}");
        counter.close();
        assert_eq!(
            counter.submit(piece("m", PieceKind::Turn, "late")),
            Submitted::Closed
        );
    }
}
