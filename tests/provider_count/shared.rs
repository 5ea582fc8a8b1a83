//! Counters sharing what they learn through one store (issue 52: a fleet
//! counts each piece once): a second counter learns the first one's pieces,
//! and its frames, without a provider call; a store that fails or hangs
//! costs the counting nothing but a bounded wait; a count no piece could
//! cost is not believed. The store here is a table in memory; the
//! PostgreSQL one is `tests/stores/shared_counts.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use context_assembler::provider_count::{Api, PieceKind, Shared, SharedFuture, SharedUnavailable};
use serde_json::Value;

use crate::standin::{self, StandIn, text_tokens, tools_cost};
use crate::{piece, settings, start, until};

const TURN: &str = "Refunds take 5 business days, 退款需要五天! (see §4.2)";
const SYSTEM: &str = "You are the support assistant of ACME; answer in ≤3 sentences.";
const TOOLS: &str = r#"[{"name":"lookup_order","description":"Find an order by id","input_schema":{"type":"object","properties":{"id":{"type":"string"}}}}]"#;

/// How the table answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    Down,
    Hanging,
}

/// A shared store in memory, counting its calls.
struct Table {
    rows: Mutex<HashMap<(String, [u8; 32]), u32>>,
    mode: Mutex<Mode>,
    calls: AtomicUsize,
}

impl Table {
    fn new() -> Arc<Table> {
        Arc::new(Table {
            rows: Mutex::new(HashMap::new()),
            mode: Mutex::new(Mode::Up),
            calls: AtomicUsize::new(0),
        })
    }

    fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn len(&self) -> usize {
        self.rows.lock().unwrap().len()
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn row(&self, generation: &str, key: [u8; 32]) -> Option<u32> {
        self.rows
            .lock()
            .unwrap()
            .get(&(generation.to_owned(), key))
            .copied()
    }

    fn insert(&self, generation: &str, key: [u8; 32], tokens: u32) {
        self.rows
            .lock()
            .unwrap()
            .insert((generation.to_owned(), key), tokens);
    }

    /// Counts a call; fails or hangs as the mode says.
    async fn enter(&self) -> Result<(), SharedUnavailable> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Up => Ok(()),
            Mode::Down => Err(SharedUnavailable),
            Mode::Hanging => std::future::pending().await,
        }
    }
}

impl Shared for Table {
    fn get<'a>(&'a self, generation: &'a str, keys: &'a [[u8; 32]]) -> SharedFuture<'a, Vec<Option<u32>>> {
        Box::pin(async move {
            self.enter().await?;
            Ok(keys.iter().map(|k| self.row(generation, *k)).collect())
        })
    }

    fn put<'a>(&'a self, generation: &'a str, counts: &'a [([u8; 32], u32)]) -> SharedFuture<'a, ()> {
        Box::pin(async move {
            self.enter().await?;
            for &(key, tokens) in counts {
                self.insert(generation, key, tokens);
            }
            Ok(())
        })
    }
}

fn pieces(model: &str) -> Vec<context_assembler::provider_count::Piece> {
    vec![
        piece(model, PieceKind::Turn, TURN),
        piece(model, PieceKind::System, SYSTEM),
        piece(model, PieceKind::Tools, TOOLS),
    ]
}

