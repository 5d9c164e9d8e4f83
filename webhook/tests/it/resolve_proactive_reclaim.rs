//! Proactive reclaim through the whole engine (docs/contract.md §2, Proactive reclaim): the
//! section appears only when a source states it, each container's floor comes from the memory
//! numbers its memory QoS knobs were computed from, and a bad pod annotation is refused naming
//! the field.

use crate::common;

use common::*;
use koord_api::ResolvedQos;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use koord_webhook::policy::{Colocation, NamespaceQosConfig, PolicyConfig};
use koord_webhook::resolve::{Operation, Resolution};
use serde_json::{Value, json};

const MI: i64 = 1 << 20;

/// LS memory QoS protecting all of the request (memory.min = request), so a floor above
/// memory.min shows the floorPercent share won.
const LS_MEMORY_MIN_HALF: &str = r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":50}},
    "beClass":{"memoryQOS":{"enable":true},"proactiveReclaim":{"enable":true,"floorPercent":50}}}}"#;

fn with_namespaces(cluster: &str, proactive_reclaim: &str) -> PolicyConfig {
    PolicyConfig {
        proactive_reclaim_namespaces: NamespaceQosConfig::parse_key(
            proactive_reclaim,
            "proactive-reclaim",
        )
        .expect("lists")
        .config,
        ..config(cluster, "")
    }
}

fn floors(r: &Resolution) -> Vec<(String, i64)> {
    r.resolved
        .proactive_reclaim
        .as_ref()
        .expect("stated")
        .containers
        .iter()
        .map(|(name, f)| (name.clone(), f.floor_bytes))
        .collect()
}

/// An LS pod: `app` (512Mi), a native sidecar `proxy` (256Mi), `bare` without resources, and a
/// plain init container (no memory QoS entry, so no floor).
fn ls_pod_with_sidecar(annotations: Value) -> Value {
    let mem = |m: &str| json!({"requests": {"memory": m}, "limits": {"memory": m}});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
        "spec": {
            "initContainers": [
                {"name": "proxy", "restartPolicy": "Always", "resources": mem("256Mi")},
                {"name": "setup", "resources": mem("1Gi")}
            ],
            "containers": [
                {"name": "app", "resources": mem("512Mi")},
                {"name": "bare"}
            ]
        }
    })
}

#[test]
fn floors_follow_memory_min_and_the_request() {
    let pod = ls_pod_with_sidecar(
        json!({"koordinator.sh/proactiveReclaim": r#"{"enable": true, "floorPercent": 80}"#}),
    );
    let r = create(&pod, &config(LS_MEMORY_MIN_HALF, ""));
    let section = r.resolved.proactive_reclaim.as_ref().expect("stated");
    assert!(section.enabled);
    assert_eq!(section.params.floor_percent, 80);
    // memory.min is 50% of the request; 80% of it is more. No request: memory.min, 0.
    assert_eq!(
        floors(&r),
        [
            ("app".to_owned(), 512 * MI * 8 / 10),
            ("bare".to_owned(), 0),
            ("proxy".to_owned(), 256 * MI * 8 / 10)
        ]
    );
    assert_eq!(r.resolved.memory_qos.containers["app"].min, 256 * MI);

    // floorPercent under the memory.min share: memory.min is the floor.
    let pod = ls_pod_with_sidecar(
        json!({"koordinator.sh/proactiveReclaim": r#"{"enable": true, "floorPercent": 10}"#}),
    );
    let r = create(&pod, &config(LS_MEMORY_MIN_HALF, ""));
    assert_eq!(
        floors(&r),
        [
            ("app".to_owned(), 256 * MI),
            ("bare".to_owned(), 0),
            ("proxy".to_owned(), 128 * MI)
        ]
    );
    let sources = r
        .explanation
        .proactive_reclaim_param_sources
        .expect("stated");
    assert_eq!(sources.len(), 4);
}

/// A limit without a request stands for the request, as for memory.min.
#[test]
fn a_limit_alone_stands_for_the_request() {
    let p = pod(
        json!({}),
        json!({"koordinator.sh/proactiveReclaim": r#"{"enable": true, "floorPercent": 50}"#}),
        json!({"limits": {"memory": "100Mi"}}),
    );
    let r = create(&p, &config("", ""));
    assert_eq!(floors(&r), [("app".to_owned(), 50 * MI)]);
}

/// A BE pod's floor reads the bytes its memory knobs read: batch-memory once translated, its
/// memory while colocation is off; the BE class section decides.
#[test]
fn be_pods_read_batch_memory_or_the_memory_they_kept() {
    let be = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}),
    );
    for colocation in [Colocation::Enabled, Colocation::NotConfigured] {
        let config = PolicyConfig {
            colocation,
            ..config(LS_MEMORY_MIN_HALF, "")
        };
        let r = create(&be, &config);
        let section = r
            .resolved
            .proactive_reclaim
            .as_ref()
            .expect("beClass states it");
        assert!(section.enabled, "{colocation:?}");
        assert_eq!(
            section.source,
            koord_api::DecisionSource::ClusterConfig,
            "{colocation:?}"
        );
        assert_eq!(floors(&r), [("app".to_owned(), 128 * MI)], "{colocation:?}");
    }
    // A BE pod created with batch resources already (no memory at all).
    let batch = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"kubernetes.io/batch-memory": "1Gi"}, "limits": {"kubernetes.io/batch-memory": "1Gi"}}),
    );
    let r = create(&batch, &config(LS_MEMORY_MIN_HALF, ""));
    assert_eq!(floors(&r), [("app".to_owned(), 512 * MI)]);
}

