//! Envoy's external processor through the real server, spoken as Envoy
//! speaks it: a stream per HTTP request, in both body modes. What reaches
//! the upstream is what the answers say: the fitted body (its messages the
//! client's bytes), its `content-length`, the count headers and the
//! dynamic metadata; or an immediate response in the provider's shape.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::common::TestServer;
use context_assembler::gateway::ext_proc::header_map;
use context_assembler::gateway::pb::ext_proc::external_processor_client::ExternalProcessorClient;
use context_assembler::gateway::pb::ext_proc::{
    BodyMutation, HttpBody, HttpHeaders, HttpTrailers, ProcessingRequest, ProcessingResponse,
    ProtocolConfiguration, body_mutation, processing_request, processing_response,
};
use context_assembler::gateway::pb::mode::processing_mode::BodySendMode;

/// What the upstream would receive (or the client, for an immediate
/// response), rebuilt from the processor's answers.
#[derive(Debug, Default)]
struct Seen {
    /// Headers set, in order.
    headers: Vec<(String, String)>,
    /// The body sent on: replaced, streamed back, or `None` (the
    /// original, untouched).
    body: Option<Vec<u8>>,
    /// An immediate response: status and body.
    immediate: Option<(i32, Vec<u8>)>,
    /// The dynamic metadata's `context_assembler` namespace.
    metadata: Option<prost_types::Struct>,
    /// Answers, by kind, in order.
    kinds: Vec<&'static str>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The tokens the source headers say were counted exactly, by the
    /// provider and estimated.
    fn sources(&self) -> (u32, u32, u32) {
        let n = |k| {
            self.header(k)
                .unwrap_or_else(|| panic!("{k} in {:?}", self.headers))
                .parse()
                .unwrap()
        };
        (
            n("x-context-assembler-tokens-exact"),
            n("x-context-assembler-tokens-provider"),
            n("x-context-assembler-tokens-estimated"),
        )
    }

    /// A number of the dynamic metadata's namespace.
    fn number(&self, key: &str) -> f64 {
        let ns = self.metadata.as_ref().unwrap().fields["context_assembler"].clone();
        let Some(prost_types::value::Kind::StructValue(ns)) = ns.kind else {
            panic!("{ns:?}")
        };
        match ns.fields[key].kind {
            Some(prost_types::value::Kind::NumberValue(n)) => n,
            ref other => panic!("{key}: {other:?}"),
        }
    }

    /// The input tokens header.
    fn input_tokens(&self) -> u32 {
        self.header("x-context-assembler-input-tokens")
            .unwrap()
            .parse()
            .unwrap()
    }

    fn body_or<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        self.body.as_deref().unwrap_or(original)
    }

    fn take(&mut self, answer: ProcessingResponse) {
        use processing_response::Response as R;
        if let Some(m) = answer.dynamic_metadata {
            self.metadata = Some(m);
        }
        let common = match answer.response {
            Some(R::RequestHeaders(h)) => {
                self.kinds.push("headers");
                h.response
            }
            Some(R::RequestBody(b)) => {
                self.kinds.push("body");
                b.response
            }
            Some(R::RequestTrailers(_)) => {
                self.kinds.push("trailers");
                None
            }
            Some(R::ImmediateResponse(i)) => {
                self.kinds.push("immediate");
                self.immediate = Some((i.status.map_or(0, |s| s.code), i.body.to_vec()));
                None
            }
            _ => {
                self.kinds.push("other");
                None
            }
        };
        let Some(c) = common else { return };
        for h in c.header_mutation.map(|m| m.set_headers).unwrap_or_default() {
            let h = h.header.unwrap();
            let value = if h.raw_value.is_empty() {
                h.value
            } else {
                String::from_utf8(h.raw_value.to_vec()).unwrap()
            };
            self.headers.push((h.key, value));
        }
        match c.body_mutation.and_then(|m: BodyMutation| m.mutation) {
            Some(body_mutation::Mutation::Body(b)) => self.body = Some(b.to_vec()),
            Some(body_mutation::Mutation::StreamedResponse(s)) => {
                self.body.get_or_insert_with(Vec::new).extend_from_slice(&s.body);
            }
            _ => {}
        }
    }
}

