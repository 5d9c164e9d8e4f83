//! The doctor's checks, in the order the chain breaks: API server, webhook Deployment and its
//! endpoints, the MutatingWebhookConfiguration and its caBundle against the serving
//! certificate, opted-in namespaces, the ConfigMaps in force, the applier on each node, and a
//! dry-run pod create that the webhook should mutate.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use koord_api::keys::{
    ANNOTATION_RESOLVED_QOS, CLUSTER_CONFIGMAP, LABEL_WEBHOOK_OPT_IN, NAMESPACE_CONFIGMAP,
};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use super::args::DoctorArgs;
use super::report::{Check, Report, Status};
use crate::certs::inspect::chains_to;
use crate::policy::load::from_data;
use crate::policy::{ClusterConfigMap, NamespaceConfigMap};

fn err(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

pub async fn run(client: &kube::Client, args: &DoctorArgs) -> Report {
    let mut r = Report::default();
    match client.apiserver_version().await {
        Ok(v) => r.push(Check::new(
            "api-server",
            Status::Ok,
            format!("Kubernetes {}", v.git_version),
        )),
        Err(e) => {
            r.push(Check::new("api-server", Status::Fail, err(&e)));
            return r;
        }
    }
    r.push(deployment(client, args).await);
    r.push(endpoints(client, args).await);
    let webhook = webhook_configuration(client, args, &mut r).await;
    r.push(certificate(client, args, webhook.as_ref()).await);
    let opted_in = namespaces(client, &mut r).await;
    r.push(configmap::<ClusterConfigMap>(client, args, CLUSTER_CONFIGMAP).await);
    r.push(configmap::<NamespaceConfigMap>(client, args, NAMESPACE_CONFIGMAP).await);
    r.push(applier(client, args).await);
    let ns = args.dry_run_namespace.clone().or(opted_in);
    r.push(dry_run(client, ns).await);
    r
}

async fn deployment(client: &kube::Client, args: &DoctorArgs) -> Check {
    let name = "webhook-deployment";
    let api: Api<Deployment> = Api::namespaced(client.clone(), &args.namespace);
    match api.get_opt(&args.webhook).await {
        Err(e) => Check::new(name, Status::Fail, err(&e)),
        Ok(None) => Check::new(
            name,
            Status::Fail,
            format!(
                "Deployment {}/{} not found: not installed (kubectl apply -k manifests/)",
                args.namespace, args.webhook
            ),
        ),
        Ok(Some(d)) => {
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let ready = d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let detail = format!("{ready}/{want} replicas ready");
            let status = match ready {
                0 => Status::Fail,
                n if n < want => Status::Warn,
                _ => Status::Ok,
            };
            Check::new(name, status, detail)
        }
    }
}

async fn endpoints(client: &kube::Client, args: &DoctorArgs) -> Check {
    let name = "webhook-endpoints";
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &args.namespace);
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={}", args.webhook));
    match api.list(&lp).await {
        Err(e) => Check::new(name, Status::Fail, err(&e)),
        Ok(list) => {
            let ready = list
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
                .count();
            if ready == 0 {
                Check::new(
                    name,
                    Status::Fail,
                    format!(
                        "Service {} has no ready endpoint: the apiserver cannot reach the webhook (a replica is ready only while its certificate verifies against the caBundle)",
                        args.webhook
                    ),
                )
            } else {
                Check::new(
                    name,
                    Status::Ok,
                    format!("{ready} ready endpoint(s) behind Service {}", args.webhook),
                )
            }
        }
    }
}

