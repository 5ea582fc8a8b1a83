//! Signals: SIGTERM/SIGINT start the drain; SIGHUP re-reads the configuration
//! file and applies its models and policies, or refuses a bad file and keeps
//! the running configuration.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::{info, warn};

use crate::assemble::Assembler;
use crate::config;
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

/// Re-reads `path` and swaps in its catalog; a file that does not validate
/// is refused, counted and logged, and the running catalog stays.
pub async fn reload(path: Option<PathBuf>, assembler: Arc<Assembler>) {
    let Some(path) = path else {
        info!("SIGHUP: no configuration file was given; nothing to reload");
        return;
    };
    let result = tokio::task::spawn_blocking(move || {
        let catalog = config::reload_catalog(&path)?;
        let (models, policies) = (catalog.models.entries().len(), catalog.policies.len());
        metrics::models_known(catalog.models.entries().iter().map(|m| m.name.clone()));
        assembler.set_catalog(catalog);
        Ok::<_, config::ConfigError>((models, policies))
    })
    .await;
    match result {
        Ok(Ok((models, policies))) => {
            metrics::config_reload(metrics::RELOAD_APPLIED);
            info!(
                models,
                policies, "configuration reloaded: models and policies applied"
            );
        }
        Ok(Err(e)) => {
            metrics::config_reload(metrics::RELOAD_REFUSED);
            warn!(error = %e, "configuration reload refused: the running configuration stays");
        }
        Err(e) => {
            metrics::config_reload(metrics::RELOAD_REFUSED);
            warn!(err = %e, "configuration reload failed: the running configuration stays");
        }
    }
}

/// Reloads on every SIGHUP until the process ends. Installed even without a
/// configuration file, so SIGHUP never terminates the sidecar.
pub async fn reload_on_sighup(path: Option<PathBuf>, assembler: Arc<Assembler>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hup = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                warn!(err = %e, "cannot listen for SIGHUP: reloads disabled");
                return;
            }
        };
        while hup.recv().await.is_some() {
            reload(path.clone(), assembler.clone()).await;
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, assembler);
    }
}
