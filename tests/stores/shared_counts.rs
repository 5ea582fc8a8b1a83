//! A fleet counts each piece once, not once per pod (issue 52): sidecars on
//! one PostgreSQL memory store share what their providers counted through
//! its `learned_counts` table. Directly on the store: counts round-trip by
//! generation and key, and old rows are pruned by writers. Through real
//! servers and one stand-in provider: the sidecars after the first learn
//! every piece, and their frames, with no provider call; sidecars replaying
//! at once save less (the figures are printed: `cargo test --test stores
//! shared_counts -- --nocapture`); and with the store unreachable, counting
//! goes to the provider and requests are unaffected (this one needs no
//! server). The others need `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL`.

use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::common::{TestServer, postgres};
use context_assembler::grpc::pb;
use context_assembler::memory::store::{LEARNED_COUNTS_KEEP_FOR, PostgresStore, StoreError};
use context_assembler::workload::{Rng, code, prose};
use sqlx::Connection as _;

use crate::standin::{KEY, StandIn};

/// A model without a public tokenizer (generation claude-2026).
const MODEL: &str = "claude-sonnet-5";
/// Sidecars in the fleet.
const PODS: usize = 3;
/// How long a sidecar may take to learn the whole replay.
const LEARN_WITHIN: Duration = Duration::from_secs(60);

async fn open(url: &str) -> PostgresStore {
    PostgresStore::open(url, 4, Duration::from_secs(5)).await.unwrap()
}

/// Rows of the table in the database of `url`.
async fn rows(url: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let n = sqlx::query_scalar("SELECT count(*) FROM learned_counts")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    n
}

#[tokio::test]
async fn learned_counts_round_trip_by_generation_and_key() {
    let Some(url) = postgres::url() else { return };
    let store = open(&postgres::fresh_database(&url).await).await;
    let (a, b, c) = ([1u8; 32], [2u8; 32], [3u8; 32]);
    assert_eq!(store.learned_counts("g1", &[a, b]).await.unwrap(), [None, None]);
    store
        .put_learned_counts("g1", &[(a, 10), (b, 20), (a, 11)], 1_000)
        .await
        .unwrap();
    // In the keys' order, a key given twice keeping its last count.
    assert_eq!(
        store.learned_counts("g1", &[c, b, a]).await.unwrap(),
        [None, Some(20), Some(11)]
    );
    // Another generation is another table.
    assert_eq!(store.learned_counts("g2", &[a]).await.unwrap(), [None]);
    store.put_learned_counts("g1", &[(a, 12)], 2_000).await.unwrap();
    assert_eq!(store.learned_counts("g1", &[a]).await.unwrap(), [Some(12)]);
    // A count the column cannot hold is left out, not wrapped.
    store
        .put_learned_counts("g1", &[(c, u32::MAX)], 2_000)
        .await
        .unwrap();
    assert_eq!(store.learned_counts("g1", &[c]).await.unwrap(), [None]);
    assert_eq!(store.learned_counts("g1", &[]).await.unwrap(), []);
    // Calls are bounded.
    let many = vec![[9u8; 32]; 1001];
    assert!(matches!(
        store.learned_counts("g1", &many).await,
        Err(StoreError::Query(_))
    ));
    store.close().await;
}

