//! resolved-qos + pod spec -> the list of cgroup writes, or a refusal.
//!
//! Pure. The annotation is user-editable, so [`validate`] checks every value against the pod
//! spec and the kernel ranges before anything is written; one failing value refuses the whole
//! pod, with a reason that names the field and the bound. Paths come from [`Layout`] with the
//! pod UID and the container IDs of the pod status, never from the annotation.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use koord_api::{
    BatchKnobs, ContainerMemoryKnobs, MaxOr, MemoryQosParams, PodMemoryKnobs, ResolvedCpuQos,
    ResolvedQos, knobs,
};
use serde::Serialize;

use crate::cgroup::knob_map::{Knob, Value, map_knob};
use crate::cgroup::layout::{ContainerId, Layout};
use crate::cgroup::readback::Expect;
use crate::cgroup::{CgroupVersion, Controller};
use crate::pod::spec_view::{ContainerSpecView, PodSpecView};

/// The cgroup a write is aimed at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    Pod,
    Container(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pod => f.write_str("pod"),
            Target::Container(name) => f.write_str(name),
        }
    }
}

/// One file write: the contract knob and value, and what it becomes on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWrite {
    pub target: Target,
    pub knob: Knob,
    pub value: Value,
    /// Shared by every write to the same cgroup and controller.
    pub dir: Arc<Path>,
    pub file: &'static str,
    pub text: String,
    pub expect: Expect,
}

impl PlannedWrite {
    pub fn path(&self) -> PathBuf {
        self.dir.join(self.file)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub writes: Vec<PlannedWrite>,
    /// Container memory directories whose read-only `memory.wmark_high` is read for the Event.
    pub wmark_high: Vec<(String, PathBuf)>,
    /// Containers named in the annotation that have no container ID yet (not started).
    pub pending: Vec<String>,
}

/// What the node's kernel offers for CPU QoS, detected once at start, plus the operator's
/// choice of fallback. Pure input of the planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCaps {
    /// `cpu.bvt_warp_ns` exists (Alibaba Cloud Linux group identity).
    pub bvt_warp_ns: bool,
    /// `--cpu-idle-fallback`: without group identity, BE pods get `cpu.idle = 1`.
    pub cpu_idle_fallback: bool,
    /// `--cpu-idle-qos-parents`: with the fallback, the QoS parents follow their pods' vote
    /// instead of being held at 0 (see `NodeQos::parents`).
    pub idle_qos_parents: bool,
    /// The kernel has `cpu.idle` (mainline 5.15+).
    pub cpu_idle: bool,
}

impl Default for NodeCaps {
    /// Not detected: plan group identity, so a kernel without it reports it unsupported.
    fn default() -> Self {
        Self {
            bvt_warp_ns: true,
            cpu_idle_fallback: false,
            idle_qos_parents: false,
            cpu_idle: false,
        }
    }
}

impl NodeCaps {
    /// Whether the `cpu.idle` fallback replaces group identity on this node.
    pub fn uses_cpu_idle(self) -> bool {
        !self.bvt_warp_ns && self.cpu_idle_fallback
    }

    /// The kernel has `cpu.idle` but neither group identity nor the fallback is in force
    /// (fallback off, or refused on cgroup v2): every annotated pod's and both QoS parents'
    /// `cpu.idle` is held at 0. An idle cgroup is a hazard there, not a choice: the kernel
    /// refuses the kubelet's `cpu.weight`/`cpu.shares` writes on it, and on v2 its weight reads
    /// 0, which the kubelet counts as ~1.8e15 CPUs. So a `1` left by an earlier release or an
    /// earlier `--cpu-idle-fallback` is put back.
    pub fn cpu_idle_reset(self) -> bool {
        self.cpu_idle && !self.bvt_warp_ns && !self.cpu_idle_fallback
    }
}

/// The group identity a pod's cgroups get: the resolved value, 0 when disabled.
pub fn group_identity(c: &ResolvedCpuQos) -> i64 {
    if c.enabled { c.group_identity } else { 0 }
}

/// The `cpu.idle` fallback value: 1 for BE (group identity -1), else 0.
pub fn cpu_idle_value(c: &ResolvedCpuQos) -> i64 {
    i64::from(group_identity(c) == -1)
}

