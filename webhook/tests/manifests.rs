//! `kubectl kustomize manifests/` renders offline and every object parses as its Kubernetes
//! type without losing a field (a typo'd key would vanish in the round trip).
//!
//! They need `kubectl` (`kubectl.1.33` or `kubectl`) on PATH, so they are ignored by default
//! and run with `cargo test -p koord-webhook --test manifests -- --ignored`; run that way
//! without kubectl they fail, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn kubectl() -> Option<PathBuf> {
    ["kubectl.1.33", "kubectl"].iter().find_map(|name| {
        std::env::var_os("PATH")?
            .to_str()?
            .split(':')
            .map(|dir| Path::new(dir).join(name))
            .find(|p| p.is_file())
    })
}

fn render(dir: &str) -> Vec<Value> {
    let kubectl = kubectl()
        .unwrap_or_else(|| panic!("no kubectl (kubectl.1.33 or kubectl) on PATH to render {dir}"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(&path)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Parses as `T` and checks nothing was dropped or changed on the way back.
fn round_trip<T: DeserializeOwned + serde::Serialize>(obj: &Value) -> T {
    let typed: T = serde_json::from_value(obj.clone())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", obj["kind"]));
    let back = serde_json::to_value(&typed).expect("serialize");
    assert_eq!(
        &back, obj,
        "{} {} lost or changed fields",
        obj["kind"], obj["metadata"]["name"]
    );
    typed
}

fn find<'v>(objects: &'v [Value], kind: &str, name: &str) -> &'v Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn every_rendered_object_parses_as_its_kubernetes_type() {
    let objects = render("manifests");
    for obj in &objects {
        match obj["kind"].as_str().unwrap_or("") {
            "Namespace" => drop(round_trip::<Namespace>(obj)),
            "ServiceAccount" => drop(round_trip::<ServiceAccount>(obj)),
            "Role" => drop(round_trip::<Role>(obj)),
            "RoleBinding" => drop(round_trip::<RoleBinding>(obj)),
            "ClusterRole" => drop(round_trip::<ClusterRole>(obj)),
            "ClusterRoleBinding" => drop(round_trip::<ClusterRoleBinding>(obj)),
            "Deployment" => drop(round_trip::<Deployment>(obj)),
            "DaemonSet" => drop(round_trip::<DaemonSet>(obj)),
            "Service" => drop(round_trip::<Service>(obj)),
            "PodDisruptionBudget" => drop(round_trip::<PodDisruptionBudget>(obj)),
            "ConfigMap" => drop(round_trip::<ConfigMap>(obj)),
            "MutatingWebhookConfiguration" => drop(round_trip::<MutatingWebhookConfiguration>(obj)),
            other => panic!("unexpected kind {other:?} in manifests/"),
        }
    }
    assert!(objects.len() >= 14, "{} objects", objects.len());
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn webhook_deployment_and_configuration_are_production_shaped() {
    let objects = render("manifests");
    let d: Deployment = round_trip(find(&objects, "Deployment", "koord-webhook"));
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("pod spec");
    assert!(pod.affinity.and_then(|a| a.pod_anti_affinity).is_some());
    let psc = pod.security_context.expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    let c = &pod.containers[0];
    let sc = c.security_context.as_ref().expect("securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());
    let res = c.resources.as_ref().expect("resources");
    assert!(res.requests.is_some() && res.limits.is_some());

    let pdb: PodDisruptionBudget =
        round_trip(find(&objects, "PodDisruptionBudget", "koord-webhook"));
    assert!(pdb.spec.and_then(|s| s.min_available).is_some());

    let m: MutatingWebhookConfiguration = round_trip(find(
        &objects,
        "MutatingWebhookConfiguration",
        "koord-webhook",
    ));
    let w = &m.webhooks.expect("webhooks")[0];
    assert_eq!(w.admission_review_versions, vec!["v1".to_owned()]);
    assert_eq!(w.side_effects, "None");
    assert_eq!(w.failure_policy.as_deref(), Some("Ignore"));
    assert_eq!(w.timeout_seconds, Some(5));
    assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
    let svc = w.client_config.service.as_ref().expect("service");
    assert_eq!(svc.path.as_deref(), Some("/mutate-pod"));
    let rule = &w.rules.as_ref().expect("rules")[0];
    assert_eq!(
        rule.operations,
        Some(vec!["CREATE".to_owned(), "UPDATE".to_owned()])
    );
    assert_eq!(rule.resources, Some(vec!["pods".to_owned()]));
    let selector = serde_json::to_string(&w.namespace_selector).expect("json");
    for needle in [
        "koordinator.sh/qos-webhook",
        "enabled",
        "kube-system",
        "koordinator-system",
        "NotIn",
    ] {
        assert!(
            selector.contains(needle),
            "namespaceSelector lacks {needle}: {selector}"
        );
    }

    // Least privilege: the only namespaced read is the two ConfigMaps in kube-system.
    let role: Role = round_trip(find(&objects, "Role", "koord-webhook-config-reader"));
    assert_eq!(role.metadata.namespace.as_deref(), Some("kube-system"));
    let rules = role.rules.expect("rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].verbs, vec!["get", "list", "watch"]);
    assert!(
        rules[0]
            .resource_names
            .as_ref()
            .is_some_and(|n| n.len() == 2)
    );

    // The example ConfigMaps parse as policy.
    for (name, key) in [
        ("ack-slo-config", "resource-qos-config"),
        ("ack-slo-pod-config", "memory-qos"),
    ] {
        let cm: ConfigMap = round_trip(find(&objects, "ConfigMap", name));
        let data = cm.data.expect("data");
        let text = data.get(key).expect("key");
        match key {
            "memory-qos" => {
                drop(koord_webhook::policy::NamespaceQosConfig::parse(text).expect("parses"))
            }
            _ => drop(koord_webhook::policy::ClusterQosConfig::parse(text).expect("parses")),
        }
    }
}

/// One RBAC rule as (apiGroups, resources, resourceNames, verbs).
type Rule = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

/// The rules of a Role or ClusterRole.
fn rules_of(rules: Option<Vec<PolicyRule>>) -> Vec<Rule> {
    rules
        .expect("rules")
        .into_iter()
        .map(|r| {
            (
                r.api_groups.unwrap_or_default(),
                r.resources.unwrap_or_default(),
                r.resource_names.unwrap_or_default(),
                r.verbs,
            )
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn bound_to_the_webhook(subjects: Option<Vec<Subject>>) {
    let subjects = subjects.expect("subjects");
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0].kind, "ServiceAccount");
    assert_eq!(subjects[0].name, "koord-webhook");
    assert_eq!(subjects[0].namespace.as_deref(), Some("koordinator-system"));
}

/// The `serve` flags' defaults, as the binary parses them.
fn serve_defaults() -> koord_webhook::server::ServeArgs {
    use clap::Parser as _;
    let cli = koord_webhook::cli::Cli::try_parse_from(["koord-webhook", "serve"]).expect("parses");
    match cli.command {
        koord_webhook::cli::Command::Serve(args) => *args,
        _ => unreachable!("serve"),
    }
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn the_reresolver_gets_exactly_pods_events_and_its_lease() {
    let objects = render("manifests");
    // Pods cluster-wide (the opted-in namespaces change at run time): read and patch only;
    // never create, update, delete or watch. Events: create only.
    let cr: ClusterRole = round_trip(find(&objects, "ClusterRole", "koord-webhook-reresolver"));
    assert_eq!(
        rules_of(cr.rules),
        vec![
            (
                strings(&[""]),
                strings(&["pods"]),
                vec![],
                strings(&["get", "list", "patch"])
            ),
            (
                strings(&["events.k8s.io"]),
                strings(&["events"]),
                vec![],
                strings(&["create"])
            ),
        ]
    );
    let crb: ClusterRoleBinding = round_trip(find(
        &objects,
        "ClusterRoleBinding",
        "koord-webhook-reresolver",
    ));
    assert_eq!(crb.role_ref.name, "koord-webhook-reresolver");
    bound_to_the_webhook(crb.subjects);

    // Its Lease, by the name the binary uses, in its own namespace; create cannot be limited
    // by name, so it is a rule of its own.
    let lease = serve_defaults().reresolve.leader_election_lease;
    let role: Role = round_trip(find(&objects, "Role", "koord-webhook-leader-election"));
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some("koordinator-system")
    );
    assert_eq!(
        rules_of(role.rules),
        vec![
            (
                strings(&["coordination.k8s.io"]),
                strings(&["leases"]),
                vec![lease],
                strings(&["get", "update"])
            ),
            (
                strings(&["coordination.k8s.io"]),
                strings(&["leases"]),
                vec![],
                strings(&["create"])
            ),
        ]
    );
    let rb: RoleBinding = round_trip(find(
        &objects,
        "RoleBinding",
        "koord-webhook-leader-election",
    ));
    assert_eq!(rb.metadata.namespace.as_deref(), Some("koordinator-system"));
    assert_eq!(rb.role_ref.name, "koord-webhook-leader-election");
    bound_to_the_webhook(rb.subjects);

    // The webhook's other roles stay read-only.
    for (kind, name) in [
        ("Role", "koord-webhook-config-reader"),
        ("ClusterRole", "koord-webhook-namespace-reader"),
    ] {
        let rules = find(&objects, kind, name)["rules"].clone();
        let rules: Vec<PolicyRule> = serde_json::from_value(rules).expect("rules");
        for r in rules {
            assert!(
                r.verbs
                    .iter()
                    .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
                "{kind} {name}: {:?}",
                r.verbs
            );
        }
    }

    // Each replica's identity in the Lease is its pod name.
    let d: Deployment = round_trip(find(&objects, "Deployment", "koord-webhook"));
    let pod = d.spec.expect("spec").template.spec.expect("pod spec");
    let env = pod.containers[0].env.clone().unwrap_or_default();
    let pod_name = env
        .iter()
        .find(|e| e.name == "KOORD_POD_NAME")
        .expect("KOORD_POD_NAME");
    let field = pod_name
        .value_from
        .as_ref()
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.name"));
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn monitoring_renders_a_service_monitor_for_the_metrics_port() {
    let objects = render("manifests/monitoring");
    let sm = find(&objects, "ServiceMonitor", "koord-webhook");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
}
