//! What a prompt costs besides its contents, model by model: every message
//! costs its content and a frame for its role, and the prompt a priming
//! once. A tokenizer holds its model's frames; [`super::chat`] counts with
//! them.
//!
//! For OpenAI's models the formula is exact (the cookbook's: 3 tokens per
//! message plus its role's, 3 to prime the reply). For a model folder the
//! frames are what its chat template puts around a message of each role,
//! measured once when the folder is loaded by rendering small conversations
//! through the template itself ([`Framing::of`]). Tokens can merge where a
//! frame meets a content (ChatML's `user\n` and a content opening with a
//! newline make one `\n\n` token), so a content is not counted alone: the
//! tokenizer cuts a rendering at its added tokens first, and a message costs
//! the frame outside the piece that holds its content plus that piece's
//! count ([`Glue`]), exactly. Where a template sets no content in a piece of
//! its own (Gemma folds the system prompt into the first user turn) the sum
//! is an estimate; the exact count of a prompt is its rendering, counted
//! piece by piece ([`crate::tokens::Tokenizer::rendered_text`],
//! [`crate::tokens::hf::HfModel::split`]), and the assembler settles on it.
//!
//! Nothing here names the tokenizer: it is below it.

use super::hf::{HfModel, Piece};
use super::template::ChatMessage;
use crate::vocab::Role;

/// Tokens every reply is primed with.
pub const REPLY_PRIMING_TOKENS: u32 = 3;
/// Tokens every message costs besides its role and content.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 3;

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

/// How a template joins a message's content to the text around it: the
/// piece of the rendering that holds the content (the text between the
/// added tokens on either side, [`crate::tokens::hf::Piece`]) is `head`,
/// the content (stripped, where the template writes `content | trim`) and
/// `tail`. ChatML's user head is `user\n`; Llama 3's is `\n\n`.
///
/// The tokenizer cuts a rendering at its added tokens before anything else,
/// so that piece is tokenized on its own: a message costs the frame outside
/// it plus the count of the piece, exactly, whatever merges across the
/// seam between `head` and the content (a content opening with a newline
/// after ChatML's `user\n` makes one `\n\n` token of the two). Counting
/// the content alone and adding a frame misses that seam.
///
/// The piece's count key is [`Glue::piece_key`], with the tokenizer it
/// takes ([`super::chat`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Glue {
    /// The text before the content in its piece.
    pub head: String,
    /// The text after the content in its piece.
    pub tail: String,
    /// Whether the template strips the content (Python's `str.strip()`).
    pub trim: bool,
}

impl Glue {
    /// Whether the piece is the content itself.
    pub fn is_identity(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty() && !self.trim
    }

    /// The content as the template writes it.
    pub fn content<'c>(&self, content: &'c str) -> &'c str {
        if self.trim {
            crate::tokens::template::py_strip(content)
        } else {
            content
        }
    }

    /// The piece holding `content`.
    pub fn piece(&self, content: &str) -> String {
        let c = self.content(content);
        let mut out = String::with_capacity(self.head.len() + c.len() + self.tail.len());
        out.push_str(&self.head);
        out.push_str(c);
        out.push_str(&self.tail);
        out
    }
}

/// A template's costs besides contents, and its layout rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Framing {
    /// Tokens around a message's content counted alone, by [`Role::ALL`]
    /// order (no seam).
    pub frames: [u32; 4],
    /// Tokens outside the piece holding the content, by [`Role::ALL`]
    /// order and position (as [`Framing::glue`]), for a role with a
    /// [`Glue`] (else its frame). Below zero where the piece holds text
    /// the priming already counts (Llama 3.1's dated system header).
    pub rest: [[i64; 2]; 4],
    /// How each role's content is joined into its piece, by [`Role::ALL`]
    /// order, for a message that opens the prompt (`[role][1]`) or follows
    /// another (`[role][0]`); `None` where the template does not set the
    /// content in a piece of its own (Gemma folds the system prompt into
    /// the first user turn) or refuses the role there.
    pub glue: [[Option<Glue>; 2]; 4],
    /// Tokens the prompt adds once.
    pub priming: u32,
    /// How messages must be laid out.
    pub rules: LayoutRules,
}

