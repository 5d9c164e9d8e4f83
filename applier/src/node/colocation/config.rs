//! The two keys of the cluster ConfigMap (`kube-system/ack-slo-config`) that drive colocation,
//! parsed purely, with Koordinator's field names and defaults and hard ranges.
//!
//! - `colocation-config`: a flat JSON object (Koordinator's `ColocationCfg` cluster fields),
//!   parsed by `koord_api::colocation`, the one parser the webhook uses too: both halves agree
//!   on whether colocation is on.
//! - `resource-threshold-config`: `{"clusterStrategy": {"enable", "cpuSuppressThresholdPercent",
//!   "cpuSuppressPolicy"}}` (Koordinator's `ResourceThresholdCfg`). Decision: the key lives
//!   where Koordinator keeps it, so an existing `slo-controller-config` can be copied as is.
//!
//! Unknown fields (Koordinator has more, e.g. `cpuCalculatePolicy`, `nodeConfigs`,
//! `memoryEvictThresholdPercent`) are accepted and ignored, so a Koordinator ConfigMap parses.
//! Each key is parsed on its own: a broken key keeps its last good value ([`ConfigState`]) and the
//! other key still updates. A missing key means the defaults.

use std::collections::BTreeMap;

use serde::Deserialize;

use koord_api::colocation::percent;
pub use koord_api::colocation::{
    COLOCATION_KEY, ColocationConfig, ConfigError, MemoryPolicy, parse_colocation,
};

pub const THRESHOLD_KEY: &str = "resource-threshold-config";

/// How BE pods are squeezed when the node is busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressPolicy {
    /// `cpuset.cpus` of the BE parent cgroup: whole CPUs, taken from the end.
    Cpuset,
    /// `cpu.cfs_quota_us` (v1) / `cpu.max` (v2) of the BE parent cgroup: fractions of CPUs.
    CfsQuota,
}

impl SuppressPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpuset => "cpuset",
            Self::CfsQuota => "cfsQuota",
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
    use std::time::Duration;

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
