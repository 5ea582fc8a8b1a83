//! A provider request's body as the fit sees it: where each message (or
//! item) lies in the caller's bytes, what it says for counting, and the
//! splice that writes the fitted body back from those bytes. Nothing the
//! fit did not change is re-serialized: key order, spacing and escapes
//! reach the provider (and its prompt cache) as the caller wrote them.

use std::borrow::Cow;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::media::{Image, Media, MediaTokens};
use crate::prompt::Thinking;
use crate::vocab::Role;

/// Which provider API a body speaks (chosen by the request's path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Chat,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
}

impl Api {
    /// The API of a request path, if it is one the fit knows.
    pub fn of_path(path: &str) -> Option<Api> {
        // The query string is not part of the route.
        let path = path.split('?').next().unwrap_or(path);
        match path {
            "/v1/chat/completions" => Some(Api::Chat),
            "/v1/messages" => Some(Api::Messages),
            "/v1/responses" => Some(Api::Responses),
            _ => None,
        }
    }

    /// A stable lower-case name, used as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat_completions",
            Api::Messages => "messages",
            Api::Responses => "responses",
        }
    }

    /// Whether refusals are written in Anthropic's error shape.
    pub fn anthropic(self) -> bool {
        self == Api::Messages
    }
}

/// Why a body is not a request the fit can take (it is then passed on
/// untouched).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfit {
    /// Not JSON, or not an object, or a field of the wrong type.
    Malformed,
    /// Valid JSON without the parts of a chat request (no model, no
    /// messages).
    NotChat,
    /// A role, item or block type the fit does not know: it cannot say what
    /// cutting it would mean.
    Unsupported,
}

/// One element of the list the fit rewrites (`messages`, or Responses'
/// `input`): its span in the body and, when its parts are content blocks
/// that belong to different turns, their spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The element's bytes.
    pub span: Range<usize>,
    /// Its content array and the span of each block, when blocks of it can
    /// be kept apart (Anthropic's tool results beside a user's text).
    pub blocks: Option<Blocks>,
    /// Part of the static prefix (a leading system message): always kept.
    pub fixed: bool,
}

/// A content array inside an element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// The array value's bytes.
    pub span: Range<usize>,
    /// Each block's bytes, in order.
    pub items: Vec<Range<usize>>,
}

/// Where a turn's bytes are: a whole element or one of its blocks; thinking
/// goes when the turn is kept without its thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Index into [`Parsed::elements`].
    pub element: usize,
    /// A block of that element, or the whole element.
    pub block: Option<usize>,
    /// Whether this part is the turn's thinking (a reasoning item, a
    /// thinking block).
    pub thinking: bool,
}

impl Part {
    /// A whole element, as a turn's part.
    pub fn whole(element: usize) -> Part {
        Part {
            element,
            block: None,
            thinking: false,
        }
    }
}

/// One conversation turn as the assembler sees it: one domain item.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    /// Its role.
    pub role: Option<Role>,
    /// What it says, for counting (text, and a call's name and arguments).
    pub text: String,
    /// Calls it makes (assistant).
    pub tool_call_ids: Vec<String>,
    /// The call it answers (tool).
    pub tool_call_id: String,
    /// Its thinking, verbatim.
    pub thinking: Vec<Thinking>,
    /// Where its bytes are.
    pub parts: Vec<Part>,
    /// The value replaced by the placeholder when the turn is cleared (a
    /// tool result's content or output).
    pub clear: Option<Range<usize>>,
    /// Its images, counted apart from its text.
    pub images: Vec<Image>,
}

/// A provider request, parsed for the fit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The `model` field.
    pub model: String,
    /// The request's maximum output, when it names one.
    pub max_output: Option<u64>,
    /// The system prompt's texts (static segments, never cut).
    pub system: Vec<String>,
    /// Tool definitions in OpenAI's function shape, for counting.
    pub tools: Vec<String>,
    /// The turns, in order.
    pub turns: Vec<Turn>,
    /// The list the fit rewrites: its value's span (an array, or
    /// Responses' string input).
    pub list: Range<usize>,
    /// Its elements.
    pub elements: Vec<Element>,
    /// A continuation (Responses' `previous_response_id`): what came
    /// before is the provider's, so the request is counted, not cut.
    pub continued: bool,
    /// The caller set the request's cache key (`prompt_cache_key`).
    pub has_cache_key: bool,
    /// Some count follows a convention rather than the provider's
    /// published rule (tool calls): the total is an estimate.
    pub estimated: bool,
    /// Images of the system prompt.
    pub system_images: Vec<Image>,
    /// Where cache markers can go (Anthropic's Messages).
    pub marks: Marks,
}

