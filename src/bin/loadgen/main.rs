//! `loadgen`: drives a running sidecar (or one it starts with `--spawn`)
//! through `Assemble`, `AssembleBatch` or `AssembleStream` over real HTTP/2
//! connections with the replay workload (prefix families x users x turns,
//! evidence from a shared corpus by Zipf popularity), the session workload
//! (conversations growing by one exchange per request) or the fresh one
//! (new documents and turns in every request, most of them kept), closed
//! loop or at a
//! fixed rate; checks every status and answer; prints progress on stderr and
//! a final report on stdout: throughput, client latency percentiles, and the
//! server's CPU, memory, per-phase time and cache hit rates from its
//! Prometheus endpoint. Exits 1 when a request failed (`--expect-ok`), 2 when
//! the run could not be made.
//!
//! ```sh
//! cargo run --release --bin loadgen -- --rpc stream --concurrency 16 --duration 30s --warmup
//! cargo run --release --bin loadgen -- --spawn target/release/context-assembler --rate 2000 --cold
//! ```

mod connect;
mod drive;
mod hist;
mod kept;
mod prom;
mod report;
mod sessions;
mod sidecar;
mod uds;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use clap::Parser;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tokio::sync::watch;
use tonic::transport::Channel;

use connect::connect;
use drive::{Driver, Plan, Rpc};
use prom::{Scraper, Snapshot};
use report::{Inputs, Report, Samples, Warmup};
use sidecar::Sidecar;
use workload::{Flags, Loaded};

/// Exit code when a request did not succeed.
const EXIT_NOT_OK: u8 = 1;
/// Exit code when the run could not be made (bad flags, no server).
const EXIT_SETUP: u8 = 2;
/// Run length when neither `--duration` nor `--requests` is given.
const DEFAULT_DURATION: Duration = Duration::from_secs(30);

/// Load generator for the context-assembler sidecar: replays a workload of
/// prefix families x users x turns over gRPC and reports throughput, latency
/// percentiles and the server's CPU, memory and per-phase time.
#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    version,
    after_help = "Exit status: 0 when every request was answered OK and well-formed, 1 when one was not \
                  (see --expect-ok) or a spawned sidecar did not exit cleanly, 2 when the run could not be made."
)]
struct Args {
    /// gRPC address of a running sidecar: http://host:port, or
    /// unix:/absolute/path for one listening on a Unix socket (ignored with
    /// --spawn).
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// Prometheus endpoint of the sidecar (the server default is port 9464),
    /// or `off` (ignored with --spawn).
    #[arg(long, default_value = "http://127.0.0.1:9464/metrics")]
    metrics_url: String,
    /// HTTP/2 connections; calls are spread over them round-robin (a stream
    /// stays on one).
    #[arg(long, default_value_t = 2)]
    connections: usize,
    /// Calls in flight at most (one worker each). The server sheds beyond its
    /// --max-concurrency (64 by default).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Requests per second on an open-loop schedule (a request sent late
    /// because every worker was busy is timed from when it was due, so
    /// queueing shows in the latency); 0 = closed loop, as fast as the
    /// concurrency allows.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// How long to send, e.g. 30s, 500ms, 10m, 1h (30s when --requests is
    /// not given either).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How many requests to send (the workload repeats as needed); with
    /// --duration, whichever ends first.
    #[arg(long)]
    requests: Option<u64>,
    /// The RPC.
    #[arg(long, value_enum, default_value_t = Rpc::Assemble)]
    rpc: Rpc,
    /// Consecutive requests per AssembleBatch call (--rpc batch).
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    #[command(flatten)]
    shape: Flags,
    /// Send every distinct request of the workload once (unary, not
    /// measured) before measuring, so the server's caches are warm.
    #[arg(long)]
    warmup: bool,
    /// Make every request unique (a per-request nonce before every
    /// segment's, item's and query's content; ids kept) so no server cache
    /// can hit.
    #[arg(long)]
    cold: bool,
    /// Deadline per call in ms (grpc-timeout; per message on a stream).
    #[arg(long, default_value_t = 10_000)]
    deadline_ms: u64,
    /// Seconds between progress lines on stderr (and samples); 0 = none.
    #[arg(long, default_value_t = 5)]
    progress_secs: u64,
    /// Also write the final report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a CSV row per progress tick to this file (for soak runs).
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Write a sample of the OK answers (every 7th request, up to
    /// --answers-max) to this file, one JSON object per line (rpc,
    /// requestId, tokenizer, totalTokens, budget, messages), for a recount
    /// with the reference tokenizer (tests/reference/answers_check.py).
    #[arg(long)]
    answers: Option<PathBuf>,
    /// The most answers --answers keeps.
    #[arg(long, default_value_t = 200)]
    answers_max: usize,
    /// Start this sidecar binary on ports chosen by the kernel, drive it, and
    /// stop it with SIGTERM at the end.
    #[arg(long)]
    spawn: Option<PathBuf>,
    /// An extra argument for the spawned sidecar (repeat for several), e.g.
    /// --server-arg=--max-concurrency=256.
    #[arg(long, allow_hyphen_values = true, requires = "spawn")]
    server_arg: Vec<String>,
    /// Exit 1 unless every request was answered OK and well-formed.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    expect_ok: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_SETUP);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_NOT_OK),
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::from(EXIT_SETUP)
        }
    }
}

