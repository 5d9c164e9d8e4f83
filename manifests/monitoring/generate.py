#!/usr/bin/env python3
"""Writes what manifests/monitoring and the chart ship beside the rule file, from one source:

  koord-qos.rules.yaml (hand-written)  -> ../components/prometheus-rules/prometheusrule.yaml
                                          and the chart's files/koord-qos.rules.yaml
  the dashboards below (code)          -> grafana-dashboard-koord-{admission,memory-qos,
                                          colocation}.json here and in the chart's dashboards/
  grafana-dashboard-koord-perf.json    -> copied into the chart's dashboards/

  manifests/monitoring/generate.py          write them
  manifests/monitoring/generate.py --check  exit 1 naming every file that differs (make unit)

Every panel query is evaluated against a real Prometheus by the node suite
(tests/lib/koordtest/prometheus.py); stdlib only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHART = REPO / "charts" / "koord-qos"
RULES = HERE / "koord-qos.rules.yaml"
RULE_RESOURCE = REPO / "manifests" / "components" / "prometheus-rules" / "prometheusrule.yaml"
WEBHOOK = 'name="pods.qos.koordinator.sh"'

DS = {"type": "prometheus", "uid": "${datasource}"}


# -- dashboard parts ----------------------------------------------------------------------


def var_datasource() -> dict:
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0}


def var_query(name: str, label: str, query: str, multi: bool = True) -> dict:
    """A label_values variable; All is `.*`, so a series without the label (a single
    cluster has no `cluster` label) still matches `label=~"$var"`."""
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "multi": multi, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 1}


class Board:
    def __init__(self, uid: str, title: str, description: str, tags: list[str],
                 variables: list[dict]) -> None:
        self.d = {"title": title, "uid": uid, "description": description,
                  "tags": ["koordinator", "koord-qos", *tags], "timezone": "browser",
                  "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
                  "time": {"from": "now-1h", "to": "now"},
                  "templating": {"list": [var_datasource(), *variables]}, "panels": []}
        self.y = 0
        self.x = 0

    def row(self, title: str) -> None:
        self._newline()
        self.d["panels"].append({"id": len(self.d["panels"]) + 1, "type": "row", "title": title,
                                 "collapsed": False,
                                 "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1},
                                 "panels": []})
        self.y += 1

    def _newline(self) -> None:
        if self.x:
            self.x, self.y = 0, self.y + 8

    def panel(self, title: str, description: str, unit: str, targets: list[tuple[str, str]],
              kind: str = "timeseries", w: int = 12, minimum: float | None = 0,
              stacked: bool = False) -> None:
        if self.x + w > 24:
            self._newline()
        h = 8 if kind == "timeseries" else 6
        defaults: dict = {"unit": unit}
        if minimum is not None:
            defaults["min"] = minimum
        p = {"id": len(self.d["panels"]) + 1, "type": kind, "title": title,
             "description": description, "datasource": DS,
             "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
             "fieldConfig": {"defaults": defaults, "overrides": []},
             "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                          "datasource": DS} for i, (expr, legend) in enumerate(targets)]}
        if kind == "timeseries":
            p["options"] = {"legend": {"displayMode": "table", "placement": "right",
                                       "calcs": ["lastNotNull", "max"]},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
            if stacked:
                defaults["custom"] = {"stacking": {"mode": "normal"}, "fillOpacity": 30}
        elif kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "values": False},
                            "colorMode": "value", "graphMode": "none", "textMode": "value_and_name"}
        elif kind == "table":
            p["options"] = {"showHeader": True}
            for t in p["targets"]:
                t["format"] = "table"
                t["instant"] = True
        self.d["panels"].append(p)
        self.x += w
        if self.x >= 24:
            self._newline()

    def json(self) -> str:
        return json.dumps(self.d, indent=2) + "\n"


# -- the admission dashboard ----------------------------------------------------------------

def admission() -> Board:
    c = 'cluster=~"$cluster"'
    w = f'{c},pod=~"$replica"'
    b = Board("koord-admission", "Koord QoS: Admissions",
              "koord-webhook: admissions (rate, outcome, latency per replica), what "
              "kube-apiserver sees of the calls (latency, fail-open), certificates and the "
              "re-resolver.", ["admission", "webhook"],
              [var_query("cluster", "Cluster", "label_values(koord_webhook_admissions_total, cluster)"),
               var_query("replica", "Replica",
                         f"label_values(koord_webhook_admissions_total{{{c}}}, pod)")])
    b.row("Admissions")
    b.panel("Admissions by outcome", "Admission reviews per second, by what the webhook "
            "answered: mutated, unchanged (nothing to change), denied, error (answered without "
            "a patch: a limit or the deadline).", "reqps",
            [(f"sum by (outcome) (rate(koord_webhook_admissions_total{{{w}}}[$__rate_interval]))",
              "{{outcome}}")], stacked=True)
    b.panel("Admissions by QoS class (CREATE)", "Pods created per second, by the class the "
            "webhook resolved (none: not a QoS pod).", "reqps",
            [(f'sum by (qos_class) (rate(koord_webhook_admissions_total{{{w},operation="CREATE"}}[$__rate_interval]))',
              "{{qos_class}}")], stacked=True)
    b.panel("Admissions per replica", "How the Service spreads the apiserver's calls.", "reqps",
            [(f"sum by (pod) (rate(koord_webhook_admissions_total{{{w}}}[$__rate_interval]))",
              "{{pod}}")])
    b.panel("Errors and denials", "Share of admission reviews answered with an error or a "
            "denial (alert: errors above 1% for 10 min).", "percentunit",
            [(f'sum by (pod) (rate(koord_webhook_admissions_total{{{w},outcome=~"error|denied"}}[$__rate_interval]))'
              f" / sum by (pod) (rate(koord_webhook_admissions_total{{{w}}}[$__rate_interval]))",
              "{{pod}}")])
    b.row("Latency")
    b.panel("Webhook's own latency per replica (p50, p99)", "From request to response body "
            "inside the webhook (koord_webhook_admission_duration_seconds). SLO: p99 0.1 s.", "s",
            [(f"histogram_quantile(0.99, sum by (pod, le) (rate(koord_webhook_admission_duration_seconds_bucket{{{w}}}[$__rate_interval])))",
              "p99 {{pod}}"),
             (f"histogram_quantile(0.5, sum by (pod, le) (rate(koord_webhook_admission_duration_seconds_bucket{{{w}}}[$__rate_interval])))",
              "p50 {{pod}}")])
    b.panel("Latency as kube-apiserver sees it (p50, p99)", "The call from the apiserver: "
            "network, TLS and the webhook (apiserver_admission_webhook_admission_duration_seconds). "
            "SLO: p99 0.5 s; the call is abandoned at timeoutSeconds (5 s).", "s",
            [(f"histogram_quantile(0.99, sum by (le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{{{c},{WEBHOOK}}}[$__rate_interval])))",
              "p99"),
             (f"histogram_quantile(0.5, sum by (le) (rate(apiserver_admission_webhook_admission_duration_seconds_bucket{{{c},{WEBHOOK}}}[$__rate_interval])))",
              "p50")])
    b.panel("In-flight admissions", "Admission reviews being processed, per replica.", "short",
            [(f"koord_webhook_inflight_admissions{{{w}}}", "{{pod}}")])
    b.panel("Open connections", "TLS connections on the admission listener, per replica; "
            "shed and evicted ones per second.", "short",
            [(f"koord_webhook_connections_open{{{w}}}", "open {{pod}}"),
             (f"rate(koord_webhook_connections_shed_total{{{w}}}[$__rate_interval])", "shed/s {{pod}}"),
             (f"rate(koord_webhook_connections_evicted_total{{{w}}}[$__rate_interval])", "evicted/s {{pod}}")])
    b.row("Fail-open: pods admitted without the webhook")
    b.panel("Pods admitted without the webhook (fail-open)", "Calls kube-apiserver gave up on "
            "and admitted anyway (failurePolicy Ignore): those pods get their QoS only from the "
            "re-resolver's next pass, and BE pods keep plain cpu/memory.", "short",
            [(f"sum by (name) (increase(apiserver_admission_webhook_fail_open_count{{{c},{WEBHOOK}}}[$__rate_interval]))",
              "fail-open {{name}}")])
    b.panel("Fail-open in the time range", "Total over the dashboard's range.", "short",
            [(f"sum(increase(apiserver_admission_webhook_fail_open_count{{{c},{WEBHOOK}}}[$__range]))",
              "fail-open")], kind="stat", w=6)
    b.panel("Replicas answering scrapes", "up of each webhook replica (1 = answering).", "none",
            [(f'up{{{c},job="koord-webhook"}}', "{{pod}}")], kind="stat", w=6)
    b.panel("Calls by HTTP code (apiserver)", "The apiserver's calls to the webhook per "
            "second, by the code it got (0: no answer).", "reqps",
            [(f"sum by (code) (rate(apiserver_admission_webhook_request_total{{{c},{WEBHOOK}}}[$__rate_interval]))",
              "{{code}}")])
    b.row("Certificates and configuration")
    b.panel("Served certificate expires in", "Time left on the certificate each replica serves "
            "(alert below 7 days: rotation stopped).", "dtdurations",
            [(f"koord_webhook_tls_certificate_expiry_timestamp_seconds{{{w}}} - time()", "{{pod}}")],
            kind="stat", w=8)
    b.panel("Certificate verifies against the caBundle", "1 while the served certificate "
            "chains to the MutatingWebhookConfiguration's caBundle (self-managed "
            "certificates); 0 = the apiserver cannot call this replica.", "none",
            [(f"koord_webhook_tls_ca_bundle_match{{{w}}}", "{{pod}}")], kind="stat", w=8)
    b.panel("ConfigMaps valid", "1 when the latest version of each ConfigMap parsed; 0 while "
            "the last good one is in use.", "none",
            [(f"koord_webhook_config_valid{{{w}}}", "{{pod}} {{config}}")], kind="stat", w=8)
    b.row("Re-resolver")
    b.panel("Lease holder", "1 for the replica that re-resolves running pods.", "none",
            [(f"koord_webhook_reresolve_is_leader{{{w}}}", "{{pod}}")])
    b.panel("Passes by outcome", "Re-resolution passes per interval, by outcome.", "short",
            [(f"sum by (outcome) (increase(koord_webhook_reresolve_passes_total{{{w}}}[$__rate_interval]))",
              "{{outcome}}")])
    b.panel("Pods checked, patched, failed", "Per second.", "ops",
            [(f"sum(rate(koord_webhook_reresolve_pods_checked_total{{{w}}}[$__rate_interval]))", "checked"),
             (f"sum by (mode) (rate(koord_webhook_reresolve_pods_patched_total{{{w}}}[$__rate_interval]))", "patched {{mode}}"),
             (f"sum by (reason) (rate(koord_webhook_reresolve_pods_failed_total{{{w}}}[$__rate_interval]))", "failed {{reason}}")])
    b.panel("Pass duration (p99)", "Listing, resolving and patching one pass.", "s",
            [(f"histogram_quantile(0.99, sum by (le) (rate(koord_webhook_reresolve_pass_duration_seconds_bucket{{{w}}}[$__rate_interval])))",
              "p99")])
    return b


# -- the memory QoS dashboard ---------------------------------------------------------------

def memory_qos() -> Board:
    c = 'cluster=~"$cluster"'
    n = f'{c},instance=~"$node"'
    b = Board("koord-memory-qos", "Koord QoS: Memory QoS per node",
              "koord-applier per node: QoS-level protection against the sums of the children, "
              "cgroup writes and failures per knob, refused pods, the knobs the kernel lacks, "
              "the apply mode (NRI or watch), LS pods' memory pressure and proactive reclaim.",
              ["memory-qos", "applier"],
              [var_query("cluster", "Cluster", "label_values(koord_applier_pods_managed, cluster)"),
               var_query("node", "Node",
                         f"label_values(koord_applier_pods_managed{{{c}}}, instance)")])
    b.row("Protection per QoS level (cgroup v2, Alibaba Cloud Linux)")
    for f in ("memory.min", "memory.low"):
        b.panel(f"{f} of kubepods and the QoS classes vs their children's sums", "The kernel "
                "caps a pod's protection at its ancestors': the value in force should equal "
                "the sum of the children (alert when below for 15 min). Mainline cgroup v1 has "
                "no such file: empty there.", "bytes",
                [(f'koord_applier_qos_memory_protection_bytes{{{n},file="{f}"}}', "{{instance}} {{cgroup}} in force"),
                 (f'koord_applier_qos_memory_protection_children_bytes{{{n},file="{f}"}}', "{{instance}} {{cgroup}} children's sum")])
    b.panel("Protection short of the children's sums", "Children's sum minus the value in "
            "force, per QoS-level cgroup (0 = in force).", "bytes",
            [(f"koord_applier_qos_memory_protection_children_bytes{{{n}}} - koord_applier_qos_memory_protection_bytes{{{n}}}",
              "{{instance}} {{cgroup}} {{file}}")], w=24)
    b.row("Writes and failures per knob")
    b.panel("Knob reconciliations by outcome", "Per second: written (a value changed), "
            "unchanged, unsupported, missing, refused, held, failed.", "ops",
            [(f"sum by (outcome) (rate(koord_applier_cgroup_writes_total{{{n}}}[$__rate_interval]))",
              "{{outcome}}")], stacked=True)
    b.panel("Writes per knob", "Values changed per second, by cgroup file.", "wps",
            [(f'sum by (knob) (rate(koord_applier_cgroup_writes_total{{{n},outcome="written"}}[$__rate_interval]))',
              "{{knob}}")])
    b.panel("Failed writes per knob", "Writes the kernel refused, per interval (alert: any in "
            "15 min; the MemoryQOSFailed Event names the file).", "short",
            [(f'sum by (instance, knob) (increase(koord_applier_cgroup_writes_total{{{n},outcome="failed"}}[$__rate_interval]))',
              "{{instance}} {{knob}}")])
    b.panel("Read errors", "Cgroup files the applier could not read, per interval.", "short",
            [(f"increase(koord_applier_cgroup_read_errors_total{{{n}}}[$__rate_interval])", "{{instance}}")])
    b.row("Pods")
    b.panel("Pods managed", "Pods on the node with a resolved-qos annotation.", "short",
            [(f"koord_applier_pods_managed{{{n}}}", "{{instance}}")])
    b.panel("Refused pods (Events in the time range)", "Pods whose annotation the applier "
            "refused (MemoryQOSRefused): nothing written for them.", "short",
            [(f'sum by (instance) (increase(koord_applier_events_total{{{n},reason="MemoryQOSRefused"}}[$__range]))',
              "{{instance}}")], kind="stat")
    b.panel("Events by reason", "Events per second the applier posted, suppressed as "
            "duplicates or delayed.", "ops",
            [(f"sum by (reason, result) (rate(koord_applier_events_total{{{n}}}[$__rate_interval]))",
              "{{reason}} {{result}}")])
    b.panel("Reconcile time per pod (p99)", "Read, compare and write every knob of one pod.", "s",
            [(f"histogram_quantile(0.99, sum by (instance, le) (rate(koord_applier_reconcile_duration_seconds_bucket{{{n}}}[$__rate_interval])))",
              "{{instance}}")])
    b.row("What this node's kernel and runtime offer")
    b.panel("Knobs this kernel lacks", "1 per knob the node has no file for (mainline v1 has "
            "no memory.min, memory.low, memory.high...): the applier names them in its Event "
            "and writes nothing for them.", "none",
            [(f"koord_applier_unsupported_knobs{{{n}}}", "")], kind="table")
    b.panel("Cgroup layout", "Cgroup version, kubelet driver and cgroupRoot per node.", "none",
            [(f"koord_applier_cgroup_layout_info{{{n}}}", "")], kind="table")
    b.panel("Apply mode (NRI or watch)", "1 for the mode each applier is in: nri (values set "
            "at container creation) or watch (after the container started).", "none",
            [(f"koord_applier_apply_mode{{{n}}}", "{{instance}} {{mode}}")])
    b.panel("NRI connections", "Per interval: registered, failed, lost (the runtime closed the "
            "plugin; alert).", "short",
            [(f"sum by (instance, result) (increase(koord_applier_nri_connections_total{{{n}}}[$__rate_interval]))",
              "{{instance}} {{result}}")])
    b.panel("NRI answers by outcome", "Requests answered per second (containerd 2 with NRI).", "reqps",
            [(f"sum by (event, outcome) (rate(koord_applier_nri_requests_total{{{n}}}[$__rate_interval]))",
              "{{event}} {{outcome}}")])
    b.panel("NRI answer time (p99)", "What the plugin adds to a container's creation; "
            "containerd drops it past its 2 s request timeout.", "s",
            [(f"histogram_quantile(0.99, sum by (instance, event, le) (rate(koord_applier_nri_answer_duration_seconds_bucket{{{n}}}[$__rate_interval])))",
              "{{instance}} {{event}}")])
    b.row("LS pods' memory pressure (PSI, where the kernel has it)")
    b.panel("LS pods: memory stall (PSI some, avg60)", "Share of time an LS/LSR/LSE pod's tasks "
            "waited for memory (alert above 10% for 15 min). Needs the PSICollector gate.",
            "percent",
            [(f'max by (instance, pod_namespace, pod_name) (koordlet_pod_psi{{{n},psi_resource_type="mem",psi_degree="some",psi_precision="avg60"}}'
              f' * on (instance, pod_uid) group_left (qos_class) koord_applier_pod_qos_info{{{n},qos_class=~"LSE|LSR|LS"}})',
              "{{pod_namespace}}/{{pod_name}}")], w=24)
    b.row("Proactive reclaim (cgroup v2 with memory.reclaim and PSI)")
    b.panel("Proactive reclaim: stall per interval vs target", "Each looped container's memory "
            "stall (memory.pressure some) over its last interval, and its target: under it the "
            "loop reclaims, at or above it the loop backs off (alert above it for 10 min).", "s",
            [(f"koord_applier_proactive_reclaim_stall_seconds{{{n}}}",
              "{{exported_namespace}}/{{exported_pod}} {{exported_container}} stall"),
             (f"koord_applier_proactive_reclaim_stall_target_seconds{{{n}}}",
              "{{exported_namespace}}/{{exported_pod}} {{exported_container}} target")])
    b.panel("Proactive reclaim: bytes reclaimed and back-offs", "Bytes per second the loop "
            "reclaimed on the node, and back-offs per interval by why (stall: the stall reached "
            "the target; short: the kernel found less to reclaim than asked).", "Bps",
            [(f"rate(koord_applier_proactive_reclaim_node_bytes_total{{{n}}}[$__rate_interval])",
              "{{instance}} reclaimed"),
             (f"sum by (instance, why) (increase(koord_applier_proactive_reclaim_backoffs_total{{{n}}}[$__rate_interval]))",
              "{{instance}} back-offs {{why}}")])
    return b


# -- the colocation dashboard ---------------------------------------------------------------

def colocation() -> Board:
    c = 'cluster=~"$cluster"'
    n = f'{c},instance=~"$node"'
    b = Board("koord-colocation", "Koord QoS: Colocation",
              "Batch capacity each node advertises (kubernetes.io/batch-cpu, batch-memory), BE "
              "CPU suppression and the cores BE pods use.", ["colocation", "applier"],
              [var_query("cluster", "Cluster", "label_values(koord_applier_batch_degraded, cluster)"),
               var_query("node", "Node", f"label_values(koord_applier_batch_degraded{{{c}}}, instance)")])
    b.row("Batch capacity")
    b.panel("batch-cpu advertised", "kubernetes.io/batch-cpu on the Node after the last patch, "
            "in cores (the applier reports milli-cores).", "none",
            [(f'koord_applier_batch_resource_advertised{{{n},resource="batch-cpu"}} / 1000',
              "{{instance}}")])
    b.panel("batch-memory advertised", "kubernetes.io/batch-memory on the Node after the last "
            "patch.", "bytes",
            [(f'koord_applier_batch_resource_advertised{{{n},resource="batch-memory"}}',
              "{{instance}}")])
    b.panel("Node status patches", "Patches of the Node's batch resources per interval, by "
            "reason (missing, moved, expired) and result.", "short",
            [(f"sum by (instance, reason, result) (increase(koord_applier_node_status_patches_total{{{n}}}[$__rate_interval]))",
              "{{instance}} {{reason}} {{result}}")])
    b.panel("Batch capacity withdrawn (degraded)", "1 while batch resources are 0 because "
            "usage data is too old (alert after 10 min).", "none",
            [(f"koord_applier_batch_degraded{{{n}}}", "{{instance}}")])
    b.row("BE CPU")
    b.panel("BE cores: used and allowed", "CPUs BE pods used over the last interval, and what "
            "suppression allows them now (-1: suppression off).", "none",
            [(f"koord_applier_be_cpu_usage_cores{{{n}}}", "used {{instance}}"),
             (f"koord_applier_be_cpu_limit_cores{{{n}}}", "allowed {{instance}}")], minimum=None)
    b.panel("BE suppressed", "1 while LS and system usage keep BE pods below node CPUs x "
            "cpuSuppressThresholdPercent.", "none",
            [(f"koord_applier_be_suppressed{{{n}}}", "{{instance}}")])
    b.panel("colocation-config refused", "Edits of colocation-config the applier refused per "
            "interval, by key (it keeps the last good config).", "short",
            [(f"sum by (instance, key) (increase(koord_applier_colocation_config_errors_total{{{n}}}[$__rate_interval]))",
              "{{instance}} {{key}}")])
    return b


BOARDS = {"grafana-dashboard-koord-admission.json": admission,
          "grafana-dashboard-koord-memory-qos.json": memory_qos,
          "grafana-dashboard-koord-colocation.json": colocation}
PERF = "grafana-dashboard-koord-perf.json"


# -- the rule resource ----------------------------------------------------------------------

RULE_HEADER = """\
# Generated by manifests/monitoring/generate.py from manifests/monitoring/koord-qos.rules.yaml
# (edit that file, then run the script). The prometheus-operator's PrometheusRule; an operator
# whose ruleSelector asks for a label (kube-prometheus-stack: release=<its release>) needs it
# added by an overlay.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: koord-qos
  namespace: koordinator-system
  labels:
    app.kubernetes.io/name: koord-qos
    app.kubernetes.io/part-of: koord-qos
spec:
"""


def prometheus_rule(rules: str) -> str:
    body = rules[rules.index("\ngroups:") + 1:]
    return RULE_HEADER + "".join(f"  {line}" if line.strip() else line
                                 for line in body.splitlines(keepends=True))


def outputs() -> dict[Path, str]:
    rules = RULES.read_text()
    out = {RULE_RESOURCE: prometheus_rule(rules), CHART / "files" / RULES.name: rules}
    for name, make in BOARDS.items():
        text = make().json()
        out[HERE / name] = text
        out[CHART / "dashboards" / name] = text
    out[CHART / "dashboards" / PERF] = (HERE / PERF).read_text()
    return out


def main(argv: list[str]) -> int:
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for path, text in outputs().items():
        if path.exists() and path.read_text() == text:
            continue
        if check:
            stale.append(str(path.relative_to(REPO)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print("generate.py --check: out of date (run manifests/monitoring/generate.py): "
              + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
