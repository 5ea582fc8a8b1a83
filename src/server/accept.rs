//! Accepting connections: each takes a slot (at the limit it is closed at
//! once, so the client fails fast instead of waiting in the backlog), passes
//! the TLS handshake under a timeout when TLS is on, and is served until it
//! closes, idles out or the drain ends it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::service::Routes;
use tracing::{debug, warn};

use crate::grpc::auth::ClientIdentity;
use crate::grpc::gate::Gate;
use crate::grpc::trace::Traced;
use crate::telemetry::metrics;

use super::conn::Conn;
use super::listener::{Listener, Peer, Stream};

/// A TLS handshake that takes longer is abandoned.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait after a failed accept before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What every connection serves: the router behind the gate, traced.
pub type Routed = Traced<Gate<Routes>>;

/// Accepts connections and serves each on a task of its own.
pub struct Acceptor {
    conn: Arc<Conn<Routed>>,
    tls: Option<TlsAcceptor>,
    slots: Arc<Semaphore>,
    max_connections: u32,
    drain: watch::Receiver<bool>,
}

impl Acceptor {
    /// Serves `conn`, over TLS when `tls` is given, on at most
    /// `max_connections` connections at once; `drain` ends them.
    pub fn new(
        conn: Conn<Routed>,
        tls: Option<TlsAcceptor>,
        max_connections: u32,
        drain: watch::Receiver<bool>,
    ) -> Self {
        Acceptor {
            conn: Arc::new(conn),
            tls,
            slots: Arc::new(Semaphore::new(max_connections as usize)),
            max_connections,
            drain,
        }
    }

    /// Accepts on `listener` until `shutdown` resolves.
    pub async fn run(&self, listener: &Listener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = &mut shutdown => break,
            };
            match accepted {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    warn!(err = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        (self.max_connections as usize).saturating_sub(self.slots.available_permits())
    }

    /// Serves the connection on a task of its own if a slot is free, or
    /// closes it at once.
    fn admit(&self, stream: Stream, peer: Peer) {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            metrics::connection_refused();
            debug!(%peer, limit = self.max_connections, "connection limit reached: closed");
            return;
        };
        let conn = self.conn.clone();
        let tls = self.tls.clone();
        let drain = self.drain.clone();
        tokio::spawn(serve(conn, tls, stream, peer, drain, slot));
    }
}

/// Serves one connection, counted open while it is, holding its slot.
async fn serve(
    conn: Arc<Conn<Routed>>,
    tls: Option<TlsAcceptor>,
    stream: Stream,
    peer: Peer,
    drain: watch::Receiver<bool>,
    slot: OwnedSemaphorePermit,
) {
    let _slot = slot;
    metrics::connections(1.0);
    match tls {
        None => conn.serve(stream, peer, None, drain).await,
        Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
            Ok(Ok(tls)) => {
                let identity = client_identity(&tls);
                conn.serve(tls, peer, identity, drain).await
            }
            Ok(Err(e)) => debug!(%peer, err = %e, "TLS handshake failed"),
            Err(_) => debug!(%peer, "TLS handshake timed out"),
        },
    }
    metrics::connections(-1.0);
}

/// The client's identity from its certificate, verified by the handshake
/// (mutual TLS); its names select the [auth] entry.
fn client_identity(tls: &TlsStream<Stream>) -> Option<Arc<ClientIdentity>> {
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| Arc::new(ClientIdentity::from_certificate(leaf)))
}