/// The configuration and its check; the configuration is returned for the certificate check.
async fn webhook_configuration(
    client: &kube::Client,
    args: &DoctorArgs,
    r: &mut Report,
) -> Option<MutatingWebhookConfiguration> {
    let name = "webhook-configuration";
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    match api.get_opt(&args.webhook_configuration).await {
        Err(e) => {
            r.push(Check::new(name, Status::Fail, err(&e)));
            None
        }
        Ok(None) => {
            r.push(Check::new(
                name,
                Status::Fail,
                format!(
                    "MutatingWebhookConfiguration {} not found",
                    args.webhook_configuration
                ),
            ));
            None
        }
        Ok(Some(w)) => {
            let hooks = w.webhooks.as_deref().unwrap_or_default();
            let empty = hooks
                .iter()
                .filter(|h| {
                    h.client_config
                        .ca_bundle
                        .as_ref()
                        .is_none_or(|b| b.0.is_empty())
                })
                .count();
            let policy = hooks
                .first()
                .and_then(|h| h.failure_policy.clone())
                .unwrap_or_default();
            let check = if hooks.is_empty() {
                Check::new(name, Status::Fail, "no webhooks in it")
            } else if empty > 0 {
                Check::new(
                    name,
                    Status::Fail,
                    format!(
                        "caBundle empty in {empty} webhook(s): the apiserver cannot verify the webhook (failurePolicy {policy}: pods are admitted unmutated); self-managed certificates republish it within seconds"
                    ),
                )
            } else {
                Check::new(
                    name,
                    Status::Ok,
                    format!(
                        "{} webhook(s), caBundle set, failurePolicy {policy}",
                        hooks.len()
                    ),
                )
            };
            r.push(check);
            Some(w)
        }
    }
}

async fn certificate(
    client: &kube::Client,
    args: &DoctorArgs,
    webhook: Option<&MutatingWebhookConfiguration>,
) -> Check {
    let name = "serving-certificate";
    let Some(webhook) = webhook else {
        return Check::new(name, Status::Skip, "no MutatingWebhookConfiguration");
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &args.namespace);
    let secret = match api.get_opt(&args.tls_secret).await {
        Err(e) => return Check::new(name, Status::Fail, err(&e)),
        Ok(None) => {
            return Check::new(
                name,
                Status::Fail,
                format!(
                    "Secret {}/{} not found (self-managed certificates: the webhook re-creates it within seconds; cert-manager: check the Certificate)",
                    args.namespace, args.tls_secret
                ),
            );
        }
        Ok(Some(s)) => s,
    };
    let Some(cert) = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .filter(|c| !c.0.is_empty())
    else {
        return Check::new(
            name,
            Status::Fail,
            format!("Secret {} holds no tls.crt", args.tls_secret),
        );
    };
    let dns = format!("{}.{}.svc", args.webhook, args.namespace);
    for hook in webhook.webhooks.iter().flatten() {
        let bundle = hook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        if let Err(e) = chains_to(&cert.0, bundle, &dns, SystemTime::now()) {
            return Check::new(
                name,
                Status::Fail,
                format!(
                    "tls.crt of Secret {} vs caBundle of {}: {e}",
                    args.tls_secret, hook.name
                ),
            );
        }
    }
    Check::new(
        name,
        Status::Ok,
        format!("tls.crt verifies against the caBundle for {dns}"),
    )
}

/// The check, and the first opted-in namespace (for the dry run).
async fn namespaces(client: &kube::Client, r: &mut Report) -> Option<String> {
    let name = "opted-in-namespaces";
    let api: Api<Namespace> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{LABEL_WEBHOOK_OPT_IN}=enabled"));
    match api.list_metadata(&lp).await {
        Err(e) => {
            r.push(Check::new(name, Status::Fail, err(&e)));
            None
        }
        Ok(list) => {
            let names: Vec<String> = list
                .items
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            if names.is_empty() {
                r.push(Check::new(name, Status::Warn, format!("none: no pod is sent to the webhook (kubectl label namespace NS {LABEL_WEBHOOK_OPT_IN}=enabled)")));
            } else {
                r.push(Check::new(name, Status::Ok, names.join(", ")));
            }
            names.into_iter().next()
        }
    }
}

