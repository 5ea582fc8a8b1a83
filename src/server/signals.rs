//! Signals: SIGTERM/SIGINT start the drain; SIGHUP re-reads the configuration
//! file and applies its models and policies, or refuses a bad file and keeps
//! the running configuration.

use std::sync::Arc;

use tracing::{info, warn};

use crate::assemble::Assembler;
use crate::config::{Reloadable, ServerConfig};
use crate::grpc::auth::Authority;
use crate::telemetry::metrics;

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Re-reads the configuration file under the server's flags and environment
/// and swaps in its catalog and `[auth]`; a configuration that does not
/// validate is refused, counted and logged, and the running one stays.
pub async fn reload(config: Arc<ServerConfig>, assembler: Arc<Assembler>, authority: Authority) {
    let result = tokio::task::spawn_blocking(move || {
        let reloaded = config.reload()?;
        Some(reloaded.map(|Reloadable { catalog, auth }| {
            authority.set(&auth);
            let (models, policies) = (catalog.models.entries().len(), catalog.policies.len());
            super::series::catalog_known(&catalog);
            assembler.set_catalog(catalog);
            (models, policies)
        }))
    })
    .await;
    match result {
        Ok(None) => info!("SIGHUP: no configuration file was given; nothing to reload"),
        Ok(Some(Ok((models, policies)))) => {
            metrics::config_reload(metrics::RELOAD_APPLIED);
            info!(
                models,
                policies, "configuration reloaded: models, policies and [auth] applied"
            );
        }
        Ok(Some(Err(e))) => {
            metrics::config_reload(metrics::RELOAD_REFUSED);
            warn!(error = %e, "configuration reload refused: the running configuration stays");
        }
        Err(e) => {
            metrics::config_reload(metrics::RELOAD_REFUSED);
            warn!(err = %e, "configuration reload failed: the running configuration stays");
        }
    }
}

/// The SIGHUP listener, registered at once (before binding), so that a
/// SIGHUP never terminates the sidecar, not even during start-up.
#[derive(Debug)]
pub struct Hangups {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    /// Registers the handler (inside a tokio runtime).
    pub fn register() -> Hangups {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signal = signal(SignalKind::hangup())
                .map_err(|e| warn!(err = %e, "cannot listen for SIGHUP: reloads disabled"))
                .ok();
            Hangups { signal }
        }
        #[cfg(not(unix))]
        Hangups {}
    }

    /// Reloads on every SIGHUP until the process ends.
    pub async fn reload_on_each(
        self,
        config: Arc<ServerConfig>,
        assembler: Arc<Assembler>,
        authority: Authority,
    ) {
        #[cfg(unix)]
        if let Some(mut signal) = self.signal {
            while signal.recv().await.is_some() {
                reload(config.clone(), assembler.clone(), authority.clone()).await;
            }
        }
        #[cfg(not(unix))]
        let _ = (config, assembler, authority);
    }
}
