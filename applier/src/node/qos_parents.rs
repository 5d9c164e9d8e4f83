//! Node-level CPU and cache QoS: what the kernel offers, detected once at start; the
//! group identity of the QoS-class parents; and the resctrl class groups. Both depend on every
//! pod of the node, so they run once per resync over the pod cache, after the per-pod passes
//! (the pod watch drives them; [`Resctrl`] and [`QosParents`] are the node features that hand
//! it [`NodeQos`]).
//!
//! The applier holds no policy: a parent's group identity is the value all annotated pods
//! below it agree on (else 0, see [`koord_translator::pod::plan::parent_group_identity`]), and the resctrl
//! partition of a class is the one its pods' annotations carry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use koord_api::{ResolvedCpuQos, ResolvedQos};
use serde::Serialize;

use koord_translator::cgroup::file;
use koord_translator::cgroup::knob_map::{CPU_BVT_WARP_NS, CPU_IDLE};
use koord_translator::cgroup::layout::{KubeQos, Layout};
use koord_translator::cgroup::readback::Expect;
use koord_translator::cgroup::writer::{CgroupDir, CgroupWriter};
use koord_translator::cgroup::{CgroupVersion, Controller, Outcome};
use koord_translator::pod::plan::{
    NodeCaps, cpu_idle_value, group_identity, parent_group_identity,
};
use koord_translator::pod::spec_view::PodSpecView;

use crate::feature::{FeatureError, Give, Handover, NodeFeature, RunContext, Running};
use crate::metrics::Metrics;
use crate::node::resctrl::{self, PodResctrl, ResctrlReport, ResctrlSupport};
use crate::node::shared::container_dir::container_rel;

/// Detects group identity: `cpu.bvt_warp_ns` in the `kubepods` cpu cgroup or, before the
/// kubelet made it, in the cpu hierarchy's root (as Koordinator, by file existence), and
/// whether `cpu.idle` exists; with the operator's `--cpu-idle-fallback` and
/// `--cpu-idle-qos-parents`.
pub fn detect_caps(layout: &Layout, cpu_idle_fallback: bool, idle_qos_parents: bool) -> NodeCaps {
    let has = |file: &str| {
        [layout.kubepods_dir(), PathBuf::new()]
            .iter()
            .filter_map(|rel| layout.dir(rel, Controller::Cpu).ok())
            .any(|dir| dir.join(file).exists())
    };
    // cgroup v2: the kernel reads `cpu.weight` of an idle cgroup as 0, and the kubelet turns
    // that into cpu.shares with `(weight - 1) * 262142 / 9999 + 2` in u64: about 1.8e15 cores
    // "used" by the pod. Seen on the cgroup v2 node (kubelet 1.37.2): its admission then refused
    // every new pod with OutOfcpu ("used: 1801620012949489, capacity: 1000"). So the fallback
    // is refused on v2.
    let refused_v2 = cpu_idle_fallback && layout.version == CgroupVersion::V2;
    if refused_v2 {
        tracing::warn!(
            "--cpu-idle-fallback is refused on cgroup v2: the kernel reads cpu.weight of an idle cgroup as 0, \
             which the kubelet miscounts as ~1.8e15 CPUs used (new pods fail admission with OutOfcpu); \
             BE pods keep the batch cpu.weight instead"
        );
    }
    let bvt_warp_ns = has(CPU_BVT_WARP_NS);
    let cpu_idle_fallback = cpu_idle_fallback && !refused_v2;
    let caps = NodeCaps {
        bvt_warp_ns,
        cpu_idle_fallback,
        idle_qos_parents,
        cpu_idle: has(CPU_IDLE),
    };
    if caps.uses_cpu_idle() && !caps.cpu_idle {
        tracing::warn!(
            "--cpu-idle-fallback is on but this kernel has no cpu.idle (Linux 5.15+); BE pods will report it unsupported"
        );
    }
    tracing::info!(
        bvt_warp_ns = caps.bvt_warp_ns,
        cpu_idle_fallback = caps.cpu_idle_fallback,
        cpu_idle_reset = caps.cpu_idle_reset(),
        "cpu qos: {}",
        if caps.bvt_warp_ns {
            "group identity (cpu.bvt_warp_ns)"
        } else if caps.cpu_idle_fallback {
            "cpu.idle fallback for BE pods"
        } else {
            "no group identity on this kernel and the cpu.idle fallback is off"
        }
    );
    caps
}

