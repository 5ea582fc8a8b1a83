//! Anthropic Messages bodies (`/v1/messages`): `system` (a string or text
//! blocks) is the static prefix; an assistant message is one turn (its
//! text, its `tool_use` calls by name and input, its thinking verbatim); a
//! user message is one turn per `tool_result` block and one for the rest of
//! its blocks, so that a result can go with its call while the user's own
//! words stay. `tools` are counted in OpenAI's function shape (Claude's
//! counts are estimates in any case).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::{
    Blocks, Element, Listed, Parsed, Part, Spot, Turn, Unfit, list_span, member_span, object, span,
};
use super::chat::join;
use super::media::Image;
use crate::prompt::Thinking;
use crate::vocab::Role;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    system: Option<&'a RawValue>,
    /// Each message's bytes, found in the same pass as the other fields.
    #[serde(borrow)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    max_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    /// A string, or each block's bytes.
    #[serde(borrow)]
    content: Listed<'a>,
}

/// One content block, with the fields of every type the fit knows.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow)]
    data: Option<Cow<'a, str>>,
    #[serde(borrow)]
    source: Option<Source<'a>>,
    #[serde(borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Source<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    data: Option<Cow<'a, str>>,
}

/// A tool definition: its name, description and input schema.
#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow)]
    input_schema: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_control: Option<&'a RawValue>,
}

/// Parses a Messages body: one pass over the body finds the messages'
/// bytes, one over each message its blocks', one over each block reads it.
pub fn parse(body: &str) -> Result<Parsed, Unfit> {
    let req: Request<'_> = serde_json::from_str(object(body)?).map_err(|_| Unfit::Malformed)?;
    let (Some(model), Some(raw)) = (req.model, req.messages) else {
        return Err(Unfit::NotChat);
    };
    let list = match list_span(body, &raw) {
        Some(list) => list,
        None => member_span(body, body, "messages")?.ok_or(Unfit::Malformed)?,
    };
    let mut p = Parsed {
        model: model.into_owned(),
        max_output: req.max_tokens,
        list,
        elements: Vec::with_capacity(raw.len()),
        turns: Vec::with_capacity(raw.len()),
        ..Parsed::default()
    };
    if let Some(system) = req.system {
        let text = blocks_text(system, &mut p.system_images, &mut p.marks.caller)?;
        p.marks.system = spot(body, system)?;
        if !text.is_empty() {
            p.system.push(text);
        }
    }
    for t in req.tools.unwrap_or_default() {
        let (shape, marked) = function_shape(t)?;
        p.marks.caller += usize::from(marked);
        p.marks.tools.push(Spot {
            span: span(body, t),
            text: false,
            marked,
        });
        p.tools.push(shape);
    }
    for (i, raw) in raw.into_iter().enumerate() {
        message(body, &mut p, i, raw)?;
    }
    Ok(p)
}

/// Reads message `i` into `p`: its element, its turns, and where a marker
/// for it would go.
fn message(body: &str, p: &mut Parsed, i: usize, raw: &RawValue) -> Result<(), Unfit> {
    let m: Message<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
    let role = match &*m.role {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => return Err(Unfit::Unsupported),
    };
    let content = m.content.span(body, raw.get(), "content")?;
    let items = match m.content {
        Listed::Text(text) => {
            p.marks.elements.push(Some(Spot {
                span: content,
                text: true,
                marked: false,
            }));
            p.elements.push(Element {
                span: span(body, raw),
                blocks: None,
                fixed: false,
            });
            p.turns.push(Turn {
                role: Some(role),
                text: text.into_owned(),
                parts: vec![Part::whole(i)],
                ..Turn::default()
            });
            return Ok(());
        }
        Listed::Items(items) => items,
    };
    p.elements.push(Element {
        span: span(body, raw),
        blocks: Some(Blocks {
            span: content,
            items: items.iter().map(|b| span(body, b)).collect(),
        }),
        fixed: false,
    });
    let last_marked = blocks(body, p, i, role, &items)?;
    p.marks.elements.push(items.last().map(|last| Spot {
        span: span(body, last),
        text: false,
        marked: last_marked,
    }));
    Ok(())
}

