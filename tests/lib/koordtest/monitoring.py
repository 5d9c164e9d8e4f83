#!/usr/bin/env python3
"""The shipped alerts and dashboards against a real Prometheus that scrapes the real
components of a node suite (tests/lib/koordtest/prometheus.py): the v1 node's and the cgroup
v2 node's, each with the metrics its node cannot have (`needs`).

- `start`: Debian's `prometheus` on 127.0.0.1 (27090 for the v1 node, 27091 + the slot for a v2
  node, so both run side by side), data in the suite's directory. It scrapes
  kube-apiserver (10.247.0.1:27443, the suite's token, every 5 s; only the series the rules and
  dashboards name are kept) and, every 2 s, every webhook replica's :8080 and the applier's
  :9316, as the prometheus-operator finds them from manifests/monitoring's two ServiceMonitors
  (the EndpointSlices of the Services they select, their port names, job, the applier's
  `instance` relabeling). Debian builds Prometheus without Kubernetes discovery: the targets
  reach it through `file_sd` files the suite keeps equal to the EndpointSlices (every second).
  It evaluates a test copy of manifests/monitoring/koord-qos.rules.yaml with every `for:` at
  0 s and every range window and offset divided by 20 (10m -> 30s, 1h -> 3m), so that a fault
  fires within seconds and its alert clears within minutes; the expressions and thresholds are
  the file's. Before it starts, `kubectl apply -k manifests/monitoring` on the cluster (the
  applier's metrics Service is part of it), with stand-in CRDs for ServiceMonitor and
  PrometheusRule (no operator here: the objects are stored, nothing acts on them).
- `applier_stopped`: the applier's process stopped (SIGSTOP): KoordApplierDown fires; resumed
  (SIGCONT): it clears.
- `refused`: a pod whose resolved-qos asks more memory.min than its request, in a namespace the
  webhook does not handle: the applier refuses it, KoordApplierRefusedAnnotations fires.
- The webhook-down scenario of suite.py (no replica, a pod created) makes the apiserver fail
  open: KoordWebhookFailOpen fires.
- `queries`: every alert expression of the PrometheusRule the cluster holds and every panel
  and variable query of every dashboard ConfigMap it holds is evaluated; each metric selector
  must return series, except those listed in NEEDS (hardware or a runtime this node lacks) and
  those whose only empty matcher is a value that appears with an event (FAULT_LABELS: the
  metric and its label names must then exist). Returns every selector named and those that
  had series, so a node can require series of the metric families it must have
  (`families_without_series`). Then the alerts driven to firing above must be silent.
  Prometheus is paused during the figures (`paused`).

Used from tests/node/suite.py and tests/node-v2/suite.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from koordtest import prometheus as promlib
from koordtest.checks import Check, check, wait_until
from koordtest.harness import log
from koordtest.node import SYSTEM_NS

PORT = 27090
MONITORING = promlib.MONITORING
NS_REFUSED = "node-unmanaged"

# Metrics the v1 node cannot have, and why (a panel or alert naming only these is not failed).
NEEDS_V1 = {
    "koord_applier_qos_memory_protection_bytes":
        "memory.min/memory.low of the QoS-class cgroups: cgroup v2 or Alibaba Cloud Linux "
        "(mainline cgroup v1 here has no such file; the cgroup v2 node has them)",
    "koord_applier_qos_memory_protection_children_bytes": "as koord_applier_qos_memory_protection_bytes",
    "koord_applier_nri_requests_total": "containerd 2 with NRI (containerd 1.6 here: watch mode)",
    "koord_applier_nri_answer_duration_seconds_bucket": "containerd 2 with NRI (containerd 1.6 here)",
    "koordlet_container_cpi": "a PMU and the CPICollector gate (this machine has no PMU)",
    "koord_applier_proactive_reclaim_stall_seconds":
        "a container in the proactive reclaim loop: cgroup v2 with memory.reclaim and PSI "
        "(cgroup v1 here: an Event, no loop; the cgroup v2 node's monitoring has them)",
    "koord_applier_proactive_reclaim_stall_target_seconds":
        "as koord_applier_proactive_reclaim_stall_seconds",
    "koord_applier_proactive_reclaim_backoffs_total":
        "as koord_applier_proactive_reclaim_stall_seconds",
    "koord_applier_proactive_reclaim_bytes_total":
        "as koord_applier_proactive_reclaim_stall_seconds",
    "koord_applier_cpi_collector_supported": "the CPICollector gate, which the suite leaves off "
    "(this machine has no PMU: CPI would stay idle)",
}
# Labels whose values name an event (a write, a failure, a refusal): a selector empty only
# for such a value is checked by its metric and label names.
FAULT_LABELS = {"outcome", "result", "reason", "key", "code"}
# Alerts the run drives to firing (fault -> alert), and which of them must also clear.
DRIVEN = {"KoordApplierDown": "the applier process stopped (SIGSTOP)",
          "KoordWebhookFailOpen": "no webhook replica, a pod created",
          "KoordApplierRefusedAnnotations": "a pod with a forged resolved-qos"}
MUST_FIRE = ("KoordApplierDown", "KoordWebhookFailOpen")

# Stand-ins for the prometheus-operator's CRDs: enough for the apiserver to store the objects.
STUB_CRDS = [("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")]


def stub_crd(plural: str, kind: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com",
                         "labels": {"koord-qos.test/stand-in": "true"}},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def kubeconfig_secrets(kubeconfig: Path, out: Path) -> tuple[Path, Path, str]:
    """The bearer token and CA the suite's kubeconfig holds, as files Prometheus reads, and
    the server's host:port."""
    import base64
    text = kubeconfig.read_text()
    token = re.search(r"^\s*token: (\S+)$", text, re.M)
    ca = re.search(r"^\s*certificate-authority-data: (\S+)$", text, re.M)
    server = re.search(r"^\s*server: https://(\S+)$", text, re.M)
    check(token and ca and server, f"{kubeconfig}: no token, CA or server")
    out.mkdir(parents=True, exist_ok=True)
    (out / "token").write_text(token.group(1))
    os.chmod(out / "token", 0o600)
    (out / "ca.crt").write_bytes(base64.b64decode(ca.group(1)))
    return out / "token", out / "ca.crt", server.group(1)


