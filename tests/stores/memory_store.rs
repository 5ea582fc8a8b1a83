//! The memory store's contract, one suite run against every backend:
//! SQLite in a temporary directory always, and PostgreSQL when
//! `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL` names a server (`eval "$(bash
//! .ci/postgres.sh)"` starts one); each test gets a fresh database there.
//! With `CONTEXT_ASSEMBLER_REQUIRE_POSTGRES=1` a missing URL fails the
//! suite instead of skipping PostgreSQL.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, postgres};
use context_assembler::memory::model::{MemoryBody, MemoryId, NewMemory, Observation, SessionSummary};
use context_assembler::memory::store::{
    Backend, Candidate, DEFAULT_STATEMENT_TIMEOUT, ForgetFilter, Forgotten, KEY_TTL, ListQuery, MemoryStore,
    Page, RecallQuery, RetainBatch, Retained, Retention,
};
use sqlx::Connection;
use tempfile::TempDir;

/// A write time well after the epoch, so cutoffs stay positive.
const T0: i64 = 1_700_000_000_000;

const NO_LIMITS: Retention = Retention {
    max_per_subject: 0,
    max_age: None,
    max_total_bytes: 0,
};

/// One open store under test.
struct TestStore {
    name: &'static str,
    backend: Backend,
    store: MemoryStore,
    /// Keeps the SQLite file alive for the test.
    _dir: Option<TempDir>,
}

/// Every backend to run against, each empty.
async fn backends() -> Vec<TestStore> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Backend::Sqlite {
        path: dir.path().join("memories.db"),
    };
    let mut out = vec![TestStore {
        name: "sqlite",
        store: open(&sqlite).await,
        backend: sqlite,
        _dir: Some(dir),
    }];
    if let Some(url) = postgres::url() {
        let postgres = Backend::Postgres {
            url: postgres::fresh_database(&url).await,
            max_connections: 4,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        };
        out.push(TestStore {
            name: "postgres",
            store: open(&postgres).await,
            backend: postgres,
            _dir: None,
        });
    }
    out
}

async fn open(backend: &Backend) -> MemoryStore {
    MemoryStore::open(backend).await.unwrap().unwrap()
}

fn observation(kind: &str, title: &str, text: &str) -> MemoryBody {
    MemoryBody::Observation(Observation {
        kind: kind.into(),
        title: title.into(),
        text: text.into(),
        ..Observation::default()
    })
}

fn memory(subject: &str, content: MemoryBody, scopes: &[&str]) -> NewMemory {
    NewMemory {
        subject: subject.into(),
        content,
        required_scopes: scopes.iter().map(|s| s.to_string()).collect(),
        request_id: "req-1".into(),
        turn: 1,
    }
}

fn note(subject: &str, text: &str) -> NewMemory {
    memory(subject, observation("discovery", "", text), &[])
}

fn batch(
    key: &str,
    subject: &str,
    memories: Vec<NewMemory>,
    now_ms: i64,
    retention: Retention,
) -> RetainBatch {
    RetainBatch {
        key: key.into(),
        subject: subject.into(),
        memories,
        now_ms,
        retention,
    }
}

/// Retains `memories` under a key of their own, without limits.
async fn retain(store: &MemoryStore, key: &str, subject: &str, memories: Vec<NewMemory>) -> Vec<MemoryId> {
    store
        .retain(&batch(key, subject, memories, T0, NO_LIMITS))
        .await
        .unwrap()
        .ids
}

/// Every scope the suite's memories require.
const ALL_SCOPES: [&str; 5] = ["repo:a", "team:x", "eng", "hr", "ops"];

/// A page of `subject`'s memories for a principal holding `scopes`.
async fn list_as(
    store: &MemoryStore,
    subject: &str,
    scopes: &[&str],
    limit: u32,
    before: Option<i64>,
    max_bytes: u64,
) -> Page {
    let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
    store
        .list(&ListQuery {
            subject,
            scopes: &scopes,
            limit,
            before,
            max_bytes,
        })
        .await
        .unwrap()
}

/// A page of `subject`'s memories for a principal holding every scope.
async fn list(store: &MemoryStore, subject: &str, limit: u32, before: Option<i64>, max_bytes: u64) -> Page {
    list_as(store, subject, &ALL_SCOPES, limit, before, max_bytes).await
}

/// Every id of `subject`, newest first.
async fn ids_of(store: &MemoryStore, subject: &str) -> Vec<MemoryId> {
    let page = list(store, subject, 1000, None, u64::MAX).await;
    assert_eq!(page.next, None);
    page.memories.iter().map(|m| m.id.clone()).collect()
}

fn query(subject: &str, terms: &[&str], scopes: &[&str], types: &[&str]) -> RecallQuery {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    RecallQuery {
        subject: subject.into(),
        terms: strings(terms),
        scopes: strings(scopes),
        types: strings(types),
        limit: 50,
        max_bytes: u64::MAX,
    }
}

fn id_set(candidates: &[Candidate]) -> HashSet<MemoryId> {
    candidates.iter().map(|c| c.id.clone()).collect()
}

fn set(ids: &[MemoryId]) -> HashSet<MemoryId> {
    ids.iter().cloned().collect()
}

