//! The real binary as a child process on ephemeral ports: its logs, metrics
//! page, signals, exit code and /proc figures.

use std::net::SocketAddr;

use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use super::{counter, metric, present};

/// The sidecar binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_context-assembler");

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
        let mut child = Command::new(BIN)
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
