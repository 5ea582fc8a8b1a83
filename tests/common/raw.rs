//! Raw gRPC over a bare HTTP/2 connection, with no client-side limit, timer
//! or validation: framing, one-shot calls, uploads that stall or are held
//! part way, and a client that sends whatever bytes the test wants.

use std::net::SocketAddr;

/// One unary gRPC call over a bare HTTP/2 connection, so that no client-side
/// timer or limit interferes: returns (grpc-status, grpc-message).
pub async fn raw_unary(
    addr: SocketAddr,
    path: &str,
    message: &impl prost::Message,
    headers: &[(&str, &str)],
) -> (i32, String) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let framed = frame(&message.encode_to_vec());
    let mut req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(Full::new(bytes::Bytes::from(framed))).unwrap())
        .await
        .unwrap();
    let head = resp.headers().clone();
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let get = |k: &str| {
        trailers
            .get(k)
            .or_else(|| head.get(k))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    (get("grpc-status").parse().unwrap_or(-1), get("grpc-message"))
}

/// An upload that declares a `declared`-byte message, sends its frame header
/// and `sent` bytes, then stalls. Keep the returned handles to keep it open.
pub async fn stalled_upload(
    addr: SocketAddr,
    path: &str,
    declared: u32,
    sent: usize,
) -> (UploadSender, tokio::task::JoinHandle<Option<String>>) {
    let mut first = vec![0u8];
    first.extend_from_slice(&declared.to_be_bytes());
    first.extend(std::iter::repeat_n(b'x', sent));
    let (tx, response) = upload(addr, path, bytes::Bytes::from(first)).await;
    // Resolves with the grpc-status the server answers with, if it does.
    let answer = tokio::spawn(async move {
        let resp = response.await.ok()??;
        resp.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    });
    (tx, answer)
}

/// Where the frames of an upload body go.
pub type UploadSender =
    tokio::sync::mpsc::Sender<Result<http_body::Frame<bytes::Bytes>, std::convert::Infallible>>;

/// A gRPC call on a fresh HTTP/2 connection whose body starts with `first`;
/// the rest of the body goes through the returned sender (dropping it ends
/// the body). The response, `None` if the server never answers, arrives on
/// the returned task.
async fn upload(
    addr: SocketAddr,
    path: &str,
    first: bytes::Bytes,
) -> (
    UploadSender,
    tokio::task::JoinHandle<Option<http::Response<hyper::body::Incoming>>>,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    tx.send(Ok(http_body::Frame::data(first))).await.unwrap();
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    let response = tokio::spawn(async move { send.send_request(req).await.ok() });
    (tx, response)
}

/// Frames one encoded message as a gRPC length-prefixed message.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut framed = Vec::with_capacity(payload.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// What the server answered to one raw call.
#[derive(Debug)]
pub struct RawAnswer {
    /// The HTTP status.
    pub http: u16,
    /// `grpc-status` (from the trailers, or from the headers of a
    /// trailers-only answer); `None` if there was none.
    pub code: Option<i32>,
    /// The whole status with its details, when there is one.
    pub status: Option<tonic::Status>,
    /// The payloads of the response messages, in order.
    pub messages: Vec<bytes::Bytes>,
    /// Set when the response body broke off or was not well framed.
    pub broken: Option<String>,
}

impl RawAnswer {
    /// The gRPC status code (`Unknown` when none was sent).
    pub fn code(&self) -> tonic::Code {
        self.code.map_or(tonic::Code::Unknown, tonic::Code::from_i32)
    }

    /// The status message, or "" without one.
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", tonic::Status::message)
    }

    /// Decodes every response message as `M`.
    pub fn decode<M: prost::Message + Default>(&self) -> Result<Vec<M>, prost::DecodeError> {
        self.messages.iter().map(|m| M::decode(m.as_ref())).collect()
    }
}

