//! `colocation-config`, the key of the cluster ConfigMap (`kube-system/ack-slo-config`) that
//! switches colocation on: Koordinator's `ColocationCfg` cluster fields, a flat JSON object,
//! parsed with Koordinator's names, defaults and hard ranges.
//!
//! Both halves read it and must agree on what "colocation on" means: the applier advertises
//! batch capacity on its Node only then, and the webhook moves a BE pod's cpu/memory to
//! `kubernetes.io/batch-cpu`/`batch-memory` only then (a pod asking for batch resources no
//! node advertises would stay Pending). So there is one parser, here: colocation is on when
//! [`parse_colocation`] accepts the text and its `enable` is `true`; a missing key means the
//! defaults (off); a text it refuses keeps the last good value on both sides.
//!
//! Unknown fields (Koordinator has more, e.g. `cpuCalculatePolicy`, `nodeConfigs`) are
//! accepted and ignored, so a Koordinator ConfigMap parses.

use std::time::Duration;

use serde::Deserialize;

/// The key in the cluster ConfigMap.
pub const COLOCATION_KEY: &str = "colocation-config";

/// How the memory of latency-sensitive pods is counted against the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryPolicy {
    /// What the pods use (memory usage minus inactive file), averaged over the window.
    Usage,
    /// What the pods requested: lends less, never takes back memory a pod was promised.
    Request,
}

impl MemoryPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usage => "usage",
            Self::Request => "request",
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

/// Why a key of the cluster ConfigMap was refused (this key's and the applier's other keys).
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

/// A percentage field, 0..100; `default` when absent.
pub fn percent(
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
pub fn duration(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_koordinators_and_off() {
        let c = parse_colocation("{}").expect("empty object");
        assert_eq!(c, ColocationConfig::default());
        assert!(!c.enable);
        assert!(parse_colocation(r#"{"enable": true}"#).expect("on").enable);
        assert!(
            !parse_colocation(r#"{"enable": null}"#)
                .expect("null")
                .enable
        );
    }

    #[test]
    fn a_refused_text_is_an_error_not_off() {
        for bad in [
            r#"{"enable": "true"}"#,
            r#"{"enable": true, "cpuReclaimThresholdPercent": 120}"#,
            r#"{"enable": true"#,
            "[]",
        ] {
            assert!(parse_colocation(bad).is_err(), "{bad}");
        }
    }
}
