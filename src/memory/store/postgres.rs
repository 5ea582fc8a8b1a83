//! The shared PostgreSQL store: many sidecars, one database. Full-text
//! search is a generated, GIN-indexed `tsvector` (English stemming, the
//! title weighted above the body); scopes are a `TEXT[]` tested with `<@`;
//! idempotency keys are claimed with `INSERT .. ON CONFLICT DO NOTHING`, so
//! sidecars racing with one key store its batch once.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};

use super::breaker::Breaker;
use sqlx::{Postgres, Transaction};
use tokio_stream::StreamExt as _;

use super::{
    Budget, Candidate, ForgetFilter, Forgotten, KEY_TTL, ListQuery, Page, PageBuilder, RecallQuery,
    RetainBatch, Retained, StoreError, content_json, memory_from_row, merge_candidates,
};
use crate::memory::model::MemoryId;

/// How long a caller waits for a pooled connection (and the first connect).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first key of the advisory locks that serialize the writes of one
/// subject (the second is the subject's hash). Two-key advisory locks never
/// meet the single-key ones sqlx takes while migrating.
const SUBJECT_LOCK_CLASS: i32 = 0x6361_6d73; // "cams"

/// How many times `retain` tries to claim a key that a concurrent `forget`
/// or key expiry deletes between our claim and our read.
const CLAIM_ATTEMPTS: usize = 3;

/// The versioned migrations, applied in order at start.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "memories",
        include_str!("../../../migrations/postgres/0001_memories.sql"),
    ),
    (
        2,
        "memory bytes",
        include_str!("../../../migrations/postgres/0002_memory_bytes.sql"),
    ),
    (
        3,
        "tenancy",
        include_str!("../../../migrations/postgres/0003_tenancy.sql"),
    ),
];

/// The first key of the advisory lock one evicting writer holds (the
/// second is 0): writers that find it taken leave the eviction to its
/// holder instead of waiting or evicting twice.
const STORE_LOCK_CLASS: i32 = 0x6361_6d62; // "camb"

/// An open PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Whether the first connection negotiated TLS (every connection of the
    /// pool uses the same options).
    encrypted: bool,
    /// Whether the server is on this host (a Unix socket or a loopback
    /// address), where plaintext crosses no network.
    local: bool,
    /// Refuses calls at once while the server is down ([`Breaker`]).
    breaker: Arc<Breaker>,
}

impl PostgresStore {
    /// Connects to `url` at once (a wrong URL or an unreachable server fails
    /// here, not on the first request) and migrates the database under
    /// sqlx's advisory lock, so sidecars starting together migrate once.
    /// Errors name the server and database, never the password. Every
    /// statement runs under `statement_timeout` (the server cancels it,
    /// 57014, which callers see as UNAVAILABLE).
    pub async fn open(
        url: &str,
        max_connections: u32,
        statement_timeout: Duration,
    ) -> Result<PostgresStore, StoreError> {
        // The url crate's parse errors do not quote the input.
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {e}")))?
            // Plan every execution with its values: after 5 runs of a
            // prepared statement PostgreSQL may keep a generic plan, which
            // for recall ANDs the subject's rows with a GIN scan of the whole
            // table (83 of 89 ms at 1M memories) instead of filtering the
            // subject's rows (8 ms).
            .options([
                ("plan_cache_mode", "force_custom_plan".to_owned()),
                (
                    "statement_timeout",
                    statement_timeout.as_millis().max(1).to_string(),
                ),
            ]);
        let target = describe(&options);
        let local = options.get_socket().is_some() || is_loopback(options.get_host());
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            // A server that is down answers UNAVAILABLE within the
            // statement timeout, not the pool's own.
            .acquire_timeout(ACQUIRE_TIMEOUT.min(statement_timeout.max(Duration::from_millis(100))))
            .connect_with(options)
            .await
            .map_err(|e| StoreError::Unavailable(format!("{target}: {e}")))?;
        super::migrator(MIGRATIONS)
            .await?
            .run(&pool)
            .await
            .map_err(|e| StoreError::Unavailable(format!("{target}: migrating: {e}")))?;
        // The server's own view of this connection: sslmode=prefer (the
        // default) falls back to plaintext when the server offers no TLS.
        let encrypted: bool = sqlx::query_scalar(
            "SELECT COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
        )
        .fetch_one(&pool)
        .await
        .map_err(|e| StoreError::Unavailable(format!("{target}: {e}")))?;
        Ok(PostgresStore {
            pool,
            encrypted,
            local,
            breaker: Arc::new(Breaker::default()),
        })
    }

