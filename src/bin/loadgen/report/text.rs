//! The report as text: one line per figure, its key padded to a column,
//! in a stable order (`.ci/loadgen.sh` reads some lines by their key).

use std::fmt::Write as _;

use super::{QUANTILES, Report, Warmup, mib, ms, or_na, percent};
use crate::drive::Rpc;

impl Report<'_> {
    fn rpc(&self) -> String {
        match self.i.plan.rpc {
            Rpc::Assemble => "Assemble (unary, one request per call)".to_owned(),
            Rpc::Batch => format!("AssembleBatch ({} requests per call)", self.i.plan.batch_size),
            Rpc::Stream => "AssembleStream (one stream per worker, one request in flight on each)".to_owned(),
        }
    }

    fn load(&self) -> String {
        let p = self.i.plan;
        if p.rate > 0.0 {
            format!(
                "open loop at {} requests/s, concurrency {} (a request delayed by busy workers is timed from its scheduled send)",
                p.rate, p.concurrency
            )
        } else {
            format!("closed loop, concurrency {}", p.concurrency)
        }
    }

    fn caches(&self) -> String {
        if self.i.plan.cold {
            let mut s = if self.i.plan.sessions > 0 {
                "cold sessions: each pass over the sessions brings new ones (a nonce per session and pass); \
                 each request repeats its predecessor's turns and adds one exchange"
            } else {
                "cold: every request's content is unique (per-request nonce), no server cache can hit"
            }
            .to_owned();
            if matches!(self.i.warmup, Warmup::SkippedCold) {
                s.push_str("; --warmup skipped");
            }
            return s;
        }
        match &self.i.warmup {
            Warmup::Off | Warmup::SkippedCold => {
                "no warm-up: the first pass over the workload fills the caches".to_owned()
            }
            Warmup::Done {
                requests,
                ok,
                errors,
                elapsed,
            } => format!(
                "warm: every distinct request ({requests}) sent once before measuring ({ok} ok, {errors} errors, {:.3} s)",
                elapsed.as_secs_f64()
            ),
        }
    }

    /// `OK n` (well-formed answers), then each other status, then each kind
    /// of malformed OK answer.
    fn by_code(&self) -> String {
        let s = self.i.stats;
        let mut parts = vec![format!("OK {}", s.ok)];
        parts.extend(s.codes.iter().map(|(c, n)| format!("{c} {n}")));
        parts.extend(
            s.malformed
                .iter()
                .map(|(why, n)| format!("malformed OK ({why}) {n}")),
        );
        parts.join(", ")
    }

    fn latency_line(h: &crate::hist::Histogram) -> String {
        let mut line = String::new();
        for (label, q) in QUANTILES {
            let _ = write!(line, "{label} {}  ", or_na(ms(h.quantile(q)), 3));
        }
        let _ = write!(
            line,
            "max {}  mean {}",
            or_na(ms(h.max()), 3),
            or_na(ms(h.mean()), 3)
        );
        line
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.run_lines(&mut out);
        self.server_lines(&mut out);
        self.workload_lines(&mut out);
        out
    }

    /// What was run and what came back: the workload, the target, the load,
    /// the answers by code, throughput and latency.
    fn run_lines(&self, out: &mut String) {
        let (i, s) = (&self.i, self.i.stats);
        let mut line = |key: &str, value: String| write_line(out, key, value);
        line("workload:", i.workload.clone());
        let target = match &i.spawned {
            Some(bin) => format!("{} over {} (spawned {bin})", i.target, connections(i.connections)),
            None => format!("{} over {}", i.target, connections(i.connections)),
        };
        line("target:", target);
        line("rpc:", self.rpc());
        line("load:", self.load());
        line("caches:", self.caches());
        let ended = if i.interrupted { " (interrupted)" } else { "" };
        line("duration:", format!("{:.3} s{ended}", i.elapsed.as_secs_f64()));
        line(
            "requests:",
            format!("sent {}, ok {}, errors {}", i.sent, s.ok, s.errors()),
        );
        line("by code:", self.by_code());
        for (code, message) in &s.messages {
            line("first message:", format!("{code}: {message:?}"));
        }
        line(
            "throughput:",
            format!(
                "{:.1} requests/s ({:.1} calls/s)",
                self.throughput(),
                self.calls_per_second()
            ),
        );
        line("latency per call ms:", Self::latency_line(&s.per_call));
        if i.plan.rpc == Rpc::Batch {
            line(
                "latency per req. ms:",
                format!("{} (call / requests in it)", Self::latency_line(&s.per_request)),
            );
        }
    }

    /// The server's figures over the run: CPU, memory, state at the end,
    /// time per phase and per call, cache hit rates.
    fn server_lines(&self, out: &mut String) {
        let v = &self.server;
        let mut line = |key: &str, value: String| write_line(out, key, value);
        line(
            "server cpu:",
            format!(
                "{} cores, {} us per request",
                or_na(v.cpu_cores, 2),
                or_na(v.cpu_us_per_request, 1)
            ),
        );
        line(
            "server rss:",
            format!(
                "start {}, max {}, end {}",
                mib(v.rss_start),
                mib(v.rss_max),
                mib(v.rss_end)
            ),
        );
        line(
            "server at end:",
            format!(
                "open fds {}, alive tasks {}, in flight {}",
                or_na(v.open_fds, 0),
                or_na(v.alive_tasks, 0),
                or_na(v.in_flight, 0)
            ),
        );
        let phases = if v.phases.is_empty() {
            "n/a".to_owned()
        } else {
            v.phases
                .iter()
                .map(|(p, mean, per_request)| format!("{p} {} ({per_request:.1})", or_na(*mean, 1)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        line(
            "server phases us:",
            format!("{phases}  [mean per observation (per request)]"),
        );
        let rpcs = if v.rpcs.is_empty() {
            "n/a".to_owned()
        } else {
            v.rpcs
                .iter()
                .map(|(rpc, mean, calls)| format!("{rpc} {mean:.3} ms over {calls:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        line("server call mean:", rpcs);
        line(
            "token caches:",
            format!(
                "segment hit rate {}, prefix hit rate {}",
                percent(v.segment_hit_rate),
                percent(v.prefix_hit_rate)
            ),
        );
    }

    /// The workload's own figures: the fresh workload's kept share, the
    /// session workloads' shared prefixes and budget use.
    fn workload_lines(&self, out: &mut String) {
        let i = &self.i;
        let mut line = |key: &str, value: String| write_line(out, key, value);
        if let Some(k) = &i.kept {
            line(
                "kept of offered:",
                format!(
                    "{} of the content tokens offered (least per request {}); offered {}x the budget on \
                     average; over {} answers (counted by loadgen: the static prefix, the query and the \
                     items each answer's decisions list as kept; a cold run's nonce with every text)",
                    percent(k.share()),
                    percent(k.least),
                    or_na(k.offered_over_budget(), 3),
                    k.answers
                ),
            );
        }
        if let Some(f) = &i.sessions {
            line(
                "session prefix:",
                format!(
                    "{} of prompt tokens (query excluded) byte-identical with the session's previous prompt; \
                     per request p10 {}, median {} ({} requests of {} sessions, up to request {} of a session)",
                    percent(Some(f.share)),
                    percent(Some(f.share_p10)),
                    percent(Some(f.share_median)),
                    f.compared,
                    f.sessions,
                    f.furthest + 1
                ),
            );
            line(
                "session budget use:",
                format!(
                    "mean {}, p10 {} of the budget over {} requests whose conversation did not fit whole \
                     (turns cut, or tool results cleared)",
                    percent(f.utilization),
                    percent(f.utilization_p10),
                    f.cut
                ),
            );
        }
    }
}

/// Writes one line of the report: its key, padded, then its value.
fn write_line(out: &mut String, key: &str, value: String) {
    let _ = writeln!(out, "{key:<22}{value}");
}

fn connections(n: usize) -> String {
    if n == 1 {
        "1 connection".to_owned()
    } else {
        format!("{n} connections")
    }
}
