//! Bounded memory for every request shape, and admission and drain for every
//! RPC, through the real binary (a child process, so its peak resident set
//! is its own).
//!
//! A message of empty sub-messages is tiny on the wire and huge decoded
//! (prost builds a whole struct for each); these tests send such messages
//! at the size limit and hold the process's peak resident set (`VmHWM`,
//! reset through `/proc/PID/clear_refs` before each shape) to a constant
//! times the message's size. The figures they print are the peak-memory
//! table of docs/benchmarks/history.md section 7:
//!
//! ```sh
//! cargo test --release --test limits bounds::peak -- --nocapture
//! ```

use std::time::{Duration, Instant};

use crate::common::wire::{empties, empty_items, field};
use crate::common::{
    self, ChildServer, RawAnswer, RawClient, frame, heavy_request, proc_status, reason, stalled_upload,
};
use context_assembler::grpc::pb;
use prost::Message as _;
use tonic::Code;
use tonic_types::StatusExt;

/// The server's default `limits.max_request_bytes`.
const MAX_REQUEST_BYTES: usize = 4 << 20;
/// The most a request may grow the peak resident set, per byte of its
/// message. Measured (release, this test's table): 1.5 for the refused
/// shapes (the upload, buffered), 3.0 for an ordinary 4 MiB Assemble, 4.2
/// for an ordinary 4 MiB batch; decoding alone is held to 16 per byte plus
/// the item allowance by the gate.
const PEAK_BYTES_PER_WIRE_BYTE: u64 = 8;
/// Peak growth every request may have whatever its size (allocator arenas,
/// HTTP/2 buffers).
const PEAK_ALLOWANCE_BYTES: u64 = 16 << 20;

/// How much the peak resident set grew over `baseline`, in bytes.
fn peak_growth(server: &ChildServer, baseline_kib: u64) -> u64 {
    proc_status(server.child.id(), "VmHWM").saturating_sub(baseline_kib) * 1024
}

/// Resets the peak resident set to the current one and returns it (KiB).
fn reset_peak(server: &ChildServer) -> u64 {
    std::fs::write(format!("/proc/{}/clear_refs", server.child.id()), "5").unwrap();
    proc_status(server.child.id(), "VmRSS")
}

fn answer_status(answer: &RawAnswer) -> tonic::Status {
    answer.status.clone().expect("a grpc-status")
}

/// One shape: where it goes, its message, and the answer it must get.
struct Shape {
    name: &'static str,
    path: &'static str,
    message: Vec<u8>,
    code: Code,
    reason: &'static str,
}

const SVC: &str = "/context_assembler.v1.Assembler/";

