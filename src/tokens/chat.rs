//! The chat formula: what a prompt costs besides its contents. Every message
//! costs its content and a frame for its role; the prompt costs a priming
//! once. Assemble and Compact both count with it.
//!
//! For OpenAI's models the formula is exact (the cookbook's: 3 tokens per
//! message plus its role's, 3 to prime the reply). For a model folder the
//! frames are what its chat template puts around a message of each role,
//! measured once when the folder is loaded by rendering small conversations
//! through the template itself ([`Framing::of`]): an estimate, since a
//! template may frame the first message, or a message after another of the
//! same role, differently, and tokens can merge across a frame's edge. The
//! exact count of such a prompt is its rendering, tokenized whole
//! ([`crate::tokens::Tokenizer::rendered_text`], counted); the assembler settles on
//! it.

use super::hf::HfModel;
use super::template::ChatMessage;
use super::tokenizer::Tokenizer;
use crate::vocab::Role;

/// Tokens every reply is primed with.
pub const REPLY_PRIMING_TOKENS: u32 = 3;
/// Tokens every message costs besides its role and content.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 3;

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

/// What a template needs of a prompt's layout, found by running it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayoutRules {
    /// The template refuses two consecutive messages of one role (Gemma's
    /// "roles must alternate"): consecutive messages of a role are sent as
    /// one.
    pub merge_consecutive: bool,
    /// The template refuses a `tool` message: tool results are sent as
    /// `user` messages.
    pub tool_as_user: bool,
    /// The template refuses a `system` message after the conversation has
    /// begun (Gemma's: only a first system message is folded in): a later
    /// one is sent as a `user` message.
    pub system_only_first: bool,
    /// The template refuses a conversation that opens with an assistant
    /// turn (Gemma's alternation starts with the user): a reply is kept or
    /// dropped with the user turn it answers.
    pub user_first: bool,
}

/// A template's costs besides contents, and its layout rules.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Framing {
    /// Tokens around a message's content, by [`Role::ALL`] order.
    pub frames: [u32; 4],
    /// Tokens the prompt adds once.
    pub priming: u32,
    /// How messages must be laid out.
    pub rules: LayoutRules,
}

impl Framing {
    /// The framing of `model`: without a template, `overhead` per message
    /// and nothing else (how Google's local counter counts Gemini contents);
    /// with one, measured by rendering probe conversations (see the module
    /// doc), each frame at least 0.
    pub fn of(model: &HfModel, overhead: u32) -> Framing {
        let Some(template) = model.template() else {
            return Framing {
                frames: [overhead; 4],
                ..Framing::default()
            };
        };
        const A: &str = "Hello there.";
        const B: &str = "Sure, here it is.";
        const C: &str = "Thanks!";
        let msg = |role, content| ChatMessage { role, content };
        // Tokens of a rendering beyond its contents, or None if refused.
        let extra = |msgs: &[ChatMessage<'_>], generate: bool| -> Option<i64> {
            let text = template.render(msgs, None, generate).ok()?;
            let contents: i64 = msgs.iter().map(|m| i64::from(model.count(m.content))).sum();
            Some(i64::from(model.count(&text)) - contents)
        };
        let (u, a) = (msg("user", A), msg("assistant", B));
        let one = extra(&[u], true).unwrap_or(0);
        let one_bare = extra(&[u], false).unwrap_or(one);
        let pair_bare = extra(&[u, a], false).unwrap_or(one_bare);
        let three = extra(&[u, a, msg("user", C)], true).unwrap_or(one);
        let assistant = (pair_bare - one_bare).max(0);
        let user = (three - one - assistant).max(0);
        let priming = (one - user).max(0);
        let system = extra(&[msg("system", C), u], true).map_or(user, |n| (n - one).max(0));
        let rules = LayoutRules {
            merge_consecutive: template.render(&[u, msg("user", C)], None, true).is_err()
                || template
                    .render(&[msg("system", C), msg("system", B), u], None, true)
                    .is_err(),
            tool_as_user: template.render(&[u, a, msg("tool", C)], None, true).is_err(),
            system_only_first: template
                .render(&[u, a, msg("system", C), msg("user", C)], None, true)
                .is_err(),
            user_first: template.render(&[a, msg("user", C)], None, true).is_err(),
        };
        let tool = if rules.tool_as_user {
            user
        } else {
            extra(&[u, a, msg("tool", C)], true).map_or(user, |n| (n - one - assistant).max(0))
        };
        let clamp = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        let mut frames = [0; 4];
        for role in Role::ALL {
            frames[role as usize] = clamp(match role {
                Role::System => system,
                Role::User => user,
                Role::Assistant => assistant,
                Role::Tool => tool,
            });
        }
        Framing {
            frames,
            priming: clamp(priming),
            rules,
        }
    }
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
        assert_eq!(prompt_tokens(&tok, []), REPLY_PRIMING_TOKENS);
        assert_eq!(
            prompt_tokens(&tok, [system, 7]),
            REPLY_PRIMING_TOKENS + system + 7
        );
        assert_eq!(message_tokens(&tok, Role::User, u32::MAX), u32::MAX);
    }
}
