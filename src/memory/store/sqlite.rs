//! The embedded SQLite store: one file, WAL, `synchronous = FULL` (a
//! returned write survives a crash or power loss), FTS5 with the porter
//! stemmer. One writer connection (SQLite has one writer at a time; a single
//! connection never meets a busy upgrade) and a few readers, which WAL lets
//! run beside it.
//!
//! Forget means gone: `secure_delete` overwrites deleted rows and freed
//! pages with zeros, FTS5 secure-delete (migration 3) removes a deleted
//! row's terms from the index at once, and a Forget ends with a TRUNCATE
//! checkpoint, so the WAL holds no frame of the forgotten memory either.
//! `tests/stores/memory_store.rs` (`a_forgotten_word_is_nowhere_in_the_sqlite_files`)
//! scans the raw files for it.

use std::path::Path;
use std::time::Duration;

use sqlx::Sqlite;
use sqlx::migrate::MigrateError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteQueryResult, SqliteSynchronous,
};

use super::dialect::Dialect;
use super::page::{PageRow, content_json, read_page};
use super::recall::{CandidateRow, Gathered};
use super::{
    Candidate, ForgetFilter, Forgotten, ListQuery, Page, RecallQuery, RetainBatch, Retained, StoreError,
};
use crate::memory::model::MemoryId;

/// Reader connections.
const READERS: u32 = 4;
/// How long a statement waits for a lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a caller waits for a pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two attempts to open a file another sidecar is creating
/// or migrating.
const OPEN_RETRY_PAUSE: Duration = Duration::from_millis(25);

/// An open SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    readers: SqlitePool,
}

