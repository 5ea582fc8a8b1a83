//! The connections: `n` HTTP/2 connections to the sidecar (over TCP, or a
//! Unix socket for `unix:/path`), opened once the server accepts them and
//! says it is SERVING (it loads its vocabularies first).

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use context_assembler::grpc::pb::assembler_client::AssemblerClient;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::uds;

/// How long to wait for the server to accept connections and be SERVING.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// HTTP/2 windows: answers carry whole prompts, so let one in one round trip.
const STREAM_WINDOW_BYTES: u32 = 8 << 20;
/// See [`STREAM_WINDOW_BYTES`].
const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;
/// The largest message sent or received; the server's own limit applies.
const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Opens `n` HTTP/2 connections to `target` and waits until the server is
/// SERVING (it loads its vocabularies first).
pub async fn connect(target: &str, n: usize) -> anyhow::Result<Vec<AssemblerClient<Channel>>> {
    let socket = target.strip_prefix("unix:").map(uds::dial);
    // On a Unix socket the URI names only the :authority; the connector dials.
    let uri = if socket.is_some() {
        "http://localhost"
    } else {
        target
    };
    let endpoint = Endpoint::from_shared(uri.to_owned())
        .with_context(|| format!("bad --addr {target:?}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5))
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    let ready_by = Instant::now() + READY_TIMEOUT;
    let mut first = None;
    let mut told = false;
    let open = async || match &socket {
        Some(dial) => endpoint.connect_with_connector(dial.clone()).await,
        None => endpoint.connect().await,
    };
    while first.is_none() {
        match open().await {
            Ok(channel) => first = Some(channel),
            Err(e) if Instant::now() < ready_by => {
                if !told {
                    eprintln!("loadgen: waiting for {target} ({e})");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("cannot connect to {target}: {e}"),
        }
    }
    let Some(first) = first else {
        bail!("cannot connect to {target}")
    };
    let mut health = HealthClient::new(first.clone());
    loop {
        let status = health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(|r| r.into_inner().status);
        if status.as_ref().is_ok_and(|s| *s == ServingStatus::Serving as i32) {
            break;
        }
        ensure!(
            Instant::now() < ready_by,
            "{target} is not SERVING after {READY_TIMEOUT:?} (health: {status:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each connect() is its own HTTP/2 connection.
    let mut channels = vec![first];
    for _ in 1..n {
        channels.push(
            open()
                .await
                .with_context(|| format!("cannot connect to {target}"))?,
        );
    }
    Ok(channels
        .into_iter()
        .map(|c| {
            AssemblerClient::new(c)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        })
        .collect())
}