fn headers_message(path: &str, extra: &[(&str, &str)], mode: BodySendMode) -> ProcessingRequest {
    let mut pairs = vec![
        (":method", "POST"),
        (":path", path),
        ("content-type", "application/json"),
    ];
    pairs.extend_from_slice(extra);
    ProcessingRequest {
        request: Some(processing_request::Request::RequestHeaders(HttpHeaders {
            headers: Some(header_map(&pairs)),
            end_of_stream: false,
        })),
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: mode as i32,
            ..ProtocolConfiguration::default()
        }),
        ..ProcessingRequest::default()
    }
}

fn body_message(chunk: &[u8], end: bool) -> ProcessingRequest {
    ProcessingRequest {
        request: Some(processing_request::Request::RequestBody(HttpBody {
            body: Bytes::copy_from_slice(chunk),
            end_of_stream: end,
        })),
        ..ProcessingRequest::default()
    }
}

/// The next answer, within 30 s.
async fn next(answers: &mut tonic::Streaming<ProcessingResponse>) -> Option<ProcessingResponse> {
    tokio::time::timeout(Duration::from_secs(30), answers.message())
        .await
        .expect("an answer within 30 s")
        .expect("the stream stays up")
}

/// One HTTP request through the processor as Envoy sends it in `mode`:
/// buffered waits for each answer before the next message; full duplex
/// sends the body in `chunks` pieces (and trailers when asked), then reads
/// every answer.
async fn process(
    server: &TestServer,
    mode: BodySendMode,
    path: &str,
    extra: &[(&str, &str)],
    body: &[u8],
    chunks: usize,
    trailers: bool,
) -> Seen {
    let mut client = ExternalProcessorClient::new(server.channel.clone());
    let (tx, rx) = mpsc::channel(64);
    let mut answers = client
        .process(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Seen::default();
    tx.send(headers_message(path, extra, mode)).await.unwrap();
    if mode == BodySendMode::Buffered {
        seen.take(next(&mut answers).await.unwrap());
        tx.send(body_message(body, true)).await.unwrap();
        seen.take(next(&mut answers).await.unwrap());
        drop(tx);
        return seen;
    }
    let size = body.len().div_ceil(chunks.max(1)).max(1);
    let pieces: Vec<&[u8]> = body.chunks(size).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let end = i + 1 == pieces.len() && !trailers;
        tx.send(body_message(piece, end)).await.unwrap();
    }
    if trailers {
        tx.send(ProcessingRequest {
            request: Some(processing_request::Request::RequestTrailers(
                HttpTrailers::default(),
            )),
            ..ProcessingRequest::default()
        })
        .await
        .unwrap();
    }
    // Every answer arrives; a refusal is one immediate response.
    loop {
        let Some(answer) = next(&mut answers).await else {
            break;
        };
        let immediate = matches!(
            answer.response,
            Some(processing_response::Response::ImmediateResponse(_))
        );
        let done = match &answer.response {
            Some(processing_response::Response::RequestBody(b)) => b
                .response
                .as_ref()
                .and_then(|c| c.body_mutation.as_ref())
                .is_some_and(|m| {
                    matches!(&m.mutation, Some(body_mutation::Mutation::StreamedResponse(s)) if s.end_of_stream)
                }),
            Some(processing_response::Response::RequestTrailers(_)) => true,
            _ => false,
        };
        seen.take(answer);
        if immediate || done {
            break;
        }
    }
    drop(tx);
    seen
}

