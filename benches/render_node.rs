//! What the render node's HTTP/1.1 listener adds to rendering, side by side
//! in one run (issue 35: at most 100 µs). The same chat render body (a
//! system prompt and alternating turns, about 1k, 8k and 32k tokens with
//! Qwen 3's and Llama 3.1's folders) is answered two ways:
//!
//! - `in_process`: the node's own answer function (`render::http::respond`:
//!   parse, render the template, the ids, the answer's JSON);
//! - `http`: POSTed over one keep-alive connection to a real server on
//!   127.0.0.1:0, the answer read whole (a blocking client on this thread,
//!   the server on its own runtime).
//!
//! Criterion times each way in turn; then the two are alternated call by
//! call and the medians printed (`render_node paired ...`), the listener's
//! share being the median of each pair's difference. A third way joins the
//! alternation as the transport's floor: a bare hyper HTTP/1.1 server on the
//! same runtime that reads the same body and answers bytes of the same
//! length, rendering nothing (`floor`: what any HTTP listener on this
//! machine costs for those bytes, a loopback round trip included).
//!
//! Folders from `CONTEXT_ASSEMBLER_HF_VOCAB` or `target/hf-vocab` (fetched by
//! `.ci/hf_vocab.sh`); a family without its folder is skipped.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use context_assembler::assemble::{Assembler, DEFAULT_CACHE_BYTES};
use context_assembler::config::ServeArgs;
use context_assembler::render::Renderer;
use context_assembler::render::http::respond;
use context_assembler::server::Bound;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const FAMILIES: [&str; 2] = ["qwen3", "llama3_1"];
const SIZES: [usize; 3] = [1_000, 8_000, 32_000];
const CHAT: &str = "RenderChat";
const PARAGRAPH: &str = "The sidecar measures every part of the prompt with the model's own tokenizer, \
    reserves what may never be cut, and fills the rest of the budget by priority. ";

/// A chat render body for `family` with `turns` turns after the system
/// prompt (the last a user's).
fn body(family: &str, turns: usize) -> Vec<u8> {
    let mut messages = vec![serde_json::json!({
        "role": "system",
        "content": "You are a careful assistant. ".repeat(20),
    })];
    for i in 0..turns {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages
            .push(serde_json::json!({"role": role, "content": format!("Turn {i}. {}", PARAGRAPH.repeat(6))}));
    }
    serde_json::to_vec(&serde_json::json!({"model": family, "messages": messages})).unwrap()
}