/// Parses `30s`, `500ms`, `10m`, `1h` or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 30s"))?;
    let secs = match unit.trim() {
        "ms" => n / 1e3,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => return Err(format!("unknown unit {other:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| e.to_string())
}

fn validate(args: &Args) -> anyhow::Result<()> {
    ensure!(args.connections >= 1, "--connections must be at least 1");
    ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    ensure!(args.batch_size >= 1, "--batch-size must be at least 1");
    ensure!(
        args.rate.is_finite() && args.rate >= 0.0,
        "--rate must be 0 or a positive number"
    );
    ensure!(args.deadline_ms >= 1, "--deadline-ms must be at least 1");
    ensure!(
        args.samples.is_none() || args.progress_secs > 0,
        "--samples needs progress ticks: --progress-secs must be positive"
    );
    ensure!(
        args.duration != Some(Duration::ZERO),
        "--duration must be positive"
    );
    Ok(())
}

/// The whole run; `Ok(false)` when a request failed under `--expect-ok`.
async fn run(args: Args) -> anyhow::Result<bool> {
    validate(&args)?;
    let Loaded {
        requests: workload,
        described,
        sessions,
        offers,
    } = workload::load(&args.shape)?;
    let Target {
        sidecar,
        grpc: target,
        metrics_url,
    } = target(&args)?;
    let scraper = metrics_url
        .as_deref()
        .map(Scraper::new)
        .transpose()?
        .map(Arc::new);
    let clients = connect(&target, args.connections).await?;
    let stop = stop_on_ctrl_c();

    let deadline = Duration::from_millis(args.deadline_ms);
    let warmup = match (args.warmup, args.cold) {
        (false, _) => Warmup::Off,
        (true, true) => Warmup::SkippedCold,
        (true, false) => warm_up(&args, &workload, &clients, deadline, stop.clone()).await?,
    };
    let plan = plan(&args, deadline, sessions);
    eprintln!("loadgen: {described} via {}", plan_line(&plan));

    let start = scrape(scraper.as_ref()).await;
    let driver = Arc::new(Driver::new(plan.clone(), workload.clone(), stop.clone()).measuring_kept(offers));
    let Measured {
        elapsed,
        rss_max,
        end,
    } = measure(&args, &driver, &clients, scraper.as_ref(), start.as_ref()).await?;

    let stats = driver.stats();
    let report = Report::new(Inputs {
        workload: described.clone(),
        plan: &plan,
        target,
        connections: args.connections,
        spawned: args.spawn.as_ref().map(|p| p.display().to_string()),
        warmup: warmup.clone(),
        elapsed,
        sent: driver.sent(),
        stats: &stats,
        interrupted: *stop.borrow(),
        start: start.as_ref(),
        end: end.as_ref(),
        rss_max,
        sessions: (plan.sessions > 0)
            .then(|| sessions::figures(&driver.session_answers(), sessions::encoding(&workload)))
            .flatten(),
        kept: driver.kept_share(),
    });
    write_report(&args, &report, &driver)?;

    let mut failures = Vec::new();
    if let Some(s) = sidecar {
        failures.extend(stop_sidecar(s).await?);
    }
    if args.expect_ok {
        failures.extend(not_ok(&stats, &warmup));
    }
    for f in &failures {
        eprintln!("loadgen: FAIL: {f}");
    }
    Ok(failures.is_empty())
}

/// Where the run sends its calls and reads the server's metrics.
struct Target {
    /// The sidecar this run started (`--spawn`), if any.
    sidecar: Option<Sidecar>,
    /// The gRPC target.
    grpc: String,
    /// The Prometheus endpoint, unless metrics are off.
    metrics_url: Option<String>,
}

/// The sidecar `--spawn` starts, on ports the kernel chooses, or else the
/// addresses of the flags.
fn target(args: &Args) -> anyhow::Result<Target> {
    let sidecar = match &args.spawn {
        Some(binary) => Some(
            tokio::task::block_in_place(|| Sidecar::spawn(binary, &args.server_arg)).context("--spawn")?,
        ),
        None => None,
    };
    let (grpc, metrics_url) = match &sidecar {
        Some(s) => (
            format!("http://{}", s.grpc),
            s.metrics.map(|m| format!("http://{m}/metrics")),
        ),
        None => (
            args.addr.clone(),
            (args.metrics_url != "off").then(|| args.metrics_url.clone()),
        ),
    };
    if let Some(s) = &sidecar {
        eprintln!(
            "loadgen: spawned the sidecar (pid {}) on {grpc}",
            s.pid().unwrap_or_default()
        );
    }
    Ok(Target {
        sidecar,
        grpc,
        metrics_url,
    })
}

/// A flag Ctrl-C sets: it ends the run early, and what was measured is
/// still reported.
fn stop_on_ctrl_c() -> watch::Receiver<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("loadgen: interrupted: finishing the calls in flight");
            let _ = stop_tx.send(true);
        }
    });
    stop
}

