//! The render node's HTTP/1.1 edge: routes, bodies bounded like gRPC
//! messages, one work slot per render from the server's admission, the work
//! on the blocking pool, and every refusal an OpenAI error body
//! (`{"error": {"message", "type", "param", "code"}}`) with vLLM's status:
//! 400 for a bad request, 404 for an unknown model, 413 for a body over the
//! limit, 429 when every slot is taken. One request's fault never touches
//! another's.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::wire::{self, ChatRender, CompletionRender, TokenizeRender};
use super::{RenderError, Renderer, source_headers};
use crate::assemble::flow;
use crate::http1::{self, BodyError, Extra, code_label};
use crate::prompt::Sources;
use crate::telemetry::metrics;
use crate::vocab::Cancel;

/// A connection whose request headers have not all arrived by then is
/// closed.
pub const RENDER_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A body not received in full by then is answered 408.
pub const RENDER_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Bodies up to this size render on the connection's own thread (about
/// 8k tokens of text: a few hundred microseconds of work); larger ones on
/// it too, once its worker's other tasks are handed to another thread
/// ([`flow::in_place`]).
const INLINE_BODY_BYTES: usize = 48 * 1024;
/// Metric labels of the endpoints (the `rpc` label of the request series).
pub const ENDPOINTS: [&str; 3] = [CHAT, COMPLETIONS, TOKENIZE];
const CHAT: &str = "RenderChat";
const COMPLETIONS: &str = "RenderCompletions";
const TOKENIZE: &str = "Tokenize";

/// What the edge asks of the server's admission.
pub trait Admission: Send + Sync + 'static {
    /// A work slot; dropping it frees the slot.
    type Permit: Send + 'static;
    /// A slot now, or why not (every slot taken), counted under `endpoint`.
    fn admit(&self, endpoint: &'static str) -> Result<Self::Permit, String>;
    /// The largest body accepted (`limits.max_request_bytes`).
    fn max_body_bytes(&self) -> u32;
    /// Open connections at most (`limits.max_connections`).
    fn max_connections(&self) -> u32;
}

/// The render node: a renderer and the admission it works under.
pub struct RenderNode<A> {
    renderer: Renderer,
    admission: A,
    extra: Option<Arc<dyn Extra>>,
}

impl<A: std::fmt::Debug> std::fmt::Debug for RenderNode<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenderNode")
            .field("renderer", &self.renderer)
            .field("admission", &self.admission)
            .field("extra", &self.extra.is_some())
            .finish()
    }
}

impl<A: Admission> RenderNode<A> {
    /// A node rendering with `renderer` under `admission`.
    pub fn new(renderer: Renderer, admission: A) -> Self {
        RenderNode {
            renderer,
            admission,
            extra: None,
        }
    }

    /// The same node serving `extra`'s routes too.
    pub fn with_extra(mut self, extra: Arc<dyn Extra>) -> Self {
        self.extra = Some(extra);
        self
    }
}

/// Serves connections on `listener` until `shutdown` resolves, then drains
/// them as [`http1::serve_until`] does.
pub async fn serve<A: Admission, L: http1::Accept>(
    listener: L,
    node: Arc<RenderNode<A>>,
    shutdown: impl Future<Output = ()>,
) {
    let settings = http1::Settings {
        name: "render",
        header_timeout: RENDER_HEADER_TIMEOUT,
        max_connections: Some(node.admission.max_connections()),
    };
    http1::serve_until(
        listener,
        settings,
        move |req| route(Arc::clone(&node), req),
        shutdown,
    )
    .await;
}

/// A refusal as vLLM writes it.
#[derive(Debug)]
struct Failure {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
            param: None,
        }
    }

    fn response(&self) -> Response<Full<Bytes>> {
        let kind = match self.status {
            StatusCode::NOT_FOUND => "NotFoundError",
            StatusCode::TOO_MANY_REQUESTS => "RateLimitError",
            s if s.is_server_error() => "InternalServerError",
            _ => "BadRequestError",
        };
        let body = json!({"error": {
            "message": self.message,
            "type": kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }});
        http1::json(self.status, body.to_string())
    }
}