#[tokio::test]
async fn retained_memories_list_newest_first_and_round_trip() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let mut detailed = Observation {
            kind: "bugfix".into(),
            title: "Fixed the token refresh race".into(),
            text: "Two refreshes raced on the session row.".into(),
            facts: vec!["refresh holds a row lock".into()],
            files_read: vec!["src/auth.rs".into()],
            files_modified: vec!["src/session.rs".into()],
        };
        let summary = SessionSummary {
            request: "Add JWT auth".into(),
            learned: "Sessions use cookies".into(),
            files_edited: vec!["src/auth.rs".into()],
            ..SessionSummary::default()
        };
        let memories = vec![
            NewMemory {
                subject: "alice".into(),
                content: MemoryBody::Observation(detailed.clone()),
                required_scopes: vec!["repo:a".into(), "team:x".into()],
                request_id: "req-7".into(),
                turn: 3,
            },
            NewMemory {
                subject: "alice".into(),
                content: MemoryBody::Summary(summary),
                required_scopes: vec![],
                request_id: "req-7".into(),
                turn: 4,
            },
            {
                detailed.title = String::new();
                NewMemory {
                    subject: "alice".into(),
                    content: MemoryBody::Observation(detailed),
                    required_scopes: vec!["repo:a".into()],
                    request_id: "req-8".into(),
                    turn: 0,
                }
            },
        ];
        let retained = store
            .retain(&batch("k1", "alice", memories.clone(), T0, NO_LIMITS))
            .await
            .unwrap();
        assert!(!retained.replayed, "{name}");
        assert_eq!(retained.evicted, 0, "{name}");
        assert_eq!(retained.ids.len(), 3, "{name}");
        assert_eq!(set(&retained.ids).len(), 3, "{name}: distinct ids");

        let page = list(store, "alice", 10, None, u64::MAX).await;
        assert_eq!(page.next, None, "{name}");
        let listed: Vec<MemoryId> = page.memories.iter().map(|m| m.id.clone()).collect();
        let newest_first: Vec<MemoryId> = retained.ids.iter().rev().cloned().collect();
        assert_eq!(listed, newest_first, "{name}");
        for (stored, written) in page.memories.iter().zip(memories.iter().rev()) {
            assert_eq!(&stored.memory, written, "{name}: memory {}", stored.id);
            assert_eq!(stored.created_at_ms, T0, "{name}");
        }
        assert!(
            list(store, "bob", 10, None, u64::MAX).await.memories.is_empty(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_repeated_key_replays_the_first_ids_and_stores_nothing() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let first = batch(
            "key",
            "alice",
            vec![note("alice", "one"), note("alice", "two")],
            T0,
            NO_LIMITS,
        );
        let original = store.retain(&first).await.unwrap();
        let again = batch("key", "alice", vec![note("alice", "three")], T0 + 5, NO_LIMITS);
        let replay = store.retain(&again).await.unwrap();
        assert_eq!(
            replay,
            Retained {
                ids: original.ids.clone(),
                replayed: true,
                evicted: 0,
                evicted_for_space: 0,
            },
            "{name}"
        );
        let mut listed = ids_of(store, "alice").await;
        listed.reverse();
        assert_eq!(listed, original.ids, "{name}: nothing stored twice");
        // Keys are per subject: another subject's call with the same key is
        // its own, and never sees alice's ids.
        let bob = store
            .retain(&batch("key", "bob", vec![note("bob", "four")], T0 + 9, NO_LIMITS))
            .await
            .unwrap();
        assert!(!bob.replayed, "{name}");
        assert_eq!(ids_of(store, "bob").await, bob.ids, "{name}");
    }
}

