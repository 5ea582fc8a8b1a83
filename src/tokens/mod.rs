//! How text becomes tokens for a model: the layer above [`crate::vocab`],
//! below every room that counts. It knows models, encodings and counts; it
//! knows nothing of requests, blocks or gRPC.
//!
//! - [`tokenizer`]: exact BPE for public encodings, or an estimate with a
//!   safety margin.
//! - [`models`]: the model table a model name resolves against.
//! - [`pretok`]: the cl100k and o200k pre-tokenizers, by hand.
//! - [`singles`]: whether a piece is itself one token, in one probe.
//! - [`digest`]: blake3 digests, with a tally of the bytes hashed.
//! - [`cache`]: token counts keyed by blake3(tokenizer, bytes), shared by
//!   every room that counts.
//! - [`chat`]: the chat formula (what a message and a reply cost besides
//!   their content), written once.

pub mod cache;
pub mod chat;
pub mod digest;
pub mod models;
pub mod pretok;
pub mod singles;
pub mod tokenizer;

pub use cache::{CountCache, MemoCache, Weigh};
pub use models::{CacheSettings, ModelSpec, ModelTable};
pub use tokenizer::{Encoding, Tokenizer};