/// The measured run's plan, of the flags.
fn plan(args: &Args, deadline: Duration, sessions: usize) -> Plan {
    Plan {
        rpc: args.rpc,
        concurrency: args.concurrency,
        rate: args.rate,
        batch_size: args.batch_size,
        duration: match (args.duration, args.requests) {
            (None, None) => Some(DEFAULT_DURATION),
            (d, _) => d,
        },
        requests: args.requests,
        deadline,
        cold: args.cold,
        sessions,
        sample_answers: if args.answers.is_some() {
            args.answers_max
        } else {
            0
        },
    }
}

/// How `plan` sends, for the line announcing the run.
fn plan_line(plan: &Plan) -> String {
    format!(
        "{}, concurrency {}, {}",
        plan.rpc.method(),
        plan.concurrency,
        match (plan.duration, plan.requests) {
            (Some(d), Some(n)) => format!("for {d:?} or {n} requests"),
            (Some(d), None) => format!("for {d:?}"),
            (None, Some(n)) => format!("{n} requests"),
            (None, None) => String::new(),
        }
    )
}

/// What the measured run saw.
struct Measured {
    /// From the start to the last answer.
    elapsed: Duration,
    /// The largest server RSS a progress tick saw.
    rss_max: Option<f64>,
    /// The scrape after the run.
    end: Option<Snapshot>,
}

/// Runs `driver` to the end, with progress ticks (each a samples row, when
/// the flags ask for them) from the scrape `start` on, then scrapes the
/// server and writes the last samples row.
async fn measure(
    args: &Args,
    driver: &Arc<Driver>,
    clients: &[AssemblerClient<Channel>],
    scraper: Option<&Arc<Scraper>>,
    start: Option<&Snapshot>,
) -> anyhow::Result<Measured> {
    let samples = args.samples.as_deref().map(Samples::create).transpose()?;
    let (done_tx, done) = watch::channel(false);
    let ticker = (args.progress_secs > 0).then(|| {
        tokio::spawn(progress(
            driver.clone(),
            Duration::from_secs(args.progress_secs),
            scraper.cloned(),
            start.cloned(),
            samples,
            done,
        ))
    });
    let elapsed = driver.clone().run(clients).await?;
    let _ = done_tx.send(true);
    let (rss_max, samples) = match ticker {
        Some(t) => t.await??,
        None => (None, None),
    };
    let end = scrape(scraper).await;
    if let Some(mut samples) = samples {
        samples.row(&driver.window(), end.as_ref())?;
    }
    Ok(Measured {
        elapsed,
        rss_max,
        end,
    })
}

