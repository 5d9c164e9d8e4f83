//! Hierarchical memory protection: `kubepods` and the QoS-class directories below it get
//! `memory.min`/`memory.low` = the sum of what their direct children hold, so the protection
//! the pods' annotations decided is not capped to nothing by their ancestors (the kernel
//! limits a cgroup's effective protection by every ancestor's). Arithmetic over values already
//! decided: the applier stays policy-free. KEP-2570 (the kubelet's `MemoryQoS`) does the same
//! with requests.
//!
//! `plan` is the pure arithmetic, `report` what a pass did (pure), `event` the Event a pod
//! hears when the protection above it changed (pure), `drift` whether a file the
//! last pass left has moved since (pure), `pass` the IO (one pass over
//! the node), `above` the check of a non-`/` kubelet cgroupRoot's own protection. `run` calls the pass
//! after the initial list, after each resync, and (coalesced) after pod deletions and pods
//! whose protection changed; `once` after its pod's pass. [`ProtectAncestors`] is the node
//! feature that hands the watch its [`MemoryAncestors`].

pub mod above;
pub mod drift;
pub mod event;
pub mod pass;
pub mod plan;
pub mod report;

pub use pass::MemoryAncestors;
pub use plan::KubeletMemoryQos;
pub use report::{AncestorReport, AncestorsReport, ProtectedPod};

use std::sync::Arc;

use crate::feature::{FeatureError, Give, NodeFeature, RunContext, Running};

/// The ancestors' settings (`--protect-ancestors`, `--kubelet-memory-qos`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AncestorSettings {
    pub enabled: bool,
    pub kubelet_memory_qos: KubeletMemoryQos,
}

impl Default for AncestorSettings {
    /// On, as the flag's default; the kubelet's gate off, as its default.
    fn default() -> Self {
        Self {
            enabled: true,
            kubelet_memory_qos: KubeletMemoryQos::Off,
        }
    }
}

/// The ancestors' protection as a node feature of `run` (`--protect-ancestors`): the passes
/// are the pod watch's (after the initial list, each resync, coalesced pod changes and a moved
/// file), so starting it is handing the watch its [`MemoryAncestors`].
pub struct ProtectAncestors {
    pub settings: AncestorSettings,
    pub watch: Give<Arc<MemoryAncestors>>,
}

impl NodeFeature for ProtectAncestors {
    fn name(&self) -> &'static str {
        "ancestors' protection"
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self {
            settings:
                AncestorSettings {
                    enabled,
                    kubelet_memory_qos,
                },
            watch,
        } = *self;
        tracing::info!(
            protect_ancestors = enabled,
            kubelet_memory_qos = kubelet_memory_qos.as_str(),
            "QoS-level memory protection: {}",
            match (enabled, kubelet_memory_qos) {
                (false, _) =>
                    "off (pod-level memory.min/low are capped by kubepods and its QoS-class cgroups)",
                (true, KubeletMemoryQos::Off) =>
                    "kubepods and its QoS-class cgroups get the sums of their children",
                (true, _) =>
                    "sums of the children, except in the files the kubelet's Memory QoS rewrites, which are left to it",
            }
        );
        if !enabled {
            return Ok(None);
        }
        watch.give(Arc::new(
            MemoryAncestors::new(
                ctx.layout.clone(),
                ctx.dry_run,
                kubelet_memory_qos,
                Some(ctx.metrics.clone()),
            )
            .with_systemd(ctx.systemd.clone()),
        ));
        Ok(Some(Running::passive()))
    }
}
