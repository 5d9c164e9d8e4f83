//! Table tests for the pod shapes of current Kubernetes (docs/contract.md §2, Numbers and Batch
//! resources): native sidecars, plain init containers, pod-level resources (KEP-2837) with and
//! without container requests, a pod-level limit with throttling, and a BE pod with pod-level
//! resources.

#![allow(clippy::type_complexity)]

use crate::common;

use common::*;
use koord_api::keys::ANNOTATION_EXTENDED_RESOURCE_SPEC;
use koord_api::{MaxOr, QosClass};
use koord_webhook::resolve::{
    KubeQos, PodMemorySource, WARNING_BATCH_WITHHELD, WARNING_POD_LEVEL_KEPT, kubernetes_qos,
};
use serde::Deserialize;
use serde_json::{Value, json};

const MI: i64 = 1024 * 1024;
const GI: i64 = 1024 * MI;

/// LS memory QoS on with minLimitPercent 100 (the issue's reproduction) and throttling 80.
const LS_MIN_100: &str = r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":100,"lowLimitPercent":0,"throttlingPercent":80}},"beClass":{"memoryQOS":{"enable":true,"minLimitPercent":100}}}}"#;

fn shaped(spec: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
    });
    p["spec"] = spec;
    p
}

fn mem(request: &str) -> Value {
    json!({"requests": {"memory": request}})
}

#[test]
fn pod_shapes_table() {
    // (what, spec, pod min, pod high, container -> min, pod memory source)
    let cases: &[(
        &str,
        Value,
        i64,
        Option<i64>,
        &[(&str, i64)],
        PodMemorySource,
    )] = &[
        (
            "native sidecar: an entry, counted in the pod's sum",
            json!({
                "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": mem("256Mi")}],
                "containers": [{"name": "app", "resources": mem("1Gi")}]
            }),
            GI + 256 * MI,
            None,
            &[("app", GI), ("proxy", 256 * MI)],
            PodMemorySource::ContainerSums,
        ),
        (
            "plain init container: no entry, not counted",
            json!({
                "initContainers": [{"name": "setup", "resources": mem("2Gi")},
                                   {"name": "never", "restartPolicy": "OnFailure", "resources": mem("2Gi")}],
                "containers": [{"name": "app", "resources": mem("1Gi")}]
            }),
            GI,
            None,
            &[("app", GI)],
            PodMemorySource::ContainerSums,
        ),
        (
            "pod-level request only: the pod from it, the containers 0",
            json!({
                "resources": {"requests": {"memory": "1Gi"}},
                "containers": [{"name": "app"}, {"name": "helper"}]
            }),
            GI,
            None,
            &[("app", 0), ("helper", 0)],
            PodMemorySource::PodLevelRequest,
        ),
        (
            "pod-level request + some container requests: pod 1Gi, the container its own 256Mi",
            json!({
                "resources": {"requests": {"memory": "1Gi"}},
                "containers": [{"name": "app", "resources": mem("256Mi")}, {"name": "helper"}]
            }),
            GI,
            None,
            &[("app", 256 * MI), ("helper", 0)],
            PodMemorySource::PodLevelRequest,
        ),
        (
            "pod-level limit + throttlingPercent: pod memory.high = 80% of 2Gi, paged",
            json!({
                "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                "containers": [{"name": "app"}]
            }),
            GI,
            Some(2 * GI * 80 / 100 / 4096 * 4096),
            &[("app", 0)],
            PodMemorySource::PodLevelRequest,
        ),
        (
            "pod-level limit only, no request anywhere: the limit stands for the request",
            json!({
                "resources": {"limits": {"memory": "512Mi"}},
                "containers": [{"name": "app"}]
            }),
            512 * MI,
            Some(512 * MI),
            &[("app", 0)],
            PodMemorySource::PodLevelLimit,
        ),
        (
            "pod-level limit only, a container requests: the sums stay",
            json!({
                "resources": {"limits": {"memory": "2Gi"}},
                "containers": [{"name": "app", "resources": mem("256Mi")}]
            }),
            256 * MI,
            Some(2 * GI * 80 / 100 / 4096 * 4096),
            &[("app", 256 * MI)],
            PodMemorySource::ContainerSums,
        ),
        (
            "pod-level cpu only: memory still from the sums, no memory.high",
            json!({
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
                "containers": [{"name": "app", "resources": mem("256Mi")}]
            }),
            256 * MI,
            None,
            &[("app", 256 * MI)],
            PodMemorySource::ContainerSums,
        ),
        (
            "pod-level request + sidecar: the pod from the request, the sidecar its own",
            json!({
                "resources": {"requests": {"memory": "2Gi"}},
                "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": mem("128Mi")}],
                "containers": [{"name": "app"}]
            }),
            2 * GI,
            None,
            &[("app", 0), ("proxy", 128 * MI)],
            PodMemorySource::PodLevelRequest,
        ),
    ];
    let cfg = config(LS_MIN_100, "");
    for (what, spec, pod_min, pod_high, containers, source) in cases {
        let r = create(&shaped(spec.clone()), &cfg);
        let m = &r.resolved.memory_qos;
        assert_eq!(r.resolved.qos_class, QosClass::Ls, "{what}");
        assert_eq!(m.pod.min, *pod_min, "{what}: pod memory.min");
        assert_eq!(m.pod.high, *pod_high, "{what}: pod memory.high");
        assert_eq!(r.explanation.pod_memory, *source, "{what}: source");
        let got: Vec<(&str, i64)> = m
            .containers
            .iter()
            .map(|(n, k)| (n.as_str(), k.min))
            .collect();
        let mut want = containers.to_vec();
        want.sort_unstable();
        assert_eq!(got, want, "{what}: container entries");
        // The annotation carries `memory.high` under `pod` exactly when it applies.
        let text = r.annotation();
        let pod_obj: Value =
            serde_json::from_str::<Value>(&text).expect("json")["memoryQOS"]["pod"].clone();
        assert_eq!(
            pod_obj.get("memory.high").is_some(),
            pod_high.is_some(),
            "{what}: {pod_obj}"
        );
    }
}

