//! The JSON of vLLM's render contract: the requests as OpenAI clients and
//! the routers send them (unknown fields, such as `stream` and sampling
//! parameters, accepted and ignored), the messages as vLLM hands them to the
//! template, and the answers as vLLM writes them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::Value as Tv;
use minijinja::value::ValueKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RenderError;
use crate::tokens::Conversation;
use crate::tokens::template;

/// What every render request names and vLLM echoes back.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Common {
    /// The model, as the model table names it.
    pub model: Option<String>,
    /// Echoed.
    pub cache_salt: Option<String>,
    /// Echoed.
    pub priority: Option<i64>,
    /// Echoed.
    pub stream: Option<bool>,
    /// Echoed when `stream`.
    pub stream_options: Option<Value>,
    /// Whether the tokenizer adds its special tokens (default: false for a
    /// conversation, whose template writes them; true for a prompt).
    pub add_special_tokens: Option<bool>,
}

impl Common {
    /// What the answer echoes: `kind` is `chatcmpl` or `cmpl`.
    pub fn echo(&self, kind: &'static str, max_tokens: Option<u64>) -> Echo<'_> {
        Echo {
            kind,
            model: self.model.as_deref(),
            stream: self.stream.unwrap_or(false),
            stream_options: self.stream_options.as_ref(),
            cache_salt: self.cache_salt.as_deref(),
            priority: self.priority.unwrap_or(0),
            max_tokens,
        }
    }
}

/// `POST /v1/chat/completions/render` (and `/tokenize` with `messages`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatRender {
    /// The model and the echoed fields.
    #[serde(flatten)]
    pub common: Common,
    /// The conversation (template values: keys keep their order).
    pub messages: Option<Vec<Tv>>,
    /// Tool definitions handed to the template.
    pub tools: Option<Vec<Tv>>,
    /// Documents handed to the template.
    pub documents: Option<Vec<Tv>>,
    /// Whether the text ends with the assistant turn's opening (default
    /// true).
    pub add_generation_prompt: Option<bool>,
    /// Whether the last message is left open (default false).
    pub continue_final_message: Option<bool>,
    /// Further template variables (a map).
    pub chat_template_kwargs: Option<Tv>,
    /// A request's own template: refused (the folder's is the engine's).
    pub chat_template: Option<Value>,
    /// The answer's budget: `max_completion_tokens`, else `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// See `max_completion_tokens`.
    pub max_tokens: Option<u64>,
}

/// `POST /v1/completions/render`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CompletionRender {
    /// The model and the echoed fields.
    #[serde(flatten)]
    pub common: Common,
    /// A prompt, or a list of them.
    pub prompt: Option<Value>,
    /// The answer's budget (default 16, as vLLM's).
    pub max_tokens: Option<u64>,
}

/// `POST /tokenize`: a prompt, or a conversation.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TokenizeRender {
    /// The prompt form's text.
    pub prompt: Option<Value>,
    /// The conversation form, with its own fields.
    #[serde(flatten)]
    pub chat: ChatRender,
}

/// Messages as vLLM hands them to a template: `role` and `content` (text
/// parts joined with newlines, a missing content empty); an assistant's
/// `tool_calls` with each call's `arguments` as an object (a JSON string is
/// parsed, as vLLM does, since templates expect objects) and its
/// `reasoning`; a tool result's `tool_call_id`; a `name`.
pub fn messages(raw: &[Tv]) -> Result<Vec<Tv>, RenderError> {
    if raw.is_empty() {
        return Err(RenderError::invalid("messages", "`messages` must not be empty"));
    }
    raw.iter().enumerate().map(|(i, m)| message(i, m)).collect()
}

/// A field of a template map, when set (neither missing nor null).
fn field(m: &Tv, key: &str) -> Option<Tv> {
    m.get_attr(key).ok().filter(|v| !v.is_undefined() && !v.is_none())
}

