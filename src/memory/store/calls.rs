//! What the store's calls take and answer, alike for every backend: a
//! retain's batch and limits, a recall's conditions and candidates, a
//! forget's filter, a list's conditions and page.

use std::time::Duration;

use crate::memory::model::{Memory, MemoryId, NewMemory};

/// Retention limits per subject, enforced on every write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most memories kept per subject (the oldest go first); 0 = no limit.
    pub max_per_subject: u32,
    /// Memories older than this are deleted; `None` = kept forever.
    pub max_age: Option<Duration>,
    /// Most bytes of memories in the whole store (the oldest of any subject
    /// go first); 0 = no limit.
    pub max_total_bytes: u64,
}

/// One `retain`: memories of one subject written under one idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct RetainBatch {
    /// The caller's idempotency key, per subject: a second batch of the
    /// subject with the same key stores nothing and answers the first one's
    /// ids (retention or Forget may have deleted some since).
    pub key: String,
    /// The subject all memories belong to (retention applies to it).
    pub subject: String,
    /// What to store, in order.
    pub memories: Vec<NewMemory>,
    /// The write's time, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// Limits applied to the subject in the same transaction.
    pub retention: Retention,
}

/// Keys older than this are forgotten: a retry comes within minutes.
pub const KEY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a `retain` did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retained {
    /// The ids of the batch's memories, in order (for a replay, those the
    /// first call stored).
    pub ids: Vec<MemoryId>,
    /// Whether the key had been used: nothing was stored.
    pub replayed: bool,
    /// Memories the retention limits of the subject deleted.
    pub evicted: u64,
    /// Memories of any subject the store's size bound deleted.
    pub evicted_for_space: u64,
}

impl Retained {
    /// A replay: the key had stored the memories `ids` (as stored).
    pub(super) fn replay(ids: Vec<String>) -> Retained {
        Retained {
            ids: ids.into_iter().map(MemoryId::stored).collect(),
            replayed: true,
            ..Retained::default()
        }
    }
}

/// A recall's conditions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecallQuery {
    /// Only this subject's memories.
    pub subject: String,
    /// Search terms (letters and digits only, lower case); empty = by
    /// recency alone.
    pub terms: Vec<String>,
    /// The principal's scopes: a memory is a candidate only if it requires
    /// none outside them.
    pub scopes: Vec<String>,
    /// Only these types; empty = all.
    pub types: Vec<String>,
    /// Most candidates of each kind (best by relevance, and newest).
    pub limit: u32,
    /// Most bytes of titles and bodies loaded: candidates stop there (best
    /// matches first, then the newest).
    pub max_bytes: u64,
}

/// A recall candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The memory's id.
    pub id: MemoryId,
    /// The store's order of writes (later is greater); never leaves the
    /// process.
    pub seq: i64,
    /// Its type.
    pub memory_type: String,
    /// Its title.
    pub title: String,
    /// Its prompt text.
    pub body: String,
    /// When it was stored (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// Full-text relevance to the terms, higher is better, 0 when it does
    /// not match (a recent memory). Scales differ between backends; rank
    /// normalizes.
    pub relevance: f64,
}

/// What `forget` deletes: always memories of one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForgetFilter {
    /// These memories of the subject (ids of other subjects' memories are
    /// not found).
    Ids(String, Vec<MemoryId>),
    /// Every memory of a subject (and its idempotency keys).
    Subject(String),
    /// Every memory of a subject with one type.
    SubjectType(String, String),
}

impl ForgetFilter {
    /// The subject whose memories go.
    pub fn subject(&self) -> &str {
        match self {
            ForgetFilter::Ids(s, _) | ForgetFilter::Subject(s) | ForgetFilter::SubjectType(s, _) => s,
        }
    }
}

/// What a `forget` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Forgotten {
    /// Memories deleted.
    pub deleted: u64,
    /// For [`ForgetFilter::Ids`]: ids that named no memory of the subject
    /// (each id counted once).
    pub not_found: u64,
}

impl Forgotten {
    /// The outcome of deleting `deleted` of the memories `ids` named.
    pub(super) fn of_ids(ids: &[MemoryId], deleted: u64) -> Forgotten {
        let distinct: std::collections::HashSet<&MemoryId> = ids.iter().collect();
        Forgotten {
            deleted,
            not_found: (distinct.len() as u64).saturating_sub(deleted),
        }
    }

    /// The outcome of deleting `deleted` memories by subject or type.
    pub(super) fn all(deleted: u64) -> Forgotten {
        Forgotten {
            deleted,
            not_found: 0,
        }
    }
}

/// One page of a subject's memories, newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    /// The memories the principal may see.
    pub memories: Vec<Memory>,
    /// Memories in the page's range the principal may not see (skipped).
    pub hidden: u32,
    /// Pass as `before` for the next page; `None` on the last one.
    pub next: Option<i64>,
}

/// A page's conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery<'a> {
    /// Only this subject's memories.
    pub subject: &'a str,
    /// The principal's scopes: a memory is listed only if it requires none
    /// outside them (others are counted as hidden).
    pub scopes: &'a [String],
    /// Most memories of the subject the page covers, listed or hidden.
    pub limit: u32,
    /// Only memories older than this (the previous page's `next`).
    pub before: Option<i64>,
    /// Most bytes of content past the page's first memory.
    pub max_bytes: u64,
}