fn shapes() -> Vec<Shape> {
    let path = |m: &str| -> &'static str { Box::leak(format!("{SVC}{m}").into_boxed_str()) };
    let near = MAX_REQUEST_BYTES - 64;
    // 256 requests of as many empty items as fit: each within the item
    // limit, the whole far over what its size may decode to.
    let per = near / 2 / 256 - 8;
    let mut batch_of_items = Vec::new();
    for _ in 0..256 {
        field(1, &empty_items(per), &mut batch_of_items);
    }
    let mut stream_message = Vec::new();
    stream_message.extend(empty_items(near / 2 - 8));
    vec![
        Shape {
            name: "AssembleBatch of 2M empty requests",
            path: path("AssembleBatch"),
            message: empties(1, near / 2),
            code: Code::ResourceExhausted,
            reason: "TOO_MANY_REQUESTS",
        },
        Shape {
            name: "Assemble of 2M empty items",
            path: path("Assemble"),
            message: empty_items(near / 2 - 8),
            code: Code::ResourceExhausted,
            reason: "TOO_MANY_ITEMS",
        },
        Shape {
            name: "AssembleBatch of 256 x 8k empty items",
            path: path("AssembleBatch"),
            message: batch_of_items,
            code: Code::ResourceExhausted,
            reason: "REQUEST_TOO_COMPLEX",
        },
        Shape {
            name: "AssembleStream message of 2M empty items",
            path: path("AssembleStream"),
            message: stream_message,
            code: Code::ResourceExhausted,
            reason: "REQUEST_TOO_COMPLEX",
        },
        Shape {
            name: "Compact of 2M empty messages",
            path: path("Compact"),
            message: empties(4, near / 2),
            code: Code::ResourceExhausted,
            reason: "REQUEST_TOO_COMPLEX",
        },
        Shape {
            name: "Retain of 2M empty observations",
            path: path("Retain"),
            message: empties(7, near / 2),
            code: Code::ResourceExhausted,
            reason: "REQUEST_TOO_COMPLEX",
        },
        Shape {
            name: "Forget of 2M empty ids",
            path: path("Forget"),
            message: empties(1, near / 2),
            code: Code::ResourceExhausted,
            reason: "REQUEST_TOO_COMPLEX",
        },
        Shape {
            name: "ordinary Assemble of 4 MiB of prose",
            path: path("Assemble"),
            message: heavy_request(5, 400, near / 400 - 128).encode_to_vec(),
            code: Code::Ok,
            reason: "",
        },
        Shape {
            name: "ordinary AssembleBatch of 16 x 256 KiB",
            path: path("AssembleBatch"),
            message: pb::AssembleBatchRequest {
                requests: (0..16)
                    .map(|s| heavy_request(50 + s, 64, near / 16 / 64 - 128))
                    .collect(),
            }
            .encode_to_vec(),
            code: Code::Ok,
            reason: "",
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_follows_the_wire_size_for_every_shape() {
    let _turn = common::turn().await;
    let warm = heavy_request(1, 10, 1000).encode_to_vec();
    eprintln!("| shape | wire MiB | answer | peak growth MiB | bytes per wire byte |");
    eprintln!("|---|---|---|---|---|");
    for shape in shapes() {
        assert!(
            shape.message.len() <= MAX_REQUEST_BYTES,
            "{}: {}",
            shape.name,
            shape.message.len()
        );
        // A process of its own for each shape, so that no shape reuses
        // memory an earlier one left: tokenizers loaded, one ordinary
        // request answered, then the peak is reset.
        let server = ChildServer::spawn(&["--memory-store", "off"], &[]);
        server.serving_channel().await;
        let mut client = RawClient::connect(server.grpc).await;
        assert_eq!(
            client
                .call(&format!("{SVC}Assemble"), frame(&warm), &[])
                .await
                .code(),
            Code::Ok
        );
        let baseline = reset_peak(&server);
        let answer = client.call(shape.path, frame(&shape.message), &[]).await;
        let growth = peak_growth(&server, baseline);
        let wire = shape.message.len() as u64;
        let status = answer_status(&answer);
        eprintln!(
            "| {} | {:.2} | {:?} {} | {:.1} | {:.2} |",
            shape.name,
            wire as f64 / f64::from(1 << 20),
            status.code(),
            reason(&status),
            growth as f64 / f64::from(1 << 20),
            growth as f64 / wire as f64
        );
        assert_eq!(status.code(), shape.code, "{}: {status:?}", shape.name);
        assert_eq!(reason(&status), shape.reason, "{}", shape.name);
        assert!(
            growth <= PEAK_BYTES_PER_WIRE_BYTE * wire + PEAK_ALLOWANCE_BYTES,
            "{}: the peak resident set grew {growth} bytes for a {wire}-byte message",
            shape.name
        );
        // Still serving.
        assert_eq!(
            client
                .call(&format!("{SVC}Assemble"), frame(&warm), &[])
                .await
                .code(),
            Code::Ok
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_every_rpc_hold_the_upload_budget() {
    // A budget of 2 x 1 MiB.
    let server = ChildServer::spawn(
        &[
            "--memory-store",
            "off",
            "--max-concurrency",
            "2",
            "--max-request-bytes",
            "1048576",
        ],
        &[],
    );
    server.serving_channel().await;
    // Two uploads of RPCs the gate once read only the header of, stalled:
    // they hold the whole budget.
    let _usage = stalled_upload(server.grpc, &format!("{SVC}ReportUsage"), 1 << 20, 1000).await;
    let _stream = stalled_upload(server.grpc, &format!("{SVC}AssembleStream"), 1 << 20, 1000).await;
    // Both reach the server and hold their declared bytes.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let page = server.metrics_page().await;
        let held = common::metric(&page, "assembler_upload_budget_held_bytes", &[]).unwrap_or(0.0);
        if held >= f64::from(2 << 20) {
            break;
        }
        assert!(Instant::now() < deadline, "the stalled uploads hold {held} bytes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut client = RawClient::connect(server.grpc).await;
    let usage = pb::ReportUsageRequest {
        provider: "openai".into(),
        ..Default::default()
    };
    let answer = client
        .call(&format!("{SVC}ReportUsage"), frame(&usage.encode_to_vec()), &[])
        .await;
    let status = answer_status(&answer);
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), "OVERLOADED");
    assert!(status.get_details_retry_info().is_some());
    let page = server.metrics_page().await;
    let refused = common::metric(
        &page,
        "assembler_requests_refused_total",
        &[("rpc", "ReportUsage"), ("reason", "upload_budget")],
    );
    assert!(refused.unwrap_or(0.0) >= 1.0, "counted by its reason");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_carrying_a_second_message_is_refused_before_it_is_decoded() {
    let server = ChildServer::spawn(&["--memory-store", "off"], &[]);
    server.serving_channel().await;
    let mut client = RawClient::connect(server.grpc).await;
    let mut body = frame(&heavy_request(1, 2, 100).encode_to_vec());
    body.extend(frame(&empty_items(1_000_000)));
    let answer = client.call(&format!("{SVC}Assemble"), body, &[]).await;
    assert_eq!(answer.code(), Code::InvalidArgument, "{:?}", answer.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_a_stream_answers_what_it_admitted_then_ends_unavailable() {
    let mut server = ChildServer::spawn(&["--memory-store", "off", "--drain-secs", "20"], &[]);
    let channel = server.serving_channel().await;
    let mut client = pb::assembler_client::AssemblerClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(heavy_request(1, 4, 200)).await.unwrap();
    let mut answers = client
        .assemble_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = answers.message().await.unwrap().unwrap();
    assert!(matches!(
        first.result.and_then(|r| r.result),
        Some(pb::assemble_result::Result::Response(_))
    ));
    let signalled = Instant::now();
    server.signal("-TERM");
    // The client keeps its side open and sends nothing: the server ends the
    // stream itself, with a status that says why.
    let end = tokio::time::timeout(Duration::from_secs(15), answers.message())
        .await
        .expect("the stream ends on drain");
    let status = end.expect_err("the stream ends with a status");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(reason(&status), "SHUTTING_DOWN");
    drop(tx);
    // And the process exits cleanly well before the drain deadline.
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            break exit;
        }
        assert!(signalled.elapsed() < Duration::from_secs(15), "still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(exit.success(), "{exit:?}");
    assert!(signalled.elapsed() < Duration::from_secs(15));
}
