//! OpenAI Chat Completions bodies (`/v1/chat/completions`): the leading
//! system and developer messages are the static prefix; every other
//! message is one turn, counted by its text (a call by its name and
//! arguments); `tools` are counted by OpenAI's function formula.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::{Element, Listed, Parsed, Part, Turn, Unfit, list_span, member_span, object, span};
use super::media::Image;
use crate::vocab::Role;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    /// Each message's bytes, found in the same pass as the other fields.
    #[serde(borrow)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    #[serde(borrow)]
    prompt_cache_key: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow)]
    content: Option<Listed<'a>>,
    #[serde(default)]
    tool_calls: Option<Vec<Call<'a>>>,
    #[serde(borrow)]
    tool_call_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// A content part (`{"type": "text", "text": ...}`, `image_url`, ...).
#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    image_url: Option<ImageUrl<'a>>,
}

#[derive(Deserialize)]
struct ImageUrl<'a> {
    #[serde(borrow)]
    url: Cow<'a, str>,
    #[serde(borrow)]
    detail: Option<Cow<'a, str>>,
}

/// Parses a Chat Completions body: one pass over the body finds the
/// messages' bytes, one pass over each message reads it; each text is
/// copied once, into its turn.
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
        max_output: req.max_completion_tokens.or(req.max_tokens),
        list,
        has_cache_key: req.prompt_cache_key.is_some_and(|k| k.get() != "null"),
        tools: req
            .tools
            .unwrap_or_default()
            .iter()
            .map(|t| t.get().to_owned())
            .collect(),
        elements: Vec::with_capacity(raw.len()),
        turns: Vec::with_capacity(raw.len()),
        ..Parsed::default()
    };
    let mut begun = false;
    for (i, raw) in raw.into_iter().enumerate() {
        begun |= message(body, &mut p, i, raw, begun)?;
    }
    Ok(p)
}

/// Reads message `i` into `p`: a system message of the prefix (until the
/// conversation has `begun`), or a turn. Returns whether it was a turn.
fn message(body: &str, p: &mut Parsed, i: usize, raw: &RawValue, begun: bool) -> Result<bool, Unfit> {
    let m: Message<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
    let system = matches!(&*m.role, "system" | "developer");
    let fixed = system && !begun;
    // A name costs its tokens and one more, which the turn's text does
    // not carry.
    p.estimated |= m.name.is_some();
    p.elements.push(Element {
        span: span(body, raw),
        blocks: None,
        fixed,
    });
    let role = match &*m.role {
        _ if fixed => None,
        "system" | "developer" => Some(Role::System),
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        "tool" => Some(Role::Tool),
        _ => return Err(Unfit::Unsupported),
    };
    // Where a tool result's content lies, for clearing it.
    let clear = match (role, &m.content) {
        (Some(Role::Tool), Some(c)) => Some(c.span(body, raw.get(), "content")?),
        _ => None,
    };
    let mut images = Vec::new();
    let text = content_text(m.content, &mut images)?;
    let Some(role) = role else {
        p.system.push(text);
        p.system_images.extend(images);
        return Ok(false);
    };
    let mut turn = Turn {
        role: Some(role),
        parts: vec![Part::whole(i)],
        images,
        ..Turn::default()
    };
    match role {
        Role::Assistant => {
            let calls = m.tool_calls.unwrap_or_default();
            p.estimated |= !calls.is_empty();
            turn.text = with_calls(text, calls, &mut turn.tool_call_ids);
        }
        Role::Tool => {
            turn.tool_call_id = m.tool_call_id.map(Cow::into_owned).unwrap_or_default();
            turn.clear = clear;
            turn.text = text;
        }
        _ => turn.text = text,
    }
    p.turns.push(turn);
    Ok(true)
}

/// An assistant's text and its calls' names and arguments, one per line;
/// the calls' ids go to `ids`.
fn with_calls(text: String, calls: Vec<Call<'_>>, ids: &mut Vec<String>) -> String {
    let mut pieces = vec![text];
    for call in calls {
        ids.push(call.id.into_owned());
        if let Some(f) = call.function {
            pieces.extend(f.name.map(Cow::into_owned));
            pieces.extend(f.arguments.map(Cow::into_owned));
        }
    }
    join(pieces)
}

/// The non-empty pieces, one per line.
pub fn join(pieces: Vec<String>) -> String {
    let mut kept = pieces.into_iter().filter(|s| !s.is_empty());
    let Some(mut out) = kept.next() else {
        return String::new();
    };
    for piece in kept {
        out.push('\n');
        out.push_str(&piece);
    }
    out
}

/// A message's text: its string content, or its text parts one per line;
/// its image parts go to `images`.
fn content_text(content: Option<Listed<'_>>, images: &mut Vec<Image>) -> Result<String, Unfit> {
    match content {
        None => Ok(String::new()),
        Some(Listed::Text(t)) => Ok(t.into_owned()),
        Some(Listed::Items(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for raw in parts {
                let part: ContentPart<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
                match (&*part.kind, part.text, part.image_url) {
                    ("text" | "input_text", Some(t), _) => texts.push(t.into_owned()),
                    ("image_url", _, Some(img)) => {
                        images.push(Image::of_url(&img.url, img.detail.as_deref()))
                    }
                    _ => return Err(Unfit::Unsupported),
                }
            }
            Ok(join(texts))
        }
    }
}

#[cfg(test)]
mod tests;
