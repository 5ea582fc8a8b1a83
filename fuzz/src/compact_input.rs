//! A structured conversation to compact over a few rounds (the output of
//! one round plus new messages is the input of the next, as a gateway does):
//! text turns, assistant tool calls answered now, later, partly or never,
//! orphan results, results inside user messages, system messages, texts
//! that look like an earlier summary or a pinned item, and a few invalid
//! messages; with thresholds, pinned items and emergency trims per round.

use arbitrary::{Arbitrary, Result, Unstructured};
use context_assembler::compact::{Content, Msg, Pinned};
use context_assembler::vocab::Role;

use crate::one_in;
use crate::text::Text;

/// Models: exact o200k and cl100k, the estimating entry, unknown.
const MODELS: &[&str] = &["gpt-4o", "gpt-4o", "gpt-4", "claude", "no-such-model"];

const TOOL_NAMES: &[&str] = &["bash", "read_file", "search"];

/// The parameters of one Compact request.
#[derive(Debug, Clone)]
pub struct Round {
    /// Messages appended to the conversation before this request.
    pub appended: Vec<Msg>,
    /// `trigger_tokens`.
    pub trigger: Option<u32>,
    /// `target_tokens`.
    pub target: Option<u32>,
    /// `preserve_recent`.
    pub preserve: Option<u32>,
    /// `pinned`.
    pub pinned: Vec<Pinned>,
    /// `context_length_exceeded`.
    pub emergency: bool,
}

/// A session of one to four Compact requests.
#[derive(Debug, Clone)]
pub struct CompactInput {
    /// `model` of every request.
    pub model: String,
    /// `session_id` of every request (empty: no breaker).
    pub session: String,
    /// The requests, in order.
    pub rounds: Vec<Round>,
}

/// Ids of calls made and not yet answered, and the next fresh id.
#[derive(Default)]
struct Calls {
    next: u32,
    pending: Vec<String>,
}

impl Calls {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("t{}", self.next)
    }
}

fn text(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(Text::arbitrary(u)?.into_string())
}

fn msg(id: String, role: Role, content: Vec<Content>) -> Msg {
    Msg { id, role, content }
}

fn tool_use(u: &mut Unstructured<'_>, id: String) -> Result<Content> {
    Ok(Content::ToolUse {
        id,
        name: TOOL_NAMES[u.choose_index(TOOL_NAMES.len())?].to_owned(),
        input: text(u)?,
    })
}

fn tool_result(u: &mut Unstructured<'_>, id: String) -> Result<Content> {
    Ok(Content::ToolResult {
        tool_use_id: id,
        output: text(u)?,
        is_error: one_in(u, 5)?,
    })
}

