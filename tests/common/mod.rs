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
