//! In-place resize (docs/contract.md §5, Resize): the numbers follow what the kubelet has
//! allocated (`status.containerStatuses[].resources`), not the desired spec, so a resize
//! that is pending, infeasible or still in progress changes nothing, and a finished one
//! changes the annotation of the next UPDATE (the re-resolver's patch).

// Tables are tuples spelled out where they are used: an alias per table would hide the columns.
#![allow(clippy::type_complexity)]

use crate::common;

use common::*;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use koord_api::{MaxOr, ResolvedQos};
use koord_webhook::policy::PolicyConfig;
use koord_webhook::resolve::{Change, Operation};
use serde_json::{Value, json};

const MI: i64 = 1024 * 1024;

/// LS with every container's memory.min = its request and memory.high = 80% of its limit.
fn ls_config() -> PolicyConfig {
    config(
        r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": 100, "throttlingPercent": 80}}}}"#,
        "",
    )
}

fn resources(cpu: &str, memory_mi: i64) -> Value {
    json!({"requests": {"cpu": cpu, "memory": format!("{memory_mi}Mi")},
           "limits": {"memory": format!("{}Mi", memory_mi * 2)}})
}

/// A running Burstable pod admitted with 512Mi, whose spec now says `spec` and whose status
/// says what the kubelet reports (`status_resources`, `None`: no resources in the status, a
/// kubelet without in-place resize) plus the resize conditions.
fn resized_pod(spec: Value, status_resources: Option<Value>, conditions: Value) -> Value {
    let admitted = pod(json!({}), json!({}), resources("500m", 512));
    let r = create(&admitted, &ls_config());
    let mut p = mutated(&admitted, &r);
    p["spec"]["containers"][0]["resources"] = spec;
    let mut status = json!({"name": "app", "containerID": "containerd://0123abcd", "image": "busybox",
                            "imageID": "", "ready": true, "restartCount": 0,
                            "state": {"running": {"startedAt": "2026-12-02T08:00:00Z"}}});
    if let Some(s) = status_resources {
        status["resources"] = s;
    }
    p["status"] = json!({"phase": "Running", "qosClass": "Burstable", "conditions": conditions,
                         "containerStatuses": [status]});
    p
}

fn resolved_of(p: &Value) -> ResolvedQos {
    ResolvedQos::from_annotation(
        p["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS]
            .as_str()
            .expect("annotation"),
    )
    .expect("valid")
}

#[test]
fn resize_table() {
    let pending = json!([{"type": "PodResizePending", "status": "True", "reason": "Deferred"}]);
    let infeasible =
        json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
    let in_progress = json!([{"type": "PodResizeInProgress", "status": "True"}]);
    // (case, spec, status resources, conditions, container memory.min after UPDATE in Mi,
    //  memory.high in Mi, annotation changed)
    let cases: &[(&str, Value, Option<Value>, Value, i64, i64, bool)] = &[
        (
            "nothing resized",
            resources("500m", 512),
            Some(resources("500m", 512)),
            json!([]),
            512,
            819,
            false,
        ),
        (
            "memory up, done",
            resources("500m", 1024),
            Some(resources("500m", 1024)),
            json!([]),
            1024,
            1638,
            true,
        ),
        (
            "memory down, done",
            resources("500m", 256),
            Some(resources("500m", 256)),
            json!([]),
            256,
            409,
            true,
        ),
        (
            "cpu only, done",
            resources("2", 512),
            Some(resources("2", 512)),
            json!([]),
            512,
            819,
            false,
        ),
        (
            "memory up, pending",
            resources("500m", 1024),
            Some(resources("500m", 512)),
            pending.clone(),
            512,
            819,
            false,
        ),
        (
            "memory up, infeasible",
            resources("500m", 8192),
            Some(resources("500m", 512)),
            infeasible,
            512,
            819,
            false,
        ),
        (
            "memory down, in progress",
            resources("500m", 256),
            Some(resources("500m", 512)),
            in_progress.clone(),
            512,
            819,
            false,
        ),
        (
            "memory up, in progress",
            resources("500m", 1024),
            Some(resources("500m", 512)),
            in_progress,
            512,
            819,
            false,
        ),
        // A kubelet that reports no resources (no in-place resize): the spec is all there is.
        (
            "no status resources",
            resources("500m", 1024),
            None,
            json!([]),
            1024,
            1638,
            true,
        ),
    ];
    for (case, spec, status, conditions, min_mi, high_mi, changed) in cases {
        let p = resized_pod(spec.clone(), status.clone(), conditions.clone());
        let before = resolved_of(&p);
        let u = resolve_value(&p, "default", Operation::Update, &ls_config()).expect(case);
        let k = u.resolved.memory_qos.containers["app"];
        assert_eq!(k.min, min_mi * MI, "{case}: memory.min");
        assert_eq!(
            k.high,
            MaxOr::Bytes((min_mi * 2 * MI * 80 / 100) / 4096 * 4096),
            "{case}: memory.high"
        );
        assert_eq!(
            (k.high.bytes().unwrap_or(0)) / MI,
            *high_mi,
            "{case}: memory.high in Mi"
        );
        assert_eq!(
            u.resolved.memory_qos.pod.min,
            min_mi * MI,
            "{case}: pod memory.min"
        );
        assert_eq!(
            u.changes.contains(&Change::SetResolvedQos),
            *changed,
            "{case}: changes {:?}",
            u.changes
        );
        assert_eq!(u.resolved != before, *changed, "{case}");
        // Resources are never written on UPDATE, resized or not.
        assert!(
            u.changes
                .iter()
                .all(|c| !matches!(c, Change::SetResources { .. })),
            "{case}"
        );
        // The answer is stable: resolving the patched pod again changes nothing.
        let again = mutated(&p, &u);
        let u2 = resolve_value(&again, "default", Operation::Update, &ls_config()).expect(case);
        assert!(u2.changes.is_empty(), "{case}: {:?}", u2.changes);
    }
}

#[test]
fn resources_the_kubelet_cannot_resize_come_from_the_spec() {
    // A BE pod translated at CREATE carries batch-memory, which is an extended resource: the
    // kubelet never resizes it, and the status does not decide it.
    let be = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
    );
    let cfg = config(
        r#"{"clusterStrategy": {"beClass": {"memoryQOS": {"enable": true, "minLimitPercent": 100}}}}"#,
        "",
    );
    let r = create(&be, &cfg);
    let mut stored = mutated(&be, &r);
    stored["status"] = json!({"qosClass": "BestEffort", "containerStatuses": [
        {"name": "app", "resources": {"requests": {"memory": "999Mi"}}}]});
    let u = resolve_value(&stored, "default", Operation::Update, &cfg).expect("update");
    assert_eq!(u.resolved.memory_qos.containers["app"].min, 256 * MI);
    assert!(u.changes.is_empty(), "{:?}", u.changes);
}

#[test]
fn a_status_for_another_container_changes_nothing() {
    let p = resized_pod(resources("500m", 1024), None, json!([]));
    let mut p = p;
    p["status"]["containerStatuses"] = json!([{"name": "other", "resources": resources("1", 64)}]);
    let u = resolve_value(&p, "default", Operation::Update, &ls_config()).expect("update");
    assert_eq!(u.resolved.memory_qos.containers["app"].min, 1024 * MI);
}