#[tokio::test]
async fn keys_older_than_the_ttl_are_forgotten() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        store
            .retain(&batch("old", "alice", vec![note("alice", "one")], T0, NO_LIMITS))
            .await
            .unwrap();
        let later = T0 + i64::try_from(KEY_TTL.as_millis()).unwrap() + 1;
        store
            .retain(&batch(
                "new",
                "alice",
                vec![note("alice", "two")],
                later,
                NO_LIMITS,
            ))
            .await
            .unwrap();
        let retry = store
            .retain(&batch(
                "old",
                "alice",
                vec![note("alice", "one")],
                later,
                NO_LIMITS,
            ))
            .await;
        assert!(
            !retry.unwrap().replayed,
            "{name}: the expired key was deleted by the later write"
        );
        assert_eq!(ids_of(store, "alice").await.len(), 3, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_one_key_store_the_batch_once() {
    const WRITERS: usize = 8;
    for b in backends().await {
        let name = b.name;
        let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|_| {
                let (store, barrier) = (b.store.clone(), barrier.clone());
                tokio::spawn(async move {
                    let memories = vec![note("alice", "raced one"), note("alice", "raced two")];
                    barrier.wait().await;
                    store
                        .retain(&batch("same", "alice", memories, T0, NO_LIMITS))
                        .await
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap().unwrap_or_else(|e| panic!("{name}: {e}")));
        }
        assert_eq!(
            results.iter().filter(|r| !r.replayed).count(),
            1,
            "{name}: {results:?}"
        );
        assert!(
            results.iter().all(|r| r.ids == results[0].ids),
            "{name}: {results:?}"
        );
        assert_eq!(results[0].ids.len(), 2, "{name}");
        assert_eq!(
            set(&ids_of(&b.store, "alice").await),
            set(&results[0].ids),
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_subject_keep_the_count_limit() {
    const WRITERS: usize = 8;
    let retention = Retention {
        max_per_subject: 5,
        max_age: None,
        max_total_bytes: 0,
    };
    for b in backends().await {
        let name = b.name;
        let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (store, barrier) = (b.store.clone(), barrier.clone());
                tokio::spawn(async move {
                    let memories = vec![note("alice", "first"), note("alice", "second")];
                    barrier.wait().await;
                    store
                        .retain(&batch(&format!("k{i}"), "alice", memories, T0, retention))
                        .await
                })
            })
            .collect();
        let mut evicted = 0;
        for task in tasks {
            evicted += task
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .evicted;
        }
        assert_eq!(ids_of(&b.store, "alice").await.len(), 5, "{name}");
        assert_eq!(evicted, 2 * WRITERS as u64 - 5, "{name}");
    }
}

#[tokio::test]
async fn recall_never_returns_a_memory_whose_scopes_the_principal_lacks() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let text = observation("decision", "", "Deploy with blue green rollout.");
        let a = &retain(store, "a", "alice", vec![memory("alice", text.clone(), &["a"])]).await[0];
        let ab = &retain(
            store,
            "ab",
            "alice",
            vec![memory("alice", text.clone(), &["a", "b"])],
        )
        .await[0];
        let open = &retain(store, "open", "alice", vec![memory("alice", text, &[])]).await[0];
        for terms in [&[][..], &["deploy"][..]] {
            for (scopes, visible) in [
                (&[][..], vec![open.clone()]),
                (&["b"][..], vec![open.clone()]),
                (&["a"][..], vec![a.clone(), open.clone()]),
                (&["b", "a"][..], vec![a.clone(), ab.clone(), open.clone()]),
                (&["a", "b", "c"][..], vec![a.clone(), ab.clone(), open.clone()]),
            ] {
                let found = store.recall(&query("alice", terms, scopes, &[])).await.unwrap();
                assert_eq!(
                    id_set(&found),
                    set(&visible),
                    "{name}: terms {terms:?}, scopes {scopes:?}"
                );
                if !terms.is_empty() {
                    assert!(
                        found.iter().all(|c| c.relevance > 0.0),
                        "{name}: all match: {found:?}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn recall_ranks_matches_with_stemming_within_the_subject() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let refresh = observation("bugfix", "Token refresh", "We refresh the JWT every hour.");
        let other = observation("decision", "Database", "Moved the sessions to postgres.");
        let ids = retain(
            store,
            "k",
            "alice",
            vec![memory("alice", refresh.clone(), &[]), memory("alice", other, &[])],
        )
        .await;
        let (matching, recent) = (ids[0].clone(), ids[1].clone());
        let bobs = retain(store, "b", "bob", vec![memory("bob", refresh, &[])]).await;

        let found = store
            .recall(&query("alice", &["refreshing"], &[], &[]))
            .await
            .unwrap();
        assert_eq!(
            id_set(&found),
            set(&[matching.clone(), recent.clone()]),
            "{name}: {found:?}"
        );
        assert_eq!(found[0].id, matching, "{name}: the match comes first");
        assert!(found[0].relevance > 0.0, "{name}: {found:?}");
        assert_eq!(found[0].title, "Token refresh", "{name}");
        assert_eq!(found[0].body, "We refresh the JWT every hour.", "{name}");
        assert_eq!(found[0].memory_type, "bugfix", "{name}");
        assert_eq!(found[0].created_at_ms, T0, "{name}");
        let not_matching = found.iter().find(|c| c.id == recent).unwrap();
        assert_eq!(not_matching.relevance, 0.0, "{name}");

        let found = store
            .recall(&query("alice", &["jwt", "nothing"], &[], &[]))
            .await
            .unwrap();
        assert!(
            found.iter().any(|c| c.id == matching && c.relevance > 0.0),
            "{name}: {found:?}"
        );

        let found = store.recall(&query("bob", &["refresh"], &[], &[])).await.unwrap();
        assert_eq!(id_set(&found), set(&bobs), "{name}: only bob's own memory");

        // Words the backend drops (stop words) are not an error: recency
        // still answers.
        let found = store
            .recall(&query("alice", &["the", "a"], &[], &[]))
            .await
            .unwrap();
        assert_eq!(id_set(&found), set(&ids), "{name}");

        let mut limited = query("alice", &["refresh"], &[], &[]);
        limited.limit = 1;
        let found = store.recall(&limited).await.unwrap();
        assert_eq!(
            id_set(&found),
            set(&[matching, recent]),
            "{name}: one match and one newest"
        );
        limited.limit = 0;
        assert!(store.recall(&limited).await.unwrap().is_empty(), "{name}");
    }
}

#[tokio::test]
async fn recall_keeps_only_the_requested_types() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let summary = MemoryBody::Summary(SessionSummary {
            request: "Cache the schema".into(),
            ..SessionSummary::default()
        });
        let ids = retain(
            store,
            "k",
            "alice",
            vec![
                memory(
                    "alice",
                    observation("decision", "", "Cache the schema in redis."),
                    &[],
                ),
                memory(
                    "alice",
                    observation("bugfix", "", "The schema cache leaked."),
                    &[],
                ),
                memory("alice", summary, &[]),
            ],
        )
        .await;
        for terms in [&[][..], &["schema"][..]] {
            for (types, expected) in [
                (&["bugfix"][..], vec![ids[1].clone()]),
                (&["decision", "summary"][..], vec![ids[0].clone(), ids[2].clone()]),
                (&["feature"][..], vec![]),
                (&[][..], ids.clone()),
            ] {
                let found = store.recall(&query("alice", terms, &[], types)).await.unwrap();
                assert_eq!(
                    id_set(&found),
                    set(&expected),
                    "{name}: terms {terms:?}, types {types:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_count_limit_keeps_the_newest_memories_of_the_subject() {
    let retention = Retention {
        max_per_subject: 3,
        max_age: None,
        max_total_bytes: 0,
    };
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let bobs = retain(store, "bob", "bob", vec![note("bob", "b1"), note("bob", "b2")]).await;
        let mut ids = Vec::new();
        let mut evicted = Vec::new();
        for i in 0..5 {
            let b = batch(
                &format!("k{i}"),
                "alice",
                vec![note("alice", "x")],
                T0 + i,
                retention,
            );
            let retained = store.retain(&b).await.unwrap();
            ids.extend(retained.ids);
            evicted.push(retained.evicted);
        }
        assert_eq!(evicted, [0, 0, 0, 1, 1], "{name}");
        let newest: Vec<MemoryId> = ids[2..].iter().rev().cloned().collect();
        assert_eq!(ids_of(store, "alice").await, newest, "{name}");
        assert_eq!(
            set(&ids_of(store, "bob").await),
            set(&bobs),
            "{name}: bob untouched"
        );
    }
}

#[tokio::test]
async fn the_age_limit_evicts_old_memories_on_a_later_write() {
    let retention = Retention {
        max_per_subject: 0,
        max_age: Some(Duration::from_secs(1)),
        max_total_bytes: 0,
    };
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let bobs = retain(store, "bob", "bob", vec![note("bob", "old")]).await;
        let old = store
            .retain(&batch("k1", "alice", vec![note("alice", "o")], T0, retention))
            .await
            .unwrap();
        let kept = store
            .retain(&batch(
                "k2",
                "alice",
                vec![note("alice", "k")],
                T0 + 500,
                retention,
            ))
            .await;
        assert_eq!(kept.as_ref().unwrap().evicted, 0, "{name}");
        let last = store
            .retain(&batch(
                "k3",
                "alice",
                vec![note("alice", "n")],
                T0 + 1200,
                retention,
            ))
            .await;
        assert_eq!(last.as_ref().unwrap().evicted, 1, "{name}");
        let alive = set(&ids_of(store, "alice").await);
        assert!(!alive.contains(&old.ids[0]), "{name}");
        assert_eq!(alive.len(), 2, "{name}");
        assert_eq!(ids_of(store, "bob").await, bobs, "{name}: bob untouched");
    }
}

#[tokio::test]
async fn forget_deletes_by_ids_subject_and_type() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let ids = retain(
            store,
            "k",
            "alice",
            vec![
                memory("alice", observation("decision", "", "d1"), &[]),
                memory("alice", observation("decision", "", "d2"), &[]),
                memory("alice", observation("bugfix", "", "b1"), &[]),
                memory("alice", observation("bugfix", "", "b2"), &[]),
            ],
        )
        .await;
        let bobs = retain(
            store,
            "bob",
            "bob",
            vec![memory("bob", observation("bugfix", "", "b"), &[])],
        )
        .await;

        let unknown = MemoryId::parse("0123456789abcdef0123456789abcdef").unwrap();
        let forgotten = store
            .forget(&ForgetFilter::Ids("alice".into(), vec![ids[0].clone(), unknown]))
            .await
            .unwrap();
        assert_eq!(
            forgotten,
            Forgotten {
                deleted: 1,
                not_found: 1
            },
            "{name}"
        );
        assert_eq!(set(&ids_of(store, "alice").await), set(&ids[1..]), "{name}");

        let by_type = ForgetFilter::SubjectType("alice".into(), "bugfix".into());
        assert_eq!(store.forget(&by_type).await.unwrap().deleted, 2, "{name}");
        assert_eq!(ids_of(store, "alice").await, vec![ids[1].clone()], "{name}");

        assert_eq!(
            store
                .forget(&ForgetFilter::Subject("alice".into()))
                .await
                .unwrap()
                .deleted,
            1,
            "{name}"
        );
        assert!(ids_of(store, "alice").await.is_empty(), "{name}");
        assert_eq!(ids_of(store, "bob").await, bobs, "{name}: bob untouched");

        // The subject's keys went with it: the same key stores again.
        let again = store
            .retain(&batch("k", "alice", vec![note("alice", "new")], T0, NO_LIMITS))
            .await;
        assert!(!again.unwrap().replayed, "{name}");
        assert_eq!(
            store
                .forget(&ForgetFilter::Ids("alice".into(), vec![]))
                .await
                .unwrap(),
            Forgotten::default(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn list_pages_through_every_memory_once() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let memories = (0..25).map(|i| note("alice", &format!("memory {i}"))).collect();
        let ids = retain(store, "k", "alice", memories).await;
        let mut seen = Vec::new();
        let mut sizes = Vec::new();
        let mut before = None;
        loop {
            let page = list(store, "alice", 10, before, u64::MAX).await;
            sizes.push(page.memories.len());
            seen.extend(page.memories.iter().map(|m| m.id.clone()));
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        assert_eq!(sizes, [10, 10, 5], "{name}");
        let newest_first: Vec<MemoryId> = ids.iter().rev().cloned().collect();
        assert_eq!(seen, newest_first, "{name}: every memory once, newest first");
    }
}

#[tokio::test]
async fn a_reopened_store_keeps_its_memories_and_keys() {
    for b in backends().await {
        let name = b.name;
        let first = batch("k", "alice", vec![note("alice", "durable")], T0, NO_LIMITS);
        let retained = b.store.retain(&first).await.unwrap();
        b.store.close().await;

        let reopened = open(&b.backend).await;
        let page = list(&reopened, "alice", 10, None, u64::MAX).await;
        assert_eq!(page.memories.len(), 1, "{name}");
        assert_eq!(page.memories[0].memory, first.memories[0], "{name}");
        let replay = reopened.retain(&first).await.unwrap();
        assert!(replay.replayed, "{name}");
        assert_eq!(replay.ids, retained.ids, "{name}");
        reopened.close().await;
    }
}

/// Exhaustively over the subsets of three scopes: a memory is a candidate
/// exactly when every scope it requires is among the principal's, with and
/// without search terms, whatever the scopes' order.
#[tokio::test]
async fn recall_sees_exactly_the_memories_whose_scopes_the_principal_holds() {
    const SCOPES: [&str; 3] = ["eng", "hr", "ops"];
    let subset = |mask: usize| -> Vec<&str> {
        (0..3)
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| SCOPES[i])
            .collect()
    };
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let mut ids = Vec::new();
        for mask in 0..8 {
            let text = observation("decision", "", "Rotate the signing keys weekly.");
            let required = subset(mask);
            ids.push(
                retain(
                    store,
                    &format!("m{mask}"),
                    "carol",
                    vec![memory("carol", text, &required)],
                )
                .await[0]
                    .clone(),
            );
        }
        for held in 0..8 {
            let mut scopes = subset(held);
            scopes.reverse();
            let visible: Vec<MemoryId> = (0..8)
                .filter(|&m| m & !held == 0)
                .map(|m| ids[m].clone())
                .collect();
            for terms in [&[][..], &["rotate", "keys"][..]] {
                let found = store.recall(&query("carol", terms, &scopes, &[])).await.unwrap();
                assert_eq!(
                    id_set(&found),
                    set(&visible),
                    "{name}: scopes {scopes:?}, terms {terms:?}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_opening_one_new_sqlite_file_at_once_both_open() {
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let backend = Backend::Sqlite {
            path: dir.path().join("memories.db"),
        };
        let (a, b) = tokio::join!(MemoryStore::open(&backend), MemoryStore::open(&backend));
        let (a, b) = (a.unwrap().unwrap(), b.unwrap().unwrap());
        let ids = retain(&a, "k", "alice", vec![note("alice", "one")]).await;
        assert_eq!(ids_of(&b, "alice").await, ids, "round {round}");
        a.close().await;
        b.close().await;
    }
}

/// An error of a real SQLite connection to a fresh `file`, set up by
/// `setup` (run on a first connection) and caused by `sql` on a second one
/// opened with `options`.
async fn sqlite_error(
    file: &std::path::Path,
    setup: &[&str],
    options: impl FnOnce(sqlx::sqlite::SqliteConnectOptions) -> sqlx::sqlite::SqliteConnectOptions,
    sql: &str,
) -> sqlx::Error {
    let base = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(file)
        .create_if_missing(true);
    let mut first = sqlx::SqliteConnection::connect_with(&base).await.unwrap();
    sqlx::query("CREATE TABLE t (x BLOB)")
        .execute(&mut first)
        .await
        .unwrap();
    for s in setup {
        sqlx::query(s).execute(&mut first).await.unwrap();
    }
    let mut second = sqlx::SqliteConnection::connect_with(&options(base))
        .await
        .unwrap();
    sqlx::query(sql).execute(&mut second).await.unwrap_err()
}

#[tokio::test]
async fn disk_full_read_only_and_busy_databases_are_unavailable_not_failures() {
    use context_assembler::memory::store::StoreError;
    let dir = tempfile::tempdir().unwrap();
    let full = sqlite_error(
        &dir.path().join("full.db"),
        &[],
        |o| o.pragma("max_page_count", "3"),
        "INSERT INTO t VALUES (zeroblob(100000))",
    )
    .await;
    let read_only = sqlite_error(
        &dir.path().join("ro.db"),
        &[],
        |o| o.read_only(true),
        "INSERT INTO t VALUES (1)",
    )
    .await;
    let busy = sqlite_error(
        &dir.path().join("busy.db"),
        &["BEGIN EXCLUSIVE"],
        |o| o.busy_timeout(Duration::ZERO),
        "INSERT INTO t VALUES (1)",
    )
    .await;
    for (what, e) in [("full", full), ("read-only", read_only), ("busy", busy)] {
        let shown = e.to_string();
        assert!(
            matches!(StoreError::from(e), StoreError::Unavailable(_)),
            "{what}: {shown}"
        );
    }
    // A broken query stays a failure.
    let broken = sqlite_error(
        &dir.path().join("broken.db"),
        &[],
        |o| o,
        "INSERT INTO nowhere VALUES (1)",
    )
    .await;
    assert!(matches!(StoreError::from(broken), StoreError::Query(_)));
}

#[tokio::test]
async fn the_store_bound_evicts_the_oldest_memories_of_any_subject() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let text = |i: usize| format!("note {i} {}", "word ".repeat(200));
        let mut alice = Vec::new();
        for i in 0..10 {
            alice.extend(retain(store, &format!("a{i}"), "alice", vec![note("alice", &text(i))]).await);
        }
        let full = store.total_bytes().await.unwrap();
        assert!(full > 10 * 1000, "{name}: {full} bytes");
        // Bob's write brings the store over a bound of a third of that.
        let bound = full / 3;
        let bounded = Retention {
            max_total_bytes: bound,
            ..NO_LIMITS
        };
        let out = store
            .retain(&batch("b", "bob", vec![note("bob", &text(99))], T0, bounded))
            .await
            .unwrap();
        let left = ids_of(store, "alice").await;
        assert!(store.total_bytes().await.unwrap() <= bound, "{name}");
        assert!(!left.is_empty() && left.len() < 10, "{name}: {left:?}");
        // The oldest went first: what is left is alice's newest.
        let mut newest: Vec<MemoryId> = alice[10 - left.len()..].to_vec();
        newest.reverse();
        assert_eq!(left, newest, "{name}");
        assert_eq!(out.evicted_for_space, (10 - left.len()) as u64, "{name}");
        assert_eq!(ids_of(store, "bob").await, out.ids, "{name}");
        // Forget gives the bytes back.
        store
            .forget(&ForgetFilter::Subject("alice".into()))
            .await
            .unwrap();
        store.forget(&ForgetFilter::Subject("bob".into())).await.unwrap();
        assert_eq!(store.total_bytes().await.unwrap(), 0, "{name}");
    }
}

#[tokio::test]
async fn a_postgres_statement_past_its_timeout_is_cancelled_and_unavailable() {
    use context_assembler::memory::store::StoreError;
    let Some(url) = postgres::url() else {
        return;
    };
    let url = postgres::fresh_database(&url).await;
    let store = open(&Backend::Postgres {
        url: url.clone(),
        max_connections: 2,
        statement_timeout: Duration::from_millis(200),
    })
    .await;
    // Another client holds the table: every statement on it waits.
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = store.recall(&query("alice", &["x"], &[], &[])).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    holder.close().await.unwrap();
    store.recall(&query("alice", &["x"], &[], &[])).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_stalled_store_returns_by_its_deadline() {
    use context_assembler::memory::{Memories, MemorySettings, RecallSpec};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memories.db");
    let store = open(&Backend::Sqlite { path: path.clone() }).await;
    retain(&store, "k", "alice", vec![note("alice", "one")]).await;
    let memories = Arc::new(Memories::new(Some(store), MemorySettings::default()));
    let stall = common::SqliteStall::hold(&path);
    let spec = RecallSpec {
        subject: "alice".into(),
        query: "one".into(),
        ..RecallSpec::default()
    };
    let stuck = {
        let memories = memories.clone();
        tokio::spawn(async move { memories.recall(&spec, &[], T0).await })
    };
    // The recall takes a connection at once; the stall holds it for ~10 s.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!stuck.is_finished());
    let started = std::time::Instant::now();
    memories.close_within(Duration::from_millis(200)).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(stall);
    let _ = stuck.await;
}

/// Regression (issue 16, "Memory tenancy"): Forget by ids names its subject,
/// and an id of another subject's memory is not found, never deleted.
#[tokio::test]
async fn forget_by_ids_never_touches_another_subjects_memories() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let alice = retain(
            store,
            "a",
            "alice",
            vec![note("alice", "one"), note("alice", "two")],
        )
        .await;
        let bob = retain(store, "b", "bob", vec![note("bob", "three")]).await;

        // Bob's id under alice, and one of alice's twice.
        let ids = vec![bob[0].clone(), alice[0].clone(), alice[0].clone()];
        let forgotten = store
            .forget(&ForgetFilter::Ids("alice".into(), ids))
            .await
            .unwrap();
        assert_eq!(
            forgotten,
            Forgotten {
                deleted: 1,
                not_found: 1
            },
            "{name}"
        );
        assert_eq!(ids_of(store, "bob").await, bob, "{name}: bob's memory stays");
        assert_eq!(ids_of(store, "alice").await, vec![alice[1].clone()], "{name}");

        let forgotten = store
            .forget(&ForgetFilter::Ids("bob".into(), vec![alice[1].clone()]))
            .await
            .unwrap();
        assert_eq!(
            forgotten,
            Forgotten {
                deleted: 0,
                not_found: 1
            },
            "{name}"
        );
        assert_eq!(ids_of(store, "alice").await, vec![alice[1].clone()], "{name}");
    }
}

/// Regression (issue 16): a list shows a memory only to a principal holding
/// every scope it requires, as recall does; the others are counted, and a
/// page covers at most `limit` memories of the subject, shown or hidden, so
/// hidden memories never make a page read more.
#[tokio::test]
async fn list_shows_only_what_the_principal_may_see_and_counts_the_rest() {
    const N: usize = 30;
    let required = |i: usize| -> &'static [&'static str] {
        match i % 3 {
            0 => &[],
            1 => &["eng"],
            _ => &["eng", "hr"],
        }
    };
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let mut ids = Vec::new();
        for i in 0..N {
            let m = memory(
                "alice",
                observation("decision", "", &format!("memory {i}")),
                required(i),
            );
            ids.extend(retain(store, &format!("k{i}"), "alice", vec![m]).await);
        }
        type Case = (&'static [&'static str], fn(usize) -> bool);
        let cases: [Case; 4] = [
            (&[], |i| i % 3 == 0),
            (&["eng"], |i| i % 3 != 2),
            (&["hr", "eng"], |_| true),
            (&["hr"], |i| i % 3 == 0),
        ];
        for (scopes, visible) in cases {
            let expected: Vec<MemoryId> = (0..N)
                .rev()
                .filter(|&i| visible(i))
                .map(|i| ids[i].clone())
                .collect();
            for (limit, max_bytes) in [
                (1, u64::MAX),
                (4, u64::MAX),
                (7, u64::MAX),
                (1000, u64::MAX),
                (4, 1),
            ] {
                let (mut seen, mut hidden, mut pages) = (Vec::new(), 0, 0);
                let mut before = None;
                loop {
                    let page = list_as(store, "alice", scopes, limit, before, max_bytes).await;
                    pages += 1;
                    let covered = page.memories.len() + page.hidden as usize;
                    assert!(covered <= limit as usize, "{name}: {covered} > {limit}");
                    if max_bytes == 1 {
                        assert!(page.memories.len() <= 1, "{name}: the byte bound holds");
                    }
                    for m in &page.memories {
                        assert!(
                            m.memory
                                .required_scopes
                                .iter()
                                .all(|s| scopes.contains(&s.as_str())),
                            "{name}: {scopes:?} listed {:?}",
                            m.memory.required_scopes
                        );
                    }
                    seen.extend(page.memories.iter().map(|m| m.id.clone()));
                    hidden += page.hidden as usize;
                    match page.next {
                        Some(next) => before = Some(next),
                        None => break,
                    }
                    assert!(pages <= N + 1, "{name}: paging makes progress");
                }
                assert_eq!(
                    seen, expected,
                    "{name}: {scopes:?}, limit {limit}: each visible once"
                );
                assert_eq!(hidden, N - expected.len(), "{name}: {scopes:?}, limit {limit}");
                if max_bytes == u64::MAX {
                    assert_eq!(
                        pages,
                        N.div_ceil(limit as usize).max(1),
                        "{name}: {scopes:?}, {limit}"
                    );
                }
            }
        }
    }
}

/// Regression (issue 16): ids are not counters a caller can guess: two
/// memories written one after the other have ids that are not integers and
/// differ in about half of their 128 bits.
#[tokio::test]
async fn memory_ids_are_random_not_counters() {
    for b in backends().await {
        let (name, store) = (b.name, &b.store);
        let first = retain(store, "k1", "alice", vec![note("alice", "one")]).await;
        let second = retain(store, "k2", "alice", vec![note("alice", "two")]).await;
        let bits = |id: &MemoryId| u128::from_str_radix(id.as_str(), 16).unwrap();
        for id in [&first[0], &second[0]] {
            assert_eq!(id.as_str().len(), 32, "{name}: {id}");
            assert!(id.as_str().parse::<i64>().is_err(), "{name}: {id}");
        }
        let differing = (bits(&first[0]) ^ bits(&second[0])).count_ones();
        assert!(
            differing >= 20,
            "{name}: {} and {} differ in {differing} bits",
            first[0],
            second[0]
        );
    }
}

/// The migrations of `backend` before memory ids were random, in a
/// directory sqlx reads them from.
fn migrations_before_tenancy(backend: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["0001_memories.sql", "0002_memory_bytes.sql"] {
        let from = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(backend)
            .join(file);
        std::fs::copy(from, dir.path().join(file)).unwrap();
    }
    dir
}

/// Checks a store opened on a database that held one memory (row id 1) of
/// alice and its retain key "old" from before the migration to random ids.
async fn check_migrated(name: &str, store: &MemoryStore) {
    let listed = ids_of(store, "alice").await;
    assert_eq!(listed.len(), 1, "{name}");
    let id = listed[0].clone();
    assert_eq!(
        MemoryId::parse(id.as_str()),
        Some(id.clone()),
        "{name}: a random id: {id}"
    );
    let replay = store
        .retain(&batch(
            "old",
            "alice",
            vec![note("alice", "again")],
            T0,
            NO_LIMITS,
        ))
        .await
        .unwrap();
    assert!(replay.replayed, "{name}");
    assert_eq!(replay.ids, vec![id.clone()], "{name}: the key answers the new id");
    let found = store
        .recall(&query("alice", &["migrated"], &[], &[]))
        .await
        .unwrap();
    assert_eq!(id_set(&found), set(std::slice::from_ref(&id)), "{name}: recall");
    let forgotten = store
        .forget(&ForgetFilter::Ids("alice".into(), vec![id]))
        .await
        .unwrap();
    assert_eq!(forgotten.deleted, 1, "{name}: the migrated row forgets by its id");
    assert!(ids_of(store, "alice").await.is_empty(), "{name}");
}

/// Regression (issue 16): rows written before ids were random get one when
/// the store migrates, and answer to it everywhere, Forget included.
#[tokio::test]
async fn a_row_from_before_random_ids_is_migrated_and_still_forgets() {
    let content = serde_json::to_string(&observation("decision", "Migrated", "A migrated memory.")).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let old = migrations_before_tenancy("sqlite");
    sqlx::migrate::Migrator::new(old.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO memories (subject, subject_key, memory_type, title, body, content, request_id, turn, \
         created_at_ms) VALUES ('alice', 'sold', 'decision', 'Migrated', 'A migrated memory.', ?1, 'r', 1, ?2)",
    )
    .bind(&content)
    .bind(T0)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO retain_keys (key, subject, ids, created_at_ms) VALUES ('old', 'alice', '[1]', ?1)",
    )
    .bind(T0)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let store = open(&Backend::Sqlite { path }).await;
    check_migrated("sqlite", &store).await;
    store.close().await;

    let Some(server) = postgres::url() else {
        return;
    };
    let url = postgres::fresh_database(&server).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let old = migrations_before_tenancy("postgres");
    sqlx::migrate::Migrator::new(old.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO memories (subject, memory_type, title, body, content, request_id, turn, created_at_ms) \
         VALUES ('alice', 'decision', 'Migrated', 'A migrated memory.', $1, 'r', 1, $2)",
    )
    .bind(&content)
    .bind(T0)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO retain_keys (key, subject, ids, created_at_ms) VALUES ('old', 'alice', '{1}', $1)",
    )
    .bind(T0)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let store = open(&Backend::Postgres {
        url,
        max_connections: 2,
        statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
    })
    .await;
    check_migrated("postgres", &store).await;
    store.close().await;
}

