#!/usr/bin/env python3
"""The scale suite: the product in front of a real kube-apiserver with kwok simulating the
kubelets of many nodes. Run it through `tests/scale/run` (README.md there), which builds what is
needed and starts this file inside a network namespace of its own.

Layout of a run:
  control plane (own ports) -> kwok + N Nodes -> manifests/ + two webhook replicas behind the
  Service -> the pod population -> creation bursts with and without the webhook -> one
  ConfigMap edit re-resolves every pod -> the appliers' cost on the apiserver -> cleanup.

Prints PASS/FAIL per scenario, `figure scale ...` JSON lines, and `N passed, M failed`.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

SCALE = Path(__file__).resolve().parent
REPO = SCALE.parents[1]
sys.path.insert(0, str(SCALE))
sys.path.insert(0, str(REPO / "tests" / "lib"))
sys.dont_write_bytecode = True

import koordtest  # noqa: E402
from koordtest import webhookcfg  # noqa: E402
from koordtest.checks import Check, Fatal, check, wait_until  # noqa: E402
from koordtest.harness import log  # noqa: E402
from koordtest.metrics import histogram_quantile, metric_sum, parse_metrics, percentile  # noqa: E402
from koordtest.sampler import Sampler  # noqa: E402
from koordtest.procs import Proc, ProcTable, impersonating_kubeconfig, vm_status  # noqa: E402
from koordtest.watch import ApiWatch, Endpoint, namespaced_name  # noqa: E402
from load import Api, burst  # noqa: E402
from relay import Relays  # noqa: E402

koordtest.set_log_tag("scale")

CONTROL_PLANE = REPO / "tests" / "e2e" / "control-plane.sh"

# The scale cluster's own ports (e2e 23790/23800/26443, v1 node 24790/24800/27443, cgroup v2
# node 25790/25800/28443); it also runs in a network namespace of its own (tests/scale/run), so
# it never meets the other suites' listeners.
ETCD_PORT, ETCD_PEER_PORT, APISERVER_PORT = 29790, 29800, 29443
KWOK_ADDRESS = "127.0.0.1:29250"
# The appliers' /metrics ports: base + index, below the kernel's ephemeral range (32768 and
# up), where a client socket of this namespace (a relay's upstream connection) could hold one.
APPLIER_METRICS_PORT = 28300
# The two webhook replicas: addresses on this namespace's loopback interface that are not in
# 127.0.0.0/8 (EndpointSlices refuse loopback addresses), as two pods' IPs would be.
REPLICAS = {"koord-webhook-a": "10.253.0.1", "koord-webhook-b": "10.253.0.2"}
WEBHOOK_PORT, WEBHOOK_METRICS_PORT = 9443, 8080

OPT_IN = "koordinator.sh/qos-webhook"
QOS_LABEL = "koordinator.sh/qosClass"
RESOLVED = "koordinator.sh/resolved-qos"
BATCH_CPU = "kubernetes.io/batch-cpu"
PRODUCT_NS = "koordinator-system"
CONFIG_NS = "kube-system"
CLUSTER_CM = "ack-slo-config"
MWC = "koord-webhook"
WEBHOOK_NAME = "pods.qos.koordinator.sh"
APPLIER_USER = f"system:serviceaccount:{PRODUCT_NS}:koord-applier"
PAUSE = "registry.k8s.io/pause:3.10"

# Sizes: `short` is what CI runs (a few minutes), `full` the cluster (make scale).
SIZES = {
    "short": {"nodes": 100, "pods": 1_000, "namespaces": 10, "rates": (50, 100, 200),
              "burst_s": 10, "population_rate": 100, "appliers": 10, "applier_window_s": 60},
    "full": {"nodes": 1_000, "pods": 10_000, "namespaces": 100, "rates": (50, 100, 200),
             "burst_s": 60, "population_rate": 100, "appliers": 100,
             # longer than the watch timeout (290 s), so the re-watch is counted
             "applier_window_s": 330},
}


def size() -> dict:
    name = os.environ.get("KOORD_SCALE_SIZE", "short")
    if name not in SIZES:
        raise Fatal(f"KOORD_SCALE_SIZE must be one of {', '.join(SIZES)}, not {name!r}")
    return {"name": name, **SIZES[name]}


# ---------------------------------------------------------------------------------------
# Pods and nodes
# ---------------------------------------------------------------------------------------


def node_name(i: int) -> str:
    return f"node-{i:04d}"


def population_ns(i: int) -> str:
    return f"scale-{i:03d}"


def pod_body(name: str, ns: str, node: str, be: bool) -> bytes:
    """An LS pod (Burstable) or a BE pod (labelled BE, with cpu/memory that the webhook moves to
    batch resources while colocation is on), bound to a kwok node."""
    if be:
        labels = {"app": "batch", QOS_LABEL: "BE"}
        res = {"requests": {"cpu": "500m", "memory": "256Mi"},
               "limits": {"cpu": "1", "memory": "512Mi"}}
    else:
        labels = {"app": "web"}
        res = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"nodeName": node, "containers": [{"name": "app", "image": PAUSE,
                                                      "resources": res}],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                                     "effect": "NoSchedule"}]}}
    return json.dumps(pod).encode()


def what_is_wrong(pod: dict) -> list[str]:
    """Checks one stored pod (the apiserver's answer to its creation) against what admission
    must have done: the class label, the resolved-qos annotation, and for a BE pod the batch
    translation."""
    meta = pod.get("metadata", {})
    wrong = []
    if RESOLVED not in (meta.get("annotations") or {}):
        wrong.append("no resolved-qos")
    if QOS_LABEL not in (meta.get("labels") or {}):
        wrong.append("no qosClass label")
    if (meta.get("labels") or {}).get("app") == "batch":
        req = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
        if BATCH_CPU not in req or "cpu" in req:
            wrong.append("BE without batch translation")
    return wrong


# ---------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------


class Harness(koordtest.Harness, ProcTable):
    KUBECTL_TIMEOUT = 120
    SA_TIMEOUT = None  # no controller-manager: ServiceAccount admission is off instead

    def __init__(self) -> None:
        super().__init__("koord-scale.")
        self.size = size()
        self.cp_dir = self.dir / "cp"
        self.cp_started = False
        self.kubeconfig = self.cp_dir / "kubeconfig"
        self.procs: dict[str, Proc] = {}
        self.webhook_bin = ""
        self.applier_bin = ""
        self.kwok_bin = ""
        self.rendered: list[dict] = []
        self.examples: list[dict] = []
        self.tokens: dict[str, str] = {}  # applier uid -> token
        self.results: dict = {}
        self.relays: Relays | None = None

    # -- the apiserver, without kubectl --------------------------------------------------

    def api(self, token: str | None = None) -> Api:
        return Api("127.0.0.1", APISERVER_PORT, str(self.cp_dir / "pki" / "apiserver.crt"),
                   token or (self.cp_dir / "token").read_text().strip())

    def apiserver_metrics(self) -> dict:
        return parse_metrics(self.kubectl("get", "--raw", "/metrics").stdout)

    def stop_proc(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p:
            p.stop()

    def cleanup(self, keep: bool) -> None:
        for name in reversed(list(self.procs)):
            try:
                self.stop_proc(name)
            except Exception as e:  # noqa: BLE001
                log(f"stopping {name}: {e}")
        if self.relays:
            self.relays.close()
        if self.cp_started:
            r = subprocess.run([str(CONTROL_PLANE), "stop", str(self.cp_dir)],
                               capture_output=True, text=True, env=cp_env(self))
            if r.returncode != 0:
                log(f"control-plane.sh stop failed: {r.stderr.strip()}")
        if keep:
            log(f"kept logs and state in {self.dir}")
        else:
            subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def cp_env(h: Harness) -> dict:
    """control-plane.sh on the scale cluster's ports, with aggregator routing (a Service
    webhook's calls go to a random ready endpoint of its EndpointSlices, as kube-proxy would
    spread them) and an audit log of the appliers' requests, each applier its own token."""
    audit = h.dir / "audit-policy.json"
    audit.write_text(json.dumps({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": [APPLIER_USER]}, {"level": "None"}]}))
    extra = "\n".join([
        "--enable-aggregator-routing=true",
        f"--audit-policy-file={audit}",
        f"--audit-log-path={h.dir / 'audit.log'}",
        "--audit-log-maxsize=0",
    ])
    tokens = "\n".join(f'{t},{APPLIER_USER},{uid},"system:serviceaccounts,'
                       f'system:serviceaccounts:{PRODUCT_NS},system:authenticated"'
                       for uid, t in h.tokens.items())
    return {**os.environ, "KOORD_E2E_ETCD_PORT": str(ETCD_PORT),
            "KOORD_E2E_ETCD_PEER_PORT": str(ETCD_PEER_PORT),
            "KOORD_E2E_APISERVER_PORT": str(APISERVER_PORT),
            "KOORD_E2E_APISERVER_EXTRA_ARGS": extra, "KOORD_E2E_EXTRA_TOKENS": tokens}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_of(h: Harness, name: str) -> int:
    return int((h.cp_dir / f"{name}.pid").read_text().strip())


# ---------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------


def prerequisites(h: Harness) -> None:
    problems = []
    if sys.version_info < (3, 11):
        problems.append(f"Python 3.11+ needed, this is {sys.version.split()[0]}")
    if os.geteuid() != 0:
        problems.append("must run as root (a network namespace of its own)")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True,
                           text=True).stdout.splitlines()
    if [ln.split(":")[1].strip() for ln in links] != ["lo"]:
        # A fresh network namespace has nothing but lo.
        problems.append("not in a network namespace of its own: start it with tests/scale/run")
    addrs = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True,
                           text=True).stdout
    for ip in REPLICAS.values():
        if f" {ip}/" not in addrs:
            problems.append(f"{ip} is not on lo (tests/scale/run adds it)")
    for var in ("KOORD_SCALE_BIN_DIR", "KOORD_SCALE_KWOK", "KUBECTL"):
        if not os.environ.get(var):
            problems.append(f"{var} is not set (tests/scale/run sets it)")
    if problems:
        raise Fatal("missing prerequisites:\n  - " + "\n  - ".join(problems))
    bins = Path(os.environ["KOORD_SCALE_BIN_DIR"])
    h.webhook_bin = str(bins / "koord-webhook")
    h.applier_bin = str(bins / "koord-applier")
    h.kwok_bin = os.environ["KOORD_SCALE_KWOK"]
    h.kubectl_bin = os.environ["KUBECTL"]
    for b in (h.webhook_bin, h.applier_bin, h.kwok_bin, h.kubectl_bin):
        if not os.access(b, os.X_OK):
            raise Fatal(f"{b} is missing or not executable")
    for i in range(h.size["appliers"]):
        h.tokens[f"applier-{i:03d}"] = os.urandom(16).hex()


def start_control_plane(h: Harness) -> None:
    h.cp_started = True
    t0 = time.monotonic()
    r = subprocess.run([str(CONTROL_PLANE), "start", str(h.cp_dir)], env=cp_env(h),
                       stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if r.returncode != 0:
        raise Fatal(f"control-plane.sh start failed (exit {r.returncode})")
    h.results["control_plane_start_s"] = round(time.monotonic() - t0, 1)


def setup(h: Harness) -> None:
    prerequisites(h)
    start_control_plane(h)
    h.rendered = webhookcfg.render(h.kubectl_bin, str(REPO / "manifests"))
    h.examples = webhookcfg.render(h.kubectl_bin, str(REPO / "manifests" / "examples"))


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

SUITE = koordtest.Suite("KOORD_SCALE_ONLY")
scenario = SUITE.scenario


def node_obj(i: int) -> dict:
    name = node_name(i)
    cap = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok"}},
            "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake",
                                 "effect": "NoSchedule"}]},
            "status": {"capacity": cap, "allocatable": cap}}


