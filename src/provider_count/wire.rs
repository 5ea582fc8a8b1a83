//! The two counting APIs' bodies and answers, and what an answer means.
//!
//! Anthropic: `{"model": M, "messages": [{"role": "user", "content": TEXT}]}`,
//! a system prompt as top-level `"system"`, a tool set as top-level
//! `"tools"`; the answer is `{"input_tokens": N}`. Gemini:
//! `{"contents": [{"role": "user", "parts": [{"text": TEXT}]}]}` (assistant
//! turns are role `"model"`); a system prompt or a tool set goes through
//! `{"generateContentRequest": {"model": "models/M", "contents": [...],
//! "systemInstruction": ..., "tools": [{"functionDeclarations": TOOLS}]}}`;
//! the answer is `{"totalTokens": N}`.
//!
//! A 2xx with a count is learned; 400, 404, 413 and 422 are refusals; 429
//! is throttling (`retry-after` seconds, else 1 s, at most
//! [`MAX_RETRY_AFTER`]); anything else, or a 2xx without a count, is a
//! failure. Nothing here panics on any answer.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Api;
use super::error::{CountError, Failure};

/// The largest answer read; a larger one is a failure.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The longest pause a `retry-after` can ask for (a provider asking longer
/// is asked again then).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// The pause of a 429 without a readable `retry-after`.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What one request holds besides its model.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// Messages alternating user and assistant, the first a user's.
    Messages(&'a [&'a str]),
    /// A system prompt, with one user message `"a"`.
    System(&'a str),
    /// A tool set (a JSON array), with one user message `"a"`.
    Tools(&'a RawValue),
}

/// What an answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The count.
    Count(u32),
    /// A refusal, with its status.
    Refused(u16),
    /// A 429, and how long to pause.
    Throttled(Duration),
    /// A failure.
    Failed(Failure),
}

/// Whether `model` may be sent: 1 to [`super::MAX_MODEL_BYTES`] bytes of
/// ASCII letters, digits and `.-_:@` (it goes into Gemini's URL path).
pub fn model_ok(model: &str) -> bool {
    !model.is_empty()
        && model.len() <= super::MAX_MODEL_BYTES
        && model
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'@'))
}

/// A tool set's JSON (an array of definitions) in `api`'s shape: each
/// definition in OpenAI's (`{"type":"function","function":{name,
/// description, parameters}}`), Anthropic's (`{name, description,
/// input_schema}`) or Gemini's (`{name, description, parameters}`) shape
/// becomes Anthropic's or Gemini's function declaration, as a gateway
/// sends it to that provider. Anything else is not sendable.
pub fn tools(text: &str, api: Api) -> Result<Box<RawValue>, CountError> {
    let unsendable = |reason| CountError::Unsendable { reason };
    let set: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(text).map_err(|_| unsendable("the tool set is not a JSON array of objects"))?;
    let shaped: Vec<serde_json::Value> = set
        .into_iter()
        .map(|mut tool| {
            if let Some(serde_json::Value::Object(function)) = tool.remove("function") {
                tool = function;
            }
            let name = tool.remove("name").filter(serde_json::Value::is_string);
            let name = name.ok_or(unsendable("a tool without a name"))?;
            let schema = tool.remove("input_schema").or_else(|| tool.remove("parameters"));
            let mut out = serde_json::Map::new();
            out.insert("name".to_owned(), name);
            if let Some(d) = tool.remove("description") {
                out.insert("description".to_owned(), d);
            }
            let schema_key = match api {
                Api::Anthropic => "input_schema",
                Api::Gemini => "parameters",
            };
            let schema = match (schema, api) {
                (Some(s), _) => Some(s),
                // Anthropic requires a schema; a tool without parameters has an empty one.
                (None, Api::Anthropic) => Some(serde_json::json!({"type": "object"})),
                (None, Api::Gemini) => None,
            };
            if let Some(s) = schema {
                out.insert(schema_key.to_owned(), s);
            }
            Ok(serde_json::Value::Object(out))
        })
        .collect::<Result<_, CountError>>()?;
    let json = serde_json::to_string(&shaped).map_err(|_| unsendable("the tool set cannot be written"))?;
    RawValue::from_string(json).map_err(|_| unsendable("the tool set cannot be written"))
}

#[derive(Serialize)]
struct AnthropicBody<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    messages: Vec<AnthropicMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
}

#[derive(Serialize)]
struct AnthropicMessage<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct GeminiBody<'a> {
    contents: Vec<GeminiContent<'a>>,
}

#[derive(Serialize)]
struct GeminiWrapped<'a> {
    #[serde(rename = "generateContentRequest")]
    generate_content_request: GeminiGenerate<'a>,
}

