//! The serving TLS configuration from PEM: rustls with the ring provider (the only one compiled
//! in), TLS 1.2 and 1.3, ALPN h2 + http/1.1. A leaf shared by the server's certificate files
//! (`server/tls.rs`) and the self-managed certificates (`certs/self_managed/`).

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("certificate PEM: {0}")]
    CertPem(rustls::pki_types::pem::Error),
    #[error("certificate PEM holds no CERTIFICATE block")]
    NoCert,
    #[error("private key PEM: {0}")]
    KeyPem(rustls::pki_types::pem::Error),
    #[error("certificate and key do not fit together: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A rustls server config from PEM text (a chain, leaf first, and its key).
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    koord_runtime::install_crypto_provider();
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::CertPem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCert);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::KeyPem)?;
    let mut config = ServerConfig::builder_with_protocol_versions(&[
        &rustls::version::TLS13,
        &rustls::version::TLS12,
    ])
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The PEM bytes a config was built from (cert, key): what the poller compares against.
pub type PemPair = (Vec<u8>, Vec<u8>);
