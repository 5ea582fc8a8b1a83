//! Starts the real server on 127.0.0.1:0 and connects a client: bind first,
//! then serve, then connect; readiness is awaited on the health Watch stream.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use context_assembler::server::Bound;
use tokio::sync::oneshot;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

pub struct TestServer {
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    pub channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Holds the server's SQLite memory file unless the args named one.
    _memory_dir: tempfile::TempDir,
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
        let bound = Bound::bind(config).await.unwrap();
        let addr = bound.grpc_addr().unwrap();
        let metrics = bound.metrics_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            bound
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let server = TestServer {
            addr,
            metrics,
            channel,
            stop: Some(stop),
            task: Some(task),
            _memory_dir: memory_dir,
        };
        server.wait_serving().await;
        server
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

/// One unary gRPC call over a bare HTTP/2 connection, so that no client-side
/// timer or limit interferes: returns (grpc-status, grpc-message).
pub async fn raw_unary(
    addr: SocketAddr,
    path: &str,
    message: &impl prost::Message,
    headers: &[(&str, &str)],
) -> (i32, String) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let framed = frame(&message.encode_to_vec());
    let mut req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(Full::new(bytes::Bytes::from(framed))).unwrap())
        .await
        .unwrap();
    let head = resp.headers().clone();
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let get = |k: &str| {
        trailers
            .get(k)
            .or_else(|| head.get(k))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    (get("grpc-status").parse().unwrap_or(-1), get("grpc-message"))
}

