//! Admission: what a request must pass before the domain works on it, and the
//! deadline it is worked under. Every refusal is counted by reason.
//!
//! - size: the first gRPC frame header is checked before the body is buffered
//!   ([`super::gate`], which also applies the deadline and takes the slot);
//! - shape: at most `max_blocks` blocks and `max_items` items, and at most
//!   `max_batch_requests` requests in a batch. Each count is checked once:
//!   by the gate from the encoded message where a refusal fails the whole
//!   call (a unary Assemble's blocks and items, a batch's size), by the
//!   service where it fails one part (a stream's message, a batch's
//!   request) or where the gate does not measure (Compact's messages);
//! - concurrency: at most `max_concurrency` requests in the domain at once; a
//!   request over it is shed at once (RESOURCE_EXHAUSTED), nothing queues;
//! - deadline: the client's `grpc-timeout`, capped by the configured default;
//!   on expiry the caller gets DEADLINE_EXCEEDED and the work is cancelled.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::shape::Measure;
use crate::assemble::flow::Admit;
use crate::config::Limits;
use crate::telemetry::metrics;
use crate::vocab::saturating_u32;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The concurrency limit is reached.
    #[error(
        "overloaded: {limit} requests already in progress (limits.max_concurrency); retry after a short back-off"
    )]
    Overloaded {
        /// `limits.max_concurrency`.
        limit: u32,
    },
    /// The upload budget is spent: messages being received or worked on
    /// already hold it.
    #[error(
        "overloaded: the upload budget of {budget_bytes} bytes (limits.max_concurrency x limits.max_request_bytes) \
         is held by messages being received or worked on; retry after a short back-off"
    )]
    UploadBudget {
        /// The whole budget, in bytes.
        budget_bytes: u64,
    },
    /// The request message is larger than allowed.
    #[error("request message of {bytes} bytes exceeds the limit of {limit} bytes (limits.max_request_bytes)")]
    TooLarge {
        /// Declared message size.
        bytes: u32,
        /// `limits.max_request_bytes`.
        limit: u32,
    },
    /// Too many blocks.
    #[error("{count} blocks exceed the limit of {limit} (limits.max_blocks)")]
    TooManyBlocks {
        /// Blocks in the request.
        count: usize,
        /// `limits.max_blocks`.
        limit: u32,
    },
    /// Too many items.
    #[error("{count} items exceed the limit of {limit} (limits.max_items)")]
    TooManyItems {
        /// Items in the request.
        count: usize,
        /// `limits.max_items`.
        limit: u32,
    },
    /// Too many requests in a batch.
    #[error("{count} requests in the batch exceed the limit of {limit} (limits.max_batch_requests)")]
    TooManyRequests {
        /// Requests in the batch.
        count: usize,
        /// `limits.max_batch_requests`.
        limit: u32,
    },
    /// Decoding the message would allocate far more than its size: it holds
    /// a great many empty or tiny sub-messages.
    #[error(
        "the request message would take {decoded_bytes} bytes to decode, over the limit of {limit} for its size: \
         it holds too many empty or tiny sub-messages"
    )]
    TooComplex {
        /// What decoding would allocate (an upper bound).
        decoded_bytes: u64,
        /// What a message of its size may take.
        limit: u64,
    },
    /// The deadline passed before the answer was ready.
    #[error("deadline exceeded before the request finished; its work was cancelled")]
    DeadlineExceeded,
}

impl Refusal {
    /// The bounded metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Overloaded { .. } => metrics::REFUSED_CONCURRENCY,
            Refusal::UploadBudget { .. } => metrics::REFUSED_UPLOAD_BUDGET,
            Refusal::TooManyRequests { .. } => metrics::REFUSED_TOO_MANY_REQUESTS,
            Refusal::TooComplex { .. } => metrics::REFUSED_TOO_COMPLEX,
            Refusal::TooLarge { .. } => metrics::REFUSED_REQUEST_TOO_LARGE,
            Refusal::TooManyBlocks { .. } => metrics::REFUSED_TOO_MANY_BLOCKS,
            Refusal::TooManyItems { .. } => metrics::REFUSED_TOO_MANY_ITEMS,
            Refusal::DeadlineExceeded => metrics::REFUSED_DEADLINE_EXCEEDED,
        }
    }
}

