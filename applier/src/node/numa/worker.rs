//! The locality feature inside `koord-applier run`: every few seconds it looks at the watch's
//! pod cache (no second watch), asks the [`Scheduler`] which pods are due, runs their passes
//! one at a time on a blocking thread (a migration may take seconds; cgroup reconciling is
//! never held up by it), posts the Event and updates the metrics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use koord_translator::pod::event::{EventKind, PodEvent, truncate_note};
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::locality::{Migrator, pod_locality};
use super::metrics::LocalityMetrics;
use super::report::LocalityReport;
use super::schedule::{Scheduler, Trigger};
use crate::event_sink::SinkMsg;

/// The Event a pass deserves. A periodic pass that moved nothing and failed nothing is not
/// news: it posts nothing.
pub fn event_for(pod: &PodSpecView, report: &LocalityReport, trigger: Trigger) -> Option<PodEvent> {
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
        message: truncate_note(ev.message.clone()),
    })
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
            if !phase::is_active(&pod) {
                continue;
            }
            let Ok(view) = PodSpecView::from_pod(&pod) else {
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
            let span = tracing::info_span!("locality_pass", namespace = %view.namespace, pod = %view.name, uid = %view.uid);
            let Ok(report) =
                tokio::task::spawn_blocking(move || span.in_scope(|| m.run_pod(&v))).await
            else {
                continue;
            };
            tracing::info!(pod = %view.name, namespace = %view.namespace, ?trigger, event = ?report.event.as_ref().map(|e| e.reason), "memory locality pass");
            if let Some(t) = report.timings {
                // Fields are only built when debug is on.
                tracing::debug!(
                    pod = %view.name,
                    pass_micros = t.pass_micros,
                    topology_micros = t.topology_micros,
                    containers = ?report.containers.iter().map(|c| (&c.name, c.timings)).collect::<Vec<_>>(),
                    "memory locality pass timings"
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::numa::report::{ContainerLocality, ContainerStatus};
    use crate::node::numa::test_pass::{completed, view};

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
}
