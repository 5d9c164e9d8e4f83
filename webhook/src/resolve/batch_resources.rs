//! Batch resources of BE pods (docs/contract.md §2, Batch resources): cpu/memory ->
//! `kubernetes.io/batch-cpu` / `batch-memory`, the batch cgroup values, and Koordinator's
//! extended-resource-spec annotation.

use std::collections::BTreeMap;

use koord_api::keys::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY};
use koord_api::knobs::{milli_cpu_to_quota, milli_cpu_to_shares};
use koord_api::quantity::{format_decimal_si, parse_milli, parse_value};
use koord_api::{BatchKnobs, ResolvedBatch};

use super::changes::{BatchResources, OwnedResources};
use super::pod_input::{
    ContainerInput, PodInput, ResourceMap, ResourcesInput, parse_quantity, resource_field,
};
use crate::policy::FieldError;

/// A container's resources as the pod will carry them: untouched, moved to batch resources,
/// or, for a running pod, cpu and memory as the kubelet has allocated them.
#[derive(Debug)]
pub enum EffectiveResources<'v, 'a> {
    Original(Option<&'v ResourcesInput<'a>>),
    Batch(BatchResources),
    /// In-place resize (docs/contract.md §5): `cpu` and `memory` from
    /// `status.containerStatuses[].resources`, the other resources (which cannot be resized)
    /// from the spec. A resize that is pending, infeasible or in progress has not reached
    /// the status yet, so it changes nothing here.
    Allocated {
        spec: Option<&'v ResourcesInput<'a>>,
        status: &'v ResourcesInput<'a>,
    },
}

/// The resources the kubelet resizes in place, the ones the status is authoritative for.
fn is_resizable(key: &str) -> bool {
    key == RESOURCE_CPU || key == RESOURCE_MEMORY
}

fn list_get<'v>(list: Option<&'v ResourceMap<'_>>, key: &str) -> Option<&'v str> {
    list?.get(key).map(|q| q.as_str())
}

impl EffectiveResources<'_, '_> {
    pub fn request(&self, key: &str) -> Option<&str> {
        match self {
            Self::Original(r) => list_get((*r)?.requests.as_ref(), key),
            Self::Batch(b) => b.requests.as_ref()?.get(key).map(String::as_str),
            Self::Allocated { spec, status } => {
                let from = if is_resizable(key) {
                    Some(*status)
                } else {
                    *spec
                };
                list_get(from?.requests.as_ref(), key)
            }
        }
    }

    pub fn limit(&self, key: &str) -> Option<&str> {
        match self {
            Self::Original(r) => list_get((*r)?.limits.as_ref(), key),
            Self::Batch(b) => b.limits.as_ref()?.get(key).map(String::as_str),
            Self::Allocated { spec, status } => {
                let from = if is_resizable(key) {
                    Some(*status)
                } else {
                    *spec
                };
                list_get(from?.limits.as_ref(), key)
            }
        }
    }

    /// Request with the apiserver's defaulting: a missing request takes the limit.
    pub fn request_or_limit(&self, key: &str) -> Option<&str> {
        self.request(key).or_else(|| self.limit(key))
    }

    fn has_batch(&self) -> bool {
        [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY]
            .iter()
            .any(|k| self.request(k).is_some() || self.limit(k).is_some())
    }

    /// Whether the container carries `kubernetes.io/batch-memory` (request or limit).
    pub fn has_batch_memory(&self) -> bool {
        self.request(RESOURCE_BATCH_MEMORY).is_some() || self.limit(RESOURCE_BATCH_MEMORY).is_some()
    }
}