/// A QoS-class parent (`kubepods/besteffort`, `kubepods/burstable`) gets the group identity
/// all the annotated pods below it agree on, else (none, or a disagreement) 0. The applier
/// holds no policy, so the value is derived from the pods rather than from a class table.
pub fn parent_group_identity(values: impl IntoIterator<Item = i64>) -> i64 {
    let mut it = values.into_iter();
    let Some(first) = it.next() else { return 0 };
    if it.all(|v| v == first) { first } else { 0 }
}

/// Why a pod is not applied. The text names the field and the bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refused {
    pub reason: String,
}

fn refuse(reason: impl Into<String>) -> Refused {
    Refused {
        reason: reason.into(),
    }
}

/// `<prefix>.<knob>`, formatted only when a value is refused (validation runs every resync).
struct Field<'a>(&'a str, &'a str);

impl std::fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

fn in_range(field: impl std::fmt::Display, v: i64, lo: i64, hi: i64) -> Result<(), Refused> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(refuse(format!("{field} = {v} is outside {lo}..={hi}")))
    }
}

fn not_above(field: impl std::fmt::Display, v: i64, bound: i64, what: &str) -> Result<(), Refused> {
    if v <= bound {
        Ok(())
    } else {
        Err(refuse(format!("{field} = {v} is above {what} {bound}")))
    }
}

fn spec_container<'a>(
    pod: &'a PodSpecView,
    section: &str,
    name: &str,
) -> Result<&'a ContainerSpecView, Refused> {
    pod.container(name).ok_or_else(|| {
        refuse(format!(
            "{section}.containers[{name:?}]: the pod spec has no such container"
        ))
    })
}

fn validate_container_memory(
    field: &str,
    k: &ContainerMemoryKnobs,
    c: &ContainerSpecView,
) -> Result<(), Refused> {
    let (request_bound, limit_bound) = if c.sidecar {
        ("the sidecar's memory request", "the sidecar's memory limit")
    } else {
        (
            "the container's memory request",
            "the container's memory limit",
        )
    };
    let request = c.effective_memory_request();
    in_range(Field(field, "memory.min"), k.min, 0, i64::MAX)?;
    in_range(Field(field, "memory.low"), k.low, 0, i64::MAX)?;
    not_above(Field(field, "memory.min"), k.min, request, request_bound)?;
    not_above(Field(field, "memory.low"), k.low, request, request_bound)?;
    if let MaxOr::Bytes(high) = k.high {
        in_range(Field(field, "memory.high"), high, 0, i64::MAX)?;
        if let Some(limit) = c.effective_memory_limit() {
            not_above(Field(field, "memory.high"), high, limit, limit_bound)?;
        }
        if high < k.min {
            return Err(refuse(format!(
                "{field}.memory.high = {high} is below its memory.min {}",
                k.min
            )));
        }
    }
    // The knobs that carry a parameter's value have that parameter's range (the api's table).
    for (knob, v, spec) in k.ranged() {
        in_range(Field(field, knob), v, spec.min, spec.max)?;
    }
    Ok(())
}

/// Batch values may be lower than the batch resources allow (that only restricts the pod
/// itself) but never higher, and never unlimited where the spec sets a limit.
fn validate_batch(
    field: &str,
    b: &BatchKnobs,
    cpu_request: Option<i64>,
    cpu_limit: Option<i64>,
    mem_limit: Option<i64>,
) -> Result<(), Refused> {
    in_range(
        Field(field, "cpu.shares"),
        b.cpu_shares,
        knobs::CPU_SHARES_MIN,
        knobs::CPU_SHARES_MAX,
    )?;
    let shares_bound = knobs::milli_cpu_to_shares(cpu_request.unwrap_or(0));
    not_above(
        Field(field, "cpu.shares"),
        b.cpu_shares,
        shares_bound,
        "the shares of the batch-cpu request,",
    )?;
    let quota = b.cpu_cfs_quota_us;
    match (cpu_limit, quota) {
        (_, -1) if cpu_limit.is_some() => {
            return Err(refuse(format!(
                "{field}.cpu.cfs_quota_us = -1 (unlimited) but the batch-cpu limit is {}m",
                cpu_limit.unwrap_or(0)
            )));
        }
        (_, -1) => {}
        (limit, q) => {
            in_range(
                Field(field, "cpu.cfs_quota_us"),
                q,
                knobs::CFS_QUOTA_MIN_US,
                i64::MAX,
            )?;
            if let Some(limit) = limit {
                not_above(
                    Field(field, "cpu.cfs_quota_us"),
                    q,
                    knobs::milli_cpu_to_quota(Some(limit)),
                    "the quota of the batch-cpu limit,",
                )?;
            }
        }
    }
    match (mem_limit, b.memory_limit_in_bytes) {
        (Some(limit), -1) => Err(refuse(format!(
            "{field}.memory.limit_in_bytes = -1 (unlimited) but the batch-memory limit is {limit}"
        ))),
        (_, -1) => Ok(()),
        (limit, m) => {
            in_range(
                Field(field, "memory.limit_in_bytes"),
                m,
                knobs::PAGE_SIZE,
                i64::MAX,
            )?;
            match limit {
                Some(limit) => not_above(
                    Field(field, "memory.limit_in_bytes"),
                    m,
                    limit,
                    "the batch-memory limit",
                ),
                None => Ok(()),
            }
        }
    }
}

