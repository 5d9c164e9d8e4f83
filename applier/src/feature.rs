//! What `run` hands each feature (memory locality, the collectors, colocation) when it starts
//! it: every feature exposes `start(&RunContext, settings) -> Result<Option<JoinHandle<()>>,
//! MetricError>`, registers its metrics in the applier's registry, reads the watch's pod cache
//! and, when it has something to say, posts Events through the one sink. `None` = off.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use koord_translator::cgroup::layout::Layout;

use crate::event_sink::SinkMsg;
use crate::metrics::Metrics;

/// The shared parts of `run`, built once.
#[derive(Clone)]
pub struct RunContext {
    pub client: kube::Client,
    pub layout: Layout,
    pub node_name: String,
    /// The host's `/proc` and `/sys`.
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    /// Read and compare only: features that would change the node stay off.
    pub dry_run: bool,
    /// This node's pods: the watch's reflector store (no second watch).
    pub pods: Store<Pod>,
    /// The Event sink (aggregated and rate-limited there).
    pub events: mpsc::Sender<SinkMsg>,
    /// The applier's registry and text sources (`/metrics`).
    pub metrics: Arc<Metrics>,
    /// On the systemd driver (cgroup v2): the connection that sets unit values through
    /// systemd; `None` = cgroup files only.
    pub systemd: Option<Arc<koord_translator::cgroup::systemd::Units>>,
}