fn message(i: usize, m: &Tv) -> Result<Tv, RenderError> {
    let bad = |what: &str| RenderError::invalid("messages", format!("messages[{i}]: {what}"));
    if m.kind() != ValueKind::Map {
        return Err(bad("not an object"));
    }
    let role = field(m, "role").filter(|r| r.kind() == ValueKind::String);
    let role = role.ok_or_else(|| bad("`role` must be a string"))?;
    let role_name = role.as_str().unwrap_or_default().to_owned();
    let mut out: Vec<(&str, Tv)> = vec![("role", role)];
    out.push(("content", Tv::from(content(field(m, "content")).map_err(bad)?)));
    if role_name == "assistant" {
        if let Some(calls) = field(m, "tool_calls") {
            if calls.kind() != ValueKind::Seq {
                return Err(bad("`tool_calls` must be a list"));
            }
            let calls = calls
                .try_iter()
                .map_err(|_| bad("`tool_calls` must be a list"))?
                .map(|c| tool_call(&c).map_err(bad))
                .collect::<Result<Vec<_>, _>>()?;
            out.push(("tool_calls", Tv::from(calls)));
        }
        if let Some(r) = field(m, "reasoning").or_else(|| field(m, "reasoning_content")) {
            out.push(("reasoning", r));
        }
    }
    if role_name == "tool"
        && let Some(id) = field(m, "tool_call_id")
    {
        out.push(("tool_call_id", id));
    }
    if let Some(name) = field(m, "name").filter(|n| n.kind() == ValueKind::String) {
        out.push(("name", name));
    }
    Ok(out.into_iter().collect())
}

