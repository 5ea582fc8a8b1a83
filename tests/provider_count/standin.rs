//! A stand-in for the providers' counting endpoints: an HTTP/1.1 server on
//! 127.0.0.1:0 answering Anthropic's `POST /v1/messages/count_tokens` and
//! Gemini's `POST /v1beta/models/{model}:countTokens` with a deterministic
//! tokenizer whose ratio depends on the content:
//!
//! - each maximal run of ASCII letters or of ASCII digits costs
//!   `ceil(len / 3)`, each maximal run of ASCII punctuation `ceil(len / 2)`;
//!   every other character that is not white space (a CJK character, an
//!   umlaut) costs 1. Against cl100k that is about 1.5x on English prose,
//!   1.3x on code and JSON and 1.0x on Chinese: in the published range of
//!   Claude's 2026 tokenizer (and of the estimate's prior for it, within
//!   its default error);
//! - a request costs [`ONE_MESSAGE`], plus [`FURTHER_MESSAGE`] for each
//!   message after the first, plus [`SYSTEM`] with a system prompt, plus
//!   [`tools_cost`] with a tool set, plus the tokens of every text.
//!
//! It checks what a provider checks (the key in its header, Anthropic's
//! version header, roles that alternate from the user's, Gemini's wrapped
//! model matching its path), answers 401 or 400 otherwise, records every
//! request (arrival time, path, headers, body), tracks how many it is
//! answering at once, and can be switched to slow, down (connections
//! refused and open ones cut), failing (500), refusing (400), oversized (a
//! count padded past 64 KiB) or throttling (429 with `retry-after`, a number
//! of times). Later tests may use it as is.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The frame of a one-message request.
pub const ONE_MESSAGE: u32 = 7;
/// The frame of each further message.
pub const FURTHER_MESSAGE: u32 = 4;
/// The frame of a system prompt.
pub const SYSTEM: u32 = 5;
/// The key [`StandIn::start`] expects.
pub const KEY: &str = "sk-standin-0123456789";

/// How the stand-in answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Counts.
    Normal,
    /// Counts after sleeping this long.
    Slow(Duration),
    /// Refuses connections and cuts open ones.
    Down,
    /// 500.
    Failing,
    /// 400.
    Refusing,
    /// A count padded past 64 KiB.
    Oversized,
    /// 429 (with `retry-after: N` when `Some(N)`) for the next `times`
    /// requests, then counts again.
    Throttling {
        /// The `retry-after` seconds, if sent.
        retry_after: Option<u32>,
        /// How many requests.
        times: u32,
    },
}

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When it arrived.
    pub at: Instant,
    /// Its path.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

impl Recorded {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

struct Shared {
    key: String,
    mode: Mutex<Mode>,
    requests: Mutex<Vec<Recorded>>,
    answering: AtomicUsize,
    most_answering: AtomicUsize,
    down: watch::Sender<bool>,
}

/// The running stand-in; it stops when dropped.
pub struct StandIn {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    /// A stand-in expecting [`KEY`].
    pub async fn start() -> StandIn {
        StandIn::start_with_key(KEY).await
    }

    /// A stand-in expecting `key`.
    pub async fn start_with_key(key: &str) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            key: key.to_owned(),
            mode: Mutex::new(Mode::Normal),
            requests: Mutex::new(Vec::new()),
            answering: AtomicUsize::new(0),
            most_answering: AtomicUsize::new(0),
            down: watch::Sender::new(false),
        });
        let task = tokio::spawn(serve(listener, addr, shared.clone()));
        StandIn { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Anthropic's counting URL here.
    pub fn anthropic_url(&self) -> String {
        format!("{}/v1/messages/count_tokens", self.url())
    }

    /// Gemini's counting URL here, with its `{model}` placeholder.
    pub fn gemini_url(&self) -> String {
        format!("{}/v1beta/models/{{model}}:countTokens", self.url())
    }

    /// Switches how it answers.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.down.send_replace(mode == Mode::Down);
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The most requests it was answering at once.
    pub fn most_answering(&self) -> usize {
        self.shared.most_answering.load(Ordering::SeqCst)
    }

    /// What it counts for one request of `messages` (alternating user and
    /// assistant), without a system prompt or tools.
    pub fn count_of(messages: &[&str]) -> u32 {
        StandIn::count_with(None, None, messages)
    }

    /// What it counts for a request with an optional system prompt and tool
    /// set (a JSON array).
    pub fn count_with(system: Option<&str>, tools: Option<&str>, messages: &[&str]) -> u32 {
        let further = FURTHER_MESSAGE * (messages.len() as u32).saturating_sub(1);
        let texts: u32 = messages.iter().map(|m| text_tokens(m)).sum();
        let system = system.map_or(0, |s| SYSTEM + text_tokens(s));
        let tools = tools.map_or(0, |t| tools_cost(&serde_json::from_str(t).unwrap()));
        ONE_MESSAGE + further + texts + system + tools
    }
}

