//! The circuit breaker in front of the provider: `threshold` consecutive
//! failures (a timeout, a connect or TLS error, a 5xx, an answer without a
//! count) open it; while open, no call goes; after `cooldown` one trial call
//! goes (half-open) and the others wait for its verdict: a success closes
//! the breaker, a failure opens it for another cooldown. A refusal (4xx) is
//! an answer, so a success here; a 429 is neither (the bucket handles it),
//! and a trial that ends in one lets the next caller try.
//!
//! A pure state machine: the caller passes the time.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { trial_out: bool },
}

/// Whether a call may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The breaker is closed: go.
    Go,
    /// The cooldown has passed: go as the one trial, and report its verdict.
    Trial,
    /// Not now: ask again at this time, or (`None`) when the pending trial's
    /// verdict changes the state.
    Wait(Option<Instant>),
}

/// What a verdict did to the breaker, for the log and the metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing worth saying.
    None,
    /// The breaker opened (or reopened after a failed trial).
    Opened,
    /// The breaker closed after being open.
    Closed,
}

/// The provider's breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    failures: u32,
    state: State,
}

impl Breaker {
    /// A closed breaker opening after `threshold` consecutive failures (at
    /// least 1), open for `cooldown` each time.
    pub fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            threshold: threshold.max(1),
            cooldown,
            failures: 0,
            state: State::Closed,
        }
    }

    /// Whether a call may go at `now`; [`Admit::Trial`] takes the one trial.
    pub fn admit(&mut self, now: Instant) -> Admit {
        match self.state {
            State::Closed => Admit::Go,
            State::Open { until } if now < until => Admit::Wait(Some(until)),
            State::Open { .. } | State::HalfOpen { trial_out: false } => {
                self.state = State::HalfOpen { trial_out: true };
                Admit::Trial
            }
            State::HalfOpen { trial_out: true } => Admit::Wait(None),
        }
    }

    /// Whether calls are held back (open, or half-open).
    pub fn is_open(&self) -> bool {
        self.state != State::Closed
    }

    /// The provider answered: the breaker closes.
    pub fn success(&mut self) -> Change {
        self.failures = 0;
        let was_open = self.is_open();
        self.state = State::Closed;
        if was_open { Change::Closed } else { Change::None }
    }

    /// A call failed at `now`: counted; at the threshold, or on a trial, the
    /// breaker opens until `now + cooldown`. A call admitted before the
    /// breaker opened and failing after changes nothing more.
    pub fn failure(&mut self, now: Instant) -> Change {
        self.failures = self.failures.saturating_add(1);
        let opens = match self.state {
            State::Closed => self.failures >= self.threshold,
            State::HalfOpen { .. } => true,
            State::Open { .. } => false,
        };
        if !opens {
            return Change::None;
        }
        self.state = State::Open {
            until: now + self.cooldown,
        };
        Change::Opened
    }

    /// A call ended without a verdict on the provider's health (a 429): a
    /// trial's place goes to the next caller.
    pub fn neutral(&mut self) {
        if self.state == (State::HalfOpen { trial_out: true }) {
            self.state = State::HalfOpen { trial_out: false };
        }
    }
}

#[cfg(test)]
mod tests;
