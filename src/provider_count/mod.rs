//! The provider's own count of each distinct prompt piece, learned in the
//! background (issue 52): for models whose tokenizer is not public (Claude
//! Opus 4.7 and later, Gemini) a piece (a system prompt, a tool set, one turn,
//! one context item) is sent once, off the request path, to the provider's
//! free counting endpoint as a one-message request, and the count less the
//! frame of that request is handed to a [`Sink`] as the piece's content
//! tokens.
//!
//! [`Counter::submit`] never waits: it queues the piece unless the same
//! (generation, key) is already queued or in flight. A bounded queue drops its
//! oldest piece when full. Calls go out under a token bucket
//! (`bucket`: evenly paced, burst of one), at most `concurrency` at a time,
//! each under a timeout, behind a circuit breaker (`breaker`) that stops
//! calling a provider that fails. Before a model's first piece is learned its
//! [`Frames`] are measured with three calls (`frames`).
//!
//! With a [`Shared`] store ([`Counter::share`]: the PostgreSQL memory
//! store's table, when one is configured) a fleet counts each piece once:
//! a piece is looked up there before the provider is called, and what the
//! provider answers is written there; best-effort, bounded, never on the
//! request path (`shared`).
//!
//! The API key is a [`Secret`]: it is written only into its header (marked
//! sensitive), never into a log line, an error or a metric; prompt text never
//! leaves this room except in the body sent to the provider. The test
//! `tests/provider_count` (`the_key_is_sent_only_in_its_header_and_never_shown`)
//! holds that against a stand-in provider.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

mod breaker;
mod bucket;
mod client;
mod counter;
mod error;
mod frames;
mod queue;
mod shared;
mod wire;
mod work;

pub use counter::Counter;
pub use error::{CountError, Failure};
pub use shared::{Shared, SharedFuture, SharedUnavailable};

/// A provider's counting API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// Anthropic's `POST /v1/messages/count_tokens` (`input_tokens`).
    Anthropic,
    /// Gemini's `POST /v1beta/models/{model}:countTokens` (`totalTokens`).
    Gemini,
}

impl Api {
    /// The `provider` label of this API's metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
        }
    }
}

/// An API key. Its `Debug` and `Display` print `<redacted>`; it is never
/// logged, never put in an error or a metric, and sent only in its header.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `key`.
    pub fn new(key: impl Into<String>) -> Secret {
        Secret(key.into())
    }

    /// The key itself, for the one place that writes its header.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(key: String) -> Secret {
        Secret(key)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How the counter reaches its provider and how hard it may use it.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which counting API the endpoint speaks.
    pub api: Api,
    /// Anthropic: the count_tokens URL
    /// (`https://api.anthropic.com/v1/messages/count_tokens`, or a proxy's).
    /// Gemini: a URL with a `{model}` placeholder in its path
    /// (`https://generativelanguage.googleapis.com/v1beta/models/{model}:countTokens`).
    /// `http://` and `https://` both work (https with rustls and the webpki
    /// roots).
    pub url: String,
    /// The API key, sent in `x-api-key` (Anthropic) or `x-goog-api-key`
    /// (Gemini).
    pub api_key: Secret,
    /// Calls per minute at most: a token bucket refilled continuously,
    /// holding one call (calls are paced evenly). At least 1.
    pub requests_per_minute: u32,
    /// Calls in flight at most. At least 1.
    pub concurrency: usize,
    /// The longest one call may take, connecting included.
    pub timeout: Duration,
    /// Pieces waiting at most; a piece submitted to a full queue drops the
    /// oldest one (counted). At least 1.
    pub queue: usize,
    /// Consecutive failures (timeout, connect or TLS error, 5xx, an answer
    /// without a count) that open the breaker. At least 1.
    pub breaker_failures: u32,
    /// How long the breaker stays open before one trial call.
    pub breaker_cooldown: Duration,
    /// How long a request may wait for its provider to count its static
    /// prefix at first sight (zero: never waits). The counter does not read
    /// it; the assembler does.
    pub wait: Duration,
}

