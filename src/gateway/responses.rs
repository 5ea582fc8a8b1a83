//! OpenAI Responses bodies (`/v1/responses`): `instructions` and leading
//! system or developer messages are the static prefix; `input` is a string
//! (one user turn) or items. A run of `function_call` items is one
//! assistant turn (a step's parallel calls), each `function_call_output`
//! one tool turn, and a `reasoning` item goes with the turn after it (its
//! thinking, carried but not counted: OpenAI does not bill it). A request
//! with `previous_response_id` carries only its new items: it is counted,
//! never cut.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::{Element, Listed, Parsed, Part, Turn, Unfit, object, span};
use super::chat::join;
use super::media::Image;
use crate::prompt::Thinking;
use crate::vocab::Role;

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    instructions: Option<Cow<'a, str>>,
    /// A string, or each item's bytes, found in the same pass as the other
    /// fields.
    #[serde(borrow)]
    input: Option<Listed<'a>>,
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    max_output_tokens: Option<u64>,
    #[serde(borrow)]
    previous_response_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    prompt_cache_key: Option<&'a RawValue>,
}

/// An input item, with the fields of every type the fit knows.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    summary: Option<Vec<SummaryPart<'a>>>,
    #[serde(borrow)]
    encrypted_content: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct SummaryPart<'a> {
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

/// A content part of a message or an output.
#[derive(Deserialize)]
struct ContentPart<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    image_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    detail: Option<Cow<'a, str>>,
}

/// A Responses tool definition (`{"type": "function", "name", ...}`).
#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    description: Option<Cow<'a, str>>,
    #[serde(borrow)]
    parameters: Option<&'a RawValue>,
}

/// Parses a Responses body.
pub fn parse(body: &str) -> Result<Parsed, Unfit> {
    let req: Request<'_> = serde_json::from_str(object(body)?).map_err(|_| Unfit::Malformed)?;
    let (Some(model), Some(input)) = (req.model, req.input) else {
        return Err(Unfit::NotChat);
    };
    let list = input.span(body, body, "input")?;
    let mut p = Parsed {
        model: model.into_owned(),
        max_output: req.max_output_tokens,
        list: list.clone(),
        continued: req.previous_response_id.is_some(),
        has_cache_key: req.prompt_cache_key.is_some_and(|k| k.get() != "null"),
        ..Parsed::default()
    };
    if let Some(i) = req.instructions.filter(|i| !i.is_empty()) {
        p.system.push(i.into_owned());
    }
    for t in req.tools.unwrap_or_default() {
        p.tools.push(function_shape(t)?);
    }
    let raw = match input {
        Listed::Text(text) => {
            p.elements.push(Element {
                span: list,
                blocks: None,
                fixed: false,
            });
            p.turns.push(Turn {
                role: Some(Role::User),
                text: text.into_owned(),
                parts: vec![Part::whole(0)],
                ..Turn::default()
            });
            return Ok(p);
        }
        Listed::Items(items) => items,
    };
    p.elements.reserve(raw.len());
    p.turns.reserve(raw.len());
    let mut walk = Walk::default();
    for (i, raw) in raw.into_iter().enumerate() {
        walk.item(body, &mut p, i, raw)?;
    }
    walk.finish(&mut p)?;
    Ok(p)
}

/// The walk over `input`'s items, and what it holds between them.
#[derive(Default)]
struct Walk {
    /// Whether a turn has begun: system messages after it are turns.
    begun: bool,
    /// Reasoning waiting for the turn it goes with.
    pending: Vec<(usize, Thinking)>,
    /// The assistant turn a run of calls is gathering into.
    calls: Option<Turn>,
}

impl Walk {
    /// Reads item `i` into `p`: a system message of the prefix, reasoning
    /// for the turn after it, a call of the run, or a turn.
    fn item(&mut self, body: &str, p: &mut Parsed, i: usize, raw: &RawValue) -> Result<(), Unfit> {
        let item: Item<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
        let kind = item.kind.as_deref().unwrap_or("message");
        let system = kind == "message" && matches!(item.role.as_deref(), Some("system" | "developer"));
        let fixed = system && !self.begun;
        p.elements.push(Element {
            span: span(body, raw),
            blocks: None,
            fixed,
        });
        if fixed {
            let mut images = Vec::new();
            p.system.push(content_text(item.content, &mut images)?);
            p.system_images.extend(images);
            return Ok(());
        }
        self.begun = true;
        if kind != "function_call"
            && kind != "reasoning"
            && let Some(turn) = self.calls.take()
        {
            p.turns.push(turn);
        }
        match kind {
            "reasoning" => self.pending.push((i, reasoning(item))),
            "function_call" => {
                self.call(item, i);
                p.estimated = true;
            }
            "function_call_output" => p.turns.push(call_output(body, item, i)?),
            "message" => p.turns.push(self.message(item, i)?),
            _ => return Err(Unfit::Unsupported),
        }
        Ok(())
    }

