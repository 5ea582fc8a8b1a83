//! Where memories live: an embedded SQLite file by default, or PostgreSQL
//! for many sidecars sharing one memory. Both backends give the same
//! guarantees, and `tests/stores/memory_store.rs` runs one suite against each:
//!
//! - a `retain` commits all of its memories, its idempotency key and the
//!   retention evictions in one transaction, durably (SQLite: WAL with
//!   `synchronous = FULL`; PostgreSQL: a committed transaction) before it
//!   returns, and a retried key stores nothing twice;
//! - `recall` applies the subject, type and scope conditions in the query
//!   itself, so a memory the principal may not see is never a candidate;
//!   `list` applies the same scope condition in the query, and reads no
//!   content of a memory it hides;
//! - `forget` always names a subject, and never deletes another's memory;
//! - memories are known outside the store by a random `MemoryId`, never
//!   by their row id (the row id only orders them);
//! - SQLite: a forgotten memory leaves no bytes in the file or its WAL
//!   (`secure_delete`, FTS5 secure-delete, a WAL checkpoint after Forget);
//!   PostgreSQL deletes logically (see docs/memory.md, "Forget and erasure");
//! - schema migrations are versioned (`migrations/sqlite`,
//!   `migrations/postgres`) and applied at start.
//!
//! PostgreSQL also holds the fleet's shared provider counts (issue 52:
//! [`PostgresStore::learned_counts`], bounded by age), read and written by
//! the sidecars' provider counters, off the request path.
//!
//! Here: the choice of backend and the dispatch to it. Beside it:
//! `calls.rs` (what each call takes and answers), `error.rs`, `migrate.rs`,
//! the backends `sqlite.rs` and `postgres.rs` and the [`breaker`] in front
//! of PostgreSQL, and what the backends share: `dialect.rs` (the statements
//! of a write, written once over the `Dialect` seam), `recall.rs` (a
//! recall's candidates from its rows) and `page.rs` (a page from its rows).

use std::path::PathBuf;
use std::time::Duration;

pub mod breaker;
mod calls;
mod dialect;
mod error;
mod migrate;
mod page;
mod postgres;
mod recall;
mod sqlite;

pub use calls::{
    Candidate, ForgetFilter, Forgotten, KEY_TTL, ListQuery, Page, RecallQuery, RetainBatch, Retained,
    Retention,
};
pub use error::StoreError;
pub(crate) use error::retryable;
pub use postgres::{LEARNED_COUNTS_KEEP_FOR, PostgresStore};
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
        /// The server cancels a statement running longer (`statement_timeout`).
        statement_timeout: Duration,
    },
}

/// Default PostgreSQL `statement_timeout`.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

/// How the sidecar reaches its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// An embedded database file.
    File,
    /// A server, over TLS.
    Tls,
    /// A server on this host (Unix socket or loopback), without TLS.
    PlaintextLocal,
    /// A server across the network, without TLS: memories and credentials
    /// travel in the clear.
    PlaintextRemote,
}

impl Transport {
    /// The name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::File => "file",
            Transport::Tls => "tls",
            Transport::PlaintextLocal => "plaintext_local",
            Transport::PlaintextRemote => "plaintext_remote",
        }
    }
}

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
            Backend::Postgres {
                url,
                max_connections,
                statement_timeout,
            } => Some(MemoryStore::Postgres(
                PostgresStore::open(url, *max_connections, *statement_timeout).await?,
            )),
        })
    }

    /// How the sidecar reaches the store, for the start log: a local file,
    /// or PostgreSQL over TLS, over plaintext on this host, or over
    /// plaintext across the network (a warning).
    pub fn transport(&self) -> Transport {
        match self {
            MemoryStore::Sqlite(_) => Transport::File,
            MemoryStore::Postgres(s) if s.encrypted() => Transport::Tls,
            MemoryStore::Postgres(s) if s.local() => Transport::PlaintextLocal,
            MemoryStore::Postgres(_) => Transport::PlaintextRemote,
        }
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
            MemoryStore::Postgres(s) => s.breaker().call(s.retain(batch)).await,
        }
    }

    /// The candidates for a recall: up to `limit` best matches of the terms
    /// and up to `limit` newest memories, without duplicates.
    pub async fn recall(&self, query: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.recall(query).await,
            MemoryStore::Postgres(s) => s.breaker().call(s.recall(query)).await,
        }
    }

    /// Deletes memories of the filter's subject.
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<Forgotten, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.forget(filter).await,
            MemoryStore::Postgres(s) => s.breaker().call(s.forget(filter)).await,
        }
    }

    /// A page of the subject's memories older than `before`, newest first:
    /// it covers at most `limit` memories of the subject (those the scopes
    /// do not allow are counted, not loaded) and, past the first listed,
    /// `max_bytes` of their content (the page then ends early, with a next
    /// page).
    pub async fn list(&self, query: &ListQuery<'_>) -> Result<Page, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.list(query).await,
            MemoryStore::Postgres(s) => s.breaker().call(s.list(query)).await,
        }
    }

    /// Bytes of all stored memories (titles, bodies and contents), as the
    /// size bound counts them.
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.total_bytes().await,
            MemoryStore::Postgres(s) => s.breaker().call(s.total_bytes()).await,
        }
    }

    /// One trivial query: whether the store answers now.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            MemoryStore::Sqlite(s) => s.ping().await,
            MemoryStore::Postgres(s) => s.ping().await,
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
