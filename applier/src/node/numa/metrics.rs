//! Memory locality's metric families, registered in the applier's registry.

use koord_runtime::metrics::{MetricError, register};
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use koord_translator::pod::spec_view::PodSpecView;

use super::report::{ContainerStatus, LocalityReport};

#[derive(Clone)]
pub struct LocalityMetrics {
    pub pages_migrated: IntCounter,
    pub migration_seconds: Histogram,
    pub local_ratio: IntGaugeVec,
    pub remote_pages: IntGaugeVec,
    pub containers: IntCounterVec,
}

const CONTAINER_LABELS: [&str; 3] = ["pod_namespace", "pod_name", "container_name"];

impl LocalityMetrics {
    pub fn register(registry: &Registry) -> Result<Self, MetricError> {
        let per_container = |name: &str, help: &str| {
            register(
                registry,
                IntGaugeVec::new(Opts::new(name, help), &CONTAINER_LABELS),
            )
        };
        Ok(Self {
            pages_migrated: register(
                registry,
                IntCounter::new(
                    "koord_applier_locality_pages_migrated_total",
                    "Pages moved from remote to local NUMA nodes by memory locality passes.",
                ),
            )?,
            migration_seconds: register(
                registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "koord_applier_locality_migration_duration_seconds",
                        "Time in migrate_pages/move_pages for one container's pass.",
                    )
                    .buckets(vec![
                        0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0,
                    ]),
                ),
            )?,
            local_ratio: per_container(
                "koord_applier_locality_local_memory_ratio_percent",
                "Percent of a container's mapped memory on its local NUMA nodes after the last pass.",
            )?,
            remote_pages: per_container(
                "koord_applier_locality_remote_pages",
                "Pages of a container still on remote NUMA nodes after the last pass.",
            )?,
            containers: register(
                registry,
                IntCounterVec::new(
                    Opts::new(
                        "koord_applier_locality_container_passes_total",
                        "Container locality passes by result (completed, failed, skipped).",
                    ),
                    &["result"],
                ),
            )?,
        })
    }

    /// Records a pass; returns the label sets it set, so they can be removed with the pod.
    pub fn observe(&self, pod: &PodSpecView, report: &LocalityReport) -> Vec<[String; 3]> {
        let mut labels = Vec::new();
        for c in &report.containers {
            let result = match c.status {
                ContainerStatus::Completed => "completed",
                ContainerStatus::Failed => "failed",
                ContainerStatus::Skipped => "skipped",
            };
            self.containers.with_label_values(&[result]).inc();
            self.pages_migrated.inc_by(c.pages_migrated);
            if c.method.is_some() {
                self.migration_seconds
                    .observe(c.migrate_micros as f64 / 1_000_000.0);
            }
            if let Some(after) = &c.after {
                let l = [pod.namespace.clone(), pod.name.clone(), c.name.clone()];
                let refs = [l[0].as_str(), l[1].as_str(), l[2].as_str()];
                self.local_ratio
                    .with_label_values(&refs)
                    .set(i64::try_from(after.local_ratio_percent()).unwrap_or(i64::MAX));
                self.remote_pages
                    .with_label_values(&refs)
                    .set(i64::try_from(after.remote_pages).unwrap_or(i64::MAX));
                labels.push(l);
            }
        }
        labels
    }

    pub fn forget(&self, labels: &[[String; 3]]) {
        for l in labels {
            let refs = [l[0].as_str(), l[1].as_str(), l[2].as_str()];
            let _ = self.local_ratio.remove_label_values(&refs);
            let _ = self.remote_pages.remove_label_values(&refs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::numa::test_pass::{completed, view};

    #[test]
    fn metrics_record_and_forget() {
        let reg = Registry::new();
        let m = LocalityMetrics::register(&reg).expect("register");
        let labels = m.observe(&view(), &completed(40));
        let text = koord_runtime::metrics::render;
        let t = text(&reg);
        for needle in [
            "koord_applier_locality_pages_migrated_total 40",
            "koord_applier_locality_migration_duration_seconds_count 1",
            "koord_applier_locality_local_memory_ratio_percent{container_name=\"redis\",pod_name=\"redis-0\",pod_namespace=\"shop\"} 75",
            "koord_applier_locality_remote_pages{container_name=\"redis\",pod_name=\"redis-0\",pod_namespace=\"shop\"} 7",
            "koord_applier_locality_container_passes_total{result=\"completed\"} 1",
        ] {
            assert!(t.contains(needle), "missing {needle} in\n{t}");
        }
        m.forget(&labels);
        assert!(!text(&reg).contains("local_memory_ratio_percent{"));
        assert!(
            LocalityMetrics::register(&reg).is_err(),
            "names are unique per registry"
        );
    }
}
