//! `AssembleStream`: each worker keeps one stream open and one request in
//! flight on it; an answer must carry its request's index and id, and a
//! stream that errs, falls silent past the deadline or answers out of step
//! is replaced by a new one, so answers keep matching requests.

use std::sync::atomic::Ordering;

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;

use super::check::failed;
use super::{Driver, Outcome};

impl Driver {
    /// One worker of `--rpc stream`: its requests in turn on one stream of
    /// `client`.
    pub(super) async fn stream_worker(&self, client: &AssemblerClient<Channel>) {
        let mut client = client.clone();
        let mut open: Option<OpenStream> = None;
        while let Some(t) = self.claim(1) {
            let Some(from) = self.wait_due(t).await else { break };
            let request = self.request(t.first);
            self.sent.fetch_add(1, Ordering::Relaxed);
            let exchange = tokio::time::timeout(
                self.plan.deadline,
                OpenStream::exchange(&mut open, &mut client, request),
            )
            .await;
            let outcome = match exchange {
                Ok(Ok((index, answer))) => self.stream_answer(index, &answer, t.first),
                Ok(Err(status)) => {
                    open = None;
                    failed(&status)
                }
                // The stream may still answer this request later: start a
                // new one so answers keep matching requests.
                Err(_) => {
                    open = None;
                    Outcome::Status(
                        Code::DeadlineExceeded,
                        "no answer on the stream by the deadline".to_owned(),
                    )
                }
            };
            // A request's own error leaves the stream usable; an answer that
            // does not match its request means the stream is out of step.
            if matches!(outcome, Outcome::Malformed(_)) {
                open = None;
            }
            self.record(from.elapsed(), &[outcome]);
        }
    }
}

/// An `AssembleStream` call and the index its next answer must carry.
struct OpenStream {
    tx: tokio::sync::mpsc::Sender<pb::AssembleRequest>,
    inbound: tonic::Streaming<pb::AssembleStreamResponse>,
    next: u64,
}

impl OpenStream {
    /// Sends one request on the stream (opening one if needed) and reads its
    /// answer; returns the index the answer should carry and the answer.
    async fn exchange(
        open: &mut Option<OpenStream>,
        client: &mut AssemblerClient<Channel>,
        request: pb::AssembleRequest,
    ) -> Result<(u64, pb::AssembleStreamResponse), tonic::Status> {
        let stream = match open {
            Some(s) => {
                s.tx.send(request)
                    .await
                    .map_err(|_| tonic::Status::unavailable("the stream's sender closed"))?;
                s
            }
            None => {
                // The first request is queued before the call, so a server
                // that answers headers only after a message cannot deadlock.
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                tx.send(request)
                    .await
                    .map_err(|_| tonic::Status::internal("a new channel refused a message"))?;
                let inbound = client
                    .assemble_stream(ReceiverStream::new(rx))
                    .await?
                    .into_inner();
                open.insert(OpenStream { tx, inbound, next: 0 })
            }
        };
        let index = stream.next;
        stream.next += 1;
        match stream.inbound.message().await? {
            Some(answer) => Ok((index, answer)),
            None => Err(tonic::Status::unavailable("the server ended the stream")),
        }
    }
}

impl Driver {
    /// The outcome of `answer`, read on a stream where it is the answer
    /// `index` and answers `ticket`.
    pub(super) fn stream_answer(
        &self,
        index: u64,
        answer: &pb::AssembleStreamResponse,
        ticket: u64,
    ) -> Outcome {
        if answer.index != index {
            return Outcome::Malformed("stream index out of order");
        }
        if answer.request_id != self.template(ticket).request_id {
            return Outcome::Malformed("stream request_id mismatch");
        }
        match &answer.result {
            Some(r) => self.result(r, ticket),
            None => Outcome::Malformed("empty stream result"),
        }
    }
}