def start(h, port: int = PORT) -> None:
    exe = promlib.ensure_installed(os.environ.get("CI") == "true")
    if not exe:
        raise Check("no prometheus (Debian package prometheus); tests/monitoring/install-prometheus.sh")
    # What users apply: the monitoring kustomization (the applier's metrics Service, the
    # ServiceMonitors, the PrometheusRule, the dashboards), on stand-in CRDs.
    h.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [stub_crd(p, k) for p, k in STUB_CRDS]}))
    for plural, _ in STUB_CRDS:
        h.kubectl("wait", "--for=condition=Established", f"crd/{plural}.monitoring.coreos.com",
                  "--timeout=30s", timeout=40)
    h.kubectl("apply", "-k", str(MONITORING))
    got = h.kjson("-n", SYSTEM_NS, "get", "configmaps,prometheusrules,servicemonitors", "-l",
                  "app.kubernetes.io/part-of=koord-qos")["items"]
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in got)
    check(sum(k.startswith("ConfigMap/koord-grafana-dashboard-") for k in kinds) == 4
          and "PrometheusRule/koord-qos" in kinds, f"kubectl apply -k manifests/monitoring: {kinds}")
    log(f"kubectl apply -k manifests/monitoring: {kinds}")
    work = h.dir / "prometheus"
    token, ca, server = kubeconfig_secrets(Path(h.env["KUBECONFIG"]), work / "auth")
    rules = work / "rules.yaml"
    rules.write_text(promlib.quick_rules(promlib.RULES.read_text()))
    sync = promlib.TargetSync(server, token.read_text(), ca, work / "sd",
                              promlib.shipped_monitors()).start()
    h.carry["target_sync"] = sync
    config = promlib.scrape_config(server, token, ca, "2s", "5s", rules, sync,
                                   "apiserver_admission_webhook_.*|apiserver_resource_objects")
    prom = promlib.Prometheus(exe, work, port)
    t0 = time.monotonic()
    prom.start(config)
    h.carry["prom"] = prom

    jobs = targets_up(prom)
    h.carry["alerts"] = promlib.AlertWatch(prom).start()
    applier = next(t for t in _up(prom) if t["job"] == "koordlet")
    check(applier.get("instance") == h.env["NODE_NAME"], f"applier target labels {applier}")
    log(f"prometheus {exe} on 127.0.0.1:{port}: targets {jobs} up "
        f"{time.monotonic() - t0:.1f} s after start (applier: {applier}); rules: a test copy "
        "with for 0s and windows / 20")


