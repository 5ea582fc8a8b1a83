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
//! - memories are known outside the store by a random [`MemoryId`], never
//!   by their row id (the row id only orders them);
//! - SQLite: a forgotten memory leaves no bytes in the file or its WAL
//!   (`secure_delete`, FTS5 secure-delete, a WAL checkpoint after Forget);
//!   PostgreSQL deletes logically (see docs/memory.md, "Forget and erasure");
//! - schema migrations are versioned (`migrations/sqlite`,
//!   `migrations/postgres`) and applied at start.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use sqlx::error::{BoxDynError, DatabaseError as _};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::model::{Memory, MemoryId, NewMemory};

pub mod breaker;
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
        /// The server cancels a statement running longer (`statement_timeout`).
        statement_timeout: Duration,
    },
}

/// Default PostgreSQL `statement_timeout`.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

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
    fn of_ids(ids: &[MemoryId], deleted: u64) -> Forgotten {
        let distinct: std::collections::HashSet<&MemoryId> = ids.iter().collect();
        Forgotten {
            deleted,
            not_found: (distinct.len() as u64).saturating_sub(deleted),
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
        if retryable(&e) {
            return StoreError::Unavailable(e.to_string());
        }
        match e {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => StoreError::Corrupt(e.to_string()),
            other => StoreError::Query(other.to_string()),
        }
    }
}

/// Whether `e` says the database cannot serve now but may later (a retry
/// or another replica can succeed): it is unreachable, shutting down, out of
/// disk or read-only, busy, or the statement ran out of time. These are
/// UNAVAILABLE to callers, never INTERNAL.
pub(crate) fn retryable(e: &sqlx::Error) -> bool {
    match e {
        // A connection cut while it is set up or used (a proxy in front of
        // a server that is down accepts and closes: "unexpected response
        // from SSLRequest") is the wire breaking, not the query.
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => {
            if let Some(sqlite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                // The extended result code; its low byte is the primary one.
                let code = sqlite.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
                matches!(
                    code & 0xff,
                    SQLITE_BUSY
                        | SQLITE_LOCKED
                        | SQLITE_READONLY
                        | SQLITE_IOERR
                        | SQLITE_FULL
                        | SQLITE_CANTOPEN
                        | SQLITE_PROTOCOL
                )
            } else if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                retryable_sqlstate(pg.code())
            } else {
                false
            }
        }
        _ => false,
    }
}

const SQLITE_BUSY: i32 = 5;
const SQLITE_LOCKED: i32 = 6;
const SQLITE_READONLY: i32 = 8;
const SQLITE_IOERR: i32 = 10;
const SQLITE_FULL: i32 = 13;
const SQLITE_CANTOPEN: i32 = 14;
/// A lock another process holds past SQLite's retries (a stalled store).
const SQLITE_PROTOCOL: i32 = 15;

/// PostgreSQL SQLSTATEs a retry can get past: connection exceptions (08),
/// insufficient resources (53: disk full, out of memory, too many
/// connections), operator intervention (57: query_canceled by the statement
/// timeout, admin or crash shutdown, cannot connect now), a read-only
/// transaction (25006, a standby), and serialization failures and deadlocks
/// (40001, 40P01).
fn retryable_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57")
        || matches!(code, "25006" | "40001" | "40P01")
}

/// Keys older than this are forgotten: a retry comes within minutes.
pub const KEY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

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

/// Builds a page from rows of the subject read newest first, up to
/// `limit + 1` (the extra one only says there is a next page) and
/// `max_bytes` of content: a hidden row counts against `limit` like a
/// listed one (so hidden memories never make a page read more rows), and
/// the page ends before the memory that would pass the byte budget (never
/// before its first listed one), and says there is more.
#[derive(Debug)]
pub(crate) struct PageBuilder {
    memories: Vec<Memory>,
    hidden: u32,
    limit: usize,
    read: usize,
    last: Option<i64>,
    max_bytes: u64,
    bytes: u64,
    next: Option<i64>,
}

impl PageBuilder {
    pub(crate) fn new(limit: u32, max_bytes: u64) -> Self {
        PageBuilder {
            memories: Vec::new(),
            hidden: 0,
            limit: limit as usize,
            read: 0,
            last: None,
            max_bytes,
            bytes: 0,
            next: None,
        }
    }

    /// Adds the next row, `row` its row id: a memory the principal may see
    /// with its content's bytes, or `None` for one hidden from it. False
    /// once the page is full (stop reading).
    pub(crate) fn push(&mut self, row: i64, listed: Option<(Memory, usize)>) -> bool {
        let full = self.read >= self.limit
            || listed.as_ref().is_some_and(|(_, n)| {
                !self.memories.is_empty() && self.bytes.saturating_add(*n as u64) > self.max_bytes
            });
        if full {
            self.next = self.last;
            return false;
        }
        match listed {
            Some((memory, n)) => {
                self.bytes = self.bytes.saturating_add(n as u64);
                self.memories.push(memory);
            }
            None => self.hidden += 1,
        }
        self.read += 1;
        self.last = Some(row);
        true
    }

    pub(crate) fn finish(self) -> Page {
        Page {
            memories: self.memories,
            hidden: self.hidden,
            next: self.next,
        }
    }
}

