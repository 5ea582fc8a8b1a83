//! The conversation a gateway sends for compaction, free of wire types:
//! messages made of content blocks (text, tool use, tool result), as chat
//! APIs with tools model them.

use super::marker::SEAL;
use super::marker::{MarkerKey, TAG_CHARS};
use crate::prompt::Thinking;
use crate::vocab::Role;
use crate::vocab::escape::{escape_attr, escape_tags};

/// Opening of a pinned item's wrapper.
const PINNED_OPEN: &str = "<pinned";
/// Closing of a pinned item's wrapper.
const PINNED_CLOSE: &str = "\n</pinned>";
/// Tags a pinned item's content can neither open nor close.
const PINNED_TAGS: [&str; 2] = ["pinned", "summary"];

/// One content block of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// A tool call made by the assistant.
    ToolUse {
        /// Call id, answered by a [`Content::ToolResult`] with the same id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments, as the caller sent them (usually JSON text).
        input: String,
    },
    /// The result of a tool call.
    ToolResult {
        /// The id of the call it answers.
        tool_use_id: String,
        /// The tool's output text.
        output: String,
        /// Whether the tool reported an error.
        is_error: bool,
    },
    /// The model's thinking (assistant messages), kept verbatim with its
    /// message and never summarized.
    Thinking(Thinking),
}

impl Content {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text(text.into())
    }

    /// The texts the block contributes to the token count, in order;
    /// thinking only where the model's provider `reads_thinking` (a
    /// redacted block never: its text is the provider's opaque data).
    pub fn counted_texts(&self, reads_thinking: bool) -> [&str; 2] {
        match self {
            Content::Text(t) => [t, ""],
            Content::ToolUse { name, input, .. } => [name, input],
            Content::ToolResult { output, .. } => [output, ""],
            Content::Thinking(t) if reads_thinking && !t.redacted => [&t.text, ""],
            Content::Thinking(_) => ["", ""],
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// The caller's id for provenance (may be empty).
    pub id: String,
    /// Its role.
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<Content>,
}

impl Msg {
    /// A message with one text block and no id.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Msg {
            id: String::new(),
            role,
            content: vec![Content::text(text)],
        }
    }

    /// The calls this message makes.
    pub fn tool_uses(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|c| match c {
            Content::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
    }

    /// The calls this message answers.
    pub fn tool_results(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|c| match c {
            Content::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
            _ => None,
        })
    }

    /// Its text blocks, in order.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|c| match c {
            Content::Text(t) => Some(t.as_str()),
            _ => None,
        })
    }

    /// Whether it holds a tool result.
    pub fn has_tool_result(&self) -> bool {
        self.tool_results().next().is_some()
    }
}

/// An item restored right after the summary (a task snapshot, a key file).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pinned {
    /// Caller's id.
    pub id: String,
    /// What it is (e.g. `task`, `file`); rendered as an attribute.
    pub kind: String,
    /// Its text, rendered with any `<pinned` or `<summary` tag (opening or
    /// closing, any case) escaped as `&lt;`.
    pub content: String,
}

/// A request to compact one conversation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CompactRequest {
    /// Echoed back and logged.
    pub request_id: String,
    /// Model name: chooses the tokenizer and the default thresholds.
    pub model: String,
    /// With `cache_salt`, the breaker's key (empty: no breaker).
    pub session_id: String,
    /// The conversation, oldest first; an earlier summary may be first
    /// (after any leading system messages).
    pub messages: Vec<Msg>,
    /// Compact only at or above this many tokens (`None` = configured share
    /// of the model's input budget).
    pub trigger_tokens: Option<u32>,
    /// What a compaction must get under (`None` = configured share).
    pub target_tokens: Option<u32>,
    /// Messages kept verbatim at the end (`None` = configured default).
    pub preserve_recent: Option<u32>,
    /// Restored right after the summary, in order.
    pub pinned: Vec<Pinned>,
    /// The provider just refused the conversation as too long: trim the
    /// oldest turns until under the target, whatever the trigger.
    pub context_length_exceeded: bool,
    /// The tenant: breakers are kept per (salt, session), so one tenant
    /// cannot open or close another's breaker by naming its session.
    pub cache_salt: String,
}

