//! Property "fuzz": the admission body parser and every annotation/ConfigMap parser take
//! arbitrary bytes and arbitrary JSON (shaped like an AdmissionReview / the ConfigMaps)
//! without panicking, and the handler always answers a well-formed AdmissionReview.
//! Bounded so it runs in `cargo test`; raise with `PROPTEST_CASES=100000`.

use std::collections::BTreeMap;

use crate::server_support::{apply_response_patch, response_patch};
use koord_api::DecisionSource;
use koord_api::keys::{
    ANNOTATION_LEGACY_MEMORY_QOS, ANNOTATION_MEMORY_LOCALITY, ANNOTATION_MEMORY_QOS,
    ANNOTATION_RESOLVED_QOS, LABEL_LEGACY_QOS_CLASS, LABEL_QOS_CLASS,
};
use koord_webhook::admission::{ReviewContext, review};
use koord_webhook::policy::load::from_data;
use koord_webhook::policy::{
    ClusterQosConfig, NamespaceQosConfig, PolicyConfig, parse_locality_setting,
    parse_proactive_reclaim_setting,
};
use koord_webhook::resolve::{parse_memory_qos_annotation, parse_proactive_reclaim_annotation};
use proptest::prelude::*;
use serde_json::{Value, json};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-200i64..200).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("auto"),
            Just("none"),
            Just("default"),
            Just("bestEffort"),
            Just("LS"),
            Just("BE"),
            Just("100Mi"),
            Just("500m"),
            Just("2"),
            Just("-1"),
            Just("1e3"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    ".{0,8}",
                    Just("policy".to_owned()),
                    Just("wmarkRatio".to_owned()),
                    Just("minLimitPercent".to_owned()),
                    Just("memory".to_owned()),
                    Just("cpu".to_owned()),
                    Just("enable".to_owned()),
                    Just("migrateIntervalMinutes".to_owned()),
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Annotation/label values: mostly JSON text (valid or not), sometimes plain strings.
fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        arb_json().prop_map(|v| v.to_string()),
        ".{0,24}",
        (arb_json(), 0usize..40).prop_map(|(v, cut)| {
            let s = v.to_string();
            s.chars().take(cut).collect()
        }),
    ]
}

fn arb_resources() -> impl Strategy<Value = Value> {
    let qty = prop_oneof![
        Just(json!("100Mi")),
        Just(json!("500m")),
        Just(json!("2")),
        Just(json!(3)),
        Just(json!("1.5Gi")),
        Just(json!("-1")),
        Just(json!("99999999999999999999Ei")),
        ".{0,6}".prop_map(Value::from),
        arb_json(),
    ];
    let keys = prop_oneof![
        Just("cpu"),
        Just("memory"),
        Just("kubernetes.io/batch-cpu"),
        Just("kubernetes.io/batch-memory"),
        Just("nvidia.com/gpu"),
    ];
    let list = prop::collection::btree_map(keys, qty, 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()));
    (prop::option::of(list.clone()), prop::option::of(list)).prop_map(|(r, l)| {
        let mut o = serde_json::Map::new();
        if let Some(r) = r {
            o.insert("requests".into(), r);
        }
        if let Some(l) = l {
            o.insert("limits".into(), l);
        }
        Value::Object(o)
    })
}

fn arb_review() -> impl Strategy<Value = Value> {
    let keys = prop_oneof![
        Just(ANNOTATION_MEMORY_QOS),
        Just(ANNOTATION_LEGACY_MEMORY_QOS),
        Just(ANNOTATION_MEMORY_LOCALITY),
        Just(ANNOTATION_RESOLVED_QOS),
        Just("node.koordinator.sh/extended-resource-spec"),
        Just("other/key"),
    ];
    let label_keys = prop_oneof![
        Just(LABEL_QOS_CLASS),
        Just(LABEL_LEGACY_QOS_CLASS),
        Just("app")
    ];
    let containers = || {
        prop::collection::vec(
            (
                prop_oneof![Just("app".to_owned()), ".{0,4}"],
                arb_resources(),
            )
                .prop_map(|(name, res)| json!({"name": name, "image": "x", "resources": res})),
            0..3,
        )
    };
    (
        prop::option::of(prop::collection::btree_map(keys, arb_text(), 0..4)),
        prop::option::of(prop::collection::btree_map(label_keys, arb_text(), 0..3)),
        containers(),
        containers(),
        prop::option::of(arb_resources()),
        prop_oneof![Just("CREATE"), Just("UPDATE"), Just("DELETE"), Just("")],
        prop_oneof![Just(None), Just(Some("Burstable")), Just(Some("BestEffort")), Just(Some("Guaranteed")), Just(Some("Bogus"))],
        prop_oneof![Just("shop"), Just("kube-system"), Just("")],
        arb_json(),
        0u8..4,
    )
        .prop_map(
            |(annotations, labels, containers, init, overhead, op, qos, ns, junk, variant)| {
                let mut meta = json!({"name": "p", "namespace": ns});
                if let Some(a) = annotations {
                    meta["annotations"] = json!(a);
                }
                if let Some(l) = labels {
                    meta["labels"] = json!(l);
                }
                let mut object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                    "spec": {"containers": containers, "initContainers": init}});
                if let Some(o) = overhead {
                    object["spec"]["overhead"] = o["limits"].clone();
                }
                if let Some(q) = qos {
                    object["status"] = json!({"qosClass": q});
                }
                // Sometimes put junk where the pod's structure is expected.
                match variant {
                    1 => object["spec"] = junk,
                    2 => object["metadata"] = junk,
                    _ => {}
                }
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "namespace": ns, "operation": op, "object": object,
                                   "oldObject": if variant == 3 { Value::Null } else { json!({}) }}})
            },
        )
}

