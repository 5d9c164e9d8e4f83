//! What re-resolving one stored pod would change (pure): nothing, a patch, or nothing because
//! the pod cannot be resolved at all.
//!
//! The answer is [`patch_stored_pod`]'s, the function admission calls: the pod is resolved as an
//! UPDATE of itself. Its change list on UPDATE only ever holds the class label (when the pod
//! has none), the extended-resource-spec annotation (pods with batch resources) and
//! `koordinator.sh/resolved-qos`: resources are a CREATE-time decision (docs/contract.md §5),
//! and a plan that would touch them is refused rather than written.

use koord_api::keys::ANNOTATION_RESOLVED_QOS;

use super::message::reresolved_message;
use super::stored_pod::{PodRef, StoredMeta};
use crate::pod_patch::patch_stored_pod;
use crate::policy::PolicyConfig;
use crate::resolve::{Change, PodInput};

/// The verdict on one stored pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to write.
    Unchanged,
    /// Never written: `terminating` or `finished`.
    Skipped(&'static str),
    /// Its annotations do not resolve (admission would deny any update of it).
    Invalid(String),
    Change(PlannedChange),
}

/// A write the pod needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedChange {
    /// RFC 6902 patch bytes; the first operation pins the resourceVersion that was planned on,
    /// so a pod changed in between is a 409 Conflict, never a blind overwrite.
    pub patch: Vec<u8>,
    /// The resolved-qos the patch writes.
    pub annotation: String,
    /// The `MemoryQOSReresolved` Event note.
    pub message: String,
}

/// A listed item that is not a pod the engine can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a readable pod: {0}")]
pub struct UnreadablePod(pub String);