/// Shared admission state.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    /// Upload budget in KiB: `max_concurrency x max_request_bytes`.
    upload_kib: Arc<Semaphore>,
    budget_kib: usize,
    /// See [`Measure::allowance`].
    decode_allowance: u64,
    limits: Limits,
}

/// Bytes of the upload budget held for a message: its size while it is
/// received, then what it decodes to, until it has been answered.
#[derive(Debug)]
pub struct Reserved {
    _permit: OwnedSemaphorePermit,
}

impl Reserved {
    fn new(permit: OwnedSemaphorePermit) -> Reserved {
        metrics::upload_budget_held(permit.num_permits() as f64 * 1024.0);
        Reserved { _permit: permit }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        metrics::upload_budget_held(-(self._permit.num_permits() as f64) * 1024.0);
    }
}

/// A slot in the domain: while it lives the request counts as in flight.
/// Moved into the blocking task, so a request whose caller went away still
/// holds its slot until its work has actually stopped.
#[derive(Debug)]
pub struct Permit {
    _permit: OwnedSemaphorePermit,
}

impl Drop for Permit {
    fn drop(&mut self) {
        metrics::in_flight(-1.0);
    }
}

/// The domain's flow admits through the same slots as every RPC.
impl Admit for Admission {
    type Permit = Permit;
    type Refusal = Refusal;

    fn admit(&self) -> Result<Permit, Refusal> {
        Admission::admit(self)
    }

    fn in_flight(&self) -> usize {
        Admission::in_flight(self)
    }
}

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: Limits) -> Self {
        let per_request_kib = limits.max_request_bytes.div_ceil(1024) as usize;
        let budget_kib = (limits.max_concurrency as usize)
            .saturating_mul(per_request_kib)
            .min(Semaphore::MAX_PERMITS);
        Admission {
            permits: Arc::new(Semaphore::new(limits.max_concurrency as usize)),
            upload_kib: Arc::new(Semaphore::new(budget_kib)),
            budget_kib,
            decode_allowance: Measure::allowance(limits.max_items),
            limits,
        }
    }

    /// The largest request message admitted (`limits.max_request_bytes`).
    pub fn max_request_bytes(&self) -> u32 {
        self.limits.max_request_bytes
    }

    /// Reserves `bytes` of the upload budget, or [`Refusal::UploadBudget`]
    /// at once.
    pub fn reserve_upload(&self, bytes: u32) -> Result<Reserved, Refusal> {
        let kib = bytes.div_ceil(1024).max(1);
        self.upload_kib
            .clone()
            .try_acquire_many_owned(kib)
            .map(Reserved::new)
            .map_err(|_| Refusal::UploadBudget {
                budget_bytes: self.budget_kib as u64 * 1024,
            })
    }

    /// Grows `reserved` to `bytes` in all (a message's decoded size, once
    /// measured), or [`Refusal::UploadBudget`] at once.
    pub fn reserve_up_to(&self, reserved: &mut Reserved, bytes: u64) -> Result<(), Refusal> {
        let want = saturating_u32(bytes.div_ceil(1024));
        let held = saturating_u32(reserved._permit.num_permits());
        if want <= held {
            return Ok(());
        }
        let more = self
            .upload_kib
            .clone()
            .try_acquire_many_owned(want - held)
            .map_err(|_| Refusal::UploadBudget {
                budget_bytes: self.budget_kib as u64 * 1024,
            })?;
        metrics::upload_budget_held(more.num_permits() as f64 * 1024.0);
        reserved._permit.merge(more);
        Ok(())
    }

    /// Requests holding a work slot now.
    pub fn in_flight(&self) -> usize {
        (self.limits.max_concurrency as usize).saturating_sub(self.permits.available_permits())
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A slot, or [`Refusal::Overloaded`] at once.
    pub fn admit(&self) -> Result<Permit, Refusal> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::Overloaded {
                limit: self.limits.max_concurrency,
            })?;
        metrics::in_flight(1.0);
        Ok(Permit { _permit: permit })
    }

    /// Checks a request's shape against the block and item limits.
    pub fn check_shape(&self, blocks: usize, items: usize) -> Result<(), Refusal> {
        if blocks > self.limits.max_blocks as usize {
            return Err(Refusal::TooManyBlocks {
                count: blocks,
                limit: self.limits.max_blocks,
            });
        }
        if items > self.limits.max_items as usize {
            return Err(Refusal::TooManyItems {
                count: items,
                limit: self.limits.max_items,
            });
        }
        Ok(())
    }

    /// Checks the counts read from an encoded message: the block and item
    /// limits of a request, the size of a batch.
    pub fn check_counts(&self, m: &Measure) -> Result<(), Refusal> {
        let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        if m.requests > u64::from(self.limits.max_batch_requests) {
            return Err(Refusal::TooManyRequests {
                count: count(m.requests),
                limit: self.limits.max_batch_requests,
            });
        }
        self.check_shape(count(m.blocks), count(m.items))
    }

    /// Refuses a message that would take more than its size allows to
    /// decode ([`Measure::allowed`]).
    pub fn check_decoded(&self, m: &Measure, wire_bytes: u32) -> Result<(), Refusal> {
        let limit = Measure::allowed(u64::from(wire_bytes), self.decode_allowance);
        if m.decoded_bytes > limit {
            return Err(Refusal::TooComplex {
                decoded_bytes: m.decoded_bytes,
                limit,
            });
        }
        Ok(())
    }

    /// The time a request may take: the client's `grpc-timeout` or the
    /// configured default, whichever is shorter.
    pub fn timeout(&self, headers: &HeaderMap) -> Option<Duration> {
        let client = headers
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        match (client, self.limits.default_timeout) {
            (Some(c), Some(d)) => Some(c.min(d)),
            (c, d) => c.or(d),
        }
    }
}

