//! Table tests for every resolution rule of docs/contract.md §2 and §3.

// Tables are tuples spelled out where they are used: an alias per table would hide the columns.
#![allow(clippy::type_complexity)]

use crate::common;

use common::*;
use koord_api::keys::{
    ANNOTATION_EXTENDED_RESOURCE_SPEC, ANNOTATION_RESOLVED_QOS, LABEL_QOS_CLASS,
};
use koord_api::{
    DecisionSource, LocalityPolicy, MaxOr, MemoryQosParams, MemoryQosPolicy, QosClass,
    QosClassSource, ResolvedQos,
};
use koord_webhook::policy::PolicyConfig;
use koord_webhook::resolve::Operation;
use serde_json::{Value, json};

const MI: i64 = 1024 * 1024;

#[test]
fn worked_numbers_from_the_reference() {
    // request 100Mi x minLimitPercent 100 -> memory.min 104857600;
    // limit 100Mi x throttlingPercent 80 -> memory.high 83886080, wmark_high 79691776 at wmarkRatio 95.
    let p = pod(
        json!({"koordinator.sh/qosClass": "LS"}),
        json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto","minLimitPercent":100,"throttlingPercent":80}"#}),
        burstable_100mi(),
    );
    let r = create(&p, &PolicyConfig::default());
    let k = r.resolved.memory_qos.containers["app"];
    assert_eq!(k.min, 104_857_600);
    assert_eq!(
        k.low, 0,
        "lowLimitPercent 0 leaves memory.low 0 whatever min is (the reference's `low > 0 && low < min`)"
    );
    // high = 80% of 100Mi = 83886080, but never below min (104857600).
    assert_eq!(k.high, MaxOr::Bytes(104_857_600));

    let p = pod(
        json!({"koordinator.sh/qosClass": "LS"}),
        json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto","throttlingPercent":80}"#}),
        burstable_100mi(),
    );
    let k = create(&p, &PolicyConfig::default())
        .resolved
        .memory_qos
        .containers["app"];
    assert_eq!(k.high, MaxOr::Bytes(83_886_080));
    assert_eq!(k.wmark_ratio, 95);
    assert_eq!(k.wmark_high, MaxOr::Bytes(79_691_776));
    assert_eq!(k.min, 0);
}

#[test]
fn byte_arithmetic_table() {
    // (request, limit, params json, min, low, high, wmark_high)
    let cases: &[(&str, Option<&str>, &str, i64, i64, MaxOr, MaxOr)] = &[
        (
            "100Mi",
            Some("100Mi"),
            r#"{"policy":"auto","minLimitPercent":100}"#,
            100 * MI,
            0,
            MaxOr::Max,
            MaxOr::Bytes(95 * MI),
        ),
        (
            "100Mi",
            Some("200Mi"),
            r#"{"policy":"auto","lowLimitPercent":50}"#,
            0,
            50 * MI,
            MaxOr::Max,
            MaxOr::Bytes(190 * MI),
        ),
        (
            "100Mi",
            Some("200Mi"),
            // A low that is set but below min rises to min.
            r#"{"policy":"auto","minLimitPercent":50,"lowLimitPercent":10}"#,
            50 * MI,
            50 * MI,
            MaxOr::Max,
            MaxOr::Bytes(190 * MI),
        ),
        (
            "100Mi",
            None,
            r#"{"policy":"auto","throttlingPercent":80}"#,
            0,
            0,
            MaxOr::Max,
            MaxOr::Max,
        ),
        (
            "100Mi",
            Some("100Mi"),
            r#"{"policy":"auto","throttlingPercent":50,"minLimitPercent":60}"#,
            60 * MI,
            0,
            MaxOr::Bytes(60 * MI),
            MaxOr::Bytes(15_360 * 95 / 100 * 4096),
        ),
        // 1000 bytes x 33% -> 330, floored to pages -> 0 -> raised to min (0).
        (
            "1000",
            Some("1000"),
            r#"{"policy":"auto","throttlingPercent":33}"#,
            0,
            0,
            MaxOr::Bytes(0),
            MaxOr::Bytes(0),
        ),
        (
            "100Mi",
            Some("100Mi"),
            r#"{"policy":"auto","wmarkRatio":0}"#,
            0,
            0,
            MaxOr::Max,
            MaxOr::Max,
        ),
    ];
    for (req, lim, params, min, low, high, wmark_high) in cases {
        let mut res = json!({"requests": {"memory": req}});
        if let Some(l) = lim {
            res["limits"] = json!({"memory": l});
        }
        let p = pod(
            json!({"koordinator.sh/qosClass": "LS"}),
            json!({"koordinator.sh/memoryQOS": params}),
            res,
        );
        let k = create(&p, &PolicyConfig::default())
            .resolved
            .memory_qos
            .containers["app"];
        assert_eq!(
            (k.min, k.low, k.high, k.wmark_high),
            (*min, *low, *high, *wmark_high),
            "{req} {lim:?} {params}"
        );
    }
}

