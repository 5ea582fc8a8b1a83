//! Prompt caching: what makes provider, engine and router caches pay for the
//! prompts the sidecar assembles. Below [`crate::assemble`], which calls it;
//! it reads prompt types and counts, never the pipeline.
//!
//! - [`prefix`]: the static prefix hash and what the prefix cache remembers.
//! - [`volatile`]: values that would change the prefix between requests.
//! - [`families`]: how often each configured prefix family changes hash.
//! - [`tools`]: canonical tool definitions (part of the prefix).
//! - [`hints`]: breakpoints, cache keys and routing headers for a prompt.
//! - [`feedback`]: provider usage reports against the sidecar's counts.
//! - [`plan`]: where the markers go in a provider's own terms, and whether
//!   each takes effect.
//! - [`fingerprint`]: a prompt's fingerprint, and where the next one first
//!   differs from it.
//! - [`batch`]: grouping a batch by shared prefix, and its dispatch order.

pub mod batch;
pub mod block_keys;
pub mod families;
pub mod feedback;
pub mod fingerprint;
pub mod hints;
pub mod plan;
pub mod prefix;
pub mod tools;
pub mod volatile;
