//! The background work: the dispatcher takes pieces from the queue (at most
//! `concurrency` pieces at a time), and each piece's task measures its
//! model's frames if they are not known yet, then counts the piece. Every
//! call, a probe's or a piece's, goes through [`Inner::call`]: a call slot,
//! the breaker, the bucket, then the request under its timeout. With a
//! shared store, a piece (or a model's frames) found there is learned
//! without a call, and what a call learns is written there.
//!
//! The lock is a plain mutex held for a few field updates, never across an
//! await, so [`super::Counter::submit`] never waits on the network.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, OnceCell, Semaphore};
use tracing::{Instrument as _, debug, debug_span, info, warn};

use super::breaker::{Admit, Breaker, Change};
use super::bucket::Bucket;
use super::client::Client;
use super::error::{CountError, Failure};
use super::frames::{Measured, PROBE, Probes};
use super::queue::{Job, Queue};
use super::shared::{self, Sharing, Used};
use super::wire::{self, Request, Verdict};
use super::{Api, Piece, PieceKind, Sink, Stats};
use crate::telemetry::metrics;

/// Models whose frames are kept at most; a piece of one more is refused.
pub const MAX_MODELS: usize = 64;

/// What the lock guards.
pub struct State {
    pub queue: Queue,
    pub bucket: Bucket,
    pub breaker: Breaker,
    /// Each model's frames, measured once (a failed measurement leaves the
    /// cell empty for the next piece to try).
    pub models: HashMap<String, Arc<OnceCell<Measured>>>,
    pub closed: bool,
    pub stats: Stats,
}

/// The counter's shared half.
pub struct Inner {
    pub api: Api,
    /// The endpoint, for the keys of shared frames.
    pub url: String,
    pub timeout: Duration,
    pub client: Client,
    pub sink: Arc<dyn Sink>,
    /// The fleet's shared store, once given.
    pub sharing: OnceLock<Sharing>,
    pub state: Mutex<State>,
    /// A piece was queued, or the counter closed (the dispatcher waits).
    pub work: Notify,
    /// The breaker changed, or the counter closed (callers waiting on the
    /// breaker or the bucket).
    pub wake: Notify,
    /// Pieces in flight.
    pub slots: Arc<Semaphore>,
    /// Calls in flight.
    pub calls: Semaphore,
}

/// A trial call's place, handed back if the call ends without a verdict
/// (its future dropped).
struct Trial<'a> {
    inner: &'a Inner,
    armed: bool,
}

impl Drop for Trial<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.lock().breaker.neutral();
            self.inner.wake.notify_waiters();
        }
    }
}

/// An in-flight piece, finished (its key forgotten) when dropped, even if
/// the sink panics.
struct InFlight<'a> {
    inner: &'a Inner,
    piece: Option<Piece>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(piece) = self.piece.take() {
            self.inner.lock().queue.finish(&piece);
        }
    }
}