impl From<RenderError> for Failure {
    fn from(e: RenderError) -> Self {
        let (status, param) = match &e {
            RenderError::Invalid { param, .. } => (StatusCode::BAD_REQUEST, *param),
            RenderError::NoSuchModel(_) => (StatusCode::NOT_FOUND, Some("model")),
            RenderError::NotRenderable(_) => (StatusCode::BAD_REQUEST, Some("model")),
            RenderError::Template(_) => (StatusCode::BAD_REQUEST, Some("messages")),
        };
        Failure {
            status,
            message: e.to_string(),
            param,
        }
    }
}

impl From<BodyError> for Failure {
    fn from(e: BodyError) -> Self {
        let status = match e {
            BodyError::NotJson | BodyError::Broken(_) => StatusCode::BAD_REQUEST,
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
        };
        Failure::new(status, e.to_string())
    }
}

/// Answers one request.
async fn route<A: Admission>(node: Arc<RenderNode<A>>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(extra) = node.extra.clone()
        && extra.serves(req.uri().path())
    {
        return extra.answer(req).await;
    }
    let endpoint = match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => return Response::new(Full::new(Bytes::new())),
        (&Method::GET, "/v1/models") => {
            return http1::json(StatusCode::OK, models(&node.renderer).to_string());
        }
        (&Method::POST, "/v1/chat/completions/render") => CHAT,
        (&Method::POST, "/v1/completions/render") => COMPLETIONS,
        (&Method::POST, "/tokenize") => TOKENIZE,
        (
            _,
            "/health" | "/v1/models" | "/v1/chat/completions/render" | "/v1/completions/render" | "/tokenize",
        ) => {
            return Failure::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed").response();
        }
        (_, path) => return Failure::new(StatusCode::NOT_FOUND, format!("no route {path}")).response(),
    };
    let started = Instant::now();
    let answer = work(&node, endpoint, req).await;
    let (status, response) = match answer {
        Ok(r) => (StatusCode::OK, r.response()),
        Err(f) => (f.status, f.response()),
    };
    metrics::request(endpoint, code_label(status), started.elapsed());
    response
}

/// An answer: its JSON text, and the tokens of its ids.
struct Rendered {
    json: String,
    tokens: u32,
}

impl Rendered {
    fn new(json: String, ids: usize) -> Self {
        Rendered {
            json,
            tokens: u32::try_from(ids).unwrap_or(u32::MAX),
        }
    }

    /// The answer, saying its tokens are its folder's tokenizer's: exact.
    fn response(self) -> Response<Full<Bytes>> {
        let mut resp = http1::json(StatusCode::OK, self.json);
        for (name, value) in source_headers(&Sources::all(self.tokens, true)) {
            resp.headers_mut().insert(name, HeaderValue::from(value));
        }
        resp
    }
}

/// Admits, reads and renders one request.
async fn work<A: Admission>(
    node: &Arc<RenderNode<A>>,
    endpoint: &'static str,
    req: Request<Incoming>,
) -> Result<Rendered, Failure> {
    // Admitted before the body is read: with every slot taken, no further
    // body is buffered.
    let permit = node
        .admission
        .admit(endpoint)
        .map_err(|why| Failure::new(StatusCode::TOO_MANY_REQUESTS, why))?;
    let body = http1::read_json(req, node.admission.max_body_bytes(), RENDER_BODY_TIMEOUT).await?;
    let body_len = body.len();
    let renderer = node.renderer.clone();
    let render = move |_: &Cancel| answer(&renderer, endpoint, &body);
    // A small body renders here, sparing two thread hand-offs; a large one
    // too, once this worker's other tasks have moved to another thread, so
    // that neither the render nor its answer changes thread.
    let done = if body_len <= INLINE_BODY_BYTES {
        flow::inline::<_, _, ()>(permit, render)
    } else {
        flow::in_place::<_, _, ()>(permit, render).await
    };
    // Never a panic's payload: it may quote the request.
    done.map_err(|_| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error while rendering",
        )
    })?
}

/// What the node answers a POST to `endpoint` (one of [`ENDPOINTS`])
/// whose body is `body`, once admitted and read: the answer's JSON text, or
/// the refusal's status code and message. The listener's own cost is
/// measured against this, in process (`benches/render_node.rs`).
pub fn respond(renderer: &Renderer, endpoint: &str, body: &[u8]) -> Result<String, (u16, String)> {
    answer(renderer, endpoint, body)
        .map(|r| r.json)
        .map_err(|f| (f.status.as_u16(), f.message))
}

