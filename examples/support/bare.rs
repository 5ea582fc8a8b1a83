//! A bare tonic server: the floor the sidecar's transport is measured
//! against. tonic's own server and decoder settings, prost's codec, and
//! handlers that do nothing but what any server of these calls must:
//! decode the request whole and answer.
//!
//! - `ListModels`: an empty answer.
//! - `CountTokens`: the request decoded (its text a slice of the decode
//!   buffer, as the sidecar's is), answered with a count of 0. No UTF-8
//!   check, no counting.
//! - `Assemble`: the request decoded into prost's owned messages (every
//!   string copied, as the sidecar's are), answered with the same
//!   pre-encoded answer every time (a real answer of the sidecar, read
//!   from a file at start; its encoding is a copy of its bytes).
//!
//! Every other method is UNIMPLEMENTED.

use std::convert::Infallible;
use std::future::Future;
use std::io::BufRead as _;
use std::path::Path;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use context_assembler::grpc::pb;
use tokio::net::{TcpListener, UnixListener};
use tonic::body::Body;
use tonic::server::NamedService;

use crate::support::Server;

/// The largest message either way (the sidecar's default is larger than
/// any message measured here).
const MAX_MESSAGE: usize = 64 << 20;

/// A message whose encoding is given: written as its bytes, never decoded.
#[derive(Clone, Default, Debug, PartialEq)]
pub struct Encoded(pub Bytes);

impl prost::Message for Encoded {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }

    // Never decoded here (a client decodes the answer as the message it
    // is); a field read would be skipped.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0 = Bytes::new();
    }
}

#[derive(Clone)]
struct Bare {
    answer: Encoded,
}

impl NamedService for Bare {
    const NAME: &'static str = "context_assembler.v1.Assembler";
}

/// A unary handler answering every request with a clone of one answer.
struct Answer<Req, Resp>(Resp, std::marker::PhantomData<fn(Req)>);

impl<Req, Resp> tonic::server::UnaryService<Req> for Answer<Req, Resp>
where
    Req: Send + 'static,
    Resp: Clone + Send + 'static,
{
    type Response = Resp;
    type Future = std::future::Ready<Result<tonic::Response<Resp>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        // The request is decoded whole before this runs; dropping it here
        // frees it as a server's handler would once done with it.
        drop(std::hint::black_box(request.into_inner()));
        std::future::ready(Ok(tonic::Response::new(self.0.clone())))
    }
}

fn grpc<Req: prost::Message + Default + 'static, Resp: prost::Message + 'static>()
-> tonic::server::Grpc<tonic_prost::ProstCodec<Resp, Req>> {
    tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

impl tower_service::Service<http::Request<Body>> for Bare {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let answer = self.answer.clone();
        Box::pin(async move {
            Ok(match req.uri().path() {
                "/context_assembler.v1.Assembler/ListModels" => {
                    let empty = pb::ListModelsResponse::default();
                    grpc::<pb::ListModelsRequest, _>()
                        .unary(Answer(empty, Default::default()), req)
                        .await
                }
                "/context_assembler.v1.Assembler/CountTokens" => {
                    let none = pb::CountTokensResponse::default();
                    grpc::<pb::CountTokensRequest, _>()
                        .unary(Answer(none, Default::default()), req)
                        .await
                }
                "/context_assembler.v1.Assembler/Assemble" => {
                    grpc::<pb::AssembleRequest, _>()
                        .unary(Answer(answer, Default::default()), req)
                        .await
                }
                _ => tonic::Status::unimplemented("not in the bare server").into_http(),
            })
        })
    }
}

/// Serves the bare server on `addr` (`host:port` or `unix:/path`), its
/// `Assemble` answering the encoded `AssembleResponse` in the file
/// `answer` (none: an empty answer); prints `listening ADDR` once bound.
pub async fn serve(addr: &str, answer: Option<&Path>) {
    let answer = Encoded(answer.map_or_else(Bytes::new, |p| std::fs::read(p).unwrap().into()));
    let server = tonic::transport::Server::builder().add_service(Bare { answer });
    if let Some(path) = addr.strip_prefix("unix:") {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        println!("listening unix:{path}");
        let incoming = futures_util::stream::unfold(listener, |l| async move {
            Some((l.accept().await.map(|(s, _)| s), l))
        });
        server.serve_with_incoming(incoming).await.unwrap();
    } else {
        let listener = TcpListener::bind(addr).await.unwrap();
        println!("listening {}", listener.local_addr().unwrap());
        let incoming = futures_util::stream::unfold(listener, |l| async move {
            let accepted = l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                s
            });
            Some((accepted, l))
        });
        server.serve_with_incoming(incoming).await.unwrap();
    }
}

/// Starts this binary again as the bare server on `addr`: the example's
/// `main` runs [`serve`] when its arguments are `floor ADDR [ANSWER_FILE]`.
pub fn process(addr: &str, answer: Option<&Path>) -> Server {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["floor", addr])
        .args(answer)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // A server that never says where it listens is stopped (by the drop),
    // not waited for.
    let mut server = Server {
        child,
        addr: String::new(),
    };
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the bare server did not start within 60 s");
    server.addr = line
        .trim()
        .strip_prefix("listening ")
        .expect("the bare server's first line names its address")
        .to_owned();
    server
}
