//! The colocation loop against an in-process fake API server (tower-test): the ConfigMap is
//! listed by name (field selector, so RBAC resourceNames applies), the Node is read, and its
//! status is merge-patched with the batch resources computed from the pod cache (a lowering
//! patch after a pod list from the server), a synthetic
//! /proc and an empty cgroup tree.

use crate::common;

use std::time::Duration;

use common::fake_api::{FakeApi, Serves};
use k8s_openapi::api::core::v1::Pod;
use koord_applier::node::colocation::{Colocation, ColocationMetrics, Settings};
use koord_translator::cgroup::layout::Layout;
use koord_translator::cgroup::{CgroupDriver, CgroupVersion};
use kube::runtime::reflector;
use kube::runtime::watcher;

const GI: i64 = 1 << 30;

/// The colocation loop started against a fake API server serving `node` and `api_pods` (a pod
/// list read from the server), with one LS pod (1 CPU / 1 GiB requests, no cgroup yet ->
/// counted by request) in its cache, 8 idle CPUs and 2 GiB of 64 GiB used in its /proc.
fn start(
    tmp: &std::path::Path,
    node: serde_json::Value,
    api_pods: Vec<serde_json::Value>,
) -> (FakeApi, ColocationMetrics, tokio::task::JoinHandle<()>) {
    koord_runtime::install_crypto_provider();
    let proc = tmp.join("proc");
    std::fs::create_dir_all(&proc).expect("mkdir");
    std::fs::write(
        proc.join("stat"),
        format!(
            "cpu  10 0 10 1000 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n{}",
            common::PROC_STAT_TAIL
        ),
    )
    .expect("stat");
    std::fs::write(
        proc.join("meminfo"),
        common::meminfo(64 * GI as u64, 62 * GI as u64),
    )
    .expect("meminfo");
    let layout = Layout::new(tmp.join("cg"), CgroupVersion::V1, CgroupDriver::Cgroupfs);
    let (store, mut writer) = reflector::store::<Pod>();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "ls", "namespace": "shop", "uid": "0123abcd-0000-4000-8000-000000000001",
                     "labels": {"koordinator.sh/qosClass": "LS"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}}]},
        "status": {"qosClass": "Burstable", "phase": "Running"}
    }))
    .expect("pod");
    writer.apply_watcher_event(&watcher::Event::InitApply(pod));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let cm_list = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "7"},
        "items": [{"metadata": {"name": "ack-slo-config", "namespace": "kube-system", "resourceVersion": "7"},
                   "data": {"colocation-config": "{\"enable\": true}"}}]
    });
    let api = FakeApi::start(Serves {
        pods: api_pods,
        configmaps: Some(cm_list),
        node: Some(node),
    });
    let metrics = ColocationMetrics::register(&prometheus::Registry::new()).expect("metrics");
    let c = Colocation {
        client: api.client.clone(),
        layout,
        proc_root: proc,
        node_name: "node-1".into(),
        settings: Settings {
            enabled: true,
            sample_interval: Duration::from_millis(50),
            report_interval: Duration::from_millis(100),
            ..Settings::default()
        },
        metrics: metrics.clone(),
        pods: store,
        writer: std::sync::Arc::default(),
    };
    let task = tokio::spawn(c.run());
    (api, metrics, task)
}

