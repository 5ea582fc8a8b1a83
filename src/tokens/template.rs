//! Chat templates: the Jinja program a model folder ships
//! (`tokenizer_config.json`'s `chat_template`, or `chat_template.jinja`),
//! executed as Hugging Face `transformers` executes it. A few known
//! template programs, recognized by their exact text, are also written out
//! in Rust (`native`), held to the engine's bytes at load and in the tests.
//!
//! The engine is `minijinja` with `minijinja-contrib`'s Python-compatibility
//! methods (`.strip()`, `.split()`, `.startswith()`, `.items()`, ...), as Rust
//! servers such as TGI run these templates, set up like `transformers`'
//! environment: `trim_blocks` and `lstrip_blocks` on, loop controls, a
//! trailing newline of the template dropped, and its globals
//! `raise_exception` and `strftime_now`. `tojson` is replaced by one that
//! writes what Python's `json.dumps(x, ensure_ascii=False)` writes (`", "`
//! and `": "` separators, non-ASCII kept): minijinja's own escapes `<` and
//! `'` for HTML and writes compact JSON, which would render tool definitions
//! with other bytes, and so other tokens, than the engine (`json`).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

mod context;
mod json;
mod native;

/// The name the template is stored under in its environment.
const NAME: &str = "chat";
/// Fuel for one rendering: a template that loops without end (or a
/// conversation that makes it run very long) fails instead of holding a
/// worker. Generous: a 1,000-message conversation through Qwen 3's template
/// uses well under a tenth of it.
const FUEL: u64 = 50_000_000;

/// One message handed to a template: the fields every chat template reads,
/// and an assistant turn's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatMessage<'a> {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'a str,
    /// Its text.
    pub content: &'a str,
    /// An assistant turn's reasoning, handed over as `transformers` does:
    /// `{"thinking": r, role, content, "reasoning_content": r}` (templates
    /// read one name or the other; each decides where it renders it).
    pub reasoning: Option<&'a str>,
}

impl<'a> ChatMessage<'a> {
    /// A message without reasoning.
    pub fn new(role: &'a str, content: &'a str) -> Self {
        ChatMessage {
            role,
            content,
            reasoning: None,
        }
    }
}

/// The map `transformers` hands a template for a message. Rendering reads
/// the same fields from objects made without serializing
/// (`context::messages_value`); the tests hold both to the same bytes.
impl serde::Serialize for ChatMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = if self.reasoning.is_some() { 4 } else { 2 };
        let mut map = s.serialize_map(Some(fields))?;
        if let Some(r) = self.reasoning {
            map.serialize_entry("thinking", r)?;
        }
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("content", self.content)?;
        if let Some(r) = self.reasoning {
            map.serialize_entry("reasoning_content", r)?;
        }
        map.end()
    }
}

/// Why a template could not be compiled or rendered.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

impl From<Error> for TemplateError {
    fn from(e: Error) -> Self {
        // The template's own `raise_exception` message, or the engine's
        // description of what failed and where (no prompt content: the
        // message names template lines, not values).
        let detail = e.detail().map(str::to_owned);
        let kind = e.kind();
        TemplateError(match (kind, detail) {
            (ErrorKind::InvalidOperation, Some(d)) => d,
            (_, Some(d)) => format!("{kind}: {d}"),
            (_, None) => kind.to_string(),
        })
    }
}

/// A compiled chat template, with the special-token names it may read:
/// both made once, when the model folder loads, for every rendering.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    /// `bos_token`, `eos_token`, ... as the folder's config names them,
    /// as template values.
    specials: Vec<(Value, Value)>,
    /// The template written out in Rust, where its text is a known program
    /// that renders its probe conversations as the engine does (`native`).
    native: Option<native::Native>,
}

