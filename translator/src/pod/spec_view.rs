//! The few facts about a pod the applier needs, taken out of the Kubernetes object once:
//! identity, Kubernetes QoS class, the resolved-qos annotation, the pod-level memory
//! (`spec.resources`), and per long-running container (regular containers and native
//! sidecars) the resources the annotation is checked against plus the runtime's container ID.

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_api::keys;
use koord_api::quantity::{parse_milli, parse_value};
use std::collections::BTreeMap;

use crate::cgroup::layout::KubeQos;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpecView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub kube_qos: KubeQos,
    /// The raw `koordinator.sh/resolved-qos` annotation, if any.
    pub resolved_qos: Option<String>,
    /// The regular containers in spec order, then the native sidecars (init containers with
    /// `restartPolicy: Always`); plain init containers are not here (they get no entry).
    pub containers: Vec<ContainerSpecView>,
    /// `spec.overhead.memory` (counted in the pod's request, as the kubelet does).
    pub overhead_memory: i64,
    /// Pod-level memory (`spec.resources`, KEP-2837).
    pub pod_level: PodLevelMemory,
}

/// `spec.resources` memory in bytes; both `None` for a pod without pod-level resources.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodLevelMemory {
    /// The request, else the limit (the apiserver defaults it so when no container requests
    /// memory, and a request above the limit is refused anyway).
    pub request: Option<i64>,
    pub limit: Option<i64>,
}

/// Resource values of one container; bytes for memory, milli-cores for batch-cpu.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ContainerSpecView {
    pub name: String,
    pub memory_request: Option<i64>,
    pub memory_limit: Option<i64>,
    pub batch_cpu_request: Option<i64>,
    pub batch_cpu_limit: Option<i64>,
    pub batch_memory_request: Option<i64>,
    pub batch_memory_limit: Option<i64>,
    /// `status.containerStatuses[].containerID` (`containerd://...`; a sidecar's is in
    /// `status.initContainerStatuses`), once the container exists.
    pub container_id: Option<String>,
    /// The memory the kubelet reports for the container (`status.containerStatuses[].resources`):
    /// what it has allocated and the runtime has applied. It differs from the spec while an
    /// in-place resize is pending or in progress (docs/contract.md §6, Resize).
    pub allocated: Option<AllocatedMemory>,
    /// A native sidecar (`spec.initContainers[]` with `restartPolicy: Always`).
    pub sidecar: bool,
}

/// `status.containerStatuses[].resources` memory request and limit, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AllocatedMemory {
    pub request: Option<i64>,
    pub limit: Option<i64>,
}

impl ContainerSpecView {
    /// The memory request the contract's numbers are based on: `memory`, else `batch-memory`
    /// (BE pods after translation), 0 without either.
    pub fn effective_memory_request(&self) -> i64 {
        self.memory_request
            .or(self.batch_memory_request)
            .unwrap_or(0)
    }

    /// The memory limit: `memory`, else `batch-memory`; `None` = unlimited.
    pub fn effective_memory_limit(&self) -> Option<i64> {
        self.memory_limit.or(self.batch_memory_limit)
    }

    /// The batch-cpu request; a missing request takes the limit, as the apiserver defaults it.
    pub fn batch_cpu_request_or_limit(&self) -> Option<i64> {
        self.batch_cpu_request.or(self.batch_cpu_limit)
    }

