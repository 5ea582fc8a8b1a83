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

mod drive;
mod hist;
mod kept;
mod prom;
mod report;
mod sessions;
mod sidecar;
mod uds;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use clap::Parser;
use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::sessions::{Sessions, Turns, with_evidence};
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use drive::{Driver, Plan, Rpc};
use kept::Offers;
use prom::{Scraper, Snapshot};
use report::{Inputs, Report, Samples, Warmup};
use sidecar::Sidecar;

/// Exit code when a request did not succeed.
const EXIT_NOT_OK: u8 = 1;
/// Exit code when the run could not be made (bad flags, no server).
const EXIT_SETUP: u8 = 2;
/// How long to wait for the server to accept connections and be SERVING.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Run length when neither `--duration` nor `--requests` is given.
const DEFAULT_DURATION: Duration = Duration::from_secs(30);

/// Which requests to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Workload {
    /// Prefix families x users x turns, evidence by Zipf popularity.
    Replay,
    /// Conversations of chat-like turns, one exchange added per request.
    ChatSessions,
    /// Chat conversations that overflow their budget, each request also
    /// carrying 4 to 10 evidence passages drawn by Zipf popularity from a
    /// corpus of 200, under a 9,000-character system prompt: issue 53's
    /// shape (12 sessions of 20 requests by default).
    RagSessions,
    /// Conversations whose exchanges carry a tool call and a long tool
    /// result (code or logs).
    ToolSessions,
    /// Agent loops: each request adds one step, an assistant turn with its
    /// signed thinking and a tool call, and the call's result (code or
    /// prose); the query is a short nudge to take the next step.
    AgentSessions,
    /// New text in every request: a stable system prompt, then new
    /// documents (capped at 60% of the budget), a new conversation and the
    /// query, about 1.15x the budget offered and most of it kept (the
    /// report measures how much).
    Fresh,
}

/// The session workload's defaults: sessions, requests per session,
/// budget, and the system prompt's characters.
const SESSIONS: (usize, usize, usize, usize) = (100, 20, 4000, 4000);
/// The agent workload's defaults (issue 37): its sessions run longer (40
/// steps of about 1,200 tokens outgrow a 32k budget), so fewer of them keep
/// the workload's memory near the others' (each request repeats its
/// session, about 100 KB on average); its budgets start at 8k, and an
/// agent's system prompt is 5,000 characters.
const AGENT_SESSIONS: (usize, usize, usize, usize) = (25, 40, 8000, 5000);

/// The evidence sessions' defaults (issue 53's shape).
const RAG_SESSIONS: (usize, usize, usize, usize) = (12, 20, 4000, 9000);
/// The seed of the evidence sessions' corpus and draws.
const EVIDENCE_SEED: u64 = 531;

/// A workload ready to send.
struct Loaded {
    /// The requests in the order tickets take them.
    requests: Arc<[pb::AssembleRequest]>,
    /// A line for the report.
    described: String,
    /// Its number of sessions (0 but for the session workloads).
    sessions: usize,
    /// The fresh workload: each request's offer, to measure what is kept.
    offers: Option<Offers>,
}

/// The fresh workload's budget when `--prompt-tokens` is not given.
const FRESH_BUDGET: usize = 4_000;