#[test]
fn pod_high_only_with_throttling() {
    // Memory QoS on without throttling: a pod-level limit gives no pod memory.high.
    let cfg = config(
        r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":100}}}}"#,
        "",
    );
    let p = shaped(json!({
        "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "containers": [{"name": "app"}]
    }));
    let r = create(&p, &cfg);
    assert_eq!(r.resolved.memory_qos.pod.high, None);
    assert!(
        !r.annotation()
            .contains(r#""pod":{"memory.min":1073741824,"memory.low":1073741824,"memory.high""#)
    );
    // Memory QoS off: the reset parameters, no memory.high either.
    let r = create(&p, &config("", ""));
    assert_eq!(r.resolved.memory_qos.pod.min, 0);
    assert_eq!(r.resolved.memory_qos.pod.high, None);
}

#[test]
fn sidecar_limit_throttles_the_sidecar() {
    let p = shaped(json!({
        "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                            "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "100Mi"}}}],
        "containers": [{"name": "app", "resources": mem("1Gi")}]
    }));
    let r = create(&p, &config(LS_MIN_100, ""));
    let k = r.resolved.memory_qos.containers["proxy"];
    assert_eq!(k.high, MaxOr::Bytes(83_886_080), "80% of 100Mi");
    assert_eq!(r.explanation.sidecars, vec!["proxy".to_owned()]);
}

#[test]
fn kubernetes_qos_with_pod_level_resources() {
    // (what, spec, class): pod-level cpu/memory alone decide it (KEP-2837).
    let cases: &[(&str, Value, KubeQos)] = &[
        (
            "pod-level requests == limits for cpu and memory",
            json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                   "containers": [{"name": "app"}]}),
            KubeQos::Guaranteed,
        ),
        (
            "pod-level limits only (requests default to them)",
            json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                   "containers": [{"name": "app"}]}),
            KubeQos::Guaranteed,
        ),
        (
            "pod-level memory only, containers Guaranteed: not Guaranteed",
            json!({"resources": {"limits": {"memory": "1Gi"}},
                   "containers": [{"name": "app", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}),
            KubeQos::Burstable,
        ),
        (
            "pod-level request below its limit",
            json!({"resources": {"requests": {"memory": "512Mi", "cpu": "1"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                   "containers": [{"name": "app"}]}),
            KubeQos::Burstable,
        ),
        (
            "pod-level request only",
            json!({"resources": {"requests": {"memory": "1Gi"}}, "containers": [{"name": "app"}]}),
            KubeQos::Burstable,
        ),
        (
            "pod-level zeros",
            json!({"resources": {"requests": {"memory": "0"}}, "containers": [{"name": "app"}]}),
            KubeQos::BestEffort,
        ),
        (
            "no pod-level: containers and sidecars as before",
            json!({"initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": mem("1Gi")}],
                   "containers": [{"name": "app"}]}),
            KubeQos::Burstable,
        ),
    ];
    for (what, spec, want) in cases {
        let p = shaped(spec.clone());
        let view = koord_webhook::resolve::PodInput::deserialize(&p).expect("view");
        assert_eq!(kubernetes_qos(&view).expect("qos"), *want, "{what}");
    }
}