impl ChatTemplate {
    /// Compiles `source`; `specials` are the named special tokens
    /// (`bos_token` and the like) the template may read.
    pub fn new(source: &str, specials: Vec<(String, String)>) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(python_method);
        env.add_filter("tojson", json::tojson);
        env.add_filter("trim", trim);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_owned())?;
        let native = native::Native::recognize(source, &specials);
        let specials = specials
            .into_iter()
            .map(|(k, v)| (Value::from(k), Value::from(v)))
            .collect();
        let mut template = ChatTemplate {
            env,
            specials,
            native: None,
        };
        template.native =
            native.filter(|n| n.agrees(|m, generate| template.render_by_engine(m, None, generate).ok()));
        Ok(template)
    }

    /// Whether this template's renders without tools are made natively (a
    /// known template program, `native`) rather than by the engine.
    pub fn renders_natively(&self) -> bool {
        self.native.is_some()
    }

    /// Renders `messages` (and `tools`, each a tool definition's JSON value,
    /// when given), with the generation prompt when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[ChatMessage<'_>],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        if let (Some(native), None) = (&self.native, tools)
            && let Some(text) = native.render(messages, add_generation_prompt)
        {
            return Ok(text);
        }
        self.render_by_engine(messages, tools, add_generation_prompt)
    }

    /// [`ChatTemplate::render`] by the engine, whatever the template: the
    /// reference a native renderer is held to, and what it is compared with
    /// in the benches.
    pub fn render_by_engine(
        &self,
        messages: &[ChatMessage<'_>],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_context(
            context::messages_value(messages),
            tools.map(Value::from_serialize),
            None,
            add_generation_prompt,
            None,
        )
    }

    /// [`ChatTemplate::render`] as it was before message objects: the
    /// messages serialized into maps. The tests hold `render` to its bytes.
    #[cfg(test)]
    pub(crate) fn render_serialized(
        &self,
        messages: &[ChatMessage<'_>],
        tools: Option<&[serde_json::Value]>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_context(
            Value::from_serialize(messages),
            tools.map(Value::from_serialize),
            None,
            add_generation_prompt,
            None,
        )
    }

    /// Renders a conversation as `transformers`' `apply_chat_template`
    /// does, messages as the caller wrote them (tool calls, tool call ids,
    /// names, reasoning: whatever the template reads), key order kept: a
    /// message's reasoning (`reasoning_content`, `thinking` or `reasoning`)
    /// is also given under the first two names; the special tokens, then
    /// `kwargs` over them, then `messages`, `tools`, `documents` and
    /// `add_generation_prompt`. With `continue_final_message`, the text is
    /// cut after the last message's content (found by a tag appended to it,
    /// as `transformers` 5 does), so that the model continues it.
    pub fn render_conversation(&self, c: &Conversation<'_>) -> Result<String, TemplateError> {
        let mut messages: Vec<Value> = c.messages.iter().map(alias_reasoning).collect();
        let mut last = None;
        if c.continue_final_message {
            let template = self.env.get_template(NAME)?;
            if !template.source().contains("content") {
                return Err(TemplateError(
                    "continue_final_message is set but the chat template reads no \"content\"".to_owned(),
                ));
            }
            let final_message = messages.pop().ok_or_else(|| {
                TemplateError("continue_final_message is set but the conversation is empty".to_owned())
            })?;
            let (tagged, text) = tagged(&final_message)?;
            messages.push(tagged);
            last = Some(text);
        }
        let rendered = self.render_context(
            Value::from(messages),
            c.tools.map(|t| Value::from(t.to_vec())),
            c.documents.map(|d| Value::from(d.to_vec())),
            c.add_generation_prompt,
            c.kwargs,
        )?;
        let Some(last) = last else {
            return Ok(rendered);
        };
        let tag = CONTINUE_TAG.trim_end();
        match rendered.rfind(tag) {
            Some(at) if rendered.contains(py_strip(&last)) => {
                if rendered[at..].starts_with(CONTINUE_TAG) {
                    Ok(rendered[..at].to_owned())
                } else {
                    // The template trimmed the content's trailing spaces.
                    Ok(python_strip(&rendered[..at], None, false, true).to_owned())
                }
            }
            _ => Err(TemplateError(
                "continue_final_message is set but the final message does not appear in the rendered chat"
                    .to_owned(),
            )),
        }
    }

    fn render_context(
        &self,
        messages: Value,
        tools: Option<Value>,
        documents: Option<Value>,
        add_generation_prompt: bool,
        kwargs: Option<&Value>,
    ) -> Result<String, TemplateError> {
        let template = self.env.get_template(NAME)?;
        let mut ctx: Vec<(Value, Value)> = self.specials.clone();
        for (k, v) in kwargs.map(entries).unwrap_or_default() {
            if !k.as_str().is_some_and(|k| RESERVED.contains(&k)) {
                ctx.retain(|(name, _)| *name != k);
                ctx.push((k, v));
            }
        }
        ctx.push((Value::from("messages"), messages));
        ctx.push((
            Value::from("add_generation_prompt"),
            Value::from(add_generation_prompt),
        ));
        if let Some(tools) = tools {
            ctx.push((Value::from("tools"), tools));
        }
        if let Some(documents) = documents {
            ctx.push((Value::from("documents"), documents));
        }
        let ctx: Value = ctx.into_iter().collect();
        // The engine panics on some values a request can bring (minijinja
        // 2.24 slicing an empty list backwards): the template failed on
        // this input, which is the caller's to fix, not an internal error.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| template.render(ctx)))
            .map_err(|_| TemplateError(ENGINE_FAILED.to_owned()))?
            .map_err(TemplateError::from)
    }
}