    /// The breaker every call to this server goes through.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Whether the connections to the server are encrypted (TLS).
    pub fn encrypted(&self) -> bool {
        self.encrypted
    }

    /// Whether the server is on this host (a Unix socket or loopback).
    pub fn local(&self) -> bool {
        self.local
    }

    /// See [`super::MemoryStore::total_bytes`].
    pub async fn total_bytes(&self) -> Result<u64, StoreError> {
        let total: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(bytes), 0)::bigint FROM memory_bytes")
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(total).unwrap_or(0))
    }

    /// See [`super::MemoryStore::ping`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// See [`super::MemoryStore::retain`].
    pub async fn retain(&self, batch: &RetainBatch) -> Result<Retained, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut claimed = false;
        for _ in 0..CLAIM_ATTEMPTS {
            // A concurrent transaction holding the same key makes this wait
            // for its commit (then nothing is inserted) or its rollback
            // (then the key is ours).
            claimed = sqlx::query_scalar::<_, String>(
                "INSERT INTO retain_keys (key, subject, memory_ids, created_at_ms) VALUES ($1, $2, '{}', $3) \
                 ON CONFLICT (subject, key) DO NOTHING RETURNING key",
            )
            .bind(&batch.key)
            .bind(&batch.subject)
            .bind(batch.now_ms)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
            if claimed {
                break;
            }
            let known: Option<Vec<String>> =
                sqlx::query_scalar("SELECT memory_ids FROM retain_keys WHERE key = $1 AND subject = $2")
                    .bind(&batch.key)
                    .bind(&batch.subject)
                    .fetch_optional(&mut *tx)
                    .await?;
            if let Some(ids) = known {
                tx.commit().await?;
                return Ok(Retained {
                    ids: ids.into_iter().map(MemoryId::stored).collect(),
                    replayed: true,
                    ..Retained::default()
                });
            }
            // Deleted between the claim and the read: claim again.
        }
        if !claimed {
            return Err(StoreError::Query(
                "retain key kept vanishing while it was claimed".into(),
            ));
        }
        lock_subject(&mut tx, &batch.subject).await?;
        let mut ids = Vec::with_capacity(batch.memories.len());
        for m in &batch.memories {
            // public_id: the column's default, a random UUID's hex digits.
            let id: String = sqlx::query_scalar(
                "INSERT INTO memories (subject, memory_type, title, body, content, scopes, request_id, \
                 turn, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING public_id",
            )
            .bind(&batch.subject)
            .bind(m.content.memory_type())
            .bind(m.content.title())
            .bind(m.content.body())
            .bind(content_json(m)?)
            .bind(&m.required_scopes)
            .bind(&m.request_id)
            .bind(i64::from(m.turn))
            .bind(batch.now_ms)
            .fetch_one(&mut *tx)
            .await?;
            ids.push(id);
        }
        sqlx::query("UPDATE retain_keys SET memory_ids = $2 WHERE key = $1 AND subject = $3")
            .bind(&batch.key)
            .bind(&ids)
            .bind(&batch.subject)
            .execute(&mut *tx)
            .await?;
        let mut evicted = 0;
        if let Some(age) = batch.retention.max_age {
            let cutoff = batch.now_ms.saturating_sub(millis(age));
            evicted += sqlx::query("DELETE FROM memories WHERE subject = $1 AND created_at_ms < $2")
                .bind(&batch.subject)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        if batch.retention.max_per_subject > 0 {
            let first_evicted: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM memories WHERE subject = $1 ORDER BY id DESC LIMIT 1 OFFSET $2",
            )
            .bind(&batch.subject)
            .bind(i64::from(batch.retention.max_per_subject))
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(first_evicted) = first_evicted {
                evicted += sqlx::query("DELETE FROM memories WHERE subject = $1 AND id <= $2")
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
        // Expired keys another writer is deleting right now are left to it
        // (SKIP LOCKED): writers never wait on each other for this chore.
        sqlx::query(
            "DELETE FROM retain_keys WHERE (subject, key) IN \
             (SELECT subject, key FROM retain_keys WHERE created_at_ms < $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind(batch.now_ms.saturating_sub(millis(KEY_TTL)))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Retained {
            ids: ids.into_iter().map(MemoryId::stored).collect(),
            replayed: false,
            evicted,
            evicted_for_space,
        })
    }

    /// See [`super::MemoryStore::recall`].
    pub async fn recall(&self, q: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        let limit = i64::from(q.limit);
        let mut budget = Budget::new(q.max_bytes);
        let mut matched = Vec::new();
        let any_term = ts_query(&q.terms);
        if !any_term.is_empty() && limit > 0 {
            // Only stop words make an empty tsquery: PostgreSQL answers a
            // NOTICE and matches nothing.
            let mut rows = sqlx::query(
                "SELECT m.public_id, m.id, m.memory_type, m.title, m.body, m.created_at_ms, \
                        ts_rank_cd(m.search, query)::float8 AS relevance \
                 FROM memories m, to_tsquery('english', $1) AS query \
                 WHERE m.search @@ query AND m.subject = $2 \
                   AND m.scopes <@ $3::text[] \
                   AND (cardinality($4::text[]) = 0 OR m.memory_type = ANY($4::text[])) \
                 ORDER BY relevance DESC, m.id DESC LIMIT $5",
            )
            .bind(any_term)
            .bind(&q.subject)
            .bind(&q.scopes)
            .bind(&q.types)
            .bind(limit)
            .fetch(&self.pool);
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
            "SELECT m.public_id, m.id, m.memory_type, m.title, m.body, m.created_at_ms, \
                    0.0::float8 AS relevance \
             FROM memories m \
             WHERE m.subject = $1 \
               AND m.scopes <@ $2::text[] \
               AND (cardinality($3::text[]) = 0 OR m.memory_type = ANY($3::text[])) \
             ORDER BY m.id DESC LIMIT $4",
        )
        .bind(&q.subject)
        .bind(&q.scopes)
        .bind(&q.types)
        .bind(limit)
        .fetch(&self.pool);
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
        let mut tx = self.pool.begin().await?;
        let deleted = match filter {
            ForgetFilter::Ids(subject, ids) => {
                let wire: Vec<&str> = ids.iter().map(MemoryId::as_str).collect();
                let deleted = sqlx::query("DELETE FROM memories WHERE public_id = ANY($1) AND subject = $2")
                    .bind(wire)
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                return Ok(Forgotten::of_ids(ids, deleted));
            }
            ForgetFilter::Subject(subject) => {
                lock_subject(&mut tx, subject).await?;
                sqlx::query("DELETE FROM retain_keys WHERE subject = $1")
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM memories WHERE subject = $1")
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            ForgetFilter::SubjectType(subject, kind) => {
                lock_subject(&mut tx, subject).await?;
                sqlx::query("DELETE FROM memories WHERE subject = $1 AND memory_type = $2")
                    .bind(subject)
                    .bind(kind)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
        };
        tx.commit().await?;
        Ok(Forgotten {
            deleted,
            not_found: 0,
        })
    }

    /// See [`super::MemoryStore::list`].
    pub async fn list(&self, q: &ListQuery<'_>) -> Result<Page, StoreError> {
        // A hidden memory's row comes back without content or scopes, so
        // hiding costs a row, not its bytes.
        let mut rows = sqlx::query(
            "SELECT id, public_id, created_at_ms, subject, request_id, turn, \
                    CASE WHEN listed THEN content END, CASE WHEN listed THEN scopes END \
             FROM (SELECT id, public_id, created_at_ms, subject, request_id, turn, content, scopes, \
                          scopes <@ $4::text[] AS listed \
                   FROM memories \
                   WHERE subject = $1 AND id < $2 ORDER BY id DESC LIMIT $3) AS page \
             ORDER BY id DESC",
        )
        .bind(q.subject)
        .bind(q.before.unwrap_or(i64::MAX))
        .bind(i64::from(q.limit) + 1)
        .bind(q.scopes)
        .fetch(&self.pool);
        let mut page = PageBuilder::new(q.limit, q.max_bytes);
        while let Some(row) = rows.try_next().await? {
            let row_id: i64 = row.try_get(0)?;
            let content: Option<&str> = row.try_get(6)?;
            let scopes: Option<Vec<String>> = row.try_get(7)?;
            let listed = match content.zip(scopes) {
                None => None,
                Some((content, scopes)) => {
                    let memory = memory_from_row(
                        MemoryId::stored(row.try_get(1)?),
                        row.try_get(2)?,
                        row.try_get(3)?,
                        content,
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

    /// Closes the pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Deletes the oldest memories of any subject until the store holds at most
/// `max` bytes; returns how many. One writer at a time evicts; the others
/// skip (the store may then pass `max` by a write until the next one).
async fn evict_for_space(tx: &mut Transaction<'_, Postgres>, max: u64) -> Result<u64, StoreError> {
    let total: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(bytes), 0)::bigint FROM memory_bytes")
        .fetch_one(&mut **tx)
        .await?;
    let mut excess = total.saturating_sub(i64::try_from(max).unwrap_or(i64::MAX));
    if excess <= 0 {
        return Ok(0);
    }
    let ours: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1, 0)")
        .bind(STORE_LOCK_CLASS)
        .fetch_one(&mut **tx)
        .await?;
    if !ours {
        return Ok(0);
    }
    let mut after = 0;
    let cutoff = loop {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, (octet_length(title) + octet_length(body) + octet_length(content))::bigint \
             FROM memories WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(super::EVICTION_BATCH)
        .fetch_all(&mut **tx)
        .await?;
        let Some(&(last, _)) = rows.last() else {
            break after;
        };
        if let Some(cutoff) = super::eviction_cutoff(&rows, &mut excess) {
            break cutoff;
        }
        after = last;
    };
    Ok(sqlx::query("DELETE FROM memories WHERE id <= $1")
        .bind(cutoff)
        .execute(&mut **tx)
        .await?
        .rows_affected())
}

/// Serializes the writes of one subject until `tx` ends: count retention
/// then sees every committed memory of the subject (as SQLite's single
/// writer does), and concurrent evictions never deadlock on row locks.
async fn lock_subject(tx: &mut Transaction<'_, Postgres>, subject: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(SUBJECT_LOCK_CLASS)
        .bind(subject)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A recall candidate from its row (public id, row id, type, title, body,
/// created, relevance).
fn candidate(row: &PgRow) -> Result<Candidate, StoreError> {
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

/// The `to_tsquery` text matching any of the terms. Terms are letters and
/// digits only; anything else is dropped besides, so no caller text is
/// tsquery syntax. Empty when no term is left.
fn ts_query(terms: &[String]) -> String {
    let terms: Vec<String> = terms
        .iter()
        .map(|t| t.chars().filter(|c| c.is_alphanumeric()).collect::<String>())
        .filter(|t| !t.is_empty())
        .collect();
    terms.join(" | ")
}

/// The server and database of a connection, without credentials.
fn describe(options: &PgConnectOptions) -> String {
    let database = options.get_database().unwrap_or_default();
    match options.get_socket() {
        Some(socket) => format!("postgres {}/{database}", socket.display()),
        None => format!(
            "postgres {}:{}/{database}",
            options.get_host(),
            options.get_port()
        ),
    }
}

/// Whether `host` names this machine: `localhost` or a loopback address.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_query_ors_terms_and_drops_syntax() {
        let q = ts_query(&["jwt".into(), "re'fresh:*".into(), "&|!".into()]);
        assert_eq!(q, "jwt | refresh");
        assert!(ts_query(&[]).is_empty());
    }

    #[test]
    fn loopback_hosts_are_local() {
        for host in ["localhost", "127.0.0.1", "127.3.2.1", "::1", "[::1]", "LocalHost"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["db.internal", "10.0.0.5", "localhost.example.com", "::2", ""] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn describe_never_shows_the_password() {
        let options = PgConnectOptions::from_str("postgres://alice:s3cret@db.internal:6543/memories");
        let described = options.map(|o| describe(&o)).unwrap_or_default();
        assert_eq!(described, "postgres db.internal:6543/memories");
    }
}