/// A chat of `turns` exchanges behind a system prompt, written with its own
/// spacing and key order (so byte-identity means something).
fn chat_body(turns: usize, extra: &str) -> String {
    let mut messages =
        vec![r#"{"content": "You are the support assistant. Answer briefly.", "role": "system"}"#.to_owned()];
    for t in 0..turns {
        messages.push(format!(
            r#"{{"role":"user",  "content":"Question {t}: how do refunds work for order number {t} placed last week, and what happens when the card expired?"}}"#
        ));
        messages.push(format!(
            r#"{{"content":"Answer {t}: refunds go back to the card within five days; an expired card is refunded by the bank to the same account, which can take up to ten days.","role":"assistant"}}"#
        ));
    }
    messages.push(
        r#"{"role":"user","content":"And the newest question, kept whole: \u00e9t\u00e9?"}"#.to_owned(),
    );
    format!(
        r#"{{"model":"gpt-4o", "temperature": 0.25,"messages":[{}] ,"stream":false{extra}}}"#,
        messages.join(", ")
    )
}

fn messages_of(body: &[u8]) -> Vec<Value> {
    let v: Value = serde_json::from_slice(body).unwrap();
    v["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_over_budget_chat_is_fitted_in_both_modes_keeping_the_clients_bytes() {
    let server = TestServer::start().await;
    let body = chat_body(30, "");
    for (mode, chunks, trailers) in [
        (BodySendMode::Buffered, 1, false),
        (BodySendMode::FullDuplexStreamed, 7, false),
        (BodySendMode::FullDuplexStreamed, 3, true),
    ] {
        let seen = process(
            &server,
            mode,
            "/v1/chat/completions",
            &[("x-context-budget", "1200")],
            body.as_bytes(),
            chunks,
            trailers,
        )
        .await;
        assert!(seen.immediate.is_none(), "{mode:?}: {seen:?}");
        let sent = seen.body.clone().expect("a fitted body");
        assert_eq!(
            seen.header("content-length"),
            Some(sent.len().to_string().as_str()),
            "{mode:?}"
        );
        let tokens: u32 = seen
            .header("x-context-assembler-input-tokens")
            .unwrap()
            .parse()
            .unwrap();
        assert!(tokens <= 1200 && tokens > 200, "{mode:?}: {tokens}");
        assert_eq!(seen.header("x-context-assembler-exact"), Some("true"));
        // OpenAI's public tokenizer: every token counted exactly.
        assert_eq!(seen.sources(), (tokens, 0, 0), "{mode:?}");
        let text = String::from_utf8(sent.clone()).unwrap();
        // Other fields as the client wrote them; the cache key added.
        assert!(
            text.starts_with(r#"{"model":"gpt-4o", "temperature": 0.25,"messages":["#),
            "{text}"
        );
        assert!(
            text.contains(r#"] ,"stream":false,"prompt_cache_key":""#),
            "{text}"
        );
        let sent_messages = messages_of(&sent);
        let original = messages_of(body.as_bytes());
        assert!(sent_messages.len() < original.len());
        assert_eq!(sent_messages.first(), original.first());
        assert_eq!(sent_messages.last(), original.last());
        // Every message but an inserted summary is the client's, byte for byte.
        for m in &sent_messages {
            let raw = m.to_string();
            let summary = m["content"].as_str().is_some_and(|c| c.starts_with("<summary"));
            assert!(summary || original.contains(m), "{mode:?}: {raw}");
        }
        assert!(
            text.contains(
                r#"{"role":"user","content":"And the newest question, kept whole: \u00e9t\u00e9?"}"#
            )
        );
        assert_eq!(seen.number("input_tokens"), f64::from(tokens));
        assert!(seen.number("turns_cut") > 0.0);
        assert_eq!(
            ["tokens_exact", "tokens_provider", "tokens_estimated"].map(|k| seen.number(k)),
            [f64::from(tokens), 0.0, 0.0]
        );
        if mode == BodySendMode::FullDuplexStreamed {
            // Headers first, then the body, then the trailers' answer.
            assert_eq!(seen.kinds.first(), Some(&"headers"), "{:?}", seen.kinds);
            if trailers {
                assert_eq!(seen.kinds.last(), Some(&"trailers"), "{:?}", seen.kinds);
            }
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_chat_that_fits_goes_on_as_the_client_sent_it() {
    let server = TestServer::start().await;
    let body = chat_body(2, r#","prompt_cache_key":"mine""#);
    for mode in [BodySendMode::Buffered, BodySendMode::FullDuplexStreamed] {
        let seen = process(
            &server,
            mode,
            "/v1/chat/completions",
            &[],
            body.as_bytes(),
            2,
            false,
        )
        .await;
        assert!(seen.immediate.is_none());
        assert_eq!(seen.body_or(body.as_bytes()), body.as_bytes(), "{mode:?}");
        assert!(seen.header("x-context-assembler-input-tokens").is_some());
        assert_eq!(
            seen.header("content-length"),
            None,
            "{mode:?}: unchanged, its length stands"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn what_cannot_fit_is_refused_in_the_providers_shape() {
    let server = TestServer::start().await;
    let big = "word ".repeat(3000);
    let openai = json!({"model": "gpt-4o", "messages": [{"role": "system", "content": big}, {"role": "user", "content": "hi"}]});
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": big, "messages": [{"role": "user", "content": "hi"}]});
    for mode in [BodySendMode::Buffered, BodySendMode::FullDuplexStreamed] {
        let seen = process(
            &server,
            mode,
            "/v1/chat/completions",
            &[("x-context-budget", "1000")],
            openai.to_string().as_bytes(),
            1,
            false,
        )
        .await;
        let (status, body) = seen.immediate.clone().expect("refused");
        assert_eq!(status, 400);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "messages");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("the system prompt")
        );
        let seen = process(
            &server,
            mode,
            "/v1/messages",
            &[("x-context-budget", "1000")],
            anthropic.to_string().as_bytes(),
            1,
            false,
        )
        .await;
        let (status, body) = seen.immediate.clone().expect("refused");
        assert_eq!(status, 400);
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    server.stop().await;
}

#[tokio::test]
async fn other_paths_bad_bodies_and_unknown_models_pass_untouched() {
    let server = TestServer::start().await;
    let cases: [(&str, &[u8]); 4] = [
        ("/v1/embeddings", br#"{"model":"gpt-4o","input":"x"}"#),
        ("/v1/chat/completions", b"{not json"),
        (
            "/v1/chat/completions",
            br#"{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}"#,
        ),
        (
            "/v1/messages",
            br#"{"model":"claude-sonnet-4-5","messages":[{"role":"narrator","content":"x"}]}"#,
        ),
    ];
    for mode in [BodySendMode::Buffered, BodySendMode::FullDuplexStreamed] {
        for (path, body) in cases {
            let seen = process(&server, mode, path, &[], body, 2, false).await;
            assert!(seen.immediate.is_none(), "{path}");
            assert_eq!(seen.body_or(body), body, "{mode:?} {path}");
            assert!(seen.header("x-context-assembler-input-tokens").is_none());
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let mut args = TestServer::args();
    args.max_request_bytes = Some(64 * 1024);
    let server = TestServer::start_with(args).await;
    let body = chat_body(400, "");
    assert!(body.len() > 64 * 1024);
    let seen = process(
        &server,
        BodySendMode::FullDuplexStreamed,
        "/v1/chat/completions",
        &[],
        body.as_bytes(),
        8,
        false,
    )
    .await;
    let (status, body) = seen.immediate.expect("refused");
    assert_eq!(status, 413);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    server.stop().await;
}

/// One HTTP/1.1 POST: status, headers (lower-case names) and body.
async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..at]).into_owned();
    let status = head[9..12].parse().unwrap();
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, out[at + 4..].to_vec())
}

#[tokio::test]
async fn the_http_fit_answers_what_the_processor_would_send() {
    let args = context_assembler::config::ServeArgs {
        render_listen: Some("127.0.0.1:0".to_owned()),
        ..TestServer::args()
    };
    let server = TestServer::start_with(args).await;
    let addr = server.render.unwrap();
    let body = chat_body(30, "");
    let budget = [("x-context-budget", "1200")];
    let (status, headers, sent) = post(addr, "/v1/fit/chat/completions", &budget, body.as_bytes()).await;
    assert_eq!(status, 200);
    let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let tokens: u32 = header("x-context-assembler-input-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(tokens <= 1200);
    let sources = [
        "x-context-assembler-tokens-exact",
        "x-context-assembler-tokens-provider",
        "x-context-assembler-tokens-estimated",
    ]
    .map(|k| header(k).unwrap().parse::<u32>().unwrap());
    assert_eq!(sources, [tokens, 0, 0]);
    // The same bytes the processor sends upstream.
    let seen = process(
        &server,
        BodySendMode::Buffered,
        "/v1/chat/completions",
        &budget,
        body.as_bytes(),
        1,
        false,
    )
    .await;
    assert_eq!(seen.body.as_deref(), Some(sent.as_slice()));
    assert_eq!(
        seen.header("x-context-assembler-input-tokens"),
        Some(tokens.to_string().as_str())
    );
    assert_eq!(seen.sources(), (tokens, 0, 0));
    // Passed on as it came, saying why.
    let bad = br#"{"model":"no-such-model","messages":[]}"#;
    let (status, headers, sent) = post(addr, "/v1/fit/chat/completions", &[], bad).await;
    assert_eq!(status, 200);
    assert_eq!(sent, bad);
    assert!(headers.contains(&(
        "x-context-assembler-passed".to_owned(),
        "unknown_model".to_owned()
    )));
    // Refused in the provider's shape.
    let big = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "system": "word ".repeat(3000), "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, sent) = post(
        addr,
        "/v1/fit/messages",
        &[("x-context-budget", "500")],
        big.to_string().as_bytes(),
    )
    .await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let (status, _, _) = post(addr, "/v1/fit/embeddings", &[], b"{}").await;
    assert_eq!(status, 404);
    server.stop().await;
}

#[tokio::test]
async fn anthropic_requests_get_the_cache_markers_that_take_effect_within_four() {
    let server = TestServer::start().await;
    let system = "Policy sentence number one of the support desk, stated plainly. ".repeat(200);
    let tools = r#"[{"name":"lookup","description":"Finds an order.","input_schema":{"type":"object","properties":{"id":{"type":"string"}}}}]"#;
    let messages = r#"[{"role":"user","content":"Where is order 7?"}, {"role":"assistant","content":[{"type":"text","text":"Looking."}]}, {"role":"user","content":"Thanks, and order 8?"}]"#;
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":512,"system":{},"tools":{tools},"messages":{messages}}}"#,
        json!(system)
    );
    let seen = process(
        &server,
        BodySendMode::Buffered,
        "/v1/messages",
        &[],
        body.as_bytes(),
        1,
        false,
    )
    .await;
    let sent = String::from_utf8(seen.body.clone().expect("markers added")).unwrap();
    let added = sent.matches(r#""cache_control""#).count();
    assert!((1..=4).contains(&added), "{added}: {sent}");
    assert_eq!(
        seen.header("content-length"),
        Some(sent.len().to_string().as_str())
    );
    let v: Value = serde_json::from_str(&sent).unwrap();
    // The system prompt, now a text block, says the same and is marked.
    assert_eq!(v["system"][0]["text"], json!(system));
    assert!(v["system"][0]["cache_control"].is_object());
    // Nothing else changed but markers.
    let strip = |mut v: Value| {
        fn walk(v: &mut Value) {
            match v {
                Value::Object(m) => {
                    m.remove("cache_control");
                    m.values_mut().for_each(walk);
                }
                Value::Array(a) => a.iter_mut().for_each(walk),
                _ => {}
            }
        }
        walk(&mut v);
        v
    };
    let mut original: Value = serde_json::from_str(&body).unwrap();
    original["system"] = json!([{"type": "text", "text": system}]);
    let mut sent_v = strip(v);
    // A string content wrapped as one text block is the same content.
    for m in sent_v["messages"].as_array_mut().unwrap() {
        if let Some([only]) = m["content"].as_array().map(Vec::as_slice)
            && only["type"] == "text"
            && only.as_object().unwrap().len() == 2
        {
            m["content"] = only["text"].clone();
        }
    }
    let mut original_v = original;
    for m in original_v["messages"].as_array_mut().unwrap() {
        if let Some([only]) = m["content"].as_array().map(Vec::as_slice)
            && only["type"] == "text"
        {
            m["content"] = only["text"].clone();
        }
    }
    assert_eq!(sent_v, original_v);

    // A caller who placed four markers gets none more: the body goes on as sent.
    let marked = r#"{"type":"ephemeral"}"#;
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":512,"system":[{{"type":"text","text":{},"cache_control":{marked}}}],"tools":[{{"name":"a","input_schema":{{}},"cache_control":{marked}}}],"messages":[{{"role":"user","content":[{{"type":"text","text":"a","cache_control":{marked}}}]}},{{"role":"assistant","content":[{{"type":"text","text":"b","cache_control":{marked}}}]}},{{"role":"user","content":"c"}}]}}"#,
        json!(system)
    );
    let seen = process(
        &server,
        BodySendMode::Buffered,
        "/v1/messages",
        &[],
        body.as_bytes(),
        1,
        false,
    )
    .await;
    assert_eq!(seen.body_or(body.as_bytes()), body.as_bytes());
    server.stop().await;
}

#[tokio::test]
async fn the_configuration_may_refuse_what_would_pass() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sidecar.toml");
    std::fs::write(
        &config,
        "[memory]\nrecall_timeout_ms = 10000\n[gateway]\nrefuse_malformed = true\nrefuse_unknown_model = true\n",
    )
    .unwrap();
    let args = context_assembler::config::ServeArgs {
        config: Some(config),
        ..TestServer::args()
    };
    let server = TestServer::start_with(args).await;
    let cases: [(&[u8], &str); 2] = [
        (b"{not json", "invalid_request"),
        (
            br#"{"model":"no-such-model","messages":[{"role":"user","content":"x"}]}"#,
            "model_not_found",
        ),
    ];
    for (body, code) in cases {
        let seen = process(
            &server,
            BodySendMode::Buffered,
            "/v1/chat/completions",
            &[],
            body,
            1,
            false,
        )
        .await;
        let (status, out) = seen.immediate.expect("refused");
        assert_eq!(status, 400);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["code"], code);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_stalled_or_disordered_stream_disturbs_no_other_and_passes_its_request_on() {
    let mut args = TestServer::args();
    args.default_timeout_ms = Some(1500);
    let server = TestServer::start_with(args).await;
    let mut client = ExternalProcessorClient::new(server.channel.clone());

    // A stream that sends its headers and half a body, then stalls.
    let (stall_tx, stall_rx) = mpsc::channel(4);
    let mut stalled = client
        .process(ReceiverStream::new(stall_rx))
        .await
        .unwrap()
        .into_inner();
    stall_tx
        .send(headers_message(
            "/v1/chat/completions",
            &[],
            BodySendMode::FullDuplexStreamed,
        ))
        .await
        .unwrap();
    stall_tx.send(body_message(b"{\"model\":", false)).await.unwrap();

    // Meanwhile another request is fitted as usual.
    let body = chat_body(30, "");
    let seen = process(
        &server,
        BodySendMode::Buffered,
        "/v1/chat/completions",
        &[("x-context-budget", "1200")],
        body.as_bytes(),
        1,
        false,
    )
    .await;
    assert!(seen.body.is_some());

    // Past its deadline, the stalled stream passes on what it gathered, as
    // it came (Envoy holds nothing of a full-duplex body)...
    let wait = Duration::from_secs(20);
    let mut seen = Seen::default();
    for _ in 0..2 {
        let a = tokio::time::timeout(wait, stalled.message())
            .await
            .expect("answered by its deadline");
        seen.take(a.unwrap().expect("an answer"));
    }
    assert_eq!(seen.kinds, ["headers", "body"]);
    assert_eq!(seen.body.as_deref(), Some(&b"{\"model\":"[..]));
    assert!(seen.headers.is_empty());
    // ...and the rest as it comes.
    stall_tx.send(body_message(b"1}", true)).await.unwrap();
    let a = tokio::time::timeout(wait, stalled.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    seen.take(a);
    assert_eq!(seen.body.as_deref(), Some(&b"{\"model\":1}"[..]));
    // Then it ends, once idle again.
    let end = tokio::time::timeout(wait, stalled.message())
        .await
        .expect("ended");
    assert!(matches!(end, Ok(None)), "{end:?}");
    drop(stall_tx);

    // Out of order: a body before any headers, then a second body: each is
    // answered as a pass-through, and the stream stays usable.
    let (tx, rx) = mpsc::channel(4);
    let mut answers = client
        .process(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(body_message(b"{}", true)).await.unwrap();
    let a = next(&mut answers).await.unwrap();
    assert!(
        matches!(a.response, Some(processing_response::Response::RequestBody(_))),
        "{a:?}"
    );
    tx.send(body_message(b"[]", true)).await.unwrap();
    let a = next(&mut answers).await.unwrap();
    assert!(
        matches!(a.response, Some(processing_response::Response::RequestBody(_))),
        "{a:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_buffered_body_over_the_listeners_bound_is_413_not_a_failure() {
    let mut args = TestServer::args();
    args.max_request_bytes = Some(64 * 1024);
    let server = TestServer::start_with(args).await;
    let body = chat_body(2000, "");
    assert!(body.len() > 64 * 1024 + 64 * 1024);
    let mut client = ExternalProcessorClient::new(server.channel.clone());
    let (tx, rx) = mpsc::channel(4);
    let mut answers = client
        .process(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(headers_message(
        "/v1/chat/completions",
        &[],
        BodySendMode::Buffered,
    ))
    .await
    .unwrap();
    let mut seen = Seen::default();
    seen.take(next(&mut answers).await.unwrap());
    tx.send(body_message(body.as_bytes(), true)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), answers.message())
        .await
        .unwrap()
        .expect("answered, not failed")
        .expect("an answer");
    seen.take(answer);
    let (status, out) = seen.immediate.expect("refused");
    assert_eq!(status, 413);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["error"]["code"], "request_too_large");
    server.stop().await;
}

/// A Claude conversation that fits (Anthropic's Messages).
fn claude_body() -> String {
    json!({
        "model": "claude-sonnet-5",
        "max_tokens": 512,
        "system": "You answer questions about the harbour's tide tables, briefly and with sources.",
        "messages": [
            {"role": "user", "content": "When is high water on Tuesday?"},
            {"role": "assistant", "content": "High water on Tuesday is at 06:42 and again at 19:05, 4.1 metres."},
            {"role": "user", "content": "Is Saturday morning safe for a boat drawing 1.2 metres?"},
        ],
    })
    .to_string()
}

#[tokio::test]
async fn a_claude_request_says_its_tokens_turn_from_estimated_to_the_providers() {
    let standin = crate::sources::standin::StandIn::start().await;
    let args = context_assembler::config::ServeArgs {
        render_listen: Some("127.0.0.1:0".to_owned()),
        ..TestServer::args()
    };
    let (_dir, server) = crate::sources::counting_server(&standin, args).await;
    let body = claude_body();
    let fit = || {
        process(
            &server,
            BodySendMode::Buffered,
            "/v1/messages",
            &[],
            body.as_bytes(),
            1,
            false,
        )
    };
    let first = fit().await;
    let (exact, provider, estimated) = first.sources();
    assert_eq!(first.header("x-context-assembler-exact"), Some("false"));
    assert!(estimated > 0 && exact == 0, "{:?}", first.headers);
    assert_eq!(exact + provider + estimated, first.input_tokens());
    assert_eq!(first.number("tokens_estimated"), f64::from(estimated));

    // Counted in the background: the same request, asked again, is all
    // the provider's, and says so in its headers and metadata.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = first;
    while seen.header("x-context-assembler-exact") != Some("true") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = fit().await;
    }
    let tokens = seen.input_tokens();
    assert_eq!(
        seen.header("x-context-assembler-exact"),
        Some("true"),
        "{:?}",
        seen.headers
    );
    assert_eq!(seen.sources(), (0, tokens, 0));
    assert_eq!(
        [
            "input_tokens",
            "tokens_exact",
            "tokens_provider",
            "tokens_estimated"
        ]
        .map(|k| seen.number(k)),
        [f64::from(tokens), 0.0, f64::from(tokens), 0.0]
    );
    // The HTTP fit answers the same figures.
    let (status, headers, _) = post(server.render.unwrap(), "/v1/fit/messages", &[], body.as_bytes()).await;
    assert_eq!(status, 200);
    let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(header("x-context-assembler-exact"), Some("true"));
    assert_eq!(
        header("x-context-assembler-tokens-provider"),
        Some(tokens.to_string().as_str())
    );
    assert_eq!(header("x-context-assembler-tokens-estimated"), Some("0"));
    server.stop().await;
}
