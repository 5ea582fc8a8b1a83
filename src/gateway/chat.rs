//! OpenAI Chat Completions bodies (`/v1/chat/completions`): the leading
//! system and developer messages are the static prefix; every other
//! message is one turn, counted by its text (a call by its name and
//! arguments); `tools` are counted by OpenAI's function formula.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::{Element, Parsed, Part, Turn, Unfit, object, span};
use super::media::Image;
use crate::vocab::Role;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
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
    content: Option<&'a RawValue>,
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

/// Parses a Chat Completions body.
pub fn parse(body: &str) -> Result<Parsed, Unfit> {
    let req: Request<'_> = serde_json::from_str(object(body)?).map_err(|_| Unfit::Malformed)?;
    let (Some(model), Some(list)) = (req.model, req.messages) else {
        return Err(Unfit::NotChat);
    };
    let raw: Vec<&RawValue> = serde_json::from_str(list.get()).map_err(|_| Unfit::Malformed)?;
    let mut p = Parsed {
        model: model.into_owned(),
        max_output: req.max_completion_tokens.or(req.max_tokens),
        list: span(body, list),
        has_cache_key: req.prompt_cache_key.is_some_and(|k| k.get() != "null"),
        tools: req
            .tools
            .unwrap_or_default()
            .iter()
            .map(|t| t.get().to_owned())
            .collect(),
        ..Parsed::default()
    };
    let mut begun = false;
    for (i, raw) in raw.into_iter().enumerate() {
        let m: Message<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
        let system = matches!(&*m.role, "system" | "developer");
        let mut images = Vec::new();
        let text = content_text(m.content, &mut images)?;
        let fixed = system && !begun;
        // A name costs its tokens and one more, which the turn's text does
        // not carry.
        p.estimated |= m.name.is_some();
        p.elements.push(Element {
            span: span(body, raw),
            blocks: None,
            fixed,
        });
        if fixed {
            p.system.push(text);
            p.system_images.extend(images);
            continue;
        }
        begun = true;
        let role = match &*m.role {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return Err(Unfit::Unsupported),
        };
        let mut turn = Turn {
            role: Some(role),
            parts: vec![Part {
                element: i,
                block: None,
                thinking: false,
            }],
            images,
            ..Turn::default()
        };
        match role {
            Role::Assistant => {
                let mut pieces = vec![text];
                for call in m.tool_calls.unwrap_or_default() {
                    turn.tool_call_ids.push(call.id.into_owned());
                    if let Some(f) = call.function {
                        pieces.extend(f.name.map(Cow::into_owned));
                        pieces.extend(f.arguments.map(Cow::into_owned));
                    }
                    p.estimated = true;
                }
                turn.text = join(pieces);
            }
            Role::Tool => {
                turn.tool_call_id = m.tool_call_id.map(Cow::into_owned).unwrap_or_default();
                turn.clear = m.content.map(|c| span(body, c));
                turn.text = text;
            }
            _ => turn.text = text,
        }
        p.turns.push(turn);
    }
    Ok(p)
}

/// The non-empty pieces, one per line.
pub fn join(pieces: Vec<String>) -> String {
    let kept: Vec<String> = pieces.into_iter().filter(|s| !s.is_empty()).collect();
    kept.join("\n")
}

/// A message's text: its string content, or its text parts one per line;
/// its image parts go to `images`.
fn content_text(content: Option<&RawValue>, images: &mut Vec<Image>) -> Result<String, Unfit> {
    let Some(raw) = content else {
        return Ok(String::new());
    };
    match raw.get().as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(raw.get()).map_err(|_| Unfit::Malformed),
        Some(b'[') => {
            let parts: Vec<ContentPart<'_>> =
                serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
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
        Some(b'n') => Ok(String::new()),
        _ => Err(Unfit::Malformed),
    }
}

#[cfg(test)]
mod tests;
