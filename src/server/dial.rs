//! The client side of a Unix domain socket listener (`unix:/abs/path`): a
//! connector that dials the socket whatever the channel's URI says, as
//! tonic's `uds` example does. For the load generator, the tests and the
//! transport benchmark; the server side is `listener`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Dials one socket path.
#[derive(Debug, Clone)]
pub struct Dial(Arc<PathBuf>);

impl Dial {
    /// A connector to `path`.
    pub fn new(path: impl Into<PathBuf>) -> Dial {
        Dial(Arc::new(path.into()))
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

/// A gRPC channel to the server listening at `path`, from `endpoint`'s
/// settings (its URI is only the `:authority` header).
pub async fn channel(endpoint: Endpoint, path: &Path) -> Result<Channel, tonic::transport::Error> {
    endpoint.connect_with_connector(Dial::new(path)).await
}
