//! The conversation window measured (issues 19 and 37): sessions that add
//! one exchange (an agent: one step) per request, at 4k, 8k and 32k budgets
//! (`BUDGETS=8000,16000,32000` for others), chat-like, tool-output-heavy
//! and agent loops (`TURNS=agent` for one kind), through the library in
//! process, with the default policy (window and lightening), the window
//! alone (no result cleared, no thinking dropped) and no window at all
//! (side by side, same requests). For each: the share
//! of prompt tokens (the query excluded) that are a byte-identical prefix of
//! the session's previous prompt (all requests together, and the 10th
//! percentile and median per request), the budget utilization (tokens over
//! budget, mean and 10th percentile, once the conversation no longer fits),
//! and the time per request.
//!
//!   cargo run --release --example session_window [SESSIONS] [REQUESTS]
//!   LOWS=60,70,80,90 cargo run --release --example session_window   # other low marks too
//!   CLEARS=2000,4000 cargo run --release --example session_window   # other clear_at_least_tokens
//!   GRPC=1 cargo run --release --example session_window   # also through a real server on
//!                                                          # loopback: its handler time per request
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use context_assembler::assemble::{self as domain, Assembler, Policy};
use context_assembler::config::default_catalog;
use context_assembler::tokens::{Encoding, Tokenizer};
use context_assembler::workload::sessions::{Sessions, Turns, common_prefix};

/// The policy without a window (equal marks).
const NO_WINDOW: &str = "no-window";
/// The policy before lightening: the window alone.
const NO_LIGHTENING: &str = "window-only";

