//! Chat templates this build renders without the engine: a few known
//! template programs, each recognized by the BLAKE3 digest of its exact
//! text, written out as Rust that produces the same bytes as the engine
//! running that text. Rendering a 60-turn conversation through the engine
//! is mostly its interpreter and its string concatenation (history §41);
//! written out, it is copying the contents once.
//!
//! Nothing here changes what a prompt is, only how fast its text is made:
//! - a template is rendered natively only where its text is one of
//!   [`KNOWN`]'s, byte for byte, and only with the special tokens the
//!   folder names (a template that reads `bos_token` needs one);
//! - when a template is compiled, [`ChatTemplate::new`](super::ChatTemplate)
//!   renders [`PROBES`] both ways and keeps the native renderer only if every
//!   text is the engine's;
//! - a renderer declines (`None`) every input it does not reproduce with
//!   certainty (tools, an empty conversation, an unknown role, a conversation
//!   the template refuses), and the engine renders it: errors always come
//!   from the engine, with its messages;
//! - the tests hold each renderer to the engine on every shape and on random
//!   conversations, with the real folders' templates
//!   (`native_renders_as_the_engine_on_any_conversation` in `tests.rs`), and
//!   CI's reference checks hold the server's renders to `transformers`.
//!
//! A folder whose template is not one of these renders through the engine,
//! as before; `docs/models.md` lists the templates recognized.
//!
//! # A new template rendered natively
//!
//! A folder whose startup line says `template="engine"` comes here in four
//! steps:
//!
//! 1. Read the template whole, with the whitespace control, and decide what
//!    it reads of a [`ChatMessage`]: role, content, `reasoning_content` or
//!    `thinking`. A template that reads anything else of a message, loops
//!    over tools, or calls `strftime_now` is left to the engine.
//! 2. Write it as a function beside these, declining (`None`) wherever the
//!    engine would raise and for every input it is not sure of.
//! 3. Add its family and the BLAKE3 digest of its exact text to [`KNOWN`],
//!    and a conversation to [`PROBES`] for any seam the others lack.
//! 4. Prove it: its folder in `real_templates` (the tests' list), so that
//!    `native_renders_as_the_engine_on_any_conversation` holds it to the
//!    engine on random conversations; the folder in `.ci/hf_vocab.sh`, so
//!    that `tests/reference/hf_check.py` holds the server's prompts to
//!    `transformers`; the `rendered_count_hf` bench side by side.

use super::{ChatMessage, python_strip};

/// The template programs rendered natively: the BLAKE3 digest of the exact
/// template text (as `tokenizer_config.json`'s `chat_template` or
/// `chat_template.jinja` holds it), and its family.
const KNOWN: [(&str, Family); 4] = [
    // Llama 3.1's folder: each message a header, its trimmed content and
    // `<|eot_id|>`, the first after `bos_token`.
    (
        "ab16d5a143b58283571c18dca5c81c895a83ac6440ce85f9d7ad7b02ff702b58",
        Family::Llama31,
    ),
    // Qwen 3's: ChatML, reasoning kept after the last query only.
    (
        "45fdf00a05e3daa5751bcd1de40a0a8280bde6328765dfe3828f9dac093b584b",
        Family::Qwen3,
    ),
    // Gemma 3's: `model` turns, the system prompt before the first user text.
    (
        "4df92a35314def747578d2abf98761e7ed8a4646e5fb7d8553406a7dbb6fdbd4",
        Family::Gemma3,
    ),
    // DeepSeek V3's: every system prompt first, then User and Assistant.
    (
        "4cc4494e386866a4cfb20a0d75cc0e19e45c082652bf365f167afe47f99de3d2",
        Family::DeepSeekV3,
    ),
];

/// The most messages rendered natively. The engine runs a template on a
/// bounded fuel, which Qwen 3's, Gemma 3's and DeepSeek V3's templates use
/// up at about 1.28 million messages (a conversation far past the request
/// limits' defaults); past this bound the engine renders, so that such a
/// conversation fails as it would without the native renderer.
pub(super) const MAX_MESSAGES: usize = 100_000;

/// Which known template program a text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Llama31,
    Qwen3,
    Gemma3,
    DeepSeekV3,
}

/// A known template program with the special tokens it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Native {
    family: Family,
    /// `bos_token` as the folder names it (empty for a template that does
    /// not read it).
    bos: String,
}

