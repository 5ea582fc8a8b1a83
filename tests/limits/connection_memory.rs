//! What stalled connections can hold. A client that opens an HTTP/2
//! connection, starts a request and stops inside a frame leaves the server
//! holding a read buffer as large as the frame it announced (hyper reads a
//! connection frame by frame), until the keep-alive closes the connection
//! (its ping goes unanswered: 40 s at most).
//! The gate's upload budget never sees those bytes: they are not yet a gRPC
//! message. So the largest frame the server accepts, times
//! `max_connections`, is memory any client can pin. Against the real
//! binary, with its default configuration: a thousand such connections
//! grow its resident set by at most [`PER_CONNECTION_BYTES`] each, and it
//! still answers. It takes its turn like every test of `tests/limits`, so
//! no other test runs (nor holds open files) while it measures.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{self, ChildServer};
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use context_assembler::grpc::pb::{CountTokensRequest, count_tokens_request};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Stalled connections opened (fewer if the open-file limit is lower): the
/// default `max_connections` is 1,024.
const CONNECTIONS: usize = 1000;
/// What one stalled connection may cost the server: its frame buffer (the
/// largest frame it accepts, 64 KiB) and its connection state (about 32 KB
/// measured). docs/configuration.md's figure for `limits.max_connections` is this times
/// 1,024. Frames of 256 KiB would fail it.
const PER_CONNECTION_BYTES: u64 = 128 << 10;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
/// The protocol's default largest frame.
const DEFAULT_MAX_FRAME: u32 = 16 << 10;

/// An HTTP/2 frame header.
fn frame_header(len: u32, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let l = len.to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// An HPACK string literal, not Huffman-coded (every string here is short).
fn literal(s: &str, out: &mut Vec<u8>) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// The header block of a unary Assemble call, from HPACK's static table and
/// literals without indexing.
fn request_headers() -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
    b.push(0x04); // :path, literal value
    literal("/context_assembler.v1.Assembler/Assemble", &mut b);
    b.push(0x01); // :authority, literal value
    literal("localhost", &mut b);
    b.extend_from_slice(&[0x0f, 0x10]); // content-type (static index 31)
    literal("application/grpc", &mut b);
    b.push(0x00); // a new name
    literal("te", &mut b);
    literal("trailers", &mut b);
    b
}

/// The largest frame the server accepts, from its first SETTINGS frame.
async fn server_max_frame(s: &mut TcpStream) -> u32 {
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).await.unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).await.unwrap();
        if head[3] == SETTINGS && head[4] & ACK == 0 {
            return payload
                .chunks_exact(6)
                .find(|p| u16::from_be_bytes([p[0], p[1]]) == SETTINGS_MAX_FRAME_SIZE)
                .map_or(DEFAULT_MAX_FRAME, |p| {
                    u32::from_be_bytes([p[2], p[3], p[4], p[5]])
                });
        }
    }
}

/// A connection that starts an Assemble call and stalls one byte short of
/// the end of a DATA frame as large as the server accepts. Returns the
/// socket (keep it to keep the stall) and that frame size.
async fn stall(addr: SocketAddr) -> (TcpStream, u32) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    s.write_all(&frame_header(0, SETTINGS, 0, 0)).await.unwrap();
    let max_frame = server_max_frame(&mut s).await;
    s.write_all(&frame_header(0, SETTINGS, ACK, 0)).await.unwrap();
    let headers = request_headers();
    s.write_all(&frame_header(headers.len() as u32, HEADERS, END_HEADERS, 1))
        .await
        .unwrap();
    s.write_all(&headers).await.unwrap();
    // A gRPC message of 1 MiB begins; its first frame never ends. (A
    // 64 KiB frame is one byte over the connection's first window, before
    // the server's WINDOW_UPDATE is read: finished, it could be refused.)
    let mut data = frame_header(max_frame, DATA, 0, 1).to_vec();
    data.push(0);
    data.extend_from_slice(&(1u32 << 20).to_be_bytes());
    data.resize(9 + max_frame as usize - 1, b'x');
    s.write_all(&data).await.unwrap();
    (s, max_frame)
}

/// Bytes not yet read by the server on `port`: in the send queues of the
/// clients' established IPv4 sockets to it, and in the receive queues of its
/// own (one snapshot of /proc/net/tcp).
fn unread(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, remote) = (port_of(f.get(1)?)?, port_of(f.get(2)?)?);
            let established = *f.get(3)? == "01";
            let (tx, rx) = f.get(4)?.split_once(':')?;
            let queued = if local == port {
                u64::from_str_radix(rx, 16).ok()?
            } else if remote == port {
                u64::from_str_radix(tx, 16).ok()?
            } else {
                return None;
            };
            established.then_some(queued)
        })
        .sum()
}

/// The soft limit on open files of this process.
fn open_file_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Max open files")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(1024)
}

fn resident(server: &ChildServer) -> u64 {
    server.proc_status("VmRSS") * 1024
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_hold_at_most_a_frame_buffer_each() {
    let _turn = common::turn().await;
    let server = ChildServer::spawn(&[], &[]);
    let channel = server.serving_channel().await;
    // One answered call first, so what a call costs once is in the baseline.
    let count = |text: &str| CountTokensRequest {
        tokenizer: Some(count_tokens_request::Tokenizer::Model("gpt-4o".into())),
        text: text.to_owned().into(),
    };
    AssemblerClient::new(channel.clone())
        .count_tokens(count("warm up"))
        .await
        .unwrap();
    let n = CONNECTIONS.min(open_file_limit().saturating_sub(100));
    assert!(n >= 100, "too few open files for the test: {}", open_file_limit());
    let before = resident(&server);
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(stall(server.grpc).await);
    }
    let max_frame = held[0].1;
    // docs/configuration.md's figures are for the frames the server accepts today.
    assert_eq!(max_frame, 64 << 10, "the largest frame the server accepts");
    // The server has read every byte sent when its receive queues are empty.
    let deadline = Instant::now() + Duration::from_secs(60);
    while unread(server.grpc.port()) > 0 {
        assert!(Instant::now() < deadline, "the server stopped reading");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let grown = resident(&server).saturating_sub(before);
    // Every stalled connection still open (a keep-alive ping, unanswered,
    // closes them from 30 s on): the measure holds all of them.
    assert!(
        server.open_fds() >= n,
        "the server closed stalled connections before they were measured"
    );
    let per_connection = grown / n as u64;
    eprintln!(
        "{n} connections stalled inside {max_frame}-byte frames: resident +{grown} bytes, {per_connection} per connection"
    );
    assert!(
        per_connection <= PER_CONNECTION_BYTES,
        "a stalled connection costs {per_connection} bytes (frames of {max_frame})"
    );
    // The server still answers, on the connection it had before.
    let answer = AssemblerClient::new(channel)
        .count_tokens(count("still serving"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.tokens > 0);
    drop(held);
}
