//! Serving TLS from files (`--tls-cert`, `--tls-key`): the config built from them
//! ([`crate::tls_config`]) and certificate rotation by polling the files' bytes.
//!
//! Secret volumes swap a `..data` symlink atomically, so inotify on the file path misses the
//! change; comparing bytes every few seconds sees it. A rotation only swaps the config used by
//! new handshakes: connections already up keep their session, in-flight requests finish.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;

use crate::certs::inspect::leaf_not_after;
use crate::metrics::Metrics;
pub use crate::tls_config::{PemPair, TlsError, server_config};

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The serving certificate files, re-read when their bytes change.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    pub fn read(&self) -> Result<PemPair, TlsError> {
        Ok((read(&self.cert)?, read(&self.key)?))
    }

    /// Loads the files once (start-up: an error here is fatal).
    pub fn load(&self) -> Result<(RustlsConfig, PemPair), TlsError> {
        let (cert, key) = self.read()?;
        let config = server_config(&cert, &key)?;
        Ok((RustlsConfig::from_config(config), (cert, key)))
    }

    /// Polls the files every `interval` and swaps the config when both parse and fit. A
    /// half-written pair (new cert, old key) fails the key check and is retried next tick.
    pub async fn watch(
        self,
        tls: RustlsConfig,
        mut current: PemPair,
        interval: Duration,
        metrics: Metrics,
    ) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        loop {
            ticker.tick().await;
            let files = self.clone();
            let read = tokio::task::spawn_blocking(move || files.read()).await;
            let Ok(Ok(next)) = read else {
                continue; // missing for a moment during a swap: try again next tick
            };
            if next == current {
                continue;
            }
            match server_config(&next.0, &next.1) {
                Ok(config) => {
                    tls.reload_from_config(config);
                    current = next;
                    last_error = None;
                    metrics.tls_reloads.inc();
                    metrics.served_certificate(leaf_not_after(&current.0));
                    tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        metrics.tls_reload_errors.inc();
                        tracing::warn!(cert = %self.cert.display(), error = %msg,
                            "serving certificate changed but cannot be loaded; keeping the old one");
                        last_error = Some(msg);
                    }
                }
            }
        }
    }
}
