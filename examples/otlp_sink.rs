//! A minimal OTLP/gRPC trace receiver for measuring the sidecar with tracing
//! on: accepts every export and counts the spans; prints its address, and
//! the count on Ctrl-C (SIGINT).
//! Usage: otlp_sink [ADDR] (default 127.0.0.1:4317)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

#[derive(Clone, Default)]
struct Sink(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:4317".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
    println!("otlp_sink listening on {}", listener.local_addr().unwrap());
    let sink = Sink::default();
    let count = sink.0.clone();
    let serve = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), async {
            let _ = tokio::signal::ctrl_c().await;
        });
    serve.await.unwrap();
    println!("spans received: {}", count.load(Ordering::Relaxed));
}
