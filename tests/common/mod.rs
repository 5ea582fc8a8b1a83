//! What the test binaries share: the real server in process on
//! 127.0.0.1:0 ([`TestServer`]: bind first, then serve, then connect;
//! readiness is awaited on the health Watch stream; its own runtime and
//! metrics registry), the metrics page read, and one turn per process for
//! the tests that measure the process itself.
//! The rest is in rooms: [`child`] (the binary as a child process), [`raw`]
//! (gRPC over a bare HTTP/2 connection), [`status`] (what a status names),
//! [`wire`] (protobuf bytes by hand), [`pki`] (certificates made in the
//! test), [`postgres`] (whether and where the PostgreSQL cases run), [`uds`]
//! (clients over a Unix socket).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod child;
pub mod pki;
pub mod postgres;
pub mod raw;
pub mod status;
pub mod uds;
pub mod wire;

// Each binary uses some of them.
#[allow(unused_imports)]
pub use child::{BIN, ChildServer, open_fds, proc_status};
#[allow(unused_imports)]
pub use raw::{HeldCall, RawAnswer, RawClient, UploadSender, frame, raw_unary, stalled_upload};
#[allow(unused_imports)]
pub use status::{overflow_detail, reason, violations};

/// Small model folders in the Hugging Face layout (the unit tests' own).
#[path = "../../src/tokens/hf/fixture.rs"]
pub mod hf_fixture;
/// A SQLite database stalled from another process (`examples/store_stall.rs`
/// includes the same file).
#[path = "../sqlite_stall/mod.rs"]
mod sqlite_stall;
#[allow(unused_imports)]
pub use sqlite_stall::SqliteStall;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use context_assembler::config::{ListenAddr, ServeArgs};
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use context_assembler::server::Bound;
use context_assembler::telemetry::metrics::Registry;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

pub struct TestServer {
    /// The gRPC address; unspecified (`0.0.0.0:0`) when gRPC listens on a
    /// Unix socket: dial [`Self::socket`] then.
    pub addr: SocketAddr,
    /// gRPC's socket path, when it listens on a Unix socket.
    pub socket: Option<PathBuf>,
    pub metrics: SocketAddr,
    /// The render node's address, when the args enable it on TCP.
    pub render: Option<SocketAddr>,
    /// The render node's socket path, when it listens on a Unix socket.
    pub render_socket: Option<PathBuf>,
    pub channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The server's own runtime (see [`server_runtime`]).
    runtime: Handle,
    /// Dropped with the server: the runtime's thread then drops it.
    _runtime_stop: oneshot::Sender<()>,
    /// Holds the server's SQLite memory file unless the args named one.
    _memory_dir: tempfile::TempDir,
    /// Its test's share of the process (see [`turn`]).
    _share: Option<Arc<Share>>,
}

impl TestServer {
    /// Loopback, ephemeral ports, a 16 MiB cache, defaults otherwise.
    pub fn args() -> ServeArgs {
        ServeArgs {
            listen: Some("127.0.0.1:0".to_owned()),
            metrics_listen: Some("127.0.0.1:0".to_owned()),
            cache_mib: Some(16),
            ..ServeArgs::default()
        }
    }

    pub async fn start() -> TestServer {
        TestServer::start_with(TestServer::args()).await
    }

