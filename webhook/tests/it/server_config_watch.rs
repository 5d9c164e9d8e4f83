//! The ConfigMap/Namespace watch against an in-process fake of the apiserver's list/watch
//! endpoints: changes reach the next admission, a broken ConfigMap keeps the last good config
//! and is counted, readiness waits for the caches, and the watch survives an apiserver restart.

use crate::common::eventually;
use crate::fake_apiserver;
use crate::server_support;

use std::time::Duration;

use fake_apiserver::{FakeApiServer, client};
use koord_webhook::live::watch::ConfigMapNames;
use koord_webhook::server::PolicySource;
use serde_json::Value;
use server_support::*;

/// How long a change may take to reach the server (the reflector's relist and the swap).
const TEN_S: Duration = Duration::from_secs(10);

const LS_DISABLED: &str = r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":false}}}}"#;
const LS_ENABLED: &str =
    r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"wmarkRatio":90}}}}"#;

fn cluster_policy() -> PolicySource {
    PolicySource::Cluster(ConfigMapNames {
        namespace: "kube-system".into(),
        cluster: "ack-slo-config".into(),
        pod: "ack-slo-pod-config".into(),
    })
}

/// The resolved-qos annotation the webhook writes for the fixture pod in `namespace`.
async fn resolved_for(running: &Running, namespace: &str) -> Option<Value> {
    let mut review = fixture_json("pod-create.json");
    review["request"]["namespace"] = namespace.into();
    review["request"]["object"]["metadata"]["namespace"] = namespace.into();
    let reply = post(running, serde_json::to_vec(&review).expect("json")).await;
    let response = response_of(&reply);
    assert_eq!(response["allowed"], true, "{response}");
    response.get("patch")?;
    let patched = apply_response_patch(&response, &review["request"]["object"]);
    let text = patched["metadata"]["annotations"]["koordinator.sh/resolved-qos"].as_str()?;
    serde_json::from_str(text).ok()
}