def _up(prom: promlib.Prometheus) -> list[dict]:
    return [r["metric"] | {"up": r["value"][1]} for r in prom.query("up")]


def targets_up(prom: promlib.Prometheus, timeout: float = 60) -> dict[str, list[str]]:
    """Waits until the apiserver, the applier and both webhook replicas answer scrapes, and
    each has been scraped twice since (a replaced pod's target is new: its old series went
    stale with the old pod)."""
    def all_up():
        jobs: dict[str, list[str]] = {}
        for t in _up(prom):
            jobs.setdefault(t["job"], []).append(t["up"])
        ok = (jobs.get("apiserver") == ["1"] and jobs.get("koordlet") == ["1"]
              and jobs.get("koord-webhook", []).count("1") >= 2)
        return jobs if ok else None
    try:
        jobs = wait_until("every target up (apiserver, 2 webhook replicas, the applier)",
                          all_up, timeout, 1)
    except Check as e:
        raise Check(f"{e}: {_up(prom)}; prometheus log: "
                    f"{(prom.dir / 'prometheus.log').read_text()[-800:]}") from None
    wait_until("two scrapes of every target", lambda: all(
        float(r["value"][1]) >= 2 for r in prom.query("count_over_time(up[20s]) and up == 1")), 30, 1)
    return jobs


def stop(h) -> None:
    paused(h, False)
    for key in ("alerts", "target_sync"):
        if h.carry.get(key):
            h.carry[key].stop()
    prom = h.carry.get("prom")
    if prom:
        prom.stop()


def paused(h, stopped: bool) -> None:
    """Prometheus and the suite's pollers stopped (or resumed), so that a figure measures the
    product alone: no scrape of the applier, the webhook or kube-apiserver meanwhile."""
    prom = h.carry.get("prom")
    if not prom:
        return
    for key in ("alerts", "target_sync"):
        if h.carry.get(key):
            (h.carry[key].paused.set if stopped else h.carry[key].paused.clear)()
    prom.pause(stopped)
    log(f"prometheus {'paused' if stopped else 'resumed'}")


def started(h, port: int = PORT) -> None:
    """Prometheus running and scraping (started by whichever scenario needs it first)."""
    h.need("prometheus started", lambda h: start(h, port))


def _prom(h) -> promlib.Prometheus:
    started(h)
    return h.carry["prom"]


def _firing(h, name: str) -> bool:
    return name in h.carry["alerts"].firing_now()


def applier_stopped(h) -> None:
    """SIGSTOP the applier's process: its scrapes time out (up 0), KoordApplierDown fires;
    SIGCONT: it clears. The liveness probe (3 x 20 s) is not reached."""
    _prom(h)
    pid = h.container_pid(h.applier_pod(), "applier")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until("KoordApplierDown firing", lambda: _firing(h, "KoordApplierDown"), 30, 0.5)
        fired = time.monotonic() - t0
    finally:
        os.kill(pid, signal.SIGCONT)
    t1 = time.monotonic()
    wait_until("KoordApplierDown silent again", lambda: not _firing(h, "KoordApplierDown"), 30, 0.5)
    h.figure(f"alert KoordApplierDown: fired {fired:.1f} s after the applier was stopped "
             f"(SIGSTOP), silent {time.monotonic() - t1:.1f} s after SIGCONT")
    log(h.figures[-1])
    h.carry["fired"] = {**h.carry.get("fired", {}), "KoordApplierDown": t0}


