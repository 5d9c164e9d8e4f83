//! Invariants over random pods: min/low never above the request, high never below min, values
//! in range, the output is a valid Pod, the patch equals the applied changes, and resolving the
//! result again changes nothing.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use koord_api::{MaxOr, QosClass, ResolvedQos};
use koord_webhook::mutation::json_patch;
use koord_webhook::resolve::{Operation, PodInput};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

const MI: i64 = 1024 * 1024;

fn container() -> impl Strategy<Value = Value> {
    (
        proptest::option::of(1i64..4096),
        proptest::option::of(1i64..8192),
        proptest::option::of(1i64..8000),
        proptest::option::of(1i64..8000),
    )
        .prop_map(|(mem_req, mem_lim, cpu_req, cpu_lim)| {
            let mut requests = serde_json::Map::new();
            let mut limits = serde_json::Map::new();
            // Keep request <= limit as the apiserver's validation would.
            let mem_lim = mem_lim.map(|l| l.max(mem_req.unwrap_or(0)));
            let cpu_lim = cpu_lim.map(|l| l.max(cpu_req.unwrap_or(0)));
            if let Some(r) = mem_req {
                requests.insert("memory".into(), json!(format!("{r}Mi")));
            }
            if let Some(l) = mem_lim {
                limits.insert("memory".into(), json!(format!("{l}Mi")));
            }
            if let Some(r) = cpu_req {
                requests.insert("cpu".into(), json!(format!("{r}m")));
            }
            if let Some(l) = cpu_lim {
                limits.insert("cpu".into(), json!(format!("{l}m")));
            }
            json!({"requests": requests, "limits": limits})
        })
}

fn params() -> impl Strategy<Value = Option<String>> {
    proptest::option::of((
        prop_oneof![Just("auto"), Just("default"), Just("none"), Just("AUTO")],
        0i64..=100,
        0i64..=100,
        0i64..=100,
        0i64..=100,
        -25i64..=50,
    ))
    .prop_map(|o| {
        o.map(|(policy, min, low, thr, wr, adj)| {
            json!({"policy": policy, "minLimitPercent": min, "lowLimitPercent": low, "throttlingPercent": thr,
                   "wmarkRatio": wr, "wmarkMinAdj": adj})
            .to_string()
        })
    })
}

fn pod_strategy() -> impl Strategy<Value = Value> {
    (
        proptest::collection::vec(container(), 1..4),
        proptest::option::of(prop_oneof![Just("LSE"), Just("LSR"), Just("LS"), Just("BE"), Just("SYSTEM"), Just("junk")]),
        params(),
        any::<bool>(),
    )
        .prop_map(|(containers, class, memory_qos, with_maps)| {
            let containers: Vec<Value> =
                containers.into_iter().enumerate().map(|(i, r)| json!({"name": format!("c{i}"), "image": "x", "resources": r})).collect();
            let mut meta = json!({"name": "p", "namespace": "default"});
            if with_maps || class.is_some() || memory_qos.is_some() {
                meta["labels"] = json!({});
                meta["annotations"] = json!({});
            }
            if let Some(c) = class {
                meta["labels"]["koordinator.sh/qosClass"] = json!(c);
            }
            if let Some(m) = memory_qos {
                meta["annotations"]["koordinator.sh/memoryQOS"] = json!(m);
            }
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}})
        })
}

fn quantity_bytes(v: &Value) -> Option<i64> {
    v.as_str()
        .map(|s| koord_api::quantity::parse_value(s).expect("quantity"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn resolution_invariants(p in pod_strategy(), cluster_enabled in any::<bool>()) {
        let cluster = format!(
            r#"{{"clusterStrategy":{{"lsClass":{{"memoryQOS":{{"enable":{cluster_enabled},"minLimitPercent":20}}}},"beClass":{{"memoryQOS":{{"enable":{cluster_enabled}}}}}}}}}"#
        );
        let cfg = config(&cluster, "");
        let r = resolve_value(&p, "default", Operation::Create, &cfg).expect("random valid pods resolve");
        let out = mutated(&p, &r);

        // The output is a valid Pod and the annotation parses back.
        let typed: Pod = serde_json::from_value(out.clone()).expect("output parses as a Pod");
        let ann = typed.metadata.annotations.as_ref().and_then(|a| a.get(ANNOTATION_RESOLVED_QOS)).expect("annotation");
        let resolved = ResolvedQos::from_annotation(ann).expect("annotation parses");
        prop_assert_eq!(&resolved, &r.resolved);
        prop_assert_eq!(resolved.memory_qos.params.out_of_range(), None);

        // The JSON patch turns the input into exactly the applied result.
        let view = PodInput::deserialize(&p).expect("view");
        let patch: json_patch::Patch = serde_json::from_slice(&json_patch(&view, &r)).expect("patch parses");
        let mut patched = p.clone();
        json_patch::patch(&mut patched, &patch).expect("patch applies");
        prop_assert_eq!(&patched, &out);

        // Per-container bounds against the (effective) request and limit.
        let memory_key = if resolved.qos_class == QosClass::Be { "kubernetes.io/batch-memory" } else { "memory" };
        for (i, c) in out["spec"]["containers"].as_array().expect("containers").iter().enumerate() {
            let k = resolved.memory_qos.containers[&format!("c{i}")];
            let limit = quantity_bytes(&c["resources"]["limits"][memory_key]);
            let request = quantity_bytes(&c["resources"]["requests"][memory_key]).or(limit).unwrap_or(0);
            prop_assert!(k.min <= request && k.low <= request, "min {} low {} request {}", k.min, k.low, request);
            // The reference's fix-up: a low that is set is at least min; a low of 0 stays 0.
            prop_assert!(k.low == 0 || k.low >= k.min, "low {} min {}", k.low, k.min);
            if let MaxOr::Bytes(h) = k.high {
                prop_assert!(h >= k.min);
                prop_assert!(h <= limit.expect("high only with a limit").max(k.min));
                prop_assert!(h % 4096 == 0 || h == k.min, "high is whole pages unless raised to min");
            }
            if let MaxOr::Bytes(w) = k.wmark_high {
                prop_assert_eq!(w % 4096, 0);
                prop_assert!(w <= limit.unwrap_or(i64::MAX));
            }
            prop_assert!(request <= 8192 * MI);
        }

        // Resolving the result again (CREATE or UPDATE) changes nothing.
        for op in [Operation::Create, Operation::Update] {
            let again = resolve_value(&out, "default", op, &cfg).expect("resolves again");
            prop_assert!(again.changes.is_empty(), "{:?}: {:?}", op, again.changes);
        }
    }
}