/// Memories the size bound looks at per query while it walks from the
/// oldest.
pub(crate) const EVICTION_BATCH: i64 = 256;

/// The last id of the oldest memories whose `(id, bytes)`, read oldest
/// first, free at least `excess` bytes; `None` while they do not yet.
pub(crate) fn eviction_cutoff(rows: &[(i64, i64)], excess: &mut i64) -> Option<i64> {
    for &(id, bytes) in rows {
        *excess -= bytes;
        if *excess <= 0 {
            return Some(id);
        }
    }
    None
}

/// Candidates up to a byte budget of titles and bodies.
#[derive(Debug)]
pub(crate) struct Budget {
    left: u64,
}

impl Budget {
    pub(crate) fn new(max_bytes: u64) -> Self {
        Budget { left: max_bytes }
    }

    /// Takes `c`'s bytes; false (and nothing taken) when they do not fit.
    pub(crate) fn take(&mut self, c: &Candidate) -> bool {
        let bytes = (c.title.len() + c.body.len()) as u64;
        if bytes > self.left {
            self.left = 0;
            return false;
        }
        self.left -= bytes;
        true
    }
}

/// Merges best-by-relevance and newest candidates, dropping the second copy
/// of a memory found by both (keeping its relevance).
pub(crate) fn merge_candidates(mut matched: Vec<Candidate>, recent: Vec<Candidate>) -> Vec<Candidate> {
    let seen: std::collections::HashSet<i64> = matched.iter().map(|c| c.seq).collect();
    matched.extend(recent.into_iter().filter(|c| !seen.contains(&c.seq)));
    matched
}

/// The stored form of a memory's content and scopes.
pub(crate) fn content_json(m: &NewMemory) -> Result<String, StoreError> {
    serde_json::to_string(&m.content).map_err(|e| StoreError::Query(e.to_string()))
}

/// A memory read back from its stored columns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn memory_from_row(
    id: MemoryId,
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::memory::model::{MemoryBody, Observation};

    fn memory(row: i64) -> Memory {
        Memory {
            id: MemoryId::stored(format!("{row:032x}")),
            created_at_ms: 0,
            memory: NewMemory {
                subject: "s".into(),
                content: MemoryBody::Observation(Observation::default()),
                required_scopes: Vec::new(),
                request_id: String::new(),
                turn: 0,
            },
        }
    }

    /// Pages through `rows` (shown or hidden, content bytes; row ids
    /// descending from `rows.len()`) as the stores do: each page reads at
    /// most `limit + 1` rows older than the last page's `next`.
    fn pages(rows: &[(bool, usize)], limit: u32, max_bytes: u64) -> Vec<(Page, usize)> {
        let n = rows.len() as i64;
        let mut out = Vec::new();
        let mut before = i64::MAX;
        loop {
            let mut page = PageBuilder::new(limit, max_bytes);
            let mut read = 0;
            for (i, &(shown, bytes)) in rows.iter().enumerate() {
                let row = n - i as i64;
                if row >= before {
                    continue;
                }
                if read == limit as usize + 1 {
                    break;
                }
                read += 1;
                if !page.push(row, shown.then(|| (memory(row), bytes))) {
                    break;
                }
            }
            let page = page.finish();
            let next = page.next;
            out.push((page, read));
            match next {
                Some(next) => before = next,
                None => return out,
            }
        }
    }

    proptest! {
        /// Paging lists every shown memory once, newest first, and counts
        /// every hidden one once; a page covers at most `limit` rows and
        /// reads at most `limit + 1`, holds at most `max_bytes` past its
        /// first memory, and every page moves on.
        #[test]
        fn pages_list_each_shown_memory_once_and_count_each_hidden_one(
            rows in prop::collection::vec((any::<bool>(), 0usize..100), 0..60),
            limit in 1u32..10,
            max_bytes in prop_oneof![Just(u64::MAX), 0u64..300],
        ) {
            let all = pages(&rows, limit, max_bytes);
            prop_assert!(all.len() <= rows.len() + 1);
            let n = rows.len() as i64;
            let shown: Vec<MemoryId> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.0)
                .map(|(i, _)| memory(n - i as i64).id)
                .collect();
            let hidden = rows.iter().filter(|r| !r.0).count();
            let mut listed = Vec::new();
            let mut counted = 0;
            for (page, read) in &all {
                prop_assert!(page.memories.len() + page.hidden as usize <= limit as usize);
                prop_assert!(*read <= limit as usize + 1);
                if page.next.is_some() {
                    prop_assert!(page.memories.len() + page.hidden as usize >= 1);
                }
                let bytes: u64 = page
                    .memories
                    .iter()
                    .skip(1)
                    .map(|m| {
                        let row = i64::from_str_radix(m.id.as_str(), 16).unwrap_or(0);
                        rows[(n - row) as usize].1 as u64
                    })
                    .sum();
                prop_assert!(bytes <= max_bytes);
                listed.extend(page.memories.iter().map(|m| m.id.clone()));
                counted += page.hidden as usize;
            }
            prop_assert_eq!(listed, shown);
            prop_assert_eq!(counted, hidden);
        }
    }
}