/// What a template that made the engine panic refuses with.
const ENGINE_FAILED: &str = "the template engine failed on this input";

/// What the template's own arguments are called: a keyword argument of the
/// caller's may not replace them.
const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// The names a message's reasoning goes by; `transformers` fills the first
/// two from whichever is set.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// What `transformers` appends to the content to continue, to find where it
/// ends in the rendered text.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// A conversation to render ([`ChatTemplate::render_conversation`]), as an
/// OpenAI-style request carries it: JSON values read in order (template
/// values keep their keys' order, as Python's dicts do).
#[derive(Debug, Clone, Copy, Default)]
pub struct Conversation<'a> {
    /// The messages, each a map (`role`, `content`, and whatever else the
    /// caller sent).
    pub messages: &'a [Value],
    /// Tool definitions, when given.
    pub tools: Option<&'a [Value]>,
    /// Documents for retrieval templates, when given.
    pub documents: Option<&'a [Value]>,
    /// Whether the text ends with the assistant turn's opening.
    pub add_generation_prompt: bool,
    /// Whether the last message is left open, to be continued.
    pub continue_final_message: bool,
    /// Further template variables, a map (`chat_template_kwargs`:
    /// `enable_thinking` and the like).
    pub kwargs: Option<&'a Value>,
}

/// The entries of a map value, in order; nothing for another kind.
pub fn entries(v: &Value) -> Vec<(Value, Value)> {
    if v.kind() != ValueKind::Map {
        return Vec::new();
    }
    v.try_iter()
        .map(|keys| {
            keys.map(|k| {
                let item = v.get_item(&k).unwrap_or_default();
                (k, item)
            })
            .collect()
        })
        .unwrap_or_default()
}

/// Whether `v` is set: neither missing nor `None`.
fn is_set(v: &Value) -> bool {
    !v.is_undefined() && !v.is_none()
}

