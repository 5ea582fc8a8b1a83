//! Whose message a text is.

/// The role of a message; rendered as its lower-case name when counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Application instructions.
    System,
    /// The end user, and context rendered on their behalf.
    User,
    /// The model; may make tool calls.
    Assistant,
    /// A tool result; answers one call.
    Tool,
}

impl Role {
    /// The role string used by chat APIs and by the token formula.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Every role, for warming per-role token counts.
    pub const ALL: [Role; 4] = [Role::System, Role::User, Role::Assistant, Role::Tool];
}
