//! The store's errors, and which database errors mean "not now" (a retry
//! can succeed: UNAVAILABLE to callers) rather than a failed query.

use sqlx::error::DatabaseError as _;

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
