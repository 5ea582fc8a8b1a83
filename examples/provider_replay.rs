//! Counting by the provider, replayed (issue 52): sessions of one kind of
//! content each (English prose, code, Chinese, JSON, German, a mixture),
//! each request the session's system prompt, every turn so far and a new
//! question, fitted for claude-sonnet-5 (generation claude-2026) to a
//! budget the conversation overflows, through the library in process, with
//! a stand-in of Anthropic's counting endpoint (`tests/provider_count/standin.rs`,
//! answering after `LATENCY_MS`, 150 by default) that counts each text with
//! a deterministic tokenizer whose ratio depends on content. Between two
//! requests of a session the replay waits until the counter is idle (a
//! person reads the answer and types the next question: seconds).
//!
//! Reports, side by side:
//! - by request index in its session: the share of prompt tokens counted by
//!   the provider (the rest estimated), and the same share over the texts
//!   an earlier request of the session already sent (the new exchange is
//!   estimated until it is counted), and the share on the same sessions
//!   replayed from a cold start on a second assembler whose gateway
//!   reports each answer with its usage (`ReportUsageRequest.answer`: the
//!   provider counts it before the next request sends it). Both passes
//!   report each request's usage, from which the estimate learns;
//! - the content estimate's relative error |estimate − stand-in| / stand-in
//!   on each piece as the requests estimated it, p50 and p99 by content
//!   class: the generation's prior (the first 20 pieces, and the prior
//!   applied to every piece) against what the calibrator had learned from
//!   100 pieces on (pieces first seen after the 100th observation);
//! - utilization: the stand-in's count of each prompt against its budget
//!   (mean, 10th percentile, worst), and prompts over budget (must be 0);
//! - the request path: thread CPU per `Assemble` with counting configured
//!   (the lookups, the content estimate) against the same requests on an
//!   assembler without a counter (cl100k plus the margin), medians of
//!   `ROUNDS` (5) rounds; and the CPU the background counting spent beside
//!   them (the process's CPU less the requests' own).
//!
//!   cargo run --release --example provider_replay [SESSIONS_PER_KIND] [REQUESTS]
//!   LATENCY_MS=0 BUDGET=4000 ROUNDS=5 cargo run --release --example provider_replay
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "support/process.rs"]
#[allow(dead_code)]
mod process;
#[path = "../tests/provider_count/standin.rs"]
#[allow(dead_code)]
mod standin;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use context_assembler::assemble::Assembler;
use context_assembler::assemble::learned::Learned;
use context_assembler::config::default_catalog;
use context_assembler::prompt::{AssembleRequest, Block, BlockKind, Item, Segment, SegmentKind};
use context_assembler::prompt_cache::feedback::UsageReport;
use context_assembler::provider_count::{Api, Secret, Settings};
use context_assembler::tokens::estimate::{ContentClass, Features, Generation};
use context_assembler::vocab::Role;
use context_assembler::workload::{self, Rng};
use standin::{KEY, Mode, StandIn, text_tokens};

const MODEL: &str = "claude-sonnet-5";
const GENERATION: &str = "claude-2026";
const KINDS: [&str; 6] = ["prose", "code", "cjk", "json", "german", "mixed"];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One text of `kind`, about `bytes` long.
fn text(kind: &str, rng: &mut Rng, bytes: usize) -> String {
    match kind {
        "prose" => workload::prose(rng, bytes),
        "code" => workload::code(rng, bytes),
        "cjk" => (0..bytes / 3)
            .map(|_| match rng.below(12) {
                0 => '，',
                1 => '。',
                _ => char::from_u32(0x4E00 + rng.below(0x5000) as u32).unwrap_or('字'),
            })
            .collect(),
        "json" => {
            let mut rows = Vec::new();
            let mut len = 0;
            while len < bytes {
                let row = format!(
                    "{{\"id\":{},\"sku\":\"A-{}\",\"name\":\"{}\",\"price\":{}.{:02},\"in_stock\":{}}}",
                    rng.below(100_000),
                    rng.below(10_000),
                    rng.pick(&["bolt", "washer", "hinge", "bracket", "gasket"]),
                    rng.below(1000),
                    rng.below(100),
                    rng.below(2) == 0
                );
                len += row.len() + 1;
                rows.push(row);
            }
            format!("[{}]", rows.join(","))
        }
        "german" => {
            const WORDS: [&str; 24] = [
                "Die",
                "Größe",
                "der",
                "Straßenbahn",
                "wird",
                "täglich",
                "über",
                "die",
                "Qualität",
                "geprüft",
                "während",
                "Bürger",
                "für",
                "schöne",
                "Haltestellen",
                "und",
                "Verbindungen",
                "abstimmen",
                "Überprüfung",
                "Fahrgäste",
                "pünktlich",
                "ankommen",
                "müssen",
                "Verkehr",
            ];
            let mut s = String::new();
            while s.len() < bytes {
                s.push_str(rng.pick(&WORDS));
                s.push_str(if rng.below(10) == 0 { ". " } else { " " });
            }
            s
        }
        _ => {
            let kind = ["prose", "code", "cjk", "json", "german"][rng.below(5)];
            text(kind, rng, bytes)
        }
    }
}