#[tokio::test]
async fn learned_counts_older_than_a_week_are_pruned_by_writers() {
    let Some(url) = postgres::url() else { return };
    let db = postgres::fresh_database(&url).await;
    let store = open(&db).await;
    let t0: i64 = 1_700_000_000_000;
    let keep = i64::try_from(LEARNED_COUNTS_KEEP_FOR.as_millis()).unwrap();
    let old: Vec<([u8; 32], u32)> = (0..5u8).map(|i| ([i; 32], u32::from(i))).collect();
    store.put_learned_counts("g", &old, t0).await.unwrap();
    // A day later nothing is old enough.
    let day = 24 * 3600 * 1000;
    store
        .put_learned_counts("g", &[([100; 32], 1)], t0 + day)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rows(&db).await, 6);
    // A week and a day later, the next write prunes the five (in the
    // background), and keeps what is younger than a week.
    store
        .put_learned_counts("g", &[([101; 32], 1)], t0 + keep + day)
        .await
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(20);
    while rows(&db).await != 2 {
        assert!(Instant::now() < give_up, "old rows still there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let keys = [[0u8; 32], [100; 32], [101; 32]];
    assert_eq!(
        store.learned_counts("g", &keys).await.unwrap(),
        [None, Some(1), Some(1)]
    );
    // By hand: at most a batch at a time.
    assert_eq!(store.prune_learned_counts(t0 + 10 * keep).await.unwrap(), 2);
    store.close().await;
}

/// The sessions every sidecar replays: each request repeats its session's
/// earlier turns; the system prompt is the fleet's.
fn sessions() -> Vec<Vec<pb::AssembleRequest>> {
    let mut rng = Rng::new(52);
    let system = prose(&mut rng, 1_500);
    (0..3)
        .map(|s| {
            let mut turns: Vec<pb::Item> = Vec::new();
            (0..4)
                .map(|r| {
                    let query = format!("Session {s}, request {r}: {}", prose(&mut rng, 120));
                    let request = pb::AssembleRequest {
                        request_id: format!("s{s}-r{r}"),
                        model: MODEL.to_owned(),
                        max_input_tokens: Some(100_000),
                        static_segments: vec![pb::Segment {
                            id: "system".to_owned(),
                            kind: pb::SegmentKind::System.into(),
                            content: system.clone(),
                        }],
                        blocks: vec![pb::Block {
                            name: "conversation".to_owned(),
                            kind: pb::BlockKind::RecentTurns.into(),
                            items: turns.clone(),
                            ..Default::default()
                        }],
                        query: query.clone(),
                        ..Default::default()
                    };
                    let answer = if r % 2 == 0 {
                        prose(&mut rng, 400)
                    } else {
                        code(&mut rng, 600)
                    };
                    for (i, (text, role)) in [(query, pb::Role::User), (answer, pb::Role::Assistant)]
                        .into_iter()
                        .enumerate()
                    {
                        turns.push(pb::Item {
                            id: format!("s{s}-t{r}-{i}"),
                            content: text,
                            role: role.into(),
                            trusted: true,
                            ..Default::default()
                        });
                    }
                    request
                })
                .collect()
        })
        .collect()
}

/// A sidecar counting through `standin`, its memory store PostgreSQL at
/// `postgres_url` when given (SQLite otherwise).
async fn sidecar(standin: &StandIn, postgres_url: Option<&str>) -> (tempfile::TempDir, TestServer) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("anthropic.key");
    std::fs::write(&key, format!("{KEY}\n")).unwrap();
    let mut toml = format!(
        "[providers.anthropic.counting]\nurl = \"{}\"\napi_key_file = \"{}\"\nrequests_per_minute = 60000\ntimeout_ms = 5000\n\
         [memory]\nrecall_timeout_ms = 10000\n",
        standin.anthropic_url(),
        key.display()
    );
    if let Some(url) = postgres_url {
        toml.push_str(&format!("store = \"postgres\"\npostgres_url = \"{url}\"\n"));
    }
    let config = dir.path().join("sidecar.toml");
    std::fs::write(&config, toml).unwrap();
    let server = TestServer::start_with(context_assembler::config::ServeArgs {
        config: Some(config),
        ..TestServer::args()
    })
    .await;
    (dir, server)
}

/// Sends every request once, each answered within `within`; whether every
/// answer's count was all the provider's.
async fn replay(server: &TestServer, sessions: &[Vec<pb::AssembleRequest>], within: Duration) -> bool {
    let mut client = server.client();
    let mut exact = true;
    for request in sessions.iter().flatten() {
        let started = Instant::now();
        let answer = client.assemble(request.clone()).await.unwrap().into_inner();
        assert!(
            started.elapsed() < within,
            "a request took {:?}",
            started.elapsed()
        );
        let usage = answer.usage.unwrap();
        exact &= usage.exact && usage.tokens_provider == usage.total_tokens;
    }
    exact
}