def refused(h, image: str, node: str) -> None:
    """A pod the webhook does not handle (namespace not opted in) with a resolved-qos asking a
    memory.min above its memory request: MemoryQOSRefused, KoordApplierRefusedAnnotations."""
    _prom(h)
    h.namespace(NS_REFUSED, opted_in=False)
    forged = {"version": 1, "qosClass": "LS", "qosClassSource": "label",
              "memoryQOS": {"enabled": True, "policy": "auto", "source": "pod-annotation",
                            "params": {"minLimitPercent": 100, "lowLimitPercent": 0,
                                       "throttlingPercent": 0, "wmarkRatio": 95,
                                       "wmarkMinAdj": -25, "wmarkScalePermill": 20,
                                       "priority": 0, "priorityEnable": 0, "oomKillGroup": 0},
                            "pod": {"memory.min": 1 << 30, "memory.low": 0},
                            "containers": {"c": {"memory.min": 1 << 30, "memory.low": 0}}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "forged", "namespace": NS_REFUSED,
                        "labels": {"koordinator.sh/qosClass": "LS"},
                        "annotations": {"koordinator.sh/resolved-qos": json.dumps(forged)}},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": image, "command": ["pause"],
                                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                  "limits": {"memory": "32Mi"}}}]}}
    t0 = time.monotonic()
    h.apply_obj(pod)
    try:
        wait_until("KoordApplierRefusedAnnotations firing",
                   lambda: _firing(h, "KoordApplierRefusedAnnotations"), 60, 0.5)
        h.figure(f"alert KoordApplierRefusedAnnotations: fired {time.monotonic() - t0:.1f} s "
                 "after a pod with a forged resolved-qos was created")
        log(h.figures[-1])
        h.carry["fired"] = {**h.carry.get("fired", {}), "KoordApplierRefusedAnnotations": t0}
    finally:
        h.kubectl("-n", NS_REFUSED, "delete", "pod", "forged", "--grace-period=1",
                  "--wait=false", check_rc=False)


def has_series(prom: promlib.Prometheus, metric: str, matchers: str) -> bool:
    """The selector returned series in this run. Over the run, not only now: a counter has
    series once it counted, and an applier a scenario just replaced (the doctor's) has counted
    nothing yet, rightly."""
    return bool(prom.query(f"count(last_over_time({metric}{matchers}[1h]))"))


def _check_selector(prom: promlib.Prometheus, metric: str, matchers: str,
                    needs: dict[str, str]) -> str | None:
    """None when the selector returned series in this run (has_series); else why that is
    acceptable, or a Check."""
    if has_series(prom, metric, matchers):
        return None
    if metric in needs:
        return f"not on this node: {needs[metric]}"
    labels = promlib.matcher_labels(matchers)
    faulty = {k for k in labels if k in FAULT_LABELS}
    structural = {k: v for k, v in labels.items() if k not in FAULT_LABELS}
    base = "{" + ",".join(f"{k}{v}" for k, v in structural.items()) + "}" if structural else ""
    series = prom.query(f"last_over_time({metric}{base}[1h])")
    check(series, f"no series at all for {metric}{base} in this run (named as {metric}{matchers})")
    check(faulty, f"{metric}{matchers} returns nothing, though {metric}{base} has series")
    missing = {k for k in faulty if not any(k in s["metric"] for s in series)}
    check(not missing, f"{metric} has no label {sorted(missing)} (named as {metric}{matchers})")
    return (f"no {'/'.join(sorted(faulty))} of that value in this run (it appears with the event "
            f"it counts); {metric} and the label exist")


@dataclass
class Selectors:
    """What `queries` found: every (metric, matchers) the alerts and dashboards name, those that
    had series in this run, and the others' texts with why that is acceptable."""
    named: set[tuple[str, str]] = field(default_factory=set)
    with_series: set[tuple[str, str]] = field(default_factory=set)
    excused: dict[str, str] = field(default_factory=dict)


def families_without_series(named: set[tuple[str, str]], with_series: set[tuple[str, str]],
                            prefixes: tuple[str, ...], planted: tuple[str, ...] = ()) -> list[str]:
    """One failure per metric that must have series on this node and had none under any of its
    selectors: each metric named (in `named`) whose name starts with one of `prefixes`, and each
    `planted` one (a metric added on purpose to show the check failing). A selector excused for
    a fault-only label value does not fail here as long as another selector of its metric had
    series: the metric exists, the fault did not happen."""
    required = {m for m, _ in named if m.startswith(prefixes)} | set(planted)
    seen = {m for m, _ in with_series}
    out = []
    for metric in sorted(required - seen):
        as_named = sorted(f"{m}{sel}" for m, sel in named if m == metric) or [metric]
        out.append(f"{metric}: no series under any selector the alerts and dashboards name "
                   f"({', '.join(as_named)})" if metric not in planted else
                   f"{metric}: no series (planted: a metric that must have series here)")
    return out