/// Sum of `f` over containers; `None` if any container lacks the value (= unlimited).
fn sum_all(cs: &[ContainerSpecView], f: impl Fn(&ContainerSpecView) -> Option<i64>) -> Option<i64> {
    cs.iter()
        .try_fold(0i64, |acc, c| f(c).map(|v| acc.saturating_add(v)))
}

/// The pod cgroup's memory knobs. Their bound is the pod-level memory request where the pod
/// sets one (`spec.resources`), else the sum over the containers and native sidecars; plus the
/// overhead either way. `memory.high` needs a pod-level memory limit and stays within it.
fn validate_pod_memory(k: &PodMemoryKnobs, pod: &PodSpecView) -> Result<(), Refused> {
    let (basis, what) = match pod.pod_level.request {
        Some(r) => (r, "the pod-level memory request (plus overhead)"),
        None => (
            pod.containers
                .iter()
                .map(ContainerSpecView::effective_memory_request)
                .fold(0, i64::saturating_add),
            "the pod's memory request",
        ),
    };
    let pod_request = basis.saturating_add(pod.overhead_memory);
    for (field, v) in [
        ("memoryQOS.pod.memory.min", k.min),
        ("memoryQOS.pod.memory.low", k.low),
    ] {
        in_range(field, v, 0, i64::MAX)?;
        not_above(field, v, pod_request, what)?;
    }
    let Some(high) = k.high else { return Ok(()) };
    let field = "memoryQOS.pod.memory.high";
    let Some(limit) = pod.pod_level.limit else {
        return Err(refuse(format!(
            "{field} = {high} but the pod spec has no pod-level memory limit (spec.resources.limits.memory)"
        )));
    };
    in_range(field, high, 0, i64::MAX)?;
    not_above(field, high, limit, "the pod-level memory limit")?;
    if high < k.min {
        return Err(refuse(format!(
            "{field} = {high} is below its memory.min {}",
            k.min
        )));
    }
    Ok(())
}

/// Checks every value of the annotation against the pod spec and the kernel ranges.
pub fn validate(q: &ResolvedQos, pod: &PodSpecView) -> Result<(), Refused> {
    let mq = &q.memory_qos;
    if let Some((spec, v)) = mq.params.out_of_range() {
        return Err(refuse(format!(
            "memoryQOS.params.{} = {v} is outside {}..={}",
            spec.name, spec.min, spec.max
        )));
    }
    for (name, k) in &mq.containers {
        let c = spec_container(pod, "memoryQOS", name)?;
        validate_container_memory(&format!("memoryQOS.containers[{name:?}]"), k, c)?;
    }
    validate_pod_memory(&mq.pod, pod)?;
    if let Some(c) = &q.cpu_qos {
        let (lo, hi) = ResolvedCpuQos::GROUP_IDENTITY_RANGE;
        in_range("cpuQOS.groupIdentity", c.group_identity, lo, hi)?;
    }
    if let Some(batch) = &q.batch {
        if !pod.containers.iter().any(ContainerSpecView::has_batch) {
            return Err(refuse(
                "batch is set but the pod spec has no kubernetes.io/batch-cpu or batch-memory resources",
            ));
        }
        for (name, b) in &batch.containers {
            let c = spec_container(pod, "batch", name)?;
            let field = format!("batch.containers[{name:?}]");
            validate_batch(
                &field,
                b,
                c.batch_cpu_request_or_limit(),
                c.batch_cpu_limit,
                c.batch_memory_limit,
            )?;
        }
        let cs = &pod.containers;
        let cpu_request = cs
            .iter()
            .filter_map(ContainerSpecView::batch_cpu_request_or_limit)
            .fold(0i64, i64::saturating_add);
        validate_batch(
            "batch.pod",
            &batch.pod,
            Some(cpu_request),
            sum_all(cs, |c| c.batch_cpu_limit),
            sum_all(cs, |c| c.batch_memory_limit),
        )?;
    }
    Ok(())
}

