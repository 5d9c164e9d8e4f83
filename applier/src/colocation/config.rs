//! The two keys of the cluster ConfigMap (`kube-system/ack-slo-config`) that drive colocation,
//! parsed purely, with Koordinator's field names and defaults and hard ranges.
//!
//! - `colocation-config`: a flat JSON object (Koordinator's `ColocationCfg` cluster fields).
//! - `resource-threshold-config`: `{"clusterStrategy": {"enable", "cpuSuppressThresholdPercent",
//!   "cpuSuppressPolicy"}}` (Koordinator's `ResourceThresholdCfg`). Decision: the key lives
//!   where Koordinator keeps it, so an existing `slo-controller-config` can be copied as is.
//!
//! Unknown fields (Koordinator has more, e.g. `cpuCalculatePolicy`, `nodeConfigs`,
//! `memoryEvictThresholdPercent`) are accepted and ignored, so a Koordinator ConfigMap parses.
//! Each key is parsed on its own: a broken key keeps its last good value ([`ConfigState`]) and the
//! other key still updates. A missing key means the defaults.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

pub const COLOCATION_KEY: &str = "colocation-config";
pub const THRESHOLD_KEY: &str = "resource-threshold-config";

/// How the memory of latency-sensitive pods is counted against the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryPolicy {
    /// What the pods use (memory usage minus inactive file), averaged over the window.
    Usage,
    /// What the pods requested: lends less, never takes back memory a pod was promised.
    Request,
}

/// How BE pods are squeezed when the node is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressPolicy {
    /// `cpuset.cpus` of the BE parent cgroup: whole CPUs, taken from the end.
    Cpuset,
    /// `cpu.cfs_quota_us` (v1) / `cpu.max` (v2) of the BE parent cgroup: fractions of CPUs.
    CfsQuota,
}

impl MemoryPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usage => "usage",
            Self::Request => "request",
        }
    }
}

impl SuppressPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpuset => "cpuset",
            Self::CfsQuota => "cfsQuota",
        }
    }
}

/// `colocation-config`, every field resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ColocationConfig {
    pub enable: bool,
    pub cpu_reclaim_threshold_percent: i64,
    pub memory_reclaim_threshold_percent: i64,
    pub memory_calculate_policy: MemoryPolicy,
    pub metric_aggregate_duration: Duration,
    pub update_time_threshold: Duration,
    pub resource_diff_threshold: f64,
    pub degrade_time: Duration,
}

impl Default for ColocationConfig {
    /// Koordinator's `DefaultColocationCfg`.
    fn default() -> Self {
        Self {
            enable: false,
            cpu_reclaim_threshold_percent: 60,
            memory_reclaim_threshold_percent: 65,
            memory_calculate_policy: MemoryPolicy::Usage,
            metric_aggregate_duration: Duration::from_secs(300),
            update_time_threshold: Duration::from_secs(300),
            resource_diff_threshold: 0.1,
            degrade_time: Duration::from_secs(15 * 60),
        }
    }
}

/// `resource-threshold-config` `clusterStrategy`, the part this product implements.
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdStrategy {
    pub enable: bool,
    pub cpu_suppress_threshold_percent: i64,
    pub cpu_suppress_policy: SuppressPolicy,
}

impl Default for ThresholdStrategy {
    /// Koordinator's `DefaultResourceThresholdStrategy`.
    fn default() -> Self {
        Self {
            enable: false,
            cpu_suppress_threshold_percent: 65,
            cpu_suppress_policy: SuppressPolicy::Cpuset,
        }
    }
}