struct Figures {
    share_all: f64,
    share_p10: f64,
    share_median: f64,
    util_mean: f64,
    util_p10: f64,
    micros: f64,
    cut: usize,
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn measure(asm: &Assembler, sessions: &Sessions, tok: &Tokenizer) -> Figures {
    let requests = sessions.requests();
    let (mut common_tokens, mut all_tokens) = (0u64, 0u64);
    let (mut shares, mut utils) = (Vec::new(), Vec::new());
    let mut cut = 0;
    let mut took = std::time::Duration::ZERO;
    let mut n = 0;
    for session in requests {
        let mut previous: Option<Vec<context_assembler::prompt::Message>> = None;
        for req in session {
            let offered: usize = req.blocks[0].items.len();
            let started = Instant::now();
            let out = asm.assemble(req).unwrap();
            took += started.elapsed();
            n += 1;
            let kept: usize = out.decisions[0].kept_item_ids.len();
            // The conversation did not fit whole: turns cut, or lightened.
            if kept < offered || out.decisions[0].tokens_cleared > 0 {
                cut += 1;
                utils.push(f64::from(out.usage.total_tokens) / f64::from(out.usage.budget));
            }
            if std::env::var("TRACE").is_ok_and(|v| v == "1") && n <= 40 {
                let d = &out.decisions[0];
                eprintln!(
                    "req {n}: offered {offered} kept {} dropped {} summarized {} cleared {} thinking_dropped {} total {} unused {}",
                    d.kept_item_ids.len(),
                    d.dropped_item_ids.len(),
                    d.summarized_item_ids.len(),
                    d.cleared_item_ids.len(),
                    d.thinking_dropped_item_ids.len(),
                    out.usage.total_tokens,
                    d.tokens_window_unused
                );
            }
            if let Some(prev) = &previous {
                let (common, len) = common_prefix(prev, &out.messages);
                let text = |m: &[context_assembler::prompt::Message]| -> String {
                    let body = &m[..m.len() - 1];
                    body.iter()
                        .map(|x| {
                            let thinking: String = x
                                .thinking
                                .iter()
                                .map(|t| format!("{}\u{0}{}\u{0}", t.text, t.signature))
                                .collect();
                            format!("{}\u{0}{thinking}{}\u{0}", x.role.as_str(), x.content)
                        })
                        .collect()
                };
                let now = text(&out.messages);
                let mut at = common.min(len);
                while !now.is_char_boundary(at) {
                    at -= 1;
                }
                let (c, t) = (u64::from(tok.count(&now[..at])), u64::from(tok.count(&now)));
                common_tokens += c;
                all_tokens += t;
                shares.push(c as f64 / t.max(1) as f64);
            }
            previous = Some(out.messages);
        }
    }
    Figures {
        share_all: common_tokens as f64 / all_tokens.max(1) as f64,
        share_p10: percentile(shares.clone(), 0.1),
        share_median: percentile(shares, 0.5),
        util_mean: utils.iter().sum::<f64>() / utils.len().max(1) as f64,
        util_p10: percentile(utils, 0.1),
        micros: took.as_secs_f64() * 1e6 / n as f64,
        cut,
    }
}

/// Runs the same sessions through a real server on loopback (one
/// connection, one request at a time) and returns the server's own handler
/// time per request (its `assembler_request_duration_seconds` histogram).
fn through_server(config: &std::path::Path, sessions: &Sessions) -> f64 {
    use context_assembler::config::ServeArgs;
    use context_assembler::grpc::pb;
    use context_assembler::telemetry::exposition;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let args = ServeArgs {
            listen: Some("127.0.0.1:0".to_owned()),
            metrics_listen: Some("127.0.0.1:0".to_owned()),
            memory_store: Some("off".to_owned()),
            config: Some(config.to_owned()),
            ..ServeArgs::default()
        };
        let bound = context_assembler::server::Bound::bind(args.validate().unwrap())
            .await
            .unwrap();
        let (addr, metrics) = (bound.grpc_addr().unwrap(), bound.metrics_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(bound.serve(async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client =
            pb::assembler_client::AssemblerClient::new(channel).max_decoding_message_size(64 << 20);
        let handled = || async move {
            let page = reqwest_page(metrics).await;
            let samples = exposition::parse(&page);
            let labels = [("rpc", "Assemble")];
            let sum =
                exposition::sum(&samples, "assembler_request_duration_seconds_sum", &labels).unwrap_or(0.0);
            let count =
                exposition::sum(&samples, "assembler_request_duration_seconds_count", &labels).unwrap_or(0.0);
            (sum, count)
        };
        let (sum0, count0) = handled().await;
        for session in sessions.requests() {
            for req in session {
                client.assemble(pb::AssembleRequest::from(req)).await.unwrap();
            }
        }
        let (sum1, count1) = handled().await;
        let _ = stop.send(());
        let _ = server.await;
        (sum1 - sum0) * 1e6 / (count1 - count0).max(1.0)
    })
}

/// The metrics page of the server at `addr`.
async fn reqwest_page(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).await.unwrap();
    page
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (count, requests) = (arg(1, 20), arg(2, 30));
    let mut catalog = default_catalog();
    let off = Policy {
        window_low_percent: 100,
        window_high_percent: 100,
        ..Policy::default()
    };
    catalog.policies.insert(NO_WINDOW.to_owned(), Arc::new(off));
    let default = catalog.policy("").unwrap().clone();
    let mut names: Vec<(&'static str, String)> = vec![("", "default".to_owned())];
    // Variants named by a list of numbers in `var`: the default policy with
    // `set` applied, named `prefix-N`, labelled `label(N)`.
    let mut variants = |var: &str, prefix: &str, set: fn(&mut Policy, u32), label: fn(u32) -> String| {
        let values = std::env::var(var).unwrap_or_default();
        for n in values.split(',').filter_map(|x| x.trim().parse::<u32>().ok()) {
            let name: &'static str = Box::leak(format!("{prefix}-{n}").into_boxed_str());
            let mut p = Policy::default();
            set(&mut p, n);
            catalog.policies.insert(name.to_owned(), Arc::new(p));
            names.push((name, label(n)));
        }
    };
    // Other low marks, least amounts cleared at once, newest results kept.
    variants(
        "LOWS",
        "low",
        |p, n| p.window_low_percent = n,
        |n| format!("{n}-100%"),
    );
    variants(
        "CLEARS",
        "clear",
        |p, n| p.clear_at_least_tokens = n,
        |n| format!("clear at least {n}"),
    );
    variants(
        "KEEPS",
        "keep",
        |p, n| p.keep_recent_tool_results = n,
        |n| format!("keep {n} newest results"),
    );
    names.push((NO_WINDOW, "none".to_owned()));
    // Before lightening: the window alone (no tool result cleared, no
    // thinking dropped).
    let before = Policy {
        clear_tool_results: false,
        drop_closed_thinking: false,
        ..Policy::default()
    };
    catalog
        .policies
        .insert(NO_LIGHTENING.to_owned(), Arc::new(before));
    names.insert(1, (NO_LIGHTENING, "window only".to_owned()));
    let list = |var: &str, default: &str| -> Vec<String> {
        std::env::var(var)
            .unwrap_or_else(|_| default.to_owned())
            .split(',')
            .map(|x| x.trim().to_owned())
            .filter(|x| !x.is_empty())
            .collect()
    };
    let kinds: Vec<Turns> = list("TURNS", "chat,tool-heavy,agent")
        .iter()
        .filter_map(|n| Turns::ALL.into_iter().find(|t| t.name() == n))
        .collect();
    let budgets: Vec<u32> = list("BUDGETS", "4000,8000,32000")
        .iter()
        .filter_map(|b| b.parse().ok())
        .collect();
    // The same policies for a server, when GRPC is set.
    let grpc = std::env::var("GRPC").is_ok_and(|v| v == "1");
    let dir = std::env::temp_dir().join(format!("session-window-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("policies.toml");
    let mut toml = String::new();
    for (name, p) in &catalog.policies {
        toml.push_str(&format!(
            "[policies.{name}]\nwindow_low_percent = {}\nwindow_high_percent = {}\n\
             clear_tool_results = {}\ndrop_closed_thinking = {}\nclear_at_least_tokens = {}\n\
             keep_recent_tool_results = {}\n",
            p.window_low_percent,
            p.window_high_percent,
            p.clear_tool_results,
            p.drop_closed_thinking,
            p.clear_at_least_tokens,
            p.keep_recent_tool_results
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let tok = Tokenizer::exact(Encoding::O200kBase);
    println!(
        "{count} sessions x {requests} requests, one exchange (an agent: one step) added per request, a 4,000-character system prompt (5,000 for agents); \
         default window {}-{}% vs none",
        default.window_low_percent, default.window_high_percent
    );
    println!(
        "| budget | turns | policy | prefix share (all) | p10 | median | utilization mean | p10 | requests cut | µs/request in process |{}",
        if grpc { " server µs/request |" } else { "" }
    );
    println!(
        "|---|---|---|---|---|---|---|---|---|---|{}",
        if grpc { "---|" } else { "" }
    );
    for &budget in &budgets {
        for &turns in &kinds {
            for (policy, label) in &names {
                let policy = *policy;
                // A fresh assembler each: the memo of turn summaries starts cold.
                let asm = Assembler::new(catalog.clone(), domain::DEFAULT_CACHE_BYTES);
                asm.warm();
                let shape = Sessions {
                    sessions: count,
                    requests,
                    budget,
                    system_chars: turns.system_chars(),
                    turns,
                    policy,
                    seed: 11,
                };
                let f = measure(&asm, &shape, &tok);
                let (util_mean, util_p10) = if f.cut == 0 {
                    ("-".to_owned(), "-".to_owned())
                } else {
                    (
                        format!("{:.1}%", f.util_mean * 100.0),
                        format!("{:.1}%", f.util_p10 * 100.0),
                    )
                };
                let server = if grpc {
                    format!(" {:.0} |", through_server(&config, &shape))
                } else {
                    String::new()
                };
                println!(
                    "| {budget} | {} | {} | {:.1}% | {:.1}% | {:.1}% | {util_mean} | {util_p10} | {} | {:.0} |{server}",
                    turns.name(),
                    label,
                    f.share_all * 100.0,
                    f.share_p10 * 100.0,
                    f.share_median * 100.0,
                    f.cut,
                    f.micros
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
