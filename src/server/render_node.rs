//! The render node beside the gRPC server: its listener served with the
//! server's own admission (the same limits and work slots), each refusal
//! counted under the endpoint's label as gRPC's are.

use std::sync::Arc;

use tokio::net::TcpListener;

use crate::assemble::Assembler;
use crate::grpc::admission::{Admission, Permit};
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

/// Serves the render node on `listener` until the task is dropped.
pub(super) async fn serve(listener: TcpListener, assembler: Arc<Assembler>, admission: Admission) {
    let node = RenderNode::new(Renderer::new(assembler), Slots(admission));
    http::serve(listener, Arc::new(node)).await;
}
