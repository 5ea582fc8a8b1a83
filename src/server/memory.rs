//! The memory store's connection as the server keeps it: a store that
//! cannot be opened at start does not stop the sidecar (Assemble serves,
//! recall degrades, the memory RPCs answer UNAVAILABLE); it is opened again
//! with backoff, then watched. Its state is reported as the health of
//! [`HEALTH_SERVICE`] and the `assembler_memory_store_up` gauge.

use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{info, warn};

use super::shared_counts::SharedCounts;
use crate::memory::Memories;
use crate::memory::store::{Backend, MemoryStore, Transport};
use crate::telemetry::metrics;

/// The health service name that reports the memory store.
pub const HEALTH_SERVICE: &str = "context_assembler.v1.Memory";
/// How long the start waits for the store before serving without it.
const FIRST_OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one later attempt to open may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// First pause between two attempts to open; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between two attempts to open.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often an open store is pinged.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a ping may take before the store counts as down.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Memories over the configured store, opened now if it opens within
/// `FIRST_OPEN_TIMEOUT`, else left connecting (see [`keep`]); the store,
/// once open, is offered to `shared` too.
pub async fn open(
    backend: &Backend,
    settings: crate::memory::MemorySettings,
    shared: &SharedCounts,
) -> Memories {
    if *backend == Backend::Off {
        return Memories::new(None, settings);
    }
    match tokio::time::timeout(FIRST_OPEN_TIMEOUT, MemoryStore::open(backend)).await {
        Ok(Ok(store)) => {
            if let Some(store) = &store {
                announce(store);
                shared.offer(store);
            }
            Memories::new(store, settings)
        }
        Ok(Err(e)) => {
            warn!(err = %e, "memory store unavailable at start: serving without it, reconnecting");
            Memories::connecting(settings)
        }
        Err(_) => {
            warn!(
                timeout_secs = FIRST_OPEN_TIMEOUT.as_secs(),
                "memory store did not open in time: serving without it, reconnecting"
            );
            Memories::connecting(settings)
        }
    }
}

/// Logs the open store and how it is reached; plaintext to a server across
/// the network is a warning (add `sslmode=verify-full` to the URL).
fn announce(store: &MemoryStore) {
    let transport = store.transport();
    if transport == Transport::PlaintextRemote {
        warn!(
            store = store.backend(),
            transport = transport.as_str(),
            "memory store open over plaintext to another host: add sslmode=verify-full (and sslrootcert=) to the URL"
        );
    } else {
        info!(
            store = store.backend(),
            transport = transport.as_str(),
            "memory store open"
        );
    }
}

/// Reports the store's state and, until it is open, opens it with backoff
/// (and offers it to `shared`); then pings it. Runs until aborted (on
/// drain).
pub async fn keep(
    backend: Backend,
    memories: Arc<Memories>,
    reporter: HealthReporter,
    shared: Arc<SharedCounts>,
) {
    if backend == Backend::Off {
        return;
    }
    let mut up = memories.is_connected();
    report(&reporter, up).await;
    let mut backoff = FIRST_BACKOFF;
    while !memories.is_connected() {
        tokio::time::sleep(backoff).await;
        match tokio::time::timeout(OPEN_TIMEOUT, MemoryStore::open(&backend)).await {
            Ok(Ok(Some(store))) => {
                announce(&store);
                shared.offer(&store);
                memories.connected(store);
            }
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                warn!(err = %e, retry_ms = backoff.as_millis() as u64, "memory store still unavailable")
            }
            Err(_) => warn!("memory store open timed out"),
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    loop {
        let now_up = memories.is_connected() && memories.ping(PING_TIMEOUT).await;
        if now_up != up {
            if now_up {
                info!("memory store answers again");
            } else {
                warn!("memory store does not answer");
            }
            up = now_up;
            report(&reporter, up).await;
        }
        tokio::time::sleep(if up {
            PING_EVERY
        } else {
            FIRST_BACKOFF.max(PING_EVERY / 5)
        })
        .await;
    }
}

async fn report(reporter: &HealthReporter, up: bool) {
    let status = if up {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status(HEALTH_SERVICE, status).await;
    metrics::memory_store_up(up);
}
