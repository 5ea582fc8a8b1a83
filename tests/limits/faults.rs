//! Client faults through the real server (in-process, small limits):
//! cancellations at every stage of a call, deadlines that expire mid-work,
//! readers that do not read, connection churn, and a burst far over the
//! concurrency limit. Afterwards nothing is left behind: no work slot, no
//! upload budget, no connection, socket or task.

use std::time::{Duration, Instant};

use crate::common::{self, RawClient, TestServer, frame, heavy_request, reason};
use context_assembler::config::ServeArgs;
use context_assembler::grpc::pb;
use context_assembler::workload::{Rng, prose};
use prost::Message as _;
use tonic::Code;
use tonic_types::StatusExt;

const IN_FLIGHT: &str = "assembler_in_flight_requests";
const OPEN_CONNECTIONS: &str = "assembler_open_connections";
const REFUSED: &str = "assembler_requests_refused_total";

/// Tasks alive on the server's runtime and on the test's (its clients).
fn alive_tasks(server: &TestServer) -> usize {
    server.alive_tasks() + tokio::runtime::Handle::current().metrics().num_alive_tasks()
}

/// This process's TCP sockets to or from `port` (the server's listener,
/// its connections, and the clients' ends of them), described. Other
/// descriptors are left out: tests waiting for their turn open runtimes
/// (epoll, eventfd, a signal socket) in this process meanwhile.
fn sockets_of(port: u16) -> Vec<String> {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default()
        + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let port = format!(":{port:04X}");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let target = std::fs::read_link(entry.path()).ok()?.display().to_string();
            let inode = target.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned();
            let line = tcp
                .lines()
                .find(|l| l.split_whitespace().nth(9) == Some(&inode))?;
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields[1].ends_with(&port) || fields[2].ends_with(&port)).then(|| {
                format!(
                    "fd {:?}: {} -> {} state {}",
                    entry.file_name(),
                    fields[1],
                    fields[2],
                    fields[3]
                )
            })
        })
        .collect()
}

