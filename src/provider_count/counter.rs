//! [`Counter`], the handle: start the background work, submit pieces, read
//! frames and stats, close. Cloning it shares the work; dropping the last
//! clone closes it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{Notify, Semaphore};
use tracing::{Instrument as _, debug_span};

use super::breaker::Breaker;
use super::bucket::Bucket;
use super::client::Client;
use super::error::CountError;
use super::queue::Queue;
use super::shared::Sharing;
use super::work::{Inner, State};
use super::{Frames, Piece, Settings, Shared, Sink, Stats, Submitted};
use crate::telemetry::metrics;

/// The bucket's burst: one call, so calls are evenly paced (see
/// [`super::bucket`]).
const BURST: u32 = 1;

/// The background counter of one provider endpoint. `Clone` shares it.
#[derive(Clone)]
pub struct Counter {
    inner: Arc<Inner>,
    /// Closes the counter when the last clone goes.
    _owner: Arc<Owner>,
}

/// Closes the counter when dropped.
struct Owner(Arc<Inner>);

impl Drop for Owner {
    fn drop(&mut self) {
        close(&self.0);
    }
}

fn close(inner: &Inner) {
    let mut state = inner.lock();
    state.closed = true;
    state.queue.clear();
    drop(state);
    metrics::provider_count_queue_depth(inner.api.as_str(), 0);
    inner.slots.close();
    inner.calls.close();
    inner.work.notify_one();
    inner.wake.notify_waiters();
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("api", &self.inner.api)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Counter {
    /// Starts the background work on the current tokio runtime. Fails when
    /// there is no runtime, or a setting cannot work (a URL that is not
    /// `http://` or `https://` with a host, a key that is not a header
    /// value, a zero timeout).
    pub fn start(settings: Settings, sink: Arc<dyn Sink>) -> Result<Counter, CountError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| CountError::Settings {
            field: "runtime",
            problem: "the counter starts on a tokio runtime",
        })?;
        if settings.timeout.is_zero() {
            return Err(CountError::Settings {
                field: "timeout",
                problem: "must be more than zero",
            });
        }
        let client = Client::new(&settings)?;
        let now = std::time::Instant::now();
        let concurrency = settings.concurrency.max(1);
        let inner = Arc::new(Inner {
            api: settings.api,
            url: settings.url.clone(),
            timeout: settings.timeout,
            client,
            sink,
            sharing: OnceLock::new(),
            state: Mutex::new(State {
                queue: Queue::new(settings.queue),
                bucket: Bucket::new(settings.requests_per_minute, BURST, now),
                breaker: Breaker::new(settings.breaker_failures, settings.breaker_cooldown),
                models: HashMap::new(),
                closed: false,
                stats: Stats::default(),
            }),
            work: Notify::new(),
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(concurrency)),
            calls: Semaphore::new(concurrency),
        });
        metrics::provider_count_known(settings.api.as_str());
        let span = debug_span!("provider_count_dispatch", provider = settings.api.as_str());
        runtime.spawn(inner.clone().dispatch().instrument(span));
        Ok(Counter {
            _owner: Arc::new(Owner(inner.clone())),
            inner,
        })
    }

    /// Queues `piece` unless the same (generation, key) is queued or in
    /// flight. Never awaits: a short lock, no I/O.
    pub fn submit(&self, piece: Piece) -> Submitted {
        let provider = self.inner.api.as_str();
        let mut state = self.inner.lock();
        if state.closed {
            return Submitted::Closed;
        }
        let submitted = state.queue.submit(piece);
        if submitted == Submitted::DroppedOldest {
            state.stats.dropped += 1;
        }
        let depth = state.queue.len();
        drop(state);
        match submitted {
            Submitted::Queued => {}
            Submitted::DroppedOldest => {
                metrics::provider_count_call(provider, metrics::PROVIDER_COUNT_DROPPED)
            }
            Submitted::Duplicate | Submitted::Closed => return submitted,
        }
        metrics::provider_count_queue_depth(provider, depth);
        self.inner.work.notify_one();
        submitted
    }

    /// Shares what this counter learns with a fleet through `store` (see
    /// `shared`): from now on a piece, or a model's frames, is
    /// looked up there before the provider is called, and what the
    /// provider answers is written there. Once per counter: a second store
    /// is refused (`false`).
    pub fn share(&self, store: Arc<dyn Shared>) -> bool {
        self.inner.sharing.set(Sharing::new(store)).is_ok()
    }

    /// The frames of `model` once measured (by the first piece of that
    /// model, or by [`Counter::measure_frames`]), then kept; `None` until
    /// then.
    pub fn frames(&self, model: &str) -> Option<Frames> {
        let state = self.inner.lock();
        state.models.get(model)?.get().map(|m| m.frames)
    }

    /// Measures `model`'s frames now (three calls) unless already known.
    /// Fails at once while the breaker is open.
    pub async fn measure_frames(&self, model: &str) -> Result<Frames, CountError> {
        Ok(self.inner.measured(model, false).await?.frames)
    }

    /// What the counter has done so far.
    pub fn stats(&self) -> Stats {
        let state = self.inner.lock();
        Stats {
            queued: state.queue.len(),
            in_flight: state.queue.in_flight(),
            breaker_open: state.breaker.is_open(),
            ..state.stats
        }
    }

    /// Stops taking work: queued pieces are forgotten, calls waiting for the
    /// breaker or the bucket give up; calls on the wire finish or time out.
    pub fn close(&self) {
        close(&self.inner);
    }
}