/// Detects resctrl once; unsupported is logged once and shown as
/// `koord_applier_resctrl_supported 0`.
pub fn detect_resctrl(root: &Path, metrics: Option<&Metrics>) -> Option<ResctrlSupport> {
    let support = match resctrl::detect(root) {
        Ok(s) => {
            tracing::info!(root = %root.display(), l3 = s.l3.is_some(), mba = s.mb.is_some(), "resctrl: class groups enabled");
            Some(s)
        }
        Err(e) => {
            tracing::info!(error = %e, "resctrl: off on this node (reported once)");
            None
        }
    };
    if let Some(m) = metrics {
        m.resctrl_supported.set(i64::from(support.is_some()));
    }
    support
}

/// The value of the Burstable and BestEffort parents, from the per-pod values of the pods
/// below them (group identity, or `cpu.idle`). Pure. Pods without `cpuQOS` (`None`) do not vote.
pub fn parent_values(pods: &[(KubeQos, Option<i64>)]) -> [(KubeQos, i64); 2] {
    [KubeQos::Burstable, KubeQos::BestEffort].map(|qos| {
        let votes = pods
            .iter()
            .filter(|(q, _)| *q == qos)
            .filter_map(|(_, v)| *v);
        (qos, parent_group_identity(votes))
    })
}

/// One QoS-class parent write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentReport {
    pub path: PathBuf,
    pub value: i64,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one node-level pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeQosReport {
    pub parents: Vec<ParentReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resctrl: Option<ResctrlReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resctrl_error: Option<String>,
}

/// The node-level state: layout, capabilities, resctrl support (all detected once).
pub struct NodeQos {
    layout: Layout,
    writer: CgroupWriter,
    caps: NodeCaps,
    resctrl: Option<(PathBuf, ResctrlSupport)>,
    metrics: Option<Arc<Metrics>>,
}

fn annotation(view: &PodSpecView) -> Option<ResolvedQos> {
    ResolvedQos::from_annotation(view.resolved_qos.as_deref()?).ok()
}

/// The file listing every thread of a cgroup: resctrl `tasks` takes thread IDs, and a
/// process's threads must all move (`cgroup.procs` lists only thread-group leaders).
fn threads_file(version: CgroupVersion) -> &'static str {
    match version {
        CgroupVersion::V1 => "tasks",
        CgroupVersion::V2 => "cgroup.threads",
    }
}

impl NodeQos {
    pub fn new(
        layout: Layout,
        dry_run: bool,
        caps: NodeCaps,
        resctrl: Option<(PathBuf, ResctrlSupport)>,
        metrics: Option<Arc<Metrics>>,
    ) -> Self {
        Self {
            layout,
            writer: CgroupWriter::new(dry_run),
            caps,
            resctrl,
            metrics,
        }
    }

