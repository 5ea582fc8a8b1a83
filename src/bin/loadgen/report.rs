//! The final report (stable, human-readable text on stdout, and the same
//! figures as JSON) and the per-tick samples CSV of soak runs. Server figures
//! are deltas between the scrape before the run and the one after it; a
//! metric the server does not export is "n/a" (`null` in JSON).

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use crate::kept::KeptShare;
use crate::sessions::SessionFigures;

use crate::drive::{Plan, Stats, Window};
use crate::prom::Snapshot;

mod json;
mod text;

/// The server's metric names, from its own catalogue: a rename breaks this
/// build rather than turning a figure into "n/a".
mod names {
    pub use context_assembler::telemetry::metrics::{
        IN_FLIGHT_REQUESTS as IN_FLIGHT, PHASE_DURATION_SECONDS as PHASE, PHASES,
        PREFIX_CACHE_LOOKUPS_TOTAL as PREFIX_LOOKUPS, PROCESS_CPU_SECONDS_TOTAL as CPU,
        PROCESS_OPEN_FDS as OPEN_FDS, PROCESS_RESIDENT_MEMORY_BYTES as RSS,
        REQUEST_DURATION_SECONDS as REQUEST, RUNTIME_ALIVE_TASKS as ALIVE_TASKS,
        SEGMENT_CACHE_LOOKUPS_TOTAL as SEGMENT_LOOKUPS,
    };

    /// A histogram's `_sum` and `_count` series.
    pub fn sum_and_count(histogram: &str) -> (String, String) {
        (format!("{histogram}_sum"), format!("{histogram}_count"))
    }
}

/// Latency quantiles reported, with their labels.
const QUANTILES: [(&str, f64); 4] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)];

/// What the warm-up did.
#[derive(Debug, Clone)]
pub enum Warmup {
    /// Not asked for.
    Off,
    /// Asked for, but `--cold` makes every request unique.
    SkippedCold,
    /// Every distinct request sent once before measuring.
    Done {
        /// Distinct requests sent.
        requests: u64,
        /// Answered OK and well-formed.
        ok: u64,
        /// Failed.
        errors: u64,
        /// Wall time.
        elapsed: Duration,
    },
}

/// Everything the report is made of.
pub struct Inputs<'a> {
    /// `Replay::describe()`.
    pub workload: String,
    /// The plan run.
    pub plan: &'a Plan,
    /// The gRPC target.
    pub target: String,
    /// HTTP/2 connections.
    pub connections: usize,
    /// The sidecar binary this run started, if any.
    pub spawned: Option<String>,
    /// The warm-up.
    pub warmup: Warmup,
    /// From the start to the last answer.
    pub elapsed: Duration,
    /// Requests sent.
    pub sent: u64,
    /// What was recorded.
    pub stats: &'a Stats,
    /// Whether Ctrl-C ended the run early.
    pub interrupted: bool,
    /// The scrape before the run.
    pub start: Option<&'a Snapshot>,
    /// The scrape after the run.
    pub end: Option<&'a Snapshot>,
    /// The largest RSS any scrape saw.
    pub rss_max: Option<f64>,
    /// The session workload's prefix shares and budget use.
    pub sessions: Option<SessionFigures>,
    /// The fresh workload's kept share.
    pub kept: Option<KeptShare>,
}

/// Server-side figures over the run.
struct Server {
    cpu_cores: Option<f64>,
    cpu_us_per_request: Option<f64>,
    rss_start: Option<f64>,
    rss_max: Option<f64>,
    rss_end: Option<f64>,
    open_fds: Option<f64>,
    alive_tasks: Option<f64>,
    in_flight: Option<f64>,
    /// Phase, mean per observation (us), per completed request (us).
    phases: Vec<(String, Option<f64>, f64)>,
    /// Rpc label, mean (ms), calls.
    rpcs: Vec<(String, f64, f64)>,
    segment_hit_rate: Option<f64>,
    prefix_hit_rate: Option<f64>,
}