/// Whether an annotation that failed [`validate`] belongs to an in-place resize rather than to
/// a forgery (docs/contract.md §6, Resize), and why, for the pod's report and Event:
///
/// - it is valid against the memory the kubelet has allocated (`status.containerStatuses[]
///   .resources`): the resize is pending or in progress, the container still holds the old
///   amount and the annotation (which the webhook bases on the allocated amount) says so;
/// - or it is the annotation that passed before this version of the pod (`matched_before`):
///   the resize finished and the webhook's re-resolver has not patched the pod yet.
///
/// Either way nothing above the spec is written: the caller keeps the values last applied.
pub fn resize_hold(
    q: &ResolvedQos,
    pod: &PodSpecView,
    refused: &Refused,
    matched_before: bool,
) -> Option<String> {
    if let Some(allocated) = pod.allocated_view()
        && validate(q, &allocated).is_ok()
    {
        return Some(format!(
            "in-place resize not finished: the annotation matches the memory the kubelet has allocated, not yet the spec ({}); keeping the values last applied",
            pod.resize_summary()
        ));
    }
    matched_before.then(|| {
        format!(
            "the pod was resized and its annotation predates it ({refused}); keeping the values last applied until the webhook re-resolves the pod"
        )
    })
}

/// The memory and cpu directories of one cgroup (the same directory on v2).
struct Dirs {
    memory: Arc<Path>,
    cpu: Arc<Path>,
}

impl Dirs {
    fn new(layout: &Layout, rel: &Path) -> Result<Self, Refused> {
        let dir = |c| layout.dir(rel, c).map_err(|e| refuse(e.to_string()));
        let memory: Arc<Path> = dir(Controller::Memory)?.into();
        let cpu = match layout.version {
            CgroupVersion::V2 => memory.clone(),
            CgroupVersion::V1 => dir(Controller::Cpu)?.into(),
        };
        Ok(Self { memory, cpu })
    }

    /// The directory of a knob's controller: knobs live in the memory and cpu controllers only
    /// ([`Knob::controller`]).
    fn of(&self, controller: Controller) -> Arc<Path> {
        match controller {
            Controller::Cpu => self.cpu.clone(),
            _ => self.memory.clone(),
        }
    }
}

fn push(
    plan: &mut Plan,
    version: CgroupVersion,
    target: &Target,
    dirs: &Dirs,
    knob: Knob,
    value: Value,
) {
    let t = map_knob(version, knob, value);
    plan.writes.push(PlannedWrite {
        target: target.clone(),
        knob,
        value,
        dir: dirs.of(knob.controller()),
        file: t.file,
        text: t.text,
        expect: t.expect,
    });
}

/// The static memory knobs shared by the pod and its containers.
fn static_memory(
    wmark_ratio: i64,
    scale: i64,
    min_adj: i64,
    priority: i64,
    use_prio: i64,
    oom_group: i64,
) -> [(Knob, Value); 6] {
    [
        (Knob::WmarkRatio, Value::Int(wmark_ratio)),
        (Knob::WmarkScaleFactor, Value::Int(scale)),
        (Knob::WmarkMinAdj, Value::Int(min_adj)),
        (Knob::Priority, Value::Int(priority)),
        (Knob::UsePriorityOom, Value::Int(use_prio)),
        (Knob::OomGroup, Value::Int(oom_group)),
    ]
}

