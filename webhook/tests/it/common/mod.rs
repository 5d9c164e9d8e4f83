//! Shared helpers: build pods as JSON, resolve, apply (the engine tests); the example
//! manifests; wait for a condition.

use koord_webhook::mutation::apply_changes;
use koord_webhook::policy::{ClusterQosConfig, Colocation, NamespaceQosConfig, PolicyConfig};
use koord_webhook::resolve::{
    Operation, PodInput, Resolution, ResolveContext, ResolveError, resolve_pod,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

pub fn resolve_value(
    pod: &Value,
    namespace: &str,
    op: Operation,
    config: &PolicyConfig,
) -> Result<Resolution, ResolveError> {
    let view = PodInput::deserialize(pod).expect("pod view parses");
    resolve_pod(
        &view,
        &ResolveContext {
            namespace,
            operation: op,
            config,
        },
    )
}

pub fn create(pod: &Value, config: &PolicyConfig) -> Resolution {
    resolve_value(pod, "default", Operation::Create, config).expect("resolves")
}

pub fn mutated(pod: &Value, r: &Resolution) -> Value {
    let mut out = pod.clone();
    apply_changes(&mut out, r);
    out
}

/// The two ConfigMaps' texts (empty: the defaults), with colocation on so BE pods are
/// translated; [`config_colocation_off`] for the other case.
pub fn config(cluster: &str, namespaces: &str) -> PolicyConfig {
    PolicyConfig {
        colocation: Colocation::Enabled,
        cluster: if cluster.is_empty() {
            ClusterQosConfig::default()
        } else {
            ClusterQosConfig::parse(cluster).expect("cluster").config
        },
        namespaces: if namespaces.is_empty() {
            NamespaceQosConfig::default()
        } else {
            NamespaceQosConfig::parse(namespaces)
                .expect("namespaces")
                .config
        },
        proactive_reclaim_namespaces: NamespaceQosConfig::default(),
    }
}

/// [`config`] with colocation off (no `colocation-config`: the defaults).
pub fn config_colocation_off(cluster: &str, namespaces: &str) -> PolicyConfig {
    PolicyConfig {
        colocation: Colocation::NotConfigured,
        ..config(cluster, namespaces)
    }
}

/// A one-container pod with the given labels, annotations and resources.
pub fn pod(labels: Value, annotations: Value, resources: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources}]}
    })
}

pub fn burstable_100mi() -> Value {
    json!({"requests": {"cpu": "500m", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "100Mi"}})
}

/// The example manifests (`tests/fixtures/examples`), as a user would apply them.
pub fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/examples")
}

/// Polls `check` every 25 ms until it holds and returns how long that took; panics naming
/// `what` after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out after {limit:?} waiting for: {what}");
}
