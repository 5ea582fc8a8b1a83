//! `context-assembler preview` as a process: its JSON API over HTTP/1 on
//! 127.0.0.1:0 (the address it prints), its errors, its content-safety rule
//! (a filtered item's content is in no answer), and its listen-address
//! check. The page itself is driven in a browser by
//! `tests/preview/browser_test.py`.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use crate::common::BIN;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/request.json");
/// The content of the item `partner-discounts` of `examples/rag-32k.json`,
/// which its principal may not see.
const RAG_MARKER: &str = "ACME-PARTNER-7731";
/// The content of the item `pricing` of `examples/request.json`, filtered.
const SUPPORT_MARKER: &str = "Internal margin table";

/// A running `preview`, killed on drop.
struct Preview {
    child: Child,
    addr: SocketAddr,
}

impl Preview {
    /// Starts `preview --listen 127.0.0.1:0` with `args` and reads the
    /// address it prints.
    fn start(args: &[&str]) -> Preview {
        let mut child = Command::new(BIN)
            .args(["preview", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("preview listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Preview { child, addr }
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        self.send("GET", path, "application/json", Bytes::new()).await
    }

    /// `POST /api/assemble` of `body`; the answer as JSON and its raw text.
    async fn assemble(&self, body: &Value) -> (StatusCode, Value, String) {
        let (status, text) = self
            .send(
                "POST",
                "/api/assemble",
                "application/json",
                Bytes::from(body.to_string()),
            )
            .await;
        (status, serde_json::from_str(&text).unwrap(), text)
    }

    async fn send(&self, method: &str, path: &str, content_type: &str, body: Bytes) -> (StatusCode, String) {
        self.send_as(&self.addr.to_string(), method, path, content_type, body)
            .await
    }

    /// One request on a fresh connection, under the `Host` header `host`.
    async fn send_as(
        &self,
        host: &str,
        method: &str,
        path: &str,
        content_type: &str,
        body: Bytes,
    ) -> (StatusCode, String) {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", host)
            .header("content-type", content_type)
            .body(Full::new(body))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }
}

impl Drop for Preview {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ids of kept or compacted items over all blocks of an answer.
fn kept(answer: &Value) -> Vec<String> {
    let mut ids = Vec::new();
    for b in answer["view"]["blocks"].as_array().unwrap() {
        for item in b["items"].as_array().unwrap() {
            if matches!(item["outcome"].as_str(), Some("kept" | "compacted" | "generated")) {
                ids.push(format!(
                    "{}/{}",
                    b["name"].as_str().unwrap(),
                    item["id"].as_str().unwrap()
                ));
            }
        }
    }
    ids
}

#[tokio::test]
async fn models_and_examples_are_listed_by_name() {
    let p = Preview::start(&[EXAMPLE]);
    let (status, text) = p.get("/api/models").await;
    assert_eq!(status, StatusCode::OK);
    let models: Value = serde_json::from_str(&text).unwrap();
    let gpt = models["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "gpt-4o")
        .unwrap();
    assert_eq!(gpt["tokenizer"], "o200k_base");
    assert_eq!(
        (gpt["exact"].as_bool(), gpt["chatTemplate"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(gpt["contextWindow"].as_u64().unwrap() > 0);
    assert!(models["policies"].as_array().unwrap().contains(&json!("default")));

    let (status, text) = p.get("/api/examples").await;
    assert_eq!(status, StatusCode::OK);
    let examples: Value = serde_json::from_str(&text).unwrap();
    let sources: Vec<&str> = examples["examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["example:support", "example:rag-32k", "file"]);
    // Names and sizes only: no request content leaves the server here.
    assert!(!text.contains(SUPPORT_MARKER) && !text.contains(RAG_MARKER));
    assert!(!text.contains("Annual plans bought in the EU"));

    let (status, page) = p.get("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<script src=\"/app.js\""));
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page loads nothing from elsewhere"
    );
    let (status, js) = p.get("/app.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!js.contains("http://") && !js.contains("https://"));
}

#[tokio::test]
async fn the_kept_set_follows_the_budget() {
    let p = Preview::start(&[]);
    let call = |budget: u32| json!({"source": "example:rag-32k", "maxInputTokens": budget});
    let (status, full, _) = p.assemble(&call(32_000)).await;
    assert_eq!(status, StatusCode::OK, "{full}");
    let usage = &full["response"]["usage"];
    assert_eq!(usage["budget"], 32_000);
    assert!(usage["totalTokens"].as_u64().unwrap() <= 32_000);
    let (status, small, _) = p.assemble(&call(9_000)).await;
    assert_eq!(status, StatusCode::OK, "{small}");
    assert!(small["response"]["usage"]["totalTokens"].as_u64().unwrap() <= 9_000);
    let (full_ids, small_ids) = (kept(&full), kept(&small));
    assert!(
        small_ids.len() < full_ids.len(),
        "{small_ids:?} against {full_ids:?}"
    );
    assert!(small_ids.iter().all(|id| full_ids.contains(id)));
    // The same budget again, warm: the same answer.
    let (_, again, _) = p.assemble(&call(32_000)).await;
    assert_eq!(kept(&again), full_ids);

    // The bars add up: kept in full + compacted = kept; cut = offered -
    // kept - what clearing tool results saved.
    for b in small["view"]["blocks"].as_array().unwrap() {
        let n = |k: &str| b[k].as_u64().unwrap();
        assert_eq!(n("keptFullTokens") + n("compactedTokens"), n("keptTokens"), "{b}");
        assert_eq!(
            n("cutTokens"),
            n("offeredTokens") - n("keptTokens") - n("clearedTokens"),
            "{b}"
        );
    }
    // The conversation gap is pointed at its block.
    let gap = full["view"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "CHRONOLOGY_GAP")
        .unwrap();
    assert_eq!(gap["blocks"], json!([{"index": 4, "name": "history"}]), "{gap}");

    // The static prefix and its cache marks.
    let view = &full["view"];
    let cache = &full["response"]["cache"];
    assert_eq!(view["staticMessages"], cache["prefixMessageCount"]);
    assert_eq!(cache["prefixHash"].as_str().unwrap().len(), 64);
    let share = view["cacheableShare"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{share}");

    // Overrides: model, output reserve and policy reach the assembler.
    let (status, other, _) = p
        .assemble(&json!({"source": "example:rag-32k", "model": "claude-sonnet-4", "outputReserve": 1000}))
        .await;
    assert_eq!(status, StatusCode::OK, "{other}");
    assert_eq!(other["response"]["model"], "claude-sonnet-4");
    assert!(
        other["response"]["usage"]["tokenizer"]
            .as_str()
            .unwrap()
            .starts_with("estimate(")
    );
    assert_eq!(other["response"]["usage"]["outputReserve"], 1000);
    let (status, unknown, _) = p
        .assemble(&json!({"source": "example:support", "policy": "no-such-policy"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{unknown}");
}

#[tokio::test]
async fn a_filtered_items_content_reaches_no_answer() {
    let p = Preview::start(&[EXAMPLE]);
    let mut bodies = Vec::new();
    for source in ["example:support", "example:rag-32k", "file"] {
        for budget in [None, Some(2_000), Some(100_000)] {
            let mut call = json!({ "source": source });
            if let Some(b) = budget {
                call["maxInputTokens"] = json!(b);
            }
            let (status, answer, text) = p.assemble(&call).await;
            assert!(
                status == StatusCode::OK || status == StatusCode::UNPROCESSABLE_ENTITY,
                "{text}"
            );
            if status == StatusCode::OK {
                let filtered: Vec<&Value> = answer["view"]["blocks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|b| b["items"].as_array().unwrap())
                    .filter(|i| i["outcome"] == "filtered")
                    .collect();
                assert_eq!(filtered.len(), 1, "the filtered item is listed by id: {text}");
            }
            bodies.push(text);
        }
    }
    // A pasted request: the user's own text, but a filtered item's content
    // is still never echoed.
    let marker = "MARKER-5b1e0c7d-filtered";
    let mut request: Value = serde_json::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    request["blocks"][1]["items"][2]["content"] = json!(marker);
    request["blocks"][1]["items"][2]["compactForm"] = json!(marker);
    for call in [
        json!({ "request": request }),
        json!({ "request": request.to_string(), "maxInputTokens": 100_000 }),
    ] {
        let (status, answer, text) = p.assemble(&call).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert!(kept(&answer).contains(&"kb/refunds".to_owned()));
        bodies.push(text);
    }
    for (_, text) in [
        p.get("/api/examples").await,
        p.get("/").await,
        p.get("/app.js").await,
    ] {
        bodies.push(text);
    }
    for body in &bodies {
        for m in [RAG_MARKER, SUPPORT_MARKER, marker] {
            assert!(!body.contains(m), "{m} reached an answer");
        }
    }
}

/// The links of all warnings of an answer to items (`view.warnings[].items`).
fn item_links(answer: &Value) -> Vec<Value> {
    answer["view"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["items"].as_array().unwrap().clone())
        .collect()
}

/// `blocks` HISTORY blocks each holding one tool result of the same id
/// whose call is nowhere: one orphan warning per block.
fn orphans(blocks: usize) -> Value {
    let blocks: Vec<Value> = (0..blocks)
        .map(|b| {
            json!({"name": format!("h{b}"), "kind": "BLOCK_KIND_HISTORY", "items": [
                {"id": "t", "role": "ROLE_TOOL", "toolCallId": "missing", "content": "result"}
            ]})
        })
        .collect();
    json!({"request": {"model": "gpt-4o", "maxInputTokens": 8000, "query": "q", "blocks": blocks}})
}

/// Ids are unique per block only: a warning about one block's item links to
/// that item alone, so the links grow with the warnings (n at n blocks), not
/// with warnings x blocks, and so do the answer's bytes.
#[tokio::test]
async fn same_id_orphans_across_blocks_link_each_to_its_own_block() {
    let p = Preview::start(&[]);
    let mut sizes = Vec::new();
    for n in [4, 32] {
        let (status, answer, text) = p.assemble(&orphans(n)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let links = item_links(&answer);
        assert_eq!(links.len(), n, "{links:?}");
        for (b, link) in links.iter().enumerate() {
            assert_eq!(
                link,
                &json!({"blockIndex": b, "block": format!("h{b}"), "id": "t"})
            );
        }
        sizes.push(text.len());
    }
    assert!(sizes[1] <= 8 * sizes[0] + 1024, "{sizes:?}");
}

/// The rag-32k example (its `history` block has a CHRONOLOGY_GAP at 32k)
/// with `history` renamed to `quotes` double quotes.
fn quoted_history(quotes: usize) -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rag-32k.json")).unwrap();
    let mut request: Value = serde_json::from_str(&text).unwrap();
    let name = if quotes == 0 {
        "history".to_owned()
    } else {
        "\"".repeat(quotes)
    };
    request["blocks"][4]["name"] = json!(name);
    json!({ "request": request })
}

/// A block name of many `"` is pointed at by index; the warning's message
/// quoting it is never parsed, so the answer comes back and its bytes grow
/// linearly with the name (n and 8n quotes).
#[tokio::test]
async fn a_block_name_of_many_quotes_costs_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("preview.toml");
    std::fs::write(&config, "[limits]\nmax_request_bytes = 16777216\n").unwrap();
    let p = Preview::start(&["--config", config.to_str().unwrap()]);
    let mut sizes = Vec::new();
    for quotes in [0, 20_000, 160_000] {
        let (status, answer, text) = p.assemble(&quoted_history(quotes)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let gap = answer["view"]["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["code"] == "CHRONOLOGY_GAP")
            .unwrap();
        assert_eq!(gap["blocks"][0]["index"], 4);
        assert_eq!(gap["blocks"][0]["name"], answer["view"]["blocks"][4]["name"]);
        sizes.push(text.len());
    }
    let (grow_n, grow_8n) = (sizes[1] - sizes[0], sizes[2] - sizes[0]);
    assert!(grow_n > 0 && grow_8n <= 8 * grow_n + 1024, "{sizes:?}");
}

#[tokio::test]
async fn errors_carry_their_code_status_and_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("preview.toml");
    std::fs::write(&config, "[limits]\nmax_request_bytes = 4096\n").unwrap();
    let p = Preview::start(&["--config", config.to_str().unwrap()]);
    let error = |v: &Value| {
        (
            v["error"]["code"].as_str().unwrap().to_owned(),
            v["error"]["details"].clone(),
        )
    };

    // Not JSON: 400, with where.
    let (status, text) = p
        .send(
            "POST",
            "/api/assemble",
            "application/json",
            Bytes::from_static(b"{\"source\": "),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error(&v).0, "INVALID_JSON");
    let (status, v, _) = p
        .assemble(&json!({"request": "{\"model\": \"gpt-4o\",\n \"query\": }"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (code, details) = error(&v);
    assert_eq!(code, "INVALID_JSON");
    assert_eq!(details["line"], 2, "{v}");
    let (status, v, _) = p
        .assemble(&json!({"source": "example:support", "bogus": 3}))
        .await;
    assert_eq!(
        (status, error(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "INVALID_JSON")
    );
    let (status, v, _) = p.assemble(&json!({})).await;
    assert_eq!(
        (status, error(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
    );

    // Non-cuttable content over the budget: 422 with its numbers.
    let (status, v, _) = p
        .assemble(&json!({"source": "example:support", "maxInputTokens": 20}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (code, details) = error(&v);
    assert_eq!(code, "BUDGET_OVERFLOW");
    assert_eq!(details["budget"], 20);
    assert_eq!(details["model"], "gpt-4o");
    assert!(details["nonCuttableTokens"].as_u64().unwrap() > 20, "{v}");

    // Unknown model: 422 naming the field.
    let (status, v, _) = p
        .assemble(&json!({"source": "example:support", "model": "no-such-model"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (code, details) = error(&v);
    assert_eq!(code, "INVALID_ARGUMENT");
    assert_eq!(details["violations"][0]["field"], "model", "{v}");

    // Unknown example, no file: 404.
    for source in ["example:nope", "file"] {
        let (status, v, _) = p.assemble(&json!({ "source": source })).await;
        assert_eq!(
            (status, error(&v).0.as_str()),
            (StatusCode::NOT_FOUND, "UNKNOWN_SOURCE")
        );
    }

    // Over limits.max_request_bytes: 413, declared or not.
    let big = json!({"request": "x".repeat(5000)}).to_string();
    let (status, text) = p
        .send(
            "POST",
            "/api/assemble",
            "application/json",
            Bytes::from(big.clone()),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let v: Value = serde_json::from_str(&text).unwrap();
    let (code, details) = error(&v);
    assert_eq!(code, "REQUEST_TOO_LARGE");
    assert_eq!(details["limit"], 4096);
    assert_eq!(details["value"], big.len());
    let chunked = raw(
        p.addr,
        &format!(
            "POST /api/assemble HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
            p.addr,
            big.len()
        ),
    )
    .await;
    assert!(chunked.starts_with("HTTP/1.1 413"), "{chunked}");
    let (_, body) = chunked.split_once("\r\n\r\n").unwrap();
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        error(&v),
        ("REQUEST_TOO_LARGE".to_owned(), json!({"limit": 4096})),
        "no length declared, no value"
    );

    // Not JSON by type, unknown path, wrong method, a foreign Host.
    let (status, _) = p
        .send("POST", "/api/assemble", "text/plain", Bytes::from_static(b"{}"))
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(p.get("/api/nothing").await.0, StatusCode::NOT_FOUND);
    assert_eq!(p.get("/api/assemble").await.0, StatusCode::METHOD_NOT_ALLOWED);
    let (status, _) = p
        .send_as(
            "attacker.example:8080",
            "GET",
            "/api/examples",
            "application/json",
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a rebound DNS name is refused");
    let (status, _) = p
        .send_as(
            &format!("localhost:{}", p.addr.port()),
            "GET",
            "/api/examples",
            "",
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_connection_that_sends_no_headers_is_closed() {
    let p = Preview::start(&[]);
    let mut stream = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    stream.write_all(b"GET /api/models HTTP/1.1\r\n").await.unwrap();
    let mut out = Vec::new();
    // Closed by the header-read timeout (5 s); the bound here only keeps a
    // broken server from hanging the test.
    let read = tokio::time::timeout(std::time::Duration::from_secs(60), stream.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the connection was held open");
}

/// A POST is admitted before its body is read: a body still arriving holds
/// the only permit (`max_concurrency = 1`), so another POST is OVERLOADED
/// (with its limit, no value); once that client goes away, the permit is
/// free again.
#[tokio::test]
async fn a_body_still_arriving_holds_its_permit() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("preview.toml");
    std::fs::write(&config, "[limits]\nmax_concurrency = 1\n").unwrap();
    let p = Preview::start(&["--config", config.to_str().unwrap()]);
    let call = json!({"source": "example:support"});
    let head = format!(
        "POST /api/assemble HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: 100\r\n\r\n{{",
        p.addr
    );
    // Polled under a generous bound: the verdict does not depend on speed.
    let patience = || std::time::Instant::now() + std::time::Duration::from_secs(60);
    let deadline = patience();
    let mut refused = None;
    let mut slow;
    loop {
        // A slow request whose headers arrive while a probe is assembling
        // is refused itself: then another one.
        slow = tokio::net::TcpStream::connect(p.addr).await.unwrap();
        slow.write_all(head.as_bytes()).await.unwrap();
        let (status, v, _) = p.assemble(&call).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            refused = Some(v);
            break;
        }
        assert_eq!(status, StatusCode::OK, "{v}");
        if std::time::Instant::now() > deadline {
            break;
        }
    }
    let v = refused.expect("never refused while a body was arriving");
    assert_eq!(v["error"]["code"], "OVERLOADED", "{v}");
    assert_eq!(v["error"]["details"], json!({"limit": 1}), "{v}");
    drop(slow);
    let deadline = patience();
    let mut freed = false;
    while std::time::Instant::now() < deadline {
        let (status, v, _) = p.assemble(&call).await;
        if status == StatusCode::OK {
            freed = true;
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        tokio::task::yield_now().await;
    }
    assert!(freed, "the permit stayed taken after its client went away");
}

/// Writes `request` on a fresh connection and reads until it closes.
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // The server may answer and close before the whole body is written.
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_non_loopback_listen_address_needs_allow_remote() {
    let out = Command::new(BIN)
        .args(["preview", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--listen") && stderr.contains("--allow-remote"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing was bound");

    let out = Command::new(BIN)
        .args(["preview", "--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));

    let out = Command::new(BIN)
        .args(["preview", "--listen", "127.0.0.1:0", "/nonexistent/request.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66));

    // With the flag it starts (and is stopped at once).
    let mut child = Command::new(BIN)
        .args(["preview", "--listen", "0.0.0.0:0", "--allow-remote"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("preview listening on http://0.0.0.0:"), "{line}");
}
