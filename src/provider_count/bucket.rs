//! The token bucket that paces calls: refilled continuously at
//! `per_minute / 60` calls a second, holding at most `burst` calls (at least
//! one, at most one second's worth). The counter holds a burst of one, so
//! calls are evenly spaced and any window of `T` seconds sees at most
//! `per_minute * T / 60 + 1` of them (`the_rate_limit_holds_in_every_second`
//! in `tests/provider_count`).
//!
//! Kept as a theoretical arrival time (GCRA, the same bucket in one
//! number): a call may go when `now >= tat - tolerance`, and each call moves
//! `tat` one interval on. A pure state machine: the caller passes the time.

use std::time::{Duration, Instant};

/// Calls paced at a rate, with a bounded burst.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// Time between calls at the steady rate.
    interval: Duration,
    /// How far before `tat` a call may go: `(burst - 1) * interval`.
    tolerance: Duration,
    /// The theoretical arrival time of the next call.
    tat: Instant,
}

impl Bucket {
    /// A full bucket at `now`: `per_minute` calls a minute (at least 1),
    /// `burst` at once (clamped to one call and one second's worth).
    pub fn new(per_minute: u32, burst: u32, now: Instant) -> Bucket {
        let per_minute = per_minute.max(1);
        let second_worth = (per_minute / 60).max(1);
        let burst = burst.clamp(1, second_worth);
        let interval = Duration::from_secs(60) / per_minute;
        Bucket {
            interval,
            tolerance: interval * (burst - 1),
            tat: now,
        }
    }

    /// Takes one call at `now`, or says how long to wait before asking again.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let allowed_at = self.tat.checked_sub(self.tolerance).unwrap_or(self.tat);
        if now < allowed_at {
            return Err(allowed_at - now);
        }
        self.tat = self.tat.max(now) + self.interval;
        Ok(())
    }

    /// No call before `until` (a provider's `retry-after`); after it, one
    /// call, then the steady rate (no burst saved up during the pause).
    pub fn pause_until(&mut self, until: Instant) {
        self.tat = self.tat.max(until + self.tolerance);
    }
}

#[cfg(test)]
mod tests;