    pub async fn start_with(mut args: ServeArgs) -> TestServer {
        let share = share().await;
        let memory_dir = tempfile::tempdir().unwrap();
        if args.memory_sqlite_path.is_none() {
            args.memory_sqlite_path = Some(memory_dir.path().join("memory.db"));
        }
        if args.config.is_none() {
            // Tests do not depend on the machine's speed: a recall on a busy
            // machine gets far more than the default 50 ms.
            let config = memory_dir.path().join("test.toml");
            std::fs::write(&config, "[memory]\nrecall_timeout_ms = 10000\n").unwrap();
            args.config = Some(config);
        }
        let config = args.validate().unwrap();
        let (runtime, runtime_stop) = server_runtime();
        let bound = runtime.spawn(Bound::bind(config)).await.unwrap().unwrap();
        let grpc = bound.grpc_listen().unwrap();
        let metrics = bound.metrics_addr().unwrap();
        let render = bound.render_listen();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = runtime.spawn(async move {
            bound
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        let channel = match &grpc {
            ListenAddr::Tcp(addr) => Channel::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap(),
            ListenAddr::Unix(path) => uds::channel(path).await.unwrap(),
        };
        let server = TestServer {
            addr: grpc.tcp().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            socket: grpc.unix_path().map(ToOwned::to_owned),
            metrics,
            render: render.as_ref().and_then(ListenAddr::tcp),
            render_socket: render.as_ref().and_then(|r| r.unix_path()).map(ToOwned::to_owned),
            channel,
            stop: Some(stop),
            task: Some(task),
            runtime,
            _runtime_stop: runtime_stop,
            _memory_dir: memory_dir,
            _share: share,
        };
        server.wait_serving().await;
        server
    }

    /// Tasks alive on the server's runtime.
    pub fn alive_tasks(&self) -> usize {
        self.runtime.metrics().num_alive_tasks()
    }

    pub fn client(&self) -> AssemblerClient<Channel> {
        AssemblerClient::new(self.channel.clone())
    }

    /// Opens an AssembleStream sending `requests`; the stream of answers.
    pub async fn stream(
        &self,
        requests: Vec<context_assembler::grpc::pb::AssembleRequest>,
    ) -> tonic::Streaming<context_assembler::grpc::pb::AssembleStreamResponse> {
        self.client()
            .assemble_stream(tokio_stream::iter(requests))
            .await
            .unwrap()
            .into_inner()
    }

    async fn wait_serving(&self) {
        let mut health = HealthClient::new(self.channel.clone());
        let mut stream = health
            .watch(HealthCheckRequest {
                service: "context_assembler.v1.Assembler".to_owned(),
            })
            .await
            .unwrap()
            .into_inner();
        while let Some(msg) = stream.message().await.unwrap() {
            if msg.status == ServingStatus::Serving as i32 {
                return;
            }
        }
        panic!("health stream ended before SERVING");
    }

    /// GET `path` from the metrics listener; returns (status line, body).
    pub async fn http_get(&self, path: &str) -> (String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((&buf, ""));
        (
            head.lines().next().unwrap_or_default().to_owned(),
            body.to_owned(),
        )
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

/// A runtime for one server, of the calling test's flavor and number of
/// workers, every thread of which records into a metrics registry of the
/// server's own: a counter on its page moves only by its own requests, so
/// tests read deltas of their own server without taking a turn. The runtime
/// lives on a thread of its own until the returned sender is dropped.
fn server_runtime() -> (Handle, oneshot::Sender<()>) {
    let registry = Registry::new().unwrap();
    let test = Handle::current();
    let mut builder = match test.runtime_flavor() {
        RuntimeFlavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(test.metrics().num_workers());
            builder
        }
    };
    let entering = registry.clone();
    let runtime = builder
        .enable_all()
        .thread_name("test-server")
        .on_thread_start(move || entering.enter_thread())
        .build()
        .unwrap();
    let handle = runtime.handle().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("test-server".to_owned())
        .spawn(move || {
            // A current-thread runtime runs its tasks here.
            registry.enter_thread();
            runtime.block_on(async {
                let _ = stopped.await;
            });
            runtime.shutdown_background();
        })
        .unwrap();
    (handle, stop)
}

/// A request with `items` distinct prose evidence items of about
/// `item_bytes` each: every item is a cache miss the first time.
pub fn heavy_request(
    seed: u64,
    items: usize,
    item_bytes: usize,
) -> context_assembler::grpc::pb::AssembleRequest {
    use context_assembler::grpc::pb;
    use context_assembler::workload::{Rng, prose};
    let mut rng = Rng::new(seed);
    pb::AssembleRequest {
        request_id: format!("heavy-{seed}"),
        model: "gpt-4o".to_owned(),
        blocks: vec![pb::Block {
            name: "evidence".to_owned(),
            kind: pb::BlockKind::Evidence.into(),
            items: (0..items)
                .map(|i| pb::Item {
                    id: format!("e{i}"),
                    content: prose(&mut rng, item_bytes),
                    score: 1.0 / (1.0 + i as f64),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        query: "What matters here?".to_owned(),
        ..Default::default()
    }
}

/// The value of the first series `name` whose labels include every `labels`
/// pair.
pub use context_assembler::telemetry::exposition::value as metric;

/// The value of a series that must be on `page` (a gauge, or a counter
/// already incremented); panics naming the series when it is missing.
pub fn present(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    metric(page, name, labels).unwrap_or_else(|| panic!("no series {name} {labels:?} on the metrics page"))
}

/// A counter's value on `page`, 0 while it has never been incremented.
/// Only for counters (`_total`, a histogram's `_count`): a gauge must use
/// [`present`].
pub fn counter(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(
        name.ends_with("_total") || name.ends_with("_count"),
        "{name} is not a counter: read it with `present`"
    );
    metric(page, name, labels).unwrap_or(0.0)
}

impl TestServer {
    /// The value of one series on the metrics page; panics if the page has
    /// no such series (a gauge that is missing must not read as 0).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, page) = self.http_get("/metrics").await;
        present(&page, name, labels)
    }

    /// A counter's value: 0 while it has never been incremented (the
    /// exporter shows a counter from its first increment on).
    pub async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, page) = self.http_get("/metrics").await;
        counter(&page, name, labels)
    }
}

/// The process to a test alone: no other test that takes its turn, and no
/// in-process [`TestServer`] of another test, runs meanwhile (a server takes
/// a share of the process while it lives, see [`share`]). Taken first by
/// the tests whose measure the work of tests beside them would skew: the
/// CPU time of a thread of this process (`limits::complexity`), which slows
/// as other tests contend for the cores and caches; a child server's
/// resident memory (`limits::bounds`, `connection_memory`, `hostile`),
/// which is its own, but under hundreds of MiB and thousands of calls whose
/// bounds assume no such test runs beside them; the burst of
/// `limits::faults`, which times admitted calls against a median timed
/// just before. Counters and gauges need no turn: each [`TestServer`]
/// records into a registry of its own, so a test reads the deltas of its
/// own server. Held until dropped; a test that fails releases it as it
/// unwinds.
pub async fn turn() -> Turn {
    let whole = PROCESS.write().await;
    HOLDS_TURN.set(true);
    Turn { _whole: whole }
}

/// [`turn`] for a test outside any runtime (a plain `#[test]`).
pub fn blocking_turn() -> Turn {
    let whole = PROCESS.blocking_write();
    HOLDS_TURN.set(true);
    Turn { _whole: whole }
}

/// The process to one test: see [`turn`].
pub struct Turn {
    _whole: tokio::sync::RwLockWriteGuard<'static, ()>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        HOLDS_TURN.set(false);
    }
}

/// What in-process servers share and a turn takes whole.
static PROCESS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

type Share = tokio::sync::RwLockReadGuard<'static, ()>;

thread_local! {
    /// Whether the test of this thread holds the turn. A test's body runs
    /// on its own thread whatever its runtime's flavor (`block_on` polls it
    /// there), so the thread names the test.
    static HOLDS_TURN: Cell<bool> = const { Cell::new(false) };
    /// The share the servers of this thread's test hold, while one lives.
    static SHARE: RefCell<Weak<Share>> =
        const { RefCell::new(Weak::new()) };
}

/// A share of the process for a server of this thread's test: none when the
/// test holds the turn, the one its other servers hold if one lives (a new
/// one could wait behind a queued turn that waits for theirs), else a new
/// one, once no test holds the turn.
async fn share() -> Option<Arc<Share>> {
    if HOLDS_TURN.get() {
        return None;
    }
    if let Some(held) = SHARE.with_borrow(Weak::upgrade) {
        return Some(held);
    }
    let share = Arc::new(PROCESS.read().await);
    SHARE.set(Arc::downgrade(&share));
    Some(share)
}
