//! Colocation's metric families, registered in the applier's registry (`/metrics`) by `run`.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{Gauge, GaugeVec, IntCounterVec, Opts, Registry};

#[derive(Clone)]
pub struct ColocationMetrics {
    registry: Registry,
    /// ConfigMap keys that failed to parse (the last good value stays), by key.
    pub config_errors: IntCounterVec,
    /// What the Node advertises (after our last patch), by resource.
    pub batch_advertised: GaugeVec,
    /// Node status patches by reason (missing, moved, expired) and result (ok, error).
    pub node_patches: IntCounterVec,
    /// CPUs BE pods may use now (the suppression budget); -1 when not suppressing.
    pub be_cpu_limit: Gauge,
    /// CPUs BE pods used over the last interval.
    pub be_cpu_usage: Gauge,
    /// 1 while LS/system pressure keeps BE below its share (node CPUs x threshold%).
    pub be_suppressed: Gauge,
    /// 1 while batch resources are degraded to 0 (usage data too old).
    pub degraded: Gauge,
    /// BE parent writes by policy and result.
    pub suppress_writes: IntCounterVec,
}

impl ColocationMetrics {
    /// Registers the families in `registry` (the applier's; a fresh one in tests).
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        let counters = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let gauge = |name: &str, help: &str| register(registry, Gauge::new(name, help));
        let m = Self {
            registry: registry.clone(),
            config_errors: counters(
                "koord_applier_colocation_config_errors_total",
                "ConfigMap keys that failed to parse; the last good value is kept.",
                &["key"],
            )?,
            batch_advertised: register(
                registry,
                GaugeVec::new(
                    Opts::new(
                        "koord_applier_batch_resource_advertised",
                        "Batch resource on the Node after the last patch (batch-cpu in milli-cores, batch-memory in bytes).",
                    ),
                    &["resource"],
                ),
            )?,
            node_patches: counters(
                "koord_applier_node_status_patches_total",
                "Node status patches of the batch resources by reason and result.",
                &["reason", "result"],
            )?,
            be_cpu_limit: gauge(
                "koord_applier_be_cpu_limit_cores",
                "CPUs BE pods may use now (suppression budget); -1 when suppression is off.",
            )?,
            be_cpu_usage: gauge(
                "koord_applier_be_cpu_usage_cores",
                "CPUs BE pods used over the last sampling interval.",
            )?,
            be_suppressed: gauge(
                "koord_applier_be_suppressed",
                "1 while LS and system usage keep BE pods below node CPUs x cpuSuppressThresholdPercent.",
            )?,
            degraded: gauge(
                "koord_applier_batch_degraded",
                "1 while batch resources are degraded to 0 because usage data is older than degradeTimeMinutes.",
            )?,
            suppress_writes: counters(
                "koord_applier_be_suppress_writes_total",
                "Writes to the BE parent cgroup by policy and result.",
                &["policy", "result"],
            )?,
        };
        m.be_cpu_limit.set(-1.0);
        // Both keys from the start, so `increase(...)` has a series before the first error.
        for key in [
            koord_api::colocation::COLOCATION_KEY,
            super::config::THRESHOLD_KEY,
        ] {
            m.config_errors.with_label_values(&[key]);
        }
        Ok(m)
    }

    /// The text exposition of the registry these families are in.
    pub fn render(&self) -> String {
        koord_runtime::metrics::render(&self.registry)
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_exist_at_zero_for_both_keys() {
        let m = ColocationMetrics::register(&Registry::new()).expect("metrics");
        let text = m.render();
        for key in ["colocation-config", "resource-threshold-config"] {
            let line = format!("koord_applier_colocation_config_errors_total{{key=\"{key}\"}} 0");
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
    }
}
