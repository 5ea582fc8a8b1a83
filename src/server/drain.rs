//! The drain, under the deadline set when shutdown is requested: the calls
//! in flight are answered (or, past the deadline, abandoned and answered
//! UNAVAILABLE), the render node's connections close, the memory store
//! closes and the last trace spans are exported, none holding the exit.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::memory::Memories;
use crate::telemetry::trace::Exporter;

use super::conn::Calls;

/// After the last unary request of a drain is answered, how long responses
/// get to reach the socket before the remaining connections are closed.
const FLUSH_GRACE: Duration = Duration::from_millis(250);
/// The least time the memory store is given to close on shutdown.
const STORE_CLOSE_MIN: Duration = Duration::from_millis(500);
/// How long, past the drain deadline, the UNAVAILABLE answers of abandoned
/// calls have to reach their clients before the process exits.
const ABANDON_FLUSH: Duration = Duration::from_millis(500);
/// How long, past the drain deadline, the last trace spans may take to
/// reach the collector (at least).
const TRACE_FLUSH_MIN: Duration = Duration::from_secs(1);
/// How often the drain looks at what is still open.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Waits until `deadline` for the connections to close, or for nothing to
/// be `busy` while only long-lived streams hold them; past it, abandons the
/// Assembler `calls` not yet answered through `abandon`. `grace` is the
/// drain period, for the log.
pub async fn calls(
    deadline: Instant,
    grace: Duration,
    calls: &Calls,
    busy: impl Fn() -> usize,
    open_connections: impl Fn() -> usize,
    abandon: &watch::Sender<bool>,
) {
    match tokio::time::timeout_at(deadline, drained(busy, open_connections)).await {
        Ok(0) => info!("drained cleanly"),
        Ok(streams) => info!(
            connections = streams,
            "drained: calls answered; connections holding only health or reflection streams closed"
        ),
        Err(_) => {
            let abandoned = calls.open();
            // Each call not yet answered is answered UNAVAILABLE; the
            // answers get a moment to reach their clients.
            let _ = abandon.send(true);
            let flushed = tokio::time::timeout(ABANDON_FLUSH, async {
                while calls.open() > 0 {
                    tokio::time::sleep(DRAIN_POLL).await;
                }
            })
            .await
            .is_ok();
            warn!(
                grace_secs = grace.as_secs(),
                calls = abandoned,
                answered = flushed,
                "drain timed out: calls in flight abandoned and answered UNAVAILABLE"
            );
        }
    }
}

/// Resolves once every connection has closed (0), or once nothing has been
/// `busy` for [`FLUSH_GRACE`] while connections with only long-lived streams
/// remain (their number).
async fn drained(busy: impl Fn() -> usize, open_connections: impl Fn() -> usize) -> usize {
    let mut quiet_since: Option<std::time::Instant> = None;
    loop {
        let connections = open_connections();
        if connections == 0 {
            return 0;
        }
        if busy() == 0 {
            let since = *quiet_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= FLUSH_GRACE {
                return connections;
            }
        } else {
            quiet_since = None;
        }
        tokio::time::sleep(DRAIN_POLL).await;
    }
}

/// The render node stopped accepting on the drain signal; its connections
/// close as they answer, within the same deadline.
pub async fn render_node(deadline: Instant, node: Option<JoinHandle<()>>) {
    if let Some(mut node) = node
        && tokio::time::timeout_at(deadline, &mut node).await.is_err()
    {
        node.abort();
        warn!("render node connections still open at the drain deadline: closed");
    }
}

/// The store closes within the drain deadline (at least a moment, for its
/// last commit), never holding the exit.
pub async fn close_store(deadline: Instant, memories: &Memories) {
    let close_by = deadline.max(Instant::now() + STORE_CLOSE_MIN);
    if !memories
        .close_within(close_by.saturating_duration_since(Instant::now()))
        .await
    {
        warn!("memory store did not close within the drain deadline: its connections are dropped");
    }
}

/// The last trace spans are exported within the drain deadline (at least
/// [`TRACE_FLUSH_MIN`]), or dropped.
pub async fn flush_traces(deadline: Instant, exporter: Option<&Exporter>) {
    if let Some(exporter) = exporter {
        let flush_by = deadline.max(Instant::now() + TRACE_FLUSH_MIN);
        if !exporter
            .flush(flush_by.saturating_duration_since(Instant::now()))
            .await
        {
            warn!("trace spans not exported within the drain deadline: dropped");
        }
    }
}