    /// Parents then resctrl, over every pod of the node.
    pub fn resync(&self, pods: &[PodSpecView]) -> NodeQosReport {
        let parsed: Vec<(&PodSpecView, Option<ResolvedQos>)> =
            pods.iter().map(|p| (p, annotation(p))).collect();
        let mut report = NodeQosReport {
            parents: self.parents(&parsed),
            ..Default::default()
        };
        match self.resctrl(&parsed, true) {
            Some(Ok(r)) => report.resctrl = Some(r),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "resctrl reconcile failed");
                report.resctrl_error = Some(e);
            }
            None => {}
        }
        report
    }

    /// [`Self::resync`] for `once`: resctrl only (one pod says nothing about a parent), and
    /// without moving other pods' tasks out of the groups.
    pub fn once(&self, pod: &PodSpecView) -> NodeQosReport {
        let parsed = [(pod, annotation(pod))];
        let mut report = NodeQosReport::default();
        match self.resctrl(&parsed, false) {
            Some(Ok(r)) => report.resctrl = Some(r),
            Some(Err(e)) => report.resctrl_error = Some(e),
            None => {}
        }
        report
    }

    /// Group identity of `kubepods/burstable` and `kubepods/besteffort` (`kubepods` itself
    /// stays 0: never written), or with the `cpu.idle` fallback their `cpu.idle`: a BE pod's
    /// SCHED_IDLE only counts against its siblings, so without the besteffort parent being idle
    /// the BE pods compete with burstable and guaranteed pods by weight (besteffort's is the
    /// kubelet's minimum, 1).
    ///
    /// The QoS parents' `cpu.idle` is held at 0 unless `--cpu-idle-qos-parents`: the kubelet
    /// writes `cpu.weight` (v2) / `cpu.shares` (v1) of its QoS cgroups on every QoS update, the
    /// kernel refuses that with EINVAL on an idle cgroup, and the kubelet then abandons the
    /// rest of that update (the other QoS cgroups' CPU weight and, with its own Memory QoS,
    /// their `memory.min`/`memory.low`), seen on a 1.37 kubelet. Held at 0, not left alone, so
    /// an upgrade from a release that set 1 heals the kubelet; likewise without the fallback
    /// wherever the kernel has `cpu.idle` ([`NodeCaps::cpu_idle_reset`]: fallback off, or
    /// refused on cgroup v2).
    fn parents(&self, parsed: &[(&PodSpecView, Option<ResolvedQos>)]) -> Vec<ParentReport> {
        let (file, value_of): (&'static str, fn(&ResolvedCpuQos) -> i64) =
            if self.caps.uses_cpu_idle() || self.caps.cpu_idle_reset() {
                (CPU_IDLE, cpu_idle_value)
            } else if self.caps.bvt_warp_ns {
                (CPU_BVT_WARP_NS, group_identity)
            } else {
                return Vec::new();
            };
        let votes: Vec<(KubeQos, Option<i64>)> = parsed
            .iter()
            .map(|(p, q)| {
                (
                    p.kube_qos,
                    q.as_ref().and_then(|q| q.cpu_qos.as_ref()).map(value_of),
                )
            })
            .collect();
        let mut out = Vec::new();
        let hold_zero =
            file == CPU_IDLE && !(self.caps.uses_cpu_idle() && self.caps.idle_qos_parents);
        for (qos, value) in parent_values(&votes) {
            let value = if hold_zero { 0 } else { value };
            let Some(rel) = self.layout.qos_dir(qos) else {
                continue;
            };
            let Ok(dir) = self.layout.dir(&rel, Controller::Cpu) else {
                continue;
            };
            let cg = CgroupDir::open(Arc::from(dir.as_path()));
            let r = self
                .writer
                .apply(&cg, file, &value.to_string(), Expect::Int(value));
            if let Some(m) = &self.metrics {
                m.apply
                    .writes
                    .with_label_values(&[file, r.outcome.as_str()])
                    .inc();
            }
            if r.outcome == Outcome::Written {
                tracing::info!(dir = %dir.display(), file, value, "qos parent cpu qos set");
            }
            out.push(ParentReport {
                path: dir.join(file),
                value,
                outcome: r.outcome,
                error: r.error,
            });
        }
        out
    }

    /// The threads of every container of the pods with an enabled `resctrlQOS`, kept in their
    /// class group. `None` when resctrl is off on this node or in a dry run.
    fn resctrl(
        &self,
        parsed: &[(&PodSpecView, Option<ResolvedQos>)],
        evict_others: bool,
    ) -> Option<Result<ResctrlReport, String>> {
        let (root, support) = self.resctrl.as_ref()?;
        if self.writer.dry_run {
            return None;
        }
        let mut pods = Vec::new();
        for (view, q) in parsed {
            let Some(q) = q else { continue };
            let Some(rq) = q.resctrl_qos.filter(|r| r.enabled) else {
                continue;
            };
            pods.push(PodResctrl {
                class: q.qos_class,
                qos: rq,
                pids: self.container_threads(view),
            });
        }
        let r =
            resctrl::reconcile_with(root, support, &pods, evict_others).map_err(|e| e.to_string());
        if let (Ok(r), Some(m)) = (&r, &self.metrics) {
            m.resctrl_groups_created.inc_by(r.groups_created as u64);
            m.resctrl_schemata_writes.inc_by(r.schemata_written as u64);
            for (dir, n) in [
                ("added", r.tasks_added),
                ("removed", r.tasks_removed),
                ("gone", r.tasks_gone),
            ] {
                m.resctrl_tasks.with_label_values(&[dir]).inc_by(n as u64);
            }
        }
        Some(r)
    }

    fn container_threads(&self, view: &PodSpecView) -> Vec<u32> {
        let mut out = Vec::new();
        for id in view.containers.iter().flat_map(|c| &c.container_id) {
            let Ok(dir) = container_rel(&self.layout, view, id)
                .and_then(|rel| self.layout.dir(&rel, Controller::Cpu))
            else {
                continue;
            };
            // Absent: the container is gone or not started; unreadable: reported.
            if let Some(text) = file::read_or_report(&dir.join(threads_file(self.layout.version))) {
                out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
        }
        out
    }
}

/// resctrl as a node feature of `run`: detected once (off where the node has none, reported
/// once); its class groups are reconciled in the QoS-class parents' pass, which gets the
/// support found here.
pub struct Resctrl {
    pub root: PathBuf,
    pub parents: Give<(PathBuf, ResctrlSupport)>,
}

impl NodeFeature for Resctrl {
    fn name(&self) -> &'static str {
        "resctrl"
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { root, parents } = *self;
        let Some(support) = detect_resctrl(&root, Some(&ctx.metrics)) else {
            return Ok(None);
        };
        parents.give((root, support));
        Ok(Some(Running::passive()))
    }
}

