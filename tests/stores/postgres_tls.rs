//! The PostgreSQL store over TLS, against the server `.ci/postgres.sh`
//! starts with `ssl=on` and a certificate signed by a throwaway CA
//! (`CONTEXT_ASSEMBLER_TEST_POSTGRES_URL` and `_CA`). Skipped without them,
//! unless `CONTEXT_ASSEMBLER_REQUIRE_POSTGRES=1`.
//!
//! - `sslmode=verify-full` with the CA as `sslrootcert` opens, stores and
//!   recalls, and the server sees an encrypted connection;
//! - a URL without `sslmode` (libpq's default, `prefer`) is encrypted too when
//!   the server offers TLS, never silently plaintext;
//! - `verify-full` against a CA that did not sign the server's certificate
//!   fails at open, UNAVAILABLE, naming the server but not the password.

use std::time::Duration;

use crate::common::postgres;
use context_assembler::memory::model::{MemoryBody, NewMemory, Observation};
use context_assembler::memory::store::{
    Backend, DEFAULT_STATEMENT_TIMEOUT, MemoryStore, RecallQuery, RetainBatch, Retention, StoreError,
    Transport,
};

/// The server's URL and its CA file, or `None` to skip.
fn server() -> Option<(String, String)> {
    postgres::vars([postgres::URL_ENV, postgres::CA_ENV]).map(|[url, ca]| (url, ca))
}

fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

fn backend(url: String) -> Backend {
    Backend::Postgres {
        url,
        max_connections: 2,
        statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
    }
}

async fn open(url: String) -> Result<MemoryStore, StoreError> {
    let store = tokio::time::timeout(Duration::from_secs(30), MemoryStore::open(&backend(url)))
        .await
        .expect("open within 30 s")?;
    Ok(store.expect("a PostgreSQL backend opens a store"))
}

#[tokio::test]
async fn verify_full_with_the_ca_stores_and_recalls_over_tls() {
    let Some((url, ca)) = server() else { return };
    let store = open(with_params(
        &url,
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await
    .expect("verify-full with the test CA opens");
    assert_eq!(store.transport(), Transport::Tls);

    let subject = format!("tls-{}", std::process::id());
    let batch = RetainBatch {
        key: format!("k-{subject}"),
        subject: subject.clone(),
        memories: vec![NewMemory {
            subject: subject.clone(),
            content: MemoryBody::Observation(Observation {
                kind: "discovery".to_owned(),
                title: "certificate rotation".to_owned(),
                text: "the ingress rotates certificates weekly".to_owned(),
                facts: vec![],
                files_read: vec![],
                files_modified: vec![],
            }),
            required_scopes: vec![],
            request_id: "r1".to_owned(),
            turn: 1,
        }],
        now_ms: 1_700_000_000_000,
        retention: Retention {
            max_per_subject: 0,
            max_age: None,
            max_total_bytes: 0,
        },
    };
    let retained = store.retain(&batch).await.expect("retain over TLS");
    assert_eq!(retained.ids.len(), 1);
    let found = store
        .recall(&RecallQuery {
            subject,
            terms: vec!["certificates".to_owned()],
            limit: 5,
            max_bytes: 1 << 20,
            ..RecallQuery::default()
        })
        .await
        .expect("recall over TLS");
    assert_eq!(found.len(), 1, "the memory stored over TLS is recalled");
}

#[tokio::test]
async fn the_default_sslmode_encrypts_when_the_server_offers_tls() {
    let Some((url, _)) = server() else { return };
    assert!(!url.contains("sslmode"), "the test server's URL names no sslmode");
    let store = open(url).await.expect("the default URL opens");
    assert_eq!(
        store.transport(),
        Transport::Tls,
        "sslmode=prefer must negotiate TLS with a server that offers it"
    );
}

#[tokio::test]
async fn sslmode_disable_is_reported_as_plaintext_on_this_host() {
    let Some((url, _)) = server() else { return };
    let store = open(with_params(&url, "sslmode=disable"))
        .await
        .expect("plaintext opens");
    assert_eq!(store.transport(), Transport::PlaintextLocal);
}

#[tokio::test]
async fn verify_full_with_another_ca_fails_at_open() {
    let Some((url, _)) = server() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let stranger = dir.path().join("stranger.crt");
    let ca = rcgen::generate_simple_self_signed(vec!["stranger".to_owned()]).expect("a certificate");
    std::fs::write(&stranger, ca.cert.pem()).expect("write the stranger CA");
    let url = with_params(&url, "user=postgres&password=hunter2");
    let err = open(with_params(
        &url,
        &format!("sslmode=verify-full&sslrootcert={}", stranger.display()),
    ))
    .await
    .expect_err("a certificate from another CA is refused");
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unavailable(_)), "{text}");
    assert!(text.contains("127.0.0.1"), "names the server: {text}");
    assert!(!text.contains("hunter2"), "never the password: {text}");
}
