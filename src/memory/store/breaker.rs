//! A circuit breaker in front of a store server: after
//! [`FAILURES_TO_OPEN`] calls in a row found it unavailable, calls are
//! refused at once (UNAVAILABLE, with nothing sent) for [`OPEN_FOR`]; then
//! one call at a time probes it, and the first that gets an answer closes
//! the breaker. A store that is down thus costs the first few callers the
//! connection timeout and every later one nothing, while a caller with a
//! deadline gets a prompt UNAVAILABLE to retry on; when the server is back,
//! the next probe finds it, without a restart.
//!
//! Only unavailability counts (unreachable, timed out, shutting down):
//! a query the server refused, or a corrupt row, is an answer.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::warn;

use super::StoreError;

/// Calls in a row that found the store unavailable before the breaker
/// opens.
pub const FAILURES_TO_OPEN: u32 = 3;
/// How long an open breaker refuses calls before it lets one probe.
pub const OPEN_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct State {
    /// Calls in a row that found the store unavailable.
    failures: u32,
    /// Open until then (a probe may go after it).
    open_until: Option<Instant>,
    /// A probe is out: the others are refused until it answers.
    probing: bool,
}

/// The breaker of one store.
#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<State>,
}

/// A call let through; dropped unanswered (the caller gave up), it frees
/// the probe's place without closing or opening anything.
#[derive(Debug)]
struct Pass<'b> {
    breaker: &'b Breaker,
    probe: bool,
    settled: bool,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if !self.settled && self.probe {
            self.breaker.lock().probing = false;
        }
    }
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call may go now: `Ok(true)` for the probe of an open
    /// breaker, `Ok(false)` for a closed one, else why not.
    fn enter(&self, now: Instant) -> Result<bool, StoreError> {
        let mut s = self.lock();
        match s.open_until {
            None => Ok(false),
            Some(until) if now < until => Err(refused(until - now)),
            Some(_) if s.probing => Err(refused(Duration::ZERO)),
            Some(_) => {
                s.probing = true;
                Ok(true)
            }
        }
    }

    /// Records how a call let through ended: `available` unless the store
    /// was found unavailable.
    fn settle(&self, probe: bool, available: bool, now: Instant) {
        let mut s = self.lock();
        if probe {
            s.probing = false;
        }
        if available {
            if s.open_until.take().is_some() {
                warn!("memory store answers again: breaker closed");
            }
            s.failures = 0;
            return;
        }
        s.failures = s.failures.saturating_add(1);
        if s.failures >= FAILURES_TO_OPEN {
            if s.open_until.is_none() {
                warn!(failures = s.failures, "memory store unavailable: breaker open");
            }
            s.open_until = Some(now + OPEN_FOR);
        }
    }

    /// Runs `call` through the breaker.
    pub async fn call<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let probe = self.enter(Instant::now())?;
        let mut pass = Pass {
            breaker: self,
            probe,
            settled: false,
        };
        let out = call.await;
        let available = !matches!(out, Err(StoreError::Unavailable(_)));
        self.settle(probe, available, Instant::now());
        pass.settled = true;
        drop(pass);
        out
    }
}

/// The error of a call the breaker refused.
fn refused(retry_in: Duration) -> StoreError {
    StoreError::Unavailable(format!(
        "breaker open after {FAILURES_TO_OPEN} failed calls in a row; the next probe in {} ms",
        retry_in.as_millis()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn down() -> StoreError {
        StoreError::Unavailable("down".into())
    }

    /// The breaker opens after the failures in a row, refuses without
    /// calling while open, lets one probe through after `OPEN_FOR`, and a
    /// probe that gets an answer closes it.
    #[test]
    fn it_opens_refuses_probes_and_closes() {
        let b = Breaker::default();
        let t0 = Instant::now();
        for _ in 0..FAILURES_TO_OPEN {
            assert_eq!(b.enter(t0).ok(), Some(false));
            b.settle(false, false, t0);
        }
        assert!(matches!(b.enter(t0), Err(StoreError::Unavailable(_))));
        let later = t0 + OPEN_FOR;
        assert_eq!(b.enter(later).ok(), Some(true), "one probe");
        assert!(b.enter(later).is_err(), "only one probe at a time");
        b.settle(true, false, later);
        assert!(b.enter(later).is_err(), "a failed probe opens it again");
        let again = later + OPEN_FOR;
        assert_eq!(b.enter(again).ok(), Some(true));
        b.settle(true, true, again);
        assert_eq!(b.enter(again).ok(), Some(false), "closed");
    }

    /// A query the server refused is an answer: it never opens the breaker.
    #[tokio::test]
    async fn only_unavailability_counts() {
        let b = Breaker::default();
        for _ in 0..10 {
            let out: Result<(), _> = b.call(async { Err(StoreError::Query("bad".into())) }).await;
            assert!(matches!(out, Err(StoreError::Query(_))));
        }
        let out = b.call(async { Ok::<_, StoreError>(1) }).await;
        assert_eq!(out.ok(), Some(1));
    }

    /// A probe whose caller gives up frees its place: the next caller
    /// probes (the breaker is never stuck half-open).
    #[tokio::test]
    async fn an_abandoned_probe_frees_its_place() {
        let b = Breaker::default();
        for _ in 0..FAILURES_TO_OPEN {
            let _ = b.call(async { Err::<(), _>(down()) }).await;
        }
        b.lock().open_until = Some(Instant::now());
        let stalled = b.call(std::future::pending::<Result<(), StoreError>>());
        let gave_up = tokio::time::timeout(Duration::from_millis(5), stalled).await;
        assert!(gave_up.is_err());
        assert_eq!(b.enter(Instant::now()).ok(), Some(true), "the next caller probes");
    }

    proptest! {
        /// Over any sequence of outcomes and times: at most one probe is out,
        /// a call while open before its time is refused, and after any
        /// answer the breaker lets the next call through.
        #[test]
        fn the_breaker_never_sticks(steps in prop::collection::vec((any::<bool>(), 0u64..1500), 1..60)) {
            let b = Breaker::default();
            let mut now = Instant::now();
            for (available, wait_ms) in steps {
                now += Duration::from_millis(wait_ms);
                match b.enter(now) {
                    Ok(probe) => {
                        if probe {
                            prop_assert!(b.enter(now).is_err(), "a second probe went out");
                        }
                        b.settle(probe, available, now);
                        if available {
                            prop_assert_eq!(b.enter(now).ok(), Some(false));
                        }
                    }
                    Err(_) => {
                        let s = b.lock();
                        prop_assert!(s.failures >= FAILURES_TO_OPEN);
                        prop_assert!(s.open_until.is_some_and(|u| now < u) || s.probing);
                    }
                }
            }
        }
    }
}
