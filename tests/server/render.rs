//! The render node through the real server: vLLM's render contract over
//! HTTP/1.1, token ids checked against Hugging Face's own `tokenizers`
//! library on the fixture folder, and every bad request a 4xx with an
//! OpenAI error body that leaves the node serving.

use std::net::SocketAddr;
use std::path::Path;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::common::TestServer;
use crate::common::hf_fixture::{CHATML, write_folder};
use context_assembler::config::ServeArgs;

/// The serve args of a server whose model `open-model` counts with a
/// ChatML fixture folder, and `gpt-4o` with o200k, its render node on
/// loopback.
pub fn chatml_args(dir: &Path) -> ServeArgs {
    write_folder(&dir.join("chatml"), Some(CHATML));
    let config = dir.join("sidecar.toml");
    std::fs::write(
        &config,
        "[memory]\nrecall_timeout_ms = 10000\n\
         [[models]]\nname = \"open-model\"\ntokenizer_dir = \"chatml\"\ncontext_window = 8000\noutput_reserve = 1000\n\
         [[models]]\nname = \"gpt-4o\"\nencoding = \"o200k_base\"\ncontext_window = 128000\noutput_reserve = 1000\n",
    )
    .unwrap();
    ServeArgs {
        config: Some(config),
        render_listen: Some("127.0.0.1:0".to_owned()),
        ..TestServer::args()
    }
}

async fn server(dir: &Path) -> TestServer {
    TestServer::start_with(chatml_args(dir)).await
}

/// One HTTP/1.1 exchange: the status and the body.
async fn call(addr: SocketAddr, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let (status, _, body) = exchange(addr, method, path, content_type, body).await;
    (status, body)
}

/// One HTTP/1.1 exchange: the status, the head's header lines and the body.
async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text[9..12].parse().unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&out[..at]).to_ascii_lowercase();
    (status, head, out[at..].to_vec())
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let (status, out) = call(
        addr,
        "POST",
        path,
        "application/json",
        body.to_string().as_bytes(),
    )
    .await;
    (status, serde_json::from_slice(&out).unwrap())
}

/// The ids Hugging Face's `tokenizers` gives `text` with the fixture's
/// `tokenizer.json`.
fn reference(dir: &Path, text: &str, special: bool) -> Vec<u32> {
    let tok = tokenizers::Tokenizer::from_file(dir.join("chatml/tokenizer.json")).unwrap();
    tok.encode(text, special).unwrap().get_ids().to_vec()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| u32::try_from(x.as_u64().unwrap()).unwrap())
        .collect()
}

#[tokio::test]
async fn a_chat_renders_to_the_ids_of_its_template_text() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let addr = server.render.unwrap();
    let request = json!({
        "model": "open-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]},
        ],
        "stream": false, "temperature": 0.2, "dummy_field": {"ignored": true}, "cache_salt": "tenant-a",
    });
    let (status, answer) = post(addr, "/v1/chat/completions/render", &request).await;
    assert_eq!(status, 200, "{answer}");
    let text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello\nworld<|im_end|>\n<|im_start|>assistant\n";
    let expected = reference(dir.path(), text, false);
    assert_eq!(ids(&answer["token_ids"]), expected);
    assert_eq!(answer["features"], Value::Null);
    assert_eq!(answer["model"], "open-model");
    assert_eq!(answer["cache_salt"], "tenant-a");
    assert!(answer["request_id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(
        answer["sampling_params"]["max_tokens"],
        8000 - expected.len() as u64
    );

    // Without the generation prompt, and continuing the last message.
    let mut open = request.clone();
    open["add_generation_prompt"] = json!(false);
    open["continue_final_message"] = json!(true);
    let (status, answer) = post(addr, "/v1/chat/completions/render", &open).await;
    assert_eq!(status, 200, "{answer}");
    let text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello\nworld";
    assert_eq!(ids(&answer["token_ids"]), reference(dir.path(), text, false));

    // /tokenize of the same conversation counts the same ids.
    let (status, counted) = post(addr, "/tokenize", &request).await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(counted["count"].as_u64().unwrap() as usize, expected.len());
    assert_eq!(ids(&counted["tokens"]), expected);
    assert_eq!(counted["max_model_len"], 8000);
    server.stop().await;
}