/// One resource list with cpu -> batch-cpu (integer milli-cores rounded up, canonical form),
/// memory -> batch-memory (unchanged text); other resources are kept.
fn batch_list(list: &ResourceMap<'_>, field: &str) -> Result<OwnedResources, FieldError> {
    let mut out = OwnedResources::new();
    for (name, q) in list.iter() {
        match name.as_str() {
            RESOURCE_CPU => {
                let milli = parse_milli(q.as_str())
                    .map_err(|e| FieldError::new(format!("{field}.cpu"), e.to_string()))?;
                out.insert(RESOURCE_BATCH_CPU.to_owned(), format_decimal_si(milli));
            }
            RESOURCE_MEMORY => {
                parse_value(q.as_str())
                    .map_err(|e| FieldError::new(format!("{field}.memory"), e.to_string()))?;
                out.insert(
                    RESOURCE_BATCH_MEMORY.to_owned(),
                    q.as_str().trim().to_owned(),
                );
            }
            other => {
                out.insert(other.to_owned(), q.as_str().to_owned());
            }
        }
    }
    Ok(out)
}

fn has_cpu_or_memory(list: Option<&ResourceMap<'_>>) -> bool {
    list.is_some_and(|l| l.contains_key(RESOURCE_CPU) || l.contains_key(RESOURCE_MEMORY))
}

/// Whether the pod sets cpu or memory at pod level (`spec.resources`): Kubernetes allows only
/// cpu, memory and hugepages there, so they cannot become batch resources.
pub fn has_pod_level_cpu_or_memory(pod: &PodInput<'_>) -> bool {
    pod.spec.resources.as_ref().is_some_and(|r| {
        has_cpu_or_memory(r.requests.as_ref()) || has_cpu_or_memory(r.limits.as_ref())
    })
}

/// Whether a BE pod has cpu/memory that the translation would move (in a container, an init
/// container or the overhead).
pub fn has_movable_resources(pod: &PodInput<'_>) -> bool {
    let container_has = |c: &ContainerInput<'_>| {
        c.resources.as_ref().is_some_and(|r| {
            has_cpu_or_memory(r.requests.as_ref()) || has_cpu_or_memory(r.limits.as_ref())
        })
    };
    pod.spec.containers.iter().any(container_has)
        || pod.spec.init_containers.iter().any(container_has)
        || has_cpu_or_memory(pod.spec.overhead.as_ref())
}

/// A container's batch resources, or `None` when it has no cpu/memory to move.
fn batch_container_resources(
    c: &ContainerInput<'_>,
    field: &str,
) -> Result<Option<BatchResources>, FieldError> {
    let Some(res) = c.resources.as_ref() else {
        return Ok(None);
    };
    if !has_cpu_or_memory(res.requests.as_ref()) && !has_cpu_or_memory(res.limits.as_ref()) {
        return Ok(None);
    }
    let limits = res
        .limits
        .as_ref()
        .map(|l| batch_list(l, &format!("{field}.limits")))
        .transpose()?;
    let mut requests = res
        .requests
        .as_ref()
        .map(|r| batch_list(r, &format!("{field}.requests")))
        .transpose()?;
    // A missing request takes the limit, as the apiserver's defaulting would have done.
    if let Some(limits) = &limits {
        for key in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
            if let Some(v) = limits.get(key) {
                requests
                    .get_or_insert_with(OwnedResources::new)
                    .entry(key.to_owned())
                    .or_insert_with(|| v.clone());
            }
        }
    }
    Ok(Some(BatchResources { requests, limits }))
}

/// The pod overhead as batch resources, or `None` when it has no cpu/memory.
fn batch_overhead(pod: &PodInput<'_>) -> Result<Option<OwnedResources>, FieldError> {
    match pod.spec.overhead.as_ref() {
        Some(o) if has_cpu_or_memory(Some(o)) => batch_list(o, "spec.overhead").map(Some),
        _ => Ok(None),
    }
}