/// Which version of a ConfigMap is in force: the webhook parses it exactly like this and keeps
/// the last good version when it does not parse.
async fn configmap<C: crate::policy::ConfigMapPolicy>(
    client: &kube::Client,
    args: &DoctorArgs,
    cm_name: &str,
) -> Check {
    let name = if cm_name == CLUSTER_CONFIGMAP {
        "cluster-config"
    } else {
        "namespace-config"
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &args.config_namespace);
    match api.get_opt(cm_name).await {
        Err(e) => Check::new(name, Status::Fail, err(&e)),
        Ok(None) => Check::new(
            name,
            Status::Ok,
            format!(
                "{}/{cm_name} absent: the embedded defaults are in force",
                args.config_namespace
            ),
        ),
        Ok(Some(cm)) => {
            let rv = cm.metadata.resource_version.clone().unwrap_or_default();
            let data: BTreeMap<String, String> = cm.data.clone().unwrap_or_default();
            match from_data::<C>(&data) {
                Ok(_) => Check::new(
                    name,
                    Status::Ok,
                    format!(
                        "{}/{cm_name} resourceVersion {rv} in force",
                        args.config_namespace
                    ),
                ),
                Err(e) => Check::new(
                    name,
                    Status::Fail,
                    format!(
                        "{}/{cm_name} resourceVersion {rv} refused ({e}); the webhook keeps the last good version, or the defaults after a restart",
                        args.config_namespace
                    ),
                ),
            }
        }
    }
}

/// The applier: a ready pod of its DaemonSet on every node, and what each one's metrics say
/// its kernel lacks.
async fn applier(client: &kube::Client, args: &DoctorArgs) -> Check {
    let name = "applier";
    let ds_api: Api<DaemonSet> = Api::namespaced(client.clone(), &args.namespace);
    let ds = match ds_api.get_opt(&args.applier).await {
        Err(e) => return Check::new(name, Status::Fail, err(&e)),
        Ok(None) => {
            return Check::new(
                name,
                Status::Fail,
                format!(
                    "DaemonSet {}/{} not found: no node applies the resolved QoS",
                    args.namespace, args.applier
                ),
            );
        }
        Ok(Some(ds)) => ds,
    };
    let selector = ds
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let pods = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l.items,
        Err(e) => return Check::new(name, Status::Fail, err(&e)),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = match nodes.list_metadata(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => return Check::new(name, Status::Fail, err(&e)),
    };
    let mut missing = Vec::new();
    let mut details = Vec::new();
    let mut degraded = Vec::new();
    for node in nodes.iter().filter_map(|n| n.metadata.name.as_deref()) {
        let ready = pods.iter().find(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) && pod_ready(p)
        });
        match ready {
            None => missing.push(node.to_owned()),
            Some(p) => {
                let support = node_support(client, args, p).await;
                if support.systemd_files_only {
                    degraded.push(node.to_owned());
                }
                details.push(format!("{node}: {}", support.text));
            }
        }
    }
    if !missing.is_empty() {
        return Check::new(
            name,
            Status::Fail,
            format!(
                "no ready applier on node(s) {}: their pods get the annotation but no cgroup change",
                missing.join(", ")
            ),
        );
    }
    if nodes.is_empty() {
        return Check::new(name, Status::Warn, "the cluster has no nodes");
    }
    if !degraded.is_empty() {
        return Check::new(
            name,
            Status::Warn,
            format!(
                "on node(s) {} the kubelet's systemd units get their values as cgroup files only, which systemd resets at its next re-apply (kubelet QoS updates, daemon-reload): mount systemd's socket (docs/install.md, systemd driver); {}",
                degraded.join(", "),
                details.join("; ")
            ),
        );
    }
    Check::new(
        name,
        Status::Ok,
        format!("ready on {} node(s); {}", nodes.len(), details.join("; ")),
    )
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What a node's applier says about its node, from its /metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSupport {
    pub text: String,
    /// The kubelet uses the systemd driver and the applier cannot set its units' values
    /// through systemd (no socket, or systemd unreachable now).
    pub systemd_files_only: bool,
}

impl NodeSupport {
    fn said(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            systemd_files_only: false,
        }
    }
}

