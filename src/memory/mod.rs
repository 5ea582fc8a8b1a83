//! Retention and recall: durable memories behind the MEMORY block.
//!
//! - [`model`]: what a memory is (observation or session summary), free of
//!   wire and storage types.
//! - [`parse`]: observations and summaries out of a model's output, read
//!   leniently as models write them, `<private>` spans removed first.
//! - [`rank`]: full-text relevance and recency into one score.
//! - [`store`]: SQLite (embedded, default) or PostgreSQL (shared), with
//!   versioned migrations, scope filtering in the query, idempotent writes
//!   and retention limits.

pub mod memories;
pub mod model;
pub mod parse;
pub mod rank;
pub mod store;

pub use memories::{
    Memories, MemoryError, MemorySettings, Placement, RecallReport, RecallSpec, RetainInput, RetainOutput,
};
pub use model::{Content, Memory, MemoryId, NewMemory, Observation, SessionSummary};
