//! What one memory/CPU QoS pass did to one pod: the body of `koord-applier once`'s JSON report
//! (the applier's `once` adds the locality and resctrl sections), the input of the
//! Event texts and of the metrics. Pure.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::cgroup::Outcome;
use crate::cgroup::{CgroupDriver, CgroupVersion};
use crate::pod::plan::Target;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PodStatus {
    /// At least one knob was written.
    Applied,
    /// Every knob already held its value.
    Unchanged,
    /// No resolved-qos annotation: the pod is not touched.
    Unmanaged,
    /// The annotation failed validation: nothing was written.
    Refused,
    /// Some write failed (the others were still made).
    Failed,
    /// The annotation does not fit the resized pod yet (in-place resize): the values last
    /// applied are kept (restored if changed), nothing new is written.
    Held,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KnobReport {
    pub target: Target,
    /// The contract name (`memory.limit_in_bytes`).
    pub knob: &'static str,
    /// The file on this node (`memory.max` on v2).
    pub file: &'static str,
    pub path: KnobPath,
    pub old: Option<String>,
    pub new: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Cow<'static, str>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub cgroup_version: CgroupVersion,
    pub cgroup_driver: CgroupDriver,
    /// The kubelet's `cgroupRoot` the paths are below (`/` on most nodes).
    pub kubelet_cgroup_root: String,
    pub dry_run: bool,
    pub status: PodStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub knobs: Vec<KnobReport>,
    /// Read-only values read back per container (`memory.wmark_high` on Alibaba kernels).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub read_back: BTreeMap<String, BTreeMap<&'static str, String>>,
    /// Containers of the annotation without a container ID yet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Containers that are native sidecars (named so in the Event).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<String>,
    /// The pod sets pod-level memory (`spec.resources`): the pod cgroup's numbers come from it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pod_level_resources: bool,
    /// The first complete pass over this version of the pod (every container started, every
    /// cgroup there): `run` then posts an Event even if the kernel has none of the knobs.
    #[serde(skip)]
    pub first_pass: bool,
    /// A container of this pod got its values when the runtime created it (the NRI plugin):
    /// its first complete pass finds them in place and still says so in an Event.
    #[serde(skip)]
    pub set_at_creation: bool,
    /// Per container, the knobs this kernel lacks that a node feature emulates
    /// ([`crate::pod::hooks::ContainerHooks::after_pass`]): the Event names them instead of
    /// calling them unsupported.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub emulated: BTreeMap<String, Vec<&'static str>>,
    /// What emulates them, as the Event names it
    /// ([`crate::pod::hooks::ContainerHooks::emulated_by`]).
    #[serde(skip)]
    pub emulated_by: &'static str,
}

impl PodReport {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.knobs.iter().filter(|k| k.outcome == outcome).count()
    }
}

/// A knob's path, joined only when shown: a resync builds thousands of reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnobPath {
    pub dir: Arc<Path>,
    pub file: &'static str,
}

impl std::fmt::Display for KnobPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dir.join(self.file).display())
    }
}

impl Serialize for KnobPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
