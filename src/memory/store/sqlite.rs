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

use sqlx::Row;
use sqlx::migrate::MigrateError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use tokio_stream::StreamExt as _;

use super::{
    Budget, Candidate, ForgetFilter, Forgotten, KEY_TTL, ListQuery, Page, PageBuilder, RecallQuery,
    RetainBatch, Retained, StoreError, content_json, memory_from_row, merge_candidates,
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

/// The versioned migrations, applied in order at start.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "memories",
        include_str!("../../../migrations/sqlite/0001_memories.sql"),
    ),
    (
        2,
        "memory bytes",
        include_str!("../../../migrations/sqlite/0002_memory_bytes.sql"),
    ),
    (
        3,
        "tenancy",
        include_str!("../../../migrations/sqlite/0003_tenancy.sql"),
    ),
];

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
        let migrated = super::migrator(MIGRATIONS)
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
        let total: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(bytes), 0) FROM memory_bytes")
            .fetch_one(&self.readers)
            .await?;
        Ok(u64::try_from(total).unwrap_or(0))
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
            let ids: Vec<String> =
                serde_json::from_str(&ids).map_err(|e| StoreError::Corrupt(format!("retain key: {e}")))?;
            return Ok(Retained {
                ids: ids.into_iter().map(MemoryId::stored).collect(),
                replayed: true,
                ..Retained::default()
            });
        }
        let subject_key = subject_key(&batch.subject);
        let mut ids = Vec::with_capacity(batch.memories.len());
        for m in &batch.memories {
            let scopes =
                serde_json::to_string(&m.required_scopes).map_err(|e| StoreError::Query(e.to_string()))?;
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
            .bind(scopes)
            .bind(&m.request_id)
            .bind(i64::from(m.turn))
            .bind(batch.now_ms)
            .fetch_one(&mut *tx)
            .await?;
            ids.push(id);
        }
        let ids_json = serde_json::to_string(&ids).map_err(|e| StoreError::Query(e.to_string()))?;
        let ids = ids.into_iter().map(MemoryId::stored).collect();
        sqlx::query("INSERT INTO retain_keys (key, subject, ids, created_at_ms) VALUES (?1, ?2, ?3, ?4)")
            .bind(&batch.key)
            .bind(&batch.subject)
            .bind(ids_json)
            .bind(batch.now_ms)
            .execute(&mut *tx)
            .await?;
        let mut evicted = 0;
        if let Some(age) = batch.retention.max_age {
            let cutoff = batch.now_ms.saturating_sub(millis(age));
            evicted += sqlx::query("DELETE FROM memories WHERE subject = ?1 AND created_at_ms < ?2")
                .bind(&batch.subject)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        if batch.retention.max_per_subject > 0 {
            let oldest_kept: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM memories WHERE subject = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2",
            )
            .bind(&batch.subject)
            .bind(i64::from(batch.retention.max_per_subject))
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(first_evicted) = oldest_kept {
                evicted += sqlx::query("DELETE FROM memories WHERE subject = ?1 AND id <= ?2")
                    .bind(&batch.subject)
                    .bind(first_evicted)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
        }
        let evicted_for_space = match batch.retention.max_total_bytes {
            0 => 0,
            max => evict_for_space(&mut tx, max).await?,
        };
        sqlx::query("DELETE FROM retain_keys WHERE created_at_ms < ?1")
            .bind(batch.now_ms.saturating_sub(millis(KEY_TTL)))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Retained {
            ids,
            replayed: false,
            evicted,
            evicted_for_space,
        })
    }

    /// See [`super::MemoryStore::recall`].
    pub async fn recall(&self, q: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        let scopes = serde_json::to_string(&q.scopes).map_err(|e| StoreError::Query(e.to_string()))?;
        let types = serde_json::to_string(&q.types).map_err(|e| StoreError::Query(e.to_string()))?;
        let limit = i64::from(q.limit);
        let mut budget = Budget::new(q.max_bytes);
        let mut matched = Vec::new();
        if !q.terms.is_empty() && limit > 0 {
            let mut rows = sqlx::query(
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
            .bind(limit)
            .fetch(&self.readers);
            while let Some(row) = rows.try_next().await? {
                let c = candidate(&row)?;
                if !budget.take(&c) {
                    break;
                }
                matched.push(c);
            }
        }
        let mut recent = Vec::new();
        let mut rows = sqlx::query(
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
        .bind(limit)
        .fetch(&self.readers);
        while let Some(row) = rows.try_next().await? {
            let c = candidate(&row)?;
            // A memory matched already costs nothing more.
            if !matched.iter().any(|m: &Candidate| m.seq == c.seq) && !budget.take(&c) {
                break;
            }
            recent.push(c);
        }
        Ok(merge_candidates(matched, recent))
    }

    /// See [`super::MemoryStore::forget`].
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<Forgotten, StoreError> {
        let mut conn = self.writer.acquire().await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let deleted = match filter {
            ForgetFilter::Ids(subject, ids) => {
                let json: Vec<&str> = ids.iter().map(MemoryId::as_str).collect();
                let json = serde_json::to_string(&json).map_err(|e| StoreError::Query(e.to_string()))?;
                // `+subject`: look the ids up by their unique index, not
                // the subject's rows by the subject's.
                let deleted = sqlx::query(
                    "DELETE FROM memories \
                     WHERE public_id IN (SELECT value FROM json_each(?1)) AND +subject = ?2",
                )
                .bind(json)
                .bind(subject)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                checkpoint(&mut conn).await;
                return Ok(Forgotten::of_ids(ids, deleted));
            }
            ForgetFilter::Subject(subject) => {
                sqlx::query("DELETE FROM retain_keys WHERE subject = ?1")
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM memories WHERE subject = ?1")
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            ForgetFilter::SubjectType(subject, kind) => {
                sqlx::query("DELETE FROM memories WHERE subject = ?1 AND memory_type = ?2")
                    .bind(subject)
                    .bind(kind)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
        };
        tx.commit().await?;
        checkpoint(&mut conn).await;
        Ok(Forgotten {
            deleted,
            not_found: 0,
        })
    }

    /// See [`super::MemoryStore::list`].
    pub async fn list(&self, q: &ListQuery<'_>) -> Result<Page, StoreError> {
        let scopes = serde_json::to_string(q.scopes).map_err(|e| StoreError::Query(e.to_string()))?;
        // A hidden memory's row comes back without content or scopes (NULL
        // content: every stored memory has some), so hiding costs a row, not
        // its bytes.
        let mut rows = sqlx::query(
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
        .bind(scopes)
        .fetch(&self.readers);
        let mut page = PageBuilder::new(q.limit, q.max_bytes);
        while let Some(row) = rows.try_next().await? {
            let row_id: i64 = row.try_get(0)?;
            let content: Option<String> = row.try_get(6)?;
            let scopes: Option<String> = row.try_get(7)?;
            let listed = match content.zip(scopes) {
                None => None,
                Some((content, scopes)) => {
                    let scopes = serde_json::from_str(&scopes)
                        .map_err(|e| StoreError::Corrupt(format!("memory {row_id}: scopes: {e}")))?;
                    let memory = memory_from_row(
                        MemoryId::stored(row.try_get(1)?),
                        row.try_get(2)?,
                        row.try_get(3)?,
                        &content,
                        scopes,
                        row.try_get(4)?,
                        row.try_get(5)?,
                    )?;
                    Some((memory, content.len()))
                }
            };
            if !page.push(row_id, listed) {
                break;
            }
        }
        Ok(page.finish())
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Deletes the oldest memories of any subject until the store holds at most
/// `max` bytes; returns how many.
async fn evict_for_space(tx: &mut sqlx::SqliteConnection, max: u64) -> Result<u64, StoreError> {
    let total: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(bytes), 0) FROM memory_bytes")
        .fetch_one(&mut *tx)
        .await?;
    let mut excess = total.saturating_sub(i64::try_from(max).unwrap_or(i64::MAX));
    if excess <= 0 {
        return Ok(0);
    }
    let mut after = 0;
    let cutoff = loop {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, length(CAST(title AS BLOB)) + length(CAST(body AS BLOB)) \
                    + length(CAST(content AS BLOB)) \
             FROM memories WHERE id > ?1 ORDER BY id LIMIT ?2",
        )
        .bind(after)
        .bind(super::EVICTION_BATCH)
        .fetch_all(&mut *tx)
        .await?;
        let Some(&(last, _)) = rows.last() else {
            break after;
        };
        if let Some(cutoff) = super::eviction_cutoff(&rows, &mut excess) {
            break cutoff;
        }
        after = last;
    };
    Ok(sqlx::query("DELETE FROM memories WHERE id <= ?1")
        .bind(cutoff)
        .execute(&mut *tx)
        .await?
        .rows_affected())
}

/// Moves the WAL into the database file and truncates it, so no frame of a
/// forgotten memory stays in the WAL. A reader in the middle of a read can
/// keep the checkpoint from finishing: the deleted rows are then already
/// zeroed in the newest frames, and the next checkpoint truncates.
async fn checkpoint(conn: &mut sqlx::SqliteConnection) {
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

/// A recall candidate from its row (public id, row id, type, title, body,
/// created, relevance).
fn candidate(row: &sqlx::sqlite::SqliteRow) -> Result<Candidate, StoreError> {
    Ok(Candidate {
        id: MemoryId::stored(row.try_get(0)?),
        seq: row.try_get(1)?,
        memory_type: row.try_get(2)?,
        title: row.try_get(3)?,
        body: row.try_get(4)?,
        created_at_ms: row.try_get(5)?,
        relevance: row.try_get(6)?,
    })
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

/// Milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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