/// `message` as `transformers` hands it on: when it carries reasoning, as
/// `{"thinking": r, **message, "reasoning_content": r}`.
fn alias_reasoning(message: &Value) -> Value {
    let reasoning = REASONING_FIELDS
        .iter()
        .map(|k| message.get_attr(k).unwrap_or_default())
        .find(is_set);
    let Some(r) = reasoning else {
        return message.clone();
    };
    let mut out: Vec<(Value, Value)> = vec![(Value::from("thinking"), r.clone())];
    for (k, v) in entries(message) {
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    let key = Value::from("reasoning_content");
    match out.iter_mut().find(|(x, _)| *x == key) {
        Some(slot) => slot.1 = r,
        None => out.push((key, r)),
    }
    out.into_iter().collect()
}

/// The final message with [`CONTINUE_TAG`] appended to its content (or to
/// its last text part), and the text it had.
fn tagged(message: &Value) -> Result<(Value, String), TemplateError> {
    let missing = || {
        TemplateError(
            "continue_final_message is set but the final message has no text to continue".to_owned(),
        )
    };
    let content = message.get_attr("content").unwrap_or_default();
    let (content, text) = match content.kind() {
        ValueKind::String => {
            let s = content.as_str().unwrap_or_default();
            (Value::from(format!("{s}{CONTINUE_TAG}")), s.to_owned())
        }
        ValueKind::Seq => {
            let parts: Vec<Value> = content.try_iter().map(Iterator::collect).unwrap_or_default();
            let at = parts
                .iter()
                .rposition(|p| is_set(&p.get_attr("text").unwrap_or_default()))
                .ok_or_else(missing)?;
            let text = parts[at].get_attr("text").unwrap_or_default();
            let text = text.as_str().ok_or_else(missing)?.to_owned();
            let mut parts = parts;
            parts[at] = entries(&parts[at])
                .into_iter()
                .map(|(k, v)| {
                    if k.as_str() == Some("text") {
                        (k, Value::from(format!("{text}{CONTINUE_TAG}")))
                    } else {
                        (k, v)
                    }
                })
                .collect();
            (Value::from(parts), text)
        }
        _ => return Err(missing()),
    };
    let message = entries(message)
        .into_iter()
        .map(|(k, v)| {
            if k.as_str() == Some("content") {
                (k, content.clone())
            } else {
                (k, v)
            }
        })
        .collect();
    Ok((message, text))
}

/// Whether Python's `str.isspace()` holds for `c`: Unicode whitespace, and
/// the four separators U+001C to U+001F, which Rust's `char::is_whitespace`
/// leaves out (and which `str.strip()` strips).
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip`, `lstrip` or `rstrip` of `s`: of `chars` when
/// given, else of Python's whitespace.
fn python_strip<'s>(s: &'s str, chars: Option<&str>, left: bool, right: bool) -> &'s str {
    let strip = |c: char| match chars {
        Some(set) => set.contains(c),
        None => python_space(c),
    };
    let s = if left { s.trim_start_matches(strip) } else { s };
    if right { s.trim_end_matches(strip) } else { s }
}

/// Python's `str.strip()` of `s`: what a template's `| trim` leaves of a
/// content.
pub fn py_strip(s: &str) -> &str {
    python_strip(s, None, true, true)
}

/// Jinja2's `trim` filter: Python's `str.strip(chars)` of the value's
/// text.
fn trim(value: Value, chars: Option<String>) -> Value {
    let chars = chars.as_deref();
    match value.as_str() {
        Some(s) => stripped(&value, s, python_strip(s, chars, true, true)),
        None => Value::from(python_strip(&value.to_string(), chars, true, true)),
    }
}

/// `value`, whose text is `s`, stripped to `kept`: `value` itself where
/// nothing was stripped (a content is usually trimmed already, and is
/// long: not copied), else a plain string of `kept`. A string marked safe
/// is always copied, so that a stripped string is never marked safe, as
/// before.
fn stripped(value: &Value, s: &str, kept: &str) -> Value {
    if kept.len() == s.len() && !value.is_safe() {
        value.clone()
    } else {
        Value::from(kept)
    }
}

/// Python's methods on values: `strip`, `lstrip` and `rstrip` of a string
/// strip Python's whitespace (minijinja-contrib's strip Rust's, which
/// keeps U+001C to U+001F); everything else is minijinja-contrib's.
fn python_method(
    state: &minijinja::State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let sides = match method {
        "strip" => Some((true, true)),
        "lstrip" => Some((true, false)),
        "rstrip" => Some((false, true)),
        _ => None,
    };
    if let (Some((left, right)), Some(s)) = (sides, value.as_str()) {
        let chars =
            match args {
                [] => None,
                [c] if c.is_none() => None,
                [c] => Some(c.as_str().ok_or_else(|| {
                    Error::new(ErrorKind::InvalidOperation, "strip: chars must be a string")
                })?),
                _ => return Err(Error::from(ErrorKind::TooManyArguments)),
            };
        return Ok(stripped(value, s, python_strip(s, chars, left, right)));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `raise_exception(message)`: the template refuses its input.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC date and time, formatted with
/// the directives chat templates use (`%d %b %Y`, `%B`, `%m`, `%y`, `%H`,
/// `%M`, `%S`, `%A`, `%a`, `%j`, `%e`, `%%`); another directive is written
/// as it is.
fn strftime_now(format: String) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(secs, &format)
}

/// `format` for the UTC time `secs` seconds after the epoch.
fn strftime(secs: u64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = secs / 86_400;
    let (year, month, day) = civil_from_days(days);
    let yday = days - days_from_civil(year, 1, 1) + 1;
    let weekday = DAYS[(days % 7) as usize];
    let month_name = MONTHS[(month - 1) as usize];
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('d') => write!(out, "{day:02}"),
            Some('e') => write!(out, "{day:>2}"),
            Some('m') => write!(out, "{month:02}"),
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year % 100),
            Some('B') => write!(out, "{month_name}"),
            Some('b') => write!(out, "{}", &month_name[..3]),
            Some('A') => write!(out, "{weekday}"),
            Some('a') => write!(out, "{}", &weekday[..3]),
            Some('j') => write!(out, "{yday:03}"),
            Some('H') => write!(out, "{h:02}"),
            Some('M') => write!(out, "{m:02}"),
            Some('S') => write!(out, "{s:02}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// (year, month, day) of the day `days` after 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let (y, m, d) = crate::vocab::date::civil_from_days(i64::try_from(days).unwrap_or(i64::MAX / 2));
    (u64::try_from(y).unwrap_or(0), u64::from(m), u64::from(d))
}

/// Days from 1970-01-01 to (year, month, day), for a date on or after it.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

#[cfg(test)]
mod tests;
