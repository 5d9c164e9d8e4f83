//! The locality feature inside `koord-applier run`: every few seconds it looks at the watch's
//! pod cache (no second watch), asks the [`Scheduler`] which pods are due, runs their passes
//! one at a time on a blocking thread (a migration may take seconds; cgroup reconciling is
//! never held up by it), posts the Event and updates the metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};
use tokio::sync::mpsc;

use super::locality::{Migrator, pod_locality};
use super::report::{ContainerStatus, LocalityReport};
use super::schedule::{Scheduler, Trigger};
use crate::event_sink::SinkMsg;
use crate::events::{EventKind, PodEvent};
use crate::podview::PodView;

/// Locality metric families, registered in the applier's registry.
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
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self {
            pages_migrated: IntCounter::new(
                "koord_applier_locality_pages_migrated_total",
                "Pages moved from remote to local NUMA nodes by memory locality passes.",
            )?,
            migration_seconds: Histogram::with_opts(
                HistogramOpts::new(
                    "koord_applier_locality_migration_duration_seconds",
                    "Time in migrate_pages/move_pages for one container's pass.",
                )
                .buckets(vec![
                    0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0,
                ]),
            )?,
            local_ratio: IntGaugeVec::new(
                Opts::new(
                    "koord_applier_locality_local_memory_ratio_percent",
                    "Percent of a container's mapped memory on its local NUMA nodes after the last pass.",
                ),
                &CONTAINER_LABELS,
            )?,
            remote_pages: IntGaugeVec::new(
                Opts::new(
                    "koord_applier_locality_remote_pages",
                    "Pages of a container still on remote NUMA nodes after the last pass.",
                ),
                &CONTAINER_LABELS,
            )?,
            containers: IntCounterVec::new(
                Opts::new(
                    "koord_applier_locality_container_passes_total",
                    "Container locality passes by result (completed, failed, skipped).",
                ),
                &["result"],
            )?,
        };
        registry.register(Box::new(m.pages_migrated.clone()))?;
        registry.register(Box::new(m.migration_seconds.clone()))?;
        registry.register(Box::new(m.local_ratio.clone()))?;
        registry.register(Box::new(m.remote_pages.clone()))?;
        registry.register(Box::new(m.containers.clone()))?;
        Ok(m)
    }

    /// Records a pass; returns the label sets it set, so they can be removed with the pod.
    pub fn observe(&self, pod: &PodView, report: &LocalityReport) -> Vec<[String; 3]> {
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

/// The Event a pass deserves. A periodic pass that moved nothing and failed nothing is not
/// news: it posts nothing.
pub fn event_for(pod: &PodView, report: &LocalityReport, trigger: Trigger) -> Option<PodEvent> {
    let ev = report.event.as_ref()?;
    let quiet = trigger == Trigger::Interval
        && !report.failed()
        && report.containers.iter().all(|c| c.pages_migrated == 0);
    if quiet {
        return None;
    }
    Some(PodEvent {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        kind: if ev.kind == "Warning" {
            EventKind::Warning
        } else {
            EventKind::Normal
        },
        reason: ev.reason,
        message: truncate(&ev.message),
    })
}

/// The API server refuses Event notes over 1 KiB.
fn truncate(s: &str) -> String {
    const MAX: usize = 1024;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut cut = MAX - 3;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

fn is_active(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Scans the pod cache every `period` until the process exits.
pub async fn run(
    migrator: Arc<Migrator>,
    store: Store<Pod>,
    events: mpsc::Sender<SinkMsg>,
    metrics: Option<LocalityMetrics>,
    period: Duration,
) {
    let mut sched = Scheduler::new();
    let mut labels: HashMap<String, Vec<[String; 3]>> = HashMap::new();
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        for pod in store.state() {
            if !is_active(&pod) {
                continue;
            }
            let Ok(view) = PodView::from_pod(&pod) else {
                continue;
            };
            let decision = pod_locality(&view);
            let ids: Vec<String> = view
                .containers
                .iter()
                .filter_map(|c| c.container_id.clone())
                .collect();
            let Some(trigger) = sched.due(&view.uid, decision.as_ref(), ids, Instant::now()) else {
                continue;
            };
            let m = migrator.clone();
            let v = view.clone();
            let Ok(report) = tokio::task::spawn_blocking(move || m.run_pod(&v)).await else {
                continue;
            };
            tracing::info!(pod = %view.name, namespace = %view.namespace, ?trigger, event = ?report.event.as_ref().map(|e| e.reason), "memory locality pass");
            if let Some(m) = &metrics {
                labels.insert(view.uid.clone(), m.observe(&view, &report));
            }
            if let Some(ev) = event_for(&view, &report, trigger) {
                let _ = events.try_send(SinkMsg::Event(ev));
            }
        }
        // Pods gone from the cache for a while: drop their state and series.
        for uid in sched.expire(now, period * 30) {
            if let (Some(m), Some(l)) = (&metrics, labels.remove(&uid)) {
                m.forget(&l);
            }
        }
    }
}

/// Starts the worker for `run` (its metrics in `registry`).
pub fn spawn_for_run(
    migrator: Migrator,
    store: Store<Pod>,
    events: mpsc::Sender<SinkMsg>,
    registry: &Registry,
) {
    let metrics = match LocalityMetrics::new(registry) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e, "memory locality metrics not registered");
            None
        }
    };
    tokio::spawn(run(
        Arc::new(migrator),
        store,
        events,
        metrics,
        Duration::from_secs(10),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::layout::KubeQos;
    use crate::numa::numa_maps::Locality;
    use crate::numa::report::ContainerLocality;

    fn view() -> PodView {
        PodView {
            namespace: "shop".into(),
            name: "redis-0".into(),
            uid: "ab".into(),
            kube_qos: KubeQos::Burstable,
            resolved_qos: None,
            containers: Vec::new(),
            overhead_memory: 0,
        }
    }

    fn completed(moved: u64) -> LocalityReport {
        let mut c = ContainerLocality::new("redis", ContainerStatus::Completed, None);
        c.local_nodes = [0].into_iter().collect();
        c.remote_nodes = [1].into_iter().collect();
        c.pages_migrated = moved;
        c.method = Some(super::super::report::Method::MigratePages);
        c.migrate_micros = 2_000;
        c.after = Some(Locality {
            local_bytes: 3,
            remote_bytes: 1,
            remote_pages: 7,
            ..Default::default()
        });
        LocalityReport::new(vec![c])
    }

    #[test]
    fn periodic_passes_that_moved_nothing_are_quiet() {
        let v = view();
        assert!(event_for(&v, &completed(0), Trigger::Interval).is_none());
        let ev = event_for(&v, &completed(0), Trigger::Start).expect("first pass always reports");
        assert_eq!(
            (ev.reason, ev.kind),
            ("MemoryLocalityCompleted", EventKind::Normal)
        );
        assert!(event_for(&v, &completed(5), Trigger::Interval).is_some());
        let failed = LocalityReport::new(vec![ContainerLocality::new(
            "redis",
            ContainerStatus::Failed,
            Some("boom".into()),
        )]);
        let ev = event_for(&v, &failed, Trigger::Interval).expect("failures always report");
        assert_eq!(
            (ev.reason, ev.kind),
            ("MemoryLocalityFailed", EventKind::Warning)
        );
        assert!(event_for(&v, &LocalityReport::new(vec![]), Trigger::Start).is_none());
        // Many containers: the note is cut to what the API server accepts.
        let many: Vec<ContainerLocality> = (0..100)
            .map(|i| {
                let mut c = completed(1).containers.remove(0);
                c.name = format!("container-{i}");
                c
            })
            .collect();
        let ev = event_for(&v, &LocalityReport::new(many), Trigger::Start).expect("event");
        assert!(ev.message.len() <= 1024 && ev.message.ends_with("..."));
    }

    #[test]
    fn metrics_record_and_forget() {
        let reg = Registry::new();
        let m = LocalityMetrics::new(&reg).expect("register");
        let labels = m.observe(&view(), &completed(40));
        let text = |reg: &Registry| {
            let mut buf = Vec::new();
            let _ = prometheus::Encoder::encode(
                &prometheus::TextEncoder::new(),
                &reg.gather(),
                &mut buf,
            );
            String::from_utf8(buf).unwrap_or_default()
        };
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
            LocalityMetrics::new(&reg).is_err(),
            "names are unique per registry"
        );
    }
}
