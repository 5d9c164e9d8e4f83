//! The resolution engine (pure; docs/contract.md §2 and §3): a pod plus the policy
//! configuration in, the resolved QoS and the list of changes out. [`crate::mutation`] renders
//! the changes: as a JSON patch for the admission server, applied to the manifest for the
//! `resolve` command.

mod batch_resources;
pub mod changes;
mod cpu_qos;
mod locality;
mod memory_numbers;
mod memory_qos;
pub mod pod_input;
mod proactive_reclaim;
mod qos_class;
mod resctrl_qos;

use std::collections::BTreeMap;

use koord_api::keys::{
    ANNOTATION_EXTENDED_RESOURCE_SPEC, ANNOTATION_RESOLVED_QOS, LABEL_QOS_CLASS,
    RESOURCE_BATCH_MEMORY, RESOURCE_MEMORY,
};
use koord_api::quantity::parse_value;
use koord_api::{
    ContainerMemoryKnobs, MemoryQosParams, PodMemoryKnobs, QosClass, RESOLVED_QOS_VERSION,
    ResolvedMemoryQos, ResolvedQos,
};

pub use changes::{BatchResources, Change, ContainerList, OwnedResources};
pub use cpu_qos::recommended_group_identity;
pub use memory_numbers::{MemoryBasis, container_knobs};
pub use memory_qos::{
    MemoryQosDecision, ParamSource, PodMemoryQos, decide_memory_qos, parse_memory_qos_annotation,
    recommended_params,
};
pub use pod_input::PodInput;
pub use proactive_reclaim::{
    FloorInput, ProactiveReclaimDecision, decide_proactive_reclaim,
    parse_proactive_reclaim_annotation, proactive_reclaim_section,
};
pub use qos_class::{ClassDecision, KubeQos, kubernetes_qos, resolve_qos_class};

use crate::policy::{FieldError, PolicyConfig};
use batch_resources::{EffectiveResources, Named, PodResources};
use pod_input::parse_quantity;

/// The admission operation being resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Everything is decided; a BE pod's cpu/memory move to batch resources.
    Create,
    /// Annotations are mutable: labels and annotations are re-resolved, resources are left as
    /// they are (a BE pod's moved to batch resources at CREATE; docs/contract.md §5).
    Update,
}

/// What resolution needs besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct ResolveContext<'c> {
    pub namespace: &'c str,
    pub operation: Operation,
    pub config: &'c PolicyConfig,
}

/// Why a pod cannot be admitted: one line naming the field and the allowed values
/// (docs/contract.md §4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(#[from] pub FieldError);

/// Per-value provenance, for `resolve --explain` and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub class: ClassDecision,
    pub param_sources: [ParamSource; 9],
    /// Containers (regular and init) whose cpu/memory moved to batch resources.
    pub batch_containers: usize,
    /// A BE pod at CREATE whose cpu/memory stayed as they were because colocation is off:
    /// why (docs/contract.md §2, Batch resources).
    pub batch_withheld: Option<&'static str>,
    /// A BE pod at CREATE whose pod-level cpu/memory (`spec.resources`) stayed as they were:
    /// batch resources cannot be pod-level (docs/contract.md §2, Batch resources).
    pub pod_level_kept: bool,
    /// Where the pod cgroup's memory.min/low came from.
    pub pod_memory: PodMemorySource,
    /// The native sidecars that got a memory QoS entry, in spec order.
    pub sidecars: Vec<String>,
    /// Where each proactive reclaim parameter came from, in
    /// [`koord_api::ProactiveReclaimParams::SPECS`] order; `None` when no source states it.
    pub proactive_reclaim_param_sources: Option<[ParamSource; 4]>,
}

/// Where `memoryQOS.pod` memory.min/low came from (docs/contract.md §2, Numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodMemorySource {
    /// The sums over the containers and native sidecars.
    ContainerSums,
    /// `spec.resources.requests.memory`.
    PodLevelRequest,
    /// `spec.resources.limits.memory`, standing for the request (no container has one).
    PodLevelLimit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub resolved: ResolvedQos,
    /// Changes to the incoming pod, in patch order; empty when the pod is already resolved.
    pub changes: Vec<Change>,
    pub explanation: Explanation,
}

/// The admission warning for a BE pod that kept its cpu/memory (kubectl prints it).
pub const WARNING_BATCH_WITHHELD: &str = "koord-qos: BE pod admitted with its cpu/memory unchanged: colocation is off, so no node offers kubernetes.io/batch-cpu/batch-memory (turn it on with colocation-config {\"enable\": true} in the cluster ConfigMap)";

