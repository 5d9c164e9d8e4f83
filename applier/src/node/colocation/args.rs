//! The colocation flags of `run` and the settings they become. Pure.

use std::time::Duration;

/// Flags of `run` for colocation (flattened into its arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct ColocationArgs {
    /// Run the colocation loop (the ConfigMap's `enable` flags still decide what it does).
    #[arg(long = "colocation", env = "KOORD_COLOCATION", default_value_t = true, action = clap::ArgAction::Set)]
    pub colocation: bool,
    /// Namespace of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAMESPACE", default_value = koord_api::keys::CONFIG_NAMESPACE)]
    pub slo_config_namespace: String,
    /// Name of the cluster ConfigMap holding `colocation-config`.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAME", default_value = koord_api::keys::CLUSTER_CONFIGMAP)]
    pub slo_config_name: String,
    /// Usage is sampled and BE suppression recomputed this often.
    #[arg(long, env = "KOORD_COLOCATION_SAMPLE_SECONDS", default_value_t = 2.0)]
    pub colocation_sample_seconds: f64,
    /// The batch capacity is recomputed (and the Node patched if needed) this often.
    #[arg(long, env = "KOORD_COLOCATION_REPORT_SECONDS", default_value_t = 60.0)]
    pub colocation_report_seconds: f64,
    /// BE pods always keep at least this many CPUs (fractions allowed for cfsQuota; cpuset
    /// rounds up), or every CPU the node has when it has fewer.
    #[arg(long, env = "KOORD_BE_SUPPRESS_MIN_CPUS", default_value_t = 2.0)]
    pub be_suppress_min_cpus: f64,
}

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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("--{0} must be a number of seconds in 0.1..=3600")]
    Interval(&'static str),
    #[error("--be-suppress-min-cpus must be in 0..=1024")]
    MinCpus,
}

fn interval(v: f64, flag: &'static str) -> Result<Duration, SettingsError> {
    if v.is_finite() && (0.1..=3600.0).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(SettingsError::Interval(flag))
    }
}

impl TryFrom<&ColocationArgs> for Settings {
    type Error = SettingsError;
    fn try_from(a: &ColocationArgs) -> Result<Self, SettingsError> {
        if !(a.be_suppress_min_cpus.is_finite() && (0.0..=1024.0).contains(&a.be_suppress_min_cpus))
        {
            return Err(SettingsError::MinCpus);
        }
        Ok(Self {
            enabled: a.colocation,
            configmap_namespace: a.slo_config_namespace.clone(),
            configmap_name: a.slo_config_name.clone(),
            sample_interval: interval(a.colocation_sample_seconds, "colocation-sample-seconds")?,
            report_interval: interval(a.colocation_report_seconds, "colocation-report-seconds")?,
            be_suppress_min_milli: (a.be_suppress_min_cpus * 1000.0).round() as i64,
        })
    }
}
