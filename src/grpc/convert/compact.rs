//! Wire <-> domain conversions of the Compact RPC.

use super::super::pb;
use super::{role_from_wire, role_to_wire};
use crate::compact::CompactError;
use crate::compact::{self, CompactOutcome, Compaction, Content, Msg, Pinned};
use crate::vocab::{FieldViolation, Role};

wire_enum!(outcome_to_wire, outcome_from_wire, CompactOutcome, pb::CompactOutcome, {
    CompactOutcome::Compacted => pb::CompactOutcome::Compacted,
    CompactOutcome::CompactedOverTarget => pb::CompactOutcome::CompactedOverTarget,
    CompactOutcome::BelowTrigger => pb::CompactOutcome::BelowTrigger,
    CompactOutcome::NothingToCompact => pb::CompactOutcome::NothingToCompact,
    CompactOutcome::BreakerTrimmed => pb::CompactOutcome::BreakerTrimmed,
    CompactOutcome::EmergencyTrimmed => pb::CompactOutcome::EmergencyTrimmed,
});

impl TryFrom<pb::CompactRequest> for compact::CompactRequest {
    type Error = CompactError;

    fn try_from(r: pb::CompactRequest) -> Result<Self, Self::Error> {
        let mut v = Vec::new();
        let messages = r
            .messages
            .into_iter()
            .enumerate()
            .map(|(i, m)| message_from_wire(i, m, &mut v))
            .collect();
        if !v.is_empty() {
            return Err(CompactError::InvalidArgument(v));
        }
        Ok(compact::CompactRequest {
            request_id: r.request_id,
            model: r.model,
            session_id: r.session_id,
            messages,
            trigger_tokens: r.trigger_tokens,
            target_tokens: r.target_tokens,
            preserve_recent: r.preserve_recent,
            pinned: r
                .pinned
                .into_iter()
                .map(|p| Pinned {
                    id: p.id,
                    kind: p.kind,
                    content: p.content,
                })
                .collect(),
            context_length_exceeded: r.context_length_exceeded,
            cache_salt: r.cache_salt,
        })
    }
}

/// One message; bad fields are added to `v` (the message is then unused).
fn message_from_wire(i: usize, m: pb::ConversationMessage, v: &mut Vec<FieldViolation>) -> Msg {
    let role = match role_from_wire(m.role) {
        Ok(Some(role)) => role,
        Ok(None) => {
            v.push(FieldViolation::new(format!("messages[{i}].role"), "required"));
            Role::User
        }
        Err(()) => {
            v.push(FieldViolation::new(format!("messages[{i}].role"), "unknown role"));
            Role::User
        }
    };
    let content = m
        .content
        .into_iter()
        .enumerate()
        .filter_map(|(j, c)| {
            use pb::content_block::Block;
            match c.block {
                Some(Block::Text(t)) => Some(Content::Text(t)),
                Some(Block::ToolUse(u)) => Some(Content::ToolUse {
                    id: u.id,
                    name: u.name,
                    input: u.input,
                }),
                Some(Block::ToolResult(r)) => Some(Content::ToolResult {
                    tool_use_id: r.tool_use_id,
                    output: r.output,
                    is_error: r.is_error,
                }),
                Some(Block::Thinking(t)) => Some(Content::Thinking(super::thinking_from_wire(t))),
                None => {
                    v.push(FieldViolation::new(
                        format!("messages[{i}].content[{j}]"),
                        "one of text, tool_use, tool_result or thinking is required",
                    ));
                    None
                }
            }
        })
        .collect();
    Msg {
        id: m.id,
        role,
        content,
    }
}

/// A domain message on the wire.
pub fn message_to_wire(m: Msg) -> pb::ConversationMessage {
    use pb::content_block::Block;
    pb::ConversationMessage {
        id: m.id,
        role: role_to_wire(m.role).into(),
        content: m
            .content
            .into_iter()
            .map(|c| pb::ContentBlock {
                block: Some(match c {
                    Content::Text(t) => Block::Text(t),
                    Content::ToolUse { id, name, input } => Block::ToolUse(pb::ToolUse { id, name, input }),
                    Content::ToolResult {
                        tool_use_id,
                        output,
                        is_error,
                    } => Block::ToolResult(pb::ToolResult {
                        tool_use_id,
                        output,
                        is_error,
                    }),
                    Content::Thinking(t) => Block::Thinking(super::thinking_to_wire(t)),
                }),
            })
            .collect(),
    }
}

impl From<Compaction> for pb::CompactResponse {
    fn from(c: Compaction) -> Self {
        pb::CompactResponse {
            request_id: c.request_id,
            model: c.model,
            messages: c.messages.into_iter().map(message_to_wire).collect(),
            compacted: c.outcome.compacted(),
            outcome: outcome_to_wire(c.outcome).into(),
            reason: c.reason,
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
            trigger_tokens: c.trigger_tokens,
            target_tokens: c.target_tokens,
            preserve_recent: c.preserve_recent,
            tokenizer: c.tokenizer,
            exact: c.exact,
            provenance: c.provenance.map(|p| pb::CompactProvenance {
                message_ids: p.message_ids,
                start: p.start,
                end: p.end,
                merged_summary_index: p.merged_summary_index,
            }),
            summary_index: c.summary_index,
            trim_steps: c
                .trim_steps
                .into_iter()
                .map(|s| pb::TrimStep {
                    message_ids: s.message_ids,
                    start: s.start,
                    end: s.end,
                    tokens_after: s.tokens_after,
                })
                .collect(),
            breaker: Some(pb::BreakerState {
                consecutive_failures: c.breaker.consecutive_failures,
                open: c.breaker.open,
                opened_now: c.breaker.opened_now,
            }),
            warnings: c.warnings.into_iter().map(super::warning_to_wire).collect(),
        }
    }
}

/// Content blocks and pinned items of a wire request: its size for the
/// item limit.
pub fn items(r: &pb::CompactRequest) -> usize {
    r.messages.iter().map(|m| m.content.len().max(1)).sum::<usize>() + r.pinned.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_roles_and_blocks_are_field_violations() {
        let wire = pb::CompactRequest {
            model: "gpt-5".into(),
            messages: vec![
                pb::ConversationMessage {
                    id: "a".into(),
                    role: 0,
                    content: vec![pb::ContentBlock { block: None }],
                },
                pb::ConversationMessage {
                    id: "b".into(),
                    role: 77,
                    content: vec![],
                },
            ],
            ..pb::CompactRequest::default()
        };
        let Err(CompactError::InvalidArgument(v)) = compact::CompactRequest::try_from(wire) else {
            panic!("accepted");
        };
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["messages[0].role", "messages[0].content[0]", "messages[1].role"]
        );
    }

    #[test]
    fn messages_survive_a_round_trip_through_the_wire() {
        let m = Msg {
            id: "m1".into(),
            role: Role::Assistant,
            content: vec![
                Content::Text("calling".into()),
                Content::ToolUse {
                    id: "t1".into(),
                    name: "bash".into(),
                    input: "{}".into(),
                },
            ],
        };
        let wire = pb::CompactRequest {
            messages: vec![message_to_wire(m.clone())],
            ..pb::CompactRequest::default()
        };
        let back = compact::CompactRequest::try_from(wire).map(|r| r.messages);
        assert_eq!(back, Ok(vec![m]));
    }
}
