//! One engine, one answer: on the reference's example pods and ConfigMaps, what the
//! re-resolver writes to a stored pod is exactly what admission answers for an UPDATE of that
//! pod, and admission of the re-resolver's own write (the API server sends it through the
//! webhook) changes nothing, so the two never fight.
//!
//! Every example pod is stored two ways (admitted by the webhook under each configuration, and
//! admitted while the webhook was down) in three namespaces (plain, in `enabledNamespaces`, in
//! `disabledNamespaces`), then re-resolved under every configuration.

use crate::common::examples;
use crate::server_support::apply_response_patch;
use koord_api::keys::ANNOTATION_RESOLVED_QOS;
use koord_webhook::admission::{Decision, ReviewContext, review};
use koord_webhook::manifest;
use koord_webhook::policy::{
    ClusterQosConfig, Colocation, NamespaceQosConfig, PolicyConfig, load_policy,
};
use koord_webhook::reresolve::plan::{Verdict, plan_pod};
use serde_json::{Value, json};

fn example_pods() -> Vec<Value> {
    let mut pods = Vec::new();
    for file in [
        "be-ffmpeg.yaml",
        "ls-nginx.yaml",
        "redis-demo.yaml",
        "stress-demo.yaml",
        "two-pods.yaml",
    ] {
        let text = manifest::read_file(&examples().join(file)).expect("example");
        pods.extend(
            manifest::read_objects(&text)
                .expect("objects")
                .into_iter()
                .filter(|o| manifest::kind(o) == "Pod"),
        );
    }
    assert!(pods.len() >= 6, "{} example pods", pods.len());
    pods
}

fn inline(cluster: &str) -> PolicyConfig {
    PolicyConfig {
        cluster: ClusterQosConfig::parse(cluster).expect("cluster").config,
        namespaces: NamespaceQosConfig::default(),
        proactive_reclaim_namespaces: NamespaceQosConfig::default(),
        colocation: Colocation::NotConfigured,
    }
}

/// `config` with colocation on: BE pods are created with batch resources.
fn colocation_on(config: PolicyConfig) -> PolicyConfig {
    PolicyConfig {
        colocation: Colocation::Enabled,
        ..config
    }
}

fn configs() -> Vec<(&'static str, PolicyConfig)> {
    let file = |cluster: Option<&str>, ns: Option<&str>| {
        let mut notes = Vec::new();
        load_policy(
            cluster.map(|f| examples().join(f)).as_deref(),
            ns.map(|f| examples().join(f)).as_deref(),
            &mut notes,
        )
        .expect("policy")
    };
    vec![
        ("defaults", PolicyConfig::default()),
        ("ack-slo-config", file(Some("ack-slo-config.yaml"), None)),
        (
            "ack-slo-config + ack-slo-pod-config",
            file(Some("ack-slo-config.yaml"), Some("ack-slo-pod-config.yaml")),
        ),
        (
            "ack-slo-config + ack-slo-pod-config, colocation on",
            colocation_on(file(
                Some("ack-slo-config.yaml"),
                Some("ack-slo-pod-config.yaml"),
            )),
        ),
        (
            "memory-locality-config",
            file(Some("memory-locality-config.yaml"), None),
        ),
        (
            "all off",
            inline(
                r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": false}}, "beClass": {"memoryQOS": {"enable": false}}}}"#,
            ),
        ),
        (
            "all off, colocation on",
            colocation_on(inline(
                r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": false}}, "beClass": {"memoryQOS": {"enable": false}}}}"#,
            )),
        ),
        (
            "throttling + cpu/resctrl",
            inline(
                r#"{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true, "throttlingPercent": 80, "minLimitPercent": 50}, "cpuQOS": {"enable": true}, "resctrlQOS": {"enable": true}}, "beClass": {"memoryQOS": {"enable": true, "wmarkRatio": 80}}}}"#,
            ),
        ),
    ]
}

