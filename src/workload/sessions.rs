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
}

impl Turns {
    /// Both kinds.
    pub const ALL: [Turns; 2] = [Turns::Chat, Turns::ToolHeavy];

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Turns::Chat => "chat",
            Turns::ToolHeavy => "tool-heavy",
        }
    }
}

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
                (0..self.requests)
                    .map(|r| {
                        let len = 80 + rng.below(240);
                        let query = format!("Session {s}, request {r}: {}", prose(&mut rng, len));
                        let request = AssembleRequest {
                            request_id: format!("s{s}-r{r}"),
                            model: "gpt-4o".to_owned(),
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
        history.push(turn(format!("r{r}-q"), Role::User, query));
        if self.turns == Turns::ToolHeavy {
            let call = format!("call-{r}");
            history.push(Item {
                tool_call_ids: vec![call.clone()],
                ..turn(format!("r{r}-call"), Role::Assistant, "Looking it up.".to_owned())
            });
            let len = 1_500 + rng.below(4_500);
            let output = if rng.below(2) == 0 {
                code(rng, len)
            } else {
                prose(rng, len)
            };
            history.push(Item {
                tool_call_id: call,
                ..turn(format!("r{r}-result"), Role::Tool, output)
            });
        }
        let len = 300 + rng.below(1_200);
        let answer = prose(rng, len);
        history.push(turn(format!("r{r}-a"), Role::Assistant, answer));
    }
}

/// The length in bytes of the longest common prefix of two prompts' texts
/// (roles and contents in order, the final query excluded), and the length
/// of `now`'s text: a provider cache hits on the common part.
pub fn common_prefix(previous: &[Message], now: &[Message]) -> (usize, usize) {
    let text = |m: &[Message]| -> Vec<u8> {
        let body = &m[..m.len().saturating_sub(1)];
        let mut out = Vec::new();
        for msg in body {
            out.extend_from_slice(msg.role.as_str().as_bytes());
            out.push(0);
            out.extend_from_slice(msg.content.as_bytes());
            out.push(0);
        }
        out
    };
    let (a, b) = (text(previous), text(now));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    (common, b.len())
}
