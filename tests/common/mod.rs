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

    pub async fn start_with(args: ServeArgs) -> TestServer {
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
        };
        server.wait_serving().await;
        server
    }

    pub fn client(&self) -> AssemblerClient<Channel> {
        AssemblerClient::new(self.channel.clone())
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

/// The value of the series `name` whose labels include every `labels` pair.
pub fn metric(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            let (series, _) = l.rsplit_once(' ').unwrap_or((l, ""));
            let bare = series.split('{').next() == Some(name);
            bare && labels
                .iter()
                .all(|(k, v)| series.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
}

impl TestServer {
    /// The value of one series on the metrics page (0 if absent).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, page) = self.http_get("/metrics").await;
        metric(&page, name, labels).unwrap_or(0.0)
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
    let payload = message.encode_to_vec();
    let mut framed = Vec::with_capacity(payload.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&payload);
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
) -> (
    tokio::sync::mpsc::Sender<Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>>,
    tokio::task::JoinHandle<Option<String>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut first = vec![0u8];
    first.extend_from_slice(&declared.to_be_bytes());
    first.extend(std::iter::repeat_n(b'x', sent));
    tx.send(Ok(http_body::Frame::data(bytes::Bytes::from(first))))
        .await
        .unwrap();
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    // Resolves with the grpc-status the server answers with, if it does.
    let answer = tokio::spawn(async move {
        let resp = send.send_request(req).await.ok()?;
        resp.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    (tx, answer)
}