    pub fn has_batch(&self) -> bool {
        self.batch_cpu_request.is_some()
            || self.batch_cpu_limit.is_some()
            || self.batch_memory_request.is_some()
            || self.batch_memory_limit.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodSpecViewError {
    #[error("pod has no {0}")]
    Missing(&'static str),
    #[error("container {container:?}: {resource} {value:?} is not a valid quantity")]
    Quantity {
        container: String,
        resource: String,
        value: String,
    },
}

type Resources = BTreeMap<String, Quantity>;

fn parse(
    container: &str,
    res: Option<&Resources>,
    key: &str,
    milli: bool,
) -> Result<Option<i64>, PodSpecViewError> {
    let Some(q) = res.and_then(|r| r.get(key)) else {
        return Ok(None);
    };
    let parsed = if milli {
        parse_milli(&q.0)
    } else {
        parse_value(&q.0)
    };
    parsed.map(Some).map_err(|_| PodSpecViewError::Quantity {
        container: container.to_owned(),
        resource: key.to_owned(),
        value: q.0.clone(),
    })
}

/// The memory of a container's status resources (a request missing there takes the limit, as
/// in the spec).
fn allocated_memory(
    name: &str,
    status: &ResourceRequirements,
) -> Result<AllocatedMemory, PodSpecViewError> {
    let limit = parse(name, status.limits.as_ref(), keys::RESOURCE_MEMORY, false)?;
    Ok(AllocatedMemory {
        request: parse(name, status.requests.as_ref(), keys::RESOURCE_MEMORY, false)?.or(limit),
        limit,
    })
}

fn container_view(
    c: &Container,
    status: Option<&ContainerStatus>,
) -> Result<ContainerSpecView, PodSpecViewError> {
    let container_id = status
        .and_then(|s| s.container_id.as_deref())
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    let allocated = status
        .and_then(|s| s.resources.as_ref())
        .map(|r| allocated_memory(&c.name, r))
        .transpose()?;
    let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    let n = c.name.as_str();
    // batch-cpu is already an integer count of milli-cores, so it is read as a plain value.
    let memory_limit = parse(n, limits, keys::RESOURCE_MEMORY, false)?;
    let batch_memory_limit = parse(n, limits, keys::RESOURCE_BATCH_MEMORY, false)?;
    Ok(ContainerSpecView {
        name: c.name.clone(),
        // The apiserver defaults a missing request to the limit; do the same for manifests
        // read from a file (`once`), which were never defaulted.
        memory_request: parse(n, requests, keys::RESOURCE_MEMORY, false)?.or(memory_limit),
        memory_limit,
        batch_cpu_request: parse(n, requests, keys::RESOURCE_BATCH_CPU, false)?,
        batch_cpu_limit: parse(n, limits, keys::RESOURCE_BATCH_CPU, false)?,
        batch_memory_request: parse(n, requests, keys::RESOURCE_BATCH_MEMORY, false)?
            .or(batch_memory_limit),
        batch_memory_limit,
        container_id,
        allocated,
        sidecar: false,
    })
}

/// Whether an init container is a native sidecar: it runs for the pod's whole life.
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn pod_level_memory(spec: &PodSpec) -> Result<PodLevelMemory, PodSpecViewError> {
    let res = spec.resources.as_ref();
    let limit = parse(
        "(pod level)",
        res.and_then(|r| r.limits.as_ref()),
        keys::RESOURCE_MEMORY,
        false,
    )?;
    let request = parse(
        "(pod level)",
        res.and_then(|r| r.requests.as_ref()),
        keys::RESOURCE_MEMORY,
        false,
    )?;
    Ok(PodLevelMemory {
        request: request.or(limit),
        limit,
    })
}

/// With pod-level cpu or memory, those alone decide the class (KEP-2837, as the apiserver's
/// `ComputePodQOS`); `None` without.
fn pod_level_kube_qos(spec: &PodSpec) -> Option<KubeQos> {
    let res = spec.resources.as_ref()?;
    let read = |list: Option<&Resources>, key: &str| {
        list.and_then(|l| l.get(key))
            .map(|q| parse_milli(&q.0).ok().filter(|v| *v != 0))
    };
    let mut set = false;
    let mut any = false;
    let mut guaranteed = true;
    for key in [keys::RESOURCE_CPU, keys::RESOURCE_MEMORY] {
        let limit = read(res.limits.as_ref(), key);
        let request = read(res.requests.as_ref(), key);
        set |= limit.is_some() || request.is_some();
        let limit = limit.flatten();
        let request = request.flatten().or(limit);
        any |= request.is_some() || limit.is_some();
        guaranteed &= limit.is_some() && request == limit;
    }
    set.then_some(match (any, guaranteed) {
        (false, _) => KubeQos::BestEffort,
        (true, true) => KubeQos::Guaranteed,
        (true, false) => KubeQos::Burstable,
    })
}

/// The Kubernetes QoS class computed from the spec, for pods without `status.qosClass`.
fn compute_kube_qos(pod_containers: &[&Container]) -> KubeQos {
    let mut any = false;
    let mut guaranteed = true;
    for c in pod_containers {
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        for key in [keys::RESOURCE_CPU, keys::RESOURCE_MEMORY] {
            let limit = limits
                .and_then(|l| l.get(key))
                .and_then(|q| parse_milli(&q.0).ok());
            let request = requests
                .and_then(|r| r.get(key))
                .and_then(|q| parse_milli(&q.0).ok())
                .or(limit);
            any |= request.is_some() || limit.is_some();
            guaranteed &= limit.is_some() && request == limit;
        }
    }
    match (any, guaranteed) {
        (false, _) => KubeQos::BestEffort,
        (true, true) => KubeQos::Guaranteed,
        (true, false) => KubeQos::Burstable,
    }
}

impl PodSpecView {
    pub fn from_pod(pod: &Pod) -> Result<Self, PodSpecViewError> {
        let meta = &pod.metadata;
        let spec = pod.spec.as_ref().ok_or(PodSpecViewError::Missing("spec"))?;
        let status = pod.status.as_ref();
        // Names are unique across containers and init containers, so one map serves both
        // (a sidecar's status is in status.initContainerStatuses).
        let statuses: BTreeMap<&str, &ContainerStatus> = status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .chain(
                status
                    .and_then(|s| s.init_container_statuses.as_ref())
                    .into_iter()
                    .flatten(),
            )
            .map(|cs| (cs.name.as_str(), cs))
            .collect();
        let id = |c: &Container| statuses.get(c.name.as_str()).copied();
        let mut containers = spec
            .containers
            .iter()
            .map(|c| container_view(c, id(c)))
            .collect::<Result<Vec<_>, _>>()?;
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c))
        {
            containers.push(ContainerSpecView {
                sidecar: true,
                ..container_view(c, id(c))?
            });
        }
        let all: Vec<&Container> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .collect();
        let kube_qos = status
            .and_then(|s| s.qos_class.as_deref())
            .and_then(KubeQos::from_status)
            .or_else(|| pod_level_kube_qos(spec))
            .unwrap_or_else(|| compute_kube_qos(&all));
        let overhead_memory = parse(
            "(overhead)",
            spec.overhead.as_ref(),
            keys::RESOURCE_MEMORY,
            false,
        )?
        .unwrap_or(0);
        Ok(PodSpecView {
            namespace: meta
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            name: meta
                .name
                .clone()
                .ok_or(PodSpecViewError::Missing("metadata.name"))?,
            uid: meta
                .uid
                .clone()
                .ok_or(PodSpecViewError::Missing("metadata.uid"))?,
            kube_qos,
            resolved_qos: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::ANNOTATION_RESOLVED_QOS))
                .cloned(),
            containers,
            overhead_memory,
            pod_level: pod_level_memory(spec)?,
        })
    }

    pub fn container(&self, name: &str) -> Option<&ContainerSpecView> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The pod with each container's memory as the kubelet has allocated it, when that differs
    /// from the spec for some container (an in-place resize not finished, or finished in the
    /// spec's direction before the annotation followed); `None` when nothing differs.
    pub fn allocated_view(&self) -> Option<PodSpecView> {
        let differs = |c: &ContainerSpecView| {
            c.allocated
                .is_some_and(|a| (a.request, a.limit) != (c.memory_request, c.memory_limit))
        };
        if !self.containers.iter().any(differs) {
            return None;
        }
        let mut view = self.clone();
        for c in &mut view.containers {
            if let Some(a) = c
                .allocated
                .filter(|_| c.memory_request.is_some() || c.memory_limit.is_some())
            {
                c.memory_request = a.request;
                c.memory_limit = a.limit;
            }
        }
        Some(view)
    }

    /// `name memory request <spec> (allocated <status>)` for every container whose allocated
    /// memory differs from its spec: the reason text of a held annotation.
    pub fn resize_summary(&self) -> String {
        let mut out = Vec::new();
        for c in &self.containers {
            let Some(a) = c.allocated else { continue };
            if (a.request, a.limit) == (c.memory_request, c.memory_limit) {
                continue;
            }
            out.push(format!(
                "{:?} memory request {} limit {} (allocated {} / {})",
                c.name,
                show(c.memory_request),
                show(c.memory_limit),
                show(a.request),
                show(a.limit)
            ));
        }
        out.join(", ")
    }
}

