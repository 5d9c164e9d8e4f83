//! The settings of `run`, its features' among them (their types live with the features).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::error::ConfigError;
use crate::cli::RunArgs;
use crate::node::{colocation, nri, proactive, reclaim};
use crate::server::EndpointSettings;

/// `run`: the watch, the metrics endpoint and the features only `run` has. Each feature's
/// `Default` is off (a `RunConfig` built in code starts only what it asks for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    pub node_name: String,
    pub resync: Duration,
    /// `--ancestors-check-ms`; `None` = off.
    pub ancestors_check: Option<Duration>,
    pub metrics_addr: SocketAddr,
    pub event_window: Duration,
    /// Batch capacity and BE suppression.
    pub colocation: colocation::Settings,
    /// The metrics endpoint's connection cap and timeouts.
    pub endpoint: EndpointSettings,
    /// The NRI plugin.
    pub nri: nri::Settings,
    /// The async reclaim emulation.
    pub reclaim: reclaim::Settings,
    /// The proactive reclaim loop.
    pub proactive: proactive::Settings,
}

impl RunConfig {
    pub(super) fn from_flags(a: &RunArgs, proc_root: &Path) -> Result<Self, ConfigError> {
        if a.resync_seconds == 0 {
            return Err(ConfigError::Resync);
        }
        Ok(Self {
            node_name: a.node_name.clone(),
            resync: Duration::from_secs(a.resync_seconds),
            ancestors_check: (a.ancestors_check_ms > 0)
                .then(|| Duration::from_millis(a.ancestors_check_ms)),
            metrics_addr: parse_addr(&a.metrics_addr)
                .ok_or_else(|| ConfigError::Addr(a.metrics_addr.clone()))?,
            event_window: Duration::from_secs(a.event_window_seconds),
            colocation: colocation::Settings::try_from(&a.colocation)?,
            endpoint: EndpointSettings::try_from(&a.endpoint)?,
            nri: nri::Settings::try_from(&a.nri)?,
            reclaim: reclaim::Settings {
                proc_root: proc_root.to_owned(),
                ..reclaim::Settings::try_from(&a.reclaim)?
            },
            proactive: proactive::Settings::try_from(&a.proactive)?,
        })
    }
}

/// `:9316` -> `0.0.0.0:9316`, else a plain socket address.
pub fn parse_addr(s: &str) -> Option<SocketAddr> {
    match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}").parse().ok(),
        None => s.parse().ok(),
    }
}
