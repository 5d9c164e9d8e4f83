//! The Kubernetes side of colocation, without an API server: which pods are BE and what they
//! request, reading the Node's allocatable and advertised batch resources, the status patch,
//! and ConfigMap updates counted in metrics (the flags: the config tests).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_applier::node::colocation::capacity::Resources;
use koord_applier::node::colocation::config::ConfigState;
use koord_applier::node::colocation::node_status::{advertised_on_node, allocatable, patch_body};
use koord_applier::node::colocation::pod_facts::PodFacts;
use koord_applier::node::colocation::{ColocationMetrics, on_configmap};
use koord_translator::cgroup::layout::KubeQos;

const GI: i64 = 1 << 30;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).expect("pod")
}

#[test]
fn pod_facts_table() {
    let base = |labels: serde_json::Value,
                containers: serde_json::Value,
                status: serde_json::Value| {
        pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "0123abcd-0000-4000-8000-000000000001", "labels": labels},
            "spec": {"containers": containers, "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "3", "memory": "64Mi"}}}
            ], "overhead": {"cpu": "100m", "memory": "10Mi"}},
            "status": status
        }))
    };
    let c = |cpu: &str, mem: &str| serde_json::json!({"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}});
    // LS: max(sum containers, largest init) + overhead, per resource.
    let p = base(
        serde_json::json!({"koordinator.sh/qosClass": "LS"}),
        serde_json::json!([c("500m", "1Gi"), c("1", "1Gi")]),
        serde_json::json!({"qosClass": "Burstable", "phase": "Running"}),
    );
    let f = PodFacts::from_pod(&p).expect("facts");
    assert!(!f.be);
    assert_eq!(f.kube_qos, KubeQos::Burstable);
    assert_eq!(
        f.request,
        Resources::new(3_000 + 100, 2 * GI + 10 * 1024 * 1024)
    );

    // BE by label, by legacy label, or by batch resources.
    for (labels, containers) in [
        (
            serde_json::json!({"koordinator.sh/qosClass": "BE"}),
            serde_json::json!([{"name": "c"}]),
        ),
        (
            serde_json::json!({"alibabacloud.com/qosClass": "BE"}),
            serde_json::json!([{"name": "c"}]),
        ),
        (
            serde_json::json!({}),
            serde_json::json!([{"name": "c", "resources": {"limits": {"kubernetes.io/batch-cpu": "1k"}}}]),
        ),
    ] {
        let f = PodFacts::from_pod(&base(
            labels.clone(),
            containers,
            serde_json::json!({"qosClass": "BestEffort"}),
        ))
        .expect("facts");
        assert!(f.be, "{labels}");
    }
    // Batch requests (what the Node's batch figures may never fall below): max(sum of the
    // containers, largest init container), a limit standing for a missing request.
    let f = PodFacts::from_pod(&pod(serde_json::json!({
        "metadata": {"name": "b", "namespace": "n", "uid": "0123abcd-0000-4000-8000-000000000002"},
        "spec": {"containers": [
            {"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "512Mi"},
                                          "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}}}
        ], "initContainers": [
            {"name": "i", "resources": {"requests": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "64Mi"}}}
        ]},
        "status": {"qosClass": "BestEffort", "phase": "Pending"}
    })))
    .expect("facts");
    assert!(f.be);
    assert_eq!(f.batch_request, Resources::new(2_000, 768 * 1024 * 1024));
    assert_eq!(f.request, Resources::ZERO);

    // The koordinator.sh label wins over the legacy one.
    let f = PodFacts::from_pod(&base(
        serde_json::json!({"koordinator.sh/qosClass": "LS", "alibabacloud.com/qosClass": "BE"}),
        serde_json::json!([{"name": "c"}]),
        serde_json::json!({}),
    ))
    .expect("facts");
    assert!(!f.be);
    assert_eq!(
        f.kube_qos,
        KubeQos::Burstable,
        "computed from the spec without status.qosClass"
    );

    // Finished pods and pods without a UID have no cgroup to read.
    let done = base(
        serde_json::json!({}),
        serde_json::json!([{"name": "c"}]),
        serde_json::json!({"phase": "Succeeded"}),
    );
    assert_eq!(PodFacts::from_pod(&done), None);
    let mut no_uid = base(
        serde_json::json!({}),
        serde_json::json!([{"name": "c"}]),
        serde_json::json!({}),
    );
    no_uid.metadata.uid = None;
    assert_eq!(PodFacts::from_pod(&no_uid), None);
}

fn node(status: serde_json::Value) -> Node {
    serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "status": status}))
        .expect("node")
}

