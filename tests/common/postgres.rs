//! Whether this test binary's PostgreSQL suites run, and a fresh database
//! for a test that wants one of its own. They need a server's URL in
//! `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL` (`.ci/run` starts one: `eval
//! "$(bash .ci/postgres.sh)"`). Without it they are skipped, and say so once
//! on the terminal; with `CONTEXT_ASSEMBLER_REQUIRE_POSTGRES=1` (CI) its
//! absence fails instead.

use std::io::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::Connection as _;

pub const URL_ENV: &str = "CONTEXT_ASSEMBLER_TEST_POSTGRES_URL";
pub const CA_ENV: &str = "CONTEXT_ASSEMBLER_TEST_POSTGRES_CA";
pub const REQUIRE_ENV: &str = "CONTEXT_ASSEMBLER_REQUIRE_POSTGRES";

/// The value of each of `names` (all set and not empty), or `None` when the
/// PostgreSQL cases are skipped.
pub fn vars<const N: usize>(names: [&str; N]) -> Option<[String; N]> {
    let values = names.map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()));
    if values.iter().all(Option::is_some) {
        return Some(values.map(Option::unwrap_or_default));
    }
    let missing: Vec<&str> = names
        .iter()
        .zip(&values)
        .filter(|(_, v)| v.is_none())
        .map(|(n, _)| *n)
        .collect();
    let missing = missing.join(", ");
    assert!(
        std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
        "{REQUIRE_ENV}=1 but {missing} not set (eval \"$(bash .ci/postgres.sh)\")"
    );
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        // Straight to the terminal: the harness captures print! and eprint!.
        let binary = std::env::args().next().unwrap_or_default();
        let binary = binary.rsplit('/').next().unwrap_or_default();
        let _ = writeln!(
            std::io::stderr(),
            "note: {binary}: PostgreSQL cases SKIPPED ({missing} not set; eval \"$(bash .ci/postgres.sh)\" runs them)"
        );
    });
    None
}

/// The PostgreSQL URL, or `None` when the PostgreSQL cases are skipped.
pub fn url() -> Option<String> {
    vars([URL_ENV]).map(|[url]| url)
}

/// Creates an empty database on the server of `url`; returns its URL.
pub async fn fresh_database(url: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!(
        "ca_test_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    with_database(url, &name)
}

/// `url` naming database `name` instead.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").unwrap() + 3;
    let server = base[authority..]
        .find('/')
        .map_or(base, |slash| &base[..authority + slash]);
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}
