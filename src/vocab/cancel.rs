//! Cancellation: a flag set when a request's deadline passes or its caller
//! goes away, and a meter that loops which can run long tick as they work.
//!
//! A loop over request content looks at the flag every [`CHECK_EVERY`]
//! units of work (bytes scanned, comparisons): often enough that a cancelled
//! request gives its slot back within about a millisecond, rarely enough
//! that the atomic load costs nothing measurable. The meter also counts the
//! work, which is how the tests prove a loop linear without a clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The error of work stopped by its [`Cancel`]; each room's error type has a
/// `Cancelled` case made from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cancelled")]
pub struct Cancelled;

/// A cancellation flag shared between a request's waiter and its worker: once
/// set, long loops stop and return [`Cancelled`].
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A flag that is not set.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Sets the flag.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the flag is set.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Units of work between two looks at the flag: 64 Ki bytes scanned take
/// well under a millisecond.
pub const CHECK_EVERY: u64 = 64 * 1024;

/// Work done under a [`Cancel`]: [`Meter::tick`] adds units of work and, every
/// [`CHECK_EVERY`] units, fails once the flag is set.
#[derive(Debug)]
pub struct Meter<'c> {
    cancel: &'c Cancel,
    work: u64,
    /// The work at which the flag is looked at next (0: at the first tick).
    next_check: u64,
}

impl<'c> Meter<'c> {
    /// A meter with no work done yet; its first tick looks at the flag.
    pub fn new(cancel: &'c Cancel) -> Self {
        Meter {
            cancel,
            work: 0,
            next_check: 0,
        }
    }

    /// Records `units` of work; `Err(Cancelled)` when the flag is set (looked
    /// at every [`CHECK_EVERY`] units).
    pub fn tick(&mut self, units: u64) -> Result<(), Cancelled> {
        self.work = self.work.saturating_add(units);
        if self.work >= self.next_check {
            self.next_check = self.work.saturating_add(CHECK_EVERY);
            if self.cancel.is_cancelled() {
                return Err(Cancelled);
            }
        }
        Ok(())
    }

    /// Units of work recorded so far.
    pub fn work(&self) -> u64 {
        self.work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_looks_at_the_flag_first_and_then_every_check_interval() {
        let cancel = Cancel::new();
        let mut meter = Meter::new(&cancel);
        assert_eq!(meter.tick(1), Ok(()));
        cancel.cancel();
        // Within the interval the flag is not looked at.
        assert_eq!(meter.tick(CHECK_EVERY - 1), Ok(()));
        assert_eq!(meter.tick(1), Err(Cancelled));
        assert_eq!(meter.work(), CHECK_EVERY + 1);
        let mut fresh = Meter::new(&cancel);
        assert_eq!(fresh.tick(0), Err(Cancelled));
    }
}
