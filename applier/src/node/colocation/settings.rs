//! The settings of the colocation loop (`run`'s colocation flags). Pure.

use std::time::Duration;

/// Settings of the colocation loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    pub configmap_namespace: String,
    pub configmap_name: String,
    pub sample_interval: Duration,
    pub report_interval: Duration,
    /// The suppression floor in milli-CPUs (`--be-suppress-min-cpus` x 1000).
    pub be_suppress_min_milli: i64,
}

impl Default for Settings {
    /// Off (a `RunConfig` built in code runs no colocation unless asked).
    fn default() -> Self {
        Self {
            enabled: false,
            configmap_namespace: koord_api::keys::CONFIG_NAMESPACE.to_owned(),
            configmap_name: koord_api::keys::CLUSTER_CONFIGMAP.to_owned(),
            sample_interval: Duration::from_secs(2),
            report_interval: Duration::from_secs(60),
            be_suppress_min_milli: 2_000,
        }
    }
}
