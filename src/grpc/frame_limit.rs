//! The request-size limit, enforced from the 5-byte gRPC frame header before
//! the message body is read: a client announcing more than the limit gets
//! RESOURCE_EXHAUSTED without the server buffering a byte of its message.
//! (tonic's own decode limit answers OUT_OF_RANGE; this runs first.)

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body as HttpBody, Frame};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use tower_service::Service;

use super::admission::Refusal;
use super::status::refusal_status;
use crate::telemetry::metrics;

/// Length of a gRPC frame header: compression flag and big-endian u32 length.
const FRAME_HEADER_BYTES: usize = 5;

/// Wraps the gRPC router with the size check.
#[derive(Debug, Clone)]
pub struct FrameLimit<S> {
    inner: S,
    max: u32,
}

impl<S> FrameLimit<S> {
    /// Refuses messages longer than `max` bytes before calling `inner`.
    pub fn new(inner: S, max: u32) -> Self {
        FrameLimit { inner, max }
    }
}

/// The RPC label for a request path (bounded: unknown paths are `other`).
fn rpc_label(path: &str) -> &'static str {
    let method = path.rsplit('/').next().unwrap_or_default();
    metrics::RPCS
        .into_iter()
        .find(|&r| r == method)
        .unwrap_or("other")
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

impl<S> Service<http::Request<Incoming>> for FrameLimit<S>
where
    S: Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Incoming>) -> Self::Future {
        // The clone is not polled ready: swap so the ready one is called.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let max = self.max;
        Box::pin(async move {
            let rpc = rpc_label(req.uri().path());
            let (parts, mut body) = req.into_parts();
            let mut head = BytesMut::new();
            let mut trailers = None;
            let mut ended = false;
            while head.len() < FRAME_HEADER_BYTES {
                match body.frame().await {
                    None => {
                        ended = true;
                        break;
                    }
                    Some(Err(_)) => {
                        return Ok(tonic::Status::cancelled("request body ended abnormally").into_http());
                    }
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => head.extend_from_slice(&data),
                        Err(frame) => {
                            trailers = frame.into_trailers().ok();
                            ended = true;
                            break;
                        }
                    },
                }
            }
            if head.len() >= FRAME_HEADER_BYTES {
                let bytes = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
                if bytes > max {
                    let refusal = Refusal::TooLarge { bytes, limit: max };
                    metrics::refused(rpc, refusal.reason());
                    metrics::request(rpc, "RESOURCE_EXHAUSTED", std::time::Duration::ZERO);
                    return Ok(refusal_status(&refusal).into_http());
                }
            }
            let body = Prefixed {
                head: Some(head.freeze()),
                rest: (!ended).then_some(body),
                trailers,
            };
            inner
                .call(http::Request::from_parts(parts, tonic::body::Body::new(body)))
                .await
        })
    }
}

/// The bytes read while checking the header, then the rest of the body.
struct Prefixed {
    head: Option<Bytes>,
    rest: Option<Incoming>,
    trailers: Option<HeaderMap>,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(head) = self.head.take().filter(|h| !h.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = self.rest.as_mut() {
            return Pin::new(rest).poll_frame(cx);
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.as_ref().is_none_or(Bytes::is_empty)
            && self
                .rest
                .as_ref()
                .map_or(self.trailers.is_none(), HttpBody::is_end_stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_labels_are_bounded() {
        assert_eq!(rpc_label("/context_assembler.v1.Assembler/Assemble"), "Assemble");
        assert_eq!(
            rpc_label("/context_assembler.v1.Assembler/CountTokens"),
            "CountTokens"
        );
        assert_eq!(rpc_label("/grpc.health.v1.Health/Check"), "other");
        assert_eq!(rpc_label("/x/attacker-chosen-name"), "other");
    }
}
