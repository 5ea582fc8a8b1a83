//! A PostgreSQL store that goes down under load, and comes back: every call
//! answers UNAVAILABLE within its statement timeout (then at once, the
//! breaker open), nothing acknowledged is lost, and writes and recalls work
//! again once the server answers, without reopening the store. The outage
//! is a TCP proxy between the store and the server that cuts every
//! connection and refuses new ones. Needs `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::postgres;
use context_assembler::memory::model::{MemoryBody, MemoryId, NewMemory, Observation};
use context_assembler::memory::store::{
    Backend, ListQuery, MemoryStore, RecallQuery, RetainBatch, Retention, StoreError,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// The statement timeout of the store under test: the bound on every call
/// while the server is down (the pool's wait for a connection is capped by
/// it too).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);
/// What a call may take beyond the statement timeout (scheduling on a
/// shared machine): far under the 10 s the pool waited before.
const SLACK: Duration = Duration::from_secs(2);

/// `url` with its server's port replaced by `port` (the proxy's).
fn via_port(url: &str, port: u16) -> String {
    let start = url.find("://").unwrap() + 3;
    let at = url[start..].find('@').map_or(start, |i| start + i + 1);
    let end = url[at..].find(['/', '?']).map_or(url.len(), |i| at + i);
    let host = &url[at..end];
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    format!("{}{host}:{port}{}", &url[..at], &url[end..])
}

/// The server's address in `url`.
fn server_addr(url: &str) -> String {
    let rest = &url[url.find("://").unwrap() + 3..];
    let at = rest.find('@').map_or(0, |i| i + 1);
    let end = rest[at..].find(['/', '?']).map_or(rest.len(), |i| at + i);
    rest[at..end].to_owned()
}

/// How the server is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outage {
    /// Nothing listens: connections are refused (a stopped server).
    Refused,
    /// Connections are accepted and closed at once (a proxy or a balancer in
    /// front of a server that is down).
    Reset,
}

/// A TCP proxy to `target` that can be cut: every connection is closed, and
/// new ones are refused or reset, as `outage` says.
struct Proxy {
    port: u16,
    target: String,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<tokio::task::JoinSet<()>>>,
    accepting: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Proxy {
            port,
            target,
            up: Arc::new(AtomicBool::new(true)),
            links: Arc::new(Mutex::new(tokio::task::JoinSet::new())),
            accepting: Mutex::new(None),
        };
        proxy.accept(listener).await;
        proxy
    }

    async fn accept(&self, listener: TcpListener) {
        let (up, links, target) = (self.up.clone(), self.links.clone(), self.target.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                links.lock().await.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        *self.accepting.lock().await = Some(task);
    }

    async fn cut(&self, outage: Outage) {
        self.up.store(false, Ordering::SeqCst);
        if outage == Outage::Refused
            && let Some(task) = self.accepting.lock().await.take()
        {
            task.abort();
            let _ = task.await;
        }
        self.links.lock().await.abort_all();
    }

    async fn restore(&self) {
        if self.accepting.lock().await.is_none() {
            let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
            self.accept(listener).await;
        }
        self.up.store(true, Ordering::SeqCst);
    }
}