fn show(v: Option<i64>) -> String {
    v.map_or_else(|| "none".to_owned(), |b| b.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("pod json")
    }

    #[test]
    fn reads_resources_ids_and_qos() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "1234-abcd",
                         "annotations": {"koordinator.sh/resolved-qos": "{}"}},
            "spec": {"containers": [
                {"name": "app", "resources": {"requests": {"memory": "100Mi", "cpu": "1"}, "limits": {"memory": "200Mi"}}},
                {"name": "side", "resources": {"limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"}}}
            ]},
            "status": {"containerStatuses": [{"name": "app", "containerID": "containerd://abc", "image": "", "imageID": "",
                        "ready": true, "restartCount": 0}]}
        }));
        let v = PodSpecView::from_pod(&p).expect("view");
        assert_eq!(v.kube_qos, KubeQos::Burstable);
        assert_eq!(v.resolved_qos.as_deref(), Some("{}"));
        let app = v.container("app").expect("app");
        assert_eq!(
            (app.memory_request, app.memory_limit),
            (Some(104_857_600), Some(209_715_200))
        );
        assert_eq!(app.container_id.as_deref(), Some("containerd://abc"));
        let side = v.container("side").expect("side");
        assert_eq!(side.batch_cpu_request_or_limit(), Some(500));
        assert_eq!(side.batch_memory_request, Some(1_073_741_824));
        assert_eq!(side.container_id, None);
    }

    #[test]
    fn kube_qos_table() {
        let cases = [
            (serde_json::json!({}), KubeQos::BestEffort),
            (
                serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
                KubeQos::Guaranteed,
            ),
            (
                serde_json::json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
                KubeQos::Guaranteed,
            ),
            (
                serde_json::json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
                KubeQos::Burstable,
            ),
            (
                serde_json::json!({"requests": {"memory": "1Gi"}}),
                KubeQos::Burstable,
            ),
            (
                serde_json::json!({"limits": {"kubernetes.io/batch-cpu": "1000"}}),
                KubeQos::BestEffort,
            ),
        ];
        for (resources, want) in cases {
            let p = pod(serde_json::json!({
                "metadata": {"name": "p", "uid": "ab"},
                "spec": {"containers": [{"name": "c", "resources": resources}]}
            }));
            assert_eq!(
                PodSpecView::from_pod(&p).expect("view").kube_qos,
                want,
                "{resources}"
            );
        }
    }
}