/// Conversations rendered both ways when a template compiles: every role,
/// reasoning given and written into the content, texts to trim, runs of
/// tool results, a system prompt first and later, with and without the
/// generation prompt (`render_probes` pairs each with both).
const PROBES: &[&[ChatMessage<'static>]] = &[
    &[msg("user", "Hi")],
    &[msg("system", " Be brief.\n"), msg("user", "\u{a0}x\u{1f}")],
    &[
        msg("system", "S"),
        msg("user", "q1"),
        ChatMessage {
            role: "assistant",
            content: "\n\na1 ",
            reasoning: Some("\nr1\n"),
        },
        msg("user", "q2"),
        msg("assistant", "<think>\nr2\n</think>\n\na2"),
    ],
    &[
        msg("user", "q"),
        msg("assistant", "a"),
        msg("tool", "{\"t\": 1}"),
        msg("tool", "<tool_response>2</tool_response>"),
        msg("user", "<tool_response>3</tool_response>"),
        ChatMessage {
            role: "assistant",
            content: "",
            reasoning: Some(""),
        },
    ],
    &[
        msg("system", "A"),
        msg("user", "b"),
        msg("system", "C"),
        msg("assistant", "x</think>y</think>\nz"),
    ],
];

const fn msg<'a>(role: &'a str, content: &'a str) -> ChatMessage<'a> {
    ChatMessage {
        role,
        content,
        reasoning: None,
    }
}

impl Native {
    /// The native renderer of the template `source`, when its text is a
    /// known program and the folder names the special tokens it reads.
    pub(super) fn recognize(source: &str, specials: &[(String, String)]) -> Option<Native> {
        let digest = blake3::hash(source.as_bytes()).to_hex();
        let family = KNOWN
            .iter()
            .find(|(known, _)| *known == digest.as_str())
            .map(|&(_, f)| f)?;
        let bos = specials
            .iter()
            .find(|(name, _)| name == "bos_token")
            .map(|(_, v)| v.clone());
        let bos = match family {
            Family::Qwen3 => String::new(),
            Family::Llama31 | Family::Gemma3 | Family::DeepSeekV3 => bos?,
        };
        Some(Native { family, bos })
    }

    /// Whether this renders every probe conversation as `engine` does,
    /// with and without the generation prompt (declining one is agreeing:
    /// the engine renders it).
    pub(super) fn agrees(&self, engine: impl Fn(&[ChatMessage<'_>], bool) -> Option<String>) -> bool {
        PROBES.iter().all(|&messages| {
            [true, false].into_iter().all(|generate| {
                self.render(messages, generate)
                    .is_none_or(|text| engine(messages, generate) == Some(text))
            })
        })
    }

    /// The text the template renders for `messages` (no tools), or `None`
    /// where the engine must render it.
    pub(super) fn render(&self, messages: &[ChatMessage<'_>], generate: bool) -> Option<String> {
        if messages.is_empty()
            || messages.len() > MAX_MESSAGES
            || !messages
                .iter()
                .all(|m| matches!(m.role, "system" | "user" | "assistant" | "tool"))
        {
            return None;
        }
        // The contents, copied once, and each message's frame.
        let size = messages
            .iter()
            .map(|m| m.content.len() + m.reasoning.map_or(0, str::len) + 48)
            .sum::<usize>()
            + self.bos.len()
            + 32;
        let mut out = String::with_capacity(size);
        match self.family {
            Family::Llama31 => self.llama31(&mut out, messages, generate),
            Family::Qwen3 => qwen3(&mut out, messages, generate),
            Family::Gemma3 => self.gemma3(&mut out, messages, generate)?,
            Family::DeepSeekV3 => self.deepseek_v3(&mut out, messages, generate),
        }
        Some(out)
    }

    /// Llama 3.1's folder's template.
    fn llama31(&self, out: &mut String, messages: &[ChatMessage<'_>], generate: bool) {
        for (i, m) in messages.iter().enumerate() {
            if i == 0 {
                out.push_str(&self.bos);
            }
            push_all(
                out,
                &[
                    "<|start_header_id|>",
                    m.role,
                    "<|end_header_id|>\n\n",
                    trim(m.content),
                    "<|eot_id|>",
                ],
            );
        }
        if generate {
            out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
        }
    }

    /// Gemma 3's template; `None` where it raises (roles that do not
    /// alternate user, assistant, user, ... after the system prompt).
    fn gemma3(&self, out: &mut String, messages: &[ChatMessage<'_>], generate: bool) -> Option<()> {
        out.push_str(&self.bos);
        let (prefix, turns) = match messages {
            [first, rest @ ..] if first.role == "system" => (Some(first.content), rest),
            _ => (None, messages),
        };
        for (i, m) in turns.iter().enumerate() {
            if (m.role == "user") != (i % 2 == 0) {
                return None;
            }
            let role = if m.role == "assistant" { "model" } else { m.role };
            push_all(out, &["<start_of_turn>", role, "\n"]);
            if let (0, Some(prefix)) = (i, prefix) {
                push_all(out, &[prefix, "\n\n"]);
            }
            push_all(out, &[trim(m.content), "<end_of_turn>\n"]);
        }
        if generate {
            out.push_str("<start_of_turn>model\n");
        }
        Some(())
    }

    /// DeepSeek V3's template, for messages without tool calls (a
    /// [`ChatMessage`] never carries any).
    fn deepseek_v3(&self, out: &mut String, messages: &[ChatMessage<'_>], generate: bool) {
        out.push_str(&self.bos);
        let mut first_system = true;
        for m in messages.iter().filter(|m| m.role == "system") {
            if !first_system {
                out.push_str("\n\n");
            }
            out.push_str(m.content);
            first_system = false;
        }
        let mut is_tool = false;
        let mut output_first = true;
        for m in messages {
            match m.role {
                "user" => {
                    is_tool = false;
                    push_all(out, &["<｜User｜>", m.content]);
                }
                "assistant" if is_tool => {
                    push_all(
                        out,
                        &["<｜tool▁outputs▁end｜>", m.content, "<｜end▁of▁sentence｜>"],
                    );
                    is_tool = false;
                }
                "assistant" => push_all(out, &["<｜Assistant｜>", m.content, "<｜end▁of▁sentence｜>"]),
                "tool" => {
                    is_tool = true;
                    let open = if output_first {
                        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>"
                    } else {
                        "\n<｜tool▁output▁begin｜>"
                    };
                    push_all(out, &[open, m.content, "<｜tool▁output▁end｜>"]);
                    output_first = false;
                }
                _ => {}
            }
        }
        if is_tool {
            out.push_str("<｜tool▁outputs▁end｜>");
        }
        if generate && !is_tool {
            out.push_str("<｜Assistant｜>");
        }
    }
}

/// Qwen 3's template without tools: a first system prompt, then ChatML
/// turns; an assistant turn after the last real query shows its reasoning
/// (given, or written into its content between `<think>` and `</think>`),
/// earlier ones only their answer; runs of tool results in one user turn.
fn qwen3(out: &mut String, messages: &[ChatMessage<'_>], generate: bool) {
    let last = messages.len() - 1;
    if messages[0].role == "system" {
        push_all(
            out,
            &["<|im_start|>system\n", messages[0].content, "<|im_end|>\n"],
        );
    }
    let last_query = messages
        .iter()
        .rposition(|m| {
            m.role == "user"
                && !(m.content.starts_with("<tool_response>") && m.content.ends_with("</tool_response>"))
        })
        .unwrap_or(last);
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            "user" => push_all(out, &["<|im_start|>user\n", m.content, "<|im_end|>\n"]),
            "system" if i > 0 => push_all(out, &["<|im_start|>system\n", m.content, "<|im_end|>\n"]),
            "assistant" => {
                let (content, reasoning) = match m.reasoning {
                    Some(r) => (m.content, r),
                    None => match m.content.split_once("</think>") {
                        Some((before, _)) => {
                            let after = m.content.rsplit("</think>").next().unwrap_or_default();
                            let before = python_strip(before, Some("\n"), false, true);
                            let thought = before.rsplit("<think>").next().unwrap_or_default();
                            (
                                python_strip(after, Some("\n"), true, false),
                                python_strip(thought, Some("\n"), true, false),
                            )
                        }
                        None => (m.content, ""),
                    },
                };
                if i > last_query && (i == last || !reasoning.is_empty()) {
                    push_all(
                        out,
                        &[
                            "<|im_start|>assistant\n<think>\n",
                            python_strip(reasoning, Some("\n"), true, true),
                            "\n</think>\n\n",
                            python_strip(content, Some("\n"), true, false),
                        ],
                    );
                } else {
                    push_all(out, &["<|im_start|>assistant\n", content]);
                }
                out.push_str("<|im_end|>\n");
            }
            "tool" => {
                if i == 0 || messages[i - 1].role != "tool" {
                    out.push_str("<|im_start|>user");
                }
                push_all(out, &["\n<tool_response>\n", m.content, "\n</tool_response>"]);
                if i == last || messages[i + 1].role != "tool" {
                    out.push_str("<|im_end|>\n");
                }
            }
            _ => {}
        }
    }
    if generate {
        out.push_str("<|im_start|>assistant\n");
    }
}

/// Jinja's `| trim` as the engine runs it: Python's `str.strip()`.
fn trim(s: &str) -> &str {
    python_strip(s, None, true, true)
}

fn push_all(out: &mut String, parts: &[&str]) {
    for p in parts {
        out.push_str(p);
    }
}