#[test]
fn be_sidecar_is_batch_translated_like_a_container() {
    let p = shaped(json!({
        "initContainers": [
            {"name": "setup", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "shipper", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}}
        ],
        "containers": [{"name": "job", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}}]
    }));
    let mut p = p;
    p["metadata"]["labels"] = json!({"koordinator.sh/qosClass": "BE"});
    let r = create(&p, &config(LS_MIN_100, ""));
    let out = mutated(&p, &r);
    let shipper = &out["spec"]["initContainers"][1]["resources"];
    assert_eq!(shipper["limits"]["kubernetes.io/batch-cpu"], "200");
    assert_eq!(shipper["requests"]["kubernetes.io/batch-memory"], "64Mi");
    assert!(shipper["requests"].get("cpu").is_none());
    // The plain init container moves too (as before), but gets no memory QoS or batch entry.
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"]["requests"]["kubernetes.io/batch-memory"],
        "1Gi"
    );
    let b = r.resolved.batch.as_ref().expect("batch");
    assert!(b.containers.contains_key("shipper") && !b.containers.contains_key("setup"));
    assert_eq!(b.pod.memory_limit_in_bytes, 2 * GI + 128 * MI);
    let m = &r.resolved.memory_qos;
    assert_eq!(m.containers["shipper"].min, 64 * MI, "batch-memory basis");
    assert_eq!(m.pod.min, 2 * GI + 64 * MI);
    assert!(!m.containers.contains_key("setup"));
    let spec: Value = serde_json::from_str(
        out["metadata"]["annotations"][ANNOTATION_EXTENDED_RESOURCE_SPEC]
            .as_str()
            .expect("extended-resource-spec"),
    )
    .expect("json");
    assert!(spec["containers"].get("shipper").is_some(), "{spec}");
    assert!(spec["containers"].get("setup").is_none(), "{spec}");
    assert_eq!(r.warning(), None);
}

#[test]
fn be_pod_level_resources_stay_with_a_warning() {
    // (what, colocation on, warning)
    let cases: &[(&str, bool, &str)] = &[
        ("colocation on", true, WARNING_POD_LEVEL_KEPT),
        (
            "colocation off: nothing translated at all",
            false,
            WARNING_BATCH_WITHHELD,
        ),
    ];
    for (what, on, warning) in cases {
        let mut p = shaped(json!({
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
            "containers": [{"name": "job", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}]
        }));
        p["metadata"]["labels"] = json!({"koordinator.sh/qosClass": "BE"});
        let cfg = if *on {
            config(LS_MIN_100, "")
        } else {
            config_colocation_off(LS_MIN_100, "")
        };
        let r = create(&p, &cfg);
        let out = mutated(&p, &r);
        assert_eq!(
            out["spec"]["resources"], p["spec"]["resources"],
            "{what}: pod-level resources unchanged"
        );
        assert_eq!(r.warning(), Some(*warning), "{what}");
        assert!(r.explanation.pod_level_kept, "{what}");
        let job = &out["spec"]["containers"][0]["resources"]["requests"];
        assert_eq!(
            job.get("kubernetes.io/batch-memory").is_some(),
            *on,
            "{what}: {job}"
        );
        // The pod cgroup is protected from its pod-level memory request.
        assert_eq!(r.resolved.memory_qos.pod.min, GI, "{what}");
    }
    // A BE pod without pod-level resources gets no such warning.
    let mut p = shaped(json!({"containers": [{"name": "job", "resources": mem("256Mi")}]}));
    p["metadata"]["labels"] = json!({"koordinator.sh/qosClass": "BE"});
    assert_eq!(create(&p, &config(LS_MIN_100, "")).warning(), None);
}

#[test]
fn pod_level_bad_quantity_names_the_field() {
    let p = shaped(json!({
        "resources": {"requests": {"memory": "lots"}},
        "containers": [{"name": "app"}]
    }));
    let e = resolve_value(
        &p,
        "default",
        koord_webhook::resolve::Operation::Create,
        &config(LS_MIN_100, ""),
    )
    .expect_err("refused");
    assert!(
        e.to_string().contains("spec.resources.requests.memory"),
        "{e}"
    );
    let p = shaped(json!({
        "initContainers": [{"name": "proxy", "restartPolicy": "Always", "resources": {"limits": {"memory": "x"}}}],
        "containers": [{"name": "app"}]
    }));
    let e = resolve_value(
        &p,
        "default",
        koord_webhook::resolve::Operation::Create,
        &config(LS_MIN_100, ""),
    )
    .expect_err("refused");
    assert!(
        e.to_string()
            .contains("spec.initContainers[0].resources.limits.memory"),
        "{e}"
    );
}