/// [`respond`], its refusal as the listener writes it.
fn answer(renderer: &Renderer, endpoint: &str, body: &[u8]) -> Result<Rendered, Failure> {
    match endpoint {
        CHAT => chat(renderer, body),
        COMPLETIONS => completions(renderer, body),
        _ => tokenize(renderer, body),
    }
}

/// The body as `T`, or a 400 naming serde's complaint (a position, never
/// content).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "a field has the wrong type",
            _ => "the body is not JSON",
        };
        Failure::new(
            StatusCode::BAD_REQUEST,
            format!("{what} (line {}, column {})", e.line(), e.column()),
        )
    })
}

fn chat(renderer: &Renderer, body: &[u8]) -> Result<Rendered, Failure> {
    let r: ChatRender = parse(body)?;
    let (ids, window) = chat_ids(renderer, &r)?;
    let echo = r
        .common
        .echo("chatcmpl", r.max_completion_tokens.or(r.max_tokens));
    let json = to_json(&wire::generate_request(&ids, window, &echo));
    Ok(Rendered::new(json, ids.len()))
}

/// A chat request's ids and its model's window.
fn chat_ids(renderer: &Renderer, r: &ChatRender) -> Result<(Vec<u32>, u32), Failure> {
    let raw = r
        .messages
        .as_deref()
        .ok_or_else(|| RenderError::invalid("messages", "`messages` is required"))?;
    let messages = wire::messages(raw)?;
    let conversation = wire::conversation(r, &messages)?;
    let special = r.common.add_special_tokens.unwrap_or(false);
    let (ids, window) = renderer.chat(r.common.model.as_deref(), &conversation, special)?;
    Ok((ids, window))
}

fn completions(renderer: &Renderer, body: &[u8]) -> Result<Rendered, Failure> {
    let r: CompletionRender = parse(body)?;
    let prompts = wire::prompts(r.prompt.as_ref())?;
    let echo = r.common.echo("cmpl", Some(r.max_tokens.unwrap_or(16)));
    let special = r.common.add_special_tokens.unwrap_or(true);
    let ids = prompts
        .into_iter()
        .map(|p| renderer.text(r.common.model.as_deref(), p, special))
        .collect::<Result<Vec<(Vec<u32>, u32)>, RenderError>>()?;
    let answers: Vec<_> = ids
        .iter()
        .map(|(ids, window)| wire::generate_request(ids, *window, &echo))
        .collect();
    let tokens = ids.iter().map(|(ids, _)| ids.len()).sum();
    Ok(Rendered::new(to_json(&answers), tokens))
}

fn tokenize(renderer: &Renderer, body: &[u8]) -> Result<Rendered, Failure> {
    let r: TokenizeRender = parse(body)?;
    let (ids, window) = match (&r.prompt, &r.chat.messages) {
        (Some(prompt), None) => {
            let prompt = prompt
                .as_str()
                .ok_or_else(|| RenderError::invalid("prompt", "`prompt` must be a string"))?;
            renderer.text(
                r.chat.common.model.as_deref(),
                prompt,
                r.chat.common.add_special_tokens.unwrap_or(true),
            )?
        }
        (None, Some(_)) => chat_ids(renderer, &r.chat)?,
        _ => {
            return Err(RenderError::invalid("prompt", "give exactly one of `prompt` and `messages`").into());
        }
    };
    Ok(Rendered::new(to_json(&wire::tokenized(&ids, window)), ids.len()))
}

/// An answer's JSON text (its types always serialize).
fn to_json(a: &impl serde::Serialize) -> String {
    serde_json::to_string(a).unwrap_or_default()
}

/// `GET /v1/models`: the models that render, as OpenAI lists models.
fn models(renderer: &Renderer) -> Value {
    let data: Vec<Value> = renderer
        .models()
        .into_iter()
        .map(|(name, window)| json!({"id": name, "object": "model", "owned_by": "context-assembler", "max_model_len": window}))
        .collect();
    json!({"object": "list", "data": data})
}