/// What a node's applier reports about its kernel, from its /metrics through the API server's
/// pod proxy (best effort: `kubectl get --raw` needs pods/proxy).
async fn node_support(client: &kube::Client, args: &DoctorArgs, pod: &Pod) -> NodeSupport {
    let Some(pod_name) = pod.metadata.name.as_deref() else {
        return NodeSupport::said("unnamed pod");
    };
    let port = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.ports.as_ref())
        .and_then(|p| p.iter().find(|p| p.name.as_deref() == Some("metrics")))
        .map_or(9316, |p| p.container_port);
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod_name}:{port}/proxy/metrics",
        args.namespace
    );
    let request = match http::Request::get(path).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return NodeSupport::said(format!("metrics: {e}")),
    };
    match client.request_text(request).await {
        Err(e) => NodeSupport::said(format!("metrics unreadable ({})", err(&e))),
        Ok(text) => summarize_metrics(&text),
    }
}

/// `unsupported: memory.min memory.low` (or `all knobs supported`), how container values are
/// applied (`NRI (containerd v2.4.2)` at creation, or `watch mode`), on the systemd driver
/// whether its units' values go through systemd, resctrl and CPI support.
pub fn summarize_metrics(text: &str) -> NodeSupport {
    let mut unsupported: Vec<&str> = Vec::new();
    let mut extra = Vec::new();
    let mut mode = None;
    let mut runtime = None;
    let mut systemd_driver = false;
    let mut dbus_up = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let on = value.trim() == "1";
        if let Some(rest) = series.strip_prefix("koord_applier_unsupported_knobs{") {
            if let (true, Some(knob)) = (on, rest.split('"').nth(1)) {
                unsupported.push(knob);
            }
        } else if series == "koord_applier_apply_mode{mode=\"nri\"}" {
            mode = Some(on);
        } else if let Some(rest) = series.strip_prefix("koord_applier_nri_runtime_info{") {
            if on {
                let v: Vec<&str> = rest.split('"').collect();
                if let (Some(rt), Some(ver)) = (v.get(1), v.get(3)) {
                    runtime = Some(format!("{rt} {ver}"));
                }
            }
        } else if let Some(rest) = series.strip_prefix("koord_applier_cgroup_layout_info{") {
            systemd_driver |= on && rest.contains("driver=\"systemd\"");
        } else if series == "koord_applier_systemd_dbus_up" {
            dbus_up = Some(on);
        } else if series == "koord_applier_resctrl_supported" {
            extra.push(format!("resctrl {}", if on { "yes" } else { "no" }));
        } else if series == "koord_applier_cpi_collector_supported" {
            extra.push(format!("CPI {}", if on { "yes" } else { "no" }));
        }
    }
    let mut out = if unsupported.is_empty() {
        "all knobs supported".to_owned()
    } else {
        unsupported.sort_unstable();
        format!("unsupported: {}", unsupported.join(" "))
    };
    // An applier from before the NRI plugin exports no mode: say nothing about it.
    match (mode, runtime) {
        (Some(true), Some(rt)) => {
            out.push_str(", NRI (");
            out.push_str(&rt);
            out.push(')');
        }
        (Some(true), None) => out.push_str(", NRI"),
        (Some(false), _) => out.push_str(", watch mode (no NRI)"),
        (None, _) => {}
    }
    // An applier from before the systemd writes exports no `dbus_up`: only the driver says.
    let files_only = match (systemd_driver, dbus_up) {
        (_, Some(true)) => {
            out.push_str(", systemd units set through systemd");
            false
        }
        (_, Some(false)) => {
            out.push_str(", systemd unreachable: unit values in cgroup files only");
            true
        }
        (true, None) => {
            out.push_str(
                ", systemd driver without systemd's socket: unit values in cgroup files only",
            );
            true
        }
        (false, None) => false,
    };
    for e in extra {
        out.push_str(", ");
        out.push_str(&e);
    }
    NodeSupport {
        text: out,
        systemd_files_only: files_only,
    }
}

