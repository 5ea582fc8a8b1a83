//! What the examples that measure a spawned sidecar share: starting it
//! (release binary, JSON logs, its address read from the log), reading
//! the CPU its threads spent (`/proc/PID/task/*/schedstat`, read while they
//! wait, so up to date) and this thread's own.

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server process and the address its log or stdout named.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Its address.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// Starts the sidecar on `listen` with JSON logs (and `config`, if given),
/// waits for its gRPC address in the log.
pub fn sidecar(binary: &Path, config: Option<&str>, listen: &str) -> Server {
    let mut child = Command::new(binary)
        .args(["serve", "--listen", listen, "--metrics-listen", "127.0.0.1:0"])
        .args(config.map(|c| ["--config", c]).into_iter().flatten())
        .args(["--log-format", "json", "--memory-store", "off"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if v["message"] == "gRPC listening" {
                let _ = tx.send(v["addr"].as_str().unwrap_or_default().to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    Server { child, addr }
}

/// Nanoseconds on CPU of each thread of `pid`.
pub fn cpu_by_thread(pid: u32) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        if let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat"))
            && let Some(ns) = stat.split_whitespace().next().and_then(|n| n.parse().ok())
        {
            out.insert(task.file_name().to_string_lossy().into_owned(), ns);
        }
    }
    out
}

/// CPU nanoseconds spent by `pid` between two readings (threads that
/// appeared count from zero).
pub fn cpu_between(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
    after
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// The calling thread's CPU time, exact to the call
/// (`CLOCK_THREAD_CPUTIME_ID`). Not `/proc/thread-self/schedstat`: a
/// running thread's figure there is brought up to date only at the
/// scheduler's ticks, so it lagged by up to 4 ms here (a cell of 40 ms off
/// by a tenth).
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// The median of `v` (the upper one of an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
