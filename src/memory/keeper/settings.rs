//! How memories are retained and recalled: [`MemorySettings`] and their
//! defaults, and the fixed bounds on the fields of a memory call.

use std::time::Duration;

use crate::memory::model::BUILTIN_TYPES;
use crate::memory::parse;
use crate::memory::store::Retention;

/// Longest idempotency key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest subject, in bytes.
pub const MAX_SUBJECT_BYTES: usize = 512;
/// Longest scope or type name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most scopes on a memory.
pub const MAX_SCOPES: usize = 64;
/// Most memories one Retain stores.
pub const MAX_MEMORIES_PER_RETAIN: usize = parse::MAX_BLOCKS;
/// Most memories a page of ListMemories holds.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Page size when a request gives none.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// Default of [`MemorySettings::recall_timeout`].
pub const DEFAULT_RECALL_TIMEOUT: Duration = Duration::from_millis(50);
/// Default of [`MemorySettings::max_store_waits`].
pub const DEFAULT_MAX_STORE_WAITS: u32 = 64;
/// Default of [`MemorySettings::max_memory_bytes`]: 16 KiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u32 = 16 * 1024;
/// Default of [`MemorySettings::max_recall_bytes`]: 1 MiB.
pub const DEFAULT_MAX_RECALL_BYTES: u64 = 1 << 20;
/// Default of [`MemorySettings::max_page_bytes`]: 1 MiB, so a page stays
/// well under the 4 MiB gRPC clients accept by default.
pub const DEFAULT_MAX_PAGE_BYTES: u64 = 1 << 20;

/// What a recall the store does not answer in time (or at all) does to its
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecallFailure {
    /// The prompt is assembled without memories, with a
    /// `RECALL_UNAVAILABLE` warning.
    #[default]
    Degrade,
    /// The request fails with UNAVAILABLE.
    Fail,
}

/// How memories are retained and recalled.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    /// Observation types accepted: the built-in five and configured others.
    pub types: Vec<String>,
    /// Limits per subject, applied on every write.
    pub retention: Retention,
    /// Memories recalled when a request does not say.
    pub recall_limit: u32,
    /// The most a request may ask to recall.
    pub max_recall_limit: u32,
    /// Recency's weight halves every this long.
    pub half_life: Duration,
    /// The longest a recall waits on the store, its wait for a store slot
    /// included.
    pub recall_timeout: Duration,
    /// What a recall that times out or fails does.
    pub recall_failure: RecallFailure,
    /// Most calls waiting on the store at once (recalls, Retain, Forget,
    /// ListMemories), apart from the CPU work slots.
    pub max_store_waits: u32,
    /// Largest memory, in bytes of its fields.
    pub max_memory_bytes: u32,
    /// Bytes of candidate memories one recall loads before ranking.
    pub max_recall_bytes: u64,
    /// Bytes of memories one ListMemories page holds.
    pub max_page_bytes: u64,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            types: BUILTIN_TYPES.iter().map(|t| (*t).to_owned()).collect(),
            retention: Retention {
                max_per_subject: 10_000,
                max_age: None,
                max_total_bytes: 0,
            },
            recall_limit: 20,
            max_recall_limit: 200,
            half_life: Duration::from_secs(7 * 24 * 3600),
            recall_timeout: DEFAULT_RECALL_TIMEOUT,
            recall_failure: RecallFailure::Degrade,
            max_store_waits: DEFAULT_MAX_STORE_WAITS,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_recall_bytes: DEFAULT_MAX_RECALL_BYTES,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
        }
    }
}
