//! Clients over a Unix domain socket: a tonic channel (its connector dials
//! the path whatever the URI says, as tonic's `uds` example does) and one
//! HTTP/1.1 exchange on any byte stream.

use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tonic::transport::{Channel, Endpoint};

/// A gRPC channel to the server listening at `path`.
pub async fn channel(path: &Path) -> Result<Channel, tonic::transport::Error> {
    context_assembler::server::dial::channel(Endpoint::from_static("http://localhost"), path).await
}

/// Sends the head and `body` of one request (`connection: close`) on
/// `stream` and reads the answer: its status and body.
pub async fn http1_call<S>(mut stream: S, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream
        .write_all(&http1_head(method, path, body.len()))
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    http1_answer(stream).await
}

/// The head of a JSON request with a body of `len` bytes.
pub fn http1_head(method: &str, path: &str, len: usize) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {len}\r\nconnection: close\r\n\r\n"
    )
    .into_bytes()
}

/// Reads an answer to its end: the status and the body.
pub async fn http1_answer<S: AsyncRead + Unpin>(mut stream: S) -> (u16, Vec<u8>) {
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (status, out[at..].to_vec())
}
