//! Resolve + change list + JSON patch of a realistic two-container pod (the reference
//! AdmissionReview's object), parsed from bytes through the lean view as the server does.

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use koord_webhook::mutation::json_patch;
use koord_webhook::policy::{ClusterQosConfig, NamespaceQosConfig, PolicyConfig};
use koord_webhook::resolve::{Operation, PodView, ResolveContext, resolve_pod};

const REVIEW: &str = include_str!("../tests/fixtures/admission-review-pod-create.json");

fn pod_bytes(annotation: Option<&str>) -> Vec<u8> {
    let review: serde_json::Value = serde_json::from_str(REVIEW).expect("fixture");
    let mut pod = review["request"]["object"].clone();
    if let Some(a) = annotation {
        pod["metadata"]["annotations"]["koordinator.sh/memoryQOS"] =
            serde_json::Value::String(a.to_owned());
    }
    serde_json::to_vec(&pod).expect("bytes")
}

fn bench(c: &mut Criterion) {
    let config = PolicyConfig {
        cluster: ClusterQosConfig::parse(r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}},"beClass":{"memoryQOS":{"enable":true}}}}"#)
            .expect("config")
            .config,
        namespaces: NamespaceQosConfig::parse(r#"{"enabledNamespaces":["allow-ns"],"disabledNamespaces":["block-ns"]}"#)
            .expect("config")
            .config,
    };
    let ctx = ResolveContext {
        namespace: "shop",
        operation: Operation::Create,
        config: &config,
    };
    for (name, annotation) in [
        ("resolve_pod/two_containers_cluster_enabled", None),
        (
            "resolve_pod/two_containers_auto_throttled",
            Some(r#"{"policy":"auto","minLimitPercent":50,"throttlingPercent":80}"#),
        ),
    ] {
        let bytes = pod_bytes(annotation);
        c.bench_function(name, |b| {
            b.iter(|| {
                let view: PodView<'_> = serde_json::from_slice(black_box(&bytes)).expect("view");
                let r = resolve_pod(&view, &ctx).expect("resolves");
                black_box(serde_json::to_vec(&json_patch(&view, &r.changes)).expect("patch"))
            })
        });
    }
    let bytes = pod_bytes(None);
    let view: PodView<'_> = serde_json::from_slice(&bytes).expect("view");
    c.bench_function("resolve_pod/engine_only", |b| {
        b.iter(|| resolve_pod(black_box(&view), &ctx).expect("resolves"))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
