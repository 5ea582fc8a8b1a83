//! Server TLS from PEM files (rustls with ring): the certificate chain and key,
//! and optionally a client CA that makes the handshake require a client
//! certificate (mutual TLS). Loaded while validating, before any port is bound.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::ConfigError;

/// A loaded server TLS configuration.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The rustls configuration (ALPN `h2`).
    pub config: Arc<rustls::ServerConfig>,
    /// Whether clients must present a certificate.
    pub mutual: bool,
}

fn certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ConfigError::new(key, format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            key,
            format!("{}: no PEM certificate found", path.display()),
        ));
    }
    Ok(certs)
}

/// Loads `cert` and `key` (and `client_ca` for mutual TLS). `keys` names
/// the three settings for error messages.
pub fn load(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    keys: [&str; 3],
) -> Result<TlsSettings, ConfigError> {
    let chain = certs(cert, keys[0])?;
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ConfigError::new(keys[1], format!("{}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(keys[0], e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca, keys[2])? {
                roots
                    .add(c)
                    .map_err(|e| ConfigError::new(keys[2], format!("{}: {e}", ca.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| ConfigError::new(keys[2], e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, private)
        .map_err(|e| ConfigError::new(keys[1], format!("certificate and key do not match: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsSettings {
        config: Arc::new(config),
        mutual: client_ca.is_some(),
    })
}
