//! Conversation builders shared by the compaction tests.

use super::conversation::{Content, Msg};
use crate::prompt::Thinking;
use crate::vocab::Role;

/// What every thinking block of [`call`] holds: no summary may ever
/// contain it.
pub const THOUGHT: &str = "~private chain of thought~";

/// A user message.
pub fn user(t: &str) -> Msg {
    Msg::text(Role::User, t)
}

/// An assistant message thinking (signed), then calling `bash` once per id.
pub fn call(ids: &[&str]) -> Msg {
    let thinking = Content::Thinking(Thinking {
        text: format!("{THOUGHT} about src/{}.rs: todo next", ids.join("-")),
        signature: "sig".into(),
        redacted: false,
    });
    Msg {
        id: String::new(),
        role: Role::Assistant,
        content: std::iter::once(thinking)
            .chain(ids.iter().map(|id| Content::ToolUse {
                id: (*id).to_owned(),
                name: "bash".into(),
                input: format!(r#"{{"cmd": "cat src/{id}.rs"}}"#),
            }))
            .collect(),
    }
}

/// A tool message answering each id.
pub fn result(ids: &[&str]) -> Msg {
    Msg {
        id: String::new(),
        role: Role::Tool,
        content: ids
            .iter()
            .map(|id| Content::ToolResult {
                tool_use_id: (*id).to_owned(),
                output: format!("contents of {id}: fn main() {{}}"),
                is_error: false,
            })
            .collect(),
    }
}

/// Random conversations: text turns of random words, calls with one to
/// three ids, results answering a random subset of pending calls (often
/// after other messages), orphan results, unanswered calls; sometimes a
/// leading system message.
pub fn conversation(steps: &[(u8, u8, u16)], next: &mut u32) -> Vec<Msg> {
    const WORDS: [&str; 8] = ["fix", "src/a.rs", "todo next", " ", "\n\n", "the end.", "é", "🦀"];
    let words = |seed: u16| -> String {
        (0..seed % 40)
            .map(|i| WORDS[usize::from((seed >> (i % 8)) % 8)])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut msgs = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for &(op, arg, seed) in steps {
        match op % 7 {
            0 => msgs.push(Msg::text(Role::User, words(seed))),
            1 => msgs.push(Msg::text(Role::Assistant, words(seed))),
            2 | 3 => {
                let ids: Vec<String> = (0..=arg % 3)
                    .map(|_| {
                        *next += 1;
                        format!("c{next}")
                    })
                    .collect();
                pending.extend(ids.iter().cloned());
                let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                msgs.push(call(&refs));
            }
            4 if !pending.is_empty() => {
                let take = 1 + usize::from(arg) % pending.len();
                let answered: Vec<String> = pending.drain(..take).collect();
                let refs: Vec<&str> = answered.iter().map(String::as_str).collect();
                msgs.push(result(&refs));
            }
            5 if arg % 9 == 0 => msgs.push(result(&["orphan"])),
            _ => msgs.push(Msg::text(Role::User, words(seed))),
        }
    }
    if steps.first().is_some_and(|s| s.1 % 4 == 0) {
        msgs.insert(0, Msg::text(Role::System, "system"));
    }
    msgs
}
