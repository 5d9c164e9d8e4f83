//! Process plumbing shared by `koord-webhook` and `koord-applier`, written once: how logs are
//! set up, which signal ends the process, which rustls crypto provider is installed, how
//! metrics are registered, which Events are worth posting, how the process keeps its memory
//! small, how the API client times out a dead read, and which connection gives its slot to a
//! newcomer at a server's connection cap. Nothing here knows about QoS.

pub mod connections;
pub mod event_dedup;
pub mod kube_client;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod shutdown;
pub mod tls;

pub use event_dedup::EventDedup;
pub use kube_client::{WATCH_TIMEOUT_SECS, api_client};
pub use logging::{LogFormat, init_logging};
pub use memory::disable_transparent_huge_pages;
pub use shutdown::{ShutdownSignals, shutdown_signal};
pub use tls::install_crypto_provider;
