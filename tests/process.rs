//! The real binary as a child process: SIGTERM drains in-flight requests and
//! exits 0; SIGHUP reloads models and policies, refuses a bad file and keeps
//! serving throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::heavy_request;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// Reads the addresses the child logged for its listeners (it binds port 0,
/// so no port is picked and released before it binds).
fn listening(stderr: std::process::ChildStderr) -> (SocketAddr, SocketAddr) {
    use std::io::BufRead as _;
    let (mut grpc, mut metrics) = (None, None);
    let mut lines = std::io::BufReader::new(stderr).lines();
    while grpc.is_none() || metrics.is_none() {
        let line = lines
            .next()
            .expect("the sidecar exited before listening")
            .unwrap();
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let addr = event["addr"].as_str().and_then(|a| a.parse().ok());
        match event["message"].as_str() {
            Some("gRPC listening") => grpc = addr,
            Some("metrics listening") => metrics = addr,
            _ => {}
        }
    }
    // Keep draining the pipe so the child never blocks on a full one.
    std::thread::spawn(move || for _ in lines {});
    (grpc.unwrap(), metrics.unwrap())
}

struct Sidecar {
    child: Child,
    grpc: SocketAddr,
    metrics: SocketAddr,
}

impl Sidecar {
    fn spawn(extra: &[&str]) -> Sidecar {
        let mut child = Command::new(env!("CARGO_BIN_EXE_context-assembler"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", "json", "--memory-store", "off"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (grpc, metrics) = listening(child.stderr.take().unwrap());
        Sidecar { child, grpc, metrics }
    }

    async fn channel(&self) -> Channel {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = Channel::from_shared(format!("http://{}", self.grpc))
                .unwrap()
                .connect()
                .await;
            if let Ok(ch) = attempt {
                let mut health = HealthClient::new(ch.clone());
                let serving = health
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32);
                if serving {
                    return ch;
                }
            }
            assert!(Instant::now() < deadline, "sidecar never became SERVING");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut page = String::new();
        s.read_to_string(&mut page).await.unwrap();
        common::metric(&page, name, labels).unwrap_or(0.0)
    }

    /// Polls the metric until it reaches `at_least` (20 s at most).
    async fn wait_for(&self, name: &str, labels: &[(&str, &str)], at_least: f64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.metric(name, labels).await < at_least {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the process to exit; returns its exit code.
    async fn exit_code(mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the sidecar did not exit within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let sidecar = Sidecar::spawn(&["--drain-secs", "30"]);
    let channel = sidecar.channel().await;
    // A health Watch stream stays open, as a gateway's health checking keeps
    // one: the drain must not wait for it.
    let mut watch = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    // Cold, distinct requests that take a while each in a debug build.
    let calls: Vec<_> = (0..6u64)
        .map(|seed| {
            let mut client = AssemblerClient::new(channel.clone());
            tokio::spawn(async move { client.assemble(heavy_request(seed, 400, 2000)).await })
        })
        .collect();
    // SIGTERM only once all of them are being worked on.
    let deadline = Instant::now() + Duration::from_secs(30);
    while sidecar.metric("assembler_in_flight_requests", &[]).await < 6.0 {
        assert!(Instant::now() < deadline, "requests never got in flight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sidecar.signal("-TERM");
    let signalled = Instant::now();
    for call in calls {
        let response = call.await.unwrap();
        let response = response.expect("an in-flight request failed during the drain");
        assert!(response.into_inner().usage.unwrap().total_tokens > 0);
    }
    let grpc = sidecar.grpc;
    assert_eq!(sidecar.exit_code(Duration::from_secs(30)).await, Some(0));
    // Once the requests were answered, the open Watch did not hold the exit
    // for the 30 s grace period.
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "exit took {:?}",
        signalled.elapsed()
    );
    assert!(
        tokio::net::TcpStream::connect(grpc).await.is_err(),
        "still accepting after exit"
    );
}

#[tokio::test]
async fn sighup_reloads_models_and_policies_and_refuses_a_bad_file() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let model = |name: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\nencoding = \"o200k_base\"\ncontext_window = 8000\noutput_reserve = 1000\n"
        )
    };
    file.write_all(model("first-model").as_bytes()).unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let sidecar = Sidecar::spawn(&["--config", &path]);
    let channel = sidecar.channel().await;
    let mut client = AssemblerClient::new(channel.clone());
    let names = |r: pb::ListModelsResponse| r.models.into_iter().map(|m| m.name).collect::<Vec<_>>();
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model"]);

    // Requests keep flowing through every reload.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let mut client = client.clone();
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client
                    .count_tokens(pb::CountTokensRequest {
                        text: "steady traffic".to_owned(),
                        tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding(
                            "o200k_base".to_owned(),
                        )),
                    })
                    .await;
                assert!(r.is_ok(), "a request failed during a reload: {r:?}");
                n += 1;
            }
            n
        })
    };

    std::fs::write(
        &path,
        format!(
            "{}{}[policies.strict]\ncontext_role = \"system\"\n",
            model("first-model"),
            model("second-model")
        ),
    )
    .unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "applied")],
            1.0,
            "reload never applied",
        )
        .await;
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model", "second-model"]);
    let mut req = heavy_request(1, 2, 100);
    req.model = "second-model".to_owned();
    req.policy = "strict".to_owned();
    let resp = client.assemble(req).await.unwrap().into_inner();
    let context = &resp.messages[resp.messages.len() - 2];
    assert_eq!(
        context.role,
        pb::Role::System as i32,
        "the reloaded policy applies"
    );

    // A bad file is refused; the running configuration stays.
    std::fs::write(&path, "[[models]]\nname = \"broken\"\nencoding = \"p50k\"\n").unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "refused")],
            1.0,
            "bad reload never refused",
        )
        .await;
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model", "second-model"]);

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = traffic.await.unwrap();
    assert!(served > 0);
    sidecar.signal("-TERM");
    assert_eq!(sidecar.exit_code(Duration::from_secs(20)).await, Some(0));
}