#[test]
fn node_status_reading_and_patch() {
    let n = node(serde_json::json!({
        "capacity": {"cpu": "8", "memory": "16Gi", "kubernetes.io/batch-cpu": "3800", "kubernetes.io/batch-memory": "9019431321"},
        "allocatable": {"cpu": "7800m", "memory": "15Gi", "kubernetes.io/batch-cpu": "3800", "kubernetes.io/batch-memory": "9019431321"}
    }));
    assert_eq!(allocatable(&n), Some(Resources::new(7_800, 15 * GI)));
    assert_eq!(
        advertised_on_node(&n),
        Some(Resources::new(3_800, 9_019_431_321))
    );
    // The apiserver's canonical form of 2000 is "2k": still 2000 milli-cores.
    let k = node(serde_json::json!({
        "capacity": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"},
        "allocatable": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}
    }));
    assert_eq!(advertised_on_node(&k), Some(Resources::new(2_000, GI)));
    // Missing in one list, or capacity != allocatable: not advertised (rewritten).
    for status in [
        serde_json::json!({"capacity": {"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "1"}}),
        serde_json::json!({
            "capacity": {"kubernetes.io/batch-cpu": "1", "kubernetes.io/batch-memory": "1"},
            "allocatable": {"kubernetes.io/batch-cpu": "2", "kubernetes.io/batch-memory": "1"}
        }),
        serde_json::json!({}),
    ] {
        assert_eq!(advertised_on_node(&node(status.clone())), None, "{status}");
    }
    assert_eq!(
        allocatable(&node(serde_json::json!({"allocatable": {"cpu": "1"}}))),
        None
    );

    let body = patch_body(Resources::new(3_800, 9_019_431_321));
    let want = serde_json::json!({"kubernetes.io/batch-cpu": "3800", "kubernetes.io/batch-memory": "9019431321"});
    assert_eq!(body["status"]["capacity"], want);
    assert_eq!(body["status"]["allocatable"], want);
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(1),
        "only status is patched"
    );
}

#[test]
fn configmap_updates_are_counted_and_never_lose_the_good_config() {
    let state = std::sync::Mutex::new(ConfigState::default());
    let m = ColocationMetrics::register(&prometheus::Registry::new()).expect("metrics");
    let mut data = BTreeMap::new();
    data.insert(
        "colocation-config".to_owned(),
        r#"{"enable":true}"#.to_owned(),
    );
    on_configmap(&state, Some(&data), &m);
    data.insert("colocation-config".to_owned(), "{".to_owned());
    data.insert(
        "resource-threshold-config".to_owned(),
        r#"{"clusterStrategy":{"cpuSuppressThresholdPercent":101}}"#.to_owned(),
    );
    on_configmap(&state, Some(&data), &m);
    let s = state.lock().expect("lock").current.clone();
    assert!(s.colocation.enable, "kept");
    assert_eq!(
        s.threshold.cpu_suppress_threshold_percent, 65,
        "kept (default)"
    );
    let text = m.render();
    for needle in [
        "koord_applier_colocation_config_errors_total{key=\"colocation-config\"} 1",
        "koord_applier_colocation_config_errors_total{key=\"resource-threshold-config\"} 1",
        "koord_applier_be_cpu_limit_cores -1",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