/// The workload of the flags.
fn workload(args: &Args) -> anyhow::Result<Loaded> {
    let turns = match args.workload {
        Workload::Replay => {
            let defaults = Replay::default();
            let shape = Replay {
                families: args.families.unwrap_or(defaults.families),
                users: args.users.unwrap_or(defaults.users),
                turns: args.turns.unwrap_or(defaults.turns),
                prompt_tokens: args.prompt_tokens.unwrap_or(defaults.prompt_tokens),
                seed: args.seed.unwrap_or(defaults.seed),
                offer: usize::from(args.offer),
                ..defaults
            };
            ensure!(
                !shape.is_empty(),
                "the workload is empty: families, users and turns must be positive"
            );
            let requests = shape
                .requests()
                .into_iter()
                .map(|r| pb::AssembleRequest::from(r.request))
                .collect();
            return Ok(Loaded {
                requests,
                described: shape.describe(),
                sessions: 0,
                offers: None,
            });
        }
        _ if args.offer > 1 => anyhow::bail!("--offer applies to the replay workload only"),
        Workload::Fresh => {
            let shape = Fresh {
                requests: args.users.unwrap_or(Fresh::REQUESTS),
                budget: u32::try_from(args.prompt_tokens.unwrap_or(FRESH_BUDGET))
                    .context("--prompt-tokens")?,
                seed: args.seed.unwrap_or(7),
            };
            ensure!(
                shape.requests > 0,
                "the workload is empty: --users must be positive"
            );
            let requests = shape.requests();
            let wire: Arc<[pb::AssembleRequest]> =
                requests.iter().cloned().map(pb::AssembleRequest::from).collect();
            let started = Instant::now();
            let offers = Offers::count(&requests, sessions::encoding(&wire));
            eprintln!(
                "loadgen: counted what the {} requests offer in {:.2} s",
                requests.len(),
                started.elapsed().as_secs_f64()
            );
            return Ok(Loaded {
                requests: wire,
                described: shape.describe(),
                sessions: 0,
                offers: Some(offers),
            });
        }
        Workload::ChatSessions | Workload::RagSessions => Turns::Chat,
        Workload::ToolSessions => Turns::ToolHeavy,
        Workload::AgentSessions => Turns::Agent,
    };
    let evidence = args.workload == Workload::RagSessions;
    let (sessions, per_session, budget, system_chars) = match turns {
        Turns::Agent => AGENT_SESSIONS,
        Turns::Chat if evidence => RAG_SESSIONS,
        Turns::Chat | Turns::ToolHeavy => SESSIONS,
    };
    let shape = Sessions {
        sessions: args.users.unwrap_or(sessions),
        requests: args.turns.unwrap_or(per_session),
        budget: u32::try_from(args.prompt_tokens.unwrap_or(budget)).context("--prompt-tokens")?,
        system_chars,
        turns,
        policy: "",
        // The evidence sessions are examples/session_next.rs's.
        seed: args.seed.unwrap_or(if evidence { 53 } else { 7 }),
    };
    ensure!(
        shape.sessions > 0 && shape.requests > 0,
        "the workload is empty: sessions (--users) and requests (--turns) must be positive"
    );
    // Request r of session s at r * sessions + s; each converted once, in
    // place of its domain form, not beside it (the default agent workload
    // holds about 100 MB of text).
    let mut by_session = shape.requests();
    if evidence {
        with_evidence(&mut by_session, EVIDENCE_SEED);
    }
    let mut by_session: Vec<_> = by_session.into_iter().map(Vec::into_iter).collect();
    let mut requests = Vec::with_capacity(shape.sessions * shape.requests);
    for _ in 0..shape.requests {
        requests.extend(
            by_session
                .iter_mut()
                .filter_map(Iterator::next)
                .map(pb::AssembleRequest::from),
        );
    }
    let describe = format!(
        "{} sessions x {} requests of {} turns{}, a {}-token budget, a {}-character system prompt; each request \
         repeats its session's conversation and adds one exchange (an agent: one step); sessions interleaved",
        shape.sessions,
        shape.requests,
        turns.name(),
        if evidence {
            " and 4-10 evidence passages (Zipf)"
        } else {
            ""
        },
        shape.budget,
        system_chars
    );
    Ok(Loaded {
        requests: requests.into(),
        described: describe,
        sessions: shape.sessions,
        offers: None,
    })
}
/// HTTP/2 windows: answers carry whole prompts, so let one in one round trip.
const STREAM_WINDOW_BYTES: u32 = 8 << 20;
/// See [`STREAM_WINDOW_BYTES`].
const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;
/// The largest message sent or received; the server's own limit applies.
const MAX_MESSAGE_BYTES: usize = 256 << 20;

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
    /// The workload: the replay (families x users x turns), or sessions
    /// of chat-like, tool-output-heavy or agent turns (--users sessions of
    /// --turns requests, each adding one exchange, or an agent's step, to
    /// the conversation it repeats; with --cold, each pass over them brings
    /// new sessions).
    #[arg(long, value_enum, default_value_t = Workload::Replay)]
    workload: Workload,
    /// Prefix families of the replay workload [default: the workload's, 8].
    #[arg(long)]
    families: Option<usize>,
    /// Users per family [default: the workload's, 100], or sessions [100;
    /// evidence sessions 12; agent sessions 25], or the fresh workload's
    /// requests [200].
    #[arg(long)]
    users: Option<usize>,
    /// Turns per user [default: the workload's, 6], or requests per
    /// session [20; agent sessions 40].
    #[arg(long)]
    turns: Option<usize>,
    /// The request budget and the prompt's target size in tokens [default:
    /// the workload's, 8000; sessions 4000; agent sessions 8000; fresh
    /// 4000 (measured at 4000 and 32000)].
    #[arg(long)]
    prompt_tokens: Option<usize>,
    /// Replay only: how many budgets of content each request offers (1: a
    /// little over the budget; 8: about 8x, as many more evidence items of
    /// the same size). With --cold, the cold-content workload.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    offer: u16,
    /// The workload generator's seed [default: the workload's, 7].
    #[arg(long)]
    seed: Option<u64>,
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
    } = workload(&args)?;

    let sidecar = match &args.spawn {
        Some(binary) => Some(
            tokio::task::block_in_place(|| Sidecar::spawn(binary, &args.server_arg)).context("--spawn")?,
        ),
        None => None,
    };
    let (target, metrics_url) = match &sidecar {
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
            "loadgen: spawned the sidecar (pid {}) on {target}",
            s.pid().unwrap_or_default()
        );
    }
    let scraper = metrics_url
        .as_deref()
        .map(Scraper::new)
        .transpose()?
        .map(Arc::new);
    let clients = connect(&target, args.connections).await?;

    // Ctrl-C ends the run early; what was measured is still reported.
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("loadgen: interrupted: finishing the calls in flight");
            let _ = stop_tx.send(true);
        }
    });

    let deadline = Duration::from_millis(args.deadline_ms);
    let warmup = match (args.warmup, args.cold) {
        (false, _) => Warmup::Off,
        (true, true) => Warmup::SkippedCold,
        (true, false) => warm_up(&args, &workload, &clients, deadline, stop.clone()).await?,
    };

    let plan = Plan {
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
    };
    eprintln!(
        "loadgen: {} via {}, concurrency {}, {}",
        described,
        plan.rpc.method(),
        plan.concurrency,
        match (plan.duration, plan.requests) {
            (Some(d), Some(n)) => format!("for {d:?} or {n} requests"),
            (Some(d), None) => format!("for {d:?}"),
            (None, Some(n)) => format!("{n} requests"),
            (None, None) => String::new(),
        }
    );

    let start = scrape(scraper.as_ref()).await;
    let driver = Arc::new(Driver::new(plan.clone(), workload.clone(), stop.clone()).measuring_kept(offers));
    let samples = args.samples.as_deref().map(Samples::create).transpose()?;
    let (done_tx, done) = watch::channel(false);
    let ticker = (args.progress_secs > 0).then(|| {
        tokio::spawn(progress(
            driver.clone(),
            Duration::from_secs(args.progress_secs),
            scraper.clone(),
            start.clone(),
            samples,
            done,
        ))
    });
    let elapsed = driver.clone().run(&clients).await?;
    let _ = done_tx.send(true);
    let (rss_max, samples) = match ticker {
        Some(t) => t.await??,
        None => (None, None),
    };
    let end = scrape(scraper.as_ref()).await;
    if let Some(mut samples) = samples {
        samples.row(&driver.window(), end.as_ref())?;
    }

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
    print!("{}", report.text());
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report.json())?;
        std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let Some(path) = &args.answers {
        let lines: String = driver.answers().iter().map(|a| format!("{a}\n")).collect();
        std::fs::write(path, lines).with_context(|| format!("cannot write {}", path.display()))?;
    }

    let mut failures = Vec::new();
    if let Some(s) = sidecar {
        let status = tokio::task::spawn_blocking(move || s.stop()).await??;
        println!("{:<22}{status} after SIGTERM", "sidecar exit:");
        if !status.success() {
            failures.push(format!("the spawned sidecar exited with {status}"));
        }
    }
    if args.expect_ok {
        failures.extend(not_ok(&stats, &warmup));
    }
    for f in &failures {
        eprintln!("loadgen: FAIL: {f}");
    }
    Ok(failures.is_empty())
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