fn review_of(operation: &str, object: &Value, old: Option<&Value>, namespace: &str) -> Vec<u8> {
    let mut request = json!({
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace, "name": object["metadata"]["name"], "operation": operation,
        "object": object,
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
        .expect("json")
}

/// Admission's answer applied to `object`: `None` when it denies the request.
fn admit(
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    namespace: &str,
    config: &PolicyConfig,
) -> Option<Value> {
    let never = |_: &str| None;
    let ctx = ReviewContext {
        config,
        skip_namespace: &never,
    };
    let reviewed = review(&review_of(operation, object, old, namespace), &ctx);
    let body: Value = serde_json::from_slice(&reviewed.body).expect("response");
    match reviewed.decision {
        Decision::Denied { .. } => return None,
        Decision::Error { message } => panic!("admission error: {message}"),
        _ => {}
    }
    Some(apply_response_patch(&body["response"], object))
}

/// The pod as the API server stores it: a namespace, an identity, a resourceVersion.
fn stored(pod: &Value, namespace: &str) -> Value {
    let mut pod = pod.clone();
    pod["metadata"]["namespace"] = namespace.into();
    pod["metadata"]["uid"] = "uid-1".into();
    pod["metadata"]["resourceVersion"] = "7".into();
    pod
}

fn resolved(pod: &Value) -> Option<&str> {
    pod["metadata"]["annotations"][ANNOTATION_RESOLVED_QOS].as_str()
}

#[test]
fn the_reresolver_writes_what_admission_answers_and_admission_keeps_it() {
    let configs = configs();
    let mut cases = 0;
    let mut changed = 0;
    for pod in example_pods() {
        for namespace in ["apps", "allow-ns", "block-ns"] {
            let mut starts = vec![(
                "admitted while the webhook was down",
                stored(&pod, namespace),
            )];
            for (name, config) in &configs {
                let created = admit("CREATE", &stored(&pod, namespace), None, namespace, config)
                    .expect("examples are admitted");
                starts.push((name, created));
            }
            for (start, before) in &starts {
                for (name, config) in &configs {
                    let what = format!(
                        "pod {} in {namespace}, stored as {start:?}, re-resolved with {name:?}",
                        pod["metadata"]["name"]
                    );
                    cases += 1;
                    let admission = admit("UPDATE", before, Some(before), namespace, config)
                        .unwrap_or_else(|| panic!("{what}: admission denied"));
                    let (_, verdict) = plan_pod(&before.to_string(), config).expect("plans");
                    let reresolved = match verdict {
                        Verdict::Unchanged => before.clone(),
                        Verdict::Change(change) => {
                            changed += 1;
                            let patch: json_patch::Patch =
                                serde_json::from_slice(&change.patch).expect("patch");
                            let mut after = before.clone();
                            json_patch::patch(&mut after, &patch).expect("applies");
                            assert_eq!(resolved(&after), Some(change.annotation.as_str()));
                            after
                        }
                        other => panic!("{what}: {other:?}"),
                    };
                    assert_eq!(
                        reresolved, admission,
                        "{what}: the re-resolver's result differs from admission's"
                    );
                    // The write goes through admission as an UPDATE: no further change.
                    let readmitted = admit("UPDATE", &reresolved, Some(before), namespace, config)
                        .unwrap_or_else(|| panic!("{what}: admission denied the write"));
                    assert_eq!(
                        readmitted, reresolved,
                        "{what}: admission changes the write"
                    );
                    // And the next pass finds nothing to do.
                    assert_eq!(
                        plan_pod(&reresolved.to_string(), config).expect("plans").1,
                        Verdict::Unchanged,
                        "{what}: not idempotent"
                    );
                    assert!(resolved(&reresolved).is_some(), "{what}: no annotation");
                }
            }
        }
    }
    assert!(
        cases > 500 && changed > 100,
        "{cases} cases, {changed} changed"
    );
}