impl SqliteStore {
    /// Opens `path` (creating it and its directory), and migrates it.
    ///
    /// Sidecars starting together on one file race to create and migrate
    /// it: SQLite answers the loser "database is locked" (or, having read
    /// the schema before the winner committed, "table already exists")
    /// without waiting, so the open is tried again, within the busy timeout;
    /// the retry sees the winner's migration applied.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let started = std::time::Instant::now();
        loop {
            match SqliteStore::open_once(path).await {
                Err(Open::Busy(e)) if started.elapsed() < BUSY_TIMEOUT => {
                    tracing::debug!(err = %e, "memory store busy while opening: retrying");
                    tokio::time::sleep(OPEN_RETRY_PAUSE).await;
                }
                Err(Open::Busy(e) | Open::Failed(e)) => return Err(e),
                Ok(store) => return Ok(store),
            }
        }
    }

    async fn open_once(path: &Path) -> Result<SqliteStore, Open> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                Open::Failed(StoreError::Unavailable(format!(
                    "cannot create {}: {e}",
                    dir.display()
                )))
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            // Forgotten memories are overwritten, not left in free pages.
            .pragma("secure_delete", "ON");
        // Every connection opens at start and stays: a steady set of file
        // descriptors, and no open on a request's path.
        let open = |n: u32| {
            SqlitePoolOptions::new()
                .min_connections(n)
                .max_connections(n)
                .idle_timeout(None)
                .max_lifetime(None)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options.clone())
        };
        let unavailable = |e: sqlx::Error| {
            let busy = super::retryable(&e);
            let e = StoreError::Unavailable(format!("{}: {e}", path.display()));
            if busy { Open::Busy(e) } else { Open::Failed(e) }
        };
        let writer = open(1).await.map_err(unavailable)?;
        let migrated = super::migrate::migrator(|step| step.sqlite)
            .await
            .map_err(Open::Failed)?
            .run(&writer)
            .await;
        if let Err(e) = migrated {
            // An execution error may be the race above; a version error is not.
            let race = matches!(e, MigrateError::Execute(_) | MigrateError::ExecuteMigration(..));
            writer.close().await;
            let e = StoreError::Unavailable(format!("{}: migrating: {e}", path.display()));
            return Err(if race { Open::Busy(e) } else { Open::Failed(e) });
        }
        let readers = open(READERS).await.map_err(unavailable)?;
        Ok(SqliteStore { writer, readers })
    }

    /// See [`super::MemoryStore::total_bytes`].
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        Sqlite::total_bytes(&mut *self.readers.acquire().await?).await
    }

    /// See [`super::MemoryStore::ping`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        Ok(())
    }

    /// See [`super::MemoryStore::retain`].
    pub async fn retain(&self, batch: &RetainBatch) -> Result<Retained, StoreError> {
        let mut tx = self.writer.begin().await?;
        let known: Option<String> =
            sqlx::query_scalar("SELECT ids FROM retain_keys WHERE key = ?1 AND subject = ?2")
                .bind(&batch.key)
                .bind(&batch.subject)
                .fetch_optional(&mut *tx)
                .await?;
        if let Some(ids) = known {
            tx.commit().await?;
            let ids =
                serde_json::from_str(&ids).map_err(|e| StoreError::Corrupt(format!("retain key: {e}")))?;
            return Ok(Retained::replay(ids));
        }
        let subject_key = subject_key(&batch.subject);
        let mut ids = Vec::with_capacity(batch.memories.len());
        for m in &batch.memories {
            // randomblob draws from SQLite's CSPRNG, seeded by the OS.
            let id: String = sqlx::query_scalar(
                "INSERT INTO memories (public_id, subject, subject_key, memory_type, title, body, content, \
                 scopes, request_id, turn, created_at_ms) \
                 VALUES (lower(hex(randomblob(16))), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                 RETURNING public_id",
            )
            .bind(&batch.subject)
            .bind(&subject_key)
            .bind(m.content.memory_type())
            .bind(m.content.title())
            .bind(m.content.body())
            .bind(content_json(m)?)
            .bind(json(&m.required_scopes)?)
            .bind(&m.request_id)
            .bind(i64::from(m.turn))
            .bind(batch.now_ms)
            .fetch_one(&mut *tx)
            .await?;
            ids.push(id);
        }
        sqlx::query("INSERT INTO retain_keys (key, subject, ids, created_at_ms) VALUES (?1, ?2, ?3, ?4)")
            .bind(&batch.key)
            .bind(&batch.subject)
            .bind(json(&ids)?)
            .bind(batch.now_ms)
            .execute(&mut *tx)
            .await?;
        Sqlite::finish_retain(tx, batch, ids).await
    }

    /// See [`super::MemoryStore::recall`].
    pub async fn recall(&self, q: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        let scopes = json(&q.scopes)?;
        let types = json(&q.types)?;
        let limit = i64::from(q.limit);
        let mut gathered = Gathered::new(q.max_bytes);
        if !q.terms.is_empty() && limit > 0 {
            let matched = sqlx::query_as::<_, CandidateRow>(
                "SELECT m.public_id, m.id, m.memory_type, m.title, m.body, m.created_at_ms, \
                        -bm25(memories_fts, 0.0, 2.0, 1.0) AS relevance \
                 FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid \
                 WHERE memories_fts MATCH ?1 AND m.subject = ?2 \
                   AND NOT EXISTS (SELECT 1 FROM json_each(m.scopes) r \
                                   WHERE r.value NOT IN (SELECT value FROM json_each(?3))) \
                   AND (?4 = '[]' OR m.memory_type IN (SELECT value FROM json_each(?4))) \
                 ORDER BY relevance DESC, m.id DESC LIMIT ?5",
            )
            .bind(match_expression(&q.subject, &q.terms))
            .bind(&q.subject)
            .bind(&scopes)
            .bind(&types)
            .bind(limit);
            gathered.read(matched.fetch(&self.readers)).await?;
        }
        let recent = sqlx::query_as::<_, CandidateRow>(
            "SELECT m.public_id, m.id, m.memory_type, m.title, m.body, m.created_at_ms, 0.0 AS relevance \
             FROM memories m \
             WHERE m.subject = ?1 \
               AND NOT EXISTS (SELECT 1 FROM json_each(m.scopes) r \
                               WHERE r.value NOT IN (SELECT value FROM json_each(?2))) \
               AND (?3 = '[]' OR m.memory_type IN (SELECT value FROM json_each(?3))) \
             ORDER BY m.id DESC LIMIT ?4",
        )
        .bind(&q.subject)
        .bind(&scopes)
        .bind(&types)
        .bind(limit);
        gathered.read(recent.fetch(&self.readers)).await?;
        Ok(gathered.finish())
    }

    /// See [`super::MemoryStore::forget`].
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<Forgotten, StoreError> {
        let mut conn = self.writer.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let forgotten = match filter {
            ForgetFilter::Ids(subject, ids) => {
                let wire: Vec<&str> = ids.iter().map(MemoryId::as_str).collect();
                // `+subject`: look the ids up by their unique index, not
                // the subject's rows by the subject's.
                let deleted = sqlx::query(
                    "DELETE FROM memories \
                     WHERE public_id IN (SELECT value FROM json_each(?1)) AND +subject = ?2",
                )
                .bind(json(&wire)?)
                .bind(subject)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                Forgotten::of_ids(ids, deleted)
            }
            ForgetFilter::Subject(subject) => Forgotten::all(Sqlite::forget_subject(&mut tx, subject).await?),
            ForgetFilter::SubjectType(subject, kind) => {
                Forgotten::all(Sqlite::forget_type(&mut tx, subject, kind).await?)
            }
        };
        tx.commit().await?;
        checkpoint(&mut conn).await;
        Ok(forgotten)
    }

    /// See [`super::MemoryStore::list`].
    pub async fn list(&self, q: &ListQuery<'_>) -> Result<Page, StoreError> {
        // A hidden memory's row comes back without content or scopes (NULL
        // content: every stored memory has some), so hiding costs a row, not
        // its bytes.
        let rows = sqlx::query_as::<_, PageRow<String>>(
            "SELECT id, public_id, created_at_ms, subject, request_id, turn, \
                    CASE WHEN listed THEN content END, CASE WHEN listed THEN scopes END \
             FROM (SELECT *, NOT EXISTS (SELECT 1 FROM json_each(m.scopes) r \
                                         WHERE r.value NOT IN (SELECT value FROM json_each(?4))) AS listed \
                   FROM memories m WHERE subject = ?1 AND id < ?2) \
             ORDER BY id DESC LIMIT ?3",
        )
        .bind(q.subject)
        .bind(q.before.unwrap_or(i64::MAX))
        .bind(i64::from(q.limit) + 1)
        .bind(json(q.scopes)?);
        read_page(q, rows.fetch(&self.readers), |row, scopes| {
            serde_json::from_str(&scopes)
                .map_err(|e| StoreError::Corrupt(format!("memory {row}: scopes: {e}")))
        })
        .await
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// SQLite's single writer serializes every write: a writer always evicts.
impl Dialect for Sqlite {
    const TOTAL_BYTES: &'static str = "SELECT COALESCE(SUM(bytes), 0) FROM memory_bytes";
    const SIZES_AFTER: &'static str = "SELECT id, length(CAST(title AS BLOB)) + length(CAST(body AS BLOB)) \
                                              + length(CAST(content AS BLOB)) \
                                       FROM memories WHERE id > $1 ORDER BY id LIMIT $2";
    const EXPIRE_KEYS: &'static str = "DELETE FROM retain_keys WHERE created_at_ms < $1";

    fn rows_affected(done: &SqliteQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn claim_eviction(_: &mut SqliteConnection) -> Result<bool, StoreError> {
        Ok(true)
    }
}

/// Moves the WAL into the database file and truncates it, so no frame of a
/// forgotten memory stays in the WAL. A reader in the middle of a read can
/// keep the checkpoint from finishing: the deleted rows are then already
/// zeroed in the newest frames, and the next checkpoint truncates.
async fn checkpoint(conn: &mut SqliteConnection) {
    let done: Result<(i64, i64, i64), _> = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&mut *conn)
        .await;
    match done {
        Ok((0, _, _)) => {}
        Ok(_) => tracing::debug!("WAL checkpoint after forget blocked by a reader"),
        Err(e) => tracing::warn!(err = %e, "WAL checkpoint after forget failed"),
    }
}

/// Why one attempt to open failed.
enum Open {
    /// Another sidecar holds the file: try again.
    Busy(StoreError),
    /// Trying again will not help.
    Failed(StoreError),
}

/// The full-text token naming a subject: `s` and 32 hex digits of its
/// blake3, one token under the unicode61 tokenizer whatever the subject holds.
fn subject_key(subject: &str) -> String {
    let hex = blake3::hash(subject.as_bytes()).to_hex();
    let mut key = String::with_capacity(33);
    key.push('s');
    key.push_str(hex.get(..32).unwrap_or(&hex));
    key
}

/// The FTS5 query: the subject's token, and any of the terms in the title
/// or body. Terms are letters and digits only, and quoted besides, so no
/// caller text is FTS5 syntax.
fn match_expression(subject: &str, terms: &[String]) -> String {
    let any: Vec<String> = terms
        .iter()
        .map(|t| format!("\"{}\"", t.replace('"', "")))
        .collect();
    format!(
        "subject_key : {} AND {{title body}} : ({})",
        subject_key(subject),
        any.join(" OR ")
    )
}

/// `value` as the JSON text SQLite stores and `json_each` reads.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Query(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_keys_are_one_token_and_distinct() {
        let a = subject_key("tenant-1/user \"x\"");
        assert_eq!(a.len(), 33);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, subject_key("tenant-1/user \"y\""));
    }

    #[test]
    fn match_expression_quotes_every_term() {
        let e = match_expression("s", &["jwt".into(), "refresh".into()]);
        assert!(e.ends_with("{title body} : (\"jwt\" OR \"refresh\")"), "{e}");
    }
}
