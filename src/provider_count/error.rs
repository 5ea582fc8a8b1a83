//! Why a count was not learned. Messages name a status, a kind of failure or
//! a setting, never a key, a prompt's text, or what the provider answered.

/// Why a call, a measurement or the counter's start failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CountError {
    /// The counter is closed.
    #[error("the provider counter is closed")]
    Closed,
    /// The breaker is open: no call was made.
    #[error("the provider's breaker is open: no call made")]
    BreakerOpen,
    /// The provider refused the request (400, 404, 413, 422).
    #[error("the provider refused the request (HTTP {status})")]
    Refused {
        /// The HTTP status.
        status: u16,
    },
    /// The piece was not sent: this room will not send it as it is.
    #[error("the piece cannot be sent: {reason}")]
    Unsendable {
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The provider answered 429.
    #[error("the provider throttled the request (HTTP 429)")]
    Throttled,
    /// The call failed (the breaker counted it).
    #[error("the provider call failed: {0}")]
    Failed(Failure),
    /// A setting cannot work.
    #[error("provider counting setting `{field}`: {problem}")]
    Settings {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// How a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// No answer within the timeout (connecting included).
    #[error("timed out")]
    Timeout,
    /// The connection could not be opened.
    #[error("could not connect")]
    Connect,
    /// The TLS handshake failed.
    #[error("TLS handshake failed")]
    Tls,
    /// The connection broke.
    #[error("connection error")]
    Io,
    /// A status that is neither a count, a refusal nor a 429.
    #[error("HTTP {0}")]
    Status(u16),
    /// The answer exceeded `MAX_ANSWER_BYTES`.
    #[error("answer larger than 64 KiB")]
    TooLarge,
    /// A 2xx answer without a count.
    #[error("answer without a count")]
    NoCount,
}

impl Failure {
    /// The failure's name in log fields.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Connect => "connect",
            Failure::Tls => "tls",
            Failure::Io => "io",
            Failure::Status(_) => "status",
            Failure::TooLarge => "too_large",
            Failure::NoCount => "no_count",
        }
    }
}
