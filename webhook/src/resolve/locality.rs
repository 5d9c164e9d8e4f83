//! Memory locality: the pod annotation, else the class's setting in the cluster ConfigMap
//! (docs/contract.md §2, Memory locality).

use koord_api::keys::ANNOTATION_MEMORY_LOCALITY;
use koord_api::{DecisionSource, QosClass, ResolvedMemoryLocality};
use serde_json::Value;

use super::pod_input::PodInput;
use crate::policy::{FieldError, PolicyConfig, parse_locality_setting};

pub fn resolve_memory_locality(
    pod: &PodInput<'_>,
    class: QosClass,
    config: &PolicyConfig,
) -> Result<Option<ResolvedMemoryLocality>, FieldError> {
    let key = ANNOTATION_MEMORY_LOCALITY;
    let (setting, source) = match pod.annotation(key) {
        Some(text) => {
            let value: Value = serde_json::from_str(text).map_err(|e| {
                FieldError::new(key, format!("not valid JSON ({e}); expected like {{\"policy\": \"bestEffort\", \"migrateIntervalMinutes\": 10}}"))
            })?;
            (
                parse_locality_setting(&value, key)?,
                DecisionSource::PodAnnotation,
            )
        }
        None => match config.cluster.class(class).memory_locality {
            Some(s) => (s, DecisionSource::ClusterConfig),
            None => return Ok(None),
        },
    };
    Ok(Some(ResolvedMemoryLocality {
        policy: setting.policy,
        migrate_interval_minutes: setting.migrate_interval_minutes,
        source,
    }))
}
