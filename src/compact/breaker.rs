//! The per-session circuit breaker: after `breaker_failures`
//! consecutive compactions that leave a session over its target, the session
//! is trimmed instead of compacted until `breaker_cooldown` passes (then one
//! compaction is tried again) or a compaction succeeds.
//!
//! A session is a (tenant, session id) pair, [`SessionKey`]: the tenant is the
//! request's `cache_salt`, so a caller cannot open (or close) the breaker of
//! another tenant's session by sending its session id.
//!
//! State is a small record per session in a bounded cache: at most
//! [`MAX_SESSIONS`] sessions, each forgotten after [`IDLE_EXPIRY`] without a
//! compaction request, so memory stays bounded whatever session ids callers
//! send. A forgotten breaker is a closed one.

use std::time::{Duration, Instant};

use moka::sync::Cache;

use super::CompactionSettings;

/// Most sessions whose breaker state is remembered.
pub const MAX_SESSIONS: u64 = 100_000;
/// A session's state is forgotten after this long without a request; the
/// longest configurable cooldown.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, Default)]
struct State {
    failures: u32,
    opened_at: Option<Instant>,
}

/// What the breaker says about a session now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Compact as usual.
    Closed,
    /// Too many failures and the cooldown has not passed: trim instead.
    Open,
    /// The cooldown has passed: one compaction is tried; a failure reopens.
    HalfOpen,
}

/// A session's breaker after a request, as reported to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BreakerState {
    /// Consecutive failed compactions.
    pub consecutive_failures: u32,
    /// Whether the session is being trimmed instead of compacted.
    pub open: bool,
    /// Whether this request opened it.
    pub opened_now: bool,
}

/// Whose breaker: a session id within a tenant (the request's
/// `cache_salt`). A bare `&str` is a session of the empty tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionKey<'a> {
    /// The tenant (`cache_salt`).
    pub salt: &'a str,
    /// The session id; empty: no breaker.
    pub session: &'a str,
}

impl<'a> SessionKey<'a> {
    /// The session `session` of tenant `salt`.
    pub fn new(salt: &'a str, session: &'a str) -> Self {
        SessionKey { salt, session }
    }
}

impl<'a> From<&'a str> for SessionKey<'a> {
    fn from(session: &'a str) -> Self {
        SessionKey { salt: "", session }
    }
}

/// The cache key of a session: blake3 of the salt (length-framed) and the
/// session id, so no (salt, id) pair can spell another.
fn id(key: SessionKey<'_>) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&(key.salt.len() as u64).to_le_bytes());
    h.update(key.salt.as_bytes());
    h.update(key.session.as_bytes());
    *h.finalize().as_bytes()
}

/// Breakers of every session.
#[derive(Clone)]
pub struct Breakers {
    /// By blake3 of the salt and session id: any length costs 32 bytes.
    sessions: Cache<[u8; 32], State>,
}

impl std::fmt::Debug for Breakers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breakers")
            .field("sessions", &self.sessions.entry_count())
            .finish()
    }
}

impl Default for Breakers {
    fn default() -> Self {
        Breakers::new(MAX_SESSIONS)
    }
}

impl Breakers {
    /// Breakers for at most `max_sessions` sessions.
    pub fn new(max_sessions: u64) -> Self {
        Breakers {
            sessions: Cache::builder()
                .max_capacity(max_sessions)
                .time_to_idle(IDLE_EXPIRY)
                .build(),
        }
    }

