//! The shared PostgreSQL store: many sidecars, one database. Full-text
//! search is a generated, GIN-indexed `tsvector` (English stemming, the
//! title weighted above the body); scopes are a `TEXT[]` tested with `<@`;
//! idempotency keys are claimed with `INSERT .. ON CONFLICT DO NOTHING`, so
//! sidecars racing with one key store its batch once. Beside the memories,
//! the fleet's shared provider counts ([`counts`]).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgQueryResult};

use super::breaker::Breaker;
use super::dialect::Dialect;
use super::page::{PageRow, content_json, read_page};
use super::recall::{CandidateRow, Gathered};
use super::{
    Candidate, ForgetFilter, Forgotten, ListQuery, Page, RecallQuery, RetainBatch, Retained, StoreError,
};
use crate::memory::model::MemoryId;

mod counts;

pub use counts::KEEP_FOR as LEARNED_COUNTS_KEEP_FOR;

/// How long a caller waits for a pooled connection (and the first connect).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first key of the advisory locks that serialize the writes of one
/// subject (the second is the subject's hash). Two-key advisory locks never
/// meet the single-key ones sqlx takes while migrating.
const SUBJECT_LOCK_CLASS: i32 = 0x6361_6d73; // "cams"

/// How many times `retain` tries to claim a key that a concurrent `forget`
/// or key expiry deletes between our claim and our read.
const CLAIM_ATTEMPTS: usize = 3;

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
    /// When the learned counts are pruned next ([`counts`]).
    counts_upkeep: Arc<counts::Upkeep>,
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
        super::migrate::migrator(|step| step.postgres)
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
            counts_upkeep: Arc::default(),
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
        Postgres::total_bytes(&mut *self.pool.acquire().await?).await
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
                return Ok(Retained::replay(ids));
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
        Postgres::finish_retain(tx, batch, ids).await
    }

    /// See [`super::MemoryStore::recall`].
    pub async fn recall(&self, q: &RecallQuery) -> Result<Vec<Candidate>, StoreError> {
        let limit = i64::from(q.limit);
        let mut gathered = Gathered::new(q.max_bytes);
        let any_term = ts_query(&q.terms);
        if !any_term.is_empty() && limit > 0 {
            // Only stop words make an empty tsquery: PostgreSQL answers a
            // NOTICE and matches nothing.
            let matched = sqlx::query_as::<_, CandidateRow>(
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
            .bind(limit);
            gathered.read(matched.fetch(&self.pool)).await?;
        }
        let recent = sqlx::query_as::<_, CandidateRow>(
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
        .bind(limit);
        gathered.read(recent.fetch(&self.pool)).await?;
        Ok(gathered.finish())
    }

    /// See [`super::MemoryStore::forget`].
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<Forgotten, StoreError> {
        let mut tx = self.pool.begin().await?;
        let forgotten = match filter {
            ForgetFilter::Ids(subject, ids) => {
                let wire: Vec<&str> = ids.iter().map(MemoryId::as_str).collect();
                let deleted = sqlx::query("DELETE FROM memories WHERE public_id = ANY($1) AND subject = $2")
                    .bind(wire)
                    .bind(subject)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                Forgotten::of_ids(ids, deleted)
            }
            ForgetFilter::Subject(subject) => {
                lock_subject(&mut tx, subject).await?;
                Forgotten::all(Postgres::forget_subject(&mut tx, subject).await?)
            }
            ForgetFilter::SubjectType(subject, kind) => {
                lock_subject(&mut tx, subject).await?;
                Forgotten::all(Postgres::forget_type(&mut tx, subject, kind).await?)
            }
        };
        tx.commit().await?;
        Ok(forgotten)
    }

    /// See [`super::MemoryStore::list`].
    pub async fn list(&self, q: &ListQuery<'_>) -> Result<Page, StoreError> {
        // A hidden memory's row comes back without content or scopes, so
        // hiding costs a row, not its bytes.
        let rows = sqlx::query_as::<_, PageRow<Vec<String>>>(
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
        .bind(q.scopes);
        read_page(q, rows.fetch(&self.pool), |_, scopes| Ok(scopes)).await
    }

    /// Closes the pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Many sidecars write at once: one writer at a time evicts for space (the
/// others skip it), and none waits on another to delete expired keys.
impl Dialect for Postgres {
    const TOTAL_BYTES: &'static str = "SELECT COALESCE(SUM(bytes), 0)::bigint FROM memory_bytes";
    const SIZES_AFTER: &'static str = "SELECT id, (octet_length(title) + octet_length(body) \
                                            + octet_length(content))::bigint \
                                       FROM memories WHERE id > $1 ORDER BY id LIMIT $2";
    // Expired keys another writer is deleting right now are left to it
    // (SKIP LOCKED): writers never wait on each other for this chore.
    const EXPIRE_KEYS: &'static str = "DELETE FROM retain_keys WHERE (subject, key) IN \
                                       (SELECT subject, key FROM retain_keys \
                                        WHERE created_at_ms < $1 FOR UPDATE SKIP LOCKED)";

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    async fn claim_eviction(conn: &mut PgConnection) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1, 0)")
            .bind(STORE_LOCK_CLASS)
            .fetch_one(conn)
            .await?)
    }
}

/// Serializes the writes of one subject until the transaction on `conn`
/// ends: count retention then sees every committed memory of the subject
/// (as SQLite's single writer does), and concurrent evictions never
/// deadlock on row locks.
async fn lock_subject(conn: &mut PgConnection, subject: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(SUBJECT_LOCK_CLASS)
        .bind(subject)
        .execute(conn)
        .await?;
    Ok(())
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