/// The admission warning for a BE pod with pod-level cpu/memory (kubectl prints it).
pub const WARNING_POD_LEVEL_KEPT: &str = "koord-qos: BE pod admitted with its pod-level spec.resources cpu/memory unchanged: Kubernetes allows only cpu, memory and hugepages at pod level, so they cannot become kubernetes.io/batch-cpu/batch-memory and the pod is scheduled against regular cpu/memory (set the BE pod's resources on its containers instead)";

impl Resolution {
    /// The resolved-qos annotation text (compact JSON, stable key order).
    pub fn annotation(&self) -> String {
        self.resolved.to_annotation()
    }

    /// The warning to return with the admission, if any.
    /// Colocation off wins: then nothing was translated, pod-level or not.
    pub fn warning(&self) -> Option<&'static str> {
        match &self.explanation {
            e if e.batch_withheld.is_some() => Some(WARNING_BATCH_WITHHELD),
            e if e.pod_level_kept => Some(WARNING_POD_LEVEL_KEPT),
            _ => None,
        }
    }
}

/// Resolves one pod (docs/contract.md §2).
pub fn resolve_pod(
    pod: &PodInput<'_>,
    ctx: &ResolveContext<'_>,
) -> Result<Resolution, ResolveError> {
    resolve_pod_with_previous(pod, ctx, pod.annotation(ANNOTATION_RESOLVED_QOS))
}

/// [`resolve_pod`] with the resolved-qos annotation this webhook wrote before given explicitly.
/// On UPDATE the admission server passes the stored pod's (`oldObject`) annotation: the
/// incoming one may be a hand edit, and must not influence what is written back.
///
/// The steps run in a fixed order, so a pod with several bad values is always refused for the
/// same one: class, memory QoS, locality, CPU QoS, resctrl, proactive reclaim, then the
/// resources.
pub fn resolve_pod_with_previous(
    pod: &PodInput<'_>,
    ctx: &ResolveContext<'_>,
    previous_resolved: Option<&str>,
) -> Result<Resolution, ResolveError> {
    let class = resolve_qos_class(pod, previous_resolved)?;
    let pod_memory_qos = memory_qos::parse_pod_memory_qos(pod)?;
    let decision = decide_memory_qos(
        class.class,
        ctx.namespace,
        pod_memory_qos.as_ref(),
        ctx.config,
    );
    let memory_locality = locality::resolve_memory_locality(pod, class.class, ctx.config)?;
    let cpu_qos = cpu_qos::resolve_cpu_qos(pod, class.class, ctx.config)?;
    let resctrl_qos = resctrl_qos::resolve_resctrl_qos(class.class, ctx.config);
    let pod_proactive_reclaim = proactive_reclaim::parse_pod_proactive_reclaim(pod)?;
    let proactive_reclaim_decision = decide_proactive_reclaim(
        class.class,
        ctx.namespace,
        pod_proactive_reclaim.as_ref(),
        ctx.config,
    );

    // A BE pod's cpu/memory become batch resources at CREATE, and only when colocation is on:
    // otherwise no node advertises them and the pod would never schedule.
    let be_create = class.class == QosClass::Be && ctx.operation == Operation::Create;
    let to_batch = be_create && ctx.config.colocation.is_enabled();
    let batch_withheld = if be_create && !to_batch && batch_resources::has_movable_resources(pod) {
        ctx.config.colocation.off_reason()
    } else {
        None
    };
    // Pod-level cpu/memory stay as they are (a BE pod's containers still move): batch
    // resources are extended resources, which Kubernetes refuses at pod level.
    let pod_level_kept = be_create && batch_resources::has_pod_level_cpu_or_memory(pod);
    let resources = PodResources::of(pod, to_batch)?;
    let named = resources.named_containers(pod);
    let (sums, container_knobs) = memory_knobs(&named, class.class, &decision.params)?;
    let (pod_knobs, pod_memory) = pod_level_knobs(pod, sums, &decision.params)?;
    let sidecars = named
        .iter()
        .filter(|n| n.sidecar)
        .map(|n| n.name.to_owned())
        .collect();
    let containers_have_batch = batch_resources::any_has_batch(&named);
    let batch = batch_resources::batch_knobs(
        &named,
        containers_have_batch || resources.init_or_overhead_has_batch(pod),
    )?;
    let extended_spec = batch_resources::extended_resource_spec(&named, containers_have_batch);
    let proactive_reclaim = proactive_reclaim_decision
        .as_ref()
        .map(|d| proactive_reclaim_floors(d, &named, class.class, &container_knobs))
        .transpose()?;

    let resolved = ResolvedQos {
        version: RESOLVED_QOS_VERSION,
        qos_class: class.class,
        qos_class_source: class.source,
        memory_qos: ResolvedMemoryQos {
            enabled: decision.enabled,
            policy: decision.policy,
            source: decision.source,
            params: decision.params,
            pod: pod_knobs,
            containers: container_knobs,
        },
        memory_locality,
        batch,
        cpu_qos,
        resctrl_qos,
        proactive_reclaim,
    };
    let (changes, batch_containers) = pod_changes(pod, &class, resources, extended_spec, &resolved);
    Ok(Resolution {
        resolved,
        changes,
        explanation: Explanation {
            class,
            param_sources: decision.param_sources,
            batch_containers,
            batch_withheld,
            pod_level_kept,
            pod_memory,
            sidecars,
            proactive_reclaim_param_sources: proactive_reclaim_decision.map(|d| d.param_sources),
        },
    })
}