/// Replays until every answer is the provider's count.
async fn replay_until_learned(server: &TestServer, sessions: &[Vec<pb::AssembleRequest>]) {
    let give_up = Instant::now() + LEARN_WITHIN;
    while !replay(server, sessions, Duration::from_secs(5)).await {
        assert!(Instant::now() < give_up, "the replay was not learned in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Straight to the terminal (the harness captures print!).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[tokio::test]
async fn sidecars_on_one_store_count_each_piece_once() {
    let Some(url) = postgres::url() else { return };
    let sessions = sessions();
    let requests: usize = sessions.iter().map(Vec::len).sum();

    // Without a shared store, each sidecar counts everything.
    let standin = StandIn::start().await;
    let mut alone = Vec::new();
    for _ in 0..PODS {
        let before = standin.requests().len();
        let (_dir, server) = sidecar(&standin, None).await;
        replay_until_learned(&server, &sessions).await;
        alone.push(standin.requests().len() - before);
        server.stop().await;
    }
    assert!(alone.iter().all(|&n| n == alone[0]), "{alone:?}");

    // On one store: the first counts, the others read.
    let db = postgres::fresh_database(&url).await;
    let standin = StandIn::start().await;
    let mut shared = Vec::new();
    for pod in 0..PODS {
        let before = standin.requests().len();
        let (_dir, server) = sidecar(&standin, Some(&db)).await;
        replay_until_learned(&server, &sessions).await;
        let calls = standin.requests().len() - before;
        shared.push(calls);
        if pod == 0 {
            // Every count the provider answered is written (a frame probe
            // or a piece a row), before the next sidecar starts.
            let give_up = Instant::now() + Duration::from_secs(20);
            while rows(&db).await != calls as i64 {
                assert!(
                    Instant::now() < give_up,
                    "{} rows for {calls} calls",
                    rows(&db).await
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let unavailable = server
            .counter(
                "assembler_provider_count_calls_total",
                &[("provider", "anthropic"), ("outcome", "shared_unavailable")],
            )
            .await;
        server.stop().await;
        if pod > 0 {
            assert_eq!(
                calls, 0,
                "sidecar {pod} called the provider {calls} times ({unavailable} store calls failed)"
            );
        }
    }
    assert_eq!(shared[0], alone[0], "the first sidecar counts as a lone one");
    let (total_alone, total_shared) = (alone.iter().sum::<usize>(), shared.iter().sum::<usize>());
    say(&format!(
        "shared counts: {PODS} sidecars replaying {} sessions ({requests} requests) one after another: \
         {total_alone} provider calls without a shared store ({alone:?}), {total_shared} with one ({shared:?})",
        sessions.len()
    ));
    assert_eq!(total_alone, PODS * total_shared);
}

/// Sidecars replaying the same sessions at the same time: a piece they
/// meet at once is counted by each that misses it in the table, so they
/// save less than one after another, never more than a fleet without a
/// store spends.
#[tokio::test]
async fn sidecars_replaying_at_once_call_the_provider_at_most_as_often_as_without_a_store() {
    let Some(url) = postgres::url() else { return };
    let sessions = sessions();
    let db = postgres::fresh_database(&url).await;
    let standin = StandIn::start().await;
    let mut fleet = Vec::new();
    for _ in 0..PODS {
        fleet.push(sidecar(&standin, Some(&db)).await);
    }
    futures_util::future::join_all(
        fleet
            .iter()
            .map(|(_, server)| replay_until_learned(server, &sessions)),
    )
    .await;
    let calls = standin.requests().len();
    for (_dir, server) in fleet {
        server.stop().await;
    }
    // What one sidecar alone calls: the stand-in's count of a fresh one.
    let lone = StandIn::start().await;
    let (_dir, server) = sidecar(&lone, None).await;
    replay_until_learned(&server, &sessions).await;
    let one = lone.requests().len();
    server.stop().await;
    say(&format!(
        "shared counts: {PODS} sidecars replaying at once: {calls} provider calls on one store, \
         {} without one, {one} for one sidecar",
        PODS * one
    ));
    assert!(
        (one..=PODS * one).contains(&calls),
        "{calls} calls, {one} for one sidecar"
    );
}

/// A store that cannot be reached costs no request anything: every answer
/// comes at once, and the provider counts every piece as for a lone
/// sidecar. Runs without a PostgreSQL server (nothing listens on port 1).
#[tokio::test]
async fn with_the_store_unreachable_counting_goes_to_the_provider() {
    let sessions = sessions();
    let standin = StandIn::start().await;
    let unreachable = "postgres://postgres@127.0.0.1:1/none";
    let (_dir, server) = sidecar(&standin, Some(unreachable)).await;
    replay_until_learned(&server, &sessions).await;
    let calls = standin.requests().len();
    let lone = StandIn::start().await;
    let (_lone_dir, lone_server) = sidecar(&lone, None).await;
    replay_until_learned(&lone_server, &sessions).await;
    assert_eq!(
        calls,
        lone.requests().len(),
        "every piece counted by the provider"
    );
    let unavailable = server
        .counter(
            "assembler_provider_count_calls_total",
            &[("provider", "anthropic"), ("outcome", "shared_unavailable")],
        )
        .await;
    assert!(unavailable >= 1.0, "the failed store calls are counted");
    server.stop().await;
    lone_server.stop().await;
}
