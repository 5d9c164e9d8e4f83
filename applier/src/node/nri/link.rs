//! What the NRI plugin and the pod watch share: the watch tells the plugin a pod arrived (a
//! container creation waiting for its pod goes on at once), the plugin tells the watch which
//! containers got their values at creation (for the Event) and which pods just got a sandbox (a
//! pod-level pass now, while the container is being created), and the watch asks the runtime,
//! through the plugin's connection, to record values it wrote later (`UpdateContainers`), so a
//! runtime update of the container (an in-place resize) does not write stale ones back.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use koord_translator::pod::plan::Target;
use koord_translator::pod::report::PodReport;
use koord_translator::pod::spec_view::PodSpecView;

use super::conn::Client;
use super::decide::Decider;
use super::metrics::NriMetrics;
use super::proto::{self, ContainerUpdate, LinuxContainerUpdate};

/// A pod whose sandbox the runtime just started (namespace, name).
pub type Nudge = (String, String);

/// The plugin as `run` hands it to the watch: the link and the receiver of its nudges.
pub struct Plugged {
    pub link: std::sync::Arc<Link>,
    pub nudges: mpsc::Receiver<Nudge>,
}

/// How long an `UpdateContainers` call may take.
const UPDATE_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Link {
    pub decider: Decider,
    pod_seen: Notify,
    /// Pod UID -> IDs of its containers created with values.
    created: Mutex<HashMap<String, HashSet<String>>>,
    nudges: mpsc::Sender<Nudge>,
    session: Mutex<Option<Client>>,
    pub metrics: Option<NriMetrics>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `containerd://<id>` (the pod status) -> `<id>` (NRI's container ID).
fn bare_id(id: &str) -> &str {
    id.split_once("://").map_or(id, |(_, id)| id)
}

impl Link {
    /// The link and the receiver of its nudges (for the watch loop).
    pub fn new(decider: Decider, metrics: Option<NriMetrics>) -> (Self, mpsc::Receiver<Nudge>) {
        let (tx, rx) = mpsc::channel(256);
        let link = Self {
            decider,
            pod_seen: Notify::new(),
            created: Mutex::default(),
            nudges: tx,
            session: Mutex::default(),
            metrics,
        };
        (link, rx)
    }

    /// The watch stored a pod: wake the creations waiting for theirs.
    pub fn pod_seen(&self) {
        self.pod_seen.notify_waiters();
    }

    /// Waits until [`Self::pod_seen`] is called next; enable the future before checking the
    /// store so that a pod stored in between is not missed.
    pub fn next_pod_seen(&self) -> tokio::sync::futures::Notified<'_> {
        self.pod_seen.notified()
    }

    pub fn nudge(&self, namespace: String, name: String) {
        // Full (a burst of sandboxes): the watch applies them when their events arrive.
        let _ = self.nudges.try_send((namespace, name));
    }

    pub fn record_created(&self, pod_uid: &str, container_id: &str) {
        lock(&self.created)
            .entry(pod_uid.to_owned())
            .or_default()
            .insert(container_id.to_owned());
    }

    /// Whether a container of this pod, as the view names them, got its values at creation.
    pub fn set_at_creation(&self, view: &PodSpecView) -> bool {
        let created = lock(&self.created);
        let Some(ids) = created.get(&view.uid) else {
            return false;
        };
        view.containers
            .iter()
            .filter_map(|c| c.container_id.as_deref())
            .any(|id| ids.contains(bare_id(id)))
    }

    pub fn forget(&self, pod_uid: &str) {
        lock(&self.created).remove(pod_uid);
    }

    pub fn connect(&self, client: Client) {
        *lock(&self.session) = Some(client);
        if let Some(m) = &self.metrics {
            m.set_mode(true);
        }
    }

    pub fn disconnect(&self) {
        *lock(&self.session) = None;
        if let Some(m) = &self.metrics {
            m.set_mode(false);
            m.runtime.reset();
        }
    }

    pub fn connected(&self) -> bool {
        lock(&self.session).is_some()
    }

    /// The updates a reconcile pass calls for: the containers whose cgroup it wrote, with all
    /// their values as they would be set at creation. Empty when not connected.
    pub fn updates_after(&self, view: &PodSpecView, report: &PodReport) -> Vec<ContainerUpdate> {
        if !self.connected() {
            return Vec::new();
        }
        let mut names: Vec<&str> = report
            .knobs
            .iter()
            .filter(|k| k.outcome == koord_translator::cgroup::Outcome::Written)
            .filter_map(|k| match &k.target {
                Target::Container(name) => Some(name.as_str()),
                Target::Pod => None,
            })
            .collect();
        names.dedup();
        let mut out: Vec<ContainerUpdate> = Vec::new();
        for name in names {
            let Some(id) = view.container(name).and_then(|c| c.container_id.as_deref()) else {
                continue;
            };
            if out.iter().any(|u| u.container_id == bare_id(id)) {
                continue;
            }
            if let Ok(resources) = self.decider.decide_view(view, name) {
                out.push(update(bare_id(id), resources));
            }
        }
        out
    }

    /// Sends `updates` to the runtime (one call); counted, failures logged.
    pub async fn send_updates(&self, updates: Vec<ContainerUpdate>) {
        let Some(client) = lock(&self.session).clone() else {
            return;
        };
        let n = updates.len() as u64;
        let result = client
            .call::<proto::UpdateContainersResponse>(
                proto::service::RUNTIME,
                "UpdateContainers",
                &proto::UpdateContainersRequest { update: updates },
                UPDATE_TIMEOUT,
            )
            .await;
        let (ok, failed) = match &result {
            Ok(r) => (
                n.saturating_sub(r.failed.len() as u64),
                r.failed.len() as u64,
            ),
            Err(_) => (0, n),
        };
        if let Some(m) = &self.metrics {
            m.updates.with_label_values(&["updated"]).inc_by(ok);
            m.updates.with_label_values(&["failed"]).inc_by(failed);
        }
        match result {
            Err(e) => {
                tracing::warn!(error = %e, containers = n, "NRI UpdateContainers failed; the files hold the values, the runtime's record does not")
            }
            Ok(r) if !r.failed.is_empty() => {
                tracing::warn!(failed = ?r.failed.iter().map(|u| &u.container_id).collect::<Vec<_>>(), "NRI UpdateContainers: the runtime could not update some containers")
            }
            Ok(_) => tracing::debug!(containers = n, "NRI UpdateContainers done"),
        }
    }
}

/// A container update that never fails the runtime's batch (`ignore_failure`).
pub fn update(container_id: &str, resources: proto::LinuxResources) -> ContainerUpdate {
    ContainerUpdate {
        container_id: container_id.to_owned(),
        linux: Some(LinuxContainerUpdate {
            resources: Some(resources),
        }),
        ignore_failure: true,
    }
}