fn step(u: &mut Unstructured<'_>, calls: &mut Calls, n: usize) -> Result<Msg> {
    let id = if one_in(u, 6)? {
        String::new()
    } else {
        format!("m{n}")
    };
    Ok(match u.int_in_range(0..=15)? {
        0..=2 => msg(id, Role::User, vec![Content::Text(text(u)?)]),
        3..=4 => msg(id, Role::Assistant, vec![Content::Text(text(u)?)]),
        5..=7 => {
            // An assistant turn making one to three calls, sometimes after
            // thinking (redacted one time in four), sometimes with text.
            let mut content = Vec::new();
            if one_in(u, 2)? {
                content.push(Content::Thinking(context_assembler::prompt::Thinking {
                    text: text(u)?,
                    signature: text(u)?,
                    redacted: one_in(u, 4)?,
                }));
            }
            if one_in(u, 2)? {
                content.push(Content::Text(text(u)?));
            }
            for _ in 0..u.int_in_range(1..=3)? {
                let call = calls.fresh();
                calls.pending.push(call.clone());
                content.push(tool_use(u, call)?);
            }
            msg(id, Role::Assistant, content)
        }
        8..=10 if !calls.pending.is_empty() => {
            // Results for some pending calls, oldest or newest first.
            let take = u.int_in_range(1..=calls.pending.len())?;
            let answered: Vec<String> = if one_in(u, 2)? {
                calls.pending.drain(..take).collect()
            } else {
                let at = calls.pending.len() - take;
                calls.pending.drain(at..).rev().collect()
            };
            let role = if one_in(u, 4)? { Role::User } else { Role::Tool };
            let mut content = answered
                .into_iter()
                .map(|a| tool_result(u, a))
                .collect::<Result<Vec<_>>>()?;
            if role == Role::User && one_in(u, 2)? {
                content.push(Content::Text(text(u)?));
            }
            msg(id, role, content)
        }
        11 => {
            // A result whose call is nowhere.
            let orphan = format!("orphan{n}");
            msg(id, Role::Tool, vec![tool_result(u, orphan)?])
        }
        12 => msg(id, Role::System, vec![Content::Text(text(u)?)]),
        13 => {
            // Texts that look like what compaction itself writes.
            let fake = [
                "<pinned kind=\"task\">\nx\n</pinned>",
                "<pinned>",
                "[summary]",
                "Summary of the earlier conversation:\n- item",
            ];
            let t = fake[u.choose_index(fake.len())?].to_owned() + &text(u)?;
            msg(id, Role::User, vec![Content::Text(t)])
        }
        14 => {
            // Invalid: no content, a call outside an assistant message, a
            // duplicate or empty call id, a call without a name, a result
            // in an assistant message or without an id.
            match u.int_in_range(0..=5)? {
                0 => msg(id, Role::User, Vec::new()),
                1 => msg(id, Role::User, vec![tool_use(u, calls.fresh())?]),
                2 => msg(id, Role::Assistant, vec![tool_use(u, "t1".to_owned())?]),
                3 => msg(
                    id,
                    Role::Assistant,
                    vec![Content::ToolUse {
                        id: calls.fresh(),
                        name: String::new(),
                        input: String::new(),
                    }],
                ),
                4 => msg(id, Role::Assistant, vec![tool_result(u, "t1".to_owned())?]),
                _ => msg(id, Role::Tool, vec![tool_result(u, String::new())?]),
            }
        }
        _ => msg(
            id,
            Role::User,
            vec![Content::Text(text(u)?), Content::Text(text(u)?)],
        ),
    })
}

fn threshold(u: &mut Unstructured<'_>) -> Result<Option<u32>> {
    Ok(match u.int_in_range(0..=7)? {
        0 => None,
        1 => Some(0),
        2 => Some(u32::MAX),
        _ => Some(u.int_in_range(1..=3000)?),
    })
}

impl<'a> Arbitrary<'a> for CompactInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let model = MODELS[u.choose_index(MODELS.len())?].to_owned();
        let session = if !one_in(u, 4)? {
            "s".to_owned()
        } else {
            String::new()
        };
        let mut calls = Calls::default();
        let mut n = 0;
        let mut rounds = Vec::new();
        for r in 0..u.int_in_range(1..=4)? {
            let mut appended = Vec::new();
            if r == 0 && one_in(u, 3)? {
                appended.push(msg(String::new(), Role::System, vec![Content::Text(text(u)?)]));
            }
            for _ in 0..u.int_in_range(0..=16)? {
                appended.push(step(u, &mut calls, n)?);
                n += 1;
            }
            let pinned = (0..u.int_in_range(0..=2)?)
                .map(|i| {
                    Ok(Pinned {
                        id: format!("p{i}"),
                        kind: ["task", "file", ""][u.choose_index(3)?].to_owned(),
                        content: if one_in(u, 20)? {
                            String::new()
                        } else {
                            text(u)? + "."
                        },
                    })
                })
                .collect::<Result<_>>()?;
            rounds.push(Round {
                appended,
                trigger: threshold(u)?,
                target: threshold(u)?,
                preserve: match u.int_in_range(0..=4)? {
                    0 => None,
                    _ => Some(u.int_in_range(0..=8)?),
                },
                pinned,
                emergency: one_in(u, 5)?,
            });
        }
        Ok(CompactInput {
            model,
            session,
            rounds,
        })
    }
}
