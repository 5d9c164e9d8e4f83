//! BE pods get batch resources only when colocation is on (docs/contract.md §2, Batch
//! resources): the switch, the warning, `--explain`, and byte-identical results for every other
//! pod whichever way the switch is.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use koord_api::keys::{ANNOTATION_EXTENDED_RESOURCE_SPEC, ANNOTATION_RESOLVED_QOS};
use koord_webhook::policy::load::from_data;
use koord_webhook::policy::{ClusterConfigMap, Colocation, PolicyConfig};
use koord_webhook::resolve::{Operation, WARNING_BATCH_WITHHELD};
use serde_json::{Value, json};

const MEMORY_ON: &str = r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}},"beClass":{"memoryQOS":{"enable":true}}}}"#;

fn with(colocation: Colocation) -> PolicyConfig {
    PolicyConfig {
        colocation,
        ..config(MEMORY_ON, "")
    }
}

fn be_with_cpu_memory() -> Value {
    pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"cpu": "500m", "memory": "256Mi"},
               "limits": {"cpu": "2", "memory": "512Mi"}}),
    )
}

#[test]
fn be_pod_keeps_cpu_memory_when_colocation_is_off() {
    for off in [Colocation::NotConfigured, Colocation::Disabled] {
        let p = be_with_cpu_memory();
        let r = create(&p, &with(off));
        assert_eq!(r.warning(), Some(WARNING_BATCH_WITHHELD));
        assert_eq!(r.explanation.batch_withheld, off.off_reason());
        assert!(r.explanation.batch_withheld.is_some());
        assert_eq!(r.explanation.batch_containers, 0);
        assert!(r.resolved.batch.is_none());
        let m = mutated(&p, &r);
        assert_eq!(
            m["spec"]["containers"][0]["resources"], p["spec"]["containers"][0]["resources"],
            "resources as written"
        );
        assert!(
            m["metadata"]["annotations"]
                .get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
                .is_none()
        );
        assert!(
            m["metadata"]["annotations"]
                .get(ANNOTATION_RESOLVED_QOS)
                .is_some()
        );
        // Memory QoS is based on the memory the pod kept: limit 512Mi, wmarkRatio 95.
        let c = &r.resolved.memory_qos.containers["app"];
        assert_eq!(
            serde_json::to_value(c.wmark_high).expect("json"),
            json!((512 * 1024 * 1024 / 4096 * 95 / 100) * 4096)
        );
    }
    // The warning fits what kubectl shows without truncation.
    assert!(WARNING_BATCH_WITHHELD.len() <= 256);
}

#[test]
fn be_pod_is_translated_when_colocation_is_on() {
    let p = be_with_cpu_memory();
    let r = create(&p, &with(Colocation::Enabled));
    assert_eq!(r.warning(), None);
    assert_eq!(r.explanation.batch_withheld, None);
    assert_eq!(r.explanation.batch_containers, 1);
    let m = mutated(&p, &r);
    assert_eq!(
        m["spec"]["containers"][0]["resources"],
        json!({"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"},
               "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "512Mi"}})
    );
    assert!(r.resolved.batch.is_some());
}

/// Everything but a BE pod with cpu/memory at CREATE resolves to the same bytes, colocation on
/// or off, without a warning.
#[test]
fn every_other_pod_is_byte_identical_either_way() {
    let batch = json!({"requests": {"kubernetes.io/batch-cpu": "70k", "kubernetes.io/batch-memory": "22Gi"},
                       "limits": {"kubernetes.io/batch-cpu": "70k", "kubernetes.io/batch-memory": "22Gi"}});
    let cases: Vec<(Value, Operation)> = vec![
        (
            pod(
                json!({"koordinator.sh/qosClass": "LS"}),
                json!({}),
                burstable_100mi(),
            ),
            Operation::Create,
        ),
        (
            pod(json!({}), json!({}), burstable_100mi()),
            Operation::Create,
        ),
        (pod(json!({}), json!({}), json!({})), Operation::Create), // BestEffort -> BE, nothing to move
        (
            pod(json!({"koordinator.sh/qosClass": "BE"}), json!({}), batch),
            Operation::Create,
        ),
        (be_with_cpu_memory(), Operation::Update),
        (
            pod(
                json!({"koordinator.sh/qosClass": "LSR"}),
                json!({}),
                json!({"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            ),
            Operation::Create,
        ),
    ];
    for (p, op) in cases {
        let on = resolve_value(&p, "default", op, &with(Colocation::Enabled)).expect("on");
        for off in [Colocation::NotConfigured, Colocation::Disabled] {
            let r = resolve_value(&p, "default", op, &with(off)).expect("off");
            assert_eq!(r.annotation(), on.annotation(), "{p}");
            assert_eq!(r.changes, on.changes, "{p}");
            assert_eq!(r.warning(), None, "{p}");
            assert_eq!(r.explanation.batch_withheld, None);
        }
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_cluster_configmap_carries_the_switch() {
    let parse = |d: &BTreeMap<String, String>| from_data::<ClusterConfigMap>(d).map(|o| o.config);
    assert_eq!(
        parse(&data(&[])).expect("empty").colocation,
        Colocation::NotConfigured
    );
    let on = parse(&data(&[
        ("resource-qos-config", MEMORY_ON),
        ("colocation-config", r#"{"enable": true}"#),
    ]))
    .expect("on");
    assert_eq!(on.colocation, Colocation::Enabled);
    assert!(
        on.qos.ls.memory_qos_enable == Some(true),
        "resource-qos-config read too"
    );
    // colocation-config alone is a cluster ConfigMap too.
    assert_eq!(
        parse(&data(&[("colocation-config", r#"{"enable": false}"#)]))
            .expect("off")
            .colocation,
        Colocation::Disabled
    );
    // A value the applier refuses is refused here too: the last good ConfigMap stays.
    let err = parse(&data(&[(
        "colocation-config",
        r#"{"enable": true, "degradeTimeMinutes": 0}"#,
    )]))
    .expect_err("refused");
    assert!(
        err.to_string()
            .starts_with("colocation-config: degradeTimeMinutes"),
        "{err}"
    );
}

/// The applier's parser and the webhook's switch agree on every text.
#[test]
fn both_halves_agree_on_colocation_on() {
    for text in [
        "{}",
        r#"{"enable": true}"#,
        r#"{"enable": false}"#,
        r#"{"enable": null}"#,
        r#"{"enable": "true"}"#,
        r#"{"enable": 1}"#,
        r#"{"enable": true, "memoryCalculatePolicy": "bogus"}"#,
        r#"{"enable": true, "resourceDiffThreshold": 2}"#,
        r#"{"enable": true, "unknownField": 3}"#,
        "{broken",
    ] {
        let applier = koord_api::colocation::parse_colocation(text).map(|c| c.enable);
        let webhook = Colocation::parse(Some(text)).map(Colocation::is_enabled);
        assert_eq!(applier.is_ok(), webhook.is_ok(), "{text}");
        assert_eq!(applier.ok(), webhook.ok(), "{text}");
    }
}