/// The patch with the resourceVersion precondition in front (a JSON-patch `replace` of
/// `/metadata/resourceVersion`: the API server rejects the write with 409 when the stored
/// version differs), spliced into admission's patch bytes (a JSON array) without parsing
/// them. Without a version (a manifest, in tests) the patch is unchanged.
pub fn with_precondition(patch: &[u8], resource_version: &str) -> Vec<u8> {
    let Some(rest) = patch.strip_prefix(b"[") else {
        return patch.to_vec();
    };
    if resource_version.is_empty() {
        return patch.to_vec();
    }
    let version = serde_json::Value::from(resource_version).to_string();
    let mut out = Vec::with_capacity(patch.len() + version.len() + 64);
    out.extend_from_slice(br#"[{"op":"replace","path":"/metadata/resourceVersion","value":"#);
    out.extend_from_slice(version.as_bytes());
    out.push(b'}');
    if !rest.starts_with(b"]") {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    out
}

/// Plans one pod from its stored JSON. `namespace` is where it was listed.
pub fn plan_pod(item: &str, config: &PolicyConfig) -> Result<(PodRef, Verdict), UnreadablePod> {
    let meta: StoredMeta<'_> =
        serde_json::from_str(item).map_err(|e| UnreadablePod(e.to_string()))?;
    let pod: PodInput<'_> = serde_json::from_str(item).map_err(|e| UnreadablePod(e.to_string()))?;
    let pod_ref = meta.pod_ref();
    let verdict = match meta.not_worth_writing() {
        Some(reason) => Verdict::Skipped(reason),
        None => plan_input(&pod, &pod_ref, config),
    };
    Ok((pod_ref, verdict))
}

/// Plans a parsed pod.
pub fn plan_input(pod: &PodInput<'_>, pod_ref: &PodRef, config: &PolicyConfig) -> Verdict {
    let answer = match patch_stored_pod(pod, &pod_ref.namespace, config) {
        Ok(answer) => answer,
        Err(e) => return Verdict::Invalid(e.to_string()),
    };
    let Some(patch) = answer.patch else {
        return Verdict::Unchanged;
    };
    let changes = &answer.resolution.changes;
    if changes
        .iter()
        .any(|c| matches!(c, Change::SetResources { .. } | Change::SetOverhead(_)))
    {
        return Verdict::Invalid("re-resolution would change resources; refused".to_owned());
    }
    let annotation = answer.resolution.annotation();
    let message = reresolved_message(pod.annotation(ANNOTATION_RESOLVED_QOS), &annotation);
    Verdict::Change(PlannedChange {
        patch: with_precondition(&patch, &pod_ref.resource_version),
        annotation,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn the_precondition_goes_first_and_the_rest_is_untouched() {
        let patch = br#"[{"op":"add","path":"/a","value":1}]"#;
        let out: Value = serde_json::from_slice(&with_precondition(patch, "4\"2")).expect("json");
        assert_eq!(
            out,
            json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "4\"2"},
                {"op": "add", "path": "/a", "value": 1}
            ])
        );
        let only: Value = serde_json::from_slice(&with_precondition(b"[]", "7")).expect("json");
        assert_eq!(only.as_array().map(Vec::len), Some(1));
        assert_eq!(with_precondition(patch, ""), patch.to_vec());
    }
    use crate::policy::ClusterQosConfig;

    fn config(ls_enabled: bool) -> PolicyConfig {
        let text = format!(
            r#"{{"clusterStrategy": {{"lsClass": {{"memoryQOS": {{"enable": {ls_enabled}}}}}}}}}"#
        );
        PolicyConfig {
            cluster: ClusterQosConfig::parse(&text).expect("cluster").config,
            ..PolicyConfig::default()
        }
    }

    fn stored(labels: Value, annotations: Value, resources: Value, status: Value) -> String {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "apps", "uid": "u-1", "resourceVersion": "42",
                         "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "pause", "resources": resources}]},
            "status": status})
        .to_string()
    }

    fn burstable() -> Value {
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}})
    }

    fn patch_ops(v: &Verdict) -> Vec<Value> {
        match v {
            Verdict::Change(c) => serde_json::from_slice(&c.patch).expect("patch"),
            other => panic!("expected a change, got {other:?}"),
        }
    }

    /// The stored pod after admission with `config` (what CREATE would have written).
    fn admitted(config: &PolicyConfig) -> String {
        let raw = stored(
            json!({}),
            json!({}),
            burstable(),
            json!({"qosClass": "Burstable"}),
        );
        let (_, v) = plan_pod(&raw, config).expect("plans");
        let mut pod: Value = serde_json::from_str(&raw).expect("json");
        let ops: json_patch::Patch =
            serde_json::from_value(Value::Array(patch_ops(&v))).expect("patch");
        json_patch::patch(&mut pod, &ops).expect("applies");
        pod.to_string()
    }

    #[test]
    fn verdicts() {
        let on = config(true);
        let off = config(false);
        let current = admitted(&on);
        assert_eq!(
            plan_pod(&current, &on).expect("plans").1,
            Verdict::Unchanged
        );
        let (pod_ref, v) = plan_pod(&current, &off).expect("plans");
        assert_eq!(pod_ref.resource_version, "42");
        let ops = patch_ops(&v);
        assert_eq!(
            ops[0],
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(ops.len(), 2, "precondition + resolved-qos only: {ops:?}");
        assert_eq!(
            ops[1]["path"],
            "/metadata/annotations/koordinator.sh~1resolved-qos"
        );
        let Verdict::Change(c) = v else {
            unreachable!()
        };
        assert!(
            c.message.starts_with(
                "memoryQOS enabled=true (cluster-config) -> enabled=false (cluster-config)"
            ),
            "{}",
            c.message
        );

        let finished = stored(
            json!({}),
            json!({}),
            burstable(),
            json!({"phase": "Succeeded"}),
        );
        assert_eq!(
            plan_pod(&finished, &off).expect("plans").1,
            Verdict::Skipped("finished")
        );
        let bad = stored(
            json!({}),
            json!({"koordinator.sh/memoryQOS": "{\"policy\":\"auto\",\"wmarkRatio\":120}"}),
            burstable(),
            json!({}),
        );
        assert!(
            matches!(plan_pod(&bad, &on).expect("plans").1, Verdict::Invalid(m) if m.contains("wmarkRatio"))
        );
        assert!(plan_pod("[1, 2]", &on).is_err());
    }

    #[test]
    fn a_pod_admitted_without_the_webhook_gets_label_and_annotation() {
        let raw = stored(
            json!(null),
            json!(null),
            burstable(),
            json!({"qosClass": "Burstable"}),
        );
        let ops = patch_ops(&plan_pod(&raw, &config(true)).expect("plans").1);
        let paths: Vec<&str> = ops.iter().filter_map(|o| o["path"].as_str()).collect();
        assert_eq!(
            paths,
            [
                "/metadata/resourceVersion",
                "/metadata/labels",
                "/metadata/labels/koordinator.sh~1qosClass",
                "/metadata/annotations",
                "/metadata/annotations/koordinator.sh~1resolved-qos"
            ]
        );
    }

    #[test]
    fn a_be_pod_with_plain_resources_keeps_them() {
        // Admitted while the webhook was down: cpu/memory were never moved to batch resources,
        // and re-resolution must not move them now (a CREATE-time decision).
        let raw = stored(
            json!({"koordinator.sh/qosClass": "BE"}),
            json!({}),
            json!({"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}),
            json!({"qosClass": "Burstable"}),
        );
        let ops = patch_ops(&plan_pod(&raw, &config(true)).expect("plans").1);
        assert!(
            ops.iter().all(|o| o["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/"))),
            "{ops:?}"
        );
    }
}
