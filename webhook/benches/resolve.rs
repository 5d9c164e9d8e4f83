//! Resolve + change list + JSON patch of a realistic two-container pod (the reference
//! AdmissionReview's object), parsed from bytes through the lean view as the server does; and
//! the patch built by hand (ours) against the `json-patch` crate's `diff` of the pod before and
//! after the changes (docs/decisions.md, "`json-patch` is a test dependency only").

use criterion::{Criterion, black_box, criterion_group, criterion_main};
use koord_webhook::mutation::{apply_changes, json_patch};
use koord_webhook::policy::{ClusterQosConfig, Colocation, NamespaceQosConfig, PolicyConfig};
use koord_webhook::resolve::{Operation, PodInput, Resolution, ResolveContext, resolve_pod};
use serde_json::Value;

const REVIEW: &str = include_str!("../tests/fixtures/admission-review-pod-create.json");

fn pod_bytes(annotation: Option<&str>) -> Vec<u8> {
    let review: Value = serde_json::from_str(REVIEW).expect("fixture");
    let mut pod = review["request"]["object"].clone();
    if let Some(a) = annotation {
        pod["metadata"]["annotations"]["koordinator.sh/memoryQOS"] = Value::String(a.to_owned());
    }
    serde_json::to_vec(&pod).expect("bytes")
}

/// The patch as `json_patch::diff` makes it: the pod as a `Value`, a mutated copy, the diff.
fn diff_patch(pod: &Value, resolution: &Resolution) -> Vec<u8> {
    let mut mutated = pod.clone();
    apply_changes(&mut mutated, resolution);
    serde_json::to_vec(&json_patch::diff(pod, &mutated)).expect("patch")
}

fn bench(c: &mut Criterion) {
    let config = PolicyConfig {
        cluster: ClusterQosConfig::parse(r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}},"beClass":{"memoryQOS":{"enable":true}}}}"#)
            .expect("config")
            .config,
        namespaces: NamespaceQosConfig::parse(r#"{"enabledNamespaces":["allow-ns"],"disabledNamespaces":["block-ns"]}"#)
            .expect("config")
            .config,
        colocation: Colocation::Enabled,
        ..PolicyConfig::default()
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
                let view: PodInput<'_> = serde_json::from_slice(black_box(&bytes)).expect("view");
                let r = resolve_pod(&view, &ctx).expect("resolves");
                black_box(json_patch(&view, &r))
            })
        });
    }
    let bytes = pod_bytes(None);
    let view: PodInput<'_> = serde_json::from_slice(&bytes).expect("view");
    c.bench_function("resolve_pod/engine_only", |b| {
        b.iter(|| resolve_pod(black_box(&view), &ctx).expect("resolves"))
    });

    // The patch alone, for the same pod and changes.
    let resolution = resolve_pod(&view, &ctx).expect("resolves");
    let pod: Value = serde_json::from_slice(&bytes).expect("pod");
    let ours: json_patch::Patch =
        serde_json::from_slice(&json_patch(&view, &resolution)).expect("our patch");
    let theirs: json_patch::Patch =
        serde_json::from_slice(&diff_patch(&pod, &resolution)).expect("diff patch");
    let (mut a, mut b) = (pod.clone(), pod.clone());
    json_patch::patch(&mut a, &ours).expect("ours applies");
    json_patch::patch(&mut b, &theirs).expect("diff applies");
    assert_eq!(a, b, "both patches give the same pod");
    c.bench_function("patch/hand_built", |b| {
        b.iter(|| black_box(json_patch(black_box(&view), &resolution)))
    });
    c.bench_function("patch/json_patch_diff", |b| {
        b.iter(|| black_box(diff_patch(black_box(&pod), &resolution)))
    });
    // What the server would do per request with json-patch: the view for the engine, plus the
    // whole pod as a `Value` for the diff.
    c.bench_function(
        "resolve_pod/two_containers_cluster_enabled_json_patch_diff",
        |b| {
            b.iter(|| {
                let view: PodInput<'_> = serde_json::from_slice(black_box(&bytes)).expect("view");
                let r = resolve_pod(&view, &ctx).expect("resolves");
                let pod: Value = serde_json::from_slice(&bytes).expect("pod");
                black_box(diff_patch(&pod, &r))
            })
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
