//! QoS class: the Koordinator label, else the legacy label, else the Kubernetes QoS class
//! (docs/contract.md §2, QoS class; §3 for how the Kubernetes class is computed).

use koord_api::keys::{LABEL_LEGACY_QOS_CLASS, LABEL_QOS_CLASS, RESOURCE_CPU, RESOURCE_MEMORY};
use koord_api::quantity::parse_milli;
use koord_api::{QosClass, QosClassSource};

use super::pod_input::{ContainerInput, PodInput, parse_quantity, resource_field};
use crate::policy::FieldError;

/// Kubernetes QoS classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeQos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// The resolved class and whether `koordinator.sh/qosClass` must be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassDecision {
    pub class: QosClass,
    pub source: QosClassSource,
    pub kube_qos: KubeQos,
    /// `Some(class)` when the label must be (re)written.
    pub write_label: Option<QosClass>,
}

/// `previous_resolved` is the resolved-qos annotation this webhook wrote before (the stored
/// pod's, on UPDATE), used only to keep the class source stable; see [`previous_source`].
pub fn resolve_qos_class(
    pod: &PodInput<'_>,
    previous_resolved: Option<&str>,
) -> Result<ClassDecision, FieldError> {
    let kube_qos = kubernetes_qos(pod)?;
    let legacy = pod
        .label(LABEL_LEGACY_QOS_CLASS)
        .and_then(QosClass::from_name);
    if let Some(class) = pod.label(LABEL_QOS_CLASS).and_then(QosClass::from_name) {
        let source = previous_source(previous_resolved, class, kube_qos, legacy);
        return Ok(ClassDecision {
            class,
            source,
            kube_qos,
            write_label: None,
        });
    }
    if let Some(class) = legacy {
        // A stock koordlet reads only the Koordinator label, so the legacy class is copied.
        return Ok(ClassDecision {
            class,
            source: QosClassSource::LegacyLabel,
            kube_qos,
            write_label: Some(class),
        });
    }
    let (class, write) = match kube_qos {
        // Lookup only: writing LSR would change scheduling semantics of Guaranteed pods.
        KubeQos::Guaranteed => (QosClass::Lsr, false),
        KubeQos::Burstable => (QosClass::Ls, true),
        KubeQos::BestEffort => (QosClass::Be, true),
    };
    Ok(ClassDecision {
        class,
        source: QosClassSource::KubernetesQos,
        kube_qos,
        write_label: write.then_some(class),
    })
}

/// The label this webhook writes makes a second resolution (UPDATE, reinvocation) see a
/// `label` source where the first saw `kubernetes-qos` or `legacy-label`. The earlier source is
/// kept when the pod itself still proves it (same class from the same rule), so resolving is
/// idempotent; a forged annotation cannot claim a source the pod does not support.
fn previous_source(
    previous_resolved: Option<&str>,
    class: QosClass,
    kube_qos: KubeQos,
    legacy: Option<QosClass>,
) -> QosClassSource {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ClassOnly {
        qos_class: QosClass,
        qos_class_source: QosClassSource,
    }
    let Some(prev) = previous_resolved.and_then(|a| serde_json::from_str::<ClassOnly>(a).ok())
    else {
        return QosClassSource::Label;
    };
    let defaulted = match kube_qos {
        KubeQos::Burstable => Some(QosClass::Ls),
        KubeQos::BestEffort => Some(QosClass::Be),
        KubeQos::Guaranteed => None,
    };
    match prev.qos_class_source {
        QosClassSource::KubernetesQos if prev.qos_class == class && defaulted == Some(class) => {
            QosClassSource::KubernetesQos
        }
        QosClassSource::LegacyLabel if prev.qos_class == class && legacy == Some(class) => {
            QosClassSource::LegacyLabel
        }
        _ => QosClassSource::Label,
    }
}

/// `status.qosClass` when present, else computed like the kubelet after the apiserver's
/// defaulting (limits without requests imply requests = limits).
pub fn kubernetes_qos(pod: &PodInput<'_>) -> Result<KubeQos, FieldError> {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => return Ok(KubeQos::Guaranteed),
        Some("Burstable") => return Ok(KubeQos::Burstable),
        Some("BestEffort") => return Ok(KubeQos::BestEffort),
        _ => {}
    }
    if let Some(class) = pod_level_qos(pod)? {
        return Ok(class);
    }
    let mut any = false;
    let mut guaranteed = true;
    let mut sums = [[0i64; 2]; 2]; // [cpu, memory] x [request, limit]
    let init = pod
        .spec
        .init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| ("initContainers", i, c));
    let all = init.chain(
        pod.spec
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| ("containers", i, c)),
    );
    for (list, i, c) in all {
        let mut limits_found = 0;
        for (r, name) in [RESOURCE_CPU, RESOURCE_MEMORY].into_iter().enumerate() {
            let limit = milli(c, list, i, name, false)?;
            let request = milli(c, list, i, name, true)?.or(limit);
            if let Some(req) = request.filter(|v| *v != 0) {
                any = true;
                sums[r][0] += req;
            }
            if let Some(lim) = limit.filter(|v| *v != 0) {
                any = true;
                limits_found += 1;
                sums[r][1] += lim;
            }
        }
        if limits_found < 2 {
            guaranteed = false;
        }
    }
    Ok(if !any {
        KubeQos::BestEffort
    } else if guaranteed && sums.iter().all(|[req, lim]| req == lim) {
        KubeQos::Guaranteed
    } else {
        KubeQos::Burstable
    })
}

/// The class of a pod with pod-level cpu or memory (`spec.resources`, KEP-2837): those alone
/// decide it, as the apiserver's `ComputePodQOS` does: Guaranteed when the pod-level limits
/// name both cpu and memory and each request equals its limit, BestEffort when nothing
/// non-zero is set, else Burstable. A missing pod-level request is its limit (the apiserver's
/// defaulting for a pod whose containers request nothing). `None` without pod-level cpu/memory.
fn pod_level_qos(pod: &PodInput<'_>) -> Result<Option<KubeQos>, FieldError> {
    let read = |text: Option<&str>, kind: &str, name: &str| {
        parse_quantity(text, parse_milli, || {
            format!("spec.resources.{kind}.{name}")
        })
        .map(|v| v.filter(|v| *v != 0))
    };
    let mut set = false;
    let mut any = false;
    let mut guaranteed = true;
    for name in [RESOURCE_CPU, RESOURCE_MEMORY] {
        let (req_text, lim_text) = (pod.pod_level_request(name), pod.pod_level_limit(name));
        set |= req_text.is_some() || lim_text.is_some();
        let limit = read(lim_text, "limits", name)?;
        let request = read(req_text, "requests", name)?.or(limit);
        any |= request.is_some() || limit.is_some();
        guaranteed &= limit.is_some() && request == limit;
    }
    Ok(set.then_some(if !any {
        KubeQos::BestEffort
    } else if guaranteed {
        KubeQos::Guaranteed
    } else {
        KubeQos::Burstable
    }))
}

fn milli(
    c: &ContainerInput<'_>,
    list: &str,
    index: usize,
    name: &str,
    request: bool,
) -> Result<Option<i64>, FieldError> {
    let (text, kind) = if request {
        (c.request(name), "requests")
    } else {
        (c.limit(name), "limits")
    };
    parse_quantity(text, parse_milli, || {
        resource_field(list, index, kind, name)
    })
}