/// A content no template alters or meets in its own text: private-use
/// characters around a number.
fn sentinel(i: usize) -> String {
    format!("\u{E000}{i}\u{E000}")
}

/// The glue of the message at `at` of a conversation in `roles`, found by
/// rendering it with sentinel contents, then again with that content padded
/// with whitespace (to see whether the template strips it and that the
/// head and tail do not depend on it). `None` when the template refuses
/// the conversation or the content does not sit in a piece of its own.
fn glue_at(model: &HfModel, roles: &[&'static str], at: usize) -> Option<Glue> {
    let template = model.template()?;
    let core = sentinel(at);
    let piece_with = |content: &str| -> Option<(String, String, String)> {
        let contents: Vec<String> = (0..roles.len())
            .map(|i| if i == at { content.to_owned() } else { sentinel(i) })
            .collect();
        let msgs: Vec<ChatMessage<'_>> = roles
            .iter()
            .zip(&contents)
            .map(|(&role, c)| ChatMessage::new(role, c))
            .collect();
        let text = template.render(&msgs, None, true).ok()?;
        let start = text.find(&core)?;
        let end = start + core.len();
        let mut found = None;
        model.split(&text, |p| {
            if let Piece::Text(t) = p {
                let from = t.as_ptr() as usize - text.as_ptr() as usize;
                if from <= start && end <= from + t.len() {
                    found = Some((from, from + t.len()));
                }
            }
        })?;
        let (from, to) = found?;
        Some((
            text[from..start].to_owned(),
            text[start..end].to_owned(),
            text[end..to].to_owned(),
        ))
    };
    let (head, _, tail) = piece_with(&core)?;
    if head.contains('\u{E000}') || tail.contains('\u{E000}') {
        return None;
    }
    let (h2, _, t2) = piece_with(&format!(" \n{core}\n "))?;
    let trim = if h2 == head && t2 == tail {
        true
    } else if h2.strip_suffix(" \n") == Some(head.as_str()) && t2.strip_prefix("\n ") == Some(tail.as_str()) {
        false
    } else {
        return None;
    };
    Some(Glue { head, tail, trim })
}

impl Framing {
    /// The framing of `model`: without a template, `overhead` per message
    /// and nothing else (how Google's local counter counts Gemini contents);
    /// with one, measured by rendering probe conversations (see the module
    /// doc), each frame at least 0.
    pub fn of(model: &HfModel, overhead: u32) -> Framing {
        if model.template().is_none() {
            return Framing {
                frames: [overhead; 4],
                rest: [[i64::from(overhead); 2]; 4],
                ..Framing::default()
            };
        }
        let mut glue: [[Option<Glue>; 2]; 4] = Default::default();
        let (s, u, a, t) = ("system", "user", "assistant", "tool");
        glue[Role::System as usize] = [glue_at(model, &[s, s, u], 1), glue_at(model, &[s, u, a, u], 0)];
        glue[Role::User as usize] = [glue_at(model, &[s, u, a, u], 3), glue_at(model, &[u, a, u], 0)];
        glue[Role::Assistant as usize] = [glue_at(model, &[s, u, a, u], 2), None];
        glue[Role::Tool as usize] = [glue_at(model, &[u, a, t, u], 2), None];
        let glued = |role: &str, first: bool, content: &str| -> i64 {
            let g = Role::ALL
                .into_iter()
                .find(|r| r.as_str() == role)
                .and_then(|r| glue[r as usize][usize::from(first)].as_ref());
            i64::from(match g {
                Some(g) => model.count(&g.piece(content)),
                None => model.count(content),
            })
        };
        let plain = |_: &str, _: bool, content: &str| i64::from(model.count(content));
        let clamp = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
        let (bare, _, rules) = measure(model, plain);
        // One priming for both: the pieces' (they equal where no text of a
        // frame but the pieces' heads and tails depends on the contents).
        let (rest, priming, _) = measure(model, glued);
        Framing {
            frames: bare.map(|f| clamp(f[0])),
            rest,
            glue,
            priming: clamp(priming),
            rules,
        }
    }

    /// The glue of a `role` message (opening the prompt when `first`), as
    /// the message will be sent (a tool result as a user turn, where the
    /// template takes no tool messages).
    pub fn glue(&self, role: Role, first: bool) -> Option<&Glue> {
        self.glue[self.sent_as(role, first) as usize][usize::from(first)].as_ref()
    }

    /// The frame outside a `role` message's piece (see [`Framing::glue`]).
    pub fn rest(&self, role: Role, first: bool) -> i64 {
        self.rest[self.sent_as(role, first) as usize][usize::from(first)]
    }

    fn sent_as(&self, role: Role, first: bool) -> Role {
        match role {
            Role::Tool if self.rules.tool_as_user => Role::User,
            Role::System if !first && self.rules.system_only_first => Role::User,
            r => r,
        }
    }
}

/// What each message of a role costs besides its content, by [`Role::ALL`]
/// order and position (`[role][1]` opening the prompt, `[role][0]` after
/// another message), the priming, and the layout rules of `model`'s
/// template, where a message's content costs `cost(role, first, content)`.
///
/// Frames are differences of renderings that differ by one message, each
/// message placed before a user turn: a template may write a last
/// assistant turn otherwise (Qwen 3 opens it with an empty thinking block),
/// and a prompt always ends with the user's turn. A message opening the
/// prompt may cost less than nothing besides its content: Llama 3.1 writes
/// a dated system header either way, and the first system message's piece
/// holds it.
fn measure(model: &HfModel, cost: impl Fn(&str, bool, &str) -> i64) -> ([[i64; 2]; 4], i64, LayoutRules) {
    let Some(template) = model.template() else {
        return Default::default();
    };
    const A: &str = "Hello there.";
    const B: &str = "Sure, here it is.";
    const C: &str = "Thanks!";
    let msg = ChatMessage::new;
    // Tokens of a rendering (with the generation prompt or not) beyond its
    // contents, or None if refused.
    let beyond = |msgs: &[ChatMessage<'_>], generate: bool| -> Option<i64> {
        let text = template.render(msgs, None, generate).ok()?;
        let contents: i64 = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| cost(m.role, i == 0, m.content))
            .sum();
        Some(i64::from(model.count(&text)) - contents)
    };
    let extra = |msgs: &[ChatMessage<'_>]| beyond(msgs, true);
    let (u, a, s, t) = (
        msg("user", A),
        msg("assistant", B),
        msg("system", C),
        msg("tool", C),
    );
    let rules = LayoutRules {
        merge_consecutive: template.render(&[u, msg("user", C)], None, true).is_err()
            || template.render(&[s, msg("system", B), u], None, true).is_err(),
        tool_as_user: template.render(&[u, a, t], None, true).is_err(),
        system_only_first: template.render(&[u, a, s, msg("user", C)], None, true).is_err(),
        user_first: template.render(&[a, msg("user", C)], None, true).is_err(),
    };
    let one = extra(&[u]).unwrap_or(0);
    let exchange = extra(&[u, a, msg("user", C)]).map_or(0, |n| n - one);
    let user = match extra(&[u, msg("user", C)]) {
        Some(n) => n - one,
        // Roles that must alternate: the assistant's turn measured on its
        // own (a template that writes a last assistant turn otherwise would
        // not also refuse two users).
        None => {
            let assistant = match (beyond(&[u, a], false), beyond(&[u], false)) {
                (Some(p), Some(o)) => p - o,
                _ => 0,
            };
            exchange - assistant
        }
    };
    let assistant = exchange - user;
    let priming = one - user;
    let system_first = extra(&[s, u]).map_or(user, |n| n - one);
    let system = extra(&[s, msg("system", B), u])
        .and_then(|n| Some(n - extra(&[s, u])?))
        .unwrap_or(if rules.system_only_first {
            user
        } else {
            system_first
        });
    let tool = if rules.tool_as_user {
        user
    } else {
        extra(&[u, a, t, msg("user", C)]).map_or(user, |n| n - one - exchange)
    };
    let mut frames = [[0; 2]; 4];
    for role in Role::ALL {
        frames[role as usize] = match role {
            Role::System => [system, system_first],
            Role::User => [user, user],
            Role::Assistant => [assistant, assistant],
            Role::Tool => [tool, tool],
        };
    }
    (frames, priming, rules)
}
