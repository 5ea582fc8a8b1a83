//! Assembling: turns the parts of a prompt into one budgeted, ordered,
//! cache-stable prompt with exact token accounting. Knows nothing of gRPC.
//! Uses [`crate::compact`] (turns that do not fit are summarized before they
//! are dropped) and [`crate::prompt_cache`]; neither uses it.
//!
//! - [`assembler`]: the facade shared by every request (catalog, caches).
//! - `pipeline`: one request's run (filter, group, measure, allocate);
//!   `measure`: the blocks measured (units, candidates, keys);
//!   `counting`: counting through the caches, tallies, the warm-only rule;
//!   `caches`: the caches every request shares; `turn_memo`: a summary of
//!   turns as they remember it;
//!   `shrink`: compact, truncated and summarized forms on demand, from
//!   the counter and the measurement (not the pipeline).
//! - [`validate`]: request checks; [`policy`]: policies and the catalog.
//! - [`turns`]: tool-call pairing; [`allocate`]: the budget allocator.
//! - [`render`]: units whose counts add up exactly across seams.
//! - `layout`: ordering for attention and caches; `report`: the decisions.
//! - [`batch`]: many requests at once; [`error`]: why a request failed.
//! - [`flow`]: the one Assemble flow every edge calls (recall, warm try,
//!   cold run, request metrics).

pub mod allocate;
pub mod assembler;
pub mod batch;
mod caches;
mod counting;
pub mod error;
pub mod flow;
mod layout;
pub mod learned;
mod lighten;
mod measure;
mod pipeline;
pub mod policy;
pub mod render;
mod report;
mod shrink;
mod stages;
mod turn_memo;
pub mod turns;
pub mod validate;

pub use assembler::{Assembler, CountTarget, DEFAULT_CACHE_BYTES, TokenCount};
pub use error::AssembleError;
pub use policy::{Catalog, DEFAULT_POLICY, Policy};
pub use stages::{Attempt, Options};
pub use turn_memo::TURN_SUMMARY_ID;