impl Parsed {
    /// Its images counted by `rule` (`published`: the model's own rule,
    /// else an estimate).
    pub fn media(&self, rule: Media, published: bool) -> MediaTokens {
        let turns = self.turns.iter().map(|t| t.images.as_slice());
        Media::counted(&self.system_images, turns, rule, published)
    }
}

/// `text`, when it is a JSON object's (serde's derived structs take an
/// array too, and a span the fit edits must be an object's).
pub fn object(text: &str) -> Result<&str, Unfit> {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => Ok(text),
        _ => Err(Unfit::Malformed),
    }
}

/// A tool definition in OpenAI Chat's function shape (what the tools'
/// formula counts), from its name, description and parameter schema.
pub fn function_shape(
    name: &str,
    description: Option<&str>,
    parameters: Option<&RawValue>,
) -> Result<String, Unfit> {
    let mut function = serde_json::Map::new();
    function.insert("name".to_owned(), name.into());
    if let Some(d) = description {
        function.insert("description".to_owned(), d.into());
    }
    if let Some(schema) = parameters {
        let v: serde_json::Value = serde_json::from_str(schema.get()).map_err(|_| Unfit::Malformed)?;
        function.insert("parameters".to_owned(), v);
    }
    Ok(serde_json::json!({"type": "function", "function": function}).to_string())
}

/// The byte range of `raw` inside `body` (`raw` was borrowed from it).
pub fn span(body: &str, raw: &RawValue) -> Range<usize> {
    let start = (raw.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    start..start + raw.get().len()
}

/// A value that is a string or an array, read in its element's own pass:
/// the string borrowed where it has no escapes, the array as its items'
/// bytes.
pub enum Listed<'a> {
    /// A string.
    Text(Cow<'a, str>),
    /// An array's items.
    Items(Vec<&'a RawValue>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Listed<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Listed<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Listed::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Listed::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Listed::Text(Cow::Owned(v)))
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Listed::Items(items))
            }
        }
        d.deserialize_any(Visit(PhantomData))
    }
}

impl Listed<'_> {
    /// The value's span in `body`, found from what was read where it can be
    /// (a borrowed string, an array's items), else by reading `field` of
    /// `owner` (the object the value is a member of) again.
    pub fn span(&self, body: &str, owner: &str, field: &str) -> Result<Range<usize>, Unfit> {
        let found = match self {
            Listed::Text(Cow::Borrowed(s)) => Some(quoted_span(body, s)),
            Listed::Text(Cow::Owned(_)) => None,
            Listed::Items(items) => list_span(body, items),
        };
        match found {
            Some(span) => Ok(span),
            None => member_span(body, owner, field)?.ok_or(Unfit::Malformed),
        }
    }
}

