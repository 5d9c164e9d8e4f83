//! One rustls crypto provider per process: ring.

use std::sync::Once;

/// Installs ring as the process-wide rustls provider. `main` calls it first; library entry
/// points that build TLS configs call it too, so tests need no set-up. Idempotent.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err means a provider is already installed (by a test harness): keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
