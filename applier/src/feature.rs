//! How `run` starts a node feature: every node loop (the collectors, memory locality,
//! colocation, resctrl, the QoS-class parents, async reclaim, the ancestors' protection and
//! the NRI plugin) is a [`NodeFeature`], listed once in `cmd::features` and started by `run`
//! through [`NodeFeature::start`], in that list's order, before the pod watch.
//!
//! A feature reads what `run` built once ([`RunContext`]): it registers its metrics in the
//! applier's registry, reads the watch's pod cache and, when it has something to say, posts
//! Events through the one sink. It answers `Ok(None)` when it is off (logged where a feature
//! has always said so) and `Ok(Some(Running))` when it is on. Some features run a loop of
//! their own (a task, or a thread); the others are passes the pod watch drives (the
//! ancestors' protection, the QoS-class parents, the NRI plugin's link): those give the watch
//! its handle through a [`Handover`] made with the feature in `cmd::features`, so the wiring
//! is one line each there. At exit `run` stops the running features in reverse order
//! ([`Running::stop`]): what must be put back before the process goes (async reclaim's
//! throttles) is their exit action.
//!
//! This module names no feature: they depend on it, never the reverse.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_runtime::metrics::MetricError;
use kube::runtime::reflector::Store;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use koord_translator::cgroup::layout::Layout;
use koord_translator::pod::plan::NodeCaps;

use crate::event_sink::SinkMsg;
use crate::metrics::Metrics;
use crate::node::writer::NodeWriter;

/// The shared parts of `run`, built once.
#[derive(Clone)]
pub struct RunContext {
    pub client: kube::Client,
    pub layout: Layout,
    /// What the kernel offers for CPU QoS (group identity, `cpu.idle`), with the operator's
    /// `--cpu-idle-*` choices: detected once, read by the pod pass, the QoS-class parents and
    /// the NRI plugin alike.
    pub caps: NodeCaps,
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
    /// The one writer of the features' lasting cgroup values; `run` puts back what it still
    /// holds after the features have stopped.
    pub writer: Arc<NodeWriter>,
}

/// Why a feature could not start; `run` stops with it.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    #[error(transparent)]
    Metrics(#[from] MetricError),
    /// `what` names the thread as the message has always said it.
    #[error("cannot start the {what}: {source}")]
    Thread {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A node loop of `run`.
pub trait NodeFeature: Send {
    /// The feature's name, for the start log and the span of its task.
    fn name(&self) -> &'static str;

    /// Starts it: `Ok(None)` when it is off, else what it runs.
    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError>;

    /// Whether the feature changes the node beyond the pods' own files (moves memory, reclaims,
    /// writes the BE parent or the Node): [`start_all`] leaves it off in a dry run.
    fn changes_the_node(&self) -> bool {
        false
    }
}

/// A started feature: its task (if it runs one on the runtime) and what must happen before the
/// process exits.
#[derive(Default)]
pub struct Running {
    task: Option<JoinHandle<()>>,
    at_exit: Option<Box<dyn FnOnce() + Send>>,
}

impl Running {
    /// A feature the pod watch drives, or one whose loop is a thread of its own.
    pub fn passive() -> Self {
        Self::default()
    }

    /// A feature whose loop is a task on the runtime.
    pub fn task(task: JoinHandle<()>) -> Self {
        Self {
            task: Some(task),
            at_exit: None,
        }
    }

    /// Adds what must be done before the process exits.
    #[must_use]
    pub fn at_exit(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.at_exit = Some(Box::new(f));
        self
    }

    /// At exit: the exit action, then the task ends (the runtime would end it a moment later
    /// anyway; ending it here keeps the order plain).
    pub fn stop(self) {
        if let Some(f) = self.at_exit {
            f();
        }
        if let Some(t) = self.task {
            t.abort();
        }
    }
}

/// The one-way hand-over of what a started feature gives the pod watch (or `run`): made in
/// `cmd::features` with the feature, the giving end moved into it. A feature that is off, or
/// did not start, drops it: the receiving end then has nothing.
pub fn handover<T>() -> (Give<T>, Handover<T>) {
    let (tx, rx) = oneshot::channel();
    (Give(tx), Handover(rx))
}

/// The giving end of [`handover`], held by the feature.
pub struct Give<T>(oneshot::Sender<T>);

impl<T> Give<T> {
    pub fn give(self, value: T) {
        // The receiving end is `run`'s, alive until the features have started.
        let _ = self.0.send(value);
    }
}

/// The receiving end of [`handover`], read by `run` once the features have started.
pub struct Handover<T>(oneshot::Receiver<T>);

impl<T> Handover<T> {
    /// What the feature gave; `None` when it is off.
    pub fn take(mut self) -> Option<T> {
        self.0.try_recv().ok()
    }
}

/// Starts `features` in order; a feature that cannot start stops `run` (those started before
/// it end with the runtime).
pub fn start_all(
    features: Vec<Box<dyn NodeFeature>>,
    ctx: &RunContext,
) -> Result<Vec<Running>, FeatureError> {
    let mut running = Vec::new();
    for f in features {
        let name = f.name();
        if ctx.dry_run && f.changes_the_node() {
            tracing::info!(feature = name, "dry run: off (it would change the node)");
            continue;
        }
        if let Some(r) = f.start(ctx)? {
            tracing::debug!(feature = name, "started");
            running.push(r);
        }
    }
    Ok(running)
}

/// Stops every running feature, the last started first.
pub fn stop_all(running: Vec<Running>) {
    for r in running.into_iter().rev() {
        r.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handover_dropped_unused_gives_nothing() {
        let (give, taken) = handover::<u8>();
        drop(give);
        assert_eq!(taken.take(), None);
        let (give, taken) = handover::<u8>();
        give.give(7);
        assert_eq!(taken.take(), Some(7));
    }

    #[test]
    fn stop_runs_the_exit_action() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        stop_all(vec![Running::passive().at_exit(move || {
            seen.store(true, std::sync::atomic::Ordering::Relaxed)
        })]);
        assert!(done.load(std::sync::atomic::Ordering::Relaxed));
    }
}
