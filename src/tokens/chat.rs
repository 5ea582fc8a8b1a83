//! The chat formula: what a prompt costs besides its contents. Every message
//! costs its content, its role's tokens and a fixed overhead; the reply is
//! primed with a few tokens more. Assemble and Compact both count with it.

use super::tokenizer::Tokenizer;
use crate::vocab::Role;

/// Tokens every reply is primed with.
pub const REPLY_PRIMING_TOKENS: u32 = 3;
/// Tokens every message costs besides its role and content.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 3;

/// Tokens of one message in `role` whose content counts `content` tokens.
pub fn message_tokens(tok: &Tokenizer, role: Role, content: u32) -> u32 {
    content.saturating_add(MESSAGE_OVERHEAD_TOKENS.saturating_add(tok.role_tokens(role)))
}

/// Tokens of a prompt whose messages cost `messages` (each from
/// [`message_tokens`]): their sum plus the reply priming.
pub fn prompt_tokens(messages: impl IntoIterator<Item = u32>) -> u32 {
    messages
        .into_iter()
        .fold(REPLY_PRIMING_TOKENS, u32::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Encoding;

    #[test]
    fn a_prompt_is_its_messages_plus_the_priming() {
        let tok = Tokenizer::exact(Encoding::O200kBase);
        let system = message_tokens(&tok, Role::System, 10);
        assert_eq!(
            system,
            10 + MESSAGE_OVERHEAD_TOKENS + tok.role_tokens(Role::System)
        );
        assert_eq!(prompt_tokens([]), REPLY_PRIMING_TOKENS);
        assert_eq!(prompt_tokens([system, 7]), REPLY_PRIMING_TOKENS + system + 7);
        assert_eq!(message_tokens(&tok, Role::User, u32::MAX), u32::MAX);
    }
}