/// An upload that declares a `declared`-byte message, sends its frame header
/// and `sent` bytes, then stalls. Keep the returned handles to keep it open.
pub async fn stalled_upload(
    addr: SocketAddr,
    path: &str,
    declared: u32,
    sent: usize,
) -> (UploadSender, tokio::task::JoinHandle<Option<String>>) {
    let mut first = vec![0u8];
    first.extend_from_slice(&declared.to_be_bytes());
    first.extend(std::iter::repeat_n(b'x', sent));
    let (tx, response) = upload(addr, path, bytes::Bytes::from(first)).await;
    // Resolves with the grpc-status the server answers with, if it does.
    let answer = tokio::spawn(async move {
        let resp = response.await.ok()??;
        resp.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    (tx, answer)
}

/// Where the frames of an upload body go.
pub type UploadSender =
    tokio::sync::mpsc::Sender<Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>>;

/// A gRPC call on a fresh HTTP/2 connection whose body starts with `first`;
/// the rest of the body goes through the returned sender (dropping it ends
/// the body). The response, `None` if the server never answers, arrives on
/// the returned task.
async fn upload(
    addr: SocketAddr,
    path: &str,
    first: bytes::Bytes,
) -> (
    UploadSender,
    tokio::task::JoinHandle<Option<http::Response<hyper::body::Incoming>>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    tx.send(Ok(http_body::Frame::data(first))).await.unwrap();
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let response = tokio::spawn(async move { send.send_request(req).await.ok() });
    (tx, response)
}

/// Frames one encoded message as a gRPC length-prefixed message.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(payload.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// What the server answered to one raw call.
#[derive(Debug)]
pub struct RawAnswer {
    /// The HTTP status.
    pub http: u16,
    /// `grpc-status` (from the trailers, or from the headers of a
    /// trailers-only answer); `None` if there was none.
    pub code: Option<i32>,
    /// The whole status with its details, when there is one.
    pub status: Option<tonic::Status>,
    /// The payloads of the response messages, in order.
    pub messages: Vec<bytes::Bytes>,
    /// Set when the response body broke off or was not well framed.
    pub broken: Option<String>,
}

impl RawAnswer {
    /// The gRPC status code (`Unknown` when none was sent).
    pub fn code(&self) -> tonic::Code {
        self.code.map_or(tonic::Code::Unknown, tonic::Code::from_i32)
    }

    /// The status message, or "" without one.
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", tonic::Status::message)
    }

    /// Decodes every response message as `M`.
    pub fn decode<M: prost::Message + Default>(&self) -> Result<Vec<M>, prost::DecodeError> {
        self.messages.iter().map(|m| M::decode(m.as_ref())).collect()
    }
}

/// One bare HTTP/2 connection for raw gRPC calls: whatever bytes the caller
/// wants as the body, no client-side limits, timers or validation.
#[derive(Clone)]
pub struct RawClient {
    addr: SocketAddr,
    send: hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl RawClient {
    /// Connects and completes the HTTP/2 handshake.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        RawClient { addr, send }
    }

    /// POSTs `body` (sent as is: frame it with [`frame`]) to `path` with
    /// the gRPC headers and `headers`, and reads the whole answer.
    pub async fn call(&mut self, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> RawAnswer {
        use http_body_util::{BodyExt, Full};
        let mut req = http::Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let sent = match self.send.ready().await {
            Ok(()) => {
                self.send
                    .send_request(req.body(Full::new(bytes::Bytes::from(body))).unwrap())
                    .await
            }
            Err(e) => Err(e),
        };
        let resp = match sent {
            Ok(resp) => resp,
            Err(e) => {
                return RawAnswer {
                    http: 0,
                    code: None,
                    status: None,
                    messages: Vec::new(),
                    broken: Some(format!("no response: {e:?}")),
                };
            }
        };
        let http = resp.status().as_u16();
        let head = resp.headers().clone();
        let (trailers, mut data, mut broken) = match resp.into_body().collect().await {
            Ok(c) => (c.trailers().cloned(), c.to_bytes(), None),
            Err(e) => (None, bytes::Bytes::new(), Some(format!("body: {e}"))),
        };
        let meta = trailers
            .as_ref()
            .filter(|t| t.contains_key("grpc-status"))
            .unwrap_or(&head);
        let code = meta
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let status = tonic::Status::from_header_map(meta);
        let mut messages = Vec::new();
        while !data.is_empty() {
            if data.len() < 5 {
                broken = Some(format!("{} stray bytes after the messages", data.len()));
                break;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if data[0] != 0 || data.len() < 5 + len {
                broken = Some(format!("bad response frame (flag {}, len {len})", data[0]));
                break;
            }
            messages.push(data.slice(5..5 + len));
            data = data.slice(5 + len..);
        }
        RawAnswer {
            http,
            code,
            status,
            messages,
            broken,
        }
    }
}

/// The real binary as a child process on ephemeral ports, every line it
/// writes (stderr and stdout) captured. Killed when dropped.
pub struct ChildServer {
    pub child: std::process::Child,
    pub grpc: SocketAddr,
    pub metrics: SocketAddr,
    logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Holds the server's SQLite memory file unless the caller named one.
    _memory_dir: tempfile::TempDir,
}

/// The address a log line announces for `what` ("gRPC listening"), in the
/// JSON or the plain format.
fn announced(line: &str, what: &str) -> Option<SocketAddr> {
    if let Ok(event) = serde_json::from_str::<serde_json::Value>(line) {
        return (event["message"].as_str() == Some(what))
            .then(|| event["addr"].as_str().and_then(|a| a.parse().ok()))
            .flatten();
    }
    line.contains(what)
        .then(|| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix("addr=").and_then(|a| a.parse().ok()))
        })
        .flatten()
}

impl ChildServer {
    /// `serve --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 ARGS` with
    /// `ENV` added; returns once both listeners are announced.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> ChildServer {
        use std::io::BufRead as _;
        use std::process::{Command, Stdio};
        let memory_dir = tempfile::tempdir().unwrap();
        let memory_path = memory_dir.path().join("memory.db");
        let mut child = Command::new(env!("CARGO_BIN_EXE_context-assembler"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            // A caller's flag or variable comes later and wins.
            .env("CONTEXT_ASSEMBLER_MEMORY_SQLITE_PATH", &memory_path)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (found, addrs) = std::sync::mpsc::channel::<(bool, SocketAddr)>();
        let pipes: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stderr.take().unwrap()),
            Box::new(child.stdout.take().unwrap()),
        ];
        for pipe in pipes {
            let logs = logs.clone();
            let found = found.clone();
            // Keeps draining the pipe so the child never blocks on a full one.
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(pipe);
                let mut raw = Vec::new();
                while reader.read_until(b'\n', &mut raw).is_ok_and(|n| n > 0) {
                    let line = String::from_utf8_lossy(&raw).trim_end().to_owned();
                    if let Some(a) = announced(&line, "gRPC listening") {
                        let _ = found.send((true, a));
                    }
                    if let Some(a) = announced(&line, "metrics listening") {
                        let _ = found.send((false, a));
                    }
                    logs.lock().unwrap().push(line);
                    raw.clear();
                }
            });
        }
        drop(found);
        let (mut grpc, mut metrics) = (None, None);
        while grpc.is_none() || metrics.is_none() {
            let Ok((is_grpc, addr)) = addrs.recv_timeout(std::time::Duration::from_secs(60)) else {
                let _ = child.kill();
                panic!("the sidecar exited or never listened: {:?}", logs.lock().unwrap());
            };
            if is_grpc {
                grpc = Some(addr)
            } else {
                metrics = Some(addr)
            }
        }
        ChildServer {
            child,
            grpc: grpc.unwrap(),
            metrics: metrics.unwrap(),
            logs,
            _memory_dir: memory_dir,
        }
    }

    /// A channel to the server once its health check answers SERVING.
    pub async fn serving_channel(&self) -> Channel {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let attempt = Channel::from_shared(format!("http://{}", self.grpc))
                .unwrap()
                .connect()
                .await;
            if let Ok(ch) = attempt {
                let serving = HealthClient::new(ch.clone())
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32);
                if serving {
                    return ch;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the sidecar never became SERVING"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The whole metrics page.
    pub async fn metrics_page(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut page = String::new();
        s.read_to_string(&mut page).await.unwrap();
        page
    }

    /// Every line written so far (stderr and stdout).
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// A field of the child's /proc/PID/status: `VmRSS`, `VmHWM` (KiB),
    /// `Threads`.
    pub fn proc_status(&self, key: &str) -> u64 {
        proc_status(self.child.id(), key)
    }

    /// Open file descriptors of the child.
    pub fn open_fds(&self) -> usize {
        open_fds(self.child.id())
    }

    /// Whether the child is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The value of one series on the metrics page; panics if the page has
    /// no such series (a gauge that is missing must not read as 0).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        present(&self.metrics_page().await, name, labels)
    }

    /// A counter's value: 0 while it has never been incremented.
    pub async fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        counter(&self.metrics_page().await, name, labels)
    }

    /// Polls the metric until it reaches `at_least` (20 s at most); panics
    /// with `what` if it does not.
    pub async fn wait_for(&self, name: &str, labels: &[(&str, &str)], at_least: f64, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while metric(&self.metrics_page().await, name, labels).unwrap_or(f64::NEG_INFINITY) < at_least {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Sends `sig` (`-TERM`, `-HUP`) to the child with kill(1).
    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// Waits for the child to exit; returns its exit code. Kills it and
    /// panics if it is still running after `within`.
    pub async fn exit_code(mut self, within: std::time::Duration) -> Option<i32> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the sidecar did not exit within {within:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A numeric field of /proc/PID/status (the first number after `key:`).
pub fn proc_status(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"))
}

/// Open file descriptors of process `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[path = "../sqlite_stall/mod.rs"]
mod sqlite_stall;

/// Small model folders in the Hugging Face layout (the unit tests' own).
#[path = "../../src/tokens/hf/fixture.rs"]
pub mod hf_fixture;
#[allow(unused_imports)] // Used by some of the test crates that include this module.
pub use sqlite_stall::SqliteStall;

/// A unary call whose upload the test holds: the frame header and the first
/// `sent` bytes of `message` go out at once; the rest waits for
/// [`HeldCall::release`]. The server has the call from the start (it counts
/// its declared bytes) but cannot work on it until released: an in-flight
/// request whose timing the test controls.
pub struct HeldCall {
    rest: Option<(UploadSender, bytes::Bytes)>,
    answer: tokio::task::JoinHandle<Option<(i32, Vec<u8>)>>,
}

impl HeldCall {
    pub async fn start(addr: SocketAddr, path: &str, message: &[u8], sent: usize) -> HeldCall {
        use http_body_util::BodyExt as _;
        let framed = bytes::Bytes::from(frame(message));
        let first = framed.slice(..5 + sent.min(message.len()));
        let rest = framed.slice(first.len()..);
        let (tx, response) = upload(addr, path, first).await;
        // The grpc-status (headers or trailers) and the response body.
        let answer = tokio::spawn(async move {
            let resp = response.await.ok()??;
            let status = |h: &http::HeaderMap| {
                h.get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
            };
            let in_head = status(resp.headers());
            let collected = resp.into_body().collect().await.ok()?;
            let code = in_head.or_else(|| collected.trailers().and_then(status))?;
            Some((code, collected.to_bytes().to_vec()))
        });
        HeldCall {
            rest: Some((tx, rest)),
            answer,
        }
    }

    /// Sends the rest of the message and ends the upload.
    pub async fn release(&mut self) {
        if let Some((tx, rest)) = self.rest.take()
            && !rest.is_empty()
        {
            let _ = tx.send(Ok(http_body::Frame::data(rest))).await;
        }
    }

    /// The grpc-status and body the server answered (`None` if it never did).
    pub async fn answer(self) -> Option<(i32, Vec<u8>)> {
        self.answer.await.unwrap()
    }
}