#[tokio::test]
async fn patches_node_status_with_batch_resources() {
    let tmp = tempfile::tempdir().expect("tmp");
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"capacity": {"cpu": "8", "memory": "16Gi"}, "allocatable": {"cpu": "8", "memory": "16Gi"}}
    });
    let (mut api, metrics, task) = start(tmp.path(), node, Vec::new());

    let mut uris = Vec::new();
    let patch = api
        .wait_for(Duration::from_secs(10), |r| {
            assert!(!r.unknown, "unexpected request {} {}", r.method, r.uri);
            uris.push(format!("{} {}", r.method, r.uri));
            (r.method == http::Method::PATCH && r.uri.starts_with("/api/v1/nodes/node-1/status"))
                .then(|| {
                    (
                        r.uri.clone(),
                        r.content_type.clone(),
                        r.body.clone().expect("patch json"),
                    )
                })
        })
        .await
        .expect("a node status patch within 10 s");
    // The counter moves once the patch's answer is back.
    let counted = "koord_applier_node_status_patches_total{reason=\"missing\",result=\"ok\"} 1";
    for _ in 0..100 {
        if metrics.render().contains(counted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    task.abort();

    let (uri, ctype, body) = patch;
    assert_eq!(ctype, "application/merge-patch+json");
    assert!(
        uri.contains("fieldManager=koord-applier-colocation"),
        "{uri}"
    );
    // cpu: 8000 x 60% - 1000 (LS) - 0 (node CPU idle) = 3800
    // memory: 16Gi x 65% - 1Gi (LS) - (2Gi node - 1Gi pods) = 16Gi*65/100 - 2Gi
    let want = serde_json::json!({
        "kubernetes.io/batch-cpu": "3800",
        "kubernetes.io/batch-memory": (16 * GI * 65 / 100 - 2 * GI).to_string(),
    });
    assert_eq!(
        body,
        serde_json::json!({"status": {"capacity": want, "allocatable": want}})
    );
    let cm = uris
        .iter()
        .find(|u| u.contains("/configmaps?"))
        .expect("a configmap list");
    assert!(
        cm.contains("fieldSelector=metadata.name%3Dack-slo-config"),
        "{cm}"
    );
    assert!(
        !uris.iter().any(|u| u.contains("/api/v1/pods")),
        "the pod cache is shared, no own watch: {uris:?}"
    );
    let text = metrics.render();
    assert!(text.contains(counted), "{text}");
    assert!(
        text.contains("koord_applier_batch_resource_advertised{resource=\"batch-cpu\"} 3800"),
        "{text}"
    );
}

/// A patch that lowers what the Node advertises is held at the batch requests of the pods bound
/// to the node as the API server lists them, not as the cache (which has not seen the BE pod
/// the scheduler placed on the old value yet) holds them.
#[tokio::test]
async fn a_lowering_patch_keeps_what_pods_bound_since_the_cache_was_read() {
    let tmp = tempfile::tempdir().expect("tmp");
    let batch = serde_json::json!({"cpu": "8", "memory": "16Gi",
        "kubernetes.io/batch-cpu": "7000", "kubernetes.io/batch-memory": (12 * GI).to_string()});
    let node = serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"capacity": batch, "allocatable": batch}
    });
    let be = serde_json::json!({
        "metadata": {"name": "be", "namespace": "batch", "uid": "0123abcd-0000-4000-8000-000000000002",
                     "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "resources": {
            "requests": {"kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": "10Gi"},
            "limits": {"kubernetes.io/batch-cpu": "5000", "kubernetes.io/batch-memory": "10Gi"}}}]},
        "status": {"qosClass": "BestEffort", "phase": "Pending"}
    });
    let (mut api, _metrics, task) = start(tmp.path(), node, vec![be]);
    let mut listed = false;
    let body = api
        .wait_for(Duration::from_secs(10), |r| {
            assert!(!r.unknown, "unexpected request {} {}", r.method, r.uri);
            if r.method == http::Method::GET
                && r.uri.starts_with("/api/v1/pods?")
                && !r.uri.contains("watch=true")
            {
                assert!(
                    r.uri.contains("fieldSelector=spec.nodeName%3Dnode-1"),
                    "{}",
                    r.uri
                );
                listed = true;
            }
            (r.method == http::Method::PATCH && r.uri.starts_with("/api/v1/nodes/node-1/status"))
                .then(|| r.body.clone().expect("patch json"))
        })
        .await
        .expect("a node status patch within 10 s");
    task.abort();
    assert!(
        listed,
        "no pod list from the API server before the lowering patch"
    );
    // The formula alone: 3800 milli-CPUs and 16Gi x 65% - 2Gi, both below what the Node shows;
    // held at the BE pod's 5000 and 10Gi.
    let want = serde_json::json!({
        "kubernetes.io/batch-cpu": "5000",
        "kubernetes.io/batch-memory": (10 * GI).to_string(),
    });
    assert_eq!(
        body,
        serde_json::json!({"status": {"capacity": want, "allocatable": want}})
    );
}