/// A message's text: a string, or its text parts joined with newlines;
/// absent or null is empty. Images, audio and video are refused.
fn content(c: Option<Tv>) -> Result<String, &'static str> {
    let Some(c) = c else {
        return Ok(String::new());
    };
    match c.kind() {
        ValueKind::String => Ok(c.as_str().unwrap_or_default().to_owned()),
        ValueKind::Seq => {
            let mut texts = Vec::new();
            for p in c.try_iter().map_err(|_| "`content` must be a list")? {
                let kind = field(&p, "type");
                match kind.as_ref().and_then(Tv::as_str) {
                    Some("text") => texts.push(
                        field(&p, "text")
                            .filter(|t| t.kind() == ValueKind::String)
                            .ok_or("a text part's `text` must be a string")?
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    ),
                    Some(
                        "image_url" | "input_image" | "image" | "input_audio" | "audio_url" | "video_url",
                    ) => {
                        return Err("images, audio and video are not supported yet: send text parts only");
                    }
                    _ => return Err("a content part must be `{\"type\": \"text\", \"text\": ...}`"),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err("`content` must be a string, a list of text parts, or null"),
    }
}

/// A tool call with its function's `arguments` as an object.
fn tool_call(c: &Tv) -> Result<Tv, &'static str> {
    if c.kind() != ValueKind::Map {
        return Err("a tool call must be an object");
    }
    let entries = template::entries(c)
        .into_iter()
        .map(|(k, v)| {
            if k.as_str() == Some("function") && v.kind() == ValueKind::Map {
                let function = template::entries(&v)
                    .into_iter()
                    .map(|(fk, fv)| match (fk.as_str(), fv.kind()) {
                        (Some("arguments"), ValueKind::String) => {
                            serde_json::from_str::<Tv>(fv.as_str().unwrap_or_default())
                                .map(|parsed| (fk, parsed))
                                .map_err(|_| "a tool call's `arguments` string is not JSON")
                        }
                        _ => Ok((fk, fv)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok::<_, &'static str>((k, function.into_iter().collect::<Tv>()))
            } else {
                Ok((k, v))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(entries.into_iter().collect())
}

/// What to render, and how, from a chat request whose messages were
/// normalized into `messages`.
pub fn conversation<'a>(r: &'a ChatRender, messages: &'a [Tv]) -> Result<Conversation<'a>, RenderError> {
    if r.chat_template.as_ref().is_some_and(|t| !t.is_null()) {
        return Err(RenderError::invalid(
            "chat_template",
            "a request's own `chat_template` is not accepted: the model folder's is the engine's",
        ));
    }
    let add_generation_prompt = r.add_generation_prompt.unwrap_or(true);
    let continue_final_message = r.continue_final_message.unwrap_or(false);
    if add_generation_prompt && continue_final_message {
        return Err(RenderError::invalid(
            "continue_final_message",
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        ));
    }
    if r.tools.as_ref().is_some_and(Vec::is_empty) {
        return Err(RenderError::invalid(
            "tools",
            "`tools` must not be an empty array: omit it for no tools",
        ));
    }
    Ok(Conversation {
        messages,
        tools: r.tools.as_deref(),
        documents: r.documents.as_deref(),
        add_generation_prompt,
        continue_final_message,
        kwargs: r
            .chat_template_kwargs
            .as_ref()
            .filter(|k| k.kind() == ValueKind::Map),
    })
}

/// The prompts of a completion request: a string or a list of strings.
pub fn prompts(p: Option<&Value>) -> Result<Vec<&str>, RenderError> {
    let bad = || {
        RenderError::invalid(
            "prompt",
            "`prompt` must be a string or a non-empty list of strings",
        )
    };
    match p {
        Some(Value::String(s)) => Ok(vec![s.as_str()]),
        Some(Value::Array(list)) if !list.is_empty() => {
            list.iter().map(|v| v.as_str().ok_or_else(bad)).collect()
        }
        _ => Err(bad()),
    }
}

/// What vLLM's render answers echo of the request.
pub struct Echo<'a> {
    /// `chatcmpl` or `cmpl`.
    pub kind: &'static str,
    /// The model as asked for.
    pub model: Option<&'a str>,
    /// `stream`, and its options when set.
    pub stream: bool,
    /// See `stream`.
    pub stream_options: Option<&'a Value>,
    /// `cache_salt`.
    pub cache_salt: Option<&'a str>,
    /// `priority`.
    pub priority: i64,
    /// The answer's budget, when the request set one.
    pub max_tokens: Option<u64>,
}

/// vLLM's `GenerateRequest`, written straight from the ids (no JSON tree
/// of eight thousand numbers on the way).
#[derive(Debug, Serialize)]
pub struct GenerateRequest<'a> {
    request_id: String,
    token_ids: &'a [u32],
    features: Option<()>,
    sampling_params: SamplingParams,
    model: Option<&'a str>,
    stream: bool,
    stream_options: Option<&'a Value>,
    cache_salt: Option<&'a str>,
    priority: i64,
    kv_transfer_params: Option<()>,
}

/// The sampling parameters that differ from vLLM's defaults.
#[derive(Debug, Serialize)]
struct SamplingParams {
    max_tokens: u64,
}

/// vLLM's `GenerateRequest` for `ids`: the ids, no multimodal features, the
/// sampling parameters that differ from vLLM's defaults (the answer's
/// budget: the request's, else what the window leaves), and the echoed
/// fields.
pub fn generate_request<'a>(ids: &'a [u32], window: u32, e: &Echo<'a>) -> GenerateRequest<'a> {
    let max_tokens = e
        .max_tokens
        .unwrap_or_else(|| u64::from(window).saturating_sub(ids.len() as u64));
    GenerateRequest {
        request_id: format!("{}-{}", e.kind, request_id()),
        token_ids: ids,
        features: None,
        sampling_params: SamplingParams { max_tokens },
        model: e.model,
        stream: e.stream,
        stream_options: if e.stream { e.stream_options } else { None },
        cache_salt: e.cache_salt,
        priority: e.priority,
        kv_transfer_params: None,
    }
}

/// `/tokenize`'s answer.
#[derive(Debug, Serialize)]
pub struct Tokenized<'a> {
    count: usize,
    max_model_len: u32,
    tokens: &'a [u32],
    token_strs: Option<()>,
}

/// `/tokenize`'s answer for `ids`.
pub fn tokenized(ids: &[u32], window: u32) -> Tokenized<'_> {
    Tokenized {
        count: ids.len(),
        max_model_len: window,
        tokens: ids,
        token_strs: None,
    }
}

/// A request id: 32 hex digits, distinct within the process and across
/// restarts (a hash of the start time and a counter; not a secret).
fn request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = blake3::Hasher::new();
    h.update(&started.to_le_bytes());
    h.update(&n.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.finalize().to_hex()[..32].to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A JSON list as template values, keys in their written order.
    fn tv(v: &Value) -> Vec<Tv> {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    #[test]
    fn messages_are_handed_over_as_vllm_hands_them() {
        let raw: Vec<Tv> = serde_json::from_str(
            r#"[
            {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "extra": 1},
            {"role": "assistant", "content": null, "reasoning_content": "think",
             "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}
        ]"#,
        )
        .unwrap();
        let out = messages(&raw).unwrap();
        let text = |v: &Tv| serde_json::to_string(v).unwrap();
        assert_eq!(text(&out[0]), r#"{"role":"system","content":"a\nb"}"#);
        // Keys in the order written, the arguments parsed into an object.
        assert_eq!(
            text(&out[1]),
            r#"{"role":"assistant","content":"","tool_calls":[{"type":"function","id":"c1","function":{"name":"f","arguments":{"z":1,"a":2}}}],"reasoning":"think"}"#
        );
        assert_eq!(
            text(&out[2]),
            r#"{"role":"tool","content":"42","tool_call_id":"c1","name":"f"}"#
        );
    }

    #[test]
    fn images_and_malformed_messages_are_refused_by_field() {
        for bad in [
            json!([]),
            json!([{"content": "no role"}]),
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
            json!([{"role": "user", "content": 7}]),
            json!([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]),
        ] {
            match messages(&tv(&bad)) {
                Err(RenderError::Invalid { param, .. }) => assert_eq!(param, Some("messages"), "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn prompts_are_a_string_or_a_list_of_them() {
        assert_eq!(prompts(Some(&json!("a"))).unwrap(), ["a"]);
        assert_eq!(prompts(Some(&json!(["a", "b"]))).unwrap(), ["a", "b"]);
        for bad in [json!([]), json!([1]), json!(3), Value::Null] {
            assert!(prompts(Some(&bad)).is_err(), "{bad}");
        }
        assert!(prompts(None).is_err());
    }

    #[test]
    fn the_answer_has_vllms_keys() {
        let e = Echo {
            kind: "chatcmpl",
            model: Some("m"),
            stream: false,
            stream_options: None,
            cache_salt: Some("s"),
            priority: 0,
            max_tokens: None,
        };
        let answer = |ids: &[u32]| serde_json::to_value(generate_request(ids, 10, &e)).unwrap();
        let v = answer(&[1, 2, 3]);
        assert_eq!(v["token_ids"], json!([1, 2, 3]));
        assert_eq!(v["features"], Value::Null);
        assert_eq!(v["sampling_params"]["max_tokens"], 7);
        assert_eq!(v["cache_salt"], "s");
        assert!(v["request_id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_ne!(v["request_id"], answer(&[1])["request_id"]);
        // Every key vLLM writes, in its order, `null` where it has nothing.
        let text = serde_json::to_string(&generate_request(&[1], 10, &e)).unwrap();
        let at: Vec<usize> = [
            "request_id",
            "token_ids",
            "features",
            "sampling_params",
            "model",
            "stream",
            "stream_options",
            "cache_salt",
            "priority",
            "kv_transfer_params",
        ]
        .iter()
        .map(|k| {
            text.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {text}"))
        })
        .collect();
        assert!(at.is_sorted(), "{text}");
        assert_eq!(v.as_object().unwrap().len(), at.len());
        let t = serde_json::to_value(tokenized(&[4, 5], 9)).unwrap();
        assert_eq!(
            t,
            json!({"count": 2, "max_model_len": 9, "tokens": [4, 5], "token_strs": null})
        );
    }
}