/// Regression (issue 16, "Forget means gone"): after a Forget, the raw bytes
/// of the SQLite file and of its WAL hold no trace of the forgotten memory,
/// whether its word was in the title or the body: not in the table (secure
/// delete), not in the full-text index (FTS5 secure-delete), not in old WAL
/// frames (a TRUNCATE checkpoint).
#[tokio::test]
async fn a_forgotten_word_is_nowhere_in_the_sqlite_files() {
    const WORD: &str = "zqxjvorpal";
    type Filter = fn(Vec<MemoryId>) -> ForgetFilter;
    let by_ids: Filter = |ids| ForgetFilter::Ids("alice".into(), ids);
    let by_subject: Filter = |_| ForgetFilter::Subject("alice".into());
    let cases: [(&str, MemoryBody, Filter); 3] = [
        (
            "title",
            observation(
                "decision",
                &format!("Chose {WORD} for caching"),
                "We picked a cache.",
            ),
            by_ids,
        ),
        (
            "body",
            observation(
                "decision",
                "Chose a cache",
                &format!("The {WORD} cache won the benchmark."),
            ),
            by_ids,
        ),
        (
            "body, subject-wide",
            observation(
                "decision",
                "Chose a cache",
                &format!("The {WORD} cache won the benchmark."),
            ),
            by_subject,
        ),
    ];
    for (place, content, filter) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memories.db");
        let store = open(&Backend::Sqlite { path: path.clone() }).await;
        // Memories that stay share pages and index segments with it.
        let kept = (0..20)
            .map(|i| note("bob", &format!("kept note {i} about caches")))
            .collect();
        retain(&store, "keep", "bob", kept).await;
        let ids = retain(&store, "k", "alice", vec![memory("alice", content, &[])]).await;
        let found = store.recall(&query("alice", &[WORD], &[], &[])).await.unwrap();
        assert_eq!(id_set(&found), set(&ids), "{place}: the word is indexed");
        let wal = dir.path().join("memories.db-wal");
        let holds = |file: &std::path::Path| {
            std::fs::read(file).is_ok_and(|bytes| bytes.windows(WORD.len()).any(|w| w == WORD.as_bytes()))
        };
        assert!(holds(&path) || holds(&wal), "{place}: the word was written");

        let forgotten = store.forget(&filter(ids)).await.unwrap();
        assert_eq!(forgotten.deleted, 1, "{place}");
        for file in [&path, &wal] {
            assert!(!holds(file), "{place}: {} still holds the word", file.display());
        }
        assert_eq!(ids_of(&store, "bob").await.len(), 20, "{place}: the rest stays");
        store.close().await;
    }
}
