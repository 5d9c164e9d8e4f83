//! Process plumbing shared by `koord-webhook` and `koord-applier`, written once: how logs are
//! set up, which signal ends the process, which rustls crypto provider is installed, how
//! metrics are registered and which Events are worth posting. Nothing here knows about QoS.

pub mod event_dedup;
pub mod logging;
pub mod metrics;
pub mod shutdown;
pub mod tls;

pub use event_dedup::EventDedup;
pub use logging::{LogFormat, init_logging};
pub use shutdown::{ShutdownSignals, shutdown_signal};
pub use tls::install_crypto_provider;