    /// Adds a `function_call` item to the run's assistant turn.
    fn call(&mut self, item: Item<'_>, i: usize) {
        let turn = self.calls.get_or_insert_with(|| Turn {
            role: Some(Role::Assistant),
            ..Turn::default()
        });
        attach(turn, &mut self.pending);
        turn.tool_call_ids
            .push(item.call_id.map(Cow::into_owned).unwrap_or_default());
        let mut pieces = vec![std::mem::take(&mut turn.text)];
        pieces.extend(item.name.map(Cow::into_owned));
        pieces.extend(item.arguments.map(Cow::into_owned));
        turn.text = join(pieces);
        turn.parts.push(Part::whole(i));
    }

    /// A `message` item's turn; an assistant's takes the waiting reasoning.
    fn message(&mut self, item: Item<'_>, i: usize) -> Result<Turn, Unfit> {
        let role = match item.role.as_deref() {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("system" | "developer") => Role::System,
            _ => return Err(Unfit::Unsupported),
        };
        let mut turn = Turn {
            role: Some(role),
            ..Turn::default()
        };
        turn.text = content_text(item.content, &mut turn.images)?;
        if role == Role::Assistant {
            attach(&mut turn, &mut self.pending);
        }
        turn.parts.push(Part::whole(i));
        Ok(turn)
    }

    /// Ends the walk: the last run of calls is a turn, and reasoning with no
    /// turn after it stays with the turn before it (there must be one).
    fn finish(mut self, p: &mut Parsed) -> Result<(), Unfit> {
        if let Some(turn) = self.calls.take() {
            p.turns.push(turn);
        }
        if let Some(last) = p.turns.last_mut() {
            for (i, t) in self.pending.drain(..) {
                last.parts.push(Part::whole(i));
                if last.role == Some(Role::Assistant) {
                    last.thinking.push(t);
                }
            }
        }
        if !self.pending.is_empty() {
            return Err(Unfit::Unsupported);
        }
        Ok(())
    }
}

/// A `reasoning` item's thinking: its encrypted content if any (redacted),
/// else its summary's text, one part per line.
fn reasoning(item: Item<'_>) -> Thinking {
    let text = item
        .summary
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.text.map(Cow::into_owned))
        .collect::<Vec<_>>()
        .join("\n");
    let encrypted = item.encrypted_content.map(Cow::into_owned);
    Thinking {
        redacted: encrypted.is_some(),
        text: encrypted.unwrap_or(text),
        signature: String::new(),
    }
}

/// A `function_call_output` item's tool turn.
fn call_output(body: &str, item: Item<'_>, i: usize) -> Result<Turn, Unfit> {
    let mut images = Vec::new();
    let text = match item.output {
        Some(o) => content_text(Some(o), &mut images)?,
        None => String::new(),
    };
    Ok(Turn {
        role: Some(Role::Tool),
        text,
        tool_call_id: item.call_id.map(Cow::into_owned).unwrap_or_default(),
        parts: vec![Part::whole(i)],
        clear: item.output.map(|o| span(body, o)),
        images,
        ..Turn::default()
    })
}

/// Gives the waiting reasoning to `turn`. Its items go and stay with the
/// turn's own: OpenAI refuses a `function_call` sent without the
/// `reasoning` item before it, so a kept turn keeps its reasoning even where
/// the assembler would drop a closed cycle's thinking (OpenAI does not bill
/// it, so nothing is counted either way).
fn attach(turn: &mut Turn, pending: &mut Vec<(usize, Thinking)>) {
    for (i, t) in pending.drain(..) {
        turn.parts.push(Part::whole(i));
        turn.thinking.push(t);
    }
}

/// The text of a string or of content parts (one per line); image parts go
/// to `images`.
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
                match &*part.kind {
                    "input_text" | "output_text" | "text" => {
                        texts.push(part.text.map(Cow::into_owned).unwrap_or_default());
                    }
                    "input_image" => images.push(match part.image_url {
                        Some(url) => Image::of_url(&url, part.detail.as_deref()),
                        None => Image::default(),
                    }),
                    _ => return Err(Unfit::Unsupported),
                }
            }
            Ok(join(texts))
        }
        _ => Err(Unfit::Malformed),
    }
}

/// A Responses tool definition in Chat's function shape, for counting.
fn function_shape(raw: &RawValue) -> Result<String, Unfit> {
    let t: Tool<'_> = serde_json::from_str(raw.get()).map_err(|_| Unfit::Malformed)?;
    // Built-in tools (web search, file search, ...) cost what OpenAI does
    // not publish: not fitted.
    if t.kind.as_deref() != Some("function") {
        return Err(Unfit::Unsupported);
    }
    super::body::function_shape(
        &t.name.unwrap_or_default(),
        t.description.as_deref(),
        t.parameters,
    )
}

#[cfg(test)]
mod tests;