def count_remaining(api: Api, path: str, selector: str) -> int:
    """Objects matching a field selector, from one page of one item."""
    out = api.json("GET", f"{path}?limit=1&fieldSelector={selector}")
    return len(out.get("items") or []) + int(out.get("metadata", {}).get("remainingItemCount") or 0)


@scenario("cluster: kube-apiserver + etcd on their own ports, kwok simulating the kubelets "
          "of N Nodes, every Node Ready", base=True)
def s_cluster(h: Harness) -> None:
    n = h.size["nodes"]
    stages = Path(h.kwok_bin).parent.parent / "stages"
    configs = sorted(str(p) for p in stages.glob("*.yaml"))
    check(len(configs) >= 4, f"kwok's Stage files are missing in {stages}")
    # A pool of pod IPs for every pod this run creates (the default /24 has 254).
    h.start_proc("kwok", [h.kwok_bin, f"--kubeconfig={h.kubeconfig}", "--manage-all-nodes=true",
                          f"--server-address={KWOK_ADDRESS}", "--cidr=10.128.0.0/14",
                          "--node-lease-duration-seconds=40",
                          # Its INFO level logs every Lease renewal: 100 lines/s at 1,000 nodes.
                          "-v=WARN",
                          *[f"--config={c}" for c in configs]],
                 {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    api = h.api()
    t0 = time.monotonic()
    for i in range(n):
        api.json("POST", "/api/v1/nodes", node_obj(i))
    created = time.monotonic() - t0
    seen = {"ready": 0}

    def all_ready() -> bool:
        seen["ready"] = sum(
            1 for node in api.list_all("/api/v1/nodes")
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions") or []))
        return seen["ready"] == n

    # wait_until raises on its timeout; the message says how far the Nodes got.
    try:
        wait_until(f"{n} Nodes Ready", all_ready, 60 + n / 10, 2)
    except Check as e:
        raise Check(f"{e}: {seen['ready']} of {n} Ready") from None
    h.results["nodes"] = {"count": n, "created_s": round(created, 1),
                          "ready_s": round(time.monotonic() - t0, 1)}
    log(f"{n} kwok Nodes Ready {h.results['nodes']['ready_s']} s after the first was created")


def start_replica(h: Harness, identity: str, ip: str) -> Proc:
    """`koord-webhook serve` as the Deployment runs it (its args and literal env, self-managed
    certificates through the Secret), on the replica's own address, as its ServiceAccount."""
    dep = next(d for d in webhookcfg.select(h.rendered, "Deployment")
               if d["metadata"]["name"] == "koord-webhook")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = []
    for a in c["args"]:
        if a.startswith("--listen="):
            a = f"--listen={ip}:{WEBHOOK_PORT}"
        elif a.startswith("--metrics-listen="):
            a = f"--metrics-listen={ip}:{WEBHOOK_METRICS_PORT}"
        elif a == "--log-format=json":
            a = "--log-format=text"
        args.append(a)
    kubeconfig = impersonating_kubeconfig(
        h.dir / f"{identity}.kubeconfig", f"https://127.0.0.1:{APISERVER_PORT}",
        (h.cp_dir / "pki" / "apiserver.crt").read_bytes(),
        (h.cp_dir / "token").read_text().strip(), PRODUCT_NS,
        dep["spec"]["template"]["spec"]["serviceAccountName"])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1",
           **{e["name"]: e["value"] for e in c.get("env", []) if "value" in e},
           "KOORD_OWN_NAMESPACE": PRODUCT_NS, "KOORD_POD_NAME": identity,
           "KUBECONFIG": str(kubeconfig)}
    return h.start_proc(identity, [h.webhook_bin, *args], env)


def replica_metrics(h: Harness, identity: str) -> dict:
    with urllib.request.urlopen(
            f"http://{REPLICAS[identity]}:{WEBHOOK_METRICS_PORT}/metrics", timeout=5) as r:
        return parse_metrics(r.read().decode())


def replica_ready(h: Harness, identity: str) -> bool:
    p = h.procs[identity]
    if not p.alive():
        raise Fatal(f"{identity} exited:\n{p.tail()}")
    try:
        with urllib.request.urlopen(
                f"http://{REPLICAS[identity]}:{WEBHOOK_METRICS_PORT}/readyz", timeout=3) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def probe_mutated(h: Harness, ns: str) -> bool:
    pod = json.loads(pod_body("probe", ns, node_name(0), False))
    r = h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(pod))
    return RESOLVED in (json.loads(r.stdout)["metadata"].get("annotations") or {})


def namespace(h: Harness, name: str) -> None:
    h.api().json("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {OPT_IN: "enabled"}}})


def set_cluster_config(h: Harness, key: str, value: dict) -> None:
    patch = {"data": {key: json.dumps(value)}}
    h.kubectl("patch", "configmap", "-n", CONFIG_NS, CLUSTER_CM, "--type=merge",
              "-p", json.dumps(patch))


def reload_count(h: Harness) -> float:
    return sum(metric_sum(replica_metrics(h, r), "koord_webhook_config_reloads_total",
                          config="cluster") for r in REPLICAS)


@scenario("install: manifests/ and the example ConfigMaps (colocation on); two webhook replicas "
          "behind the Service, self-managed certificates; pods of opted-in namespaces mutated", base=True)
def s_install(h: Harness) -> None:
    out = h.kubectl("apply", "-k", str(REPO / "manifests")).stdout
    log("kubectl apply -k manifests/:\n" + out.strip())
    h.kubectl("apply", "-k", str(REPO / "manifests" / "examples"))
    # The Service's endpoints, as the EndpointSlice controller would publish the two pods.
    h.apply_obj({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "koord-webhook-scale", "namespace": PRODUCT_NS,
                     "labels": {"kubernetes.io/service-name": "koord-webhook"}},
        "addressType": "IPv4",
        "ports": [{"name": "webhook", "port": WEBHOOK_PORT, "protocol": "TCP"},
                  {"name": "metrics", "port": WEBHOOK_METRICS_PORT, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}
                      for ip in REPLICAS.values()]})
    for identity, ip in REPLICAS.items():
        start_replica(h, identity, ip)
    for identity in REPLICAS:
        wait_until(f"{identity} /readyz (certificate published and served)",
                   lambda i=identity: replica_ready(h, i), 90, 0.5)
    before = reload_count(h)
    set_cluster_config(h, "colocation-config", {"enable": True})
    wait_until("both replicas reloaded the cluster ConfigMap",
               lambda: reload_count(h) >= before + len(REPLICAS), 30, 0.2)
    namespace(h, "scale-probe")
    wait_until("a dry-run pod to come back mutated through the Service",
               lambda: probe_mutated(h, "scale-probe"), 60, 0.5)


def population_pods(h: Harness) -> list[tuple[str, bytes]]:
    n, nss, nodes = h.size["pods"], h.size["namespaces"], h.size["nodes"]
    return [(population_ns(i % nss),
             pod_body(f"pod-{i:06d}", population_ns(i % nss), node_name(i % nodes), i % 3 == 0))
            for i in range(n)]


def burst_figures(b) -> dict:
    return {"target_per_s": b.target_rate, "achieved_per_s": round(b.achieved_rate, 1),
            "created": b.created, "sent": b.sent, "errors": sum(b.errors.values()),
            "client_p50_ms": round(b.percentile_ms(50), 1),
            "client_p99_ms": round(b.percentile_ms(99), 1),
            "client_max_ms": round(max(b.latencies_ms or [0]), 1),
            "max_lag_s": round(b.max_lag_s, 2), "findings": b.findings}


@scenario("population: N pods (LS and BE, one in three BE) in the opted-in namespaces on the "
          "kwok Nodes, every one mutated at CREATE, then Running", base=True)
def s_population(h: Harness) -> None:
    for k in range(h.size["namespaces"]):
        namespace(h, population_ns(k))
    pods = population_pods(h)
    b = burst(h.api, pods, h.size["population_rate"], 32, what_is_wrong)
    fig = burst_figures(b)
    h.results["population"] = fig
    log(f"population: {fig}")
    check(not b.errors, f"creation errors: {b.errors}")
    check(not b.findings, f"pods stored without what admission owes them: {b.findings}")
    api = h.api()
    t0 = time.monotonic()
    wait_until("every pod Running (kwok)", lambda: count_remaining(
        api, "/api/v1/pods", "status.phase!=Running") == 0, 120 + len(pods) / 20, 5)
    h.results["population"]["running_after_s"] = round(time.monotonic() - t0, 1)
    h.results["apiserver_after_population"] = {
        "kube_apiserver_rss_mib": round(vm_status(pid_of(h, "kube-apiserver"))["VmRSS"] / 1024),
        "etcd_rss_mib": round(vm_status(pid_of(h, "etcd"))["VmRSS"] / 1024)}


def mutated_anyway(pod: dict) -> list[str]:
    """Without the webhook registered, nothing may have touched the pod."""
    return ["mutated with no webhook registered"] if RESOLVED in (
        pod.get("metadata", {}).get("annotations") or {}) else []


def mwc_stored(h: Harness) -> dict:
    return h.kjson("get", "mutatingwebhookconfiguration", MWC)


def unregister(h: Harness) -> dict:
    saved = mwc_stored(h)
    h.kubectl("delete", "mutatingwebhookconfiguration", MWC)
    wait_until("the apiserver to stop calling the webhook",
               lambda: not probe_mutated(h, "scale-probe"), 60, 0.5)
    return saved


def register(h: Harness, saved: dict) -> None:
    obj = json.loads(json.dumps(saved))
    for k in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        obj["metadata"].pop(k, None)
    h.apply_obj(obj)
    wait_until("the apiserver to call the webhook again",
               lambda: probe_mutated(h, "scale-probe"), 60, 0.5)


def apiserver_view(before: dict, after: dict) -> dict:
    """The apiserver's own histograms over the burst: our webhook's admission time and the pod
    creations' request time (Prometheus' histogram_quantile: linear within a bucket)."""
    hook = {"name": WEBHOOK_NAME, "operation": "CREATE", "type": "admit"}
    out = {}
    for q in (0.5, 0.99):
        v = histogram_quantile(after, before, "apiserver_admission_webhook_admission_duration_seconds",
                               q, **hook)
        if v is not None:
            out[f"webhook_p{int(q * 100)}_ms"] = round(v * 1000, 2)
        v = histogram_quantile(after, before, "apiserver_request_duration_seconds", q,
                               verb="POST", resource="pods", subresource="")
        if v is not None:
            out[f"create_p{int(q * 100)}_ms"] = round(v * 1000, 2)
    for name, key in (("apiserver_admission_webhook_rejection_count", "rejections"),
                      ("apiserver_admission_webhook_fail_open_count", "fail_open")):
        out[key] = metric_sum(after, name, name=WEBHOOK_NAME) - metric_sum(
            before, name, name=WEBHOOK_NAME)
    return out


def delete_namespace_pods(h: Harness, ns: str) -> None:
    """Every pod of `ns` deleted, and gone before the next scenario counts pods. A collection
    of 12,000 pods outlasts the apiserver's 60 s request timeout, which closes the connection
    without an answer: the delete is then sent again until nothing is left."""
    api = h.api()
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    last_sent = [0.0]

    def gone() -> bool:
        if not api.json("GET", f"/api/v1/namespaces/{ns}/pods?limit=1").get("items"):
            return True
        if time.monotonic() - last_sent[0] >= 30:
            last_sent[0] = time.monotonic()
            try:
                api.json("DELETE", f"/api/v1/namespaces/{ns}/pods", options)
            except (OSError, http.client.HTTPException, RuntimeError) as e:
                log(f"deleting the pods of {ns}: {type(e).__name__}: {e}; sending it again")
        return False
    wait_until(f"the pods of {ns} gone", gone, 900, 1)


@scenario("bursts: pod creations at 50, 100 and 200 pods/s, without and with the webhook "
          "registered; with it no rejection, no pod unmutated, no BE pod untranslated")
def s_bursts(h: Harness) -> None:
    seconds, nodes = h.size["burst_s"], h.size["nodes"]
    rows = []
    failures = []
    for rate in h.size["rates"]:
        for mode in ("without", "with"):
            ns = f"burst-{rate}-{mode}"
            namespace(h, ns)
            saved = unregister(h) if mode == "without" else None
            try:
                n = int(rate * seconds)
                pods = [(ns, pod_body(f"b-{i:06d}", ns, node_name(i % nodes), i % 3 == 0))
                        for i in range(n)]
                replicas_before = {r: replica_metrics(h, r) for r in REPLICAS}
                before = h.apiserver_metrics()
                cpu0 = {p: cpu_seconds(pid_of(h, p)) for p in ("kube-apiserver", "etcd")}
                b = burst(h.api, pods, rate, 32,
                          what_is_wrong if mode == "with" else mutated_anyway)
                after = h.apiserver_metrics()
                row = {"rate": rate, "webhook": mode, **burst_figures(b),
                       **apiserver_view(before, after)}
                row["cpu_s"] = {p: round(cpu_seconds(pid_of(h, p)) - cpu0[p], 1) for p in cpu0}
                if mode == "with":
                    row["admissions_per_replica"] = {
                        r: round(metric_sum(replica_metrics(h, r),
                                            "koord_webhook_admission_duration_seconds_count")
                                 - metric_sum(replicas_before[r],
                                              "koord_webhook_admission_duration_seconds_count"))
                        for r in REPLICAS}
                    if b.findings or row["rejections"] or row["fail_open"]:
                        failures.append(f"{rate}/s: findings {b.findings}, rejections "
                                        f"{row['rejections']}, fail-open {row['fail_open']}")
                elif b.findings:
                    failures.append(f"{rate}/s without the webhook: {b.findings}")
                if b.errors:
                    failures.append(f"{rate}/s {mode}: errors {b.errors}")
                rows.append(row)
                log(f"burst {rate}/s {mode} the webhook: {row}")
            finally:
                if saved is not None:
                    register(h, saved)
            delete_namespace_pods(h, ns)
    h.results["bursts"] = rows
    check(not failures, "; ".join(failures))


def holder(h: Harness) -> str:
    lease = h.kjson("get", "lease", "-n", PRODUCT_NS, "koord-webhook-reresolver")
    return lease["spec"]["holderIdentity"]


def wmark_ratio(pod: dict) -> object:
    raw = (pod.get("metadata", {}).get("annotations") or {}).get(RESOLVED)
    if not raw:
        return None
    return json.loads(raw).get("memoryQOS", {}).get("params", {}).get("wmarkRatio")


@scenario("re-resolution: one ConfigMap edit changes every pod's annotation at the default "
          "--reresolve-qps; time, writes and the Lease holder's memory")
def s_reresolve(h: Harness) -> None:
    api = h.api()
    n = h.size["pods"]
    pods = api.list_all("/api/v1/pods")
    population = [p for p in pods if p["metadata"]["namespace"].startswith("scale-")
                  and p["metadata"]["name"].startswith("pod-")]
    check(len(population) == n, f"{len(population)} population pods, want {n}")
    check(all(wmark_ratio(p) == 95 for p in population),
          "a population pod does not have wmarkRatio 95 before the edit")
    rv = api.json("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
    who = holder(h)
    check(who in REPLICAS, f"Lease holder {who!r} is not one of {list(REPLICAS)}")
    pid = h.procs[who].popen.pid
    m0 = replica_metrics(h, who)
    watch = ApiWatch(Endpoint(api.host, api.port, api.ctx, api.headers), "/api/v1/pods",
                     wmark_ratio, resource_version=rv, key_of=namespaced_name)
    rss_before = vm_status(pid)["VmRSS"]
    sampler = Sampler(lambda: vm_status(pid)["VmRSS"], 0.25)
    t0 = time.monotonic()
    cfg = {"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90}},
                               "beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90}}}}
    set_cluster_config(h, "resource-qos-config", cfg)
    def all_changed() -> bool:
        if watch.error:
            raise Check(watch.error)
        return sum(1 for k in watch.seen(90) if k.startswith("scale-") and "/pod-" in k) >= n

    try:
        wait_until(f"all {n} pods to carry wmarkRatio 90", all_changed, 120 + n / 20, 1)
    finally:
        watch.stop()
        sampler.stop()
    done = [t - t0 for k, t in watch.seen(90).items() if k.startswith("scale-") and "/pod-" in k]
    done.sort()
    m1: dict = {}

    def delta(name: str, **labels: str) -> int:
        return round(metric_sum(m1, name, **labels) - metric_sum(m0, name, **labels))

    def events_settled() -> bool:
        # Events leave their queue at the same rate as the patches, after them.
        m1.clear()
        m1.update(replica_metrics(h, who))
        return delta("koord_webhook_reresolve_events_total") >= delta(
            "koord_webhook_reresolve_pods_patched_total", mode="write")

    wait_until("the re-resolver's Events to leave", events_settled, 60, 1)

    fig = {"pods": n, "holder": who,
           "all_changed_s": round(done[-1], 1), "p50_s": round(percentile(done, 50), 1),
           "p99_s": round(percentile(done, 99), 1),
           "patches": delta("koord_webhook_reresolve_pods_patched_total", mode="write"),
           "events_posted": delta("koord_webhook_reresolve_events_total", result="posted"),
           "events_not_posted": delta("koord_webhook_reresolve_events_total")
           - delta("koord_webhook_reresolve_events_total", result="posted"),
           "failed": delta("koord_webhook_reresolve_pods_failed_total"),
           "holder_rss_before_mib": round(rss_before / 1024, 1),
           "holder_rss_peak_mib": round(max(sampler.peak() or 0, rss_before) / 1024, 1),
           "holder_hwm_mib": round(vm_status(pid)["VmHWM"] / 1024, 1)}
    h.results["reresolve"] = fig
    log(f"re-resolution: {fig}")
    check(fig["patches"] == n, f"{fig['patches']} patches for {n} pods")


# -- the appliers' cost on the apiserver -------------------------------------------------


def applier_tree(h: Harness) -> Path:
    """An empty cgroup v2 tree for the appliers' dry runs (kwok pods have no cgroups)."""
    root = h.dir / "cgroup"
    (root / "kubepods").mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    return root


def audit_requests(h: Harness) -> list[tuple[float, str, str]]:
    """The appliers' requests in the audit log: (received at, applier uid, "verb resource").
    A request is counted once: at ResponseComplete, a watch at ResponseStarted (it completes
    only when it ends)."""
    out = []
    path = h.dir / "audit.log"
    if not path.exists():
        return out
    with open(path) as f:
        for line in f:
            ev = json.loads(line)
            stage = "ResponseStarted" if ev.get("verb") == "watch" else "ResponseComplete"
            if ev.get("stage") != stage:
                continue
            ts = ev.get("requestReceivedTimestamp", "").replace("Z", "+00:00")
            out.append((datetime.fromisoformat(ts).timestamp(), ev.get("user", {}).get("uid", "?"),
                        f"{ev.get('verb')} {ev.get('objectRef', {}).get('resource', '?')}"))
    return out


def count_by(requests: list[tuple[float, str, str]], uid: str, start: float,
             end: float) -> dict[str, int]:
    out: dict[str, int] = {}
    for at, who, what in requests:
        if who == uid and start <= at < end:
            out[what] = out.get(what, 0) + 1
    return out


def touch_pods_of(h: Harness, nodes: list[str]) -> int:
    """Changes every pod of these nodes once (a label), as a rollout or a re-resolution would:
    each applier's watch then carries one event per pod of its node."""
    api = h.api()
    touched = 0
    stamp = str(int(time.time()))
    for node in nodes:
        for p in api.list_all("/api/v1/pods", fieldSelector=f"spec.nodeName={node}"):
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            api.json("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}",
                     {"metadata": {"labels": {"scale-touch": stamp}}},
                     content_type="application/merge-patch+json")
            touched += 1
    return touched


def run_appliers(h: Harness, count: int) -> dict:
    """`count` appliers (real `koord-applier run` in dry run), each on its own kwok node, its own
    token (so the audit log tells them apart) and its own byte-counting relay. Two phases per
    applier: the start (its list, until /readyz) and a window of `applier_window_s` in which
    every pod of its node changes once (as a rollout or a re-resolution changes them)."""
    if h.relays is None:
        h.relays = Relays("127.0.0.1", APISERVER_PORT)
    root = applier_tree(h)
    ds = next(d for d in webhookcfg.select(h.rendered, "DaemonSet")
              if d["metadata"]["name"] == "koord-applier")
    env_base = {e["name"]: e["value"]
                for e in ds["spec"]["template"]["spec"]["containers"][0].get("env", [])
                if "value" in e}
    ca = (h.cp_dir / "pki" / "apiserver.crt").read_bytes()
    started = time.time() - 1
    names, ports = [], {}
    for i in range(count):
        uid = f"applier-{i:03d}"
        port = h.relays.add()
        ports[uid] = port
        kc = h.dir / f"{uid}.kubeconfig"
        kc.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {
                "server": f"https://127.0.0.1:{port}",
                "certificate-authority-data": base64.b64encode(ca).decode()}}],
            "users": [{"name": "u", "user": {"token": h.tokens[uid]}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        kc.chmod(0o600)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", **env_base,
               "KUBECONFIG": str(kc), "NODE_NAME": node_name(i)}
        h.start_proc(uid, [h.applier_bin, "--cgroup-root", str(root), "--cgroup-version", "v2",
                           "--cgroup-driver", "cgroupfs", "--dry-run", "run",
                           "--metrics-addr", f"127.0.0.1:{APPLIER_METRICS_PORT + i}"], env)
        names.append(uid)
    try:
        def ready(i: int) -> bool:
            p = h.procs[names[i]]
            if not p.alive():
                raise Fatal(f"{names[i]} exited:\n{p.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{APPLIER_METRICS_PORT + i}/readyz",
                                            timeout=3) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(f"{count} appliers ready (pods listed)",
                   lambda: all(ready(i) for i in range(count)), 120, 1)
        at_ready = {uid: h.relays.counts[port].to_client for uid, port in ports.items()}
        window_start = time.time()
        window = h.size["applier_window_s"]
        time.sleep(window / 2)
        touched = touch_pods_of(h, [node_name(i) for i in range(count)])
        time.sleep(max(0.0, window - (time.time() - window_start)))
        window_end = time.time()
        # The audit log is written asynchronously (batch backend): let it catch up.
        time.sleep(2)
        requests = audit_requests(h)
        per = []
        for uid, port in ports.items():
            c = h.relays.counts[port]
            per.append({
                "start": count_by(requests, uid, started, window_start),
                "window": count_by(requests, uid, window_start, window_end),
                "start_bytes": at_ready[uid],
                "window_bytes": c.to_client - at_ready[uid],
                "bytes_to_apiserver": c.to_server, "connections": c.connections})
    finally:
        for name in names:
            h.stop_proc(name)

    minutes = (window_end - window_start) / 60

    def mean(f) -> float:
        return sum(f(p) for p in per) / len(per)

    return {"appliers": count, "window_min": round(minutes, 2), "pods_touched": touched,
            "start_requests_per_applier": round(mean(lambda p: sum(p["start"].values())), 2),
            "start_bytes_per_applier": round(mean(lambda p: p["start_bytes"])),
            "window_requests_per_applier_per_min": round(
                mean(lambda p: sum(p["window"].values())) / minutes, 2),
            "window_bytes_per_applier_per_min": round(mean(lambda p: p["window_bytes"]) / minutes),
            "window_bytes_per_pod_change": round(
                sum(p["window_bytes"] for p in per) / max(1, touched)),
            "requests_by_verb_total": _sum_verbs([p["start"] for p in per]
                                                 + [p["window"] for p in per]),
            "bytes_to_apiserver_per_applier": round(mean(lambda p: p["bytes_to_apiserver"])),
            "start_bytes_min_max": [min(p["start_bytes"] for p in per),
                                    max(p["start_bytes"] for p in per)],
            "connections_per_applier": round(mean(lambda p: p["connections"]), 2)}


def _sum_verbs(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


@scenario("appliers: requests and bytes one applier costs the apiserver, then as many appliers "
          "as the size says at once (linear: the same per applier)")
def s_appliers(h: Harness) -> None:
    one = run_appliers(h, 1)
    log(f"1 applier: {one}")
    many = run_appliers(h, h.size["appliers"])
    log(f"{h.size['appliers']} appliers: {many}")
    h.results["appliers"] = {"one": one, "many": many}
    check(one["requests_by_verb_total"], "no request of the applier in the audit log")
    # Linear: what one applier costs is what each of many costs (same requests, same bytes per
    # pod of its node), within the noise of timing.
    for key in ("start_requests_per_applier", "start_bytes_per_applier",
                "window_bytes_per_pod_change"):
        a, b = one[key], many[key]
        check(a * 0.75 <= b <= a * 1.25 + 1,
              f"{key}: {a} for one applier, {b} per applier for {many['appliers']}: not linear")


def teardown(h: Harness, passed: list[str], failed: list[str], interrupted: bool) -> None:
    if failed:
        for name, p in h.procs.items():
            print(f"----- last lines of the {name} log ({p.logfile}) -----\n{p.tail(30)}",
                  file=sys.stderr)
    keep = bool(failed) or os.environ.get("KOORD_SCALE_KEEP") == "1"
    h.cleanup(keep=keep and not interrupted)
    h.results["size"] = h.size
    print(f"figure scale {json.dumps(h.results)}", flush=True)


def main() -> int:
    return SUITE.main(Harness(), setup, teardown)


if __name__ == "__main__":
    sys.exit(main())
