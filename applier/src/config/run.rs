//! The settings of `run`, its features' among them (their types live with the features).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::error::ConfigError;
use crate::cli::RunArgs;
use crate::node::{be_swap, colocation, nri, proactive, reclaim};
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
    /// Swap for BE containers.
    pub be_swap: be_swap::Settings,
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
            colocation: colocation(a)?,
            endpoint: endpoint(a)?,
            nri: nri(a)?,
            reclaim: reclaim(a, proc_root)?,
            proactive: proactive(a)?,
            be_swap: be_swap(a, proc_root)?,
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

fn colocation(a: &RunArgs) -> Result<colocation::Settings, ConfigError> {
    // `contains` is false for NaN.
    let interval = |v: f64, flag| match (0.1..=3600.0).contains(&v) {
        true => Ok(Duration::from_secs_f64(v)),
        false => Err(ConfigError::ColocationInterval(flag)),
    };
    let min_cpus = a.be_suppress_min_cpus;
    if !(0.0..=1024.0).contains(&min_cpus) {
        return Err(ConfigError::MinCpus);
    }
    Ok(colocation::Settings {
        enabled: a.colocation,
        configmap_namespace: a.slo_config_namespace.clone(),
        configmap_name: a.slo_config_name.clone(),
        sample_interval: interval(a.colocation_sample_seconds, "colocation-sample-seconds")?,
        report_interval: interval(a.colocation_report_seconds, "colocation-report-seconds")?,
        be_suppress_min_milli: (min_cpus * 1000.0).round() as i64,
    })
}

fn endpoint(a: &RunArgs) -> Result<EndpointSettings, ConfigError> {
    let timeout = |flag, got| match (1..=300).contains(&got) {
        true => Ok(Duration::from_secs(got)),
        false => Err(ConfigError::EndpointTimeout { flag, got }),
    };
    Ok(EndpointSettings {
        max_connections: a.metrics_max_connections,
        header_read_timeout: timeout("header-read", a.metrics_header_read_timeout_seconds)?,
        write_timeout: timeout("write", a.metrics_write_timeout_seconds)?,
    })
}

fn nri(a: &RunArgs) -> Result<nri::Settings, ConfigError> {
    let idx = &a.nri_plugin_index;
    if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::NriIndex(idx.clone()));
    }
    if !(10..=1900).contains(&a.nri_answer_deadline_ms) {
        return Err(ConfigError::NriDeadline);
    }
    if a.nri_pod_wait_ms > 1000 {
        return Err(ConfigError::NriPodWait);
    }
    Ok(nri::Settings {
        mode: a.nri,
        socket: a.nri_socket.clone(),
        plugin_index: idx.clone(),
        answer_deadline: Duration::from_millis(a.nri_answer_deadline_ms),
        pod_wait: Duration::from_millis(a.nri_pod_wait_ms),
    })
}

/// `proc_root`: where the emulations read `zoneinfo` (`--proc-root`).
fn reclaim(a: &RunArgs, proc_root: &Path) -> Result<reclaim::Settings, ConfigError> {
    if !(10..=10_000).contains(&a.async_reclaim_interval_ms) {
        return Err(ConfigError::ReclaimInterval(a.async_reclaim_interval_ms));
    }
    if !(1..=100).contains(&a.async_reclaim_cpu_percent) {
        return Err(ConfigError::ReclaimCpuPercent(a.async_reclaim_cpu_percent));
    }
    Ok(reclaim::Settings {
        enabled: a.async_reclaim,
        be_first: a.be_first_reclaim,
        throttle: a.be_first_reclaim && a.be_first_throttle,
        interval: Duration::from_millis(a.async_reclaim_interval_ms),
        cpu_percent: a.async_reclaim_cpu_percent,
        proc_root: proc_root.to_owned(),
        ..reclaim::Settings::default()
    })
}

fn proactive(a: &RunArgs) -> Result<proactive::Settings, ConfigError> {
    let ms = a.proactive_reclaim_write_budget_ms;
    if !(1..=1000).contains(&ms) {
        return Err(ConfigError::WriteBudget(ms));
    }
    Ok(proactive::Settings {
        enabled: a.proactive_reclaim,
        write_budget: Duration::from_millis(ms),
        ..proactive::Settings::default()
    })
}

fn be_swap(a: &RunArgs, proc_root: &Path) -> Result<be_swap::Settings, ConfigError> {
    if a.be_swap_percent > 100 {
        return Err(ConfigError::BeSwapPercent(a.be_swap_percent));
    }
    Ok(be_swap::Settings {
        percent: a.be_swap_percent,
        proc_root: proc_root.to_owned(),
        ..be_swap::Settings::default()
    })
}
