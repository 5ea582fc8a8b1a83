//! The session workload: conversations that grow by one exchange per
//! request, each request repeating the turns before it, as a gateway sends
//! a chat or an agent loop. Turn sizes go from chat-like to tool-output
//! heavy. Used to measure how much of each prompt is a byte-identical prefix
//! of the session's previous one (what provider prompt caches bill at a
//! fraction), and what the conversation window costs in unused room.

use super::{Rng, code, prose};
use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Message, Segment, SegmentKind};
use crate::vocab::Role;

/// What the turns of a session look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turns {
    /// Short questions, answers of a few paragraphs.
    Chat,
    /// Each exchange: a question, an assistant tool call, a long tool
    /// result (code or logs), and the answer.
    ToolHeavy,
    /// An agent loop: each request adds one step, a short assistant turn
    /// with its thinking (signed) and one tool call, and the call's result
    /// (800 to 7,000 characters of code or prose); now and then (one step
    /// in eight) the user says something first. The query is the harness's
    /// short nudge to take the next step. Counted for Anthropic (which
    /// reads thinking passed back).
    Agent,
}

impl Turns {
    /// Every kind.
    pub const ALL: [Turns; 3] = [Turns::Chat, Turns::ToolHeavy, Turns::Agent];

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Turns::Chat => "chat",
            Turns::ToolHeavy => "tool-heavy",
            Turns::Agent => "agent",
        }
    }

    /// Characters of the system prompt the measurements use: 5,000 for an
    /// agent (issue 37's shape), 4,000 otherwise.
    pub fn system_chars(self) -> usize {
        match self {
            Turns::Chat | Turns::ToolHeavy => 4_000,
            Turns::Agent => 5_000,
        }
    }

    /// The model the requests name.
    pub fn model(self) -> &'static str {
        match self {
            Turns::Chat | Turns::ToolHeavy => "gpt-4o",
            Turns::Agent => "claude-sonnet-4-5",
        }
    }
}

/// The tools an agent session calls (its results' `tool_name`).
pub const AGENT_TOOLS: [&str; 4] = ["read_file", "grep", "run_tests", "web_search"];

/// The shape of a session workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sessions {
    /// Sessions.
    pub sessions: usize,
    /// Requests per session (the n-th carries n - 1 earlier exchanges).
    pub requests: usize,
    /// The request budget (`max_input_tokens`).
    pub budget: u32,
    /// Characters of the system prompt.
    pub system_chars: usize,
    /// The turns' kind.
    pub turns: Turns,
    /// The policy the requests name (empty: default).
    pub policy: &'static str,
    /// The generator seed.
    pub seed: u64,
}

impl Sessions {
    /// The requests of every session, session by session, in order.
    pub fn requests(&self) -> Vec<Vec<AssembleRequest>> {
        let mut rng = Rng::new(self.seed);
        (0..self.sessions)
            .map(|s| {
                let system = prose(&mut rng, self.system_chars);
                let mut history: Vec<Item> = Vec::new();
                if self.turns == Turns::Agent {
                    let len = 200 + rng.below(600);
                    history.push(Item {
                        id: "task".to_owned(),
                        role: Some(Role::User),
                        content: format!("Session {s}, the task: {}", prose(&mut rng, len)),
                        ..Item::default()
                    });
                }
                (0..self.requests)
                    .map(|r| {
                        let len = 80 + rng.below(240);
                        let query = if self.turns == Turns::Agent {
                            format!("Take the next step of the task (step {r}), or answer if it is done.")
                        } else {
                            format!("Session {s}, request {r}: {}", prose(&mut rng, len))
                        };
                        let request = AssembleRequest {
                            request_id: format!("s{s}-r{r}"),
                            model: self.turns.model().to_owned(),
                            max_input_tokens: Some(self.budget),
                            static_segments: vec![Segment {
                                id: "system".to_owned(),
                                kind: SegmentKind::System,
                                content: system.clone(),
                            }],
                            blocks: vec![Block::new(
                                "conversation",
                                BlockKind::RecentTurns,
                                history.clone(),
                            )],
                            query: query.clone(),
                            session_id: format!("session-{s}"),
                            policy: self.policy.to_owned(),
                            ..AssembleRequest::default()
                        };
                        self.exchange(&mut rng, &mut history, r, query);
                        request
                    })
                    .collect()
            })
            .collect()
    }

