//! The domain: turns the parts of a prompt into one budgeted, ordered,
//! cache-stable prompt with exact token accounting. Knows nothing of gRPC.
//!
//! - [`request`] / [`response`]: the domain's input and output types.
//! - [`tokenizer`], [`models`]: how a model name becomes a token counter.
//! - [`cache`]: token counts keyed by blake3(tokenizer, bytes).
//! - [`render`]: units whose counts add up exactly across seams.
//! - [`turns`]: tool-call pairing; [`allocate`]: the budget allocator.
//! - [`policy`]: named policies and the catalog swapped on reload.
//! - [`validate`]: request checks; [`assembler`]: the pipeline; `layout`:
//!   ordering; `report`: the decision report.

pub mod allocate;
pub mod assembler;
pub mod batch;
pub mod cache;
pub mod cancel;
pub mod error;
pub mod families;
pub mod feedback;
mod hints;
mod layout;
pub mod models;
pub mod policy;
pub mod render;
mod report;
pub mod request;
pub mod response;
pub mod tokenizer;
pub mod tools;
pub mod turns;
pub mod validate;
pub mod volatile;

pub use assembler::{Assembler, CountTarget, DEFAULT_CACHE_BYTES, TokenCount};
pub use cancel::{Cancel, Meter};
pub use error::{AssembleError, FieldViolation};
pub use models::{ModelSpec, ModelTable};
pub use policy::{Catalog, DEFAULT_POLICY, Policy};
pub use request::{AssembleRequest, Block, BlockKind, Item, Principal, Role, Segment, SegmentKind};
pub use response::{
    Assembly, BlockDecision, Breakpoint, BreakpointKind, CacheHints, CacheInfo, Message, Outcome, Usage,
    Warning,
};
pub use tokenizer::{Encoding, Tokenizer};