/// The tokens of `text`.
pub fn text_tokens(text: &str) -> u32 {
    /// What a character continues: a run of letters, digits or
    /// punctuation, or nothing.
    fn run_of(c: char) -> Option<(u8, u32)> {
        match c {
            c if c.is_ascii_alphabetic() => Some((0, 3)),
            c if c.is_ascii_digit() => Some((1, 3)),
            c if c.is_ascii_punctuation() => Some((2, 2)),
            _ => None,
        }
    }
    let mut tokens: u32 = 0;
    // The run going on (its kind and characters per token) and its length.
    let mut run: Option<(u8, u32)> = None;
    let mut len: u32 = 0;
    for c in text.chars().chain([' ']) {
        let kind = run_of(c);
        if kind.is_some() && kind == run {
            len += 1;
            continue;
        }
        if let Some((_, per_token)) = run {
            tokens += len.div_ceil(per_token);
        }
        (run, len) = (kind, 1);
        if kind.is_none() && !c.is_whitespace() {
            tokens += 1;
        }
    }
    tokens
}

/// What a tool set costs: a quarter of its compact JSON's length, rounded
/// up, plus 10.
pub fn tools_cost(tools: &Value) -> u32 {
    (serde_json::to_string(tools).unwrap().len() as u32).div_ceil(4) + 10
}

async fn serve(mut listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut down = shared.down.subscribe();
    loop {
        if *down.borrow_and_update() {
            drop(listener);
            while *down.borrow_and_update() {
                if down.changed().await.is_err() {
                    return;
                }
            }
            listener = TcpListener::bind(addr).await.unwrap();
            continue;
        }
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                tokio::spawn(connection(stream, shared.clone()));
            }
            _ = down.changed() => {}
        }
    }
}

async fn connection(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let mut down = shared.down.subscribe();
    let service = {
        let shared = shared.clone();
        service_fn(move |request| answer(shared.clone(), request))
    };
    let serving = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = serving => {}
        _ = down.wait_for(|d| *d) => {}
    }
}

/// Counts one in while it answers.
struct Answering<'a>(&'a Shared);