/// Opens `n` HTTP/2 connections to `target` and waits until the server is
/// SERVING (it loads its vocabularies first).
async fn connect(target: &str, n: usize) -> anyhow::Result<Vec<AssemblerClient<Channel>>> {
    let socket = target.strip_prefix("unix:").map(uds::dial);
    // On a Unix socket the URI names only the :authority; the connector dials.
    let uri = if socket.is_some() {
        "http://localhost"
    } else {
        target
    };
    let endpoint = Endpoint::from_shared(uri.to_owned())
        .with_context(|| format!("bad --addr {target:?}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    let ready_by = Instant::now() + READY_TIMEOUT;
    let mut first = None;
    let mut told = false;
    let open = async || match &socket {
        Some(dial) => endpoint.connect_with_connector(dial.clone()).await,
        None => endpoint.connect().await,
    };
    while first.is_none() {
        match open().await {
            Ok(channel) => first = Some(channel),
            Err(e) if Instant::now() < ready_by => {
                if !told {
                    eprintln!("loadgen: waiting for {target} ({e})");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("cannot connect to {target}: {e}"),
        }
    }
    let Some(first) = first else {
        bail!("cannot connect to {target}")
    };
    let mut health = HealthClient::new(first.clone());
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status);
        if status.as_ref().is_ok_and(|s| *s == ServingStatus::Serving as i32) {
            break;
        }
        ensure!(
            Instant::now() < ready_by,
            "{target} is not SERVING after {READY_TIMEOUT:?} (health: {status:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each connect() is its own HTTP/2 connection.
    let mut channels = vec![first];
    for _ in 1..n {
        channels.push(
            open()
                .await
                .with_context(|| format!("cannot connect to {target}"))?,
        );
    }
    Ok(channels
        .into_iter()
        .map(|c| {
            AssemblerClient::new(c)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        })
        .collect())
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
        let loaded = workload(&args).map_err(|e| e.to_string()).unwrap();
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
            let loaded = workload(&args).map_err(|e| e.to_string()).unwrap();
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
        assert!(workload(&offer).is_err(), "--offer is the replay's");
    }
}
