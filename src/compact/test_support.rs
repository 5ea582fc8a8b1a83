//! Conversation builders shared by the compaction tests.

use super::conversation::{Content, Msg};
use crate::assemble::Role;

/// A user message.
pub fn user(t: &str) -> Msg {
    Msg::text(Role::User, t)
}

/// An assistant message calling `bash` once per id.
pub fn call(ids: &[&str]) -> Msg {
    Msg {
        id: String::new(),
        role: Role::Assistant,
        content: ids
            .iter()
            .map(|id| Content::ToolUse {
                id: (*id).to_owned(),
                name: "bash".into(),
                input: format!(r#"{{"cmd": "cat src/{id}.rs"}}"#),
            })
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
