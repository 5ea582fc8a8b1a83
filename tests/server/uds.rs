//! gRPC and the render node on Unix domain sockets, through the real server:
//! calls and health over a tonic channel dialling the path, the render
//! contract over HTTP/1.1 on a `UnixStream`, the drain (a render request in
//! flight is answered, the socket files are gone when the server stops), a
//! stale socket replaced at start, and a live socket or a regular file
//! refused and left as it was.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::common::uds::{self, http1_answer, http1_call, http1_head};
use crate::common::{TestServer, heavy_request};
use crate::render::chatml_args;
use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb;
use context_assembler::server::{Bound, ServeError};

/// The serve args of a server whose gRPC and render node listen on
/// `dir/grpc.sock` and `dir/render.sock`, with a ChatML model folder
/// (`open-model`) and `gpt-4o`.
fn args(dir: &Path) -> ServeArgs {
    ServeArgs {
        listen: Some(unix(&dir.join("grpc.sock"))),
        render_listen: Some(unix(&dir.join("render.sock"))),
        // The servers bound without the helper leave no memory file behind.
        memory_store: Some("off".to_owned()),
        ..chatml_args(dir)
    }
}

fn unix(path: &Path) -> String {
    format!("unix:{}", path.display())
}

/// Waits (bounded) until `path` is gone; whether it went.
async fn gone(path: &Path) -> bool {
    let by = Instant::now() + Duration::from_secs(10);
    while path.exists() && Instant::now() < by {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !path.exists()
}

#[tokio::test]
async fn grpc_and_render_answer_on_unix_sockets_and_their_files_go_with_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(args(dir.path())).await;
    let grpc = server.socket.clone().expect("gRPC on a socket");
    let render = server.render_socket.clone().expect("render node on a socket");
    assert_eq!(grpc, dir.path().join("grpc.sock"));
    for path in [&grpc, &render] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660, "{}", path.display());
    }

    // A channel of its own, beside the one the server helper opened.
    let channel = uds::channel(&grpc).await.unwrap();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);
    let mut client = pb::assembler_client::AssemblerClient::new(channel);
    let models = client
        .list_models(pb::ListModelsRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = models.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["gpt-4o", "open-model"]);
    let count = client
        .count_tokens(pb::CountTokensRequest {
            tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned())),
            text: "hello world".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(count.tokens, 2);
    let assembled = client
        .assemble(heavy_request(1, 8, 400))
        .await
        .unwrap()
        .into_inner();
    assert!(assembled.usage.unwrap().total_tokens > 0);

    let (status, body) = http1_call(UnixStream::connect(&render).await.unwrap(), "GET", "/health", b"").await;
    assert_eq!((status, body.len()), (200, 0));
    let request = json!({"model": "open-model", "prompt": "hello world"}).to_string();
    let (status, body) = http1_call(
        UnixStream::connect(&render).await.unwrap(),
        "POST",
        "/tokenize",
        request.as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let tok = tokenizers::Tokenizer::from_file(dir.path().join("chatml/tokenizer.json")).unwrap();
    let expected = tok.encode("hello world", true).unwrap().get_ids().to_vec();
    assert_eq!(answer["tokens"], json!(expected));
    assert_eq!(answer["count"], json!(expected.len()));

    server.stop().await;
    assert!(!grpc.exists(), "the gRPC socket file is removed on shutdown");
    assert!(!render.exists(), "the render socket file is removed on shutdown");
}

/// The drain on a socket: once shutdown starts the files are gone (no new
/// client can connect), and a render request already reading its body is
/// still answered before the server stops.
#[tokio::test]
async fn the_drain_removes_the_socket_files_and_answers_a_render_request_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(args(dir.path())).await;
    let (grpc, render) = (
        server.socket.clone().unwrap(),
        server.render_socket.clone().unwrap(),
    );
    let body = json!({"model": "open-model", "prompt": "still answered"}).to_string();
    let (first, rest) = body.as_bytes().split_at(10);
    let mut held = UnixStream::connect(&render).await.unwrap();
    held.write_all(&http1_head("POST", "/tokenize", body.len()))
        .await
        .unwrap();
    held.write_all(first).await.unwrap();
    held.flush().await.unwrap();
    // The head is read and the request admitted before shutdown starts: a
    // second request on another connection has been answered since.
    let (status, _) = http1_call(UnixStream::connect(&render).await.unwrap(), "GET", "/health", b"").await;
    assert_eq!(status, 200);

    let stopping = tokio::spawn(server.stop());
    assert!(
        gone(&grpc).await,
        "the gRPC socket file is removed when the drain starts"
    );
    assert!(
        gone(&render).await,
        "the render socket file is removed when the drain starts"
    );
    assert!(UnixStream::connect(&render).await.is_err());
    assert!(
        !stopping.is_finished(),
        "the drain waits for the request in flight"
    );

    held.write_all(rest).await.unwrap();
    let (status, answer) = http1_answer(held).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert!(answer["count"].as_u64().unwrap() > 0);
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("the server stops once the request is answered")
        .unwrap();
}

/// A socket left by a crashed run (nothing listens on it) is replaced; a
/// socket a live server holds, and a regular file, are refused with the
/// reason and left as they are.
#[tokio::test]
async fn a_stale_socket_is_replaced_and_a_live_socket_or_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let grpc = dir.path().join("grpc.sock");
    // A std listener leaves its file behind when dropped, as a crash does.
    drop(std::os::unix::net::UnixListener::bind(&grpc).unwrap());
    assert!(grpc.exists());
    let server = TestServer::start_with(args(dir.path())).await;
    let mut client = pb::assembler_client::AssemblerClient::new(uds::channel(&grpc).await.unwrap());
    client.list_models(pb::ListModelsRequest {}).await.unwrap();

    // A second server on the same paths is refused: the first still answers.
    let second = Bound::bind(args(dir.path()).validate().unwrap()).await;
    assert_refused(second, "another process is listening");
    client.list_models(pb::ListModelsRequest {}).await.unwrap();
    server.stop().await;

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"precious").unwrap();
    for (grpc, render) in [
        (file.clone(), dir.path().join("r.sock")),
        (dir.path().join("g.sock"), file.clone()),
    ] {
        let refused = Bound::bind(
            ServeArgs {
                listen: Some(unix(&grpc)),
                render_listen: Some(unix(&render)),
                ..args(dir.path())
            }
            .validate()
            .unwrap(),
        )
        .await;
        assert_refused(refused, "is a regular file: refusing to replace it");
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    }
    // The gRPC socket bound before the render node was refused is removed.
    assert!(!dir.path().join("g.sock").exists());
}

fn assert_refused(bound: Result<Bound, ServeError>, why: &str) {
    match bound {
        Ok(_) => panic!("bound; expected a refusal: {why}"),
        Err(e) => assert!(e.to_string().contains(why), "{e}"),
    }
}
