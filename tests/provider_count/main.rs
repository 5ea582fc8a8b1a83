//! The background provider counter (`provider_count`, issue 52) against a
//! stand-in provider on 127.0.0.1:0 (`standin.rs`, reusable by later tests):
//! what it learns (`counts`), the limits it holds (`limits`), how it takes
//! a provider that fails, refuses or throttles (`faults`), that the key
//! and the prompt text show nowhere but in the request (`privacy`), and
//! what counters sharing one store learn without a call (`shared`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod standin;

mod counts;
mod faults;
mod limits;
mod privacy;
mod shared;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use context_assembler::provider_count::{Api, Counter, Piece, PieceKind, Secret, Settings, Sink};

/// What the counter told its sink.
#[derive(Default)]
pub struct Recorder {
    learned: Mutex<Vec<(Piece, u32)>>,
    refused: Mutex<Vec<Piece>>,
}

impl Sink for Recorder {
    fn learned(&self, piece: &Piece, content_tokens: u32) {
        self.learned.lock().unwrap().push((piece.clone(), content_tokens));
    }

    fn refused(&self, piece: &Piece) {
        self.refused.lock().unwrap().push(piece.clone());
    }
}

impl Recorder {
    /// The content tokens learned for the piece of `text`, if any.
    pub fn learned_of(&self, text: &str) -> Option<u32> {
        let learned = self.learned.lock().unwrap();
        learned.iter().find(|(p, _)| &*p.text == text).map(|&(_, n)| n)
    }

    /// How many pieces were learned.
    pub fn learned_len(&self) -> usize {
        self.learned.lock().unwrap().len()
    }

    /// The texts of the refused pieces.
    pub fn refused_texts(&self) -> Vec<String> {
        self.refused
            .lock()
            .unwrap()
            .iter()
            .map(|p| p.text.to_string())
            .collect()
    }
}

/// Settings that do not get in a test's way: fast, wide, patient.
pub fn settings(api: Api, url: String) -> Settings {
    Settings {
        api,
        url,
        api_key: Secret::new(standin::KEY),
        requests_per_minute: 60_000,
        concurrency: 4,
        timeout: Duration::from_secs(5),
        queue: 1000,
        breaker_failures: 5,
        breaker_cooldown: Duration::from_secs(1),
        wait: Duration::ZERO,
    }
}

/// A counter of `settings` telling a new recorder.
pub fn start(settings: Settings) -> (Counter, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let counter = Counter::start(settings, recorder.clone()).unwrap();
    (counter, recorder)
}

/// A piece of `model`, generation `g1`, keyed by its kind and text.
pub fn piece(model: &str, kind: PieceKind, text: &str) -> Piece {
    let mut h = blake3::Hasher::new();
    h.update(kind.as_str().as_bytes());
    h.update(text.as_bytes());
    Piece {
        model: model.to_owned(),
        generation: "g1".into(),
        key: *h.finalize().as_bytes(),
        kind,
        text: text.into(),
    }
}

/// Waits (polling) until `done` holds; fails the test after 20 s.
pub async fn until(what: &str, done: impl Fn() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < give_up, "gave up waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