    /// Appends exchange `r` (its question `query`) to `history`.
    fn exchange(&self, rng: &mut Rng, history: &mut Vec<Item>, r: usize, query: String) {
        let turn = |id: String, role: Role, content: String| Item {
            id,
            role: Some(role),
            content,
            ..Item::default()
        };
        if self.turns == Turns::Agent {
            if r > 0 && rng.below(8) == 0 {
                let len = 60 + rng.below(300);
                history.push(turn(format!("r{r}-user"), Role::User, prose(rng, len)));
            }
            let call = format!("call-{r}");
            let tool = AGENT_TOOLS[rng.below(AGENT_TOOLS.len())];
            let thinking_len = 200 + rng.below(1_200);
            let thinking = prose(rng, thinking_len);
            let signature: String = (0..88)
                .map(|_| {
                    char::from(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[rng.below(64)],
                    )
                })
                .collect();
            let len = 40 + rng.below(160);
            history.push(Item {
                tool_call_ids: vec![call.clone()],
                thinking: vec![crate::prompt::Thinking {
                    text: thinking,
                    signature,
                    redacted: false,
                }],
                ..turn(
                    format!("r{r}-call"),
                    Role::Assistant,
                    format!("Calling {tool}: {}", prose(rng, len)),
                )
            });
            history.push(Item {
                tool_call_id: call,
                tool_name: tool.to_owned(),
                ..turn(format!("r{r}-result"), Role::Tool, tool_output(rng, 800, 6_200))
            });
            return;
        }
        history.push(turn(format!("r{r}-q"), Role::User, query));
        if self.turns == Turns::ToolHeavy {
            let call = format!("call-{r}");
            history.push(Item {
                tool_call_ids: vec![call.clone()],
                ..turn(format!("r{r}-call"), Role::Assistant, "Looking it up.".to_owned())
            });
            history.push(Item {
                tool_call_id: call,
                ..turn(format!("r{r}-result"), Role::Tool, tool_output(rng, 1_500, 4_500))
            });
        }
        let len = 300 + rng.below(1_200);
        let answer = prose(rng, len);
        history.push(turn(format!("r{r}-a"), Role::Assistant, answer));
    }
}

/// Passages in the evidence corpus of [`with_evidence`].
pub const EVIDENCE_CORPUS: usize = 200;

/// Adds an evidence block to every request of `sessions`: 4 to 10 passages
/// (600 to 1,200 characters of prose) of a corpus of [`EVIDENCE_CORPUS`],
/// drawn by a Zipf-like popularity (popular passages, low indexes, more
/// often), scored by it, fixed per request by `seed`. With a 9,000-character
/// system prompt and chat turns under a 4k budget: the shape of issue 53's
/// overflowing sessions (`examples/session_next.rs`, loadgen's
/// `rag-sessions`).
pub fn with_evidence(sessions: &mut [Vec<AssembleRequest>], seed: u64) {
    let mut rng = Rng::new(seed);
    let corpus: Vec<String> = (0..EVIDENCE_CORPUS)
        .map(|_| {
            let len = 600 + rng.below(600);
            prose(&mut rng, len)
        })
        .collect();
    let mut rng = Rng::new(seed ^ 1);
    for req in sessions.iter_mut().flatten() {
        let n = 4 + rng.below(7);
        let mut items: Vec<Item> = Vec::new();
        while items.len() < n {
            // u^3 over the corpus: about a Zipf's head and tail.
            let u = rng.below(10_000) as f64 / 10_000.0;
            let i = ((u * u * u) * corpus.len() as f64) as usize;
            let id = format!("doc-{i}");
            if items.iter().all(|it| it.id != id) {
                items.push(Item {
                    id,
                    content: corpus[i].clone(),
                    score: 1.0 - u,
                    source: "corpus".to_owned(),
                    trusted: true,
                    ..Item::default()
                });
            }
        }
        req.blocks
            .push(Block::new("evidence", BlockKind::Evidence, items));
    }
}

/// A tool's output: `least` to `least + spread` characters, code or prose
/// with even odds.
fn tool_output(rng: &mut Rng, least: usize, spread: usize) -> String {
    let len = least + rng.below(spread);
    if rng.below(2) == 0 {
        code(rng, len)
    } else {
        prose(rng, len)
    }
}

/// The length in bytes of the longest common prefix of two prompts' texts
/// (roles, thinking and contents in order, the final query excluded), and
/// the length of `now`'s text: a provider cache hits on the common part.
pub fn common_prefix(previous: &[Message], now: &[Message]) -> (usize, usize) {
    let text = |m: &[Message]| -> Vec<u8> {
        let body = &m[..m.len().saturating_sub(1)];
        let mut out = Vec::new();
        for msg in body {
            out.extend_from_slice(msg.role.as_str().as_bytes());
            out.push(0);
            for t in &msg.thinking {
                out.extend_from_slice(t.text.as_bytes());
                out.push(0);
                out.extend_from_slice(t.signature.as_bytes());
                out.push(0);
            }
            out.extend_from_slice(msg.content.as_bytes());
            out.push(0);
        }
        out
    };
    let (a, b) = (text(previous), text(now));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    (common, b.len())
}
