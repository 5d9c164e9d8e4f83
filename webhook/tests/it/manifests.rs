//! `kubectl kustomize manifests/` renders offline and every object parses as its Kubernetes
//! type without losing a field (a typo'd key would vanish in the round trip); the base installs
//! no ConfigMap; the examples overlay, the CPI component, the monitoring kustomization; and the
//! Helm chart: `helm lint` clean, and with default values `helm template` renders the same
//! objects as `kubectl kustomize manifests/` (compared as parsed objects).
//!
//! They need `kubectl` (`kubectl.1.33` or `kubectl`) on PATH, and the Helm tests `helm` (`$HELM`,
//! else the binary `tests/e2e/helm.sh build` caches), so they are ignored by default and run
//! with `cargo test -p koord-webhook --test it -- manifests:: --ignored` (`make unit` does, after
//! building Helm); run that way without them they fail, saying so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
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
    render_path(&Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir))
}

fn render_path(path: &Path) -> Vec<Value> {
    let dir = path.display();
    let kubectl = kubectl()
        .unwrap_or_else(|| panic!("no kubectl (kubectl.1.33 or kubectl) on PATH to render {dir}"));
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(path)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_stream(&String::from_utf8(out.stdout).expect("utf8"))
}

fn parse_stream(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("yaml")
        .into_iter()
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
fn the_base_installs_no_configmap_and_writes_nothing_in_kube_system_but_rbac() {
    let objects = render("manifests");
    for o in &objects {
        assert_ne!(
            o["kind"], "ConfigMap",
            "the base must not ship a ConfigMap: {}",
            o["metadata"]["name"]
        );
        if o["metadata"]["namespace"] == "kube-system" {
            // Reading the cluster ConfigMaps needs a Role there; nothing else may land there,
            // so applying the base cannot change a cluster's own ack-slo-config.
            assert!(
                o["kind"] == "Role" || o["kind"] == "RoleBinding",
                "{} {} in kube-system",
                o["kind"],
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn the_examples_overlay_is_the_two_reference_configmaps_and_they_parse() {
    let objects = render("manifests/examples");
    let names: Vec<_> = objects
        .iter()
        .map(|o| {
            (
                o["kind"].clone(),
                o["metadata"]["namespace"].clone(),
                o["metadata"]["name"].clone(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (
                "ConfigMap".into(),
                "kube-system".into(),
                "ack-slo-config".into()
            ),
            (
                "ConfigMap".into(),
                "kube-system".into(),
                "ack-slo-pod-config".into()
            ),
        ]
    );
    // Byte for byte the reference's examples, and they parse as policy.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples");
    for (name, key) in [
        ("ack-slo-config", "resource-qos-config"),
        ("ack-slo-pod-config", "memory-qos"),
    ] {
        let cm: ConfigMap = round_trip(find(&objects, "ConfigMap", name));
        let data = cm.data.expect("data");
        let text = data.get(key).expect("key");
        let file = std::fs::read_to_string(examples.join(format!("{name}.yaml"))).expect("read");
        let from_file: ConfigMap = serde_saphyr::from_str(&file).expect("yaml");
        assert_eq!(from_file.data.expect("data").get(key), Some(text));
        match key {
            "memory-qos" => {
                drop(koord_webhook::policy::NamespaceQosConfig::parse(text).expect("parses"))
            }
            _ => drop(koord_webhook::policy::ClusterQosConfig::parse(text).expect("parses")),
        }
    }
}

/// The capabilities and args of the applier DaemonSet's container.
fn applier_caps_and_args(objects: &[Value]) -> (Vec<String>, Vec<String>) {
    let ds: DaemonSet = round_trip(find(objects, "DaemonSet", "koord-applier"));
    let c = &ds
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod")
        .containers[0];
    let caps = c
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.clone())
        .unwrap_or_default();
    (caps, c.args.clone().unwrap_or_default())
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn cpi_capability_only_with_the_cpi_component() {
    let base = render("manifests");
    let (caps, args) = applier_caps_and_args(&base);
    assert_eq!(
        caps,
        ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE"],
        "base: no PERFMON"
    );
    assert_eq!(args, ["run"], "base: collectors off");
    let with = render_with_component("cpi");
    let (caps, args) = applier_caps_and_args(&with);
    assert_eq!(caps, ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE", "PERFMON"]);
    assert_eq!(args, ["run", "--feature-gates=CPICollector=true"]);
    // Nothing else changes.
    assert_eq!(base.len(), with.len());
    for o in &base {
        if o["kind"] != "DaemonSet" {
            assert!(
                with.contains(o),
                "{} {} changed",
                o["kind"],
                o["metadata"]["name"]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Helm chart
// ---------------------------------------------------------------------------------------------

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("HELM") {
        return PathBuf::from(h);
    }
    let out = Command::new(repo().join("tests/e2e/helm.sh"))
        .arg("path")
        .output()
        .expect("run tests/e2e/helm.sh path");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        path.is_file(),
        "no helm: set HELM, or build it with tests/e2e/helm.sh build (expected {})",
        path.display()
    );
    path
}

fn helm_template(set: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(helm());
    cmd.arg("template")
        .arg("koord-qos")
        .arg(repo().join("charts/koord-qos"));
    for s in set {
        cmd.arg("--set").arg(s);
    }
    let out = cmd.output().expect("run helm template");
    assert!(
        out.status.success(),
        "helm template {set:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_stream(&String::from_utf8(out.stdout).expect("utf8"))
}

fn by_identity(objects: &[Value]) -> BTreeMap<String, &Value> {
    objects
        .iter()
        .map(|o| {
            (
                format!(
                    "{} {} {}/{}",
                    o["apiVersion"].as_str().unwrap_or(""),
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                ),
                o,
            )
        })
        .collect()
}

#[test]
#[ignore = "needs helm (tests/e2e/helm.sh build)"]
fn helm_lint_is_clean() {
    for set in [
        &[][..],
        &[
            "featureGates=CPICollector=true,PSICollector=true",
            "installExampleConfigMaps=true",
            "monitoring.serviceMonitors=true",
            "monitoring.prometheusRules=true",
            "monitoring.dashboards=true",
        ][..],
    ] {
        let mut cmd = Command::new(helm());
        cmd.arg("lint")
            .arg("--strict")
            .arg(repo().join("charts/koord-qos"));
        for s in set {
            cmd.arg("--set").arg(s);
        }
        let out = cmd.output().expect("run helm lint");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "helm lint {set:?}:\n{text}");
        assert!(text.contains("0 chart(s) failed"), "{text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{text}"
        );
    }
}

#[test]
#[ignore = "needs kubectl and helm (tests/e2e/helm.sh build)"]
fn helm_template_with_default_values_renders_the_kustomize_objects() {
    let kustomize = render("manifests");
    let helm = helm_template(&[]);
    let (k, h) = (by_identity(&kustomize), by_identity(&helm));
    assert_eq!(
        k.keys().collect::<Vec<_>>(),
        h.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    for (id, want) in &k {
        assert_eq!(
            h[id], *want,
            "{id} differs:\nhelm:      {}\nkustomize: {}",
            h[id], want
        );
    }
}

#[test]
#[ignore = "needs kubectl and helm (tests/e2e/helm.sh build)"]
fn helm_values_reach_the_objects() {
    // The reference's own line, `--set featureGates="CPICollector=true,PSICollector=true"`,
    // is this argument once the shell has removed the quotes; helm's --set splits it at the
    // comma (featureGates=CPICollector=true, PSICollector=true), and the chart joins it back.
    let objects = helm_template(&["featureGates=CPICollector=true,PSICollector=true"]);
    let (caps, args) = applier_caps_and_args(&objects);
    assert_eq!(
        args,
        ["run", "--feature-gates=CPICollector=true,PSICollector=true"]
    );
    assert_eq!(caps, ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE", "PERFMON"]);
    // Escaped the helm way, the same.
    let (caps, args) = applier_caps_and_args(&helm_template(&[
        "featureGates=CPICollector=true\\,PSICollector=true",
    ]));
    assert_eq!(
        args,
        ["run", "--feature-gates=CPICollector=true,PSICollector=true"]
    );
    assert!(caps.contains(&"PERFMON".to_owned()));
    // PSI alone, or CPI turned off again: no capability.
    let (caps, args) = applier_caps_and_args(&helm_template(&["featureGates=PSICollector=true"]));
    assert_eq!(args, ["run", "--feature-gates=PSICollector=true"]);
    assert_eq!(caps, ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE"]);
    let (caps, _) = applier_caps_and_args(&helm_template(&[
        "featureGates=CPICollector=true,CPICollector=false",
    ]));
    assert_eq!(caps, ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE"]);
    // Older kernels: SYS_ADMIN instead; intervals.
    let (caps, args) = applier_caps_and_args(&helm_template(&[
        "featureGates=CPICollector=true",
        "applierCpiCapability=SYS_ADMIN",
        "collectors.cpiCollectorIntervalSeconds=30",
        "collectors.psiCollectorIntervalSeconds=5",
    ]));
    assert_eq!(
        caps,
        ["DAC_OVERRIDE", "SYS_NICE", "SYS_PTRACE", "SYS_ADMIN"]
    );
    assert_eq!(
        args,
        [
            "run",
            "--feature-gates=CPICollector=true",
            "--cpi-collector-interval-seconds=30",
            "--psi-collector-interval-seconds=5"
        ]
    );
    // Webhook values.
    let objects = helm_template(&[
        "webhook.replicas=3",
        "webhook.failurePolicy=Fail",
        "webhook.image.repository=registry.example/koord-webhook",
        "webhook.image.tag=9.9.9",
        "applier.image.tag=1.2.3",
        "webhook.resources.limits.memory=256Mi",
        "webhook.namespaceSelector.matchLabels.team=a",
    ]);
    let d: Deployment = round_trip(find(&objects, "Deployment", "koord-webhook"));
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(3));
    let c = &spec.template.spec.expect("pod").containers[0];
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example/koord-webhook:9.9.9")
    );
    let limits = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .expect("limits");
    assert_eq!(limits["memory"].0, "256Mi");
    let ds: DaemonSet = round_trip(find(&objects, "DaemonSet", "koord-applier"));
    assert_eq!(
        ds.spec
            .expect("spec")
            .template
            .spec
            .expect("pod")
            .containers[0]
            .image
            .as_deref(),
        Some("ghcr.io/koord-qos/koord-applier:1.2.3")
    );
    let m: MutatingWebhookConfiguration = round_trip(find(
        &objects,
        "MutatingWebhookConfiguration",
        "koord-webhook",
    ));
    let w = &m.webhooks.expect("webhooks")[0];
    assert_eq!(w.failure_policy.as_deref(), Some("Fail"));
    let sel = w.namespace_selector.as_ref().expect("selector");
    assert_eq!(
        sel.match_labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("a")
    );
    // Monitoring: the monitoring kustomization's Service, ServiceMonitors, PrometheusRule and
    // dashboard ConfigMaps, with the three values; nothing of it without them.
    let with_monitoring = helm_template(&[
        "monitoring.serviceMonitors=true",
        "monitoring.prometheusRules=true",
        "monitoring.dashboards=true",
    ]);
    let monitoring = render("manifests/monitoring");
    for m in &monitoring {
        assert!(
            with_monitoring.contains(m),
            "{} {} differs from manifests/monitoring",
            m["kind"],
            m["metadata"]["name"]
        );
    }
    let kinds: Vec<&str> = monitoring
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(
        (
            kinds.iter().filter(|k| **k == "ServiceMonitor").count(),
            kinds.iter().filter(|k| **k == "PrometheusRule").count(),
            kinds.iter().filter(|k| **k == "ConfigMap").count(),
            monitoring.len()
        ),
        (2, 1, 4, 8),
        "applier Service, two ServiceMonitors, the rules, four dashboards: {kinds:?}"
    );
    let labelled = helm_template(&[
        "monitoring.prometheusRules=true",
        "monitoring.prometheusRuleLabels.release=kube-prometheus-stack",
    ]);
    let rule = find(&labelled, "PrometheusRule", "koord-qos");
    assert_eq!(
        rule["metadata"]["labels"]["release"], "kube-prometheus-stack",
        "prometheusRuleLabels reach the PrometheusRule"
    );
    // Example ConfigMaps: none by default (checked by the parity test), the two with the value,
    // equal to the examples overlay.
    let with_cms = helm_template(&["installExampleConfigMaps=true"]);
    let cms: Vec<&Value> = with_cms
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .collect();
    let examples = render("manifests/examples");
    assert_eq!(cms.len(), 2);
    for e in &examples {
        assert!(
            cms.contains(&e),
            "{} differs from manifests/examples",
            e["metadata"]["name"]
        );
    }
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn webhook_deployment_and_configuration_are_production_shaped() {
    let objects = render("manifests");
    let d: Deployment = round_trip(find(&objects, "Deployment", "koord-webhook"));
    let spec = d.spec.expect("spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.clone().expect("pod spec");
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

    // Replacing a replica never leaves fewer ready ones (a new pod is ready before an old one
    // goes), and a stopping replica has the time to drain: its shutdown delay, while its
    // endpoint removal spreads, and then the grace of its in-flight admissions.
    let rolling = spec
        .strategy
        .and_then(|s| s.rolling_update)
        .expect("rolling update");
    assert_eq!(
        rolling.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    let serve = serve_defaults();
    let needed = serve.shutdown_delay + serve.shutdown_grace;
    let grace = pod
        .termination_grace_period_seconds
        .expect("termination grace");
    assert!(
        grace as u64 > needed.as_secs(),
        "terminationGracePeriodSeconds {grace} does not cover --shutdown-delay + --shutdown-grace ({needed:?})"
    );
    assert!(
        serve.shutdown_delay >= std::time::Duration::from_secs(5),
        "a shutdown delay of {:?} is shorter than endpoint removal takes to spread",
        serve.shutdown_delay
    );

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
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn the_applier_is_the_last_pod_its_node_gives_up() {
    // The agent that protects the node's memory must not be the first thing memory pressure
    // takes: the kubelet evicts pods above their memory request first and by priority, and
    // preemption picks lower priorities; the OOM killer scores a Guaranteed-like memory
    // request = limit container low.
    let objects = render("manifests");
    let ds: DaemonSet = round_trip(find(&objects, "DaemonSet", "koord-applier"));
    let pod = ds.spec.expect("spec").template.spec.expect("pod spec");
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    let res = pod.containers[0].resources.clone().expect("resources");
    let (requests, limits) = (res.requests.expect("requests"), res.limits.expect("limits"));
    assert_eq!(
        requests["memory"], limits["memory"],
        "memory request = limit"
    );
    assert!(
        pod.tolerations
            .is_some_and(|t| t.iter().any(|t| t.operator.as_deref() == Some("Exists")))
    );
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
    // Pods cluster-wide (the opted-in namespaces change at run time): read, watch (the Lease
    // holder's resize watch) and patch only; never create, update or delete. Events: create only.
    let cr: ClusterRole = round_trip(find(&objects, "ClusterRole", "koord-webhook-reresolver"));
    assert_eq!(
        rules_of(cr.rules),
        vec![
            (
                strings(&[""]),
                strings(&["pods"]),
                vec![],
                strings(&["get", "list", "watch", "patch"])
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

/// The PrometheusRule holds the groups of `manifests/monitoring/koord-qos.rules.yaml` (the file
/// non-operator Prometheus loads), and every dashboard ConfigMap is valid JSON with panels.
#[test]
#[ignore = "needs kubectl on PATH"]
fn monitoring_ships_the_rule_file_and_the_dashboards() {
    let objects = render("manifests/monitoring");
    let rule = find(&objects, "PrometheusRule", "koord-qos");
    let file: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo().join("manifests/monitoring/koord-qos.rules.yaml"))
            .expect("rule file"),
    )
    .expect("rule yaml");
    assert_eq!(rule["spec"], file, "PrometheusRule spec vs the rule file");
    assert_eq!(rule["metadata"]["namespace"], "koordinator-system");
    let mut uids = Vec::new();
    for cm in objects.iter().filter(|o| o["kind"] == "ConfigMap") {
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        let data = cm["data"].as_object().expect("data");
        assert_eq!(data.len(), 1, "one dashboard per ConfigMap");
        let (name, text) = data.iter().next().expect("one");
        let board: Value = serde_json::from_str(text.as_str().expect("text"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            board["panels"].as_array().is_some_and(|p| p.len() > 3),
            "{name} has panels"
        );
        uids.push(board["uid"].as_str().expect("uid").to_owned());
    }
    uids.sort();
    assert_eq!(
        uids,
        [
            "koord-admission",
            "koord-colocation",
            "koord-memory-qos",
            "koord-perf-collector"
        ]
    );
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn monitoring_renders_a_service_monitor_for_the_metrics_port() {
    let objects = render("manifests/monitoring");
    let sm = find(&objects, "ServiceMonitor", "koord-webhook");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
}

/// The reference's koordlet Service + ServiceMonitor select on `koord-app: koordlet`, port
/// `koordlet-service` 9316, `jobLabel: koord-app` (so job="koordlet"), every 30 s over http.
#[test]
#[ignore = "needs kubectl on PATH"]
fn applier_monitoring_matches_the_references_job_and_port() {
    let objects = render("manifests/monitoring");
    let svc: Service = round_trip(find(&objects, "Service", "koord-applier-metrics"));
    let labels = svc.metadata.labels.clone().expect("labels");
    assert_eq!(
        labels.get("koord-app").map(String::as_str),
        Some("koordlet")
    );
    let spec = svc.spec.expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(
        (port.name.as_deref(), port.port),
        (Some("koordlet-service"), 9316)
    );
    let sm = find(&objects, "ServiceMonitor", "koord-applier");
    assert_eq!(sm["spec"]["jobLabel"], "koord-app");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "koordlet-service");
    assert_eq!(ep["interval"], "30s");
    assert_eq!(ep["scheme"], "http");
    // instance is the node's name (the dashboards' node variable); koordlet_* keep `node`.
    assert_eq!(
        ep["relabelings"][0]["sourceLabels"][0],
        "__meta_kubernetes_pod_node_name"
    );
    assert_eq!(ep["relabelings"][0]["targetLabel"], "instance");
    // The ServiceMonitor selects this Service, and the job label is its koord-app value.
    let selector = sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (k, v) in selector {
        assert_eq!(
            labels.get(k).map(String::as_str),
            v.as_str(),
            "selector {k}"
        );
    }
    assert_eq!(
        labels
            .get(sm["spec"]["jobLabel"].as_str().expect("jobLabel"))
            .map(String::as_str),
        Some("koordlet")
    );
    // The Service reaches the DaemonSet's pods on their 9316 port, and those pods carry the
    // reference's pod label too.
    let base = render("manifests");
    let ds: DaemonSet = round_trip(find(&base, "DaemonSet", "koord-applier"));
    let tpl = ds.spec.expect("spec").template;
    let pod_labels = tpl.metadata.expect("meta").labels.expect("labels");
    for (k, v) in spec.selector.expect("selector") {
        assert_eq!(pod_labels.get(&k), Some(&v), "pod label {k}");
    }
    assert_eq!(
        pod_labels.get("koord-app").map(String::as_str),
        Some("koordlet")
    );
    let c = &tpl.spec.expect("pod").containers[0];
    assert!(
        c.ports
            .as_ref()
            .expect("ports")
            .iter()
            .any(|p| p.name.as_deref() == Some("metrics") && p.container_port == 9316)
    );
}

// ---------------------------------------------------------------------------------------------
// Serving certificates: self-managed by default, cert-manager as a component / Helm value
// ---------------------------------------------------------------------------------------------

/// Renders `manifests/` plus one component through an overlay inside the repository, in its
/// ignored target/ (kustomize refuses an overlay inside the directory it builds on, and one
/// outside the repository could not name ../manifests).
fn render_with_component(component: &str) -> Vec<Value> {
    let root = repo().canonicalize().expect("repo");
    // It may not exist when CARGO_TARGET_DIR is elsewhere.
    std::fs::create_dir_all(root.join("target")).expect("target dir");
    let overlay = tempfile::Builder::new()
        .prefix("component-overlay")
        .tempdir_in(root.join("target"))
        .expect("overlay dir");
    let depth = overlay
        .path()
        .strip_prefix(&root)
        .map(|p| p.components().count())
        .expect("inside the repository");
    let up = "../".repeat(depth);
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!("resources: [{up}manifests]\ncomponents: [{up}manifests/components/{component}]\n"),
    )
    .expect("write overlay");
    render_path(overlay.path())
}

fn webhook_pod(objects: &[Value]) -> k8s_openapi::api::core::v1::PodSpec {
    let d: Deployment = round_trip(find(objects, "Deployment", "koord-webhook"));
    d.spec.expect("spec").template.spec.expect("pod")
}

fn has(objects: &[Value], kind: &str, name: &str) -> bool {
    objects
        .iter()
        .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn self_managed_certificates_get_the_one_secret_and_the_one_configuration() {
    let objects = render("manifests");
    let defaults = serve_defaults();
    let pod = webhook_pod(&objects);
    let args = pod.containers[0].args.clone().unwrap_or_default();
    let secret = args
        .iter()
        .find_map(|a| a.strip_prefix("--tls-secret="))
        .expect("--tls-secret")
        .to_owned();
    assert!(
        !args.iter().any(|a| a.starts_with("--tls-cert")),
        "{args:?}"
    );
    assert!(pod.volumes.is_none(), "no Secret volume: the API is read");
    let configuration = defaults.self_certs.webhook_configuration;
    let m: MutatingWebhookConfiguration = round_trip(find(
        &objects,
        "MutatingWebhookConfiguration",
        &configuration,
    ));
    for w in m.webhooks.expect("webhooks") {
        assert!(
            w.client_config.ca_bundle.is_none(),
            "a caBundle in the manifest would be reset by every apply"
        );
    }
    let role: Role = round_trip(find(&objects, "Role", "koord-webhook-certs"));
    assert_eq!(
        role.metadata.namespace.as_deref(),
        Some("koordinator-system")
    );
    assert_eq!(
        rules_of(role.rules),
        vec![
            (
                strings(&[""]),
                strings(&["secrets"]),
                vec![secret],
                strings(&["get", "list", "watch", "update"])
            ),
            (
                strings(&[""]),
                strings(&["secrets"]),
                vec![],
                strings(&["create"])
            ),
        ]
    );
    let cr: ClusterRole = round_trip(find(&objects, "ClusterRole", "koord-webhook-cabundle"));
    assert_eq!(
        rules_of(cr.rules),
        vec![(
            strings(&["admissionregistration.k8s.io"]),
            strings(&["mutatingwebhookconfigurations"]),
            vec![configuration],
            strings(&["get", "list", "watch", "update"])
        )]
    );
    let rb: RoleBinding = round_trip(find(&objects, "RoleBinding", "koord-webhook-certs"));
    bound_to_the_webhook(rb.subjects);
    let crb: ClusterRoleBinding = round_trip(find(
        &objects,
        "ClusterRoleBinding",
        "koord-webhook-cabundle",
    ));
    bound_to_the_webhook(crb.subjects);
}

#[test]
#[ignore = "needs kubectl on PATH"]
fn the_cert_manager_component_hands_the_certificate_to_cert_manager() {
    let objects = render_with_component("cert-manager");
    let pod = webhook_pod(&objects);
    let args = pod.containers[0].args.clone().unwrap_or_default();
    assert!(
        args.contains(&"--tls-cert=/etc/koord-webhook/tls/tls.crt".to_owned())
            && args.contains(&"--tls-key=/etc/koord-webhook/tls/tls.key".to_owned())
            && !args.iter().any(|a| a.starts_with("--tls-secret")),
        "{args:?}"
    );
    let volumes = pod.volumes.expect("volumes");
    assert_eq!(
        volumes[0]
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("koord-webhook-tls")
    );
    let cert = find(&objects, "Certificate", "koord-webhook");
    assert_eq!(cert["spec"]["secretName"], "koord-webhook-tls");
    assert_eq!(cert["spec"]["privateKey"]["algorithm"], "ECDSA");
    let m = find(&objects, "MutatingWebhookConfiguration", "koord-webhook");
    assert_eq!(
        m["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "koordinator-system/koord-webhook"
    );
    for (kind, name) in [
        ("Role", "koord-webhook-certs"),
        ("RoleBinding", "koord-webhook-certs"),
        ("ClusterRole", "koord-webhook-cabundle"),
        ("ClusterRoleBinding", "koord-webhook-cabundle"),
    ] {
        assert!(
            !has(&objects, kind, name),
            "{kind} {name}: the webhook writes nothing then"
        );
    }
}

#[test]
#[ignore = "needs kubectl and helm (tests/e2e/helm.sh build)"]
fn helm_certificate_modes() {
    let cm = helm_template(&["webhook.certificates=cert-manager"]);
    let args = webhook_pod(&cm).containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(
        args.contains(&"--tls-cert=/etc/koord-webhook/tls/tls.crt".to_owned()),
        "{args:?}"
    );
    assert!(
        has(&cm, "Certificate", "koord-webhook") && has(&cm, "Issuer", "koord-webhook-selfsigned")
    );
    assert!(!has(&cm, "Role", "koord-webhook-certs"));
    let m = find(&cm, "MutatingWebhookConfiguration", "koord-webhook");
    assert_eq!(
        m["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "koordinator-system/koord-webhook"
    );
    let own = helm_template(&["webhook.certificates=secret", "webhook.caBundle=Q0E="]);
    let m = find(&own, "MutatingWebhookConfiguration", "koord-webhook");
    assert_eq!(m["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=");
    assert!(
        !has(&own, "Certificate", "koord-webhook") && !has(&own, "Role", "koord-webhook-certs")
    );
    let short = helm_template(&["webhook.certValidity=30d"]);
    let args = webhook_pod(&short).containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--cert-validity=30d".to_owned()), "{args:?}");
    let out = Command::new(helm())
        .args(["template", "koord-qos"])
        .arg(repo().join("charts/koord-qos"))
        .args(["--set", "webhook.certificates=vault"])
        .output()
        .expect("helm");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("webhook.certificates must be"));
}

/// The applier's NRI settings: `KOORD_NRI`, and the runtime's socket directory mounted (the
/// directory, so a restarted runtime's new socket shows up; created where absent, so a node
/// without NRI still starts the pod).
fn applier_nri(objects: &[Value]) -> (Option<String>, Option<String>, Option<String>) {
    let ds: DaemonSet = round_trip(find(objects, "DaemonSet", "koord-applier"));
    let pod = ds.spec.expect("spec").template.spec.expect("pod");
    let c = &pod.containers[0];
    let env = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "KOORD_NRI")
        .and_then(|e| e.value.clone());
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/var/run/nri")
        .map(|m| m.name.clone());
    let host = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| Some(&v.name) == mount.as_ref())
        .and_then(|v| v.host_path.as_ref())
        .map(|h| format!("{} {}", h.path, h.type_.as_deref().unwrap_or("")));
    (env, mount, host)
}

#[test]
#[ignore = "needs kubectl and helm (tests/e2e/helm.sh build)"]
fn the_applier_mounts_the_nri_socket_directory() {
    let want = (
        Some("auto".to_owned()),
        Some("nri".to_owned()),
        Some("/var/run/nri DirectoryOrCreate".to_owned()),
    );
    assert_eq!(applier_nri(&render("manifests")), want, "kustomize");
    assert_eq!(applier_nri(&helm_template(&[])), want, "helm");
    let (env, _, host) = applier_nri(&helm_template(&[
        "applier.nri=off",
        "applier.nriSocketDir=/run/containerd/nri",
    ]));
    assert_eq!(env.as_deref(), Some("off"));
    assert_eq!(
        host.as_deref(),
        Some("/run/containerd/nri DirectoryOrCreate")
    );
}

/// The applier's systemd settings: `KOORD_SYSTEMD_DBUS`, the socket's path, and systemd's
/// directory mounted read-only (the directory: systemd re-creates its socket on every
/// daemon-reexec; created where absent, so a node without systemd still starts the pod).
fn applier_systemd(objects: &[Value]) -> (Option<String>, Option<String>, Option<String>) {
    let ds: DaemonSet = round_trip(find(objects, "DaemonSet", "koord-applier"));
    let pod = ds.spec.expect("spec").template.spec.expect("pod");
    let c = &pod.containers[0];
    let env = |name: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == "/host-run-systemd");
    let host = mount.and_then(|m| {
        pod.volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .and_then(|v| v.host_path.as_ref())
            .map(|h| {
                format!(
                    "{} {} readOnly={}",
                    h.path,
                    h.type_.as_deref().unwrap_or(""),
                    m.read_only.unwrap_or(false)
                )
            })
    });
    (env("KOORD_SYSTEMD_DBUS"), env("KOORD_SYSTEMD_SOCKET"), host)
}

#[test]
#[ignore = "needs kubectl and helm (tests/e2e/helm.sh build)"]
fn the_applier_mounts_systemds_directory_read_only() {
    let want = (
        Some("auto".to_owned()),
        Some("/host-run-systemd/private".to_owned()),
        Some("/run/systemd DirectoryOrCreate readOnly=true".to_owned()),
    );
    assert_eq!(applier_systemd(&render("manifests")), want, "kustomize");
    let off = (Some("off".to_owned()), None, None);
    // An overlay as the component's comment says; kustomize takes relative paths only.
    let overlay = tempfile::tempdir().expect("tmp");
    let repo = repo().canonicalize().expect("repo");
    let up = "../".repeat(overlay.path().components().count() - 1);
    let rel = format!("{up}{}", repo.display().to_string().trim_start_matches('/'));
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "resources: [{rel}/manifests]\ncomponents: [{rel}/manifests/components/no-systemd-dbus]\n"
        ),
    )
    .expect("overlay");
    assert_eq!(
        applier_systemd(&render_path(overlay.path())),
        off,
        "kustomize without systemd's socket"
    );
    assert_eq!(applier_systemd(&helm_template(&[])), want, "helm");
    assert_eq!(
        applier_systemd(&helm_template(&["applier.systemdDBus=off"])),
        off,
        "helm off"
    );
}