/// Parses a `grpc-timeout` value: at most 8 digits and a unit (H, M, S, m,
/// u, n). `None` for anything else (the header is then ignored).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_per_spec() {
        assert_eq!(parse_grpc_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        for bad in ["", "S", "123456789S", "1s", "-1S", "1.5S", "１S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    fn limits() -> Limits {
        Limits {
            max_request_bytes: 1024,
            max_blocks: 2,
            max_items: 3,
            max_batch_requests: 4,
            max_concurrency: 2,
            default_timeout: Some(Duration::from_secs(5)),
            max_connections: 10,
        }
    }

    #[test]
    fn concurrency_sheds_without_queueing_and_frees_on_drop() {
        let a = Admission::new(limits());
        let p1 = a.admit().unwrap();
        let _p2 = a.admit().unwrap();
        assert_eq!(a.admit().unwrap_err(), Refusal::Overloaded { limit: 2 });
        drop(p1);
        assert!(a.admit().is_ok());
    }

    #[test]
    fn the_upload_budget_is_concurrency_times_the_request_limit() {
        let a = Admission::new(limits());
        // 2 x 1 KiB.
        let first = a.reserve_upload(1024).unwrap();
        let _second = a.reserve_upload(1).unwrap();
        assert_eq!(
            a.reserve_upload(1).unwrap_err(),
            Refusal::UploadBudget { budget_bytes: 2048 }
        );
        drop(first);
        assert!(a.reserve_upload(1000).is_ok());
        assert_eq!(a.in_flight(), 0);
        let _p = a.admit().unwrap();
        assert_eq!(a.in_flight(), 1);
    }

    #[test]
    fn shape_limits_are_inclusive() {
        let a = Admission::new(limits());
        assert!(a.check_shape(2, 3).is_ok());
        assert_eq!(
            a.check_shape(3, 0).unwrap_err(),
            Refusal::TooManyBlocks { count: 3, limit: 2 }
        );
        assert_eq!(
            a.check_shape(1, 4).unwrap_err(),
            Refusal::TooManyItems { count: 4, limit: 3 }
        );
    }

    #[test]
    fn the_shorter_deadline_wins() {
        let a = Admission::new(limits());
        let mut md = HeaderMap::new();
        assert_eq!(a.timeout(&md), Some(Duration::from_secs(5)));
        md.insert("grpc-timeout", "100m".parse().unwrap());
        assert_eq!(a.timeout(&md), Some(Duration::from_millis(100)));
        md.insert("grpc-timeout", "60S".parse().unwrap());
        assert_eq!(a.timeout(&md), Some(Duration::from_secs(5)));
    }
}
