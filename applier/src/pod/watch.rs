//! The pod source of `run`: a reflector over this node's pods (field selector on
//! `spec.nodeName`), every change applied at once, every pod re-applied each resync. The
//! ancestors' memory protection follows the initial list, each resync, and (coalesced, see
//! [`ANCESTORS_DELAY`]) pod deletions and pods whose pod-level protection changed.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::mpsc;
use tracing::Instrument as _;

use koord_translator::cgroup::Outcome;
use koord_translator::pod::apply::Applier;
use koord_translator::pod::event::{EventKind, PodEvent};
use koord_translator::pod::events::{REASON_REFUSED, event_for};
use koord_translator::pod::phase;
use koord_translator::pod::plan::Target;
use koord_translator::pod::report::PodReport;
use koord_translator::pod::spec_view::PodSpecView;

use crate::event_sink::SinkMsg;
use crate::metrics::Metrics;
use crate::node::ancestors::event::ancestors_event;
use crate::node::ancestors::{MemoryAncestors, ProtectedPod};
use crate::node::nri::link::{Link, Nudge};
use crate::node::nri::proto::ContainerUpdate;

/// Pod events that change what the ancestors should hold (a deletion, a pod whose pod-level
/// protection was written) make one ancestors pass this long after the first of them: a burst
/// of pod changes is one pass, not one per pod, and a new LS pod is protected within seconds
/// rather than at the next resync.
pub const ANCESTORS_DELAY: Duration = Duration::from_secs(2);

/// Only this node's pods, the watch renewed every [`koord_runtime::WATCH_TIMEOUT_SECS`]: at
/// the server's default of 290 s, a pod watch that stopped delivering left the node's new pods
/// unseen, so unprotected, for ~5 minutes (seen on the cgroup v2 test node after the applier
/// pod was replaced).
pub fn watcher_config(node: &str) -> watcher::Config {
    watcher::Config::default()
        .fields(&format!("spec.nodeName={node}"))
        .timeout(koord_runtime::WATCH_TIMEOUT_SECS)
}

fn has_annotation(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(koord_api::keys::ANNOTATION_RESOLVED_QOS))
}

/// What one pod's pass gave the watch.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// The Event the pass deserves.
    pub event: Option<PodEvent>,
    /// Set when the pass wrote the pod's own `memory.min`/`memory.low`: the ancestors' sums
    /// change.
    pub protection_changed: Option<ProtectedPod>,
    /// Containers whose cgroup the pass wrote, for the runtime's record (NRI mode).
    pub updates: Vec<ContainerUpdate>,
}

/// Whether a pass wrote the pod cgroup's `memory.min` or `memory.low`.
fn pod_protection_written(report: &PodReport) -> bool {
    report.knobs.iter().any(|k| {
        k.target == Target::Pod
            && k.outcome == Outcome::Written
            && matches!(
                k.knob,
                koord_api::knobs::MEMORY_MIN | koord_api::knobs::MEMORY_LOW
            )
    })
}

/// Applies one pod and returns the Event it deserves. Blocking (file IO); its log lines carry
/// the pod's namespace, name and UID (the `reconcile` span). `nri`: the plugin's link, when
/// the applier runs one.
pub fn reconcile(applier: &Applier, nri: Option<&Link>, pod: &Pod) -> Reconciled {
    if !phase::is_active(pod) || !has_annotation(pod) {
        return Reconciled::default();
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
            let mut report = applier.apply(&view);
            tracing::debug!(pod = %view.name, namespace = %view.namespace, status = ?report.status, "reconciled");
            report.set_at_creation = nri.is_some_and(|l| l.set_at_creation(&view));
            Reconciled {
                updates: nri
                    .map(|l| l.updates_after(&view, &report))
                    .unwrap_or_default(),
                event: event_for(&report),
                protection_changed: pod_protection_written(&report).then(|| ProtectedPod {
                    namespace: view.namespace.clone(),
                    name: view.name.clone(),
                    uid: view.uid.clone(),
                    kube_qos: view.kube_qos,
                }),
            }
        }
        Err(e) => Reconciled {
            event: Some(PodEvent {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                kind: EventKind::Warning,
                reason: REASON_REFUSED,
                message: format!("koordinator.sh/resolved-qos refused, nothing written: {e}"),
            }),
            protection_changed: None,
            updates: Vec::new(),
        },
    }
}

/// An ancestors pass waiting to run: when, and the pods to tell about it.
#[derive(Debug, Default)]
struct AncestorsDue {
    at: Option<tokio::time::Instant>,
    pods: Vec<ProtectedPod>,
}