impl<'a> Answering<'a> {
    fn enter(shared: &'a Shared) -> Answering<'a> {
        let now = shared.answering.fetch_add(1, Ordering::SeqCst) + 1;
        shared.most_answering.fetch_max(now, Ordering::SeqCst);
        Answering(shared)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.answering.fetch_sub(1, Ordering::SeqCst);
    }
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
}

/// The mode for this request (a throttling mode counts down).
fn mode_now(shared: &Shared) -> Mode {
    let mut mode = shared.mode.lock().unwrap();
    let now = mode.clone();
    if let Mode::Throttling { retry_after, times } = now {
        *mode = if times <= 1 {
            Mode::Normal
        } else {
            Mode::Throttling {
                retry_after,
                times: times - 1,
            }
        };
    }
    now
}

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    let _answering = Answering::enter(&shared);
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let path = parts.uri.path().to_owned();
    shared.requests.lock().unwrap().push(Recorded {
        at,
        path: path.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    });
    let response = match mode_now(&shared) {
        Mode::Normal | Mode::Down => count(&shared, &path, &parts.headers, &body),
        Mode::Slow(pause) => {
            tokio::time::sleep(pause).await;
            count(&shared, &path, &parts.headers, &body)
        }
        Mode::Failing => reply(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": "down"})),
        Mode::Refusing => reply(StatusCode::BAD_REQUEST, json!({"error": "refused"})),
        Mode::Oversized => reply(
            StatusCode::OK,
            json!({"input_tokens": 1, "pad": "x".repeat(70_000)}),
        ),
        Mode::Throttling { retry_after, .. } => {
            let mut r = reply(StatusCode::TOO_MANY_REQUESTS, json!({"error": "slow down"}));
            if let Some(s) = retry_after {
                r.headers_mut().insert("retry-after", s.into());
            }
            r
        }
    };
    Ok(response)
}

fn bad(why: &str) -> Response<Full<Bytes>> {
    reply(StatusCode::BAD_REQUEST, json!({"error": why}))
}

fn count(shared: &Shared, path: &str, headers: &HeaderMap, body: &[u8]) -> Response<Full<Bytes>> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header("content-type") != Some("application/json") {
        return bad("content-type");
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return bad("not JSON");
    };
    if path == "/v1/messages/count_tokens" {
        if header("x-api-key") != Some(&shared.key) {
            return reply(StatusCode::UNAUTHORIZED, json!({"error": "key"}));
        }
        if header("anthropic-version") != Some("2023-06-01") {
            return bad("anthropic-version");
        }
        return match anthropic(&body) {
            Ok(n) => reply(StatusCode::OK, json!({"input_tokens": n})),
            Err(why) => bad(why),
        };
    }
    let model = path
        .strip_prefix("/v1beta/models/")
        .and_then(|p| p.strip_suffix(":countTokens"));
    let Some(model) = model else {
        return reply(StatusCode::NOT_FOUND, json!({"error": "path"}));
    };
    if header("x-goog-api-key") != Some(&shared.key) {
        return reply(StatusCode::UNAUTHORIZED, json!({"error": "key"}));
    }
    match gemini(model, &body) {
        Ok(n) => reply(StatusCode::OK, json!({"totalTokens": n})),
        Err(why) => bad(why),
    }
}

/// The texts of messages whose roles alternate from the user's.
fn alternating<'a>(
    messages: &'a Value,
    assistant: &str,
    text: impl Fn(&'a Value) -> Option<&'a str>,
) -> Result<Vec<&'a str>, &'static str> {
    let messages = messages.as_array().ok_or("messages")?;
    if messages.is_empty() {
        return Err("no messages");
    }
    let mut texts = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let want = if i.is_multiple_of(2) { "user" } else { assistant };
        if m["role"].as_str() != Some(want) {
            return Err("roles");
        }
        texts.push(text(m).ok_or("text")?);
    }
    Ok(texts)
}

fn anthropic(body: &Value) -> Result<u32, &'static str> {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err("model");
    }
    let texts = alternating(&body["messages"], "assistant", |m| m["content"].as_str())?;
    let system = match &body["system"] {
        Value::Null => None,
        s => Some(s.as_str().ok_or("system")?),
    };
    let tools = match &body["tools"] {
        Value::Null => 0,
        t if t.is_array() => tools_cost(t),
        _ => return Err("tools"),
    };
    Ok(StandIn::count_with(system, None, &texts) + tools)
}

/// The text of a Gemini content's one part.
fn text(content: &Value) -> Option<&str> {
    content["parts"][0]["text"].as_str()
}

fn gemini(model: &str, body: &Value) -> Result<u32, &'static str> {
    let Some(wrapped) = body.get("generateContentRequest") else {
        let texts = alternating(&body["contents"], "model", text)?;
        return Ok(StandIn::count_of(&texts));
    };
    if wrapped["model"].as_str() != Some(&format!("models/{model}")) {
        return Err("wrapped model");
    }
    let texts = alternating(&wrapped["contents"], "model", text)?;
    let system = match &wrapped["systemInstruction"] {
        Value::Null => None,
        s => Some(text(s).ok_or("systemInstruction")?),
    };
    let tools = match &wrapped["tools"] {
        Value::Null => 0,
        t => {
            let declarations = &t[0]["functionDeclarations"];
            if !declarations.is_array() {
                return Err("functionDeclarations");
            }
            tools_cost(declarations)
        }
    };
    Ok(StandIn::count_with(system, None, &texts) + tools)
}
