//! The pod source of `run`: a reflector over this node's pods (field selector on
//! `spec.nodeName`), every change applied at once, every pod re-applied each resync.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::apply::Applier;
use crate::event_sink::SinkMsg;
use crate::events::{REASON_REFUSED, event_for};
use crate::pod_event::{EventKind, PodEvent};
use crate::pod_phase;
use crate::pod_spec_view::PodSpecView;

/// Only this node's pods.
pub fn watcher_config(node: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("spec.nodeName={node}"))
}

fn has_annotation(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(koord_api::keys::ANNOTATION_RESOLVED_QOS))
}

/// Applies one pod and returns the Event it deserves. Blocking (file IO); its log lines carry
/// the pod's namespace, name and UID (the `reconcile` span).
pub fn reconcile(applier: &Applier, pod: &Pod) -> Option<PodEvent> {
    if !pod_phase::is_active(pod) || !has_annotation(pod) {
        return None;
    }
    let meta = &pod.metadata;
    let span = tracing::info_span!(
        "reconcile",
        namespace = meta.namespace.as_deref().unwrap_or_default(),
        pod = meta.name.as_deref().unwrap_or_default(),
        uid = meta.uid.as_deref().unwrap_or_default(),
    );
    let _in_pod = span.enter();
    match PodSpecView::from_pod(pod) {
        Ok(view) => {
            let report = applier.apply(&view);
            tracing::debug!(pod = %view.name, namespace = %view.namespace, status = ?report.status, "reconciled");
            event_for(&report)
        }
        Err(e) => Some(PodEvent {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            kind: EventKind::Warning,
            reason: REASON_REFUSED,
            message: format!("koordinator.sh/resolved-qos refused, nothing written: {e}"),
        }),
    }
}

/// Everything the watch loop needs.
pub struct Watch {
    pub applier: Arc<Applier>,
    /// QoS-class parents and resctrl groups, reconciled after each resync's pod passes.
    pub node_qos: Option<Arc<crate::nodeqos::NodeQos>>,
    pub events: mpsc::Sender<SinkMsg>,
    pub resync: Duration,
    pub ready: Arc<AtomicBool>,
}

impl Watch {
    async fn apply_pods(&self, pods: Vec<Arc<Pod>>) {
        let applier = self.applier.clone();
        let span = tracing::Span::current();
        let evs = tokio::task::spawn_blocking(move || {
            let _in_task = span.enter();
            crate::apply::par_map(&pods, |p| reconcile(&applier, p))
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for ev in evs {
            // A full queue means the API server is slow: drop rather than stall reconciling.
            let _ = self.events.try_send(SinkMsg::Event(ev));
        }
    }

    /// The node-level pass over every active pod (parents' group identity, resctrl groups).
    async fn resync_node(&self, pods: Vec<Arc<Pod>>) {
        let Some(node) = self.node_qos.clone() else {
            return;
        };
        let span = tracing::info_span!("node_qos");
        let _ = tokio::task::spawn_blocking(move || {
            let _in_pass = span.enter();
            let views: Vec<PodSpecView> = pods
                .iter()
                .filter(|p| pod_phase::is_active(p) && has_annotation(p))
                .filter_map(|p| PodSpecView::from_pod(p).ok())
                .collect();
            let r = node.resync(&views);
            tracing::debug!(report = ?r, "node qos resync");
        })
        .await;
    }

    /// Every pod again, then the node level: repairs values changed behind our back.
    async fn resync(&self, store: &Store<Pod>) {
        self.count_managed(store);
        self.apply_pods(store.state()).await;
        self.resync_node(store.state()).await;
    }

    fn count_managed(&self, store: &Store<Pod>) {
        if let Some(m) = self.applier_metrics() {
            let n = store
                .state()
                .iter()
                .filter(|p| pod_phase::is_active(p) && has_annotation(p))
                .count();
            m.pods_managed.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    fn applier_metrics(&self) -> Option<&crate::metrics::Metrics> {
        self.applier.metrics()
    }

    /// Watches `api` until the stream ends (it does not, short of a shutdown).
    pub async fn run(self, api: Api<Pod>, node: &str) {
        let (store, writer) = reflector::store::<Pod>();
        self.run_with_store(api, node, store, writer).await;
    }

    /// [`Self::run`] filling a store the caller also reads (the collectors' pod list).
    pub async fn run_with_store(
        self,
        api: Api<Pod>,
        node: &str,
        store: Store<Pod>,
        writer: reflector::store::Writer<Pod>,
    ) {
        let stream = watcher(api, watcher_config(node))
            // managedFields are large and never read: do not keep them in the cache.
            .modify(|p: &mut Pod| p.metadata.managed_fields = None)
            .default_backoff()
            .reflect(writer);
        let mut stream = std::pin::pin!(stream);
        let mut resync = tokio::time::interval(self.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut known: HashSet<String> = HashSet::new();
        loop {
            tokio::select! {
                ev = stream.next() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                            if let Some(uid) = pod.metadata.uid.clone() { known.insert(uid); }
                            self.apply_pods(vec![Arc::new(pod)]).await;
                        }
                        Ok(watcher::Event::Delete(pod)) => {
                            if let Some(uid) = pod.metadata.uid.clone() {
                                known.remove(&uid);
                                self.applier.forget(&uid);
                                let _ = self.events.try_send(SinkMsg::Forget(uid));
                            }
                            self.count_managed(&store);
                        }
                        Ok(watcher::Event::InitDone) => {
                            // Pods deleted while the watch was down: forget them too.
                            let live: HashSet<String> = store.state().iter().filter_map(|p| p.metadata.uid.clone()).collect();
                            for gone in known.difference(&live) {
                                self.applier.forget(gone);
                                let _ = self.events.try_send(SinkMsg::Forget(gone.clone()));
                            }
                            known = live;
                            self.count_managed(&store);
                            self.ready.store(true, Ordering::Relaxed);
                            // Every listed pod was applied as it arrived: the node level now.
                            self.resync_node(store.state()).await;
                        }
                        Ok(watcher::Event::Init) => {}
                        Err(e) => tracing::warn!(error = %e, "pod watch error; retrying with backoff"),
                    }
                }
                _ = resync.tick() => {
                    if self.ready.load(Ordering::Relaxed) {
                        self.resync(&store).instrument(tracing::info_span!("resync")).await;
                    }
                }
            }
        }
    }
}