#[test]
fn pod_level_sums_and_init_containers_have_no_entry() {
    let p = json!({
        "metadata": {"name": "two", "labels": {"koordinator.sh/qosClass": "LS"},
                     "annotations": {"koordinator.sh/memoryQOS": r#"{"policy":"auto","minLimitPercent":50,"lowLimitPercent":100}"#}},
        "spec": {
            "initContainers": [{"name": "init", "resources": {"requests": {"memory": "1Gi"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"memory": "100Mi"}}},
                {"name": "b", "resources": {"limits": {"memory": "200Mi"}}}
            ]}
    });
    let m = create(&p, &PolicyConfig::default()).resolved.memory_qos;
    assert_eq!(m.containers.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        m.containers["b"].min,
        100 * MI,
        "a missing request takes the limit"
    );
    assert_eq!(m.pod.min, 150 * MI);
    assert_eq!(m.pod.low, 300 * MI);
}

/// The precedence matrix: annotation x namespace lists x cluster class enable.
#[test]
fn precedence_matrix() {
    let annotations = [
        ("auto", Some(r#"{"policy":"auto"}"#)),
        ("default", Some(r#"{"policy":"default"}"#)),
        ("none", Some(r#"{"policy":"none"}"#)),
        ("absent", None),
    ];
    let namespaces = [
        ("enabled", "allow-ns"),
        ("disabled", "block-ns"),
        ("neither", "other-ns"),
    ];
    let clusters = [
        (
            "enabled",
            r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}}}}"#,
        ),
        (
            "disabled",
            r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":false}}}}"#,
        ),
        ("unset", ""),
    ];
    let ns_cfg = r#"{"enabledNamespaces":["allow-ns"],"disabledNamespaces":["block-ns"]}"#;
    let mut checked = 0;
    for (a_name, a) in annotations {
        for (n_name, ns) in namespaces {
            for (c_name, cluster) in clusters {
                let expected = match (a_name, n_name, c_name) {
                    ("none", _, _) => (false, DecisionSource::PodAnnotation),
                    ("auto", _, _) => (true, DecisionSource::PodAnnotation),
                    (_, "disabled", _) => (false, DecisionSource::NamespaceConfig),
                    (_, "enabled", _) => (true, DecisionSource::NamespaceConfig),
                    (_, _, "enabled") => (true, DecisionSource::ClusterConfig),
                    (_, _, "disabled") => (false, DecisionSource::ClusterConfig),
                    _ => (false, DecisionSource::Default),
                };
                let ann = a.map_or(json!({}), |a| json!({"koordinator.sh/memoryQOS": a}));
                let p = pod(json!({}), ann, burstable_100mi());
                let cfg = config(cluster, ns_cfg);
                let r = resolve_value(&p, ns, Operation::Create, &cfg).expect("resolves");
                let m = &r.resolved.memory_qos;
                let case = format!("annotation {a_name}, namespace {n_name}, cluster {c_name}");
                assert_eq!((m.enabled, m.source), expected, "{case}");
                let policy = match a_name {
                    "auto" => MemoryQosPolicy::Auto,
                    "none" => MemoryQosPolicy::None,
                    _ => MemoryQosPolicy::Default,
                };
                assert_eq!(m.policy, policy, "{case}");
                if m.enabled {
                    assert_eq!(m.params.wmark_ratio, 95, "{case}");
                    assert_eq!(m.containers["app"].wmark_scale_factor, 20, "{case}");
                } else {
                    assert_eq!(m.params, MemoryQosParams::RESET, "{case}");
                    let k = m.containers["app"];
                    assert_eq!(
                        (
                            k.min,
                            k.low,
                            k.high,
                            k.wmark_ratio,
                            k.wmark_scale_factor,
                            k.wmark_min_adj,
                            k.priority,
                            k.use_priority_oom,
                            k.oom_group
                        ),
                        (0, 0, MaxOr::Max, 0, 50, 0, 0, 0, 0),
                        "{case}: reset values"
                    );
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 36);
}

#[test]
fn parameter_layering() {
    // recommended (LS: 95/-25/20) < cluster class params < pod params.
    let cluster = r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":10,"lowLimitPercent":20,"wmarkRatio":90}}}}"#;
    let p = pod(
        json!({}),
        json!({"koordinator.sh/memoryQOS": r#"{"lowLimitPercent":30}"#}),
        burstable_100mi(),
    );
    let m = create(&p, &config(cluster, "")).resolved.memory_qos;
    assert_eq!(
        (
            m.params.min_limit_percent,
            m.params.low_limit_percent,
            m.params.wmark_ratio,
            m.params.wmark_min_adj
        ),
        (10, 30, 90, -25)
    );
    // auto ignores the cluster class params but keeps the pod's.
    let p = pod(
        json!({}),
        json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto","lowLimitPercent":30}"#}),
        burstable_100mi(),
    );
    let m = create(&p, &config(cluster, "")).resolved.memory_qos;
    assert_eq!(
        (
            m.params.min_limit_percent,
            m.params.low_limit_percent,
            m.params.wmark_ratio
        ),
        (0, 30, 95)
    );
    // none ignores the pod's params.
    let p = pod(
        json!({}),
        json!({"koordinator.sh/memoryQOS": r#"{"policy":"NONE","minLimitPercent":100}"#}),
        burstable_100mi(),
    );
    let m = create(&p, &config(cluster, "")).resolved.memory_qos;
    assert_eq!(
        (m.enabled, m.policy, m.params),
        (false, MemoryQosPolicy::None, MemoryQosParams::RESET)
    );
}

#[test]
fn recommended_parameters_per_class() {
    // (class label, wmarkRatio, wmarkMinAdj, wmarkScalePermill)
    for (class, ratio, adj, permill) in [
        ("LSE", 95, -25, 20),
        ("LSR", 95, -25, 20),
        ("LS", 95, -25, 20),
        ("BE", 95, 50, 20),
        ("SYSTEM", 0, 0, 50),
    ] {
        let p = pod(
            json!({"koordinator.sh/qosClass": class}),
            json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto"}"#}),
            json!({}),
        );
        let params = create(&p, &PolicyConfig::default())
            .resolved
            .memory_qos
            .params;
        assert_eq!(
            (
                params.wmark_ratio,
                params.wmark_min_adj,
                params.wmark_scale_permill
            ),
            (ratio, adj, permill),
            "{class}"
        );
    }
}

#[test]
fn lse_reads_the_lsr_class_config() {
    let cluster =
        r#"{"clusterStrategy":{"lsrClass":{"memoryQOS":{"enable":true,"minLimitPercent":40}}}}"#;
    let p = pod(
        json!({"koordinator.sh/qosClass": "LSE"}),
        json!({}),
        burstable_100mi(),
    );
    let m = create(&p, &config(cluster, "")).resolved.memory_qos;
    assert!(m.enabled);
    assert_eq!(m.containers["app"].min, 40 * MI);
}

#[test]
fn qos_class_table() {
    let guaranteed =
        json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}});
    let limits_only = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let burstable = burstable_100mi();
    let empty = json!({});
    // (labels, resources, status qosClass, class, source, label written)
    let cases: Vec<(
        Value,
        Value,
        Option<&str>,
        QosClass,
        QosClassSource,
        Option<&str>,
    )> = vec![
        (
            json!({}),
            burstable.clone(),
            None,
            QosClass::Ls,
            QosClassSource::KubernetesQos,
            Some("LS"),
        ),
        (
            json!({}),
            empty.clone(),
            None,
            QosClass::Be,
            QosClassSource::KubernetesQos,
            Some("BE"),
        ),
        (
            json!({}),
            guaranteed.clone(),
            None,
            QosClass::Lsr,
            QosClassSource::KubernetesQos,
            None,
        ),
        (
            json!({}),
            limits_only,
            None,
            QosClass::Lsr,
            QosClassSource::KubernetesQos,
            None,
        ),
        (
            json!({}),
            guaranteed.clone(),
            Some("Burstable"),
            QosClass::Ls,
            QosClassSource::KubernetesQos,
            Some("LS"),
        ),
        (
            json!({"koordinator.sh/qosClass": "BE"}),
            burstable.clone(),
            None,
            QosClass::Be,
            QosClassSource::Label,
            None,
        ),
        (
            json!({"koordinator.sh/qosClass": "SYSTEM"}),
            empty.clone(),
            None,
            QosClass::System,
            QosClassSource::Label,
            None,
        ),
        (
            json!({"koordinator.sh/qosClass": "be"}),
            burstable.clone(),
            None,
            QosClass::Ls,
            QosClassSource::KubernetesQos,
            Some("LS"),
        ),
        (
            json!({"alibabacloud.com/qosClass": "LSR"}),
            burstable.clone(),
            None,
            QosClass::Lsr,
            QosClassSource::LegacyLabel,
            Some("LSR"),
        ),
        (
            json!({"koordinator.sh/qosClass": "LS", "alibabacloud.com/qosClass": "BE"}),
            empty.clone(),
            None,
            QosClass::Ls,
            QosClassSource::Label,
            None,
        ),
        (
            json!({"koordinator.sh/qosClass": "bogus", "alibabacloud.com/qosClass": "BE"}),
            guaranteed,
            None,
            QosClass::Be,
            QosClassSource::LegacyLabel,
            Some("BE"),
        ),
    ];
    for (i, (labels, res, status, class, source, written)) in cases.into_iter().enumerate() {
        let mut p = pod(labels, json!({}), res);
        if let Some(s) = status {
            p["status"] = json!({"qosClass": s});
        }
        let r = create(&p, &PolicyConfig::default());
        assert_eq!(
            (r.resolved.qos_class, r.resolved.qos_class_source),
            (class, source),
            "case {i}"
        );
        let out = mutated(&p, &r);
        let label = out
            .pointer("/metadata/labels/koordinator.sh~1qosClass")
            .and_then(Value::as_str);
        match written {
            Some(w) => assert_eq!(label, Some(w), "case {i}: label written"),
            None => assert!(
                r.changes
                    .iter()
                    .all(|c| !matches!(c, koord_webhook::resolve::Change::SetLabel { .. })),
                "case {i}: no label change"
            ),
        }
    }
}

#[test]
fn batch_resources_of_be_pods() {
    let p = json!({
        "metadata": {"name": "be", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {
            "overhead": {"cpu": "250m", "memory": "120Mi"},
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                             "limits": {"cpu": "1.0001", "memory": "2Gi", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "100m"}}}
            ]}
    });
    let r = create(&p, &config("", ""));
    let out = mutated(&p, &r);
    let c = &out["spec"]["containers"];
    assert_eq!(
        c[0]["resources"]["requests"],
        json!({"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(
        c[0]["resources"]["limits"],
        json!({"kubernetes.io/batch-cpu": "1001", "kubernetes.io/batch-memory": "2Gi", "nvidia.com/gpu": "1"})
    );
    assert_eq!(
        c[1]["resources"],
        json!({"requests": {"kubernetes.io/batch-cpu": "100"}})
    );
    // A missing request takes the limit; `2` -> 2000 milli-cores, written canonically as 2k.
    assert_eq!(
        out["spec"]["initContainers"][0]["resources"],
        json!({"limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"},
               "requests": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "1Gi"}})
    );
    assert_eq!(
        out["spec"]["overhead"],
        json!({"kubernetes.io/batch-cpu": "250", "kubernetes.io/batch-memory": "120Mi"})
    );

    let batch = r.resolved.batch.expect("batch section");
    assert_eq!(
        (
            batch.containers["a"].cpu_shares,
            batch.containers["a"].cpu_cfs_quota_us,
            batch.containers["a"].memory_limit_in_bytes
        ),
        (512, 100_100, 2048 * MI)
    );
    assert_eq!(
        (
            batch.containers["b"].cpu_shares,
            batch.containers["b"].cpu_cfs_quota_us,
            batch.containers["b"].memory_limit_in_bytes
        ),
        (102, -1, -1)
    );
    // Pod: shares from the summed requests; any container without a limit makes the pod unlimited.
    assert_eq!(
        (
            batch.pod.cpu_shares,
            batch.pod.cpu_cfs_quota_us,
            batch.pod.memory_limit_in_bytes
        ),
        (614, -1, -1)
    );
    // Memory QoS of BE pods reads batch-memory.
    let spec = out["metadata"]["annotations"][ANNOTATION_EXTENDED_RESOURCE_SPEC]
        .as_str()
        .expect("extended spec");
    assert_eq!(
        spec,
        r#"{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"1001","kubernetes.io/batch-memory":"2Gi"},"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"1Gi"}},"b":{"requests":{"kubernetes.io/batch-cpu":"100"}}}}"#
    );
}

#[test]
fn be_memory_qos_reads_batch_memory() {
    let p = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto","minLimitPercent":50,"throttlingPercent":80}"#}),
        json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}),
    );
    let r = create(&p, &PolicyConfig::default());
    let k = r.resolved.memory_qos.containers["app"];
    assert_eq!(k.min, 512 * MI);
    assert_eq!(k.high, MaxOr::Bytes(2048 * MI * 80 / 100 / 4096 * 4096));
    assert_eq!(k.wmark_min_adj, 50);
}

#[test]
fn the_ffmpeg_example_gives_the_reference_batch_numbers() {
    let p = pod(
        json!({"koordinator.sh/qosClass": "BE", "app": "ffmpeg"}),
        json!(null),
        json!({"limits": {"kubernetes.io/batch-cpu": "70k", "kubernetes.io/batch-memory": "22Gi"},
               "requests": {"kubernetes.io/batch-cpu": "70k", "kubernetes.io/batch-memory": "22Gi"}}),
    );
    let r = create(&p, &PolicyConfig::default());
    let b = r.resolved.batch.expect("batch");
    assert_eq!(
        (
            b.pod.cpu_shares,
            b.pod.cpu_cfs_quota_us,
            b.pod.memory_limit_in_bytes
        ),
        (71_680, 7_000_000, 23_622_320_128)
    );
    assert_eq!(b.containers["app"], b.pod);
}

#[test]
fn no_batch_section_without_batch_resources() {
    let p = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({}),
    );
    let r = create(&p, &PolicyConfig::default());
    assert!(r.resolved.batch.is_none());
    assert!(
        !mutated(&p, &r)["metadata"]["annotations"]
            .as_object()
            .expect("annotations")
            .contains_key(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    );
    // A non-BE pod keeps cpu/memory.
    let p = pod(
        json!({"koordinator.sh/qosClass": "LS"}),
        json!({}),
        burstable_100mi(),
    );
    let r = create(&p, &PolicyConfig::default());
    assert!(r.resolved.batch.is_none());
    assert_eq!(
        mutated(&p, &r)["spec"]["containers"][0]["resources"],
        burstable_100mi()
    );
}

#[test]
fn memory_locality_table() {
    let cluster = r#"{"clusterStrategy":{"lsClass":{"memoryLocality":{"policy":"bestEffort"}},"beClass":{"memoryLocality":{"policy":"none"}}}}"#;
    // (labels, annotation, policy, interval, source)
    let cases: &[(
        &str,
        Option<&str>,
        Option<(LocalityPolicy, Option<u32>, DecisionSource)>,
    )] = &[
        (
            "LS",
            None,
            Some((
                LocalityPolicy::BestEffort,
                None,
                DecisionSource::ClusterConfig,
            )),
        ),
        (
            "BE",
            None,
            Some((LocalityPolicy::None, None, DecisionSource::ClusterConfig)),
        ),
        ("LSR", None, None),
        (
            "LSR",
            Some(r#"{"policy": "BestEffort", "migrateIntervalMinutes": 10}"#),
            Some((
                LocalityPolicy::BestEffort,
                Some(10),
                DecisionSource::PodAnnotation,
            )),
        ),
        (
            "LS",
            Some(r#"{"policy":"none"}"#),
            Some((LocalityPolicy::None, None, DecisionSource::PodAnnotation)),
        ),
    ];
    for (class, ann, expected) in cases {
        let annotations = ann.map_or(json!({}), |a| json!({"koordinator.sh/memoryLocality": a}));
        let p = pod(
            json!({"koordinator.sh/qosClass": class}),
            annotations,
            json!({}),
        );
        let got = create(&p, &config(cluster, ""))
            .resolved
            .memory_locality
            .map(|l| (l.policy, l.migrate_interval_minutes, l.source));
        assert_eq!(got, *expected, "{class} {ann:?}");
    }
}

#[test]
fn legacy_annotation_and_precedence_between_annotations() {
    let legacy = pod(
        json!({}),
        json!({"alibabacloud.com/memoryQOS": r#"{"policy":"auto"}"#}),
        burstable_100mi(),
    );
    let m = create(&legacy, &PolicyConfig::default())
        .resolved
        .memory_qos;
    assert_eq!(
        (m.enabled, m.source),
        (true, DecisionSource::LegacyAnnotation)
    );
    let both = pod(
        json!({}),
        json!({"alibabacloud.com/memoryQOS": r#"{"policy":"auto"}"#, "koordinator.sh/memoryQOS": r#"{"policy":"none"}"#}),
        burstable_100mi(),
    );
    let m = create(&both, &PolicyConfig::default()).resolved.memory_qos;
    assert_eq!(
        (m.enabled, m.source, m.policy),
        (false, DecisionSource::PodAnnotation, MemoryQosPolicy::None)
    );
    // A missing policy means default.
    let p = pod(
        json!({}),
        json!({"koordinator.sh/memoryQOS": r#"{"minLimitPercent":10}"#}),
        burstable_100mi(),
    );
    let m = create(
        &p,
        &config(
            r#"{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true}}}}"#,
            "",
        ),
    )
    .resolved
    .memory_qos;
    assert_eq!(
        (m.policy, m.source, m.params.min_limit_percent),
        (MemoryQosPolicy::Default, DecisionSource::ClusterConfig, 10)
    );
}

#[test]
fn bad_input_is_denied_with_the_field_and_range() {
    let cases: &[(Value, Value, &str)] = &[
        (
            json!({"koordinator.sh/memoryQOS": "{not json"}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS: not valid JSON",
        ),
        (
            json!({"koordinator.sh/memoryQOS": r#"{"policy":"always"}"#}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS.policy: unknown policy \"always\" (allowed auto|default|none, case-insensitive)",
        ),
        (
            json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto","minLimitPercent":150}"#}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS.minLimitPercent: 150 is out of range (allowed 0..100)",
        ),
        (
            json!({"koordinator.sh/memoryQOS": r#"{"wmarkMinAdj":-26}"#}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS.wmarkMinAdj: -26 is out of range (allowed -25..50)",
        ),
        (
            json!({"koordinator.sh/memoryQOS": r#"{"priority":13}"#}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS.priority: 13 is out of range (allowed 0..12)",
        ),
        (
            json!({"koordinator.sh/memoryQOS": r#"["auto"]"#}),
            burstable_100mi(),
            "koordinator.sh/memoryQOS: [\"auto\"] is not a JSON object",
        ),
        (
            json!({"alibabacloud.com/memoryQOS": r#"{"oomKillGroup":2}"#}),
            burstable_100mi(),
            "alibabacloud.com/memoryQOS.oomKillGroup: 2 is out of range (allowed 0..1)",
        ),
        (
            json!({"koordinator.sh/memoryLocality": r#"{"policy":"always"}"#}),
            burstable_100mi(),
            "koordinator.sh/memoryLocality.policy: unknown policy \"always\"",
        ),
        (
            json!({"koordinator.sh/memoryLocality": "nope"}),
            burstable_100mi(),
            "koordinator.sh/memoryLocality: not valid JSON",
        ),
        (
            json!({}),
            json!({"requests": {"memory": "lots"}}),
            "spec.containers[0].resources.requests.memory: \"lots\" is not a Kubernetes quantity",
        ),
    ];
    for (annotations, resources, msg) in cases {
        let p = pod(json!({}), annotations.clone(), resources.clone());
        let err = resolve_value(&p, "default", Operation::Create, &PolicyConfig::default())
            .expect_err(msg)
            .to_string();
        assert!(err.starts_with(msg), "got {err:?}, want prefix {msg:?}");
    }
}

#[test]
fn update_rewrites_a_hand_edit_and_leaves_resources_alone() {
    let p = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"cpu": "1"}}),
    );
    // Colocation on, so the stored pod carries batch resources.
    let r = create(&p, &config("", ""));
    let mut stored = mutated(&p, &r);
    let good = stored["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS].clone();
    stored["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS] =
        json!(r#"{"version":1,"forged":true}"#);
    stored["metadata"]["annotations"]["koordinator.sh/memoryLocality"] =
        json!(r#"{"policy":"bestEffort"}"#);
    let u = resolve_value(
        &stored,
        "default",
        Operation::Update,
        &PolicyConfig::default(),
    )
    .expect("update");
    let after = mutated(&stored, &u);
    let resolved = ResolvedQos::from_annotation(
        after["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS]
            .as_str()
            .expect("str"),
    )
    .expect("valid");
    assert_ne!(
        after["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS],
        good
    );
    assert_eq!(
        resolved.memory_locality.map(|l| l.policy),
        Some(LocalityPolicy::BestEffort)
    );
    assert_eq!(resolved.batch.map(|b| b.pod.cpu_shares), Some(1024));
    // UPDATE of a BE pod whose resources never moved to batch leaves them alone.
    let raw = pod(
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({}),
        json!({"requests": {"cpu": "1"}}),
    );
    let u = resolve_value(&raw, "default", Operation::Update, &PolicyConfig::default())
        .expect("update");
    assert_eq!(
        mutated(&raw, &u)["spec"]["containers"][0]["resources"],
        json!({"requests": {"cpu": "1"}})
    );
}

#[test]
fn resolving_a_resolved_pod_changes_nothing() {
    for labels in [
        json!({}),
        json!({"koordinator.sh/qosClass": "BE"}),
        json!({"alibabacloud.com/qosClass": "LSR"}),
    ] {
        let p = pod(
            labels,
            json!({"koordinator.sh/memoryQOS": r#"{"policy":"auto"}"#}),
            burstable_100mi(),
        );
        let once = mutated(&p, &create(&p, &PolicyConfig::default()));
        for op in [Operation::Create, Operation::Update] {
            let again =
                resolve_value(&once, "default", op, &PolicyConfig::default()).expect("resolves");
            assert!(again.changes.is_empty(), "{op:?}: {:?}", again.changes);
        }
    }
}

#[test]
fn label_map_and_annotation_map_are_created_when_missing() {
    let p = json!({"metadata": {"name": "bare"}, "spec": {"containers": [{"name": "c"}]}});
    let r = create(&p, &PolicyConfig::default());
    let out = mutated(&p, &r);
    assert_eq!(out["metadata"]["labels"][LABEL_QOS_CLASS], "BE");
    assert!(out["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS].is_string());
}

#[test]
fn the_class_source_survives_re_resolution_only_when_the_pod_proves_it() {
    let p = pod(json!({}), json!({}), burstable_100mi());
    let once = mutated(&p, &create(&p, &PolicyConfig::default()));
    let again = resolve_value(
        &once,
        "default",
        Operation::Update,
        &PolicyConfig::default(),
    )
    .expect("update");
    assert_eq!(
        again.resolved.qos_class_source,
        QosClassSource::KubernetesQos
    );
    // A forged annotation claiming kubernetes-qos for a class the pod's resources do not give.
    let mut forged = once.clone();
    forged["metadata"]["labels"][LABEL_QOS_CLASS] = json!("BE");
    let r = resolve_value(
        &forged,
        "default",
        Operation::Update,
        &PolicyConfig::default(),
    )
    .expect("update");
    assert_eq!(
        (r.resolved.qos_class, r.resolved.qos_class_source),
        (QosClass::Be, QosClassSource::Label)
    );
}

#[test]
fn cpu_qos_table() {
    use koord_api::ResolvedCpuQos;
    let cluster = r#"{"clusterStrategy":{"lsClass":{"cpuQOS":{"enable":true}},"beClass":{"cpuQOS":{"enable":true}},
        "lsrClass":{"cpuQOS":{"enable":true,"groupIdentity":1}},"systemClass":{"cpuQOS":{"enable":false,"groupIdentity":2}}}}"#;
    // (class, annotation, expected)
    let cases: &[(&str, Option<&str>, Option<(bool, i64, DecisionSource)>)] = &[
        ("LS", None, Some((true, 2, DecisionSource::ClusterConfig))),
        ("BE", None, Some((true, -1, DecisionSource::ClusterConfig))),
        ("LSE", None, Some((true, 1, DecisionSource::ClusterConfig))),
        (
            "SYSTEM",
            None,
            Some((false, 0, DecisionSource::ClusterConfig)),
        ),
        (
            "BE",
            Some(r#"{"groupIdentity": 0}"#),
            Some((true, 0, DecisionSource::PodAnnotation)),
        ),
        (
            "LS",
            Some(r#"{"enable": false}"#),
            Some((false, 0, DecisionSource::PodAnnotation)),
        ),
        (
            "BE",
            Some(r#"{}"#),
            Some((true, -1, DecisionSource::PodAnnotation)),
        ),
    ];
    for (class, ann, expected) in cases {
        let annotations = ann.map_or(json!({}), |a| json!({"koordinator.sh/cpuQOS": a}));
        let p = pod(
            json!({"koordinator.sh/qosClass": class}),
            annotations,
            json!({}),
        );
        let got = create(&p, &config(cluster, ""))
            .resolved
            .cpu_qos
            .map(|c: ResolvedCpuQos| (c.enabled, c.group_identity, c.source));
        assert_eq!(got, *expected, "{class} {ann:?}");
    }
    // No source, no section: the annotation of existing pods stays byte-identical.
    let p = pod(
        json!({"koordinator.sh/qosClass": "LS"}),
        json!({}),
        json!({}),
    );
    let r = create(&p, &PolicyConfig::default());
    assert!(r.resolved.cpu_qos.is_none() && !r.annotation().contains("cpuQOS"));
    let err = resolve_value(
        &pod(
            json!({}),
            json!({"koordinator.sh/cpuQOS": r#"{"groupIdentity": 5}"#}),
            json!({}),
        ),
        "default",
        Operation::Create,
        &PolicyConfig::default(),
    )
    .expect_err("out of range");
    assert_eq!(
        err.to_string(),
        "koordinator.sh/cpuQOS.groupIdentity: 5 is out of range (allowed -1..2)"
    );
}

#[test]
fn resctrl_qos_table() {
    let cluster = r#"{"clusterStrategy":{"lsClass":{"resctrlQOS":{"enable":true}},"beClass":{"resctrlQOS":{"enable":true,"mbaPercent":50}},
        "lsrClass":{"resctrlQOS":{"enable":false,"catRangeEndPercent":10}}}}"#;
    for (class, expected) in [
        ("LS", Some((true, 0, 100, 100))),
        ("BE", Some((true, 0, 30, 50))),
        ("LSR", Some((false, 0, 100, 100))),
        ("SYSTEM", None),
    ] {
        let p = pod(
            json!({"koordinator.sh/qosClass": class}),
            json!({}),
            json!({}),
        );
        let got = create(&p, &config(cluster, ""))
            .resolved
            .resctrl_qos
            .map(|r| {
                (
                    r.enabled,
                    r.cat_range_start_percent,
                    r.cat_range_end_percent,
                    r.mba_percent,
                )
            });
        assert_eq!(got, expected, "{class}");
    }
    // A class that moves the start past the recommended end is a broken config.
    let err = koord_webhook::policy::ClusterQosConfig::parse(
        r#"{"clusterStrategy":{"beClass":{"resctrlQOS":{"enable":true,"catRangeStartPercent":40}}}}"#,
    )
    .expect_err("empty slice");
    assert!(
        err.to_string()
            .contains("catRangeEndPercent: 30 must be above catRangeStartPercent 40"),
        "{err}"
    );
}

#[test]
fn a_forged_incoming_annotation_does_not_leak_into_the_rewrite() {
    use koord_webhook::resolve::{PodInput, ResolveContext, resolve_pod_with_previous};
    use serde::Deserialize;
    let p = pod(json!({}), json!({}), burstable_100mi());
    let stored = mutated(&p, &create(&p, &PolicyConfig::default()));
    let previous = stored["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS]
        .as_str()
        .expect("ours")
        .to_owned();
    let mut edited = stored.clone();
    edited["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS] =
        json!(r#"{"version":1,"qosClass":"LSE","hand":"edited"}"#);
    let view = PodInput::deserialize(&edited).expect("view");
    let cfg = PolicyConfig::default();
    let ctx = ResolveContext {
        namespace: "default",
        operation: Operation::Update,
        config: &cfg,
    };
    let r = resolve_pod_with_previous(&view, &ctx, Some(&previous)).expect("update");
    assert_eq!(
        r.annotation(),
        previous,
        "the rewrite is exactly the value the hand edit replaced"
    );
}