/// Whether any of the containers carries batch resources.
pub fn any_has_batch(containers: &[Named<'_, '_, '_>]) -> bool {
    containers.iter().any(|n| n.res.has_batch())
}

/// Batch cgroup values, present only when the pod carries batch resources (`pod_has_batch`:
/// a container, an init container or the overhead).
pub fn batch_knobs(
    containers: &[Named<'_, '_, '_>],
    pod_has_batch: bool,
) -> Result<Option<ResolvedBatch>, FieldError> {
    if !pod_has_batch {
        return Ok(None);
    }
    let mut out = ResolvedBatch {
        pod: BatchKnobs {
            cpu_shares: 0,
            cpu_cfs_quota_us: 0,
            memory_limit_in_bytes: 0,
        },
        containers: BTreeMap::new(),
    };
    let (mut cpu_req_sum, mut cpu_lim_sum, mut mem_lim_sum) = (0i64, Some(0i64), Some(0i64));
    for n in containers {
        let (name, res) = (n.name, n.res);
        let field = |kind: &str, k: &str| n.field(kind, k);
        let cpu_req = parse_quantity(
            res.request_or_limit(RESOURCE_BATCH_CPU),
            parse_value,
            || field("requests", RESOURCE_BATCH_CPU),
        )?;
        let cpu_lim = parse_quantity(res.limit(RESOURCE_BATCH_CPU), parse_value, || {
            field("limits", RESOURCE_BATCH_CPU)
        })?;
        let mem_lim = parse_quantity(res.limit(RESOURCE_BATCH_MEMORY), parse_value, || {
            field("limits", RESOURCE_BATCH_MEMORY)
        })?;
        cpu_req_sum = cpu_req_sum.saturating_add(cpu_req.filter(|v| *v > 0).unwrap_or(0));
        cpu_lim_sum = cpu_lim_sum
            .zip(cpu_lim.filter(|v| *v > 0))
            .map(|(a, b)| a.saturating_add(b));
        mem_lim_sum = mem_lim_sum
            .zip(mem_lim.filter(|v| *v > 0))
            .map(|(a, b)| a.saturating_add(b));
        out.containers.insert(
            name.to_owned(),
            BatchKnobs {
                cpu_shares: milli_cpu_to_shares(cpu_req.unwrap_or(0)),
                cpu_cfs_quota_us: milli_cpu_to_quota(cpu_lim),
                memory_limit_in_bytes: mem_lim.filter(|v| *v > 0).unwrap_or(-1),
            },
        );
    }
    if containers.is_empty() {
        (cpu_lim_sum, mem_lim_sum) = (None, None);
    }
    out.pod = BatchKnobs {
        cpu_shares: milli_cpu_to_shares(cpu_req_sum),
        cpu_cfs_quota_us: milli_cpu_to_quota(cpu_lim_sum),
        memory_limit_in_bytes: mem_lim_sum.unwrap_or(-1),
    };
    Ok(Some(out))
}

/// `node.koordinator.sh/extended-resource-spec`: the batch entries of each container, in
/// Koordinator's shape (`limits` before `requests`, sorted keys); `None` when no container has
/// any (`containers_have_batch`, from [`any_has_batch`]).
pub fn extended_resource_spec(
    containers: &[Named<'_, '_, '_>],
    containers_have_batch: bool,
) -> Option<String> {
    if !containers_have_batch {
        return None;
    }
    type Entry<'a> = BTreeMap<&'static str, BTreeMap<&'static str, &'a str>>;
    let mut spec: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    for &Named { name, res, .. } in containers {
        let mut entry = Entry::new();
        for key in [RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY] {
            if let Some(v) = res.limit(key) {
                entry.entry("limits").or_default().insert(key, v);
            }
            if let Some(v) = res.request(key) {
                entry.entry("requests").or_default().insert(key, v);
            }
        }
        if !entry.is_empty() {
            spec.insert(name, entry);
        }
    }
    if spec.is_empty() {
        return None;
    }
    let mut root = BTreeMap::new();
    root.insert("containers", spec);
    serde_json::to_string(&root).ok()
}

/// A long-running container (regular or native sidecar), where it sits in the spec (for
/// error messages) and its resources as the pod will carry them.
#[derive(Debug, Clone, Copy)]
pub struct Named<'s, 'v, 'a> {
    pub name: &'s str,
    /// `containers` or `initContainers`.
    pub list: &'static str,
    pub index: usize,
    pub sidecar: bool,
    pub res: &'s EffectiveResources<'v, 'a>,
}

impl Named<'_, '_, '_> {
    /// `spec.{list}[{index}].resources.{kind}.{resource}`.
    pub fn field(&self, kind: &str, resource: &str) -> String {
        resource_field(self.list, self.index, kind, resource)
    }
}

/// Every container's resources as the pod will carry them, and the overhead when it moved to
/// batch resources.
#[derive(Debug)]
pub struct PodResources<'v, 'a> {
    pub containers: Vec<EffectiveResources<'v, 'a>>,
    pub init_containers: Vec<EffectiveResources<'v, 'a>>,
    pub batch_overhead: Option<OwnedResources>,
}

impl<'v, 'a> PodResources<'v, 'a> {
    /// With `to_batch` (a BE pod at CREATE), cpu/memory move to batch resources.
    pub fn of(pod: &'v PodInput<'a>, to_batch: bool) -> Result<Self, FieldError> {
        Ok(PodResources {
            containers: effective_resources(&pod.spec.containers, "containers", to_batch)?
                .into_iter()
                .zip(&pod.spec.containers)
                .map(|(r, c)| with_allocated(pod, c, r))
                .collect(),
            init_containers: effective_resources(
                &pod.spec.init_containers,
                "initContainers",
                to_batch,
            )?,
            batch_overhead: if to_batch { batch_overhead(pod)? } else { None },
        })
    }

    /// The long-running containers with their names: the regular containers in spec order,
    /// then the native sidecars in `spec.initContainers` order. Plain init containers run to
    /// completion before these start and are left out.
    pub fn named_containers<'s>(&'s self, pod: &'s PodInput<'_>) -> Vec<Named<'s, 'v, 'a>> {
        let regular = pod
            .spec
            .containers
            .iter()
            .zip(&self.containers)
            .enumerate()
            .map(|(index, (c, res))| Named {
                name: c.name.as_str(),
                list: "containers",
                index,
                sidecar: false,
                res,
            });
        let sidecars = pod
            .spec
            .init_containers
            .iter()
            .zip(&self.init_containers)
            .enumerate()
            .filter(|(_, (c, _))| c.is_sidecar())
            .map(|(index, (c, res))| Named {
                name: c.name.as_str(),
                list: "initContainers",
                index,
                sidecar: true,
                res,
            });
        regular.chain(sidecars).collect()
    }

    /// Whether the init containers or the overhead carry batch resources.
    pub fn init_or_overhead_has_batch(&self, pod: &PodInput<'_>) -> bool {
        let overhead_has = match &self.batch_overhead {
            Some(o) => o.contains_key(RESOURCE_BATCH_CPU) || o.contains_key(RESOURCE_BATCH_MEMORY),
            None => pod.spec.overhead.as_ref().is_some_and(|o| {
                o.contains_key(RESOURCE_BATCH_CPU) || o.contains_key(RESOURCE_BATCH_MEMORY)
            }),
        };
        overhead_has
            || self
                .init_containers
                .iter()
                .any(EffectiveResources::has_batch)
    }
}

/// A regular container's resources with what the kubelet has allocated in place of the spec's
/// cpu/memory (after an in-place resize they differ until the kubelet has resized the
/// container, and the container holds the allocated amount, not the desired one). Batch
/// translation happens at CREATE, before any status exists, and is never replaced.
fn with_allocated<'v, 'a>(
    pod: &'v PodInput<'a>,
    c: &'v ContainerInput<'a>,
    r: EffectiveResources<'v, 'a>,
) -> EffectiveResources<'v, 'a> {
    match (r, pod.allocated_resources(c.name.as_str())) {
        (EffectiveResources::Original(spec), Some(status)) => {
            EffectiveResources::Allocated { spec, status }
        }
        (r, _) => r,
    }
}

fn effective_resources<'v, 'a>(
    list: &'v [ContainerInput<'a>],
    list_name: &str,
    to_batch: bool,
) -> Result<Vec<EffectiveResources<'v, 'a>>, FieldError> {
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let batch = if to_batch {
                batch_container_resources(c, &format!("spec.{list_name}[{i}].resources"))?
            } else {
                None
            };
            Ok(match batch {
                Some(b) => EffectiveResources::Batch(b),
                None => EffectiveResources::Original(c.resources.as_ref()),
            })
        })
        .collect()
}
