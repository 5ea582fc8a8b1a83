//! How text becomes tokens for a model: the layer above [`crate::vocab`],
//! below every room that counts. It knows models, encodings and counts; it
//! knows nothing of requests, blocks or gRPC.
//!
//! - [`encoding`]: the public BPE encodings by name.
//! - [`tokenizer`]: exact BPE for public encodings, a model folder's own
//!   tokenizer, or an estimate with a safety margin.
//! - [`estimate`]: content-aware estimates for tokenizers that are not
//!   public, from a text's features, refined online by exact counts.
//! - [`hf`]: a model folder in the Hugging Face layout (tokenizer.json and
//!   chat template), loaded and checked.
//! - [`template`]: chat templates, executed as `transformers` executes them.
//! - [`models`]: the model table a model name resolves against.
//! - [`provider`]: who serves a model and its prompt cache's rules.
//! - [`pretok`]: the cl100k and o200k pre-tokenizers, by hand.
//! - [`singles`]: whether a piece is itself one token, in one probe.
//! - [`digest`]: blake3 digests, and the count keys of texts (SHA-256 for
//!   short ones on x86-64's SHA extensions), with a tally of the bytes hashed.
//! - [`cache`]: token counts keyed by a digest of (tokenizer, bytes), shared
//!   by every room that counts.
//! - [`tools`]: what OpenAI bills for tool definitions (the cookbook's
//!   function-calling formula).
//! - [`chat`]: the chat formula (what a message and a reply cost besides
//!   their content), written once.
//! - [`framing`]: what a model's prompt costs besides its contents (OpenAI's
//!   formula, a chat template's frames measured at load), below the
//!   tokenizer that holds it.

pub mod cache;
pub mod chat;
pub mod digest;
pub mod encoding;
pub mod estimate;
pub mod framing;
pub mod hf;
pub mod models;
pub mod pretok;
pub mod provider;
pub mod singles;
pub mod template;
pub mod tokenizer;
pub mod tools;

pub use cache::{CountCache, KnownKeys, MemoCache, RequestKeys, Weigh};
pub use encoding::Encoding;
pub use models::{CacheSettings, ModelSpec, ModelTable};
pub use template::{ChatMessage, Conversation, TemplateError};
pub use tokenizer::Tokenizer;