fn batch_values(b: &BatchKnobs) -> [(Knob, Value); 3] {
    let limit = match b.memory_limit_in_bytes {
        -1 => Value::Unlimited,
        m => Value::Bytes(m),
    };
    [
        (Knob::CpuShares, Value::Int(b.cpu_shares)),
        (Knob::CpuCfsQuotaUs, Value::Int(b.cpu_cfs_quota_us)),
        (Knob::MemoryLimitInBytes, limit),
    ]
}

/// The CPU QoS writes of one cgroup. Group identity goes to the pod and every container;
/// the `cpu.idle` fallback only to the pod (SCHED_IDLE applies to the group among its siblings,
/// so the pod being idle makes everything below it idle).
fn cpu_qos_values(c: &ResolvedCpuQos, caps: NodeCaps, is_pod: bool) -> Vec<(Knob, Value)> {
    if caps.uses_cpu_idle() {
        if is_pod {
            vec![(Knob::CpuIdle, Value::Int(cpu_idle_value(c)))]
        } else {
            Vec::new()
        }
    } else {
        vec![(Knob::CpuBvtWarpNs, Value::Int(group_identity(c)))]
    }
}

/// `cpu.idle = 0` on the pod when the node holds it there ([`NodeCaps::cpu_idle_reset`]),
/// whatever the annotation's CPU section says: a pod made idle by an earlier release may
/// have lost its `cpuQOS` since.
fn cpu_idle_reset(caps: NodeCaps) -> Option<(Knob, Value)> {
    caps.cpu_idle_reset()
        .then_some((Knob::CpuIdle, Value::Int(0)))
}

/// Whether the plan makes the pod cgroup SCHED_IDLE: the kernel then refuses `cpu.shares` on it
/// (EINVAL) and ignores its weight, so the pod-level `cpu.shares` is not planned.
fn pod_is_idle(q: &ResolvedQos, caps: NodeCaps) -> bool {
    caps.uses_cpu_idle() && q.cpu_qos.as_ref().is_some_and(|c| cpu_idle_value(c) == 1)
}

/// Builds the writes without judging the values (see [`validate`]); fails only when a path
/// cannot be built safely (a forged UID or container ID).
pub fn build(
    q: &ResolvedQos,
    pod: &PodSpecView,
    layout: &Layout,
    caps: NodeCaps,
) -> Result<Plan, Refused> {
    let pod_rel = layout
        .pod_dir(&pod.uid, pod.kube_qos)
        .map_err(|e| refuse(e.to_string()))?;
    let mut plan = Plan::default();
    let pod_dirs = Dirs::new(layout, &pod_rel)?;
    for (knob, value) in pod_values(q, pod, caps) {
        push(
            &mut plan,
            layout.version,
            &Target::Pod,
            &pod_dirs,
            knob,
            value,
        );
    }
    for name in container_names(q, pod, caps) {
        let Some(raw_id) = pod.container(name).and_then(|c| c.container_id.as_deref()) else {
            plan.pending.push(name.clone());
            continue;
        };
        let id =
            ContainerId::parse(raw_id).map_err(|e| refuse(format!("container {name:?}: {e}")))?;
        let dirs = Dirs::new(layout, &pod_rel.join(layout.container_leaf(&id)))?;
        let target = Target::Container(name.clone());
        for (knob, value) in container_values(q, name, caps) {
            push(&mut plan, layout.version, &target, &dirs, knob, value);
        }
        if q.memory_qos.containers.contains_key(name) {
            plan.wmark_high
                .push((name.clone(), dirs.memory.join(knobs::MEMORY_WMARK_HIGH)));
        }
    }
    Ok(plan)
}

