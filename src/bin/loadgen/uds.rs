//! `--addr unix:/path`: the connector that dials a sidecar's Unix socket
//! whatever the channel's URI says (as tonic's `uds` example does).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::Uri;

/// Dials one socket path.
#[derive(Debug, Clone)]
pub struct Dial(Arc<PathBuf>);

impl Dial {
    /// A connector to `path` (`unix:///abs` as gRPC names it: `//` dropped).
    pub fn new(path: &str) -> Dial {
        let path = path
            .strip_prefix("//")
            .filter(|p| p.starts_with('/'))
            .unwrap_or(path);
        Dial(Arc::new(PathBuf::from(path)))
    }
}

impl tower_service::Service<Uri> for Dial {
    type Response = TokioIo<UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<UnixStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = Arc::clone(&self.0);
        Box::pin(async move { UnixStream::connect(path.as_path()).await.map(TokioIo::new) })
    }
}