/// Polls `value` until `done` holds (20 s at most); returns the last value.
async fn settle<T: std::fmt::Debug, F: std::future::Future<Output = T>>(
    what: &str,
    mut value: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = value().await;
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: still {v:?} after 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn no_work_in_flight(server: &TestServer) {
    settle(
        "in-flight requests",
        || server.metric(IN_FLIGHT, &[]),
        |v| *v == 0.0,
    )
    .await;
}

/// Waits until the runtime's tasks and the sockets of the server's port are
/// back to (at most a little over) what they were.
async fn nothing_left_behind(server: &TestServer, tasks_before: usize, sockets_before: usize) {
    let tasks = settle(
        "alive tasks",
        || async { alive_tasks(server) },
        |n| *n <= tasks_before + 2,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sockets = sockets_of(server.addr.port());
        if sockets.len() <= sockets_before {
            eprintln!(
                "tasks {tasks_before} -> {tasks}, sockets {sockets_before} -> {}",
                sockets.len()
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sockets_before} sockets of the server's port before, now {sockets:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A conversation of `turns` user/assistant exchanges of about `bytes` each.
fn conversation(seed: u64, turns: usize, bytes: usize) -> pb::CompactRequest {
    use pb::content_block::Block;
    let mut rng = Rng::new(seed);
    pb::CompactRequest {
        request_id: format!("conv-{seed}"),
        model: "gpt-4o".to_owned(),
        session_id: format!("session-{seed}"),
        messages: (0..turns * 2)
            .map(|i| pb::ConversationMessage {
                id: format!("m{i}"),
                role: [pb::Role::User, pb::Role::Assistant][i % 2].into(),
                content: vec![pb::ContentBlock {
                    block: Some(Block::Text(prose(&mut rng, bytes))),
                }],
            })
            .collect(),
        trigger_tokens: Some(100),
        target_tokens: Some(100_000),
        ..Default::default()
    }
}

fn count(seed: u64, bytes: usize) -> pb::CountTokensRequest {
    pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model("gpt-4o".to_owned())),
        text: prose(&mut Rng::new(seed), bytes).into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_calls_leak_no_slot_upload_budget_connection_or_task() {
    const LIMIT: u64 = 4;
    const MAX_BYTES: u64 = 1 << 20;
    let server = TestServer::start_with(ServeArgs {
        max_concurrency: Some(LIMIT),
        max_request_bytes: Some(MAX_BYTES),
        ..TestServer::args()
    })
    .await;
    let connections = server.metric(OPEN_CONNECTIONS, &[]).await;
    let (tasks_before, sockets_before) = (alive_tasks(&server), sockets_of(server.addr.port()).len());

    let mut cancelled = 0;
    // Calls of every admitted kind, abandoned 0 to 30 ms in: during the
    // upload, while being worked on, while the answer is sent.
    for round in 0..10u64 {
        let calls: Vec<_> = (0..8u64)
            .map(|k| {
                let mut client = server.client();
                let seed = round * 100 + k;
                tokio::spawn(async move {
                    match k % 4 {
                        0 => client.assemble(heavy_request(seed, 300, 2000)).await.map(drop),
                        1 => client.compact(conversation(seed, 150, 2000)).await.map(drop),
                        2 => {
                            let requests = (0..3).map(|j| heavy_request(seed * 10 + j, 100, 2000)).collect();
                            client
                                .assemble_batch(pb::AssembleBatchRequest { requests })
                                .await
                                .map(drop)
                        }
                        _ => client.count_tokens(count(seed, 600_000)).await.map(drop),
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(round * 3)).await;
        for call in &calls {
            call.abort();
        }
        for call in calls {
            // Cancelled, or an answer that came first: either is fine.
            if call.await.is_err_and(|e| e.is_cancelled()) {
                cancelled += 1;
            }
        }
    }
    assert!(
        cancelled >= 10,
        "only {cancelled} of 80 calls were cancelled: the test proves little"
    );
    // Streams dropped after their first answer, with requests still queued.
    for seed in 0..4u64 {
        let requests: Vec<_> = (0..20)
            .map(|j| heavy_request(5000 + seed * 100 + j, 50, 2000))
            .collect();
        let mut answers = server.stream(requests).await;
        assert!(answers.message().await.unwrap().is_some());
        drop(answers);
    }
    // Uploads abandoned mid-body: they declared most of a request's bytes.
    for k in 0..8usize {
        let path = ["Assemble", "Compact", "CountTokens", "AssembleBatch"][k % 4];
        let (body, answer) = common::stalled_upload(
            server.addr,
            &format!("/context_assembler.v1.Assembler/{path}"),
            (MAX_BYTES - 100) as u32,
            1024,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        answer.abort();
        drop(body);
    }

    no_work_in_flight(&server).await;
    // Every byte of the upload budget came back: with LIMIT - 1 uploads
    // stalled (each holding max_request_bytes of it, and no slot), one more
    // request of nearly max_request_bytes still fits.
    let mut stalled = Vec::new();
    for _ in 1..LIMIT {
        stalled.push(
            common::stalled_upload(
                server.addr,
                "/context_assembler.v1.Assembler/Assemble",
                (MAX_BYTES - 100) as u32,
                16,
            )
            .await,
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let last = server.client().assemble(heavy_request(8000, 1, 1_000_000)).await;
    assert!(last.is_ok(), "the upload budget leaked: {last:?}");
    for (body, answer) in stalled {
        answer.abort();
        drop(body);
    }
    no_work_in_flight(&server).await;
    // Every work slot came back: LIMIT
    // requests of nearly max_request_bytes each, sent at once, are all
    // admitted (none is shed).
    let shed_before = server
        .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
        .await;
    let full: Vec<_> = (0..LIMIT)
        .map(|k| {
            let mut client = server.client();
            tokio::spawn(async move { client.assemble(heavy_request(9000 + k, 1, 1_000_000)).await })
        })
        .collect();
    for call in full {
        let answer = call.await.unwrap();
        assert!(answer.is_ok(), "a slot or upload budget leaked: {answer:?}");
    }
    let shed = server
        .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
        .await
        - shed_before;
    assert_eq!(shed, 0.0);
    no_work_in_flight(&server).await;
    settle(
        "open connections",
        || server.metric(OPEN_CONNECTIONS, &[]),
        |v| *v == connections,
    )
    .await;
    nothing_left_behind(&server, tasks_before, sockets_before).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_deadlines_answer_deadline_exceeded_or_ok_and_free_their_slots() {
    let server = TestServer::start().await;
    let refused = |rpc: &'static str| {
        let server = &server;
        async move {
            server
                .counter(REFUSED, &[("rpc", rpc), ("reason", "deadline_exceeded")])
                .await
        }
    };
    const RPCS: [&str; 4] = ["Assemble", "Compact", "AssembleBatch", "CountTokens"];
    let mut before = 0.0;
    for rpc in RPCS {
        before += refused(rpc).await;
    }
    // Work that takes far longer than the deadlines; over bare HTTP/2, so
    // the answer is the server's (tonic's client would give up by itself).
    let timeouts = [
        "1n", "1u", "1m", "2m", "3m", "5m", "8m", "13m", "21m", "34m", "50m",
    ];
    let calls: Vec<_> = timeouts
        .iter()
        .enumerate()
        .flat_map(|(t, timeout)| {
            RPCS.iter().map(move |rpc| {
                let seed = t as u64 * 10;
                let body = match *rpc {
                    "Assemble" => heavy_request(seed, 400, 2000).encode_to_vec(),
                    "Compact" => conversation(seed, 200, 2000).encode_to_vec(),
                    "AssembleBatch" => pb::AssembleBatchRequest {
                        requests: (0..4).map(|j| heavy_request(seed + j, 100, 2000)).collect(),
                    }
                    .encode_to_vec(),
                    _ => count(seed, 300_000).encode_to_vec(),
                };
                (*rpc, *timeout, body)
            })
        })
        .collect();
    let mut tasks = Vec::new();
    for (rpc, timeout, body) in calls {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let mut client = RawClient::connect(addr).await;
            let path = format!("/context_assembler.v1.Assembler/{rpc}");
            let answer = client
                .call(&path, frame(&body), &[("grpc-timeout", timeout)])
                .await;
            (rpc, timeout, answer)
        }));
    }
    let mut expired = 0.0;
    let mut finished = 0;
    for task in tasks {
        let (rpc, timeout, answer) = task.await.unwrap();
        match answer.code() {
            Code::DeadlineExceeded => expired += 1.0,
            Code::Ok => finished += 1,
            other => panic!("{rpc} with grpc-timeout {timeout}: {other:?} {answer:?}"),
        }
    }
    eprintln!("{expired} expired, {finished} finished in time");
    assert!(expired > 0.0, "no deadline expired: the test proves nothing");
    // Each expiry is counted once, and the work it cut off stops.
    let mut after = 0.0;
    for rpc in RPCS {
        after += refused(rpc).await;
    }
    assert_eq!(after - before, expired);
    no_work_in_flight(&server).await;
    let mut generous = tonic::Request::new(heavy_request(1, 3, 100));
    generous.set_timeout(Duration::from_secs(30));
    assert!(server.client().assemble(generous).await.is_ok());
    server.stop().await;
}

/// A bare HTTP/2 connection whose stream window is `window` bytes: the
/// server may send no more than that until the reader reads.
async fn tiny_window_call(
    addr: std::net::SocketAddr,
    req: &pb::AssembleRequest,
    window: u32,
) -> http::Response<hyper::body::Incoming> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(window)
        .adaptive_window(false)
        .handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = http::Request::post(format!("http://{addr}/context_assembler.v1.Assembler/Assemble"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::Full::new(bytes::Bytes::from(frame(
            &req.encode_to_vec(),
        ))))
        .unwrap();
    // The response head comes once the work is done; its body waits for
    // the window.
    send.send_request(request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_hold_no_work_slot_and_stall_no_one_else() {
    const LIMIT: u64 = 2;
    let server = TestServer::start_with(ServeArgs {
        max_concurrency: Some(LIMIT),
        ..TestServer::args()
    })
    .await;
    let tasks_before = alive_tasks(&server);

    // More slow readers than work slots, each with about 1 MB of answer
    // behind a 1 KiB window.
    let big: Vec<pb::AssembleRequest> = (0..4).map(|k| heavy_request(100 + k, 50, 20_000)).collect();
    let mut slow = Vec::new();
    for req in &big {
        slow.push(tiny_window_call(server.addr, req, 1024).await);
    }
    // A stream whose answers are never read, with many requests behind them.
    let requests: Vec<_> = (0..60).map(|j| heavy_request(200 + j, 10, 10_000)).collect();
    let unread = server
        .client()
        .assemble_stream(tokio_stream::iter(requests))
        .await
        .unwrap();
    // The stream's work pauses once its answers back up; none of it holds a
    // slot while it waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    no_work_in_flight(&server).await;

    // Everyone else is served, and nobody is shed.
    let shed_before = server
        .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
        .await;
    for seed in 0..20 {
        let answer = tokio::time::timeout(
            Duration::from_secs(30),
            server.client().assemble(heavy_request(300 + seed, 5, 500)),
        )
        .await
        .expect("a request hung behind the slow readers");
        assert!(answer.is_ok(), "{answer:?}");
    }
    let shed = server
        .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
        .await
        - shed_before;
    assert_eq!(shed, 0.0, "slow readers held work slots");

    // The slow readers get their whole answers once they read.
    for (resp, req) in slow.into_iter().zip(&big) {
        use http_body_util::BodyExt;
        let collected = resp.into_body().collect().await.unwrap();
        let status = collected.trailers().and_then(|t| t.get("grpc-status")).cloned();
        assert_eq!(status.as_ref().map(|s| s.as_bytes()), Some(&b"0"[..]));
        let body = collected.to_bytes();
        let answer = pb::AssembleResponse::decode(&body[5..]).unwrap();
        assert_eq!(answer.request_id, req.request_id);
        let usage = answer.usage.unwrap();
        assert!(usage.total_tokens <= usage.budget);
    }
    // Dropping the unread stream ends its work.
    drop(unread);
    no_work_in_flight(&server).await;
    settle(
        "alive tasks",
        || async { alive_tasks(&server) },
        |n| *n <= tasks_before + 2,
    )
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_churn_leaks_no_connection_socket_or_task() {
    let server = TestServer::start().await;
    let connections = server.metric(OPEN_CONNECTIONS, &[]).await;
    let (tasks_before, sockets_before) = (alive_tasks(&server), sockets_of(server.addr.port()).len());
    const CYCLES: usize = 2000;
    const WORKERS: usize = 8;
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let addr = server.addr;
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut ok = 0;
                for k in (w..CYCLES).step_by(WORKERS) {
                    match k % 5 {
                        // Connect, one call, hang up.
                        0 | 1 => {
                            let mut client = RawClient::connect(addr).await;
                            let req = count(k as u64, 20);
                            let path = "/context_assembler.v1.Assembler/CountTokens";
                            let answer = client.call(path, frame(&req.encode_to_vec()), &[]).await;
                            assert_eq!(answer.code(), Code::Ok, "{answer:?}");
                            ok += 1;
                        }
                        // Connect and hang up before saying anything.
                        2 => drop(tokio::net::TcpStream::connect(addr).await.unwrap()),
                        // Half an HTTP/2 preface, then hang up.
                        3 => {
                            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                            let _ = s.write_all(b"PRI * HTTP/2.0\r\n").await;
                        }
                        // A call abandoned before its answer.
                        _ => {
                            let mut client = RawClient::connect(addr).await;
                            let req = heavy_request(k as u64, 20, 1000);
                            let call = client.call(
                                "/context_assembler.v1.Assembler/Assemble",
                                frame(&req.encode_to_vec()),
                                &[],
                            );
                            let _ = tokio::time::timeout(Duration::from_millis(1), call).await;
                        }
                    }
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for w in workers {
        ok += w.await.unwrap();
    }
    eprintln!(
        "{CYCLES} connections ({ok} calls answered) in {:?}",
        started.elapsed()
    );
    settle(
        "open connections",
        || server.metric(OPEN_CONNECTIONS, &[]),
        |v| *v == connections,
    )
    .await;
    no_work_in_flight(&server).await;
    nothing_left_behind(&server, tasks_before, sockets_before).await;
    // Still serving.
    assert!(
        server
            .client()
            .list_models(pb::ListModelsRequest {})
            .await
            .is_ok()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_far_over_the_limit_is_shed_as_overloaded_and_admitted_latency_stays_bounded() {
    // Alone: it times admitted calls against a median timed just before.
    let _turn = common::turn().await;
    const LIMIT: u64 = 4;
    const BURST: u64 = 200;
    let server = TestServer::start_with(ServeArgs {
        max_concurrency: Some(LIMIT),
        ..TestServer::args()
    })
    .await;
    let shape = |seed: u64| heavy_request(seed, 40, 1000);

    // Unloaded: one at a time, cold (distinct content), as in the burst.
    let mut unloaded = Vec::new();
    for seed in 0..9 {
        let t = Instant::now();
        server.client().assemble(shape(seed)).await.unwrap();
        unloaded.push(t.elapsed());
    }
    unloaded.sort();
    let median = unloaded[unloaded.len() / 2];

    let (tasks_before, sockets_before) = (alive_tasks(&server), sockets_of(server.addr.port()).len());
    let shed_before = server
        .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
        .await;
    // Several connections, each with many streams, all released at once.
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(
            tonic::transport::Channel::from_shared(format!("http://{}", server.addr))
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
    }
    let go = std::sync::Arc::new(tokio::sync::Barrier::new(BURST as usize));
    let calls: Vec<_> = (0..BURST)
        .map(|k| {
            let mut client = pb::assembler_client::AssemblerClient::new(channels[k as usize % 4].clone());
            let request = shape(1000 + k);
            let go = go.clone();
            tokio::spawn(async move {
                go.wait().await;
                let t = Instant::now();
                let answer = client.assemble(request).await;
                (answer, t.elapsed())
            })
        })
        .collect();
    let mut admitted = Vec::new();
    let mut shed = 0u32;
    for call in calls {
        let (answer, took) = call.await.unwrap();
        match answer {
            Ok(_) => admitted.push(took),
            Err(s) => {
                assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
                assert_eq!(reason(&s), "OVERLOADED", "{s:?}");
                assert!(s.get_details_retry_info().is_some(), "no RetryInfo: {s:?}");
                shed += 1;
            }
        }
    }
    admitted.sort();
    let (typical, worst) = (admitted[admitted.len() / 2], admitted[admitted.len() - 1]);
    eprintln!(
        "unloaded median {median:?}; burst of {BURST}: {} admitted (median {typical:?}, max {worst:?}), {shed} shed",
        admitted.len()
    );
    assert!(
        shed > 0,
        "a burst of {BURST} over a limit of {LIMIT} shed nothing"
    );
    assert!(!admitted.is_empty(), "the burst admitted nothing");
    assert_eq!(
        server
            .counter(REFUSED, &[("rpc", "Assemble"), ("reason", "concurrency")])
            .await
            - shed_before,
        f64::from(shed)
    );
    // Admitted requests are not slowed by the ones shed around them beyond
    // sharing the CPU with them: generous bounds, for noisy machines.
    let bound = median * 10 + Duration::from_secs(1);
    assert!(typical < bound, "admitted median {typical:?} over {bound:?}");
    assert!(worst < bound * 3, "admitted max {worst:?} over {:?}", bound * 3);

    no_work_in_flight(&server).await;
    drop(channels);
    nothing_left_behind(&server, tasks_before, sockets_before).await;
    // Every slot is free again: LIMIT requests at once are all admitted.
    let again: Vec<_> = (0..LIMIT)
        .map(|k| {
            let mut client = server.client();
            tokio::spawn(async move { client.assemble(shape(5000 + k)).await })
        })
        .collect();
    for call in again {
        assert!(call.await.unwrap().is_ok());
    }
    server.stop().await;
}
