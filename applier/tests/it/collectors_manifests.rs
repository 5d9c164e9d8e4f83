//! The Grafana dashboard and the ServiceMonitor for the collectors' series: every query uses
//! a family the applier exposes and only that family's label names.

use std::collections::BTreeMap;
use std::path::Path;

fn families() -> BTreeMap<&'static str, Vec<&'static str>> {
    let ids = ["node", "pod_uid", "pod_name", "pod_namespace"];
    let ctr = ["container_id", "container_name"];
    let psi = [
        "psi_resource_type",
        "psi_precision",
        "psi_degree",
        "cpu_full_supported",
    ];
    let mut f = BTreeMap::new();
    f.insert("koordlet_pod_psi", [&ids[..], &psi[..]].concat());
    f.insert(
        "koordlet_container_psi",
        [&ids[..], &ctr[..], &psi[..]].concat(),
    );
    f.insert(
        "koordlet_container_cpi",
        [&ids[..], &ctr[..], &["cpi_field"][..]].concat(),
    );
    // Health gauges: only the labels Prometheus adds.
    f.insert(
        "koord_applier_cpi_collector_supported",
        vec!["node", "instance"],
    );
    f.insert(
        "koord_applier_psi_unavailable_cgroups",
        vec!["node", "instance"],
    );
    f
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition" | "query", serde_json::Value::String(s))
                        if s.contains("koord") =>
                    {
                        out.push(s.clone())
                    }
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn dashboard_queries_use_exposed_families_and_labels() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/monitoring");
    let text =
        std::fs::read_to_string(root.join("grafana-dashboard-koord-perf.json")).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let fams = families();
    let mut all = Vec::new();
    exprs(&dash, &mut all);
    assert!(all.len() >= 8, "{all:?}");
    let mut seen = std::collections::BTreeSet::new();
    for e in &all {
        let mut rest = e.as_str();
        let mut any = false;
        while let Some(i) = rest.find('k') {
            rest = &rest[i..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[name.len().max(1)..];
            let Some(labels) = fams.get(name.as_str()) else {
                continue;
            };
            any = true;
            seen.insert(name.clone());
            if let Some(sel) = rest.strip_prefix('{') {
                let sel = &sel[..sel.find('}').expect("closed selector")];
                for m in sel.split(',') {
                    let key = m.split(['=', '!']).next().unwrap_or("").trim();
                    assert!(
                        labels.contains(&key),
                        "{name} has no label {key:?} (in {e})"
                    );
                }
            }
        }
        assert!(
            any || e.contains("label_values("),
            "query without a collector family: {e}"
        );
    }
    for f in [
        "koordlet_pod_psi",
        "koordlet_container_psi",
        "koordlet_container_cpi",
    ] {
        assert!(seen.contains(f), "dashboard lacks {f}");
    }
    // The CPI panel divides cycles by instructions.
    assert!(all.iter().any(|e| e.contains("cpi_field=\"cycles\"")
        && e.contains("cpi_field=\"instructions\"")
        && e.contains('/')));
}

/// The reference's koordlet monitoring, as its documentation ships it: Service label
/// `koord-app: koordlet`, port `koordlet-service` 9316, ServiceMonitor `jobLabel: koord-app`,
/// 30 s over http. Ours produce the same `job` ("koordlet") and `endpoint` labels.
#[test]
fn servicemonitor_gives_the_references_job_and_port() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/monitoring");
    let read = |p: &Path| -> serde_json::Value {
        serde_saphyr::from_str(&std::fs::read_to_string(p).expect("read")).expect("yaml")
    };
    let sm = read(&root.join("applier-servicemonitor.yaml"));
    let svc = read(&root.join("applier-service.yaml"));
    let ds = read(&root.join("../applier/daemonset.yaml"));
    assert_eq!(sm["kind"], "ServiceMonitor");
    assert_eq!(sm["spec"]["jobLabel"], "koord-app");
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "koordlet-service");
    assert_eq!(ep["interval"], "30s");
    assert_eq!(ep["scheme"], "http");
    // The job label value is the Service's koord-app label: "koordlet", as the reference's.
    let labels = &svc["metadata"]["labels"];
    assert_eq!(labels["koord-app"], "koordlet");
    // The ServiceMonitor selects the Service.
    for (k, v) in sm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&labels[k.as_str()], v, "selector {k:?}");
    }
    // The Service selects the DaemonSet's pods and reaches their named port 9316.
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&pod_labels[k.as_str()], v, "pod label {k:?}");
    }
    assert_eq!(
        pod_labels["koord-app"], "koordlet",
        "the reference's own Service finds them"
    );
    let port = &svc["spec"]["ports"][0];
    assert_eq!(port["name"], "koordlet-service");
    assert_eq!(port["port"], 9316);
    let ports = &ds["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        ports
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == port["targetPort"] && p["containerPort"] == 9316)
    );
    let kust = std::fs::read_to_string(root.join("kustomization.yaml")).expect("read");
    for f in [
        "applier-service.yaml",
        "applier-servicemonitor.yaml",
        "grafana-dashboard-koord-perf.json",
    ] {
        assert!(kust.contains(f), "kustomization lacks {f}");
    }
}