/// The turns of message `i`'s blocks: the message's own turn (an
/// assistant's, or a user's words), and a turn per tool result before it.
/// Returns whether the caller marked its last block.
fn blocks(body: &str, p: &mut Parsed, i: usize, role: Role, items: &[&RawValue]) -> Result<bool, Unfit> {
    let at = |b: usize, thinking: bool| Part {
        element: i,
        block: Some(b),
        thinking,
    };
    let mut own = Turn {
        role: Some(role),
        ..Turn::default()
    };
    let mut pieces = Vec::new();
    let mut marked = false;
    for (b, raw_block) in items.iter().enumerate() {
        let block: Block<'_> =
            serde_json::from_str(object(raw_block.get())?).map_err(|_| Unfit::Malformed)?;
        marked = block.cache_control.is_some();
        p.marks.caller += usize::from(marked);
        match (&*block.kind, role) {
            ("text", _) => {
                pieces.push(block.text.map(Cow::into_owned).unwrap_or_default());
                own.parts.push(at(b, false));
            }
            ("image", _) => {
                own.images.push(match block.source {
                    Some(s) if s.kind == "base64" => Image::of_base64(s.data.as_deref().unwrap_or_default()),
                    _ => Image::default(),
                });
                own.parts.push(at(b, false));
            }
            ("tool_use", Role::Assistant) => {
                own.tool_call_ids
                    .push(block.id.map(Cow::into_owned).unwrap_or_default());
                pieces.extend(block.name.map(Cow::into_owned));
                pieces.extend(block.input.map(|v| v.get().to_owned()));
                own.parts.push(at(b, false));
            }
            ("thinking", Role::Assistant) => {
                own.thinking.push(Thinking {
                    text: block.thinking.map(Cow::into_owned).unwrap_or_default(),
                    signature: block.signature.map(Cow::into_owned).unwrap_or_default(),
                    redacted: false,
                });
                own.parts.push(at(b, true));
            }
            ("redacted_thinking", Role::Assistant) => {
                own.thinking.push(Thinking {
                    text: block.data.map(Cow::into_owned).unwrap_or_default(),
                    signature: String::new(),
                    redacted: true,
                });
                own.parts.push(at(b, true));
            }
            ("tool_result", Role::User) => {
                let turn = tool_result(body, block, at(b, false), &mut p.marks.caller)?;
                p.turns.push(turn);
            }
            _ => return Err(Unfit::Unsupported),
        }
    }
    if items.is_empty() {
        // An empty content is still the caller's message: a turn with
        // nothing to say, kept or cut like any other.
        own.parts.push(Part::whole(i));
    }
    if !own.parts.is_empty() {
        own.text = join(pieces);
        p.turns.push(own);
    }
    Ok(marked)
}

/// A `tool_result` block's tool turn, at `part`; the caller's markers in
/// its content are counted in `marked`.
fn tool_result(body: &str, block: Block<'_>, part: Part, marked: &mut usize) -> Result<Turn, Unfit> {
    let mut images = Vec::new();
    let text = match block.content {
        Some(c) => blocks_text(c, &mut images, marked)?,
        None => String::new(),
    };
    Ok(Turn {
        role: Some(Role::Tool),
        text,
        tool_call_id: block.tool_use_id.map(Cow::into_owned).unwrap_or_default(),
        parts: vec![part],
        clear: block.content.map(|c| span(body, c)),
        images,
        ..Turn::default()
    })
}

/// Where a marker for `content` (a string, or blocks) would go: its last
/// block, or the string; `None` for an empty list.
fn spot(body: &str, content: &RawValue) -> Result<Option<Spot>, Unfit> {
    if content.get().starts_with('"') {
        return Ok(Some(Spot {
            span: span(body, content),
            text: true,
            marked: false,
        }));
    }
    let blocks: Vec<&RawValue> = serde_json::from_str(content.get()).map_err(|_| Unfit::Malformed)?;
    let Some(last) = blocks.last() else {
        return Ok(None);
    };
    let block: Block<'_> = serde_json::from_str(object(last.get())?).map_err(|_| Unfit::Malformed)?;
    Ok(Some(Spot {
        span: span(body, last),
        text: false,
        marked: block.cache_control.is_some(),
    }))
}

/// The text of a string or of text blocks (one per line); image blocks go
/// to `images`, the caller's markers are counted in `marked`.
fn blocks_text(raw: &RawValue, images: &mut Vec<Image>, marked: &mut usize) -> Result<String, Unfit> {
    match raw.get().as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw.get()).map_err(|_| Unfit::Malformed),
        Some(b'[') => {
            let blocks: Vec<Block<'_>> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
            let mut texts = Vec::with_capacity(blocks.len());
            for b in blocks {
                *marked += usize::from(b.cache_control.is_some());
                match &*b.kind {
                    "text" => texts.push(b.text.map(Cow::into_owned).unwrap_or_default()),
                    "image" => images.push(match b.source {
                        Some(s) if s.kind == "base64" => {
                            Image::of_base64(s.data.as_deref().unwrap_or_default())
                        }
                        _ => Image::default(),
                    }),
                    _ => return Err(Unfit::Unsupported),
                }
            }
            Ok(join(texts))
        }
        _ => Err(Unfit::Malformed),
    }
}

/// A Messages tool definition in OpenAI's function shape, for counting,
/// and whether the caller marked it.
fn function_shape(raw: &RawValue) -> Result<(String, bool), Unfit> {
    let t: Tool<'_> = serde_json::from_str(object(raw.get())?).map_err(|_| Unfit::Malformed)?;
    let marked = t.cache_control.is_some();
    let shape = super::body::function_shape(
        &t.name.unwrap_or_default(),
        t.description.as_deref(),
        t.input_schema,
    )?;
    Ok((shape, marked))
}

#[cfg(test)]
mod tests;