/// The ids an answer holds.
fn ids(answer: &str) -> usize {
    let v: serde_json::Value = serde_json::from_str(answer).unwrap();
    v["token_ids"].as_array().unwrap().len()
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// POSTs `body` to the chat render route and returns the answer's body.
    fn chat(&mut self, body: &[u8]) -> Vec<u8> {
        let head = format!(
            "POST /v1/chat/completions/render HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).unwrap();
        self.stream.write_all(body).unwrap();
        let mut chunk = [0u8; 64 * 1024];
        let end = loop {
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        while self.buf.len() < end + len {
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let answer = self.buf[end..end + len].to_vec();
        self.buf.drain(..end + len);
        answer
    }
}

fn render_node(c: &mut Criterion) {
    let root = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/hf-vocab"));
    let families: Vec<&str> = FAMILIES
        .into_iter()
        .filter(|f| {
            let there = root.join(f).join("tokenizer.json").exists();
            if !there {
                eprintln!("render_node: no {} (run .ci/hf_vocab.sh)", root.join(f).display());
            }
            there
        })
        .collect();
    if families.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("render.toml");
    let mut toml = String::new();
    for f in &families {
        toml.push_str(&format!(
            "[[models]]\nname = \"{f}\"\ntokenizer_dir = {:?}\ncontext_window = 131072\noutput_reserve = 1024\n\n",
            root.join(f).display().to_string()
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let args = ServeArgs {
        config: Some(config),
        listen: Some("127.0.0.1:0".to_owned()),
        metrics_listen: Some("off".to_owned()),
        render_listen: Some("127.0.0.1:0".to_owned()),
        memory_sqlite_path: Some(dir.path().join("memory.db")),
        ..ServeArgs::default()
    };
    let serve = args.validate().unwrap();
    let renderer = Renderer::new(std::sync::Arc::new(Assembler::new(
        serve.catalog.clone(),
        DEFAULT_CACHE_BYTES,
    )));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let bound = runtime.block_on(Bound::bind(serve)).unwrap();
    let addr = bound.render_addr().unwrap();
    let floor = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let floor_addr = floor.local_addr().unwrap();
    let floor_answer = std::sync::Arc::new(std::sync::Mutex::new(bytes::Bytes::new()));
    runtime.spawn(bare_hyper(floor, floor_answer.clone()));
    let server = runtime.spawn(async move {
        bound
            .serve(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    // A fresh connection where one is needed: the node closes one idle for
    // 5 s, as vLLM's server does.
    let connect_to = |addr| {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    };
    let connect = || connect_to(addr);

    let mut g = c.benchmark_group("render_node");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    for family in families {
        for size in SIZES {
            // The fewest turns that reach the size.
            let (body, tokens) = (1..)
                .map(|turns| {
                    let b = body(family, turns);
                    let n = ids(&respond(&renderer, CHAT, &b).unwrap());
                    (b, n)
                })
                .find(|(_, n)| *n >= size)
                .unwrap();
            let answer = respond(&renderer, CHAT, &body).unwrap();
            let over_http = connect().chat(&body);
            // The same ids both ways (the request ids differ).
            assert_eq!(ids(&answer), ids(std::str::from_utf8(&over_http).unwrap()));
            g.throughput(Throughput::Elements(tokens as u64));
            let id = format!("{family}/{tokens}");
            g.bench_function(BenchmarkId::new("in_process", &id), |b| {
                b.iter(|| respond(&renderer, CHAT, &body).unwrap().len())
            });
            let mut client = connect();
            g.bench_function(BenchmarkId::new("http", &id), |b| {
                b.iter(|| client.chat(&body).len())
            });
            // A measurement, not a check: not under `--test` (CI's smoke run).
            if !std::env::args().any(|a| a == "--test") {
                *floor_answer.lock().unwrap() = bytes::Bytes::from(answer.clone().into_bytes());
                let mut floor = connect_to(floor_addr);
                assert_eq!(floor.chat(&body), answer.as_bytes());
                paired(&id, &renderer, &mut client, &mut floor, &body);
            }
        }
    }
    g.finish();
    let _ = stop.send(());
    runtime.block_on(server).unwrap();
}

/// The three ways alternated call by call (so all see the same machine),
/// `PAIRS` times: the medians, the median of each difference between HTTP
/// and in process (the listener's share), and of that share less the
/// floor's round trip (what this listener adds over a bare one), printed.
fn paired(id: &str, renderer: &Renderer, client: &mut Client, floor: &mut Client, body: &[u8]) {
    const PAIRS: usize = 300;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let micros = |f: &mut dyn FnMut()| {
        let t = std::time::Instant::now();
        f();
        t.elapsed().as_secs_f64() * 1e6
    };
    let (mut local, mut remote, mut bare, mut added, mut over_bare) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..PAIRS {
        let l = micros(&mut || {
            std::hint::black_box(respond(renderer, CHAT, body).unwrap());
        });
        let r = micros(&mut || {
            std::hint::black_box(client.chat(body));
        });
        let f = micros(&mut || {
            std::hint::black_box(floor.chat(body));
        });
        local.push(l);
        remote.push(r);
        bare.push(f);
        added.push(r - l);
        over_bare.push(r - l - f);
    }
    eprintln!(
        "render_node paired {id}: in_process {:.1} µs, http {:.1} µs, floor {:.1} µs, http - in_process {:.1} µs, \
         http - in_process - floor {:.1} µs (medians of {PAIRS})",
        median(&mut local),
        median(&mut remote),
        median(&mut bare),
        median(&mut added),
        median(&mut over_bare)
    );
}

/// The floor: a bare hyper HTTP/1.1 server (keep-alive, no timeout, no
/// routing, no admission) that reads each request's body whole and answers
/// `answer`'s bytes as JSON.
async fn bare_hyper(
    listener: tokio::net::TcpListener,
    answer: std::sync::Arc<std::sync::Mutex<bytes::Bytes>>,
) {
    use http_body_util::BodyExt as _;
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let answer = answer.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let answer = answer.clone();
                async move {
                    let got = req.into_body().collect().await?.to_bytes();
                    std::hint::black_box(got.len());
                    let bytes = answer.lock().unwrap().clone();
                    let mut response = hyper::Response::new(http_body_util::Full::new(bytes));
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, hyper::Error>(response)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

criterion_group!(benches, render_node);
criterion_main!(benches);