// Two workers: a large body renders in place (`block_in_place` needs a
// multi-threaded runtime; on a current-thread one it goes to the pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_render_each_prompt_with_its_special_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let addr = server.render.unwrap();
    // The last prompt makes a body that renders in place (the worker's other
    // tasks handed off), the others one rendered on the connection's thread.
    let long = "the rest of it, hello world. ".repeat(3000);
    let prompts = ["hello world<|im_end|>", "the rest of it", long.as_str()];
    let (status, answer) = post(
        addr,
        "/v1/completions/render",
        &json!({"model": "open-model", "prompt": &prompts[..2]}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, more) = post(
        addr,
        "/v1/completions/render",
        &json!({"model": "open-model", "prompt": prompts[2]}),
    )
    .await;
    assert_eq!(status, 200, "{more}");
    let answers: Vec<&Value> = answer
        .as_array()
        .unwrap()
        .iter()
        .chain(more.as_array().unwrap())
        .collect();
    assert_eq!(answers.len(), 3);
    for (a, p) in answers.iter().zip(prompts) {
        assert_eq!(ids(&a["token_ids"]), reference(dir.path(), p, true));
        assert!(a["request_id"].as_str().unwrap().starts_with("cmpl-"));
    }
    let (status, one) = post(
        addr,
        "/tokenize",
        &json!({"model": "open-model", "prompt": prompts[0], "add_special_tokens": false}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ids(&one["tokens"]), reference(dir.path(), prompts[0], false));
    server.stop().await;
}

#[tokio::test]
async fn bad_requests_are_4xx_error_bodies_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let addr = server.render.unwrap();
    let chat = "/v1/chat/completions/render";
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"model": "nobody", "messages": user}), 404, "model"),
        (json!({"messages": user}), 400, "model"),
        (json!({"model": "open-model"}), 400, "messages"),
        (json!({"model": "gpt-4o", "messages": user}), 400, "model"),
        (
            json!({"model": "open-model", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]}),
            400,
            "messages",
        ),
        (
            json!({"model": "open-model", "messages": user, "continue_final_message": true}),
            400,
            "continue_final_message",
        ),
        (
            json!({"model": "open-model", "messages": user, "tools": []}),
            400,
            "tools",
        ),
        (json!({"model": "open-model", "messages": "hi"}), 400, ""),
    ];
    for (body, status, param) in cases {
        let (got, answer) = post(addr, chat, &body).await;
        assert_eq!(got, status, "{body}: {answer}");
        let error = &answer["error"];
        assert_eq!(error["code"], status, "{answer}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{answer}"
        );
        if !param.is_empty() {
            assert_eq!(error["param"], param, "{body}: {answer}");
        }
    }
    let (status, out) = call(addr, "POST", chat, "application/json", b"{not json").await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&out));
    let (status, _) = call(addr, "POST", chat, "text/plain", b"{}").await;
    assert_eq!(status, 400);
    // A body declared over the limit is refused before a byte of it is read.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {chat} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        1u64 << 31
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = vec![0; 12];
    s.read_exact(&mut out).await.unwrap();
    assert_eq!(&out[9..12], b"413");
    let (status, _) = call(addr, "GET", chat, "application/json", b"").await;
    assert_eq!(status, 405);
    let (status, _) = call(addr, "GET", "/nowhere", "application/json", b"").await;
    assert_eq!(status, 404);

    // Still serving, and saying so.
    let (status, body) = call(addr, "GET", "/health", "application/json", b"").await;
    assert_eq!((status, body.len()), (200, 0));
    let (status, answer) = post(addr, chat, &json!({"model": "open-model", "messages": user})).await;
    assert_eq!(status, 200, "{answer}");
    let (status, out) = call(addr, "GET", "/v1/models", "application/json", b"").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(models["data"][0]["id"], "open-model");
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn every_answer_says_its_tokens_are_its_folders_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let addr = server.render.unwrap();
    let chat = json!({"model": "open-model", "messages": [{"role": "user", "content": "hello world"}]});
    let prompts = json!({"model": "open-model", "prompt": ["hello world", "the rest of it"]});
    let tokenize = json!({"model": "open-model", "prompt": "hello world"});
    for (path, body) in [
        ("/v1/chat/completions/render", &chat),
        ("/v1/completions/render", &prompts),
        ("/tokenize", &tokenize),
    ] {
        let (status, head, out) = exchange(
            addr,
            "POST",
            path,
            "application/json",
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{path}");
        let answer: Value = serde_json::from_slice(&out).unwrap();
        let tokens: usize = match path {
            "/tokenize" => ids(&answer["tokens"]).len(),
            "/v1/completions/render" => answer
                .as_array()
                .unwrap()
                .iter()
                .map(|a| ids(&a["token_ids"]).len())
                .sum(),
            _ => ids(&answer["token_ids"]).len(),
        };
        assert!(tokens > 0);
        for (name, value) in [
            ("x-context-assembler-tokens-exact", tokens),
            ("x-context-assembler-tokens-provider", 0),
            ("x-context-assembler-tokens-estimated", 0),
        ] {
            assert!(
                head.contains(&format!("\r\n{name}: {value}\r\n")),
                "{path}: {head}"
            );
        }
    }
    // A refusal counts nothing.
    let (status, head, _) = exchange(addr, "POST", "/tokenize", "application/json", b"{}").await;
    assert_eq!(status, 400);
    assert!(!head.contains("x-context-assembler-tokens"), "{head}");
    server.stop().await;
}
