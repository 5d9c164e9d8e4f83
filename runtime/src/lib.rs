//! Process plumbing shared by `koord-webhook` and `koord-applier`, written once: how logs are
//! set up, which signal ends the process, which rustls crypto provider is installed and how
//! metrics are registered. Nothing here knows about QoS.

pub mod logging;
pub mod metrics;
pub mod shutdown;
pub mod tls;

pub use logging::{LogFormat, init_logging};
pub use shutdown::shutdown_signal;
pub use tls::install_crypto_provider;
