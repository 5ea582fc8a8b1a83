//! The render node beside the gRPC server: its listener served with the
//! server's own admission (the same limits and work slots), each refusal
//! counted under the endpoint's label as gRPC's are, and drained with the
//! server. The gateway's HTTP fit endpoints share its listener.

use std::sync::Arc;

use tokio::sync::watch;

use super::listener::Listener;

use crate::assemble::Assembler;
use crate::grpc::admission::{Admission, Permit};
use crate::http1::Extra;
use crate::render::Renderer;
use crate::render::http::{self, RenderNode};
use crate::telemetry::metrics;

/// The gRPC admission as the render node asks for it.
#[derive(Debug)]
struct Slots(Admission);

impl http::Admission for Slots {
    type Permit = Permit;

    fn admit(&self, endpoint: &'static str) -> Result<Permit, String> {
        self.0.admit().map_err(|refusal| {
            metrics::refused(endpoint, refusal.reason());
            refusal.to_string()
        })
    }

    fn max_body_bytes(&self) -> u32 {
        self.0.max_request_bytes()
    }

    fn max_connections(&self) -> u32 {
        self.0.limits().max_connections
    }
}

/// Serves the render node on `listener` until `drain` turns true, then
/// stops accepting (a socket file is removed) and returns once its
/// connections have answered what they were answering.
pub(super) async fn serve(
    listener: Listener,
    assembler: Arc<Assembler>,
    admission: Admission,
    extra: Arc<dyn Extra>,
    mut drain: watch::Receiver<bool>,
) {
    let node = RenderNode::new(Renderer::new(assembler), Slots(admission)).with_extra(extra);
    let draining = async move {
        // The sender lives as long as the server's serve: gone means done.
        let _ = drain.wait_for(|d| *d).await;
    };
    http::serve(listener, Arc::new(node), draining).await;
}