/// Both keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SloConfig {
    pub colocation: ColocationConfig,
    pub threshold: ThresholdStrategy,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{key}: invalid JSON: {message}")]
    Json { key: &'static str, message: String },
    #[error("{key}: {field} = {value} is out of range {range}")]
    Range {
        key: &'static str,
        field: &'static str,
        value: String,
        range: &'static str,
    },
    #[error("{key}: {field} = {value:?} is not one of {allowed}")]
    Enum {
        key: &'static str,
        field: &'static str,
        value: String,
        allowed: &'static str,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawColocation {
    enable: Option<bool>,
    cpu_reclaim_threshold_percent: Option<i64>,
    memory_reclaim_threshold_percent: Option<i64>,
    memory_calculate_policy: Option<String>,
    metric_aggregate_duration_seconds: Option<i64>,
    update_time_threshold_seconds: Option<i64>,
    resource_diff_threshold: Option<f64>,
    degrade_time_minutes: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawThresholdCfg {
    cluster_strategy: Option<RawThreshold>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawThreshold {
    enable: Option<bool>,
    cpu_suppress_threshold_percent: Option<i64>,
    cpu_suppress_policy: Option<String>,
}

fn percent(
    key: &'static str,
    field: &'static str,
    v: Option<i64>,
    default: i64,
) -> Result<i64, ConfigError> {
    match v {
        None => Ok(default),
        Some(p) if (0..=100).contains(&p) => Ok(p),
        Some(p) => Err(ConfigError::Range {
            key,
            field,
            value: p.to_string(),
            range: "0..100",
        }),
    }
}

/// A positive count of `unit` seconds, capped at 30 days (larger is a typo, not a setting).
fn duration(
    key: &'static str,
    field: &'static str,
    v: Option<i64>,
    default: Duration,
    unit: u64,
) -> Result<Duration, ConfigError> {
    const MAX_SECONDS: u64 = 30 * 24 * 3600;
    match v {
        None => Ok(default),
        Some(n) if n > 0 && (n as u64).saturating_mul(unit) <= MAX_SECONDS => {
            Ok(Duration::from_secs(n as u64 * unit))
        }
        Some(n) => Err(ConfigError::Range {
            key,
            field,
            value: n.to_string(),
            range: if unit == 60 { "1..43200" } else { "1..2592000" },
        }),
    }
}

/// Parses `colocation-config`. Fields not given take Koordinator's defaults.
pub fn parse_colocation(json: &str) -> Result<ColocationConfig, ConfigError> {
    const KEY: &str = COLOCATION_KEY;
    let raw: RawColocation = serde_json::from_str(json).map_err(|e| ConfigError::Json {
        key: KEY,
        message: e.to_string(),
    })?;
    let d = ColocationConfig::default();
    let memory_calculate_policy = match raw.memory_calculate_policy.as_deref() {
        None => d.memory_calculate_policy,
        Some(s) if s.eq_ignore_ascii_case("usage") => MemoryPolicy::Usage,
        Some(s) if s.eq_ignore_ascii_case("request") => MemoryPolicy::Request,
        Some(s) => {
            return Err(ConfigError::Enum {
                key: KEY,
                field: "memoryCalculatePolicy",
                value: s.to_owned(),
                allowed: "usage, request",
            });
        }
    };
    let resource_diff_threshold = match raw.resource_diff_threshold {
        None => d.resource_diff_threshold,
        Some(t) if (0.0..=1.0).contains(&t) => t,
        Some(t) => {
            return Err(ConfigError::Range {
                key: KEY,
                field: "resourceDiffThreshold",
                value: t.to_string(),
                range: "0..1",
            });
        }
    };
    Ok(ColocationConfig {
        enable: raw.enable.unwrap_or(d.enable),
        cpu_reclaim_threshold_percent: percent(
            KEY,
            "cpuReclaimThresholdPercent",
            raw.cpu_reclaim_threshold_percent,
            d.cpu_reclaim_threshold_percent,
        )?,
        memory_reclaim_threshold_percent: percent(
            KEY,
            "memoryReclaimThresholdPercent",
            raw.memory_reclaim_threshold_percent,
            d.memory_reclaim_threshold_percent,
        )?,
        memory_calculate_policy,
        metric_aggregate_duration: duration(
            KEY,
            "metricAggregateDurationSeconds",
            raw.metric_aggregate_duration_seconds,
            d.metric_aggregate_duration,
            1,
        )?,
        update_time_threshold: duration(
            KEY,
            "updateTimeThresholdSeconds",
            raw.update_time_threshold_seconds,
            d.update_time_threshold,
            1,
        )?,
        resource_diff_threshold,
        degrade_time: duration(
            KEY,
            "degradeTimeMinutes",
            raw.degrade_time_minutes,
            d.degrade_time,
            60,
        )?,
    })
}

/// Parses `resource-threshold-config` (its `clusterStrategy`).
pub fn parse_threshold(json: &str) -> Result<ThresholdStrategy, ConfigError> {
    const KEY: &str = THRESHOLD_KEY;
    let raw: RawThresholdCfg = serde_json::from_str(json).map_err(|e| ConfigError::Json {
        key: KEY,
        message: e.to_string(),
    })?;
    let raw = raw.cluster_strategy.unwrap_or_default();
    let d = ThresholdStrategy::default();
    let cpu_suppress_policy = match raw.cpu_suppress_policy.as_deref() {
        None => d.cpu_suppress_policy,
        Some(s) if s.eq_ignore_ascii_case("cpuset") => SuppressPolicy::Cpuset,
        Some(s) if s.eq_ignore_ascii_case("cfsQuota") => SuppressPolicy::CfsQuota,
        Some(s) => {
            return Err(ConfigError::Enum {
                key: KEY,
                field: "clusterStrategy.cpuSuppressPolicy",
                value: s.to_owned(),
                allowed: "cpuset, cfsQuota",
            });
        }
    };
    Ok(ThresholdStrategy {
        enable: raw.enable.unwrap_or(d.enable),
        cpu_suppress_threshold_percent: percent(
            KEY,
            "clusterStrategy.cpuSuppressThresholdPercent",
            raw.cpu_suppress_threshold_percent,
            d.cpu_suppress_threshold_percent,
        )?,
        cpu_suppress_policy,
    })
}

/// The current configuration and how it got there. A ConfigMap update replaces each key that
/// parses; a key that does not parse keeps its last good value and its error is returned (the
/// caller logs it and counts it in a metric). A missing key or ConfigMap means the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigState {
    pub current: SloConfig,
}

impl ConfigState {
    /// Applies the ConfigMap's `data` (`None` = the ConfigMap does not exist).
    pub fn update(&mut self, data: Option<&BTreeMap<String, String>>) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        let get = |k: &str| data.and_then(|d| d.get(k));
        match get(COLOCATION_KEY).map(|s| parse_colocation(s)) {
            None => self.current.colocation = ColocationConfig::default(),
            Some(Ok(c)) => self.current.colocation = c,
            Some(Err(e)) => errors.push(e),
        }
        match get(THRESHOLD_KEY).map(|s| parse_threshold(s)) {
            None => self.current.threshold = ThresholdStrategy::default(),
            Some(Ok(t)) => self.current.threshold = t,
            Some(Err(e)) => errors.push(e),
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_koordinators() {
        let c = parse_colocation("{}").expect("empty object");
        assert_eq!(c, ColocationConfig::default());
        assert!(!c.enable);
        assert_eq!(
            (
                c.cpu_reclaim_threshold_percent,
                c.memory_reclaim_threshold_percent
            ),
            (60, 65)
        );
        assert_eq!(c.metric_aggregate_duration, Duration::from_secs(300));
        assert_eq!(c.degrade_time, Duration::from_secs(900));
        let t = parse_threshold("{}").expect("empty object");
        assert_eq!(t, ThresholdStrategy::default());
        assert_eq!(t.cpu_suppress_threshold_percent, 65);
        assert_eq!(t.cpu_suppress_policy, SuppressPolicy::Cpuset);
    }
}
