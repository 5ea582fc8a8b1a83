//! The workload the flags choose, generated and converted to the wire once
//! before the run: the replay (prefix families x users x turns), sessions
//! of chat, evidence, tool-heavy or agent turns, or fresh requests.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, ensure};
use context_assembler::grpc::pb;
use context_assembler::prompt::AssembleRequest;
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use context_assembler::workload::sessions::{Sessions, Turns, with_evidence};

use crate::kept::Offers;
use crate::sessions;

/// Which requests to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
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

/// The workload's flags.
#[derive(Debug, clap::Args)]
pub struct Flags {
    /// The workload: the replay (families x users x turns), or sessions
    /// of chat-like, tool-output-heavy or agent turns (--users sessions of
    /// --turns requests, each adding one exchange, or an agent's step, to
    /// the conversation it repeats; with --cold, each pass over them brings
    /// new sessions).
    #[arg(long, value_enum, default_value_t = Workload::Replay)]
    pub workload: Workload,
    /// Prefix families of the replay workload [default: the workload's, 8].
    #[arg(long)]
    pub families: Option<usize>,
    /// Users per family [default: the workload's, 100], or sessions [100;
    /// evidence sessions 12; agent sessions 25], or the fresh workload's
    /// requests [200].
    #[arg(long)]
    pub users: Option<usize>,
    /// Turns per user [default: the workload's, 6], or requests per
    /// session [20; agent sessions 40].
    #[arg(long)]
    pub turns: Option<usize>,
    /// The request budget and the prompt's target size in tokens [default:
    /// the workload's, 8000; sessions 4000; agent sessions 8000; fresh
    /// 4000 (measured at 4000 and 32000)].
    #[arg(long)]
    pub prompt_tokens: Option<usize>,
    /// Replay only: how many budgets of content each request offers (1: a
    /// little over the budget; 8: about 8x, as many more evidence items of
    /// the same size). With --cold, the cold-content workload.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub offer: u16,
    /// The workload generator's seed [default: the workload's, 7].
    #[arg(long)]
    pub seed: Option<u64>,
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

/// The fresh workload's budget when `--prompt-tokens` is not given.
const FRESH_BUDGET: usize = 4_000;

/// A workload ready to send.
pub struct Loaded {
    /// The requests in the order tickets take them.
    pub requests: Arc<[pb::AssembleRequest]>,
    /// A line for the report.
    pub described: String,
    /// Its number of sessions (0 but for the session workloads).
    pub sessions: usize,
    /// The fresh workload: each request's offer, to measure what is kept.
    pub offers: Option<Offers>,
}

/// The workload of the flags.
pub fn load(args: &Flags) -> anyhow::Result<Loaded> {
    let turns = match args.workload {
        Workload::Replay => return replay(args),
        _ if args.offer > 1 => anyhow::bail!("--offer applies to the replay workload only"),
        Workload::Fresh => return fresh(args),
        Workload::ChatSessions | Workload::RagSessions => Turns::Chat,
        Workload::ToolSessions => Turns::ToolHeavy,
        Workload::AgentSessions => Turns::Agent,
    };
    session_workload(args, turns)
}

/// The replay workload of the flags.
fn replay(args: &Flags) -> anyhow::Result<Loaded> {
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
    Ok(Loaded {
        requests,
        described: shape.describe(),
        sessions: 0,
        offers: None,
    })
}

/// The fresh workload of the flags, with what each request offers.
fn fresh(args: &Flags) -> anyhow::Result<Loaded> {
    let shape = Fresh {
        requests: args.users.unwrap_or(Fresh::REQUESTS),
        budget: u32::try_from(args.prompt_tokens.unwrap_or(FRESH_BUDGET)).context("--prompt-tokens")?,
        seed: args.seed.unwrap_or(7),
    };
    ensure!(
        shape.requests > 0,
        "the workload is empty: --users must be positive"
    );
    let requests = shape.requests();
    let wire: Arc<[pb::AssembleRequest]> = requests.iter().cloned().map(pb::AssembleRequest::from).collect();
    let started = Instant::now();
    let offers = Offers::count(&requests, sessions::encoding(&wire));
    eprintln!(
        "loadgen: counted what the {} requests offer in {:.2} s",
        requests.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(Loaded {
        requests: wire,
        described: shape.describe(),
        sessions: 0,
        offers: Some(offers),
    })
}

/// A session workload of the flags, of `turns`, its sessions interleaved.
fn session_workload(args: &Flags, turns: Turns) -> anyhow::Result<Loaded> {
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
    let mut by_session = shape.requests();
    if evidence {
        with_evidence(&mut by_session, EVIDENCE_SEED);
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
        requests: interleaved(by_session, shape.requests).into(),
        described: describe,
        sessions: shape.sessions,
        offers: None,
    })
}

/// The requests of `by_session` (`per_session` each) in ticket order:
/// request r of session s at r * sessions + s. Each is converted once, in
/// place of its domain form, not beside it (the default agent workload
/// holds about 100 MB of text).
fn interleaved(by_session: Vec<Vec<AssembleRequest>>, per_session: usize) -> Vec<pb::AssembleRequest> {
    let sessions = by_session.len();
    let mut by_session: Vec<_> = by_session.into_iter().map(Vec::into_iter).collect();
    let mut requests = Vec::with_capacity(sessions * per_session);
    for _ in 0..per_session {
        requests.extend(
            by_session
                .iter_mut()
                .filter_map(Iterator::next)
                .map(pb::AssembleRequest::from),
        );
    }
    requests
}