/// Prints the report, and writes it as JSON and the sampled answers where
/// the flags ask.
fn write_report(args: &Args, report: &Report<'_>, driver: &Driver) -> anyhow::Result<()> {
    print!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.answers {
        let lines: String = driver.answers().iter().map(|a| format!("{a}\n")).collect();
        std::fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Stops the spawned sidecar with SIGTERM and reports how it exited: a
/// failure unless cleanly.
async fn stop_sidecar(sidecar: Sidecar) -> anyhow::Result<Option<String>> {
    let status = tokio::task::spawn_blocking(move || sidecar.stop()).await??;
    println!("{:<22}{status} after SIGTERM", "sidecar exit:");
    Ok((!status.success()).then(|| format!("the spawned sidecar exited with {status}")))
}

/// What `--expect-ok` fails on.
fn not_ok(stats: &drive::Stats, warmup: &Warmup) -> Vec<String> {
    let mut failures = Vec::new();
    if stats.errors() > 0 {
        failures.push(format!(
            "{} requests were not answered OK and well-formed",
            stats.errors()
        ));
    }
    if let Warmup::Done { errors, .. } = warmup
        && *errors > 0
    {
        failures.push(format!("{errors} warm-up requests failed"));
    }
    if stats.ok == 0 {
        failures.push("no request was answered OK".to_owned());
    }
    failures
}

/// One scrape, if metrics are on and the scrape works.
async fn scrape(scraper: Option<&Arc<Scraper>>) -> Option<Snapshot> {
    match scraper {
        Some(s) => s.scrape().await,
        None => None,
    }
}

/// Sends every distinct request once, unary, not measured.
async fn warm_up(
    args: &Args,
    workload: &Arc<[pb::AssembleRequest]>,
    clients: &[AssemblerClient<Channel>],
    deadline: Duration,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Warmup> {
    let plan = Plan {
        rpc: Rpc::Assemble,
        concurrency: args.concurrency,
        rate: 0.0,
        batch_size: 1,
        duration: None,
        requests: Some(workload.len() as u64),
        deadline,
        cold: false,
        sample_answers: 0,
        sessions: 0,
    };
    eprintln!("loadgen: warm-up: {} distinct requests", workload.len());
    let driver = Arc::new(Driver::new(plan, workload.clone(), stop));
    let elapsed = driver.clone().run(clients).await?;
    let stats = driver.stats();
    Ok(Warmup::Done {
        requests: stats.completed(),
        ok: stats.ok,
        errors: stats.errors(),
        elapsed,
    })
}

/// Every `every`, until `done`: a progress line on stderr, a samples row,
/// and the largest server RSS seen. Returns that RSS and the samples file.
async fn progress(
    driver: Arc<Driver>,
    every: Duration,
    scraper: Option<Arc<Scraper>>,
    mut before: Option<Snapshot>,
    mut samples: Option<Samples>,
    mut done: watch::Receiver<bool>,
) -> anyhow::Result<(Option<f64>, Option<Samples>)> {
    let mut rss_max: Option<f64> = None;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = done.wait_for(|d| *d) => break,
        }
        let window = driver.window();
        let now = scrape(scraper.as_ref()).await;
        if let Some(r) = report::rss(now.as_ref()) {
            rss_max = Some(rss_max.map_or(r, |m| m.max(r)));
        }
        eprintln!(
            "{}",
            report::progress_line(&window, now.as_ref(), before.as_ref())
        );
        if let Some(s) = &mut samples {
            s.row(&window, now.as_ref())?;
        }
        if now.is_some() {
            before = now;
        }
    }
    Ok((rss_max, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn flags_parse() {
        let args = Args::try_parse_from([
            "loadgen",
            "--rpc",
            "batch",
            "--spawn",
            "x",
            "--server-arg",
            "--max-concurrency=256",
            "--expect-ok",
            "false",
        ]);
        let args = args.map_err(|e| e.to_string());
        assert!(
            args.as_ref().is_ok_and(|a| a.rpc == Rpc::Batch
                && a.server_arg == ["--max-concurrency=256"]
                && !a.expect_ok)
        );
        assert!(Args::try_parse_from(["loadgen", "--server-arg", "x"]).is_err());
        let defaults = Args::try_parse_from(["loadgen"]).map_err(|e| e.to_string());
        assert!(defaults.is_ok_and(|a| a.expect_ok && a.concurrency == 16 && a.connections == 2));
    }

    /// The requests of `flags`, their description and session count.
    fn requests_of(flags: &[&str]) -> (Vec<pb::AssembleRequest>, String, usize) {
        let args = Args::try_parse_from(std::iter::once("loadgen").chain(flags.iter().copied()))
            .map_err(|e| e.to_string())
            .unwrap();
        let loaded = workload::load(&args.shape).map_err(|e| e.to_string()).unwrap();
        (loaded.requests.to_vec(), loaded.described, loaded.sessions)
    }

    #[test]
    fn agent_sessions_are_the_agent_workload_at_its_budgets() {
        let small = ["--workload", "agent-sessions", "--users", "2", "--turns", "3"];
        let (requests, described, sessions) = requests_of(&small);
        assert_eq!((requests.len(), sessions), (6, 2));
        assert!(described.contains("of agent turns"), "{described}");
        let system = &requests[0].static_segments[0].content;
        assert!((5_000..5_200).contains(&system.len()), "{}", system.len());
        for r in &requests {
            assert_eq!(r.model, "claude-sonnet-4-5");
            assert_eq!(r.max_input_tokens, Some(8_000));
        }
        // Interleaved: request 1 of session 0 (ticket 2) carries step 0, its
        // thinking and the tool result.
        assert_eq!(requests[2].session_id, "session-0");
        let items = &requests[2].blocks[0].items;
        assert!(items.iter().any(|i| !i.thinking.is_empty()));
        assert!(items.iter().any(|i| !i.tool_name.is_empty()));
        for budget in ["8000", "16000", "32000"] {
            let flags = [&small[..], &["--prompt-tokens", budget]].concat();
            let (requests, _, _) = requests_of(&flags);
            assert!(
                requests
                    .iter()
                    .all(|r| r.max_input_tokens.map(|b| b.to_string()).as_deref() == Some(budget))
            );
        }
        // The other session workloads keep their defaults.
        let (chat, _, _) = requests_of(&["--workload", "chat-sessions", "--users", "1", "--turns", "1"]);
        assert_eq!(
            (chat[0].model.as_str(), chat[0].max_input_tokens),
            ("gpt-4o", Some(4_000))
        );
        assert!(chat[0].static_segments[0].content.len() < 4_200);
    }

    #[test]
    fn fresh_is_new_text_at_the_budget_asked_and_measures_what_is_kept() {
        for (budget, want) in [(None, 4_000), (Some("32000"), 32_000)] {
            let mut flags = vec!["--workload", "fresh", "--users", "3"];
            flags.extend(budget.iter().flat_map(|b| ["--prompt-tokens", b]));
            let args = Args::try_parse_from(std::iter::once("loadgen").chain(flags))
                .map_err(|e| e.to_string())
                .unwrap();
            let loaded = workload::load(&args.shape).map_err(|e| e.to_string()).unwrap();
            assert_eq!((loaded.requests.len(), loaded.sessions), (3, 0));
            assert!(
                loaded.described.contains("fresh requests"),
                "{}",
                loaded.described
            );
            assert!(loaded.requests.iter().all(|r| r.max_input_tokens == Some(want)));
            assert_ne!(loaded.requests[0].query, loaded.requests[1].query);
            assert!(loaded.offers.is_some());
        }
        let offer = Args::try_parse_from(["loadgen", "--workload", "fresh", "--offer", "2"]).unwrap();
        assert!(workload::load(&offer.shape).is_err(), "--offer is the replay's");
    }
}
