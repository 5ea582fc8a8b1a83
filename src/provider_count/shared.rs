//! A fleet counts each piece once, not once per pod (issue 52): a
//! [`Shared`] store (the PostgreSQL memory store's `learned_counts` table,
//! when one is configured) holds the counts every sidecar learned, keyed by
//! (generation, content key). A counter given one with
//! [`super::Counter::share`] reads it before calling the provider for a
//! piece, and writes there what the provider answered. A model's three frame
//! probes are shared the same way, under [`FRAMES`] and a key of the
//! endpoint, the model and the probe ([`frame_keys`]).
//!
//! The store is best-effort and never on the request path (only the
//! counter's background work uses it). [`Sharing`] bounds what it may cost
//! that work: every call under [`TIMEOUT`], at most [`CALLS`] at once, and
//! after [`BREAKER_FAILURES`] failures in a row none for
//! [`BREAKER_COOLDOWN`] (the provider's own [`Breaker`], a second
//! instance). A failed or skipped call is a miss: the piece goes to the
//! provider as it would without a store. A count read back that no piece of
//! that size could cost ([`plausible`]) is a miss too.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::Api;
use super::breaker::{Admit, Breaker};
use super::frames::Probes;

/// The longest one call to the shared store may take, waiting for one of
/// the [`CALLS`] included.
pub const TIMEOUT: Duration = Duration::from_millis(200);
/// Calls to the shared store in flight at most, per counter: the store's
/// connections serve recall on the request path too.
pub const CALLS: usize = 2;
/// Failed calls in a row that stop the counter using the store.
pub const BREAKER_FAILURES: u32 = 3;
/// How long the counter does without the store before one trial call.
pub const BREAKER_COOLDOWN: Duration = Duration::from_secs(5);
/// Tokens a piece may cost beyond one per byte of its text (a system
/// prompt's frame, a tool set's preamble); a stored count above that is not
/// believed.
pub const SLACK_TOKENS: u32 = 4096;
/// The generation under which frame probes are shared.
pub const FRAMES: &str = "frames";

/// What a shared store's calls return: a future doing its work when
/// polled (it may be dropped at the `TIMEOUT`).
pub type SharedFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, SharedUnavailable>> + Send + 'a>>;

/// The shared store could not answer; why is the store's to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the shared count store is unavailable")]
pub struct SharedUnavailable;

/// A store of learned counts shared by many sidecars. Counts are content
/// tokens as [`super::Sink::learned`] receives them (frame-free, so the
/// same for every model and endpoint of a generation), or frame probe
/// counts under `FRAMES`. No text is ever handed to it.
pub trait Shared: Send + Sync + 'static {
    /// The counts stored for `keys` of `generation`: one entry per key, in
    /// order, `None` for a key not stored.
    fn get<'a>(&'a self, generation: &'a str, keys: &'a [[u8; 32]]) -> SharedFuture<'a, Vec<Option<u32>>>;
    /// Stores `counts` (key, tokens) under `generation`, replacing what a
    /// key held.
    fn put<'a>(&'a self, generation: &'a str, counts: &'a [([u8; 32], u32)]) -> SharedFuture<'a, ()>;
}

/// Whether `tokens` can be the count of a piece of `bytes` bytes: a token
/// covers at least one byte, plus [`SLACK_TOKENS`].
pub fn plausible(tokens: u32, bytes: usize) -> bool {
    u64::from(tokens) <= (bytes as u64).saturating_add(u64::from(SLACK_TOKENS))
}

/// The keys of `model`'s three frame probes (base, three, system) at the
/// endpoint `url` of `api`: two endpoints (a provider and a proxy before
/// another) may frame differently, so each has its own.
pub fn frame_keys(api: Api, url: &str, model: &str) -> [[u8; 32]; 3] {
    let mut h = blake3::Hasher::new_derive_key("context-assembler shared frame probe v1");
    for part in [api.as_str(), url, model] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    [0u8, 1, 2].map(|probe| {
        let mut h = h.clone();
        h.update(&[probe]);
        *h.finalize().as_bytes()
    })
}

/// The probes of `model` from what the store held for [`frame_keys`]: all
/// three, each plausible for a one-letter request, or none.
pub fn probes_from(found: &[Option<u32>]) -> Option<Probes> {
    let ok = |i: usize| found.get(i).copied().flatten().filter(|&n| plausible(n, 0));
    Some(Probes {
        base: ok(0)?,
        three: ok(1)?,
        system: ok(2)?,
    })
}

/// The rows that share `probes` under [`frame_keys`].
pub fn probe_rows(keys: [[u8; 32]; 3], probes: Probes) -> [([u8; 32], u32); 3] {
    let [base, three, system] = keys;
    [
        (base, probes.base),
        (three, probes.three),
        (system, probes.system),
    ]
}

/// How a call to the shared store went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Used<T> {
    /// The store answered.
    Answered(T),
    /// The store failed, or did not answer within [`TIMEOUT`].
    Failed,
    /// Not called: the breaker is open.
    Skipped,
}

/// A counter's shared store and the bounds on its use.
pub struct Sharing {
    store: Arc<dyn Shared>,
    calls: Semaphore,
    breaker: Mutex<Breaker>,
}

/// A trial call's place, handed back if the call's future is dropped
/// before its verdict.
struct Trial<'a> {
    sharing: &'a Sharing,
    armed: bool,
}

impl Drop for Trial<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sharing.lock().neutral();
        }
    }
}

impl Sharing {
    /// Sharing through `store`.
    pub fn new(store: Arc<dyn Shared>) -> Sharing {
        Sharing {
            store,
            calls: Semaphore::new(CALLS),
            breaker: Mutex::new(Breaker::new(BREAKER_FAILURES, BREAKER_COOLDOWN)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counts stored for `keys` of `generation`.
    pub async fn get(&self, generation: &str, keys: &[[u8; 32]]) -> Used<Vec<Option<u32>>> {
        self.run(|store| store.get(generation, keys)).await
    }

    /// Stores `counts` under `generation`.
    pub async fn put(&self, generation: &str, counts: &[([u8; 32], u32)]) -> Used<()> {
        self.run(|store| store.put(generation, counts)).await
    }

    /// One call through the breaker, a call slot and the timeout.
    async fn run<'a, T>(&'a self, call: impl FnOnce(&'a dyn Shared) -> SharedFuture<'a, T>) -> Used<T> {
        let armed = match self.lock().admit(Instant::now()) {
            Admit::Go => false,
            Admit::Trial => true,
            Admit::Wait(_) => return Used::Skipped,
        };
        let mut trial = Trial { sharing: self, armed };
        let answer = tokio::time::timeout(TIMEOUT, async {
            let _slot = self.calls.acquire().await.map_err(|_| SharedUnavailable)?;
            call(&*self.store).await
        })
        .await;
        trial.armed = false;
        match answer {
            Ok(Ok(value)) => {
                self.lock().success();
                Used::Answered(value)
            }
            Ok(Err(SharedUnavailable)) | Err(_) => {
                self.lock().failure(Instant::now());
                Used::Failed
            }
        }
    }
}

#[cfg(test)]
mod tests;
