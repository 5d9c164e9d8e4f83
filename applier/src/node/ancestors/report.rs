//! What a pass of hierarchical memory protection did: the `ancestors` section of `once`'s
//! report and the input of the pod Events and metrics. Pure.

use std::path::PathBuf;

use serde::Serialize;

use koord_translator::cgroup::Outcome;
use koord_translator::cgroup::layout::KubeQos;

use super::plan::{KubeletMemoryQos, Level};

/// What the pass did to one ancestor file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AncestorReport {
    /// The directory relative to the hierarchy root (`kubepods/burstable`).
    pub cgroup: String,
    #[serde(skip)]
    pub level: Level,
    pub file: &'static str,
    pub path: PathBuf,
    /// How many direct children (cgroup directories) were summed.
    pub children: usize,
    /// Their sum; absent when the file could not be reconciled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sum: Option<String>,
    pub old: Option<String>,
    /// The value the file holds after the pass (would hold, in a dry run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    pub outcome: Outcome,
    /// `--kubelet-memory-qos`: the file is the kubelet's and keeps the kubelet's value.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kept_kubelet_value: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What one pass did: the QoS-class directories, then `kubepods`, two files each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AncestorsReport {
    /// `--kubelet-memory-qos`: which files the kubelet owns (never written).
    pub kubelet_memory_qos: KubeletMemoryQos,
    pub cgroups: Vec<AncestorReport>,
}

impl AncestorsReport {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.cgroups.iter().filter(|c| c.outcome == outcome).count()
    }
}

/// A pod whose pod-level `memory.min`/`memory.low` a pass just wrote: its Event after the next
/// ancestors pass says what its ancestors now hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub kube_qos: KubeQos,
}