impl Server {
    fn new(i: &Inputs<'_>) -> Server {
        let completed = i.stats.completed() as f64;
        let gauge = |s: Option<&Snapshot>, name: &str| s.and_then(|s| s.sum(name, &[]));
        // Counters and histograms: a series not yet created at the start is 0.
        let delta = |name: &str, labels: &[(&str, &str)]| {
            let end = i.end?.sum(name, labels)?;
            Some(end - i.start.and_then(|s| s.sum(name, labels)).unwrap_or(0.0))
        };
        let cpu = match (
            gauge(i.start, names::CPU),
            gauge(i.end, names::CPU),
            i.start,
            i.end,
        ) {
            (Some(a), Some(b), Some(s), Some(e)) => Some((b - a, e.at.duration_since(s.at))),
            _ => None,
        };
        let hit_rate = |name: &str| {
            let hit = delta(name, &[("result", "hit")]).unwrap_or(0.0);
            let miss = delta(name, &[("result", "miss")]).unwrap_or(0.0);
            (hit + miss > 0.0).then(|| hit / (hit + miss))
        };
        let (phase_sum, phase_count) = names::sum_and_count(names::PHASE);
        let mut phase_names: Vec<String> = i
            .end
            .map(|e| e.label_values(&phase_count, "phase"))
            .unwrap_or_default();
        // Request order; a phase this build does not know goes last.
        phase_names.sort_by_key(|p| {
            names::PHASES
                .iter()
                .position(|o| o == p)
                .unwrap_or(names::PHASES.len())
        });
        let phases = phase_names
            .into_iter()
            .filter_map(|p| {
                let sum = delta(&phase_sum, &[("phase", &p)])?;
                let count = delta(&phase_count, &[("phase", &p)])?;
                let mean = (count > 0.0).then(|| sum / count * 1e6);
                Some((p, mean, sum / completed.max(1.0) * 1e6))
            })
            .collect();
        let (request_sum, request_count) = names::sum_and_count(names::REQUEST);
        let rpcs = i
            .end
            .map(|e| e.label_values(&request_count, "rpc"))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|rpc| {
                let count = delta(&request_count, &[("rpc", &rpc)])?;
                let sum = delta(&request_sum, &[("rpc", &rpc)])?;
                (count > 0.0).then(|| (rpc, sum / count * 1e3, count))
            })
            .collect();
        let rss_start = gauge(i.start, names::RSS);
        let rss_end = gauge(i.end, names::RSS);
        Server {
            cpu_cores: cpu
                .and_then(|(secs, wall)| (wall > Duration::ZERO).then(|| secs / wall.as_secs_f64())),
            cpu_us_per_request: cpu.and_then(|(secs, _)| (completed > 0.0).then(|| secs / completed * 1e6)),
            rss_start,
            rss_max: [rss_start, i.rss_max, rss_end]
                .into_iter()
                .flatten()
                .reduce(f64::max),
            rss_end,
            open_fds: gauge(i.end, names::OPEN_FDS),
            alive_tasks: gauge(i.end, names::ALIVE_TASKS),
            in_flight: gauge(i.end, names::IN_FLIGHT),
            phases,
            rpcs,
            segment_hit_rate: hit_rate(names::SEGMENT_LOOKUPS),
            prefix_hit_rate: hit_rate(names::PREFIX_LOOKUPS),
        }
    }
}

/// The final report.
pub struct Report<'a> {
    i: Inputs<'a>,
    server: Server,
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

fn or_na(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
}

fn mib(v: Option<f64>) -> String {
    v.map_or_else(
        || "n/a".to_owned(),
        |v| format!("{:.1} MiB", v / f64::from(1 << 20)),
    )
}

fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{:.1}%", v * 100.0))
}

impl<'a> Report<'a> {
    /// Computes the figures.
    pub fn new(i: Inputs<'a>) -> Report<'a> {
        let server = Server::new(&i);
        Report { i, server }
    }

    /// Requests answered OK per second of the run.
    pub fn throughput(&self) -> f64 {
        self.i.stats.ok as f64 / self.i.elapsed.as_secs_f64().max(1e-9)
    }

    fn calls_per_second(&self) -> f64 {
        self.i.stats.calls as f64 / self.i.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The samples CSV: one row per progress tick and one at the end.
pub struct Samples {
    out: std::io::BufWriter<std::fs::File>,
}

impl Samples {
    /// Creates the file and writes the header.
    pub fn create(path: &Path) -> anyhow::Result<Samples> {
        let file =
            std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        writeln!(
            out,
            "elapsed_s,requests_ok,errors,rps_window,p50_ms_window,p99_ms_window,server_rss_bytes,\
             server_cpu_seconds,server_open_fds,server_alive_tasks,server_in_flight"
        )?;
        out.flush()?;
        Ok(Samples { out })
    }

    /// Appends one row (flushed, so a soak that dies keeps its samples).
    pub fn row(&mut self, w: &Window, server: Option<&Snapshot>) -> anyhow::Result<()> {
        let cell =
            |v: Option<f64>, decimals: usize| v.map_or_else(String::new, |v| format!("{v:.decimals$}"));
        let metric = |name: &str| server.and_then(|s| s.sum(name, &[]));
        writeln!(
            self.out,
            "{:.3},{},{},{:.1},{},{},{},{},{},{},{}",
            w.elapsed.as_secs_f64(),
            w.ok,
            w.errors,
            w.rps,
            cell(ms(w.p50), 3),
            cell(ms(w.p99), 3),
            cell(metric(names::RSS), 0),
            cell(metric(names::CPU), 3),
            cell(metric(names::OPEN_FDS), 0),
            cell(metric(names::ALIVE_TASKS), 0),
            cell(metric(names::IN_FLIGHT), 0),
        )?;
        self.out.flush()?;
        Ok(())
    }
}

/// The progress line for stderr: `server` is this tick's scrape, `before`
/// the previous one (for the CPU used in between).
pub fn progress_line(w: &Window, server: Option<&Snapshot>, before: Option<&Snapshot>) -> String {
    let cores = match (server, before) {
        (Some(now), Some(then)) => {
            let secs = now
                .sum(names::CPU, &[])
                .zip(then.sum(names::CPU, &[]))
                .map(|(a, b)| a - b);
            let wall = now.at.duration_since(then.at).as_secs_f64();
            secs.filter(|_| wall > 0.0).map(|s| s / wall)
        }
        _ => None,
    };
    format!(
        "[{:>7.1}s] sent {} ok {} errors {} | {:.0} req/s | window p50 {} ms p99 {} ms | server cpu {} cores, rss {}",
        w.elapsed.as_secs_f64(),
        w.sent,
        w.ok,
        w.errors,
        w.rps,
        or_na(ms(w.p50), 3),
        or_na(ms(w.p99), 3),
        or_na(cores, 2),
        mib(rss(server)),
    )
}

/// The RSS a scrape reports.
pub fn rss(server: Option<&Snapshot>) -> Option<f64> {
    server.and_then(|s| s.sum(names::RSS, &[]))
}
