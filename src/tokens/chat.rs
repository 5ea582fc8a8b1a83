//! The chat formula: what a prompt costs besides its contents. Every message
//! costs its content and a frame for its role; the prompt costs a priming
//! once. Assemble and Compact both count with it.
//!
//! The frames are a tokenizer's: OpenAI's formula, or what a model folder's
//! chat template puts around a message, measured when the folder is loaded
//! ([`super::framing`], below the tokenizer that holds them). Here they are
//! added to a tokenizer's counts, and the piece holding a message's content
//! ([`Glue`]) is keyed as the count cache keys it.

use super::cache::Key;
pub use super::framing::{Framing, Glue, LayoutRules, MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS};
use super::tokenizer::Tokenizer;
use crate::vocab::Role;

/// Tokens of one message in `role` whose content counts `content` tokens.
pub fn message_tokens(tok: &Tokenizer, role: Role, content: u32) -> u32 {
    content.saturating_add(tok.frame_tokens(role))
}

/// Tokens of a prompt whose messages cost `messages` (each from
/// [`message_tokens`]): their sum plus the priming.
pub fn prompt_tokens(tok: &Tokenizer, messages: impl IntoIterator<Item = u32>) -> u32 {
    messages
        .into_iter()
        .fold(tok.priming_tokens(), u32::saturating_add)
}

impl Glue {
    /// The count key of the piece holding `content`, as
    /// [`super::cache::key`] of [`Glue::piece`] is (the piece's bytes,
    /// hashed without building it).
    pub fn piece_key(&self, tok: &Tokenizer, content: &str) -> Key {
        let c = self.content(content);
        let mut h = tok.text_hasher(self.head.len() + c.len() + self.tail.len());
        h.update(self.head.as_bytes());
        h.update(c.as_bytes());
        h.update(self.tail.as_bytes());
        h.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Encoding;

    /// A trimmed content that is long enough for blake3 before trimming and
    /// short enough for SHA-256 after: the key is chosen by the piece.
    #[test]
    fn a_trimmed_piece_is_keyed_by_its_own_length() {
        let tok = Tokenizer::exact(Encoding::O200kBase);
        let g = Glue {
            head: String::new(),
            tail: String::new(),
            trim: true,
        };
        let short = crate::tokens::digest::SHORT_TEXT_BYTES;
        let content = format!("{}{}{}", " ".repeat(20), "x".repeat(short - 10), " ".repeat(20));
        let piece = g.piece(&content);
        assert!(content.len() >= short && piece.len() < short);
        assert_eq!(
            g.piece_key(&tok, &content),
            crate::tokens::cache::key(&tok, piece.as_bytes())
        );
    }

    proptest::proptest! {
        /// The key of a piece hashed without building it is the count key
        /// of the piece built (what the final count looks up), on both
        /// sides of the length where the key's hash changes.
        #[test]
        fn a_piece_key_is_the_key_of_the_piece(
            head in "[a-z<|>\\n ]{0,12}",
            tail in "[a-z<|>\\n ]{0,12}",
            trim in proptest::bool::ANY,
            body in "[ \\na-zé]{0,40}",
            long in proptest::bool::ANY,
        ) {
            let tok = Tokenizer::exact(Encoding::O200kBase);
            let g = Glue { head, tail, trim };
            let filler = if long { "x".repeat(crate::tokens::digest::SHORT_TEXT_BYTES - 30) } else { String::new() };
            let content = format!(" {filler}{body} ");
            let piece = g.piece(&content);
            proptest::prop_assert_eq!(
                g.piece_key(&tok, &content),
                crate::tokens::cache::key(&tok, piece.as_bytes())
            );
        }
    }

    #[test]
    fn a_prompt_is_its_messages_plus_the_priming() {
        let tok = Tokenizer::exact(Encoding::O200kBase);
        let system = message_tokens(&tok, Role::System, 10);
        assert_eq!(
            system,
            10 + MESSAGE_OVERHEAD_TOKENS + tok.role_tokens(Role::System)
        );
        assert_eq!(prompt_tokens(&tok, []), REPLY_PRIMING_TOKENS);
        assert_eq!(
            prompt_tokens(&tok, [system, 7]),
            REPLY_PRIMING_TOKENS + system + 7
        );
        assert_eq!(message_tokens(&tok, Role::User, u32::MAX), u32::MAX);
    }
}