impl AncestorsDue {
    /// Asks for a pass (the first ask of a burst sets the time).
    fn ask(&mut self, pods: Vec<ProtectedPod>) {
        self.at
            .get_or_insert_with(|| tokio::time::Instant::now() + ANCESTORS_DELAY);
        for p in pods {
            if !self.pods.iter().any(|q| q.uid == p.uid) {
                self.pods.push(p);
            }
        }
    }

    /// The pods to tell; nothing is due any more (the pass runs now).
    fn take(&mut self) -> Vec<ProtectedPod> {
        self.at = None;
        std::mem::take(&mut self.pods)
    }
}

/// The next pod whose sandbox the NRI plugin saw start; pending forever without a plugin.
async fn next_nudge(rx: &mut Option<mpsc::Receiver<Nudge>>) -> Option<Nudge> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The ancestors check, beside the watch loop (never behind a pod's pass or a busy systemd):
/// every `every`, the files the last ancestors pass left are re-read and any that moved is put
/// back at once; then the loop is told, for a pass that decides again.
async fn put_back_moved(
    ancestors: Arc<MemoryAncestors>,
    metrics: Option<Arc<Metrics>>,
    every: Duration,
    ready: Arc<AtomicBool>,
    moved: Arc<tokio::sync::Notify>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !ready.load(Ordering::Relaxed) {
            continue;
        }
        let a = ancestors.clone();
        let Ok(Some(path)) = tokio::task::spawn_blocking(move || a.put_back_moved()).await else {
            continue;
        };
        tracing::info!(
            file = %path.display(),
            "QoS-level memory protection changed outside the applier; put back, reconciling now"
        );
        if let Some(m) = &metrics {
            m.qos_protection_repairs.inc();
        }
        moved.notify_one();
    }
}

/// Stops a task when dropped (the watch's check ends with the watch).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until_due(at: Option<tokio::time::Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

/// Everything the watch loop needs.
pub struct Watch {
    pub applier: Arc<Applier>,
    /// The applier's metrics (the managed pods, the ancestors' repairs).
    pub metrics: Option<Arc<Metrics>>,
    /// QoS-class parents and resctrl groups, reconciled after each resync's pod passes.
    pub node_qos: Option<Arc<crate::node::qos_parents::NodeQos>>,
    /// `kubepods` and the QoS-class directories' memory protection (`--protect-ancestors`).
    pub ancestors: Option<Arc<MemoryAncestors>>,
    pub events: mpsc::Sender<SinkMsg>,
    pub resync: Duration,
    /// How often the files the ancestors pass left are re-read (`None`: only at the resync).
    pub ancestors_check: Option<Duration>,
    pub ready: Arc<AtomicBool>,
    /// The NRI plugin's link (`--nri`).
    pub nri: Option<Arc<Link>>,
    /// The pods whose sandbox the plugin saw start.
    pub nudges: Option<mpsc::Receiver<Nudge>>,
}

impl Watch {
    /// Applies `pods`, posts their Events; returns the pods whose pod-level protection changed.
    async fn apply_pods(&self, pods: Vec<Arc<Pod>>) -> Vec<ProtectedPod> {
        let applier = self.applier.clone();
        let link = self.link();
        let span = tracing::Span::current();
        let done = tokio::task::spawn_blocking(move || {
            let _in_task = span.enter();
            koord_translator::pod::apply::par_map(&pods, |p| {
                reconcile(&applier, link.as_deref(), p)
            })
        })
        .await
        .unwrap_or_default();
        let mut changed = Vec::new();
        let mut updates = Vec::new();
        for r in done {
            if let Some(ev) = r.event {
                // A full queue means the API server is slow: drop rather than stall reconciling.
                let _ = self.events.try_send(SinkMsg::Event(ev));
            }
            changed.extend(r.protection_changed);
            updates.extend(r.updates);
        }
        if let Some(link) = self.link().filter(|_| !updates.is_empty()) {
            // The runtime runs one update per container; the watch does not wait for it.
            tokio::spawn(async move { link.send_updates(updates).await });
        }
        changed
    }