def queries(h, needs: dict[str, str] = NEEDS_V1) -> Selectors:
    """Every alert expression and every dashboard query, as the cluster holds them; returns the
    selectors named, those with series, and those without and why that is acceptable (each
    also logged)."""
    prom = _prom(h)
    targets_up(prom)  # an applier or webhook replaced just before has a new target
    # A new applier exposes PSI after its first collector round (every 10 s here).
    t0 = time.monotonic()
    wait_until("the applier's PSI series", lambda: prom.query(
        "count(koordlet_pod_psi) and count(koord_applier_pod_qos_info)"), 60, 1)
    log(f"targets up and PSI series there {time.monotonic() - t0:.1f} s later")
    rule = h.kjson("-n", SYSTEM_NS, "get", "prometheusrule", "koord-qos")
    exprs = [(f"alert {r['alert']}", r["expr"]) for g in rule["spec"]["groups"]
             for r in g["rules"]]
    check(len(exprs) == sum(1 for g in prom.rule_groups() for _ in g["rules"]),
          "the PrometheusRule and the rules Prometheus loaded differ in number")
    boards = []
    for cm in h.kjson("-n", SYSTEM_NS, "get", "configmaps", "-l", "grafana_dashboard=1")["items"]:
        for name, text in cm["data"].items():
            boards.append((name, json.loads(text)))
    check(len(boards) == 4, f"{len(boards)} dashboards installed")
    for name, board in boards:
        exprs += [(f"{name}: {where}", e) for where, e in promlib.dashboard_queries(board, 900)]
    found = Selectors()
    seen, excused, failures = found.named, found.excused, []
    for where, expr in exprs:
        try:
            prom.query(expr)  # the whole expression is valid PromQL for this Prometheus
            for metric, matchers in promlib.selectors(expr):
                if (metric, matchers) in seen:
                    continue
                seen.add((metric, matchers))
                why = _check_selector(prom, metric, matchers, needs)
                if why:
                    excused[f"{metric}{matchers}"] = why
                else:
                    found.with_series.add((metric, matchers))
        except (Check, RuntimeError) as e:
            failures.append(f"{where}: {e}")
    for sel, why in sorted(excused.items()):
        log(f"no series for {sel}: {why}")
    check(not failures, "\n".join(failures))
    h.figure(f"monitoring: {len(exprs)} queries ({len(rule['spec']['groups'])} rule groups, "
             f"{len(boards)} dashboards) evaluated against the real Prometheus, "
             f"{len(seen)} distinct selectors, {len(seen) - len(excused)} with series, "
             f"{len(excused)} excused (fault-only values or hardware this node lacks)")
    log(h.figures[-1])
    return found


def driven_alerts(h) -> None:
    """The alerts driven to firing earlier fired, and are silent now."""
    _prom(h)
    watch: promlib.AlertWatch = h.carry["alerts"]
    fired = {name: name in watch.first for name in DRIVEN}
    for name in MUST_FIRE:
        check(fired[name], f"{name} never fired ({DRIVEN[name]}); fired: {sorted(watch.first)}")
    firing = watch.firing_now()

    def quiet():
        now = watch.firing_now()
        return not any(n in now for n, f in fired.items() if f)
    try:
        wait_until("the driven alerts silent", quiet, 200, 2)
    except Check:
        raise Check(f"still firing: {sorted(n for n in firing if n in DRIVEN)}") from None
    others = sorted(set(watch.first) - set(DRIVEN))
    h.figure("alerts fired and cleared by real faults: "
             + ", ".join(f"{n} ({DRIVEN[n]})" for n, f in fired.items() if f)
             + (f"; also fired during the run (test copy, for: 0s): {', '.join(others)}"
                if others else ""))
    log(h.figures[-1])


def remove_stub_crds(h) -> None:
    for plural, _ in STUB_CRDS:
        h.kubectl("delete", "crd", f"{plural}.monitoring.coreos.com", "--ignore-not-found",
                  "--wait=true", timeout=60, check_rc=False)
