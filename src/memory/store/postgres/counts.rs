//! The fleet's table of learned provider counts (issue 52,
//! `migrations/postgres/0004_learned_counts.sql`): every sidecar on the
//! store reads it before asking its provider to count a piece, and writes
//! what its provider answered. Rows hold a generation, a 32-byte content
//! key and a count, never text. Every call goes through the store's
//! breaker.
//!
//! Bounded by age: a write starts, in the background, a prune of at most
//! [`PRUNE_BATCH`] rows learned more than [`KEEP_FOR`] ago, once per
//! [`PRUNE_EVERY`] per sidecar, or at the next write when the last prune
//! found a full batch (so pruning keeps pace with a backlog). Sidecars
//! pruning at once skip each other's rows (`SKIP LOCKED`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use tracing::debug;

use super::PostgresStore;
use crate::memory::store::StoreError;

/// How long a learned count is kept.
pub const KEEP_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often a sidecar prunes (at most, without a backlog).
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Rows one prune deletes at most (a short statement).
pub const PRUNE_BATCH: i64 = 1000;
/// Keys one call reads or writes at most.
pub const MAX_KEYS: usize = 1000;

/// When this sidecar prunes next, and whether a prune is running.
#[derive(Debug, Default)]
pub struct Upkeep {
    /// The `now_ms` after which a write prunes.
    next_ms: AtomicI64,
    running: AtomicBool,
}

impl PostgresStore {
    /// The counts stored for `keys` under `generation`, in `keys`' order:
    /// `None` for a key not stored. At most `MAX_KEYS` keys.
    pub async fn learned_counts(
        &self,
        generation: &str,
        keys: &[[u8; 32]],
    ) -> Result<Vec<Option<u32>>, StoreError> {
        if keys.len() > MAX_KEYS {
            return Err(StoreError::Query(format!("more than {MAX_KEYS} keys")));
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(Vec<u8>, i32)> = self
            .breaker
            .call(async {
                Ok(sqlx::query_as(
                    "SELECT key, tokens FROM learned_counts WHERE generation = $1 AND key = ANY($2)",
                )
                .bind(generation)
                .bind(keys)
                .fetch_all(&self.pool)
                .await?)
            })
            .await?;
        let found: HashMap<Vec<u8>, i32> = rows.into_iter().collect();
        Ok(keys
            .iter()
            .map(|k| u32::try_from(*found.get(k.as_slice())?).ok())
            .collect())
    }

    /// Stores `counts` (key, tokens) under `generation`, learned at
    /// `now_ms`, replacing what a key held (a key given twice keeps its
    /// last count; a count past `i32::MAX` is left out). At most
    /// `MAX_KEYS`. Then prunes in the background if it is time.
    pub async fn put_learned_counts(
        &self,
        generation: &str,
        counts: &[([u8; 32], u32)],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if counts.len() > MAX_KEYS {
            return Err(StoreError::Query(format!("more than {MAX_KEYS} counts")));
        }
        // ON CONFLICT cannot touch one row twice in a statement: each key
        // once, with its last count.
        let mut seen = HashSet::with_capacity(counts.len());
        let (keys, tokens): (Vec<[u8; 32]>, Vec<i32>) = counts
            .iter()
            .rev()
            .filter(|(key, _)| seen.insert(*key))
            .filter_map(|&(key, n)| Some((key, i32::try_from(n).ok()?)))
            .unzip();
        if keys.is_empty() {
            return Ok(());
        }
        self.breaker
            .call(async {
                sqlx::query(
                    "INSERT INTO learned_counts (generation, key, tokens, learned_at_ms) \
                     SELECT $1, k, t, $4 FROM unnest($2::bytea[], $3::int4[]) AS u(k, t) \
                     ON CONFLICT (generation, key) \
                     DO UPDATE SET tokens = EXCLUDED.tokens, learned_at_ms = EXCLUDED.learned_at_ms",
                )
                .bind(generation)
                .bind(&keys)
                .bind(&tokens)
                .bind(now_ms)
                .execute(&self.pool)
                .await?;
                Ok(())
            })
            .await?;
        self.prune_if_due(now_ms);
        Ok(())
    }

    /// Deletes at most `PRUNE_BATCH` rows learned before `before_ms`;
    /// returns how many.
    pub async fn prune_learned_counts(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.breaker
            .call(async {
                Ok(sqlx::query(
                    "DELETE FROM learned_counts WHERE (generation, key) IN \
                     (SELECT generation, key FROM learned_counts \
                      WHERE learned_at_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
                )
                .bind(before_ms)
                .bind(PRUNE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected())
            })
            .await
    }

    /// Starts a prune in the background when one is due at `now_ms` and
    /// none is running.
    fn prune_if_due(&self, now_ms: i64) {
        let upkeep = &self.counts_upkeep;
        if now_ms < upkeep.next_ms.load(Ordering::Relaxed) || upkeep.running.swap(true, Ordering::AcqRel) {
            return;
        }
        upkeep
            .next_ms
            .store(now_ms.saturating_add(millis(PRUNE_EVERY)), Ordering::Relaxed);
        let store = self.clone();
        tokio::spawn(async move {
            let before = now_ms.saturating_sub(millis(KEEP_FOR));
            match store.prune_learned_counts(before).await {
                Ok(deleted) => {
                    debug!(deleted, "learned counts pruned");
                    if deleted >= PRUNE_BATCH as u64 {
                        // A backlog: the next write prunes again.
                        store.counts_upkeep.next_ms.store(0, Ordering::Relaxed);
                    }
                }
                Err(e) => debug!(err = %e, "learned counts prune failed"),
            }
            store.counts_upkeep.running.store(false, Ordering::Release);
        });
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
