//! The resolution engine (pure): a pod plus the policy configuration in, the resolved QoS and
//! the list of changes out. The admission server turns the changes into a JSON patch; the
//! `resolve` command applies them to the manifest.

mod batch;
mod cpu_resctrl;
mod locality;
mod memory_numbers;
mod memory_qos;
pub mod pod_view;
mod qos_class;

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

pub use batch::{OwnedResources, TranslatedResources};
pub use cpu_resctrl::recommended_group_identity;
pub use memory_numbers::{MemoryBasis, container_knobs};
pub use memory_qos::{
    MemoryQosDecision, ParamSource, PodMemoryQos, decide_memory_qos, parse_memory_qos_annotation,
    recommended_params,
};
pub use pod_view::PodView;
pub use qos_class::{ClassDecision, KubeQos, kubernetes_qos, resolve_qos_class};

use crate::mutation::{Change, ContainerList};
use crate::policy::{FieldError, PolicyConfig};
use batch::EffectiveResources;

/// The admission operation being resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Everything is decided, resources of BE pods are translated.
    Create,
    /// Annotations are mutable: labels and annotations are re-resolved, resources are not
    /// re-translated (they were on CREATE).
    Update,
}

/// What resolution needs besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct ResolveContext<'c> {
    pub namespace: &'c str,
    pub operation: Operation,
    pub config: &'c PolicyConfig,
}

/// Why a pod cannot be admitted: one line naming the field and the allowed values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(#[from] pub FieldError);

/// Per-value provenance, for `resolve --explain` and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub class: ClassDecision,
    pub param_sources: [ParamSource; 9],
    pub translated_containers: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub resolved: ResolvedQos,
    /// The resolved-qos annotation text (compact JSON, stable key order).
    pub annotation: String,
    /// Changes to the incoming pod, in patch order; empty when the pod is already resolved.
    pub changes: Vec<Change>,
    pub explanation: Explanation,
}

/// Resolves one pod (DESIGN.md section 3).
pub fn resolve_pod(
    pod: &PodView<'_>,
    ctx: &ResolveContext<'_>,
) -> Result<Resolution, ResolveError> {
    resolve_pod_with_previous(pod, ctx, pod.annotation(ANNOTATION_RESOLVED_QOS))
}

/// [`resolve_pod`] with the resolved-qos annotation this webhook wrote before given explicitly.
/// On UPDATE the admission server passes the stored pod's (`oldObject`) annotation: the
/// incoming one may be a hand edit, and must not influence what is written back.
pub fn resolve_pod_with_previous(
    pod: &PodView<'_>,
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
    let cpu_qos = cpu_resctrl::resolve_cpu_qos(pod, class.class, ctx.config)?;
    let resctrl_qos = cpu_resctrl::resolve_resctrl_qos(class.class, ctx.config);

    let translate = class.class == QosClass::Be && ctx.operation == Operation::Create;
    let containers = effective_resources(&pod.spec.containers, "containers", translate)?;
    let init_containers =
        effective_resources(&pod.spec.init_containers, "initContainers", translate)?;
    let overhead = if translate {
        batch::translate_overhead(pod)?
    } else {
        None
    };

    let named: Vec<(&str, &EffectiveResources<'_, '_>)> = pod
        .spec
        .containers
        .iter()
        .zip(&containers)
        .map(|(c, r)| (c.name.as_str(), r))
        .collect();
    let memory_key = if class.class == QosClass::Be {
        RESOURCE_BATCH_MEMORY
    } else {
        RESOURCE_MEMORY
    };
    let mut container_knobs_map = BTreeMap::new();
    let mut pod_knobs = PodMemoryKnobs { min: 0, low: 0 };
    for (i, (name, res)) in named.iter().enumerate() {
        let basis = memory_basis(res, memory_key, i)?;
        let knobs = container_memory_knobs(basis, &decision.params);
        pod_knobs.min = pod_knobs.min.saturating_add(knobs.min);
        pod_knobs.low = pod_knobs.low.saturating_add(knobs.low);
        container_knobs_map.insert((*name).to_owned(), knobs);
    }
    let batch = batch::batch_knobs(
        &named,
        batch::init_or_overhead_has_batch(&init_containers, overhead.as_ref(), pod),
    )?;
    let extended_spec = batch::extended_resource_spec(&named);

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
            containers: container_knobs_map,
        },
        memory_locality,
        batch,
        cpu_qos,
        resctrl_qos,
    };
    let annotation = resolved.to_annotation();

    let mut changes = Vec::new();
    if let Some(label) = class
        .write_label
        .filter(|c| pod.label(LABEL_QOS_CLASS) != Some(c.as_str()))
    {
        changes.push(Change::SetLabel {
            key: LABEL_QOS_CLASS,
            value: label.as_str().to_owned(),
        });
    }
    let translated_containers =
        push_resource_changes(&mut changes, ContainerList::Containers, containers)
            + push_resource_changes(&mut changes, ContainerList::InitContainers, init_containers);
    if let Some(o) = overhead {
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
    if pod.annotation(ANNOTATION_RESOLVED_QOS) != Some(annotation.as_str()) {
        changes.push(Change::SetAnnotation {
            key: ANNOTATION_RESOLVED_QOS,
            value: annotation.clone(),
        });
    }
    Ok(Resolution {
        resolved,
        annotation,
        changes,
        explanation: Explanation {
            class,
            param_sources: decision.param_sources,
            translated_containers,
        },
    })
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

fn effective_resources<'v, 'a>(
    list: &'v [pod_view::ContainerView<'a>],
    list_name: &str,
    translate: bool,
) -> Result<Vec<EffectiveResources<'v, 'a>>, FieldError> {
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let translated = if translate {
                batch::translate_container(c, &format!("spec.{list_name}[{i}].resources"))?
            } else {
                None
            };
            Ok(match translated {
                Some(t) => EffectiveResources::Translated(t),
                None => EffectiveResources::Original(c.resources.as_ref()),
            })
        })
        .collect()
}

fn memory_basis(
    res: &EffectiveResources<'_, '_>,
    key: &str,
    index: usize,
) -> Result<MemoryBasis, FieldError> {
    let parse = |text: Option<&str>, kind: &str| {
        text.map(|t| {
            parse_value(t).map_err(|e| {
                FieldError::new(
                    format!("spec.containers[{index}].resources.{kind}.{key}"),
                    e.to_string(),
                )
            })
        })
        .transpose()
    };
    let limit = parse(res.limit(key), "limits")?;
    let request = parse(res.request(key), "requests")?.or(limit).unwrap_or(0);
    Ok(MemoryBasis { request, limit })
}

fn push_resource_changes(
    changes: &mut Vec<Change>,
    list: ContainerList,
    resources: Vec<EffectiveResources<'_, '_>>,
) -> usize {
    let mut n = 0;
    for (index, r) in resources.into_iter().enumerate() {
        if let EffectiveResources::Translated(resources) = r {
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