/// What a piece is, which decides how it is sent and what is subtracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PieceKind {
    /// A conversation turn or a context item: sent as the one user message.
    Turn,
    /// A system prompt: sent as the system prompt beside a user `"a"`.
    System,
    /// A tool set: sent as the tools beside a user `"a"`.
    Tools,
}

impl PieceKind {
    /// The kind's name in log fields.
    pub fn as_str(self) -> &'static str {
        match self {
            PieceKind::Turn => "turn",
            PieceKind::System => "system",
            PieceKind::Tools => "tools",
        }
    }
}

/// One distinct prompt piece to count. Its `Debug` shows sizes, never the
/// text or the key.
#[derive(Clone)]
pub struct Piece {
    /// The provider's model name, sent as is (letters, digits and `.-_:@`
    /// only, at most [`MAX_MODEL_BYTES`]; another name is refused without a
    /// call).
    pub model: String,
    /// The tokenizer generation (opaque here; part of the dedup key).
    pub generation: Arc<str>,
    /// The piece's content key (opaque here; part of the dedup key).
    pub key: [u8; 32],
    /// What the piece is.
    pub kind: PieceKind,
    /// Turn and System: the text. Tools: a JSON array of tool definitions in
    /// the provider's own shape (not JSON: refused without a call).
    pub text: Arc<str>,
}

impl fmt::Debug for Piece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Piece")
            .field("model", &self.model)
            .field("generation", &self.generation)
            .field("kind", &self.kind)
            .field("text_bytes", &self.text.len())
            .finish_non_exhaustive()
    }
}

/// The longest model name a piece may carry.
pub const MAX_MODEL_BYTES: usize = 128;

/// What a model's counting adds around the content, measured once per model
/// (see `frames` for how, and the one assumption it rests on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frames {
    /// A request of one user message, less its content.
    pub one_message: u32,
    /// Each message after the first, less its content.
    pub further_message: u32,
    /// A system prompt, less its content.
    pub system: u32,
}

/// Where learned counts go.
pub trait Sink: Send + Sync + 'static {
    /// The piece's content tokens: the provider's count less the frame of
    /// its one-message request. Turn: its text alone. System: the system
    /// prompt's whole cost, its frame included (`Frames::system` of it).
    /// Tools: the whole tool set's cost.
    fn learned(&self, piece: &Piece, content_tokens: u32);
    /// The provider refused the piece (a 400: a tool shape it does not take,
    /// an image by URL...), or the piece could not be sent (a model name or a
    /// tool set this room will not send): it stays estimated.
    fn refused(&self, piece: &Piece);
}

/// What [`Counter::submit`] did with a piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Queued.
    Queued,
    /// The same (generation, key) is queued or in flight: not queued again.
    Duplicate,
    /// Queued, and the oldest queued piece was dropped to make room.
    DroppedOldest,
    /// The counter is closed: not queued.
    Closed,
}

/// What the counter has done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Pieces waiting.
    pub queued: usize,
    /// Pieces taken from the queue and not finished (measuring frames,
    /// waiting for a call, or calling).
    pub in_flight: usize,
    /// Calls sent to the provider (frame measurements included).
    pub sent: u64,
    /// Pieces whose content tokens went to the sink (from the provider or
    /// the shared store).
    pub learned: u64,
    /// Pieces learned from the shared store, without a provider call.
    pub shared: u64,
    /// Calls to the shared store that failed or timed out (reads and
    /// writes; calls skipped while its breaker is open are not made).
    pub shared_failed: u64,
    /// Pieces the provider refused (or that could not be sent).
    pub refused: u64,
    /// Pieces given up after a failed call, or throttled twice.
    pub failed: u64,
    /// Calls the provider answered 429.
    pub throttled: u64,
    /// Pieces dropped from the full queue to make room.
    pub dropped: u64,
    /// Whether the breaker is open (or half-open, a trial pending).
    pub breaker_open: bool,
}