/// The proactive reclaim section: every container of the memory QoS section, its floor from
/// its `memory.min` and the memory request its knobs were computed from (docs/contract.md §2,
/// Proactive reclaim).
fn proactive_reclaim_floors(
    decision: &ProactiveReclaimDecision,
    named: &[Named<'_, '_, '_>],
    class: QosClass,
    knobs: &BTreeMap<String, ContainerMemoryKnobs>,
) -> Result<koord_api::ResolvedProactiveReclaim, FieldError> {
    let mut containers = Vec::with_capacity(named.len());
    for n in named {
        containers.push(FloorInput {
            name: n.name,
            memory_min: knobs.get(n.name).map_or(0, |k| k.min),
            request_bytes: memory_request_bytes(n, memory_resource_key(n, class))?,
        });
    }
    Ok(proactive_reclaim_section(decision, containers))
}

/// The memory knobs of every long-running container (regular containers and native
/// sidecars), and the pod's sums of min and low. A BE container's basis is its batch-memory;
/// one that kept its memory (colocation off) is based on that (docs/contract.md §2, Numbers).
fn memory_knobs(
    named: &[Named<'_, '_, '_>],
    class: QosClass,
    params: &MemoryQosParams,
) -> Result<(PodMemoryKnobs, BTreeMap<String, ContainerMemoryKnobs>), FieldError> {
    let mut containers = BTreeMap::new();
    let mut pod = PodMemoryKnobs {
        min: 0,
        low: 0,
        high: None,
    };
    for n in named {
        let basis = memory_basis(n, memory_resource_key(n, class))?;
        let knobs = container_memory_knobs(basis, params);
        pod.min = pod.min.saturating_add(knobs.min);
        pod.low = pod.low.saturating_add(knobs.low);
        containers.insert(n.name.to_owned(), knobs);
    }
    Ok((pod, containers))
}

/// The pod cgroup's knobs where the pod sets pod-level memory (`spec.resources`, KEP-2837):
/// min and low from the pod-level request instead of the containers' sums (the pod is
/// guaranteed its request as a whole, whatever its containers ask for themselves), and
/// `memory.high` from the pod-level limit when throttling is on. A pod-level limit without a
/// request stands for the request only when no container has one, as the apiserver defaults
/// it; otherwise the request is the containers' and the sums stay.
fn pod_level_knobs(
    pod: &PodInput<'_>,
    sums: PodMemoryKnobs,
    params: &MemoryQosParams,
) -> Result<(PodMemoryKnobs, PodMemorySource), FieldError> {
    let parse = |text: Option<&str>, kind: &str| {
        parse_quantity(text, parse_value, || {
            format!("spec.resources.{kind}.{RESOURCE_MEMORY}")
        })
    };
    let limit = parse(pod.pod_level_limit(RESOURCE_MEMORY), "limits")?;
    let request = parse(pod.pod_level_request(RESOURCE_MEMORY), "requests")?;
    let (basis, source) = match (request, limit) {
        (Some(r), _) => (Some(r), PodMemorySource::PodLevelRequest),
        (None, Some(l)) if !any_container_requests_memory(pod) => {
            (Some(l), PodMemorySource::PodLevelLimit)
        }
        _ => (None, PodMemorySource::ContainerSums),
    };
    let mut knobs = match basis {
        Some(request) => {
            let k = container_knobs(MemoryBasis { request, limit }, params);
            PodMemoryKnobs {
                min: k.min,
                low: k.low,
                high: None,
            }
        }
        None => sums,
    };
    knobs.high = memory_numbers::pod_high(limit, params, knobs.min);
    Ok((knobs, source))
}

/// Whether any container (regular, sidecar or plain init) states a memory request or limit.
fn any_container_requests_memory(pod: &PodInput<'_>) -> bool {
    pod.spec
        .containers
        .iter()
        .chain(&pod.spec.init_containers)
        .any(|c| c.request(RESOURCE_MEMORY).is_some() || c.limit(RESOURCE_MEMORY).is_some())
}

/// The knobs of one container; with `wmark_ratio` 0 the kernel keeps no watermark, so
/// `memory.wmark_high` shows `"max"` rather than a meaningless 0.
fn container_memory_knobs(basis: MemoryBasis, params: &MemoryQosParams) -> ContainerMemoryKnobs {
    let mut knobs = container_knobs(basis, params);
    if params.wmark_ratio == 0 {
        knobs.wmark_high = koord_api::MaxOr::Max;
    }
    knobs
}

fn has_memory(res: &EffectiveResources<'_, '_>) -> bool {
    res.request(RESOURCE_MEMORY).is_some() || res.limit(RESOURCE_MEMORY).is_some()
}

/// The resource a container's memory knobs are computed from: a BE container's batch-memory
/// (also when it has no memory at all), else its memory.
fn memory_resource_key(n: &Named<'_, '_, '_>, class: QosClass) -> &'static str {
    let res = n.res;
    if class == QosClass::Be && (res.has_batch_memory() || !has_memory(res)) {
        RESOURCE_BATCH_MEMORY
    } else {
        RESOURCE_MEMORY
    }
}

fn memory_basis(n: &Named<'_, '_, '_>, key: &str) -> Result<MemoryBasis, FieldError> {
    let limit = memory_quantity(n, n.res.limit(key), "limits", key)?;
    let request = memory_quantity(n, n.res.request(key), "requests", key)?
        .or(limit)
        .unwrap_or(0);
    Ok(MemoryBasis { request, limit })
}

/// The request [`memory_basis`] reads, before a missing one counts as 0: the request of `key`
/// in bytes, else the limit (as the apiserver defaults it); `None` when it states neither.
fn memory_request_bytes(n: &Named<'_, '_, '_>, key: &str) -> Result<Option<i64>, FieldError> {
    match memory_quantity(n, n.res.request(key), "requests", key)? {
        Some(request) => Ok(Some(request)),
        None => memory_quantity(n, n.res.limit(key), "limits", key),
    }
}

/// A memory quantity's `text` in bytes; an error names `resources.{kind}.{key}`.
fn memory_quantity(
    n: &Named<'_, '_, '_>,
    text: Option<&str>,
    kind: &str,
    key: &str,
) -> Result<Option<i64>, FieldError> {
    parse_quantity(text, parse_value, || n.field(kind, key))
}

/// The changes in patch order: the class label, batch resources (containers, init containers,
/// overhead), the extended-resource-spec and resolved-qos annotations; each only when the pod
/// does not already carry it. Also returns how many containers moved to batch resources.
fn pod_changes(
    pod: &PodInput<'_>,
    class: &ClassDecision,
    resources: PodResources<'_, '_>,
    extended_spec: Option<String>,
    resolved: &ResolvedQos,
) -> (Vec<Change>, usize) {
    // The label and the annotation at most, for all but BE pods.
    let mut changes = Vec::with_capacity(4);
    if let Some(label) = class
        .write_label
        .filter(|c| pod.label(LABEL_QOS_CLASS) != Some(c.as_str()))
    {
        changes.push(Change::SetLabel {
            key: LABEL_QOS_CLASS,
            value: label.as_str(),
        });
    }
    let batch_containers = push_resource_changes(
        &mut changes,
        ContainerList::Containers,
        resources.containers,
    ) + push_resource_changes(
        &mut changes,
        ContainerList::InitContainers,
        resources.init_containers,
    );
    if let Some(o) = resources.batch_overhead {
        changes.push(Change::SetOverhead(o));
    }
    if let Some(spec) = extended_spec
        .filter(|s| pod.annotation(ANNOTATION_EXTENDED_RESOURCE_SPEC) != Some(s.as_str()))
    {
        changes.push(Change::SetAnnotation {
            key: ANNOTATION_EXTENDED_RESOURCE_SPEC,
            value: spec,
        });
    }
    // The text is rendered only to compare with one the pod already carries.
    if pod
        .annotation(ANNOTATION_RESOLVED_QOS)
        .is_none_or(|carried| carried != resolved.to_annotation())
    {
        changes.push(Change::SetResolvedQos);
    }
    (changes, batch_containers)
}

fn push_resource_changes(
    changes: &mut Vec<Change>,
    list: ContainerList,
    resources: Vec<EffectiveResources<'_, '_>>,
) -> usize {
    let mut n = 0;
    for (index, r) in resources.into_iter().enumerate() {
        if let EffectiveResources::Batch(resources) = r {
            changes.push(Change::SetResources {
                list,
                index,
                resources,
            });
            n += 1;
        }
    }
    n
}
