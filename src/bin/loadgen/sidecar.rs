//! `--spawn`: starts the sidecar binary on ports chosen by the kernel, reads
//! the addresses it logs, and stops it with SIGTERM (its graceful drain) at
//! the end, or on any early exit.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// How long the sidecar may take to log its gRPC address.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long it may take to drain and exit after SIGTERM before it is killed.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A sidecar process this run started.
pub struct Sidecar {
    child: Option<Child>,
    /// Its gRPC address.
    pub grpc: SocketAddr,
    /// Its metrics address, unless metrics are off.
    pub metrics: Option<SocketAddr>,
}

/// A listener the sidecar logged.
enum Listening {
    Grpc(SocketAddr),
    Metrics(SocketAddr),
}

impl Sidecar {
    /// Starts `binary serve` on `127.0.0.1:0` for gRPC and metrics, with JSON
    /// logs at `info` (where the listening addresses are logged), then
    /// `extra` arguments. Returns once the gRPC address is known; the server
    /// may still be loading its vocabularies (wait for SERVING).
    pub fn spawn(binary: &Path, extra: &[String]) -> anyhow::Result<Sidecar> {
        let mut child = Command::new(binary)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .args(["--log-format", "json"])
            // The load is assembly; no memory file is left behind.
            .args(["--memory-store", "off"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal stops the load,
            // not the server under it (which is stopped with SIGTERM after
            // the report).
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let stderr = child.stderr.take().context("the child has no stderr pipe")?;
        let mut sidecar = Sidecar {
            child: Some(child),
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            metrics: None,
        };
        let (tx, rx) = mpsc::channel();
        // Reads the log for the whole life of the child, so it never blocks
        // on a full pipe; warnings and errors are passed on (the sidecar
        // never logs prompt content).
        std::thread::Builder::new()
            .name("sidecar-log".to_owned())
            .spawn(move || follow_log(stderr, &tx))
            .context("cannot start the log reader")?;
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Listening::Metrics(addr)) => sidecar.metrics = Some(addr),
                // The metrics listener is logged first: once gRPC is up,
                // metrics are either known or off.
                Ok(Listening::Grpc(addr)) => {
                    sidecar.grpc = addr;
                    return Ok(sidecar);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "{} did not log its gRPC address within {LISTEN_TIMEOUT:?}",
                        binary.display()
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = sidecar.child.as_mut().and_then(|c| c.wait().ok());
                    sidecar.child = None;
                    bail!(
                        "{} exited before listening ({}); check --server-arg values",
                        binary.display(),
                        status.map_or_else(|| "unknown status".to_owned(), |s| s.to_string())
                    )
                }
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits for the exit (killing it after a grace
    /// period). Blocks: call from a blocking thread.
    pub fn stop(mut self) -> anyhow::Result<ExitStatus> {
        let child = self.child.take().context("the sidecar was already stopped")?;
        terminate(child)
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = terminate(child);
        }
    }
}

fn terminate(mut child: Child) -> anyhow::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let deadline = Instant::now() + if sent { EXIT_TIMEOUT } else { Duration::ZERO };
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            child.kill()?;
            let status = child.wait()?;
            bail!("the sidecar did not exit after SIGTERM and was killed ({status})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn follow_log(stderr: std::process::ChildStderr, tx: &mpsc::Sender<Listening>) {
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let addr = event["addr"].as_str().and_then(|a| a.parse().ok());
        match (event["message"].as_str(), addr) {
            (Some("gRPC listening"), Some(a)) => {
                let _ = tx.send(Listening::Grpc(a));
            }
            (Some("metrics listening"), Some(a)) => {
                let _ = tx.send(Listening::Metrics(a));
            }
            _ => {}
        }
        if matches!(event["level"].as_str(), Some("WARN" | "ERROR")) {
            eprintln!("sidecar: {line}");
        }
    }
}
