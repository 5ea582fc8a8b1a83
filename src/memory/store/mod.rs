//! Where memories live: an embedded SQLite file by default, or PostgreSQL
//! for many sidecars sharing one memory. Both backends give the same
//! guarantees, and `tests/memory_store.rs` runs one suite against each:
//!
//! - a `retain` commits all of its memories, its idempotency key and the
//!   retention evictions in one transaction, durably (SQLite: WAL with
//!   `synchronous = FULL`; PostgreSQL: a committed transaction) before it
//!   returns, and a retried key stores nothing twice;
//! - `recall` applies the subject, type and scope conditions in the query
//!   itself, so a memory the principal may not see is never a candidate;
//! - schema migrations are versioned (`migrations/sqlite`,
//!   `migrations/postgres`) and applied at start.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::model::{Memory, NewMemory};

mod postgres;
mod sqlite;

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// Which store, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// No memory store: Retain, Forget, ListMemories and recall are
    /// FAILED_PRECONDITION.
    Off,
    /// An embedded SQLite database file (created, with its directory, if
    /// missing).
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// A PostgreSQL database shared by many sidecars.
    Postgres {
        /// `postgres://user:password@host:port/database`.
        url: String,
        /// Pool size.
        max_connections: u32,
    },
}

/// Retention limits per subject, enforced on every write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most memories kept per subject (the oldest go first); 0 = no limit.
    pub max_per_subject: u32,
    /// Memories older than this are deleted; `None` = kept forever.
    pub max_age: Option<Duration>,
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

/// What a `retain` did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Retained {
    /// The ids of the batch's memories, in order (for a replay, those the
    /// first call stored).
    pub ids: Vec<i64>,
    /// Whether the key had been used: nothing was stored.
    pub replayed: bool,
    /// Memories the retention limits deleted.
    pub evicted: u64,
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
}

/// A recall candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The memory's id.
    pub id: i64,
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

/// What `forget` deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForgetFilter {
    /// These memories.
    Ids(Vec<i64>),
    /// Every memory of a subject (and its idempotency keys).
    Subject(String),
    /// Every memory of a subject with one type.
    SubjectType(String, String),
}

/// One page of a subject's memories, newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    /// The memories.
    pub memories: Vec<Memory>,
    /// Pass as `before` for the next page; `None` on the last one.
    pub next: Option<i64>,
}

/// Store failures. None carries memory content.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, reached or migrated.
    #[error("memory store unavailable: {0}")]
    Unavailable(String),
    /// A query failed.
    #[error("memory store query failed: {0}")]
    Query(String),
    /// A stored row could not be read back.
    #[error("memory store holds a corrupt row: {0}")]
    Corrupt(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_) => StoreError::Unavailable(e.to_string()),
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => StoreError::Corrupt(e.to_string()),
            other => StoreError::Query(other.to_string()),
        }
    }
}

/// Keys older than this are forgotten: a retry comes within minutes.
pub const KEY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The open store.
#[derive(Debug, Clone)]
pub enum MemoryStore {
    /// Embedded SQLite.
    Sqlite(SqliteStore),
    /// Shared PostgreSQL.
    Postgres(PostgresStore),
}

impl MemoryStore {
    /// Opens (creating and migrating) the configured store; `None` for
    /// [`Backend::Off`].
    pub async fn open(backend: &Backend) -> Result<Option<MemoryStore>, StoreError> {
        Ok(match backend {
            Backend::Off => None,
            Backend::Sqlite { path } => Some(MemoryStore::Sqlite(SqliteStore::open(path).await?)),
            Backend::Postgres { url, max_connections } => Some(MemoryStore::Postgres(
                PostgresStore::open(url, *max_connections).await?,
            )),
        })
    }

    /// The backend's name, for logs and metrics.
    pub fn backend(&self) -> &'static str {
        match self {
            MemoryStore::Sqlite(_) => "sqlite",
            MemoryStore::Postgres(_) => "postgres",
        }
    }

    /// Stores a batch once (see [`RetainBatch::key`]).
    pub async fn retain(&self, batch: &RetainBatch) -> Result<Retained, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.retain(batch).await,
            MemoryStore::Postgres(s) => s.retain(batch).await,
        }
    }

    /// The candidates for a recall: up to `limit` best matches of the terms
    /// and up to `limit` newest memories, without duplicates.
    pub async fn recall(&self, query: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.recall(query).await,
            MemoryStore::Postgres(s) => s.recall(query).await,
        }
    }

    /// Deletes memories; returns how many.
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<u64, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.forget(filter).await,
            MemoryStore::Postgres(s) => s.forget(filter).await,
        }
    }

    /// A page of `subject`'s memories older than `before` (an id), newest
    /// first.
    pub async fn list(&self, subject: &str, limit: u32, before: Option<i64>) -> Result<Page, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.list(subject, limit, before).await,
            MemoryStore::Postgres(s) => s.list(subject, limit, before).await,
        }
    }

    /// Closes the pool, waiting for open connections (on drain).
    pub async fn close(&self) {
        match self {
            MemoryStore::Sqlite(s) => s.close().await,
            MemoryStore::Postgres(s) => s.close().await,
        }
    }
}

/// Applies the embedded `migrations` (version, description, SQL) that the
/// database has not applied yet, each in its own transaction, under the
/// backend's migration lock (sidecars starting together migrate once). A
/// database migrated by a newer sidecar (versions this one does not know)
/// is refused rather than used.
pub(crate) async fn migrator(
    migrations: &'static [(i64, &'static str, &'static str)],
) -> Result<Migrator, StoreError> {
    Migrator::new(Embedded(migrations))
        .await
        .map_err(|e| StoreError::Unavailable(format!("migrations: {e}")))
}

/// Migrations compiled into the binary.
#[derive(Debug)]
struct Embedded(&'static [(i64, &'static str, &'static str)]);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 's>> {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        description.into(),
                        MigrationType::Simple,
                        sql.into(),
                        false,
                    )
                })
                .collect())
        })
    }
}

/// A page from up to `limit + 1` memories read newest first: the extra one
/// only says there is a next page.
pub(crate) fn page(mut memories: Vec<Memory>, limit: u32) -> Page {
    let limit = limit as usize;
    let next = if memories.len() > limit {
        memories.truncate(limit);
        memories.last().map(|m| m.id)
    } else {
        None
    };
    Page { memories, next }
}

/// Merges best-by-relevance and newest candidates, dropping the second copy
/// of a memory found by both (keeping its relevance).
pub(crate) fn merge_candidates(mut matched: Vec<Candidate>, recent: Vec<Candidate>) -> Vec<Candidate> {
    let seen: std::collections::HashSet<i64> = matched.iter().map(|c| c.id).collect();
    matched.extend(recent.into_iter().filter(|c| !seen.contains(&c.id)));
    matched
}

/// The stored form of a memory's content and scopes.
pub(crate) fn content_json(m: &NewMemory) -> Result<String, StoreError> {
    serde_json::to_string(&m.content).map_err(|e| StoreError::Query(e.to_string()))
}

/// A memory read back from its stored columns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn memory_from_row(
    id: i64,
    created_at_ms: i64,
    subject: String,
    content: &str,
    scopes: Vec<String>,
    request_id: String,
    turn: i64,
) -> Result<Memory, StoreError> {
    let content = serde_json::from_str(content)
        .map_err(|e| StoreError::Corrupt(format!("memory {id}: content: {e}")))?;
    Ok(Memory {
        id,
        created_at_ms,
        memory: NewMemory {
            subject,
            content,
            required_scopes: scopes,
            request_id,
            turn: u32::try_from(turn).unwrap_or(0),
        },
    })
}