/// A session: its system prompt, its questions and the answers to them;
/// each request asks the next question after every exchange before it.
struct Session {
    kind: &'static str,
    system: String,
    questions: Vec<String>,
    answers: Vec<String>,
}

fn sessions(per_kind: usize, requests: usize) -> Vec<Session> {
    let mut out = Vec::new();
    for (k, kind) in KINDS.into_iter().enumerate() {
        for s in 0..per_kind {
            let mut rng = Rng::new(1000 * k as u64 + s as u64);
            out.push(Session {
                kind,
                system: workload::prose(&mut rng, 6000),
                questions: (0..requests).map(|_| text(kind, &mut rng, 300)).collect(),
                answers: (0..requests).map(|_| text(kind, &mut rng, 1500)).collect(),
            });
        }
    }
    out
}

/// The `n`-th request of `session` (0-based): the `n` exchanges before
/// it, then its question. What is new to it is its question and the last
/// answer.
fn request(session: &Session, n: usize, budget: u32) -> AssembleRequest {
    let items = (0..n)
        .flat_map(|i| {
            [
                (&session.questions[i], Role::User),
                (&session.answers[i], Role::Assistant),
            ]
        })
        .enumerate()
        .map(|(i, (t, role))| Item {
            id: format!("t{i}"),
            content: t.clone(),
            role: Some(role),
            trusted: true,
            ..Item::default()
        })
        .collect();
    AssembleRequest {
        request_id: format!("{}-{n}", session.kind),
        model: MODEL.to_owned(),
        max_input_tokens: Some(budget),
        static_segments: vec![Segment {
            id: "system".to_owned(),
            kind: SegmentKind::System,
            content: session.system.clone(),
        }],
        blocks: vec![Block::new("conversation", BlockKind::RecentTurns, items)],
        query: session.questions[n].clone(),
        ..AssembleRequest::default()
    }
}

fn counting(standin: &StandIn) -> Settings {
    Settings {
        api: Api::Anthropic,
        url: standin.anthropic_url(),
        api_key: Secret::new(KEY),
        requests_per_minute: 60_000,
        concurrency: 8,
        timeout: Duration::from_secs(5),
        queue: 4096,
        breaker_failures: 5,
        breaker_cooldown: Duration::from_secs(5),
        wait: Duration::ZERO,
    }
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The stand-in's count of an assembled prompt (its first message the
/// system prompt).
fn standin_count(messages: &[context_assembler::prompt::Message]) -> u32 {
    let texts: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
    match messages.first() {
        Some(m) if m.role == Role::System => StandIn::count_with(Some(texts[0]), None, &texts[1..]),
        _ => StandIn::count_with(None, None, &texts),
    }
}

/// The stand-in's count of everything the `n`-th request of `session`
/// offers: the system prompt, every exchange before it, its question.
fn offered(session: &Session, n: usize) -> u32 {
    let mut turns: Vec<&str> = (0..n)
        .flat_map(|i| [session.questions[i].as_str(), session.answers[i].as_str()])
        .collect();
    turns.push(&session.questions[n]);
    StandIn::count_with(Some(&session.system), None, &turns)
}

/// One piece as a request estimated it.
struct Estimated {
    class: ContentClass,
    /// Observations the generation had learned from when it was estimated.
    learned_from: u64,
    /// Pieces of its class estimated before it (0 for the first).
    nth_of_class: usize,
    error: f64,
    prior_error: f64,
}

#[derive(Default)]
struct Replay {
    /// By request index: (provider tokens, total tokens, provider tokens of
    /// texts sent before, stand-in tokens of texts sent before).
    by_index: Vec<(u64, u64, u64, u64)>,
    /// By request index: the stand-in's tokens of the new question, and
    /// of the whole prompt.
    question: Vec<(u64, u64)>,
    /// The stand-in's count of each prompt whose offer (every turn and the
    /// question) did not fit, against the budget.
    utilization: Vec<f64>,
    over: usize,
    pieces: Vec<Estimated>,
    request_cpu: Vec<f64>,
}

/// How a replay runs: whether it records the estimate's errors (a cold
/// start), and what the gateway reports after each answer.
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    /// Warm rounds: nothing recorded, nothing reported.
    Timing,
    /// The usage of each request reported (the estimate learns from it).
    Usage,
    /// The usage and the answer reported: the provider counts the answer
    /// before the next request sends it.
    UsageAndAnswer,
}

