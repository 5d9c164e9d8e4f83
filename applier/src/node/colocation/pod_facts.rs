//! What colocation needs to know about a pod, taken from the Kubernetes object: its cgroup
//! (UID + Kubernetes QoS class), whether it is BE, and its cpu/memory requests.

use k8s_openapi::api::core::v1::{Container, Pod};
use koord_api::keys;
use koord_api::quantity::{parse_milli, parse_value};

use koord_translator::cgroup::layout::KubeQos;
use koord_translator::pod::phase;
use koord_translator::pod::spec_view::PodSpecView;

use super::capacity::Resources;
use crate::node::shared::qos_label::label_is_be;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub kube_qos: KubeQos,
    /// Koordinator class BE (label, legacy label) or a pod asking for batch resources.
    pub be: bool,
    /// cpu (milli) / memory (bytes) requests as the scheduler counts them: max(sum of
    /// containers, largest init container) + overhead. BE pods have none after translation.
    pub request: Resources,
    /// `kubernetes.io/batch-cpu` (milli-cores, the resource's own unit) / `batch-memory`
    /// (bytes) requests, summed the same way (extended resources have no overhead).
    pub batch_request: Resources,
}

fn request_of(c: &Container, key: &str, milli: bool) -> i64 {
    let res = c.resources.as_ref();
    let q = res
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(key))
        .or_else(|| res.and_then(|r| r.limits.as_ref()).and_then(|l| l.get(key)));
    q.and_then(|q| {
        if milli {
            parse_milli(&q.0).ok()
        } else {
            parse_value(&q.0).ok()
        }
    })
    .unwrap_or(0)
    .max(0)
}

fn has_batch(c: &Container) -> bool {
    let res = c.resources.as_ref();
    [
        res.and_then(|r| r.requests.as_ref()),
        res.and_then(|r| r.limits.as_ref()),
    ]
    .into_iter()
    .flatten()
    .any(|m| {
        m.contains_key(keys::RESOURCE_BATCH_CPU) || m.contains_key(keys::RESOURCE_BATCH_MEMORY)
    })
}

impl PodFacts {
    /// `None` for pods without a UID or spec, and for pods that finished (no cgroup left).
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        let status = pod.status.as_ref();
        if !phase::is_active(pod) {
            return None;
        }
        let uid = pod.metadata.uid.clone()?;
        let kube_qos = status
            .and_then(|s| s.qos_class.as_deref())
            .and_then(KubeQos::from_status)
            .or_else(|| PodSpecView::from_pod(pod).ok().map(|v| v.kube_qos))?;
        let be = label_is_be(pod) || spec.containers.iter().any(has_batch);
        let sum = |key: &str, milli: bool| -> i64 {
            let main: i64 = spec
                .containers
                .iter()
                .map(|c| request_of(c, key, milli))
                .sum();
            let init = spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| request_of(c, key, milli))
                .max()
                .unwrap_or(0);
            let overhead = spec
                .overhead
                .as_ref()
                .and_then(|o| o.get(key))
                .and_then(|q| {
                    if milli {
                        parse_milli(&q.0).ok()
                    } else {
                        parse_value(&q.0).ok()
                    }
                })
                .unwrap_or(0);
            main.max(init).saturating_add(overhead.max(0))
        };
        Some(PodFacts {
            uid,
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            kube_qos,
            be,
            request: Resources::new(
                sum(keys::RESOURCE_CPU, true),
                sum(keys::RESOURCE_MEMORY, false),
            ),
            // Extended resources are integers (batch-cpu counts milli-cores); no overhead
            // names them, so the sum is the scheduler's too.
            batch_request: Resources::new(
                sum(keys::RESOURCE_BATCH_CPU, false),
                sum(keys::RESOURCE_BATCH_MEMORY, false),
            ),
        })
    }
}