    /// The gate for `session` at `now`. An empty session id has no breaker.
    pub fn gate<'a>(
        &self,
        session: impl Into<SessionKey<'a>>,
        settings: &CompactionSettings,
        now: Instant,
    ) -> Circuit {
        let session = session.into();
        if session.session.is_empty() {
            return Circuit::Closed;
        }
        match self.sessions.get(&id(session)) {
            Some(State {
                failures,
                opened_at: Some(at),
            }) if failures >= settings.breaker_failures => {
                if now.saturating_duration_since(at) < settings.breaker_cooldown {
                    Circuit::Open
                } else {
                    Circuit::HalfOpen
                }
            }
            _ => Circuit::Closed,
        }
    }

    /// The state of `session` without changing it.
    pub fn state<'a>(
        &self,
        session: impl Into<SessionKey<'a>>,
        settings: &CompactionSettings,
        now: Instant,
    ) -> BreakerState {
        let session = session.into();
        let failures = self.sessions.get(&id(session)).map_or(0, |s| s.failures);
        BreakerState {
            consecutive_failures: failures,
            open: self.gate(session, settings, now) == Circuit::Open,
            opened_now: false,
        }
    }

    /// Records a compaction of `session`: a success closes its breaker, a
    /// failure counts and opens it at the threshold (or reopens it after a
    /// failed half-open try). Atomic per session.
    pub fn record<'a>(
        &self,
        session: impl Into<SessionKey<'a>>,
        success: bool,
        settings: &CompactionSettings,
        now: Instant,
    ) -> BreakerState {
        let session = session.into();
        if session.session.is_empty() {
            return BreakerState::default();
        }
        if success {
            self.sessions.invalidate(&id(session));
            return BreakerState::default();
        }
        let mut opened_now = false;
        let entry = self.sessions.entry(id(session)).and_upsert_with(|old| {
            let old = old.map(|e| e.into_value()).unwrap_or_default();
            let failures = old.failures.saturating_add(1);
            let opens = failures >= settings.breaker_failures;
            opened_now = opens;
            State {
                failures,
                opened_at: if opens { Some(now) } else { old.opened_at },
            }
        });
        BreakerState {
            consecutive_failures: entry.value().failures,
            open: opened_now,
            opened_now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CompactionSettings {
        CompactionSettings {
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(60),
            ..CompactionSettings::default()
        }
    }

    #[test]
    fn three_failures_open_and_the_cooldown_half_opens() {
        let b = Breakers::default();
        let s = settings();
        let t0 = Instant::now();
        assert!(!b.record("s", false, &s, t0).open);
        assert_eq!(b.record("s", false, &s, t0).consecutive_failures, 2);
        assert_eq!(b.gate("s", &s, t0), Circuit::Closed);
        let third = b.record("s", false, &s, t0);
        assert!(third.opened_now && third.open);
        assert_eq!(b.gate("s", &s, t0 + Duration::from_secs(59)), Circuit::Open);
        assert_eq!(b.gate("other", &s, t0), Circuit::Closed);
        let later = t0 + Duration::from_secs(61);
        assert_eq!(b.gate("s", &s, later), Circuit::HalfOpen);
        // A failed half-open try reopens for another cooldown.
        assert!(b.record("s", false, &s, later).opened_now);
        assert_eq!(b.gate("s", &s, later + Duration::from_secs(30)), Circuit::Open);
    }

    #[test]
    fn a_success_closes_and_resets() {
        let b = Breakers::default();
        let s = settings();
        let t0 = Instant::now();
        for _ in 0..3 {
            b.record("s", false, &s, t0);
        }
        assert_eq!(b.gate("s", &s, t0), Circuit::Open);
        assert_eq!(b.record("s", true, &s, t0), BreakerState::default());
        assert_eq!(b.gate("s", &s, t0), Circuit::Closed);
        assert_eq!(b.record("s", false, &s, t0).consecutive_failures, 1);
    }

    #[test]
    fn sessions_without_an_id_have_no_breaker() {
        let b = Breakers::default();
        let s = settings();
        let t0 = Instant::now();
        for _ in 0..5 {
            assert_eq!(b.record("", false, &s, t0), BreakerState::default());
        }
        assert_eq!(b.gate("", &s, t0), Circuit::Closed);
    }

    #[test]
    fn memory_is_bounded_by_the_session_limit() {
        let b = Breakers::new(100);
        let s = settings();
        let t0 = Instant::now();
        for i in 0..5_000 {
            b.record(format!("session-{i}").as_str(), false, &s, t0);
        }
        b.sessions.run_pending_tasks();
        assert!(b.sessions.entry_count() <= 100, "{}", b.sessions.entry_count());
    }
}