fn replay(asm: &Assembler, all: &[Session], requests: usize, budget: u32, pass: Pass) -> Replay {
    let learn = pass != Pass::Timing;
    let mut r = Replay {
        by_index: vec![(0, 0, 0, 0); requests],
        question: vec![(0, 0); requests],
        ..Replay::default()
    };
    let counter = asm
        .learning()
        .counter(context_assembler::tokens::provider::Provider::Anthropic);
    let estimate = asm.learning().estimates().get(GENERATION);
    let mut estimated_before: HashSet<String> = HashSet::new();
    for session in all {
        let mut sent: HashSet<String> = HashSet::new();
        for n in 0..requests {
            let req = request(session, n, budget);
            let frozen = estimate.current();
            let started = process::thread_cpu();
            let out = match asm.assemble(req) {
                Ok(out) => out,
                Err(e) => panic!(
                    "{} session, request {n}: {e:?}; estimating with {:?}",
                    session.kind, frozen.snapshot
                ),
            };
            r.request_cpu
                .push((process::thread_cpu() - started).as_secs_f64() * 1e6);
            let counted = standin_count(&out.messages);
            if offered(session, n) > budget {
                r.utilization.push(f64::from(counted) / f64::from(budget));
            }
            r.over += usize::from(counted > budget);
            let q = &mut r.question[n];
            *q = (
                q.0 + u64::from(text_tokens(&session.questions[n])),
                q.1 + u64::from(counted),
            );
            let cell = &mut r.by_index[n];
            cell.0 += u64::from(out.usage.sources.provider);
            cell.1 += u64::from(out.usage.total_tokens);
            for m in &out.messages {
                let learned = asm
                    .learning()
                    .learned()
                    .get(&Learned::key(GENERATION, &m.content));
                if learn && learned.is_none() && estimated_before.insert(m.content.clone()) {
                    let truth = f64::from(text_tokens(&m.content).max(1));
                    let f = Features::of(&m.content);
                    let class = ContentClass::of(&f);
                    r.pieces.push(Estimated {
                        class,
                        learned_from: frozen.snapshot.observations,
                        nth_of_class: r.pieces.iter().filter(|p| p.class == class).count(),
                        error: (frozen.snapshot.estimate(&f) - truth).abs() / truth,
                        prior_error: (Generation::Claude2026.prior().estimate(&f) - truth).abs() / truth,
                    });
                }
                if sent.contains(&m.content) {
                    cell.2 += u64::from(learned.unwrap_or(0));
                    cell.3 += u64::from(text_tokens(&m.content));
                }
            }
            sent.extend(out.messages.iter().map(|m| m.content.clone()));
            if learn {
                asm.report_usage(&UsageReport {
                    request_id: out.request_id.clone(),
                    provider: "anthropic".to_owned(),
                    prompt_tokens: counted,
                    answer: if pass == Pass::UsageAndAnswer {
                        session.answers[n].clone()
                    } else {
                        String::new()
                    },
                    ..UsageReport::default()
                });
            }
            // The person reads and types: the counter catches up.
            if let Some(c) = counter {
                let deadline = Instant::now() + Duration::from_secs(30);
                while (c.stats().queued > 0 || c.stats().in_flight > 0) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    r
}

fn quantiles(errors: impl Iterator<Item = f64>) -> String {
    let v: Vec<f64> = errors.collect();
    if v.is_empty() {
        return "-".to_owned();
    }
    format!(
        "{:.1}% / {:.1}% ({})",
        100.0 * percentile(v.clone(), 0.5),
        100.0 * percentile(v.clone(), 0.99),
        v.len()
    )
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let per_kind = args.first().copied().unwrap_or(4);
    let requests = args.get(1).copied().unwrap_or(12);
    let budget: u32 = env_or("BUDGET", 4000);
    let rounds: usize = env_or("ROUNDS", 5);
    let latency = Duration::from_millis(env_or("LATENCY_MS", 150));
    // The counter's runtime and the stand-in's apart, so that the CPU the
    // counting costs is read off the counter's threads alone.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(COUNTER_THREADS)
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    let provider = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("standin")
        .enable_all()
        .build()
        .unwrap();
    let standin = provider.block_on(StandIn::start());
    if !latency.is_zero() {
        standin.set_mode(Mode::Slow(latency));
    }
    let all = sessions(per_kind, requests);
    println!(
        "{} sessions ({per_kind} of each of {}), {requests} requests each, budget {budget}, {MODEL}, stand-in latency {} ms",
        all.len(),
        KINDS.join(", "),
        latency.as_millis()
    );

    // Learning from a cold start: the shares, errors and utilization.
    let asm = Assembler::new(default_catalog(), 256 << 20);
    asm.learning()
        .start(vec![("anthropic", counting(&standin))])
        .unwrap();
    let counting_before = threads_cpu(COUNTER_THREADS);
    let r = replay(&asm, &all, requests, budget, Pass::Usage);
    let counting_spent = threads_cpu(COUNTER_THREADS) - counting_before;
    let stats = asm
        .learning()
        .counter(context_assembler::tokens::provider::Provider::Anthropic)
        .unwrap()
        .stats();
    // The same sessions from a cold start on another assembler, the gateway
    // reporting each answer with its usage.
    let answered = Assembler::new(default_catalog(), 256 << 20);
    answered
        .learning()
        .start(vec![("anthropic", counting(&standin))])
        .unwrap();
    let a = replay(&answered, &all, requests, budget, Pass::UsageAndAnswer);

    let share = |provider: u64, total: u64| {
        if total > 0 {
            format!("{:.2}%", 100.0 * provider as f64 / total as f64)
        } else {
            "-".to_owned()
        }
    };
    println!(
        "\nrequest | provider-counted share of prompt tokens | of the texts sent before | with each answer reported | the new question's share"
    );
    for (i, (((provider, total, old_provider, old_total), answered), question)) in
        r.by_index.iter().zip(&a.by_index).zip(&a.question).enumerate()
    {
        println!(
            "{:>7} | {:>7} | {:>7} | {:>7} | {:>7}",
            i + 1,
            share(*provider, *total),
            share(*old_provider, *old_total),
            share(answered.0, answered.1),
            share(question.0, question.1)
        );
    }
    let from_second = |by_index: &[(u64, u64, u64, u64)]| {
        let (p, t) = by_index[1..].iter().fold((0, 0), |(p, t), c| (p + c.0, t + c.1));
        share(p, t)
    };
    let (q, t) = a.question[1..]
        .iter()
        .fold((0, 0), |(q, t), c| (q + c.0, t + c.1));
    println!(
        "requests 2 on | {} | | {} | {}",
        from_second(&r.by_index),
        from_second(&a.by_index),
        share(q, t)
    );
    println!("\nestimate error |estimate - stand-in| / stand-in, p50 / p99 (pieces)");
    println!(
        "class | prior, every piece | as estimated, first 20 pieces | as estimated, after 100 observations"
    );
    for class in ContentClass::ALL {
        let of = |p: &&Estimated| p.class == class;
        println!(
            "{} | {} | {} | {}",
            class.as_str(),
            quantiles(r.pieces.iter().filter(of).map(|p| p.prior_error)),
            quantiles(
                r.pieces
                    .iter()
                    .filter(of)
                    .filter(|p| p.learned_from < 20)
                    .map(|p| p.error)
            ),
            quantiles(
                r.pieces
                    .iter()
                    .filter(of)
                    .filter(|p| p.learned_from >= 100)
                    .map(|p| p.error)
            ),
        );
    }
    println!(
        "all | {} | {} | {}",
        quantiles(r.pieces.iter().map(|p| p.prior_error)),
        quantiles(r.pieces.iter().filter(|p| p.learned_from < 20).map(|p| p.error)),
        quantiles(r.pieces.iter().filter(|p| p.learned_from >= 100).map(|p| p.error)),
    );
    println!(
        "\nthe worst estimates after 100 observations: error (the piece's place among its class's, observations then)"
    );
    for class in ContentClass::ALL {
        let mut late: Vec<&Estimated> = r
            .pieces
            .iter()
            .filter(|p| p.class == class && p.learned_from >= 100)
            .collect();
        late.sort_by(|a, b| b.error.total_cmp(&a.error));
        let worst: Vec<String> = late
            .iter()
            .take(4)
            .map(|p| {
                format!(
                    "{:.1}% ({}, {})",
                    100.0 * p.error,
                    p.nth_of_class + 1,
                    p.learned_from
                )
            })
            .collect();
        if !worst.is_empty() {
            println!("{} | {}", class.as_str(), worst.join(", "));
        }
    }
    let final_p99 = asm.learning().estimates().get(GENERATION).current().snapshot.p99;
    if std::env::var_os("SHOW_STATE").is_some() {
        println!(
            "final state: {:?}",
            asm.learning().estimates().get(GENERATION).current().snapshot
        );
    }
    println!(
        "\nutilization (stand-in count / budget, the {} prompts whose offer did not fit): mean {:.1}%, p10 {:.1}%, worst {:.1}%; over budget: {} of {} prompts; p99 raise at the end {:.1}%",
        r.utilization.len(),
        100.0 * r.utilization.iter().sum::<f64>() / r.utilization.len() as f64,
        100.0 * percentile(r.utilization.clone(), 0.1),
        100.0 * r.utilization.iter().copied().fold(0.0, f64::max),
        r.over,
        r.request_cpu.len(),
        100.0 * final_p99
    );
    println!(
        "with each answer reported: utilization mean {:.1}%, p10 {:.1}%, worst {:.1}%; over budget: {} of {} prompts",
        100.0 * a.utilization.iter().sum::<f64>() / a.utilization.len() as f64,
        100.0 * percentile(a.utilization.clone(), 0.1),
        100.0 * a.utilization.iter().copied().fold(0.0, f64::max),
        a.over,
        a.request_cpu.len(),
    );
    println!(
        "provider calls {} (pieces learned {}, refused {}, failed {}, dropped {}); the counter's CPU {:.0} µs per request",
        stats.sent,
        stats.learned,
        stats.refused,
        stats.failed,
        stats.dropped,
        counting_spent as f64 / 1e3 / r.request_cpu.len() as f64
    );

    // The request path, warm: every piece learned against no counter.
    println!("\nrequest path, thread CPU per Assemble (median of {rounds} rounds of the same requests, µs)");
    let plain = Assembler::new(default_catalog(), 256 << 20);
    replay(&plain, &all, requests, budget, Pass::Timing);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        on.push(process::median(
            replay(&asm, &all, requests, budget, Pass::Timing).request_cpu,
        ));
        off.push(process::median(
            replay(&plain, &all, requests, budget, Pass::Timing).request_cpu,
        ));
    }
    let (on, off) = (process::median(on), process::median(off));
    println!(
        "counting configured {on:.1} | no counter {off:.1} | ratio {:.2}x",
        on / off
    );
    assert_eq!(
        r.over + a.over,
        0,
        "a prompt was over its budget by the provider's count"
    );
}

/// The name of the counter's runtime threads.
const COUNTER_THREADS: &str = "counting";

/// CPU nanoseconds spent so far by this process's threads named `name`.
fn threads_cpu(name: &str) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name
            && let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat"))
        {
            total += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}
