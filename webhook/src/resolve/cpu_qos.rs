//! CPU QoS (group identity; docs/contract.md §2, CPU QoS and resctrl): the pod annotation, else
//! the class's setting in the cluster ConfigMap. Static per class, so resolved here and only
//! written by the applier.

use koord_api::keys::ANNOTATION_CPU_QOS;
use koord_api::{DecisionSource, QosClass, ResolvedCpuQos};
use serde_json::Value;

use super::pod_input::PodInput;
use crate::policy::{FieldError, PolicyConfig, parse_cpu_qos_setting};

/// Koordinator's recommended group identity: LS tasks (2) preempt BE tasks (-1).
pub fn recommended_group_identity(class: QosClass) -> i64 {
    match class {
        QosClass::Lse | QosClass::Lsr | QosClass::Ls => 2,
        QosClass::Be => -1,
        QosClass::System => 0,
    }
}

/// The pod annotation `koordinator.sh/cpuQOS` wins over the class; present only when a source
/// states it. Disabled means group identity 0 (the reset value).
pub fn resolve_cpu_qos(
    pod: &PodInput<'_>,
    class: QosClass,
    config: &PolicyConfig,
) -> Result<Option<ResolvedCpuQos>, FieldError> {
    let (setting, source) = match pod.annotation(ANNOTATION_CPU_QOS) {
        Some(text) => {
            let value: Value = serde_json::from_str(text).map_err(|e| {
                FieldError::new(
                    ANNOTATION_CPU_QOS,
                    format!("not valid JSON ({e}); expected like {{\"groupIdentity\": 2}}"),
                )
            })?;
            let setting = parse_cpu_qos_setting(&value, ANNOTATION_CPU_QOS)?;
            // A pod that states a group identity asks for it; only `"enable": false` turns it off.
            (setting, DecisionSource::PodAnnotation)
        }
        None => match config.cluster.class(class).cpu_qos {
            Some(s) => (s, DecisionSource::ClusterConfig),
            None => return Ok(None),
        },
    };
    let enabled = match source {
        DecisionSource::PodAnnotation => setting.enable != Some(false),
        _ => setting.enable == Some(true),
    };
    let group_identity = if enabled {
        setting
            .group_identity
            .unwrap_or_else(|| recommended_group_identity(class))
    } else {
        0
    };
    Ok(Some(ResolvedCpuQos {
        enabled,
        group_identity,
        source,
    }))
}
