//! The NRI plugin's metric families, registered in the applier's registry.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

#[derive(Clone)]
pub struct NriMetrics {
    /// 1 for the mode the applier is in: `nri` (values set at container creation, the watch
    /// repairs) or `watch` (the watch path alone); the other is 0.
    pub mode: IntGaugeVec,
    /// 1 while registered, labelled with the runtime's name and version.
    pub runtime: IntGaugeVec,
    /// Answers by event and outcome (`adjusted`, or why not).
    pub requests: IntCounterVec,
    /// Seconds from a request's arrival to its answer, by event.
    pub answer_seconds: HistogramVec,
    /// Connection attempts by result (`registered`, `failed`, `lost`).
    pub connections: IntCounterVec,
    /// Unsolicited container updates (`UpdateContainers`) by result.
    pub updates: IntCounterVec,
}

pub const MODE_NRI: &str = "nri";
pub const MODE_WATCH: &str = "watch";

impl NriMetrics {
    pub fn register(r: &Registry) -> Result<Self, MetricError> {
        let counters = |name: &str, help: &str, labels: &[&str]| {
            register(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let m = Self {
            mode: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_apply_mode",
                        "How container values are applied (1 = in force): nri (at container creation, the watch repairs) or watch (after the container started).",
                    ),
                    &["mode"],
                ),
            )?,
            runtime: register(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "koord_applier_nri_runtime_info",
                        "The container runtime the NRI plugin is registered with (1 while connected).",
                    ),
                    &["runtime", "version"],
                ),
            )?,
            requests: counters(
                "koord_applier_nri_requests_total",
                "NRI requests answered, by event and outcome (adjusted, or why no adjustment was made).",
                &["event", "outcome"],
            )?,
            answer_seconds: register(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "koord_applier_nri_answer_duration_seconds",
                        "Time from an NRI request's arrival to the plugin's answer.",
                    )
                    .buckets(vec![
                        0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
                        0.05, 0.1, 0.25, 0.5, 1.0,
                    ]),
                    &["event"],
                ),
            )?,
            connections: counters(
                "koord_applier_nri_connections_total",
                "NRI connections by result: registered, failed (could not connect or register), lost.",
                &["result"],
            )?,
            updates: counters(
                "koord_applier_nri_container_updates_total",
                "Containers sent to the runtime in UpdateContainers, by result.",
                &["result"],
            )?,
        };
        // Every result from the start, so `increase(...{result="lost"}[...])` has a series to
        // look at before the first loss.
        for result in ["registered", "failed", "lost"] {
            m.connections.with_label_values(&[result]);
        }
        m.set_mode(false);
        Ok(m)
    }

    pub fn set_mode(&self, nri: bool) {
        self.mode.with_label_values(&[MODE_NRI]).set(i64::from(nri));
        self.mode
            .with_label_values(&[MODE_WATCH])
            .set(i64::from(!nri));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_mode_and_every_connection_result_from_the_start() {
        let r = Registry::new();
        NriMetrics::register(&r).expect("metrics");
        let text = koord_runtime::metrics::render(&r);
        for line in [
            "koord_applier_apply_mode{mode=\"watch\"} 1",
            "koord_applier_apply_mode{mode=\"nri\"} 0",
            "koord_applier_nri_connections_total{result=\"registered\"} 0",
            "koord_applier_nri_connections_total{result=\"failed\"} 0",
            "koord_applier_nri_connections_total{result=\"lost\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