fn assert_well_formed(body: &[u8], ctx: &ReviewContext<'_>) {
    let out = review(body, ctx);
    let v: Value = serde_json::from_slice(&out.body).expect("response is JSON");
    assert_eq!(v["kind"], "AdmissionReview");
    assert!(v["response"]["allowed"].is_boolean());
    assert!(v["response"]["uid"].is_string());
    // A patch, when there is one, is base64 of an RFC 6902 patch.
    let _ = response_patch(&v["response"]);
}

fn with_ctx(f: impl FnOnce(&ReviewContext<'_>)) {
    let config = PolicyConfig::default();
    let skip = |ns: &str| (ns == "kube-system").then_some("exempt");
    f(&ReviewContext {
        config: &config,
        skip_namespace: &skip,
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_well_formed_review(body in prop::collection::vec(any::<u8>(), 0..512)) {
        with_ctx(|ctx| assert_well_formed(&body, ctx));
    }

    #[test]
    fn arbitrary_json_gets_a_well_formed_review(v in arb_json()) {
        with_ctx(|ctx| assert_well_formed(v.to_string().as_bytes(), ctx));
    }

    #[test]
    fn review_shaped_json_gets_a_well_formed_review_and_a_patch_that_applies(v in arb_review()) {
        with_ctx(|ctx| {
            let body = serde_json::to_vec(&v).expect("json");
            assert_well_formed(&body, ctx);
            let out = review(&body, ctx);
            let resp: Value = serde_json::from_slice(&out.body).expect("json");
            // kube-apiserver decodes the pod into its Go type before calling webhooks, so
            // `metadata` and `spec` always arrive as objects; only then must the patch apply.
            let structural = v["request"]["object"]["metadata"].is_object()
                && v["request"]["object"]["spec"].is_object();
            if structural {
                apply_response_patch(&resp["response"], &v["request"]["object"]);
            }
        });
    }

    #[test]
    fn annotation_parsers_take_anything(text in arb_text(), v in arb_json()) {
        let _ = parse_memory_qos_annotation(ANNOTATION_MEMORY_QOS, &text, DecisionSource::PodAnnotation);
        let _ = parse_proactive_reclaim_annotation(&text);
        let _ = parse_locality_setting(&v, ANNOTATION_MEMORY_LOCALITY);
    }

    #[test]
    fn configmap_parsers_take_anything(text in arb_text(), v in arb_json(), class in prop_oneof![Just("lsClass"), Just("beClass"), Just("lsrClass"), Just("systemClass")]) {
        let _ = ClusterQosConfig::parse(&text);
        let _ = NamespaceQosConfig::parse(&text);
        let shaped = json!({"clusterStrategy": {class: v.clone()}, "nodeStrategies": [v.clone()]});
        let _ = ClusterQosConfig::parse(&shaped.to_string());
        let shaped = json!({"enabledNamespaces": v.clone(), "disabledNamespaces": [v]});
        let _ = NamespaceQosConfig::parse(&shaped.to_string());
        let _ = NamespaceQosConfig::parse_key(&shaped.to_string(), "proactive-reclaim");
        let _ = parse_proactive_reclaim_setting(&v, "proactiveReclaim");
        let data: BTreeMap<String, String> = [("resource-qos-config".to_owned(), text.clone()), ("memory-qos".to_owned(), text.clone()), ("proactive-reclaim".to_owned(), text)].into();
        let _ = from_data::<koord_webhook::policy::ClusterConfigMap>(&data);
        let _ = from_data::<koord_webhook::policy::NamespaceConfigMap>(&data);
    }
}