    /// One ancestors pass, then the Event of each pod in `told` (see
    /// [`crate::node::ancestors::event::ancestors_event`]).
    async fn protect_ancestors(&self, told: Vec<ProtectedPod>) {
        let Some(ancestors) = self.ancestors.clone() else {
            return;
        };
        let span = tracing::info_span!("ancestors");
        let report = tokio::task::spawn_blocking(move || {
            let _in_pass = span.enter();
            ancestors.reconcile()
        })
        .await;
        let Ok(report) = report else { return };
        let version = self.applier.layout().version;
        for pod in &told {
            if let Some(ev) = ancestors_event(pod, version, &report) {
                let _ = self.events.try_send(SinkMsg::Event(ev));
            }
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
                .filter(|p| phase::is_active(p) && has_annotation(p))
                .filter_map(|p| PodSpecView::from_pod(p).ok())
                .collect();
            let r = node.resync(&views);
            tracing::debug!(report = ?r, "node qos resync");
        })
        .await;
    }

    /// Every pod again, then the node level: repairs values changed behind our back. Returns
    /// the pods whose pod-level protection changed.
    async fn resync(&self, store: &Store<Pod>) -> Vec<ProtectedPod> {
        self.count_managed(store);
        let changed = self.apply_pods(store.state()).await;
        self.resync_node(store.state()).await;
        changed
    }

    fn count_managed(&self, store: &Store<Pod>) {
        if let Some(m) = &self.metrics {
            let n = store
                .state()
                .iter()
                .filter(|p| phase::is_active(p) && has_annotation(p))
                .count();
            m.pods_managed.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    fn link(&self) -> Option<Arc<Link>> {
        self.nri.clone()
    }

    /// Watches `api` until the stream ends (it does not, short of a shutdown).
    pub async fn run(self, api: Api<Pod>, node: &str) {
        let (store, writer) = reflector::store::<Pod>();
        self.run_with_store(api, node, store, writer).await;
    }

    /// [`Self::run`] filling a store the caller also reads (the collectors' pod list).
    pub async fn run_with_store(
        mut self,
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
        let moved = Arc::new(tokio::sync::Notify::new());
        let _check = self
            .ancestors_check
            .zip(self.ancestors.clone())
            .map(|(every, ancestors)| {
                AbortOnDrop(tokio::spawn(put_back_moved(
                    ancestors,
                    self.metrics.clone(),
                    every,
                    self.ready.clone(),
                    moved.clone(),
                )))
            });
        let mut known: HashSet<String> = HashSet::new();
        let mut due = AncestorsDue::default();
        let mut nudges = self.nudges.take();
        loop {
            let due_at = due.at;
            tokio::select! {
                ev = stream.next() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                            // The store has it: a container creation waiting for it goes on.
                            if let Some(link) = self.link() { link.pod_seen(); }
                            if let Some(uid) = pod.metadata.uid.clone() { known.insert(uid); }
                            let changed = self.apply_pods(vec![Arc::new(pod)]).await;
                            if !changed.is_empty() { due.ask(changed); }
                        }
                        Ok(watcher::Event::Delete(pod)) => {
                            if let Some(uid) = pod.metadata.uid.clone() {
                                known.remove(&uid);
                                self.applier.forget(&uid);
                                if let Some(link) = self.link() { link.forget(&uid); }
                                let _ = self.events.try_send(SinkMsg::Forget(uid));
                            }
                            self.count_managed(&store);
                            // Its cgroup may outlive the API object by the kubelet's cleanup;
                            // the next resync catches a sum that shrinks later.
                            due.ask(Vec::new());
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
                            self.protect_ancestors(due.take()).await;
                        }
                        Ok(watcher::Event::Init) => {}
                        Err(e) => tracing::warn!(error = %e, "pod watch error; retrying with backoff"),
                    }
                }
                _ = resync.tick() => {
                    if self.ready.load(Ordering::Relaxed) {
                        let changed = self.resync(&store).instrument(tracing::info_span!("resync")).await;
                        due.ask(changed);
                        self.protect_ancestors(due.take()).await;
                    }
                }
                () = sleep_until_due(due_at), if due_at.is_some() && self.ready.load(Ordering::Relaxed) => {
                    self.protect_ancestors(due.take()).await;
                }
                () = moved.notified() => {
                    self.protect_ancestors(due.take()).await;
                }
                Some((ns, name)) = next_nudge(&mut nudges) => {
                    // The runtime started the pod's sandbox: its pod cgroup exists, so the
                    // pod-level values go in now, while its containers are being created.
                    if let Some(pod) = store.get(&ObjectRef::new(&name).within(&ns)) {
                        let changed = self.apply_pods(vec![pod]).await;
                        if !changed.is_empty() { due.ask(changed); }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_watch_is_this_nodes_and_renewed_every_minute() {
        let c = watcher_config("node-1");
        assert_eq!(c.field_selector.as_deref(), Some("spec.nodeName=node-1"));
        assert_eq!(c.timeout, Some(koord_runtime::WATCH_TIMEOUT_SECS));
    }
}