/// The section is written only when a source states it; everything else keeps its bytes.
#[test]
fn the_section_appears_only_when_stated() {
    let plain = pod(json!({}), json!({}), burstable_100mi());
    for config in [
        PolicyConfig::default(),
        config(
            r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}}}}"#,
            "",
        ),
        // Stated for other classes and namespaces only.
        with_namespaces(LS_MEMORY_MIN_HALF, r#"{"enabledNamespaces":["elsewhere"]}"#),
    ] {
        let r = create(&plain, &config);
        assert_eq!(r.resolved.proactive_reclaim, None);
        assert!(
            !r.annotation().contains("proactiveReclaim"),
            "{}",
            r.annotation()
        );
        assert_eq!(r.explanation.proactive_reclaim_param_sources, None);
    }

    // The namespace lists state it; disabled, it is written with who turned it off.
    let lists = r#"{"enabledNamespaces":["default"]}"#;
    let r = create(&plain, &with_namespaces("", lists));
    let section = r.resolved.proactive_reclaim.as_ref().expect("listed");
    assert!(section.enabled);
    assert_eq!(section.source, koord_api::DecisionSource::NamespaceConfig);

    let off = pod(
        json!({}),
        json!({"koordinator.sh/proactiveReclaim": r#"{"enable": false}"#}),
        burstable_100mi(),
    );
    let r = create(&off, &with_namespaces("", lists));
    let text = r.annotation();
    assert!(
        text.ends_with(r#","proactiveReclaim":{"enabled":false,"params":{"intervalSeconds":6,"stallTargetMicros":10000,"stepPermill":10,"floorPercent":0},"source":"pod-annotation","containers":{"app":{"floorBytes":0}}}}"#),
        "{text}"
    );
    assert_eq!(
        ResolvedQos::from_annotation(&text).expect("reads back"),
        r.resolved
    );
}

/// A pod admitted before the feature (or with nothing stating it) resolves to the same bytes
/// on UPDATE: no change, so the re-resolver leaves it alone.
#[test]
fn an_update_with_nothing_stated_changes_nothing() {
    let plain = pod(json!({}), json!({}), burstable_100mi());
    let config = config(
        r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}}}}"#,
        "",
    );
    let admitted = mutated(&plain, &create(&plain, &config));
    let again = resolve_value(&admitted, "default", Operation::Update, &config).expect("resolves");
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    assert!(
        !admitted["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS]
            .as_str()
            .expect("written")
            .contains("proactiveReclaim")
    );
}

#[test]
fn a_bad_annotation_is_refused_naming_the_field() {
    for (text, want) in [
        (
            r#"{"enable": true, "stepPermill": 101}"#,
            "koordinator.sh/proactiveReclaim.stepPermill: 101 is out of range (allowed 1..100)",
        ),
        (
            r#"{"floorPercent": -5}"#,
            "koordinator.sh/proactiveReclaim.floorPercent: -5 is out of range (allowed 0..100)",
        ),
        (
            r#"["enable"]"#,
            r#"koordinator.sh/proactiveReclaim: ["enable"] is not a JSON object like {"enable": true}"#,
        ),
        (
            r#"{"enabled": true}"#,
            "koordinator.sh/proactiveReclaim.enabled: unknown field (allowed: enable, intervalSeconds, stallTargetMicros, stepPermill, floorPercent)",
        ),
    ] {
        let p = pod(
            json!({}),
            json!({"koordinator.sh/proactiveReclaim": text}),
            burstable_100mi(),
        );
        let err = resolve_value(&p, "default", Operation::Create, &PolicyConfig::default())
            .expect_err(text);
        assert_eq!(err.to_string(), want);
    }
}