/// The span of `field`'s value in `owner`, a JSON object inside `body`
/// (one more pass over `owner`); `None` when it has no such member.
pub fn member_span(body: &str, owner: &str, field: &str) -> Result<Option<Range<usize>>, Unfit> {
    let members: HashMap<Cow<'_, str>, &RawValue> =
        serde_json::from_str(owner).map_err(|_| Unfit::Malformed)?;
    let owner_at = (owner.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    Ok(members.get(field).map(|raw| {
        let at = span(owner, raw);
        owner_at + at.start..owner_at + at.end
    }))
}

/// The span of an array from its items' spans: from the `[` before the
/// first to the `]` after the last; `None` for an empty array.
pub fn list_span(body: &str, items: &[&RawValue]) -> Option<Range<usize>> {
    let (first, last) = (items.first()?, items.last()?);
    let bytes = body.as_bytes();
    let mut start = span(body, first).start;
    while start > 0 && bytes[start - 1].is_ascii_whitespace() {
        start -= 1;
    }
    let mut end = span(body, last).end;
    while bytes.get(end).is_some_and(u8::is_ascii_whitespace) {
        end += 1;
    }
    let open = start.checked_sub(1).filter(|&s| bytes[s] == b'[')?;
    (bytes.get(end) == Some(&b']')).then_some(open..end + 1)
}

/// The span of a JSON string literal from its contents, borrowed from
/// `body` (a string without escapes is borrowed between its quotes).
pub fn quoted_span(body: &str, inner: &str) -> Range<usize> {
    let start = (inner.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    start.saturating_sub(1)..start + inner.len() + 1
}

/// A JSON string literal of `text`.
pub fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// A change at a place in the caller's bytes: the range replaced (empty:
/// an insertion) and the text put there.
pub type Edit = (Range<usize>, String);

/// Where a cache marker can go: an object to add `cache_control` to (a
/// content block, a tool), or a string content to wrap as one text block
/// that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    /// The object's or the string's bytes.
    pub span: Range<usize>,
    /// A string content (wrapped), not an object.
    pub text: bool,
    /// The caller already marked it.
    pub marked: bool,
}

impl Spot {
    /// The edit that marks this spot with `marker` (the `cache_control`
    /// value's JSON).
    pub fn mark(&self, body: &str, marker: &str) -> Edit {
        if self.text {
            let text = &body[self.span.clone()];
            let wrapped = format!(r#"[{{"type":"text","text":{text},"cache_control":{marker}}}]"#);
            return (self.span.clone(), wrapped);
        }
        // Before the object's closing brace (a value's bytes end with it),
        // after a member when it has one.
        let at = self.span.end.saturating_sub(1);
        let empty = body[self.span.start..at].trim_end().ends_with('{');
        let sep = if empty { "" } else { "," };
        (at..at, format!(r#"{sep}"cache_control":{marker}"#))
    }
}

/// Anthropic's places for cache markers, and the caller's own count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Marks {
    /// The end of the system prompt (its last block, or its string).
    pub system: Option<Spot>,
    /// Each tool definition.
    pub tools: Vec<Spot>,
    /// Each element's last block (or its string content).
    pub elements: Vec<Option<Spot>>,
    /// Markers the caller placed anywhere in the request.
    pub caller: usize,
}

/// What became of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fate {
    /// Sent (whole, cleared, or without its thinking).
    pub kept: bool,
    /// Sent with this text in place of its content.
    pub cleared: Option<String>,
    /// Sent without its thinking.
    pub thinking_dropped: bool,
}

/// Writes the fitted body: `body` with the list's elements kept as `fates`
/// say, each kept element byte for byte as the caller wrote it unless a
/// block of it went or its content was cleared, `summary` (an element
/// already in the API's shape) inserted after the fixed elements, and the
/// `extra` edits (sorted, apart from each other and from the clearings:
/// cache markers) made where they fall.
pub fn splice(body: &str, parsed: &Parsed, fates: &[Fate], summary: Option<&str>, extra: &[Edit]) -> String {
    // Which parts of each element stay.
    let n = parsed.elements.len();
    let mut owned: Vec<Vec<(usize, Part)>> = vec![Vec::new(); n];
    for (t, turn) in parsed.turns.iter().enumerate() {
        for &p in &turn.parts {
            if let Some(slot) = owned.get_mut(p.element) {
                slot.push((t, p));
            }
        }
    }
    let mut out = String::with_capacity(body.len() + summary.map_or(0, str::len) + 2);
    out.push_str(&apply(body, 0..parsed.list.start, extra));
    out.push('[');
    let mut first = true;
    let mut push = |out: &mut String, text: &str| {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(text);
    };
    let fixed = parsed.elements.iter().take_while(|e| e.fixed).count();
    for (i, el) in parsed.elements.iter().enumerate() {
        if i == fixed
            && let Some(s) = summary
        {
            push(&mut out, s);
        }
        if el.fixed {
            push(&mut out, &apply(body, el.span.clone(), extra));
            continue;
        }
        if let Some(text) = element(body, el, &owned[i], parsed, fates, extra) {
            push(&mut out, &text);
        }
    }
    if fixed == parsed.elements.len()
        && let Some(s) = summary
    {
        push(&mut out, s);
    }
    out.push(']');
    out.push_str(&apply(body, parsed.list.end..body.len(), extra));
    out
}

/// `body` with `edits` (sorted, apart) made: the request unchanged but for
/// them.
pub fn edit(body: &str, edits: &[Edit]) -> String {
    apply(body, 0..body.len(), edits)
}

/// An element as sent, or `None` when none of it is.
fn element(
    body: &str,
    el: &Element,
    parts: &[(usize, Part)],
    parsed: &Parsed,
    fates: &[Fate],
    extra: &[Edit],
) -> Option<String> {
    let stays = |&(t, p): &(usize, Part)| {
        let f = &fates[t];
        f.kept && !(p.thinking && f.thinking_dropped)
    };
    if !parts.iter().any(stays) {
        return None;
    }
    // Clearings inside this element, as (span, text).
    let mut edits: Vec<(Range<usize>, String)> = parts
        .iter()
        .filter(|pt| stays(pt))
        .filter_map(|&(t, _)| {
            let clear = parsed.turns[t].clear.clone()?;
            let text = fates[t].cleared.as_deref()?;
            (clear.start >= el.span.start && clear.end <= el.span.end).then(|| (clear, quoted(text)))
        })
        .collect();
    edits.extend(
        extra
            .iter()
            .filter(|(r, _)| r.start >= el.span.start && r.end <= el.span.end)
            .cloned(),
    );
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    edits.dedup_by_key(|(r, _)| r.start);
    let (Some(blocks), true) = (&el.blocks, parts.iter().any(|p| p.1.block.is_some())) else {
        return Some(apply(body, el.span.clone(), &edits));
    };
    // A block stays when a part on it stays; a block no turn claims stays
    // with the element. (One pass over the parts: linear in the blocks.)
    let mut claimed = vec![false; blocks.items.len()];
    let mut kept = vec![false; blocks.items.len()];
    for pt in parts {
        if let Some(b) = pt.1.block.filter(|&b| b < kept.len()) {
            claimed[b] = true;
            kept[b] |= stays(pt);
        }
    }
    for (k, c) in kept.iter_mut().zip(&claimed) {
        *k |= !c;
    }
    if kept.iter().all(|&k| k) {
        return Some(apply(body, el.span.clone(), &edits));
    }
    let mut text = apply(body, el.span.start..blocks.span.start, &edits);
    text.push('[');
    let mut sep = "";
    for (b, range) in blocks.items.iter().enumerate() {
        if kept[b] {
            text.push_str(sep);
            text.push_str(&apply(body, range.clone(), &edits));
            sep = ",";
        }
    }
    text.push(']');
    text.push_str(&apply(body, blocks.span.end..el.span.end, &edits));
    Some(text)
}

/// `body[range]` with the edits that lie inside it applied.
fn apply(body: &str, range: Range<usize>, edits: &[(Range<usize>, String)]) -> String {
    let mut out = String::with_capacity(range.len());
    let mut at = range.start;
    for (r, text) in edits {
        if r.start >= at && r.end <= range.end {
            out.push_str(&body[at..r.start]);
            out.push_str(text);
            at = r.end;
        }
    }
    out.push_str(&body[at..range.end]);
    out
}

/// Inserts `"key":value` as the last member of the top-level object,
/// right after the value before it (the caller's spacing stays).
pub fn add_member(body: &str, key: &str, value_json: &str) -> String {
    let end = body.trim_end().len();
    let close = body[..end].rfind('}').unwrap_or(end);
    let last = body[..close].trim_end().len();
    let sep = if body[..last].ends_with('{') { "" } else { "," };
    let mut out = String::with_capacity(body.len() + key.len() + value_json.len() + 4);
    out.push_str(&body[..last]);
    out.push_str(sep);
    out.push_str(&quoted(key));
    out.push(':');
    out.push_str(value_json);
    out.push_str(&body[last..]);
    out
}

#[cfg(test)]
mod tests;