impl Inner {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn provider(&self) -> &'static str {
        self.api.as_str()
    }

    /// Takes pieces and starts their tasks until the counter closes.
    pub async fn dispatch(self: Arc<Self>) {
        loop {
            let Ok(slot) = self.slots.clone().acquire_owned().await else {
                return;
            };
            let Some(job) = self.next().await else {
                return;
            };
            let span = debug_span!(
                "provider_count",
                provider = self.provider(),
                kind = job.piece.kind.as_str(),
                bytes = job.piece.text.len()
            );
            let inner = self.clone();
            tokio::spawn(
                async move {
                    inner.process(job).await;
                    drop(slot);
                }
                .instrument(span),
            );
        }
    }

    /// The next queued piece, or `None` once closed.
    async fn next(&self) -> Option<Job> {
        loop {
            let notified = self.work.notified();
            {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                if let Some(job) = state.queue.pop() {
                    metrics::provider_count_queue_depth(self.provider(), state.queue.len());
                    return Some(job);
                }
            }
            notified.await;
        }
    }

    /// Counts one piece (unless the shared store has its count) and tells
    /// the sink.
    async fn process(&self, job: Job) {
        let mut flight = InFlight {
            inner: self,
            piece: Some(job.piece.clone()),
        };
        if let Some(tokens) = self.shared_count(&job.piece).await {
            let mut state = self.lock();
            state.stats.learned += 1;
            state.stats.shared += 1;
            drop(state);
            metrics::provider_count_call(self.provider(), metrics::PROVIDER_COUNT_SHARED);
            self.sink.learned(&job.piece, tokens);
            return;
        }
        let result = self.count(&job.piece).await;
        match result {
            Ok(tokens) => {
                self.lock().stats.learned += 1;
                self.sink.learned(&job.piece, tokens);
                let piece = &job.piece;
                self.put_shared(&piece.generation, &[(piece.key, tokens)]).await;
            }
            Err(CountError::Refused { .. } | CountError::Unsendable { .. }) => {
                self.lock().stats.refused += 1;
                self.sink.refused(&job.piece);
            }
            Err(CountError::Throttled) if !job.retried => {
                flight.piece = None;
                let mut state = self.lock();
                if state.closed {
                    state.queue.finish(&job.piece);
                    return;
                }
                if state.queue.requeue(job) {
                    state.stats.dropped += 1;
                    metrics::provider_count_call(self.provider(), metrics::PROVIDER_COUNT_DROPPED);
                }
                metrics::provider_count_queue_depth(self.provider(), state.queue.len());
                drop(state);
                self.work.notify_one();
            }
            Err(CountError::Closed) => {}
            Err(e) => {
                self.lock().stats.failed += 1;
                debug!(provider = self.provider(), err = %e, "provider count given up");
            }
        }
    }

    /// The piece's content tokens (its model name is checked with its
    /// frames, before any body is written).
    async fn count(&self, piece: &Piece) -> Result<u32, CountError> {
        let tools = match piece.kind {
            PieceKind::Tools => Some(wire::tools(&piece.text, self.api)?),
            _ => None,
        };
        let request = match (piece.kind, &tools) {
            (PieceKind::System, _) => Some(Request::System(&piece.text)),
            (PieceKind::Tools, Some(t)) => Some(Request::Tools(t)),
            _ => None,
        };
        let measured = self.measured(&piece.model, true).await?;
        let texts = [&*piece.text];
        let request = request.unwrap_or(Request::Messages(&texts));
        let body = wire::body(self.api, &piece.model, request)?;
        let count = self.call(&piece.model, body.into(), true).await?;
        Ok(measured.content(piece.kind, count))
    }

    /// `model`'s frames, measured by the first caller (the others wait for
    /// it). `wait`: wait out an open breaker rather than fail.
    pub async fn measured(&self, model: &str, wait: bool) -> Result<Measured, CountError> {
        if !wire::model_ok(model) {
            return Err(CountError::Unsendable {
                reason: "the model name is not one this room sends",
            });
        }
        let cell = {
            let mut state = self.lock();
            match state.models.get(model) {
                Some(cell) => cell.clone(),
                None if state.models.len() >= MAX_MODELS => {
                    return Err(CountError::Unsendable {
                        reason: "too many models",
                    });
                }
                None => state.models.entry(model.to_owned()).or_default().clone(),
            }
        };
        cell.get_or_try_init(|| self.probe(model, wait)).await.copied()
    }

    /// `model`'s frames from the shared store, else from three probe calls
    /// (then shared).
    async fn probe(&self, model: &str, wait: bool) -> Result<Measured, CountError> {
        let keys = shared::frame_keys(self.api, &self.url, model);
        let found = self.get_shared(shared::FRAMES, &keys).await;
        let (probes, source) = match found.as_deref().and_then(shared::probes_from) {
            Some(probes) => (probes, "shared"),
            None => {
                let probes = self.probe_calls(model, wait).await?;
                self.put_shared(shared::FRAMES, &shared::probe_rows(keys, probes))
                    .await;
                (probes, "provider")
            }
        };
        let measured = Measured::from(probes);
        let f = measured.frames;
        info!(
            provider = self.provider(),
            model,
            source,
            one_message = f.one_message,
            further_message = f.further_message,
            system = f.system,
            "provider count frames measured"
        );
        Ok(measured)
    }

    /// The three probe calls of `model`'s frames.
    async fn probe_calls(&self, model: &str, wait: bool) -> Result<Probes, CountError> {
        let mut counts = [0; 3];
        let requests = [
            Request::Messages(&[PROBE]),
            Request::Messages(&[PROBE, PROBE, PROBE]),
            Request::System(PROBE),
        ];
        for (count, request) in counts.iter_mut().zip(requests) {
            let body = wire::body(self.api, model, request)?;
            *count = self.call(model, body.into(), wait).await?;
        }
        let [base, three, system] = counts;
        Ok(Probes { base, three, system })
    }

    /// The piece's count from the shared store, when there is one and it
    /// holds a count the piece can cost.
    async fn shared_count(&self, piece: &Piece) -> Option<u32> {
        let found = self.get_shared(&piece.generation, &[piece.key]).await?;
        let tokens = found.first().copied().flatten()?;
        shared::plausible(tokens, piece.text.len()).then_some(tokens)
    }

    /// The counts the shared store holds for `keys`; `None` without a
    /// store, or when it fails (counted) or is skipped.
    async fn get_shared(&self, generation: &str, keys: &[[u8; 32]]) -> Option<Vec<Option<u32>>> {
        let used = self.sharing.get()?.get(generation, keys).await;
        self.used(used)
    }

    /// Writes `counts` to the shared store, when there is one (a failure
    /// is counted, and changes nothing else).
    async fn put_shared(&self, generation: &str, counts: &[([u8; 32], u32)]) {
        if let Some(sharing) = self.sharing.get() {
            let used = sharing.put(generation, counts).await;
            self.used(used);
        }
    }

    /// Counts a failed shared call.
    fn used<T>(&self, used: Used<T>) -> Option<T> {
        match used {
            Used::Answered(value) => Some(value),
            Used::Skipped => None,
            Used::Failed => {
                self.lock().stats.shared_failed += 1;
                metrics::provider_count_call(self.provider(), metrics::PROVIDER_COUNT_SHARED_UNAVAILABLE);
                debug!(provider = self.provider(), "shared count store call failed");
                None
            }
        }
    }

    /// One call: a call slot, the breaker, the bucket, then the request
    /// under the timeout; its verdict settles the breaker and the bucket.
    pub async fn call(&self, model: &str, body: Bytes, wait: bool) -> Result<u32, CountError> {
        let target = self.client.target(model)?;
        let _slot = self.calls.acquire().await.map_err(|_| CountError::Closed)?;
        let mut trial = self.admit(wait).await?;
        self.pace().await?;
        self.lock().stats.sent += 1;
        let started = Instant::now();
        let reply = tokio::time::timeout(self.timeout, self.client.post(target, body)).await;
        let (verdict, status) = match reply {
            Ok(Ok(r)) => {
                let retry_after = r.retry_after.as_ref().map(|v| v.as_bytes());
                (wire::verdict(self.api, r.status, retry_after, &r.body), r.status)
            }
            Ok(Err(failure)) => (Verdict::Failed(failure), 0),
            Err(_) => (Verdict::Failed(Failure::Timeout), 0),
        };
        trial.armed = false;
        self.settle(verdict, status, started);
        match verdict {
            Verdict::Count(n) => Ok(n),
            Verdict::Refused(status) => Err(CountError::Refused { status }),
            Verdict::Throttled(_) => Err(CountError::Throttled),
            Verdict::Failed(failure) => Err(CountError::Failed(failure)),
        }
    }

    /// Waits until the breaker lets a call go (or fails at once when not
    /// `wait`ing); a trial's place is handed back if the call is dropped.
    async fn admit(&self, wait: bool) -> Result<Trial<'_>, CountError> {
        loop {
            let mut notified = pin!(self.wake.notified());
            notified.as_mut().enable();
            let admit = {
                let mut state = self.lock();
                if state.closed {
                    return Err(CountError::Closed);
                }
                state.breaker.admit(Instant::now())
            };
            let until = match admit {
                Admit::Go => {
                    return Ok(Trial {
                        inner: self,
                        armed: false,
                    });
                }
                Admit::Trial => {
                    return Ok(Trial {
                        inner: self,
                        armed: true,
                    });
                }
                Admit::Wait(_) if !wait => {
                    metrics::provider_count_call(self.provider(), metrics::PROVIDER_COUNT_BREAKER_OPEN);
                    return Err(CountError::BreakerOpen);
                }
                Admit::Wait(until) => until,
            };
            match until {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at.into(), notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// Waits until the bucket lets a call go.
    async fn pace(&self) -> Result<(), CountError> {
        loop {
            let mut notified = pin!(self.wake.notified());
            notified.as_mut().enable();
            let wait = {
                let mut state = self.lock();
                if state.closed {
                    return Err(CountError::Closed);
                }
                match state.bucket.take(Instant::now()) {
                    Ok(()) => return Ok(()),
                    Err(wait) => wait,
                }
            };
            let _ = tokio::time::timeout(wait, notified).await;
        }
    }

    /// Records a call's verdict: the breaker, the bucket's pause, the stats,
    /// the metric and the log line (status, 0 without an answer, and
    /// outcome; never content).
    fn settle(&self, verdict: Verdict, status: u16, started: Instant) {
        let now = Instant::now();
        let provider = self.provider();
        let (outcome, change) = {
            let mut state = self.lock();
            match verdict {
                Verdict::Count(_) => (metrics::PROVIDER_COUNT_LEARNED, state.breaker.success()),
                Verdict::Refused(_) => (metrics::PROVIDER_COUNT_REFUSED, state.breaker.success()),
                Verdict::Throttled(pause) => {
                    state.stats.throttled += 1;
                    state.bucket.pause_until(now + pause);
                    state.breaker.neutral();
                    (metrics::PROVIDER_COUNT_THROTTLED, Change::None)
                }
                Verdict::Failed(_) => (metrics::PROVIDER_COUNT_FAILED, state.breaker.failure(now)),
            }
        };
        metrics::provider_count_call(provider, outcome);
        let failure = match verdict {
            Verdict::Failed(f) => f.as_str(),
            _ => "",
        };
        let took_ms = now.saturating_duration_since(started).as_millis() as u64;
        debug!(provider, outcome, status, failure, took_ms, "provider count call");
        match change {
            Change::Opened => warn!(provider, "provider count breaker open: calls held"),
            Change::Closed => info!(provider, "provider count breaker closed"),
            Change::None => {}
        }
        self.wake.notify_waiters();
    }
}
