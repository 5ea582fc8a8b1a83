//! The prompt's parts and the assembled prompt: the domain's input and
//! output types, free of wire types. A layer above [`crate::vocab`], read by
//! every room that assembles, caches or recalls.

pub mod cache;
pub mod request;
pub mod response;

pub use cache::{CachePlan, Change, Divergence, Ineffective, Marker, MarkerTarget, PartKind, ProviderField};
pub use request::{
    AssembleRequest, Block, BlockKind, HeldScopes, Item, MAX_PRINCIPAL_SCOPES, MAX_SCOPES_PER_ITEM,
    MAX_THINKING_PER_MESSAGE, MAX_TOOL_CALL_IDS_PER_MESSAGE, MAX_TOOL_NAME_BYTES, Principal, Segment,
    SegmentKind, Thinking,
};
pub use response::{
    Assembly, BlockDecision, Breakpoint, BreakpointKind, CacheHints, CacheInfo, Message, Outcome, Sources,
    TokenIds, Usage,
};
