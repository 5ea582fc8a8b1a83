//! Retention and recall: durable memories behind the MEMORY block.
//!
//! - [`keeper`]: [`Memories`], which retains, recalls, lists and forgets
//!   under the tenancy rules, within its byte and time bounds.
//! - [`model`]: what a memory is (observation or session summary), free of
//!   wire and storage types.
//! - [`parse`]: observations and summaries out of a model's output, read
//!   leniently as models write them, `<private>` spans removed first.
//! - [`rank`]: full-text relevance and recency into one score.
//! - [`store`]: SQLite (embedded, default) or PostgreSQL (shared), with
//!   versioned migrations, scope filtering in the query, idempotent writes
//!   and retention limits.

pub mod keeper;
pub mod model;
pub mod parse;
pub mod rank;
pub mod store;

pub use keeper::{
    Memories, MemoryError, MemorySettings, Placement, RecallReport, RecallSpec, RetainInput, RetainOutput,
};
pub use model::{Memory, MemoryBody, MemoryId, NewMemory, Observation, SessionSummary};