#[derive(Serialize)]
struct GeminiGenerate<'a> {
    model: String,
    contents: Vec<GeminiContent<'a>>,
    #[serde(rename = "systemInstruction", skip_serializing_if = "Option::is_none")]
    system_instruction: Option<GeminiSystem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<[GeminiTools<'a>; 1]>,
}

#[derive(Serialize)]
struct GeminiContent<'a> {
    role: &'static str,
    parts: [GeminiPart<'a>; 1],
}

#[derive(Serialize)]
struct GeminiSystem<'a> {
    parts: [GeminiPart<'a>; 1],
}

#[derive(Serialize)]
struct GeminiPart<'a> {
    text: &'a str,
}

#[derive(Serialize)]
struct GeminiTools<'a> {
    #[serde(rename = "functionDeclarations")]
    function_declarations: &'a RawValue,
}

/// The texts of a request's messages (the probe `"a"` beside a system prompt
/// or a tool set).
fn messages<'a>(request: &Request<'a>) -> &'a [&'a str] {
    match *request {
        Request::Messages(texts) => texts,
        Request::System(_) | Request::Tools(_) => &[super::frames::PROBE],
    }
}

/// The body of `request` for `model` in `api`'s shape.
pub fn body(api: Api, model: &str, request: Request<'_>) -> Result<Vec<u8>, CountError> {
    let texts = messages(&request);
    let written = match api {
        Api::Anthropic => {
            let messages = texts.iter().enumerate();
            let role = |i: usize| if i.is_multiple_of(2) { "user" } else { "assistant" };
            serde_json::to_vec(&AnthropicBody {
                model,
                system: if let Request::System(s) = request {
                    Some(s)
                } else {
                    None
                },
                messages: messages
                    .map(|(i, &content)| AnthropicMessage {
                        role: role(i),
                        content,
                    })
                    .collect(),
                tools: if let Request::Tools(t) = request {
                    Some(t)
                } else {
                    None
                },
            })
        }
        Api::Gemini => {
            let role = |i: usize| if i.is_multiple_of(2) { "user" } else { "model" };
            let contents = texts
                .iter()
                .enumerate()
                .map(|(i, &text)| GeminiContent {
                    role: role(i),
                    parts: [GeminiPart { text }],
                })
                .collect();
            match request {
                Request::Messages(_) => serde_json::to_vec(&GeminiBody { contents }),
                Request::System(text) => serde_json::to_vec(&GeminiWrapped {
                    generate_content_request: GeminiGenerate {
                        model: format!("models/{model}"),
                        contents,
                        system_instruction: Some(GeminiSystem {
                            parts: [GeminiPart { text }],
                        }),
                        tools: None,
                    },
                }),
                Request::Tools(function_declarations) => serde_json::to_vec(&GeminiWrapped {
                    generate_content_request: GeminiGenerate {
                        model: format!("models/{model}"),
                        contents,
                        system_instruction: None,
                        tools: Some([GeminiTools {
                            function_declarations,
                        }]),
                    },
                }),
            }
        }
    };
    written.map_err(|_| CountError::Unsendable {
        reason: "the body could not be written",
    })
}

#[derive(Deserialize)]
struct AnthropicAnswer {
    input_tokens: u64,
}

#[derive(Deserialize)]
struct GeminiAnswer {
    #[serde(rename = "totalTokens")]
    total_tokens: u64,
}

/// The count in a 2xx answer of `api`, saturated at `u32::MAX`.
fn count(api: Api, body: &[u8]) -> Option<u32> {
    let n = match api {
        Api::Anthropic => serde_json::from_slice::<AnthropicAnswer>(body).ok()?.input_tokens,
        Api::Gemini => serde_json::from_slice::<GeminiAnswer>(body).ok()?.total_tokens,
    };
    Some(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The pause a 429's `retry-after` asks for: whole seconds (at most
/// [`MAX_RETRY_AFTER`]), else [`DEFAULT_RETRY_AFTER`] (an HTTP date is not
/// read).
pub fn retry_after(header: Option<&[u8]>) -> Duration {
    let seconds = header
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    match seconds {
        Some(s) => Duration::from_secs(s).min(MAX_RETRY_AFTER),
        None => DEFAULT_RETRY_AFTER,
    }
}

/// What an answer of `status`, `retry-after` and `body` means.
pub fn verdict(api: Api, status: u16, retry: Option<&[u8]>, body: &[u8]) -> Verdict {
    match status {
        200..=299 => match count(api, body) {
            Some(n) => Verdict::Count(n),
            None => Verdict::Failed(Failure::NoCount),
        },
        400 | 404 | 413 | 422 => Verdict::Refused(status),
        429 => Verdict::Throttled(retry_after(retry)),
        _ => Verdict::Failed(Failure::Status(status)),
    }
}

#[cfg(test)]
mod tests;