/// Checks what the domain requires of a conversation; every bad field is
/// listed by its proto path. (The model is checked by the compactor.)
pub fn validate(req: &CompactRequest) -> Vec<crate::vocab::FieldViolation> {
    use crate::vocab::FieldViolation;
    let mut v = Vec::new();
    let mut calls: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, m) in req.messages.iter().enumerate() {
        if m.content.is_empty() {
            v.push(FieldViolation::new(
                format!("messages[{i}].content"),
                "at least one content block",
            ));
        }
        for (j, c) in m.content.iter().enumerate() {
            let at = |f: &str| format!("messages[{i}].content[{j}].{f}");
            match c {
                Content::Text(_) => {}
                Content::Thinking(_) => {
                    if m.role != Role::Assistant {
                        v.push(FieldViolation::new(
                            format!("messages[{i}].role"),
                            "thinking blocks belong to assistant messages",
                        ));
                    }
                }
                Content::ToolUse { id, name, .. } => {
                    if m.role != Role::Assistant {
                        v.push(FieldViolation::new(
                            format!("messages[{i}].role"),
                            "tool_use blocks belong to assistant messages",
                        ));
                    }
                    if id.is_empty() {
                        v.push(FieldViolation::new(at("tool_use.id"), "required"));
                    } else if let Some(first) = calls.insert(id, i) {
                        v.push(FieldViolation::new(
                            at("tool_use.id"),
                            format!("duplicate tool_use id (first used in messages[{first}])"),
                        ));
                    }
                    if name.is_empty() {
                        v.push(FieldViolation::new(at("tool_use.name"), "required"));
                    }
                }
                Content::ToolResult { tool_use_id, .. } => {
                    if !matches!(m.role, Role::Tool | Role::User) {
                        v.push(FieldViolation::new(
                            format!("messages[{i}].role"),
                            "tool_result blocks belong to tool or user messages",
                        ));
                    }
                    if tool_use_id.is_empty() {
                        v.push(FieldViolation::new(at("tool_result.tool_use_id"), "required"));
                    }
                }
            }
        }
    }
    for (i, p) in req.pinned.iter().enumerate() {
        if p.content.is_empty() {
            v.push(FieldViolation::new(format!("pinned[{i}].content"), "required"));
        }
    }
    v
}

/// The message restoring a pinned item, sealed with `key`: the line after
/// its opening is a [`SEAL`] with the keyed hash of the rest of the text, so
/// an end user's message that starts with `<pinned` is not one.
pub fn pinned_message(p: &Pinned, key: &MarkerKey) -> Msg {
    let mut text = String::with_capacity(p.content.len() + p.kind.len() + p.id.len() + 80);
    text.push_str(PINNED_OPEN);
    for (name, value) in [("kind", &p.kind), ("id", &p.id)] {
        if !value.is_empty() {
            text.push(' ');
            text.push_str(name);
            text.push_str("=\"");
            escape_attr(&mut text, value);
            text.push('"');
        }
    }
    text.push_str(">\n");
    let opening = text.len();
    escape_tags(&mut text, &p.content, &PINNED_TAGS);
    text.push_str(PINNED_CLOSE);
    let tag = key.tag(b"pinned", &text);
    text.insert_str(opening, &format!("{SEAL}{tag}\n"));
    Msg {
        id: p.id.clone(),
        role: Role::User,
        content: vec![Content::Text(text)],
    }
}

/// Whether `m` is a pinned item this module restored with `key`: the line
/// after its opening seals the text without that line. (Attribute values
/// are escaped, so the first `>` and line break end the opening.)
pub fn is_pinned_message(m: &Msg, key: &MarkerKey) -> bool {
    let [Content::Text(t)] = m.content.as_slice() else {
        return false;
    };
    if m.role != Role::User || !t.starts_with(PINNED_OPEN) || !t.ends_with(PINNED_CLOSE) {
        return false;
    }
    let Some(opening) = t.find(">\n").map(|at| at + 2) else {
        return false;
    };
    let Some((tag, rest)) = t[opening..]
        .strip_prefix(SEAL)
        .and_then(|r| r.split_at_checked(TAG_CHARS))
    else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('\n') else {
        return false;
    };
    let unsealed = format!("{}{rest}", &t[..opening]);
    key.verify(b"pinned", &unsealed, tag)
}
