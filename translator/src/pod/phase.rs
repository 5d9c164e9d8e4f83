//! Whether a pod still has cgroups to manage: the one answer the watch, the collectors, memory
//! locality and colocation all ask. Pure.

use k8s_openapi::api::core::v1::Pod;

/// Pods that finished (`Succeeded`, `Failed`) have no cgroups left, as Koordinator's
/// `IsPodInactive` says; every other phase (and a pod without status yet) is active.
pub fn is_active(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_pods_are_inactive() {
        for (phase, active) in [
            (None, true),
            (Some("Pending"), true),
            (Some("Running"), true),
            (Some("Unknown"), true),
            (Some("Succeeded"), false),
            (Some("Failed"), false),
        ] {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "status": phase.map(|p| serde_json::json!({"phase": p})),
            }))
            .expect("pod");
            assert_eq!(is_active(&pod), active, "{phase:?}");
        }
    }
}