/// The pod cgroup's values, in write order. Memory: min/low from the annotation and the static
/// knobs as the containers get them (Koordinator writes the same values at pod level; disabled
/// -> the reset parameters). Then `cpu.idle` before `cpu.shares`: leaving idle (1 -> 0) must
/// precede the shares write, and entering idle drops the shares write (see [`pod_is_idle`]).
///
/// `memory.high` only on a pod with a pod-level memory limit (the only pods whose annotation
/// may carry one): the annotation's value, else unlimited, so turning throttling off undoes it.
fn pod_values(q: &ResolvedQos, pod: &PodSpecView, caps: NodeCaps) -> Vec<(Knob, Value)> {
    let mq = &q.memory_qos;
    let p = if mq.enabled {
        mq.params
    } else {
        MemoryQosParams::RESET
    };
    let mut out = vec![
        (Knob::MemoryMin, Value::Bytes(mq.pod.min)),
        (Knob::MemoryLow, Value::Bytes(mq.pod.low)),
    ];
    if pod.pod_level.limit.is_some() {
        let high = mq.pod.high.map_or(Value::Unlimited, Value::Bytes);
        out.push((Knob::MemoryHigh, high));
    }
    out.extend(static_memory(
        p.wmark_ratio,
        p.wmark_scale_permill,
        p.wmark_min_adj,
        p.priority,
        p.priority_enable,
        p.oom_kill_group,
    ));
    // cpu.idle before cpu.shares (see above).
    out.extend(cpu_idle_reset(caps));
    if let Some(c) = &q.cpu_qos {
        out.extend(cpu_qos_values(c, caps, true));
    }
    if let Some(batch) = &q.batch {
        let idle = pod_is_idle(q, caps);
        out.extend(
            batch_values(&batch.pod)
                .into_iter()
                .filter(|(knob, _)| !(idle && *knob == Knob::CpuShares)),
        );
    }
    out
}

/// The containers that get writes, in order: those of the memory section, then those only in
/// the batch section, then (group identity) every other container of the spec.
fn container_names<'a>(
    q: &'a ResolvedQos,
    pod: &'a PodSpecView,
    caps: NodeCaps,
) -> Vec<&'a String> {
    let mq = &q.memory_qos;
    let mut names: Vec<&String> = mq.containers.keys().collect();
    if let Some(batch) = &q.batch {
        names.extend(
            batch
                .containers
                .keys()
                .filter(|n| !mq.containers.contains_key(*n)),
        );
    }
    if q.cpu_qos.is_some() && !caps.uses_cpu_idle() {
        // Group identity goes to every container of the spec, annotated or not.
        let extra: Vec<&String> = pod
            .containers
            .iter()
            .map(|c| &c.name)
            .filter(|n| !names.contains(n))
            .collect();
        names.extend(extra);
    }
    names
}

/// One container cgroup's values, in write order: memory, batch, CPU QoS.
fn container_values(q: &ResolvedQos, name: &str, caps: NodeCaps) -> Vec<(Knob, Value)> {
    let mut out = Vec::new();
    if let Some(k) = q.memory_qos.containers.get(name) {
        let high = match k.high {
            MaxOr::Max => Value::Unlimited,
            MaxOr::Bytes(b) => Value::Bytes(b),
        };
        out.extend([
            (Knob::MemoryMin, Value::Bytes(k.min)),
            (Knob::MemoryLow, Value::Bytes(k.low)),
            (Knob::MemoryHigh, high),
        ]);
        out.extend(static_memory(
            k.wmark_ratio,
            k.wmark_scale_factor,
            k.wmark_min_adj,
            k.priority,
            k.use_priority_oom,
            k.oom_group,
        ));
    }
    if let Some(b) = q.batch.as_ref().and_then(|b| b.containers.get(name)) {
        out.extend(batch_values(b));
    }
    if let Some(c) = &q.cpu_qos {
        out.extend(cpu_qos_values(c, caps, false));
    }
    out
}

/// The values one container's cgroup gets, in write order, for a runtime that writes them when
/// it creates the container (the NRI plugin): checked exactly as [`plan`] checks the whole pod,
/// so a value the reconcile path would refuse is never handed to the runtime either. Empty when
/// the annotation has nothing for this container (an init container, an unannotated one).
pub fn container_plan(
    q: &ResolvedQos,
    pod: &PodSpecView,
    container: &str,
    caps: NodeCaps,
) -> Result<Vec<(Knob, Value)>, Refused> {
    validate(q, pod)?;
    if !container_names(q, pod, caps)
        .iter()
        .any(|n| n.as_str() == container)
    {
        return Ok(Vec::new());
    }
    Ok(container_values(q, container, caps))
}

/// [`validate`] then [`build`].
pub fn plan(
    q: &ResolvedQos,
    pod: &PodSpecView,
    layout: &Layout,
    caps: NodeCaps,
) -> Result<Plan, Refused> {
    validate(q, pod)?;
    build(q, pod, layout, caps)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
