//! Memory QoS precedence: pod annotation > namespace lists > cluster class, and the parameters
//! (docs/contract.md §2, Precedence of memory QoS and Parameters).

use koord_api::keys::{ANNOTATION_LEGACY_MEMORY_QOS, ANNOTATION_MEMORY_QOS};
use koord_api::{DecisionSource, MemoryQosParams, MemoryQosPolicy, QosClass};
use serde_json::Value;

use super::pod_input::PodInput;
use crate::policy::{
    FieldError, NamespaceVerdict, ParamOverrides, PolicyConfig, parse_param_overrides,
    parse_policy_name,
};

/// Where one parameter's value came from (for `resolve --explain`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamSource {
    /// The reset value of disabled memory QoS.
    Reset,
    /// The recommended value for the class.
    Recommended,
    ClusterConfig,
    PodAnnotation,
}

/// The pod's own memory QoS annotation, parsed and validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMemoryQos {
    pub policy: MemoryQosPolicy,
    pub params: ParamOverrides,
    pub source: DecisionSource,
}

/// Reads `koordinator.sh/memoryQOS`, else the legacy `alibabacloud.com/memoryQOS`.
pub fn parse_pod_memory_qos(pod: &PodInput<'_>) -> Result<Option<PodMemoryQos>, FieldError> {
    let (key, text, source) = match (
        pod.annotation(ANNOTATION_MEMORY_QOS),
        pod.annotation(ANNOTATION_LEGACY_MEMORY_QOS),
    ) {
        (Some(t), _) => (ANNOTATION_MEMORY_QOS, t, DecisionSource::PodAnnotation),
        (None, Some(t)) => (
            ANNOTATION_LEGACY_MEMORY_QOS,
            t,
            DecisionSource::LegacyAnnotation,
        ),
        (None, None) => return Ok(None),
    };
    parse_memory_qos_annotation(key, text, source).map(Some)
}

pub fn parse_memory_qos_annotation(
    key: &str,
    text: &str,
    source: DecisionSource,
) -> Result<PodMemoryQos, FieldError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        FieldError::new(key, format!("not valid JSON ({e}); expected like {{\"policy\": \"auto\", \"minLimitPercent\": 100}}"))
    })?;
    let obj = value.as_object().ok_or_else(|| {
        FieldError::new(
            key,
            format!("{value} is not a JSON object like {{\"policy\": \"auto\"}}"),
        )
    })?;
    let policy = match obj.get("policy") {
        None | Some(Value::Null) => MemoryQosPolicy::Default,
        Some(p) => {
            match parse_policy_name(p, &format!("{key}.policy"), &["auto", "default", "none"])? {
                0 => MemoryQosPolicy::Auto,
                1 => MemoryQosPolicy::Default,
                _ => MemoryQosPolicy::None,
            }
        }
    };
    let params = parse_param_overrides(obj, key, &["policy"])?;
    Ok(PodMemoryQos {
        policy,
        params,
        source,
    })
}

/// Parameters Koordinator recommends for a class when memory QoS is on.
pub fn recommended_params(class: QosClass) -> MemoryQosParams {
    let (wmark_ratio, wmark_min_adj, wmark_scale_permill) = match class {
        QosClass::Lse | QosClass::Lsr | QosClass::Ls => (95, -25, 20),
        QosClass::Be => (95, 50, 20),
        QosClass::System => (0, 0, 50),
    };
    MemoryQosParams {
        wmark_ratio,
        wmark_min_adj,
        wmark_scale_permill,
        ..MemoryQosParams::RESET
    }
}

/// The memory QoS decision before any byte arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryQosDecision {
    pub enabled: bool,
    pub policy: MemoryQosPolicy,
    pub source: DecisionSource,
    pub params: MemoryQosParams,
    pub param_sources: [ParamSource; 9],
}

pub fn decide_memory_qos(
    class: QosClass,
    namespace: &str,
    pod_cfg: Option<&PodMemoryQos>,
    config: &PolicyConfig,
) -> MemoryQosDecision {
    let class_cfg = config.cluster.class(class);
    let policy = pod_cfg.map_or(MemoryQosPolicy::Default, |p| p.policy);
    let (enabled, source, use_cluster_params) = match (policy, pod_cfg) {
        (MemoryQosPolicy::None, Some(p)) => (false, p.source, false),
        (MemoryQosPolicy::Auto, Some(p)) => (true, p.source, false),
        _ => match config.namespaces.verdict(namespace) {
            NamespaceVerdict::Disabled => (false, DecisionSource::NamespaceConfig, true),
            NamespaceVerdict::Enabled => (true, DecisionSource::NamespaceConfig, true),
            NamespaceVerdict::Unlisted => match class_cfg.memory_qos_enable {
                Some(e) => (e, DecisionSource::ClusterConfig, true),
                None => (false, DecisionSource::Default, true),
            },
        },
    };
    if !enabled {
        return MemoryQosDecision {
            enabled,
            policy,
            source,
            params: MemoryQosParams::RESET,
            param_sources: [ParamSource::Reset; 9],
        };
    }
    let mut params = recommended_params(class);
    let mut param_sources = [ParamSource::Recommended; 9];
    if use_cluster_params {
        mark(
            &mut param_sources,
            class_cfg.memory_qos_params.apply_to(&mut params),
            ParamSource::ClusterConfig,
        );
    }
    if let Some(p) = pod_cfg {
        mark(
            &mut param_sources,
            p.params.apply_to(&mut params),
            ParamSource::PodAnnotation,
        );
    }
    MemoryQosDecision {
        enabled,
        policy,
        source,
        params,
        param_sources,
    }
}

fn mark(sources: &mut [ParamSource; 9], set: [bool; 9], source: ParamSource) {
    for (s, was_set) in sources.iter_mut().zip(set) {
        if was_set {
            *s = source;
        }
    }
}
