//! The seam between the two stores. [`Dialect`]'s required items are where
//! SQLite and PostgreSQL write differently: how a statement reports the
//! rows it changed, the byte sizes the store's bound counts, how expired
//! keys are deleted, and whether a writer may evict now. Its provided
//! methods are what both do alike, written once: the retention a write
//! ends with (by age, by count, for space, key expiry) and Forget by
//! subject or by type. Their SQL is the same text for both (sqlx binds
//! `$1` by its number in SQLite as in PostgreSQL).
//!
//! What stays in each backend's file is its own: SQLite's idempotency keys
//! as JSON, FTS5, `secure_delete` and the WAL checkpoint after Forget;
//! PostgreSQL's key claim, advisory locks, `tsquery` and arrays.

use std::future::Future;
use std::time::Duration;

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Transaction, Type};

use super::{KEY_TTL, RetainBatch, Retained, StoreError};
use crate::memory::model::MemoryId;

/// Memories the size bound looks at per query while it walks from the
/// oldest.
const EVICTION_BATCH: i64 = 256;

/// A database both stores' shared statements run on. The `where` clause
/// states once what those statements need of sqlx (executing on a
/// connection, binding text and integers, reading integers). They take a
/// connection, not any executor: a generic executor there makes rustc
/// unable to prove a Retain's future `Send`.
pub(super) trait Dialect: Database
where
    for<'c> &'c mut Self::Connection: Executor<'c, Database = Self>,
    for<'q> Self::Arguments<'q>: IntoArguments<'q, Self>,
    for<'q> i64: Encode<'q, Self> + Decode<'q, Self> + Type<Self>,
    for<'q> &'q str: Encode<'q, Self> + Type<Self>,
    usize: ColumnIndex<Self::Row>,
{
    /// The bytes of all memories (titles, bodies and contents) as one
    /// integer, read from the row the triggers keep.
    const TOTAL_BYTES: &'static str;

    /// `(row id, bytes)` of at most `$2` memories after row `$1`, oldest
    /// first, their bytes counted as [`Dialect::TOTAL_BYTES`] counts them.
    const SIZES_AFTER: &'static str;

    /// Deletes the idempotency keys created before `$1`.
    const EXPIRE_KEYS: &'static str;

    /// The rows a statement changed.
    fn rows_affected(done: &Self::QueryResult) -> u64;

    /// Whether this writer evicts for space now (false: another writer is
    /// at it, and this one leaves it to that one).
    fn claim_eviction(conn: &mut Self::Connection) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Bytes of all stored memories, as the size bound counts them.
    async fn total_bytes(conn: &mut Self::Connection) -> Result<u64, StoreError> {
        let total: i64 = sqlx::query_scalar(Self::TOTAL_BYTES).fetch_one(conn).await?;
        Ok(u64::try_from(total).unwrap_or(0))
    }

    /// Ends a retain's transaction `tx`, once its memories `ids` and its key
    /// are written: deletes the subject's memories older than the batch's
    /// `max_age`, then all but its newest `max_per_subject`, then the oldest
    /// of any subject past `max_total_bytes`, and expired keys; commits.
    async fn finish_retain(
        mut tx: Transaction<'_, Self>,
        batch: &RetainBatch,
        ids: Vec<String>,
    ) -> Result<Retained, StoreError> {
        let conn = &mut *tx;
        let subject = batch.subject.as_str();
        let limits = batch.retention;
        let mut evicted = 0;
        if let Some(age) = limits.max_age {
            let done = sqlx::query("DELETE FROM memories WHERE subject = $1 AND created_at_ms < $2")
                .bind(subject)
                .bind(batch.now_ms.saturating_sub(millis(age)))
                .execute(&mut *conn)
                .await?;
            evicted += Self::rows_affected(&done);
        }
        if limits.max_per_subject > 0 {
            let first_evicted: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM memories WHERE subject = $1 ORDER BY id DESC LIMIT 1 OFFSET $2",
            )
            .bind(subject)
            .bind(i64::from(limits.max_per_subject))
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(first_evicted) = first_evicted {
                let done = sqlx::query("DELETE FROM memories WHERE subject = $1 AND id <= $2")
                    .bind(subject)
                    .bind(first_evicted)
                    .execute(&mut *conn)
                    .await?;
                evicted += Self::rows_affected(&done);
            }
        }
        let evicted_for_space = match limits.max_total_bytes {
            0 => 0,
            max => Self::evict_for_space(conn, max).await?,
        };
        sqlx::query(Self::EXPIRE_KEYS)
            .bind(batch.now_ms.saturating_sub(millis(KEY_TTL)))
            .execute(&mut *conn)
            .await?;
        tx.commit().await?;
        Ok(Retained {
            ids: ids.into_iter().map(MemoryId::stored).collect(),
            replayed: false,
            evicted,
            evicted_for_space,
        })
    }

    /// Deletes the oldest memories of any subject until the store holds at
    /// most `max` bytes, if [`Dialect::claim_eviction`] lets this writer
    /// (the store may then pass `max` by a write until the next one);
    /// returns how many.
    async fn evict_for_space(conn: &mut Self::Connection, max: u64) -> Result<u64, StoreError> {
        let total = Self::total_bytes(&mut *conn).await?;
        let Some(excess) = total.checked_sub(max).filter(|&excess| excess > 0) else {
            return Ok(0);
        };
        if !Self::claim_eviction(conn).await? {
            return Ok(0);
        }
        let mut excess = i64::try_from(excess).unwrap_or(i64::MAX);
        let mut after = 0;
        let cutoff = loop {
            let rows: Vec<(i64, i64)> = sqlx::query_as(Self::SIZES_AFTER)
                .bind(after)
                .bind(EVICTION_BATCH)
                .fetch_all(&mut *conn)
                .await?;
            let Some(&(last, _)) = rows.last() else {
                break after;
            };
            if let Some(cutoff) = eviction_cutoff(&rows, &mut excess) {
                break cutoff;
            }
            after = last;
        };
        let done = sqlx::query("DELETE FROM memories WHERE id <= $1")
            .bind(cutoff)
            .execute(&mut *conn)
            .await?;
        Ok(Self::rows_affected(&done))
    }

    /// Deletes every memory of `subject` and its idempotency keys; returns
    /// how many memories.
    async fn forget_subject(conn: &mut Self::Connection, subject: &str) -> Result<u64, StoreError> {
        sqlx::query("DELETE FROM retain_keys WHERE subject = $1")
            .bind(subject)
            .execute(&mut *conn)
            .await?;
        let done = sqlx::query("DELETE FROM memories WHERE subject = $1")
            .bind(subject)
            .execute(&mut *conn)
            .await?;
        Ok(Self::rows_affected(&done))
    }

    /// Deletes every memory of `subject` with type `kind`; returns how many.
    async fn forget_type(conn: &mut Self::Connection, subject: &str, kind: &str) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM memories WHERE subject = $1 AND memory_type = $2")
            .bind(subject)
            .bind(kind)
            .execute(&mut *conn)
            .await?;
        Ok(Self::rows_affected(&done))
    }
}

/// The last id of the oldest memories whose `(id, bytes)`, read oldest
/// first, free at least `excess` bytes; `None` while they do not yet.
fn eviction_cutoff(rows: &[(i64, i64)], excess: &mut i64) -> Option<i64> {
    for &(id, bytes) in rows {
        *excess -= bytes;
        if *excess <= 0 {
            return Some(id);
        }
    }
    None
}

/// Milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