async fn memory_qos_enabled(running: &Running) -> Option<bool> {
    resolved_for(running, "shop").await?["memoryQOS"]["enabled"].as_bool()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configmap_changes_reach_the_next_admission() {
    let fake = FakeApiServer::new("kube-system");
    fake.put_configmap("ack-slo-config", &[("resource-qos-config", LS_DISABLED)]);
    fake.put_configmap(
        "ack-slo-pod-config",
        &[("memory-qos", r#"{"enabledNamespaces":[]}"#)],
    );
    fake.put_namespace("shop", &[("koordinator.sh/qos-webhook", "enabled")]);
    fake.put_namespace("not-opted-in", &[]);
    fake.hold_lists();
    let (api_addr, api_handle) = fake.serve("127.0.0.1:0".parse().expect("addr")).await;

    let running = start_with(
        cluster_policy(),
        |_| {},
        |s| s.with_kube_client(client(api_addr)),
    )
    .await;

    // Not ready while the lists have not come back.
    let readyz = get(&running, "/readyz").await;
    assert_eq!(
        readyz.status,
        503,
        "{}",
        String::from_utf8_lossy(&readyz.body)
    );
    fake.release_lists();
    eventually("readyz turns 200", TEN_S, || async {
        get(&running, "/readyz").await.status == 200
    })
    .await;
    assert_eq!(memory_qos_enabled(&running).await, Some(false));

    // A namespace the cache knows without the opt-in label is not mutated...
    assert_eq!(resolved_for(&running, "not-opted-in").await, None);
    // ...unless the apiserver says the label was just added (the watch has not caught up).
    fake.put_namespace_quietly("not-opted-in", &[("koordinator.sh/qos-webhook", "enabled")]);
    assert!(resolved_for(&running, "not-opted-in").await.is_some());

    // Enable LS memory QoS: the next admission sees it, no restart.
    fake.put_configmap("ack-slo-config", &[("resource-qos-config", LS_ENABLED)]);
    eventually("enabled config applied", TEN_S, || async {
        memory_qos_enabled(&running).await == Some(true)
    })
    .await;
    let resolved = resolved_for(&running, "shop").await.expect("resolved");
    assert_eq!(resolved["memoryQOS"]["params"]["wmarkRatio"], 90);
    assert_eq!(resolved["memoryQOS"]["source"], "cluster-config");

    // A broken ConfigMap keeps the last good config and shows in the metrics.
    fake.put_configmap("ack-slo-config", &[("resource-qos-config", "{not json")]);
    eventually("config error counted", TEN_S, || async {
        let m = String::from_utf8(get(&running, "/metrics").await.body).unwrap_or_default();
        m.contains(r#"koord_webhook_config_errors_total{config="cluster"} 1"#)
            && m.contains(r#"koord_webhook_config_valid{config="cluster"} 0"#)
    })
    .await;
    assert_eq!(
        memory_qos_enabled(&running).await,
        Some(true),
        "last good config kept"
    );

    // The namespace ConfigMap disables the namespace.
    fake.put_configmap(
        "ack-slo-pod-config",
        &[("memory-qos", r#"{"disabledNamespaces":["shop"]}"#)],
    );
    eventually("namespace list applied", TEN_S, || async {
        memory_qos_enabled(&running).await == Some(false)
    })
    .await;

    // The apiserver restarts (connections drop) with a changed config: the watch re-lists.
    api_handle.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    fake.put_configmap("ack-slo-pod-config", &[("memory-qos", "{}")]);
    fake.put_configmap("ack-slo-config", &[("resource-qos-config", LS_ENABLED)]);
    let (_, _api_handle2) = fake.serve(api_addr).await;
    eventually(
        "config re-listed after apiserver restart",
        TEN_S,
        || async { memory_qos_enabled(&running).await == Some(true) },
    )
    .await;
    // The repaired cluster ConfigMap (the one before the restart was broken) is valid again.
    eventually("cluster config valid again", TEN_S, || async {
        let m = String::from_utf8(get(&running, "/metrics").await.body).unwrap_or_default();
        m.contains(r#"koord_webhook_config_valid{config="cluster"} 1"#)
    })
    .await;
}

const LS_RECLAIM: &str =
    r#"{"clusterStrategy":{"lsClass":{"proactiveReclaim":{"enable":true,"stepPermill":20}}}}"#;

async fn proactive_reclaim(running: &Running) -> Option<Value> {
    resolved_for(running, "shop")
        .await?
        .get("proactiveReclaim")
        .cloned()
}

async fn metrics_text(running: &Running) -> String {
    String::from_utf8(get(running, "/metrics").await.body).unwrap_or_default()
}

/// Proactive reclaim from both ConfigMaps: the class section and the `proactive-reclaim`
/// namespace lists reach the next admission; a bad value in either keeps the last good
/// ConfigMap and is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proactive_reclaim_configmaps_reach_the_next_admission() {
    let fake = FakeApiServer::new("kube-system");
    fake.put_configmap("ack-slo-config", &[("resource-qos-config", LS_RECLAIM)]);
    fake.put_configmap("ack-slo-pod-config", &[("memory-qos", "{}")]);
    fake.put_namespace("shop", &[("koordinator.sh/qos-webhook", "enabled")]);
    let (api_addr, _api_handle) = fake.serve("127.0.0.1:0".parse().expect("addr")).await;
    let running = start_with(
        cluster_policy(),
        |_| {},
        |s| s.with_kube_client(client(api_addr)),
    )
    .await;
    eventually("readyz turns 200", TEN_S, || async {
        get(&running, "/readyz").await.status == 200
    })
    .await;
    let section = proactive_reclaim(&running)
        .await
        .expect("the class states it");
    assert_eq!(section["enabled"], true, "{section}");
    assert_eq!(section["source"], "cluster-config");
    assert_eq!(section["params"]["stepPermill"], 20);
    assert_eq!(section["containers"]["app"]["floorBytes"], 0);

    // An out-of-range class value: the last good cluster ConfigMap stays, the error is counted.
    fake.put_configmap(
        "ack-slo-config",
        &[(
            "resource-qos-config",
            r#"{"clusterStrategy":{"lsClass":{"proactiveReclaim":{"enable":true,"stepPermill":101}}}}"#,
        )],
    );
    eventually("cluster config error counted", TEN_S, || async {
        metrics_text(&running)
            .await
            .contains(r#"koord_webhook_config_errors_total{config="cluster"} 1"#)
    })
    .await;
    let kept = proactive_reclaim(&running).await.expect("still stated");
    assert_eq!(kept["params"]["stepPermill"], 20, "last good config kept");

    // The namespace list turns it off for the namespace.
    fake.put_configmap(
        "ack-slo-pod-config",
        &[
            ("memory-qos", "{}"),
            ("proactive-reclaim", r#"{"disabledNamespaces":["shop"]}"#),
        ],
    );
    eventually("namespace list applied", TEN_S, || async {
        proactive_reclaim(&running)
            .await
            .is_some_and(|s| s["enabled"] == false && s["source"] == "namespace-config")
    })
    .await;

    // A broken list keeps the last good namespace ConfigMap (memory-qos and all).
    fake.put_configmap(
        "ack-slo-pod-config",
        &[
            ("memory-qos", r#"{"enabledNamespaces":["shop"]}"#),
            ("proactive-reclaim", r#"{"enabledNamespaces":"shop"}"#),
        ],
    );
    eventually("namespace config error counted", TEN_S, || async {
        metrics_text(&running)
            .await
            .contains(r#"koord_webhook_config_errors_total{config="namespace"} 1"#)
    })
    .await;
    let kept = proactive_reclaim(&running).await.expect("still stated");
    assert_eq!(kept["enabled"], false, "{kept}");
    assert_eq!(kept["source"], "namespace-config");
    let resolved = resolved_for(&running, "shop").await.expect("resolved");
    assert_eq!(
        resolved["memoryQOS"]["enabled"], false,
        "the broken version's memory-qos list is not taken either"
    );
}
