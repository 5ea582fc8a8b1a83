//! Assembling: turns the parts of a prompt into one budgeted, ordered,
//! cache-stable prompt with exact token accounting. Knows nothing of gRPC.
//! Uses [`crate::compact`] (turns that do not fit are summarized before they
//! are dropped) and [`crate::prompt_cache`]; neither uses it.
//!
//! One request is a list of stages (`stages`, in order; [`Assembler::run`]
//! is that list): admit (validate, neutralize, key the prefix), fit (one
//! `pipeline` try or more: measure, allocate, lay out, render, report),
//! account (cache plan, fingerprint, divergence), answer. The files below
//! serve them; none calls back into an earlier stage.
//!
//! - [`assembler`]: the facade shared by every request (catalog, caches).
//! - `stages`: admit, fit, account, answer, each a file with its product.
//! - `pipeline`: one fit try, as steps (`pipeline/measure`, allocate,
//!   `pipeline/lay_out`, `pipeline/render`, report);
//!   `measure`: the blocks measured (units, candidates, keys, what
//!   lightening may do to each turn);
//!   `counting`: counting through the caches, tallies, the inline allowance;
//!   `caches`: the caches every request shares; `turn_memo`: a summary of
//!   turns as they remember it;
//!   `shrink`: compact, truncated and summarized forms on demand, from
//!   the counter and the measurement (not the pipeline);
//!   `lighten`: turns lightened (tool results cleared, thinking dropped).
//! - [`validate`]: request checks; [`policy`]: policies and the catalog.
//! - [`turns`]: tool-call pairing; [`allocate`]: the budget allocator.
//! - [`render`]: units whose counts add up exactly across seams.
//! - `layout`: ordering for attention and caches; `report`: the decisions.
//! - [`batch`]: many requests at once; [`error`]: why a request failed.
//! - [`flow`]: the one Assemble flow every edge calls (recall, inline try,
//!   full run, request metrics): each edge converts its wire form into an
//!   [`AssembleRequest`](crate::prompt::AssembleRequest) and back.

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