fn note(subject: &str, text: &str) -> NewMemory {
    NewMemory {
        subject: subject.into(),
        content: MemoryBody::Observation(Observation {
            kind: "discovery".into(),
            text: text.into(),
            ..Observation::default()
        }),
        required_scopes: Vec::new(),
        request_id: "req".into(),
        turn: 1,
    }
}

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// What the load saw.
#[derive(Default)]
struct Seen {
    /// Ids of every write the store acknowledged, by subject.
    acknowledged: Vec<(String, MemoryId)>,
    /// The longest a call made while the server was down took.
    slowest_down: Duration,
    /// Calls refused by the breaker, without reaching the server.
    refused_at_once: u32,
    /// Calls made while the server was down that failed.
    failed_down: u32,
    /// Calls that failed otherwise than UNAVAILABLE.
    other_errors: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_answers_unavailable_at_once_and_recovers() {
    outage(Outage::Refused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_behind_a_proxy_that_resets_answers_unavailable_at_once_and_recovers() {
    outage(Outage::Reset).await;
}

/// Four writers and recallers; the server down for 4 s as `kind` says, then
/// back.
async fn outage(kind: Outage) {
    let Some(url) = postgres::url() else { return };
    let proxy = Proxy::start(server_addr(&url)).await;
    let backend = Backend::Postgres {
        url: via_port(&postgres::fresh_database(&url).await, proxy.port),
        max_connections: 4,
        statement_timeout: STATEMENT_TIMEOUT,
    };
    let store = MemoryStore::open(&backend).await.unwrap().unwrap();
    let down = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let no_limits = Retention {
        max_per_subject: 0,
        max_age: None,
        max_total_bytes: 0,
    };
    let mut load = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let (store, down, stop, seen) = (store.clone(), down.clone(), stop.clone(), seen.clone());
        load.spawn(async move {
            let subject = format!("user-{worker}");
            let mut n = 0u32;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let was_down = down.load(Ordering::SeqCst);
                let started = Instant::now();
                let out = if n.is_multiple_of(3) {
                    let q = RecallQuery {
                        subject: subject.clone(),
                        terms: vec!["note".into()],
                        scopes: Vec::new(),
                        types: Vec::new(),
                        limit: 5,
                        max_bytes: 1 << 20,
                    };
                    store.recall(&q).await.map(|_| Vec::new())
                } else {
                    let batch = RetainBatch {
                        key: format!("{subject}-{n}"),
                        subject: subject.clone(),
                        memories: vec![note(&subject, &format!("note {n}"))],
                        now_ms: now_ms(),
                        retention: no_limits,
                    };
                    store.retain(&batch).await.map(|r| r.ids)
                };
                let took = started.elapsed();
                let mut s = seen.lock().await;
                if was_down {
                    // However it ends: a call made while the server is down
                    // may not wait for it to come back.
                    s.slowest_down = s.slowest_down.max(took);
                }
                match out {
                    Ok(ids) => s
                        .acknowledged
                        .extend(ids.into_iter().map(|id| (subject.clone(), id))),
                    Err(StoreError::Unavailable(e)) => {
                        if was_down {
                            s.failed_down += 1;
                            s.refused_at_once += u32::from(e.contains("breaker open"));
                        }
                    }
                    Err(e) => s.other_errors.push(e.to_string()),
                }
                drop(s);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    down.store(true, Ordering::SeqCst);
    proxy.cut(kind).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    down.store(false, Ordering::SeqCst);
    proxy.restore().await;

    // Writes and recalls work again, on the same store, within a few probes.
    let recovered = Instant::now();
    let batch = RetainBatch {
        key: "after".into(),
        subject: "user-0".into(),
        memories: vec![note("user-0", "after the outage")],
        now_ms: now_ms(),
        retention: no_limits,
    };
    let after = loop {
        match store.retain(&batch).await {
            Ok(r) => break r,
            Err(e) => {
                assert!(recovered.elapsed() < Duration::from_secs(20), "no recovery: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    stop.store(true, Ordering::SeqCst);
    while load.join_next().await.is_some() {}

    let s = seen.lock().await;
    assert!(s.other_errors.is_empty(), "{:?}", s.other_errors);
    assert!(s.failed_down > 0, "the outage was not seen");
    assert!(
        s.slowest_down <= STATEMENT_TIMEOUT + SLACK,
        "a call waited {:?} while the server was down",
        s.slowest_down
    );
    assert!(s.refused_at_once > 0, "the breaker never opened");
    assert!(!s.acknowledged.is_empty());
    // Nothing acknowledged is lost.
    let mut acknowledged = s.acknowledged.clone();
    acknowledged.extend(after.ids.into_iter().map(|id| ("user-0".to_owned(), id)));
    for worker in 0..4 {
        let subject = format!("user-{worker}");
        let page = store
            .list(&ListQuery {
                subject: &subject,
                scopes: &[],
                limit: 100_000,
                before: None,
                max_bytes: u64::MAX,
            })
            .await
            .unwrap();
        let stored: std::collections::HashSet<&MemoryId> = page.memories.iter().map(|m| &m.id).collect();
        for (who, id) in &acknowledged {
            if *who == subject {
                assert!(
                    stored.contains(id),
                    "{subject}: acknowledged {id:?} is not stored"
                );
            }
        }
    }
}