/// A server-side dry-run create: goes through admission like a real pod, stores nothing.
async fn dry_run(client: &kube::Client, namespace: Option<String>) -> Check {
    let name = "dry-run-pod";
    let Some(ns) = namespace else {
        return Check::new(name, Status::Skip, "no opted-in namespace to try a pod in");
    };
    let pod: Pod = match serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "koord-doctor-", "namespace": ns},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}}}]}
    })) {
        Ok(p) => p,
        Err(e) => return Check::new(name, Status::Fail, e.to_string()),
    };
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let params = PostParams {
        dry_run: true,
        field_manager: Some("koord-webhook-doctor".into()),
    };
    match api.create(&params, &pod).await {
        Err(e) => Check::new(
            name,
            Status::Fail,
            format!("dry-run create in {ns}: {}", err(&e)),
        ),
        Ok(created) => match created
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_RESOLVED_QOS))
        {
            Some(v) => Check::new(
                name,
                Status::Ok,
                format!(
                    "a pod in {ns} is mutated: {ANNOTATION_RESOLVED_QOS}={}",
                    short(v)
                ),
            ),
            None => Check::new(
                name,
                Status::Fail,
                format!(
                    "a pod in {ns} is admitted without {ANNOTATION_RESOLVED_QOS}: the webhook was not called or did not answer (failurePolicy Ignore hides it)"
                ),
            ),
        },
    }
}

fn short(v: &str) -> String {
    if v.len() <= 120 {
        return v.to_owned();
    }
    let mut end = 120;
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &v[..end])
}

#[cfg(test)]
mod tests {
    use super::summarize_metrics;

    #[test]
    fn metrics_summary_table() {
        let cases = [
            ("", "all knobs supported"),
            (
                "# HELP x\nkoord_applier_unsupported_knobs{knob=\"memory.min\"} 1\nkoord_applier_unsupported_knobs{knob=\"memory.low\"} 1\nkoord_applier_resctrl_supported 0\n",
                "unsupported: memory.low memory.min, resctrl no",
            ),
            (
                "koord_applier_unsupported_knobs{knob=\"memory.min\"} 0\nkoord_applier_cpi_collector_supported 1\n",
                "all knobs supported, CPI yes",
            ),
            (
                "koord_applier_apply_mode{mode=\"nri\"} 1\nkoord_applier_apply_mode{mode=\"watch\"} 0\nkoord_applier_nri_runtime_info{runtime=\"containerd\",version=\"v2.4.2\"} 1\n",
                "all knobs supported, NRI (containerd v2.4.2)",
            ),
            (
                "koord_applier_apply_mode{mode=\"nri\"} 0\nkoord_applier_apply_mode{mode=\"watch\"} 1\nkoord_applier_resctrl_supported 0\n",
                "all knobs supported, watch mode (no NRI), resctrl no",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(summarize_metrics(text).text, want);
            assert!(!summarize_metrics(text).systemd_files_only, "{text}");
        }
        let layout = |driver: &str| {
            format!(
                "koord_applier_cgroup_layout_info{{driver=\"{driver}\",kubelet_cgroup_root=\"/\",version=\"v2\"}} 1\n"
            )
        };
        let systemd = [
            (
                format!("{}koord_applier_systemd_dbus_up 1\n", layout("systemd")),
                "all knobs supported, systemd units set through systemd",
                false,
            ),
            (
                format!("{}koord_applier_systemd_dbus_up 0\n", layout("systemd")),
                "all knobs supported, systemd unreachable: unit values in cgroup files only",
                true,
            ),
            (
                layout("systemd"),
                "all knobs supported, systemd driver without systemd's socket: unit values in cgroup files only",
                true,
            ),
            (layout("cgroupfs"), "all knobs supported", false),
        ];
        for (text, want, files_only) in systemd {
            let s = summarize_metrics(&text);
            assert_eq!(
                (s.text.as_str(), s.systemd_files_only),
                (want, files_only),
                "{text}"
            );
        }
    }
}
