//! Writes the replay workload as JSON lines, one proto3-JSON
//! `AssembleRequest` per line (what grpcurl and `json_format.Parse` read), so
//! that the Python paths of `benches/compare/` and the criterion bench
//! `compare` see byte-identical inputs. Prints the request count, the bytes
//! and the blake3 of the file on stderr (the bench prints the same hash for
//! the same shape).
//! Usage: export_workload [--families F] [--users U] [--turns T]
//! [--prompt-tokens N] [--budget B] [--seed S] [--out FILE] [--fresh]
//! With `--sessions chat|tool-heavy|agent`, the session workload instead:
//! `--users` sessions of `--turns` requests, each repeating its session's
//! conversation and adding one exchange (an agent: one step, its thinking
//! and a tool call, and the result), session by session, at a budget of
//! `--prompt-tokens` (4,000 by default; agent sessions 8,000, the smallest
//! budget of issue 37), with a 4,000-character system prompt (agent
//! sessions 5,000). `compare`'s session rows are `--users 20 --turns 20`.
//! With `--fresh`, the fresh workload instead: `--users` requests (200 by
//! default), each with new documents, a new conversation and a new query
//! under a stable system prompt, at a budget of `--prompt-tokens` (4,000 by
//! default; `compare`'s rows `fresh_4k` and `fresh_32k` are 4,000 and
//! 32,000).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;

use clap::Parser;
use context_assembler::grpc::pb;
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::sessions::{Sessions, Turns};

/// The replay shape (the defaults of `benches/compare.rs`) and the output.
#[derive(Debug, Parser)]
#[command(about = "Export the replay workload as proto3-JSON lines of AssembleRequest")]
struct Args {
    /// Prefix families.
    #[arg(long, default_value_t = 8)]
    families: usize,
    /// Users per family [default: 20], sessions [20], or the fresh
    /// workload's requests [200].
    #[arg(long)]
    users: Option<usize>,
    /// Turns per user.
    #[arg(long, default_value_t = 6)]
    turns: usize,
    /// The budget (`max_input_tokens`) and target prompt size [default:
    /// 4000; agent sessions 8000].
    #[arg(long)]
    prompt_tokens: Option<usize>,
    /// `max_input_tokens` if not the prompt size: a smaller budget makes
    /// evidence fall back to its compact form or be dropped.
    #[arg(long)]
    budget: Option<u32>,
    /// Generator seed.
    #[arg(long, default_value_t = Replay::default().seed)]
    seed: u64,
    /// Output file; `-` for standard output.
    #[arg(long, default_value = "-")]
    out: String,
    /// The session workload of these turns instead of the replay.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(Turns::ALL.map(Turns::name)))]
    sessions: Option<String>,
    /// Replay only: how many budgets of content each request offers (as
    /// `loadgen --offer`: 8 is about 8x, more evidence items of one size).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    offer: u16,
    /// The fresh workload instead of the replay: new documents and turns
    /// in every request, most of them kept.
    #[arg(long, conflicts_with_all = ["sessions", "budget", "families", "turns"])]
    fresh: bool,
}

/// Users per family, and sessions, when `--users` is not given.
const USERS: usize = 20;

/// The budget of a session workload when `--prompt-tokens` is not given.
const SESSIONS_BUDGET: usize = 4_000;
/// The agent workload's: issue 37 measures it at 8k, 16k and 32k.
const AGENT_BUDGET: usize = 8_000;
/// The replay's prompt size when `--prompt-tokens` is not given.
const REPLAY_PROMPT_TOKENS: usize = 4_000;

/// The session workload (a 4,000-character system prompt, an agent's
/// 5,000), session by session.
fn sessions_jsonl(args: &Args, turns: Turns) -> (Vec<u8>, String) {
    let default_budget = if turns == Turns::Agent {
        AGENT_BUDGET
    } else {
        SESSIONS_BUDGET
    };
    let prompt_tokens = args.prompt_tokens.unwrap_or(default_budget);
    let shape = Sessions {
        sessions: args.users.unwrap_or(USERS),
        requests: args.turns,
        budget: args.budget.unwrap_or(u32::try_from(prompt_tokens).unwrap()),
        system_chars: turns.system_chars(),
        turns,
        policy: "",
        seed: args.seed,
    };
    let mut out = Vec::new();
    for r in shape.requests().into_iter().flatten() {
        serde_json::to_writer(&mut out, &pb::AssembleRequest::from(r)).unwrap();
        out.push(b'\n');
    }
    let describe = format!(
        "{} sessions x {} requests of {} turns, budget {}",
        shape.sessions,
        shape.requests,
        turns.name(),
        shape.budget
    );
    (out, describe)
}

/// The workload as JSON lines (each line ends with `\n`).
fn jsonl(shape: &Replay, budget: Option<u32>) -> Vec<u8> {
    let mut out = Vec::new();
    for mut r in shape.requests() {
        if budget.is_some() {
            r.request.max_input_tokens = budget;
        }
        serde_json::to_writer(&mut out, &pb::AssembleRequest::from(r.request)).unwrap();
        out.push(b'\n');
    }
    out
}

/// The fresh workload.
fn fresh_jsonl(args: &Args) -> (Vec<u8>, String) {
    let shape = Fresh {
        requests: args.users.unwrap_or(Fresh::REQUESTS),
        budget: u32::try_from(args.prompt_tokens.unwrap_or(REPLAY_PROMPT_TOKENS)).unwrap(),
        seed: args.seed,
    };
    let mut out = Vec::new();
    for r in shape.requests() {
        serde_json::to_writer(&mut out, &pb::AssembleRequest::from(r)).unwrap();
        out.push(b'\n');
    }
    (out, shape.describe())
}

fn main() {
    let args = Args::parse();
    if args.fresh {
        let (bytes, describe) = fresh_jsonl(&args);
        write(&args.out, &bytes);
        eprintln!(
            "{} bytes, blake3 {} ({describe})",
            bytes.len(),
            blake3::hash(&bytes).to_hex()
        );
        return;
    }
    if let Some(kind) = &args.sessions {
        let turns = Turns::ALL
            .into_iter()
            .find(|t| t.name() == kind)
            .expect("clap accepts only the kinds' names");
        let (bytes, describe) = sessions_jsonl(&args, turns);
        write(&args.out, &bytes);
        eprintln!(
            "{} requests, {} bytes, blake3 {} ({describe})",
            args.users.unwrap_or(USERS) * args.turns,
            bytes.len(),
            blake3::hash(&bytes).to_hex()
        );
        return;
    }
    let shape = Replay {
        families: args.families,
        users: args.users.unwrap_or(USERS),
        turns: args.turns,
        prompt_tokens: args.prompt_tokens.unwrap_or(REPLAY_PROMPT_TOKENS),
        seed: args.seed,
        offer: usize::from(args.offer),
        ..Replay::default()
    };
    let bytes = jsonl(&shape, args.budget);
    write(&args.out, &bytes);
    eprintln!(
        "{} requests, {} bytes, blake3 {} ({}{})",
        shape.len(),
        bytes.len(),
        blake3::hash(&bytes).to_hex(),
        shape.describe(),
        args.budget
            .map_or(String::new(), |b| format!("; budget {b} tokens"))
    );
}

/// Writes `bytes` to `out` (`-`: standard output).
fn write(out: &str, bytes: &[u8]) {
    if out == "-" {
        std::io::stdout().lock().write_all(bytes).unwrap();
    } else {
        std::fs::write(out, bytes).unwrap();
    }
}