/// The QoS-class parents (and the resctrl groups, when [`Resctrl`] found support) as a node
/// feature of `run`: the pass is the pod watch's, after each resync's pod passes, so starting
/// it is handing the watch its [`NodeQos`].
pub struct QosParents {
    pub resctrl: Handover<(PathBuf, ResctrlSupport)>,
    pub watch: Give<Arc<NodeQos>>,
}

impl NodeFeature for QosParents {
    fn name(&self) -> &'static str {
        "QoS-class parents"
    }

    fn start(self: Box<Self>, ctx: &RunContext) -> Result<Option<Running>, FeatureError> {
        let Self { resctrl, watch } = *self;
        watch.give(Arc::new(NodeQos::new(
            ctx.layout.clone(),
            ctx.dry_run,
            ctx.caps,
            resctrl.take(),
            Some(ctx.metrics.clone()),
        )));
        Ok(Some(Running::passive()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_values_table() {
        use KubeQos::{BestEffort as Be, Burstable as Bu, Guaranteed as G};
        type Votes = Vec<(KubeQos, Option<i64>)>;
        let cases: Vec<(Votes, [i64; 2])> = vec![
            (vec![], [0, 0]),
            (vec![(Bu, Some(2)), (Be, Some(-1))], [2, -1]),
            // Guaranteed pods sit under kubepods itself, which stays 0: they vote nowhere.
            (vec![(G, Some(2))], [0, 0]),
            // Pods without cpuQOS do not vote.
            (vec![(Bu, Some(2)), (Bu, None)], [2, 0]),
            (vec![(Bu, Some(2)), (Bu, Some(0))], [0, 0]),
            (vec![(Be, Some(-1)), (Be, Some(-1)), (Be, Some(0))], [0, 0]),
        ];
        for (votes, want) in cases {
            let got = parent_values(&votes);
            assert_eq!(
                [got[0], got[1]],
                [(Bu, want[0]), (Be, want[1])],
                "{votes:?}"
            );
        }
    }
}