#[tokio::test]
async fn a_second_counter_on_the_same_store_learns_without_calling_the_provider() {
    let provider = StandIn::start().await;
    let table = Table::new();
    let (first, first_sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    assert!(first.share(table.clone()));
    assert!(!first.share(Table::new()), "one store per counter");
    for p in pieces("model-x") {
        first.submit(p);
    }
    until("the first counter learned three pieces", || {
        first_sink.learned_len() == 3
    })
    .await;
    // Three probes and three pieces, each written to the table (the frame
    // probes under their own generation).
    assert_eq!(provider.requests().len(), 6);
    until("six rows written", || table.len() == 6).await;
    let p = piece("model-x", PieceKind::Turn, TURN);
    assert_eq!(
        table.row("g1", p.key),
        Some(text_tokens(TURN)),
        "the content tokens"
    );

    let (second, second_sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    assert!(second.share(table.clone()));
    for p in pieces("model-x") {
        second.submit(p);
    }
    until("the second counter learned three pieces", || {
        second_sink.learned_len() == 3
    })
    .await;
    let frames = second.measure_frames("model-x").await.unwrap();
    assert_eq!(Some(frames), first.frames("model-x"));
    assert_eq!(provider.requests().len(), 6, "no call from the second counter");
    for text in [TURN, SYSTEM, TOOLS] {
        assert_eq!(
            second_sink.learned_of(text),
            first_sink.learned_of(text),
            "{text}"
        );
    }
    assert_eq!(
        second_sink.learned_of(SYSTEM),
        Some(standin::SYSTEM + text_tokens(SYSTEM))
    );
    let tools: Value = serde_json::from_str(TOOLS).unwrap();
    assert_eq!(second_sink.learned_of(TOOLS), Some(tools_cost(&tools)));
    let stats = second.stats();
    assert_eq!(
        (stats.sent, stats.learned, stats.shared, stats.shared_failed),
        (0, 3, 3, 0)
    );

    // A piece new to the fleet costs the second counter one call, no
    // probes: its frames came from the table.
    second.submit(piece(
        "model-x",
        PieceKind::Turn,
        "a turn only the second one saw",
    ));
    until("the new piece learned", || second_sink.learned_len() == 4).await;
    assert_eq!(provider.requests().len(), 7);
    until("its row written", || table.len() == 7).await;
    // Another model of the same endpoint measures its own frames.
    second.measure_frames("model-y").await.unwrap();
    assert_eq!(provider.requests().len(), 10);
}

/// Pieces are counted through the provider as without a store, whether the
/// store fails at once or never answers; after the failures that open its
/// breaker the store is no longer called, so a store that hangs costs a
/// bounded wait, then nothing.
async fn a_broken_store_costs_nothing_but_a_bounded_wait(mode: Mode) {
    let provider = StandIn::start().await;
    let table = Table::new();
    table.set_mode(mode);
    let (counter, sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    counter.share(table.clone());
    let texts: Vec<String> = (0..12)
        .map(|i| format!("turn number {i} of a long chat"))
        .collect();
    let started = Instant::now();
    for text in &texts {
        counter.submit(piece("m", PieceKind::Turn, text));
    }
    until("every piece learned from the provider", || {
        sink.learned_len() == texts.len()
    })
    .await;
    for text in &texts {
        assert_eq!(sink.learned_of(text), Some(text_tokens(text)), "{mode:?}");
    }
    assert_eq!(provider.requests().len(), 3 + texts.len());
    let stats = counter.stats();
    assert_eq!(stats.shared, 0);
    // Calls admitted before the breaker opened (up to one per piece slot)
    // fail too; none is made after.
    let slots = settings(Api::Anthropic, String::new()).concurrency;
    assert!(
        (3..=3 + slots as u64).contains(&stats.shared_failed),
        "{mode:?}: {stats:?}"
    );
    // (A call that timed out waiting for a store slot never reached it.)
    assert!(table.calls() as u64 <= stats.shared_failed, "{mode:?}");
    if mode == Mode::Hanging {
        // Each piece slot waited out at most a few timeouts.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_store_that_fails_costs_counting_nothing() {
    a_broken_store_costs_nothing_but_a_bounded_wait(Mode::Down).await;
}

#[tokio::test]
async fn a_store_that_hangs_costs_counting_a_bounded_wait() {
    a_broken_store_costs_nothing_but_a_bounded_wait(Mode::Hanging).await;
}

#[tokio::test]
async fn a_stored_count_no_piece_could_cost_is_not_believed() {
    let provider = StandIn::start().await;
    let table = Table::new();
    let p = piece("m", PieceKind::Turn, TURN);
    table.insert("g1", p.key, u32::MAX);
    let (counter, sink) = start(settings(Api::Anthropic, provider.anthropic_url()));
    counter.share(table.clone());
    counter.submit(p.clone());
    until("the piece learned", || sink.learned_len() == 1).await;
    assert_eq!(sink.learned_of(TURN), Some(text_tokens(TURN)));
    assert_eq!(provider.requests().len(), 3 + 1);
    // The provider's count replaces it.
    until("the row corrected", || {
        table.row("g1", p.key) == Some(text_tokens(TURN))
    })
    .await;
}