/// One bare HTTP/2 connection for raw gRPC calls: whatever bytes the caller
/// wants as the body, no client-side limits, timers or validation.
#[derive(Clone)]
pub struct RawClient {
    addr: SocketAddr,
    send: hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl RawClient {
    /// Connects and completes the HTTP/2 handshake.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        RawClient { addr, send }
    }

    /// POSTs `body` (sent as is: frame it with [`frame`]) to `path` with
    /// the gRPC headers and `headers`, and reads the whole answer.
    pub async fn call(&mut self, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> RawAnswer {
        use http_body_util::{BodyExt, Full};
        let mut req = http::Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let sent = match self.send.ready().await {
            Ok(()) => {
                self.send
                    .send_request(req.body(Full::new(bytes::Bytes::from(body))).unwrap())
                    .await
            }
            Err(e) => Err(e),
        };
        let resp = match sent {
            Ok(resp) => resp,
            Err(e) => {
                return RawAnswer {
                    http: 0,
                    code: None,
                    status: None,
                    messages: Vec::new(),
                    broken: Some(format!("no response: {e:?}")),
                };
            }
        };
        let http = resp.status().as_u16();
        let head = resp.headers().clone();
        let (trailers, mut data, mut broken) = match resp.into_body().collect().await {
            Ok(c) => (c.trailers().cloned(), c.to_bytes(), None),
            Err(e) => (None, bytes::Bytes::new(), Some(format!("body: {e}"))),
        };
        let meta = trailers
            .as_ref()
            .filter(|t| t.contains_key("grpc-status"))
            .unwrap_or(&head);
        let code = meta
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let status = tonic::Status::from_header_map(meta);
        let mut messages = Vec::new();
        while !data.is_empty() {
            if data.len() < 5 {
                broken = Some(format!("{} stray bytes after the messages", data.len()));
                break;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if data[0] != 0 || data.len() < 5 + len {
                broken = Some(format!("bad response frame (flag {}, len {len})", data[0]));
                break;
            }
            messages.push(data.slice(5..5 + len));
            data = data.slice(5 + len..);
        }
        RawAnswer {
            http,
            code,
            status,
            messages,
            broken,
        }
    }
}

/// A unary call whose upload the test holds: the frame header and the first
/// `sent` bytes of `message` go out at once; the rest waits for
/// [`HeldCall::release`]. The server has the call from the start (it counts
/// its declared bytes) but cannot work on it until released: an in-flight
/// request whose timing the test controls.
pub struct HeldCall {
    rest: Option<(UploadSender, bytes::Bytes)>,
    answer: tokio::task::JoinHandle<Option<(i32, Vec<u8>)>>,
}

impl HeldCall {
    pub async fn start(addr: SocketAddr, path: &str, message: &[u8], sent: usize) -> HeldCall {
        use http_body_util::BodyExt as _;
        let framed = bytes::Bytes::from(frame(message));
        let first = framed.slice(..5 + sent.min(message.len()));
        let rest = framed.slice(first.len()..);
        let (tx, response) = upload(addr, path, first).await;
        // The grpc-status (headers or trailers) and the response body.
        let answer = tokio::spawn(async move {
            let resp = response.await.ok()??;
            let status = |h: &http::HeaderMap| {
                h.get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
            };
            let in_head = status(resp.headers());
            let collected = resp.into_body().collect().await.ok()?;
            let code = in_head.or_else(|| collected.trailers().and_then(status))?;
            Some((code, collected.to_bytes().to_vec()))
        });
        HeldCall {
            rest: Some((tx, rest)),
            answer,
        }
    }

    /// Sends the rest of the message and ends the upload.
    pub async fn release(&mut self) {
        if let Some((tx, rest)) = self.rest.take()
            && !rest.is_empty()
        {
            let _ = tx.send(Ok(http_body::Frame::data(rest))).await;
        }
    }

    /// The grpc-status and body the server answered (`None` if it never did).
    pub async fn answer(self) -> Option<(i32, Vec<u8>)> {
        self.answer.await.unwrap()
    }
}
