#!/usr/bin/env python3
"""End-to-end suite: the whole product in front of a real kube-apiserver, driven with kubectl.

Run it through `tests/e2e/run` (see README.md). Stdlib only (Python 3.11+).

Layout of a run:
  prerequisites -> cargo build -> control-plane.sh build/start (temp dir) -> render manifests/
  -> apply Namespace/RBAC/ServiceAccounts/ConfigMaps -> scenarios -> cleanup (always).

Each scenario prints `PASS <name>` or `FAIL <name>: <reason>` on stdout; the last line is
`N passed, M failed`. Progress goes to stderr. Everything started here is stopped by PID in
`Harness.cleanup`, on success, failure, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

E2E = Path(__file__).resolve().parent
REPO = E2E.parents[1]
sys.path.insert(0, str(E2E))
sys.path.insert(0, str(REPO / "tests" / "lib"))
sys.dont_write_bytecode = True  # no __pycache__ in the repo

import drain_e2e  # noqa: E402
import reresolve_e2e  # noqa: E402
import koordtest  # noqa: E402
from koordtest import webhookcfg  # noqa: E402
# Also suite.X for the scenario modules (reresolve_e2e.py, colocation_e2e.py).
from koordtest.checks import Check, Fatal, check, quantity, wait_until  # noqa: E402,F401
from koordtest.harness import log  # noqa: E402
from koordtest.metrics import parse_metrics  # noqa: E402
from koordtest.procs import Proc, ProcTable, impersonating_kubeconfig  # noqa: E402

CONTROL_PLANE = E2E / "control-plane.sh"
HELM_SH = E2E / "helm.sh"
CHART = REPO / "charts" / "koord-qos"
TESTDATA = E2E / "testdata"

OPT_IN_LABEL = "koordinator.sh/qos-webhook"
QOS_LABEL = "koordinator.sh/qosClass"
RESOLVED = "koordinator.sh/resolved-qos"
MEMORY_QOS = "koordinator.sh/memoryQOS"
MEMORY_LOCALITY = "koordinator.sh/memoryLocality"
EXT_SPEC = "node.koordinator.sh/extended-resource-spec"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
CLUSTER_CM = "ack-slo-config"
POD_CM = "ack-slo-pod-config"
CONFIG_NS = "kube-system"
PAUSE = "registry.k8s.io/pause:3.10"

NS_QOS = "e2e-qos"  # opted in
NS_PLAIN = "e2e-plain"  # not opted in
NS_LATENCY = "e2e-latency"  # opted in, latency pods only
NS_LATE = "e2e-late"  # created without the label, opted in after the apiserver restart
NODE = "e2e-node"
NS_HELM = "koord-helm-e2e"  # the Helm scenario's product namespace (left Terminating: no
                            # namespace controller in this control plane)

# The reference's koordlet line (its Performance Collector page), added to the applier's args.
KOORDLET_LINE = [
    "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true,"
    "CPICollector=true,PSICollector=true",
    "-cpi-collector-interval-seconds=60",
]
IGNORED_GATES_WARNING = ("koordlet gates not implemented by koord-applier, accepted and ignored: "
                         "BECPUEvict, BEMemoryEvict, CgroupReconcile, Accelerators")
BATCH_WARNING = "koord-qos: BE pod admitted with its cpu/memory unchanged: colocation is off"

CGROUP_ROOT = Path("/sys/fs/cgroup")


koordtest.set_log_tag("e2e")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------
# Pods
# ---------------------------------------------------------------------------------------


def pod_manifest(name: str, ns: str, requests=None, limits=None, labels=None, annotations=None,
                 container: str = "app", node: str | None = None) -> dict:
    res: dict = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    meta: dict = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    spec: dict = {"containers": [{"name": container, "image": PAUSE, "resources": res}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def burstable(name: str, ns: str = NS_QOS, **kw) -> dict:
    return pod_manifest(name, ns, requests={"cpu": "100m", "memory": "64Mi"},
                        limits={"memory": "128Mi"}, **kw)


def annotations(pod: dict) -> dict:
    return pod.get("metadata", {}).get("annotations") or {}


def labels(pod: dict) -> dict:
    return pod.get("metadata", {}).get("labels") or {}


def resolved(pod: dict) -> dict:
    raw = annotations(pod).get(RESOLVED)
    check(raw is not None, f"pod {pod['metadata']['name']} has no {RESOLVED} annotation; "
          f"annotations: {annotations(pod)}")
    return json.loads(raw)


# ---------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------


class Harness(koordtest.Harness, ProcTable):
    KUBECTL_TIMEOUT = 60
    SA_TIMEOUT = None  # no controller-manager: ServiceAccount admission is off instead

    def __init__(self) -> None:
        super().__init__("koord-e2e.")
        self.cp_dir = self.dir / "cp"
        self.cp_started = False
        self.procs: dict[str, Proc] = {}
        self.cgroup_dirs: list[Path] = []  # created by us, in creation order
        self.webhook_bin = ""
        self.applier_bin = ""
        self.kubeconfig = self.cp_dir / "kubeconfig"
        self.rendered: list[dict] = []
        self.examples: list[dict] = []  # manifests/examples/ rendered
        self.helm_bin = ""
        self.ca_bundle = ""
        self.webhook_port = 0
        self.webhook_metrics_port = 0
        self.applier_metrics_port = 0
        self.webhook_kubeconfig = Path()
        self.mwc: dict = {}
        # Named figures (latency, re-resolution), printed at the end as JSON lines.
        self.figures: dict = {}  # type: ignore[assignment]

    # -- kubectl (the rest in koordtest.Harness) -----------------------------------------

    def apply(self, obj: dict | list[dict]) -> None:
        items = obj if isinstance(obj, list) else [obj]
        self.apply_obj({"apiVersion": "v1", "kind": "List", "items": items})

    def create_pod(self, pod: dict) -> dict:
        """`kubectl create`; returns the object as stored (after admission)."""
        return json.loads(self.kubectl("create", "-f", "-", "-o", "json",
                                       input=json.dumps(pod)).stdout)

    def get_pod(self, ns: str, name: str) -> dict:
        return self.pod(ns, name)

    def rendered_cm(self, name: str) -> dict:
        for o in webhookcfg.select(self.examples, "ConfigMap"):
            if o["metadata"]["name"] == name and o["metadata"].get("namespace") == CONFIG_NS:
                return o
        raise Fatal(f"manifests/examples/ renders no ConfigMap {CONFIG_NS}/{name}")

    # -- control plane -------------------------------------------------------------------

    def cp_state(self) -> dict:
        env = {}
        for line in (self.cp_dir / "state.env").read_text().splitlines():
            k, _, v = line.partition("=")
            env[k] = v
        return env

    def impersonating_kubeconfig(self, name: str, namespace: str, sa: str) -> Path:
        """A kubeconfig acting as the ServiceAccount `sa` (koordtest.procs)."""
        port = self.cp_state()["APISERVER_PORT"]
        return impersonating_kubeconfig(
            self.dir / f"{name}.kubeconfig", f"https://127.0.0.1:{port}",
            (self.cp_dir / "pki" / "apiserver.crt").read_bytes(),
            (self.cp_dir / "token").read_text().strip(), namespace, sa)

    # -- processes -----------------------------------------------------------------------

    def http_get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def metrics(self, port: int) -> dict[tuple[str, frozenset], float]:
        return parse_metrics(self.http_get(port, "/metrics")[1])

    def metric_sum(self, port: int, name: str, **want: str) -> float:
        return sum(v for (n, labs), v in self.metrics(port).items()
                   if n == name and all((k, w) in labs for k, w in want.items()))

    # -- cleanup -------------------------------------------------------------------------

    def cleanup(self, keep: bool) -> None:
        for name, p in reversed(list(self.procs.items())):  # the applier, extra replicas first
            try:
                p.stop()
            except Exception as e:  # noqa: BLE001
                log(f"stopping {name}: {e}")
        if self.cp_started:
            r = subprocess.run([str(CONTROL_PLANE), "stop", str(self.cp_dir)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                log(f"control-plane.sh stop failed: {r.stderr.strip()}")
        for d in reversed(self.cgroup_dirs):  # leaves first
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                log(f"could not remove cgroup {d}: {e}")
        if keep:
            log(f"kept logs and state in {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Prerequisites, build, deploy
# ---------------------------------------------------------------------------------------


def prerequisites(h: Harness) -> None:
    problems = []
    if sys.version_info < (3, 11):
        problems.append(f"Python 3.11+ needed, this is {sys.version.split()[0]}")
    if os.geteuid() != 0:
        problems.append("must run as root (the applier scenario writes real cgroup v1 files)")
    mounts = Path("/proc/mounts").read_text()
    for ctrl in ("memory", "cpu"):
        if not re.search(rf"^\S+ {CGROUP_ROOT / ctrl} cgroup \S*\b{ctrl}\b", mounts, re.M):
            problems.append(f"no cgroup v1 '{ctrl}' controller mounted at {CGROUP_ROOT / ctrl}")
    for tool in ("cargo", "openssl", "curl"):
        if not shutil.which(tool):
            problems.append(f"{tool} not on PATH")
    # kubectl: found (or built) by control-plane.sh build, see build().
    if problems:
        raise Fatal("missing prerequisites:\n  - " + "\n  - ".join(problems))


def build(h: Harness) -> None:
    bin_dir = os.environ.get("KOORD_E2E_BIN_DIR")
    if bin_dir:
        # Prebuilt binaries (a CI artifact, or a quick re-run while the tree does not build).
        target = Path(bin_dir)
        h.figures["profile"] = f"prebuilt {bin_dir}"
        log(f"using prebuilt binaries from {bin_dir} (KOORD_E2E_BIN_DIR); no cargo build")
    else:
        profile = os.environ.get("KOORD_E2E_PROFILE", "debug")
        if profile not in ("debug", "release"):
            raise Fatal(f"KOORD_E2E_PROFILE must be debug or release, not {profile!r}")
        argv = ["cargo", "build", "-p", "koord-webhook", "-p", "koord-applier"]
        if profile == "release":
            argv.append("--release")
        log(f"building the Rust binaries: {' '.join(argv)}")
        t0 = time.monotonic()
        r = subprocess.run(argv, cwd=REPO, stdout=sys.stderr, stderr=sys.stderr)
        if r.returncode != 0:
            raise Fatal(f"`{' '.join(argv)}` failed (exit {r.returncode}); see the output above")
        log(f"cargo build done in {time.monotonic() - t0:.0f}s")
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / profile
        h.figures["profile"] = profile
    h.webhook_bin = str(target / "koord-webhook")
    h.applier_bin = str(target / "koord-applier")
    for b in (h.webhook_bin, h.applier_bin):
        if not os.access(b, os.X_OK):
            raise Fatal(f"{b} is missing or not executable")

    log("control plane: control-plane.sh build (compiles kube-apiserver and etcd on first use)")
    t0 = time.monotonic()
    rc, out, errors = run_streaming([str(CONTROL_PLANE), "build"])
    if rc != 0:
        raise Fatal("the control plane could not be built: "
                    + ("; ".join(errors) or f"control-plane.sh build exited {rc}")
                    + " (the suite needs Go and the Go module proxy on first use)")
    log(f"control plane binaries ready in {time.monotonic() - t0:.0f}s: " + " ".join(out.split()))
    # build made a kubectl of the server's version if none was installed: use it.
    r = subprocess.run([str(CONTROL_PLANE), "kubectl"], capture_output=True, text=True)
    if r.returncode != 0:
        raise Fatal(f"no kubectl after control-plane.sh build: {r.stderr.strip()}")
    h.kubectl_bin = r.stdout.strip()
    log(f"kubectl: {h.kubectl_bin}")

    log("helm: helm.sh build (compiles helm from its Go module on first use)")
    t0 = time.monotonic()
    rc, out, errors = run_streaming([str(HELM_SH), "build"])
    if rc != 0:
        raise Fatal("helm could not be built: " + ("; ".join(errors) or f"helm.sh build exited {rc}")
                    + " (the suite needs Go and the Go module proxy on first use)")
    h.helm_bin = out.strip().splitlines()[-1]
    log(f"helm ready in {time.monotonic() - t0:.0f}s: {h.helm_bin}")


def run_streaming(argv: list[str]) -> tuple[int, str, list[str]]:
    """Runs argv with its stderr streamed to ours (long builds show progress in CI logs);
    returns the exit code, stdout and the `error:` lines of stderr."""
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True)
        errors = []
        assert p.stderr is not None
        for line in p.stderr:
            sys.stderr.write(line)
            if "error:" in line:
                errors.append(line.strip())
        rc = p.wait()
        out.seek(0)
        return rc, out.read(), errors[-3:]


def start_control_plane(h: Harness) -> None:
    h.cp_started = True  # from here on, cleanup runs `stop` (harmless if nothing started)
    rc, out, errors = run_streaming([str(CONTROL_PLANE), "start", str(h.cp_dir)])
    if rc != 0:
        raise Fatal("control-plane.sh start failed: " + ("; ".join(errors) or f"exit {rc}"))
    for line in out.splitlines():
        k, _, v = line.partition("=")
        if k == "KUBECONFIG":
            h.kubeconfig = Path(v)


def workload_env(obj: dict, container: str | None = None) -> dict:
    """The literal `env` values of a rendered Deployment/DaemonSet's first (or named)
    container, so the process runs with the settings the manifests give it."""
    containers = obj["spec"]["template"]["spec"]["containers"]
    c = next((c for c in containers if container in (None, c["name"])), containers[0])
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def deploy_base(h: Harness) -> None:
    """Renders manifests/ and manifests/examples/, creates the test namespaces. The product
    itself is installed by the scenarios: first with Helm (and uninstalled), then with
    `kubectl apply -k manifests/` as the README says."""
    manifests = os.environ.get("KOORD_E2E_MANIFESTS", str(REPO / "manifests"))
    h.rendered = webhookcfg.render(h.kubectl_bin, manifests)
    h.examples = webhookcfg.render(h.kubectl_bin, str(Path(manifests) / "examples"))
    kinds = [o["kind"] for o in h.rendered]
    log(f"manifests/ renders: {', '.join(sorted(set(kinds)))}")
    if "ConfigMap" in kinds:
        raise Fatal("manifests/ renders a ConfigMap: the base must install none")
    h.rendered_cm(CLUSTER_CM)
    h.rendered_cm(POD_CM)
    for ns, opt in ((NS_QOS, True), (NS_PLAIN, False), (NS_LATENCY, True), (NS_LATE, False)):
        h.namespace(ns, opt)


def webhook_deployment(h: Harness) -> dict:
    deps = [d for d in webhookcfg.select(h.rendered, "Deployment")
            if "webhook" in d["metadata"]["name"]]
    if len(deps) != 1:
        raise Fatal(f"expected one webhook Deployment in manifests/, found {len(deps)}")
    return deps[0]


# The replicas' identities in the re-resolver's Lease (the Deployment sets KOORD_POD_NAME from
# the pod name; a fieldRef is not a literal value, so the suite names them).
WEBHOOK_ID = "koord-webhook-a"


def start_webhook(h: Harness, name: str = "webhook", identity: str = WEBHOOK_ID,
                  ports: tuple[int, int] | None = None, extra_env: dict | None = None) -> Proc:
    """Starts `koord-webhook serve` in-cluster mode as the webhook ServiceAccount. The default
    instance is the one the MutatingWebhookConfiguration calls (h.webhook_port); `ports`
    (listen, metrics) start another replica beside it; `extra_env` adds flags' variables."""
    dep = webhook_deployment(h)
    if not h.ca_bundle:
        certs = h.dir / "certs"
        r = subprocess.run([h.webhook_bin, "certs", "--out", str(certs), "--ip", "127.0.0.1"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Fatal(f"koord-webhook certs failed: {r.stderr.strip()}")
        h.ca_bundle = r.stdout.strip()
        h.webhook_port = free_port()
        h.webhook_metrics_port = free_port()
        sa = dep["spec"]["template"]["spec"].get("serviceAccountName", "default")
        h.webhook_kubeconfig = h.impersonating_kubeconfig(
            "webhook", dep["metadata"]["namespace"], sa)
    port, metrics_port = ports or (h.webhook_port, h.webhook_metrics_port)
    # No Service in front of these replicas: nothing to wait for when one is stopped, so no
    # shutdown delay (drain_e2e.py puts replicas behind one and sets it).
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", **workload_env(dep),
           "KUBECONFIG": str(h.webhook_kubeconfig), "KOORD_POD_NAME": identity,
           "KOORD_SHUTDOWN_DELAY": "0s", **(extra_env or {})}
    certs = h.dir / "certs"
    argv = [h.webhook_bin, "serve",
            "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key")]
    p = h.start_proc(name, argv, env)

    def ready():
        if not p.alive():
            raise Fatal(f"koord-webhook serve exited ({p.popen.returncode}):\n{p.tail()}")
        return h.http_get(metrics_port, "/readyz")[0] == 200

    try:
        wait_until(f"{name} /readyz", ready, 60, 0.2)
    except Check as e:
        raise Fatal(f"{e}\n--- {name} log ---\n{p.tail()}") from None
    return p


def register_webhook(h: Harness) -> None:
    rendered = webhookcfg.only(h.rendered, webhookcfg.MWC_KIND)
    h.mwc = webhookcfg.service_to_url(rendered, "127.0.0.1", h.webhook_port, h.ca_bundle)
    (h.dir / "mwc.json").write_text(json.dumps(h.mwc, indent=1))
    h.apply(h.mwc)
    # The apiserver picks the configuration up through an informer: probe with a
    # server-side dry run until the pod comes back mutated.
    probe = burstable("probe", NS_QOS)

    def mutated():
        r = h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                      input=json.dumps(probe))
        return RESOLVED in annotations(json.loads(r.stdout))

    wait_until("the MutatingWebhookConfiguration to take effect", mutated, 30, 0.25)


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

SUITE = koordtest.Suite("KOORD_E2E_ONLY")
scenario = SUITE.scenario


@scenario("webhookcfg: Service -> url + caBundle transformation (unit tests)")
def s_unit(h: Harness) -> None:
    os.environ["KUBECTL"] = h.kubectl_bin
    import test_webhookcfg
    suite = unittest.defaultTestLoader.loadTestsFromModule(test_webhookcfg)
    res = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(suite)
    check(res.wasSuccessful(), f"{len(res.failures)} failures, {len(res.errors)} errors")
    check(res.skipped == [], f"skipped: {res.skipped}")


@scenario("control plane: kube-apiserver + etcd up", base=True)
def s_control_plane(h: Harness) -> None:
    v = json.loads(h.kubectl("version", "-o", "json").stdout)
    log(f"server version {v['serverVersion']['gitVersion']}")


def helm(h: Harness, *args: str, check_rc: bool = True) -> subprocess.CompletedProcess:
    argv = [h.helm_bin, f"--kubeconfig={h.kubeconfig}", *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    if check_rc and p.returncode != 0:
        raise Check(f"`helm {' '.join(args)}` failed ({p.returncode}): {p.stderr.strip()}")
    return p


def helm_objects(h: Harness, *sets: str) -> list[dict]:
    """What `helm template` renders with these values, as JSON objects."""
    args = ["template", "koord-qos", str(CHART)]
    for kv in sets:
        args += ["--set", kv]
    return webhookcfg.yaml_to_objects(h.kubectl_bin, helm(h, *args).stdout)


def object_ref(o: dict) -> list[str]:
    """kubectl get arguments for one rendered object."""
    kind = o["kind"]
    group = o["apiVersion"].rpartition("/")[0]
    res = f"{kind.lower()}.{group}" if group else kind.lower()
    ns = o["metadata"].get("namespace")
    return [res, o["metadata"]["name"], *(["-n", ns] if ns else [])]


@scenario("helm install then helm uninstall on the real control plane: every object of the chart "
          "is created as rendered (featureGates as the reference sets them), then removed")
def s_helm(h: Harness) -> None:
    sets = [f"namespace.name={NS_HELM}",
            # The reference's own line, as the shell hands it to helm.
            "featureGates=CPICollector=true,PSICollector=true"]
    objects = helm_objects(h, *sets)
    check(len(objects) >= 14, f"helm template rendered {len(objects)} objects")
    check(not webhookcfg.select(objects, "ConfigMap"), "the chart installs ConfigMaps by default")
    args = ["install", "koord-qos", str(CHART), "--namespace", "default", "--wait=false"]
    for kv in sets:
        args += ["--set", kv]
    helm(h, *args)
    try:
        status = json.loads(helm(h, "status", "koord-qos", "-n", "default", "-o", "json").stdout)
        check(status["info"]["status"] == "deployed", f"release status {status['info']['status']}")
        for o in objects:
            got = h.kjson("get", *object_ref(o))
            labels = got["metadata"].get("labels") or {}
            owner = (got["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name")
            check(labels.get("app.kubernetes.io/managed-by") == "Helm" and owner == "koord-qos",
                  f"{o['kind']} {o['metadata']['name']} not owned by the release: {labels}")
        ds = h.kjson("get", "daemonset", "koord-applier", "-n", NS_HELM)
        c = ds["spec"]["template"]["spec"]["containers"][0]
        check(c["args"] == ["run", "--feature-gates=CPICollector=true,PSICollector=true"],
              f"applier args {c['args']}")
        check("PERFMON" in c["securityContext"]["capabilities"]["add"],
              f"capabilities {c['securityContext']['capabilities']}")
        mwc = h.kjson("get", "mutatingwebhookconfiguration", "koord-webhook")
        check(mwc["webhooks"][0]["clientConfig"]["service"]["namespace"] == NS_HELM,
              f"clientConfig {mwc['webhooks'][0]['clientConfig']}")
        log(f"helm install: {len(objects)} objects created and owned by the release")
    finally:
        helm(h, "uninstall", "koord-qos", "-n", "default")
    left = []
    for o in objects:
        r = h.kubectl("get", *object_ref(o), "-o", "json", check_rc=False)
        if r.returncode != 0:
            continue
        got = json.loads(r.stdout)
        # Without a namespace controller here a deleted Namespace stays Terminating.
        if o["kind"] == "Namespace" and got["metadata"].get("deletionTimestamp"):
            continue
        left.append(f"{o['kind']} {o['metadata']['name']}")
    check(not left, f"left after helm uninstall: {left}")
    r = helm(h, "status", "koord-qos", "-n", "default", check_rc=False)
    check(r.returncode != 0, "the release still exists after uninstall")


def install_base(h: Harness) -> str:
    """`kubectl apply -k manifests/`, as the README's first step; returns kubectl's output.
    The in-cluster MutatingWebhookConfiguration it creates targets a Service no pod backs here
    (no kubelet), so it is deleted: the suite registers its own (url + caBundle) once the
    webhook process runs."""
    manifests = os.environ.get("KOORD_E2E_MANIFESTS", str(REPO / "manifests"))
    out = h.kubectl("apply", "-k", manifests).stdout
    log("kubectl apply -k manifests/:\n" + out.strip())
    h.kubectl("delete", "mutatingwebhookconfiguration", "koord-webhook")
    return out


def install_examples(h: Harness) -> None:
    """`kubectl apply -k manifests/examples/`, the README's second step."""
    manifests = os.environ.get("KOORD_E2E_MANIFESTS", str(REPO / "manifests"))
    h.kubectl("apply", "-k", str(Path(manifests) / "examples"))


@scenario("kubectl apply -k manifests/ on a cluster that has its own ack-slo-config leaves it "
          "byte for byte; then the README's second step, kubectl apply -k manifests/examples/")
def s_install(h: Harness) -> None:
    own = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": CLUSTER_CM, "namespace": CONFIG_NS,
                        "labels": {"owner": "the-cluster-admin"}},
           "data": {"resource-qos-config": json.dumps({"clusterStrategy": {
                        "lsClass": {"memoryLocality": {"policy": "bestEffort"}}}}),
                    "colocation-config": json.dumps({"enable": True,
                                                     "cpuReclaimThresholdPercent": 55})}}
    h.kubectl("create", "-f", "-", input=json.dumps(own))
    before = h.kubectl("get", "configmap", "-n", CONFIG_NS, CLUSTER_CM, "-o", "json").stdout
    out = install_base(h)
    after = h.kubectl("get", "configmap", "-n", CONFIG_NS, CLUSTER_CM, "-o", "json").stdout
    check(after == before, f"ack-slo-config changed:\nbefore {before}\nafter  {after}")
    check("configmap" not in out.lower(), f"apply touched a ConfigMap: {out}")
    r = h.kubectl("get", "configmap", "-n", CONFIG_NS, POD_CM, check_rc=False)
    check(r.returncode != 0, f"{POD_CM} exists after installing the base")
    # Step 2 of the quick start, on a cluster without ConfigMaps of its own.
    h.kubectl("delete", "configmap", "-n", CONFIG_NS, CLUSTER_CM)
    install_examples(h)
    for name in (CLUSTER_CM, POD_CM):
        cm = h.kjson("get", "configmap", "-n", CONFIG_NS, name)
        check(cm["data"] == h.rendered_cm(name)["data"], f"{name} differs from the render")


def latency(h: Harness, tag: str, n: int = 100) -> dict:
    """n sequential pod creations over one keep-alive HTTPS connection, as a controller
    would send them: the apiserver path (and the webhook when registered), not kubectl."""
    port = int(h.cp_state()["APISERVER_PORT"])
    token = (h.cp_dir / "token").read_text().strip()
    ctx = ssl.create_default_context(cafile=str(h.cp_dir / "pki" / "apiserver.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    hdr = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
           "Accept": "application/json"}
    times, mutated = [], 0
    warmup = 5
    for i in range(n + warmup):
        pod = burstable(f"lat-{tag}-{i}", NS_LATENCY)
        body = json.dumps(pod)
        t0 = time.perf_counter()
        conn.request("POST", f"/api/v1/namespaces/{NS_LATENCY}/pods", body=body, headers=hdr)
        resp = conn.getresponse()
        data = resp.read()
        dt = time.perf_counter() - t0
        check(resp.status == 201, f"POST pod: HTTP {resp.status}: {data[:300]!r}")
        if i >= warmup:
            times.append(dt * 1000)
            mutated += RESOLVED in annotations(json.loads(data))
    conn.close()
    times.sort()

    def pct(p):  # nearest rank
        return times[max(0, min(len(times) - 1, int(-(-p * len(times) // 100)) - 1))]

    fig = {"n": n, "p50_ms": round(pct(50), 2), "p99_ms": round(pct(99), 2),
           "mean_ms": round(sum(times) / len(times), 2),
           "max_ms": round(times[-1], 2), "mutated": mutated}
    h.kubectl("delete", "pods", "-n", NS_LATENCY, "--all", "--wait=false")
    return fig


@scenario("latency: 100 pod creations without the webhook registered")
def s_latency_without(h: Harness) -> None:
    fig = latency(h, "off")
    check(fig["mutated"] == 0, f"{fig['mutated']} pods mutated with no webhook registered")
    h.figures["without_webhook"] = fig
    log(f"latency without webhook: {fig}")


@scenario("no opt-in label: pod untouched (no webhook registered yet, baseline)")
def s_baseline(h: Harness) -> None:
    pod = h.create_pod(burstable("baseline", NS_PLAIN))
    check(RESOLVED not in annotations(pod), "mutated without a webhook")
    check(QOS_LABEL not in labels(pod), "qosClass label without a webhook")


@scenario("webhook: koord-webhook certs + serve (in-cluster, as its ServiceAccount) + "
          "MutatingWebhookConfiguration from manifests/ with url + caBundle", base=True)
def s_webhook_up(h: Harness) -> None:
    start_webhook(h)
    register_webhook(h)
    wh = h.kjson("get", "mutatingwebhookconfiguration", h.mwc["metadata"]["name"])["webhooks"]
    rendered = webhookcfg.only(h.rendered, webhookcfg.MWC_KIND)["webhooks"]
    for got, want in zip(wh, rendered, strict=True):
        for key in ("failurePolicy", "namespaceSelector", "objectSelector", "rules",
                    "sideEffects", "timeoutSeconds", "reinvocationPolicy", "matchPolicy"):
            if key in want:
                check(got.get(key) == want[key],
                      f"{key} stored as {got.get(key)!r}, rendered {want[key]!r}")
        check(got["clientConfig"]["url"].startswith("https://127.0.0.1:"), "url not set")
    log(f"registered: failurePolicy={wh[0].get('failurePolicy')} "
        f"timeoutSeconds={wh[0].get('timeoutSeconds')} url={wh[0]['clientConfig']['url']}")


@scenario("latency: 100 pod creations with the webhook registered")
def s_latency_with(h: Harness) -> None:
    def hist():
        m = h.metrics(h.webhook_metrics_port)
        return (sum(v for (n, _), v in m.items() if n == "koord_webhook_admission_duration_seconds_sum"),
                sum(v for (n, _), v in m.items() if n == "koord_webhook_admission_duration_seconds_count"))
    s0, c0 = hist()
    fig = latency(h, "on")
    s1, c1 = hist()
    if c1 > c0:  # the webhook's own view: request in to response out
        fig["webhook_side_mean_ms"] = round((s1 - s0) / (c1 - c0) * 1000, 3)
    check(fig["mutated"] == fig["n"], f"only {fig['mutated']} of {fig['n']} pods mutated")
    h.figures["with_webhook"] = fig
    log(f"latency with webhook: {fig}")


@scenario("a pod in a namespace without the opt-in label is untouched")
def s_untouched(h: Harness) -> None:
    pod = h.create_pod(pod_manifest("plain-be", NS_PLAIN))  # BestEffort: would get BE
    check(RESOLVED not in annotations(pod), f"mutated: {annotations(pod)}")
    check(QOS_LABEL not in labels(pod), f"labelled: {labels(pod)}")
    h.kubectl("apply", "-n", NS_PLAIN, "-f", str(TESTDATA / "redis-demo.yaml"))
    pod = h.get_pod(NS_PLAIN, "redis-demo")
    check(RESOLVED not in annotations(pod), "redis-demo mutated in a namespace without opt-in")


@scenario("redis-demo with opt-in: label + resolved-qos byte for byte as `koord-webhook resolve`")
def s_redis(h: Harness) -> None:
    h.kubectl("apply", "-n", NS_QOS, "-f", str(TESTDATA / "redis-demo.yaml"))
    pod = h.get_pod(NS_QOS, "redis-demo")
    check(labels(pod).get(QOS_LABEL) == "LS", f"label: {labels(pod)}")
    stored = annotations(pod).get(RESOLVED)
    check(stored is not None, "no resolved-qos annotation")
    cc, nc = h.dir / "cluster-cm.json", h.dir / "pod-cm.json"
    cc.write_text(json.dumps(h.kjson("get", "configmap", "-n", CONFIG_NS, CLUSTER_CM)))
    nc.write_text(json.dumps(h.kjson("get", "configmap", "-n", CONFIG_NS, POD_CM)))
    r = subprocess.run([h.webhook_bin, "resolve", "-f", str(TESTDATA / "redis-demo.yaml"),
                        "-n", NS_QOS, "--cluster-config", str(cc), "--namespace-config", str(nc),
                        "-o", "json"], capture_output=True, text=True)
    check(r.returncode == 0, f"koord-webhook resolve failed: {r.stderr}")
    pods = [o for o in webhookcfg.parse_json_stream(r.stdout) if o.get("kind") == "Pod"]
    check(len(pods) == 1, f"resolve printed {len(pods)} pods")
    offline = annotations(pods[0]).get(RESOLVED)
    check(stored == offline, f"stored  {stored}\nresolve {offline}")
    rq = json.loads(stored)
    check(rq["memoryQOS"]["enabled"] and rq["memoryQOS"]["policy"] == "auto",
          f"memoryQOS: {rq['memoryQOS']}")
    desc = h.kubectl("describe", "pod", "-n", NS_QOS, "redis-demo").stdout
    check(RESOLVED in desc, "kubectl describe does not show the resolved-qos annotation")


@scenario("Burstable pod without a label gets LS, BestEffort gets BE")
def s_default_labels(h: Harness) -> None:
    pod = h.create_pod(burstable("burstable-nolabel"))
    check(labels(pod).get(QOS_LABEL) == "LS", f"Burstable labels: {labels(pod)}")
    check(resolved(pod)["qosClassSource"] == "kubernetes-qos", f"{resolved(pod)}")
    pod = h.create_pod(pod_manifest("besteffort-nolabel", NS_QOS))
    check(labels(pod).get(QOS_LABEL) == "BE", f"BestEffort labels: {labels(pod)}")
    check(resolved(pod)["qosClass"] == "BE", f"{resolved(pod)}")


def set_colocation(h: Harness, enable: bool) -> None:
    """Sets colocation-config {"enable": ...} in the cluster ConfigMap and waits until the
    webhook has reloaded it."""
    before = reload_count(h, "cluster")
    patch_cm(h, CLUSTER_CM, "colocation-config", json.dumps({"enable": enable}))
    wait_metric_increase(h, "koord_webhook_config_reloads_total", before, config="cluster")


def be_pod(name: str, **kw) -> dict:
    return pod_manifest(name, NS_QOS, requests={"cpu": "500m", "memory": "256Mi"},
                        limits={"cpu": "2", "memory": "512Mi"}, labels={QOS_LABEL: "BE"}, **kw)


@scenario("colocation off (no colocation-config): a BE pod keeps its cpu/memory, and kubectl "
          "prints the webhook's warning saying why")
def s_batch_off(h: Harness) -> None:
    r = h.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(be_pod("be-colocation-off")))
    log(f"kubectl create said on stderr: {r.stderr.strip()}")
    check(f"Warning: {BATCH_WARNING}" in r.stderr, f"no warning on stderr: {r.stderr!r}")
    pod = h.get_pod(NS_QOS, "be-colocation-off")
    res = pod["spec"]["containers"][0]["resources"]
    check(quantity(res["requests"]["cpu"]) == 0.5 and quantity(res["limits"]["memory"]) == 512 * 2**20,
          f"cpu/memory changed: {res}")
    check(BATCH_CPU not in res.get("requests", {}) and BATCH_MEMORY not in res.get("limits", {}),
          f"batch resources without colocation: {res}")
    check(EXT_SPEC not in annotations(pod), f"{EXT_SPEC} written: {annotations(pod)}")
    rq = resolved(pod)
    check(rq["qosClass"] == "BE" and "batch" not in rq, f"resolved-qos: {rq}")
    # The memory numbers are based on the memory the pod kept.
    wmark = rq["memoryQOS"]["containers"]["app"]["memory.wmark_high"]
    check(wmark == (512 * 2**20 // 4096 * 95 // 100) * 4096, f"memory.wmark_high {wmark}")
    # `koord-webhook resolve` with the cluster's ConfigMap says the same, and why.
    cc = h.dir / "cluster-cm-off.json"
    cc.write_text(json.dumps(h.kjson("get", "configmap", "-n", CONFIG_NS, CLUSTER_CM)))
    pf = h.dir / "be-off.json"
    pf.write_text(json.dumps(be_pod("be-colocation-off")))
    r = subprocess.run([h.webhook_bin, "resolve", "-f", str(pf), "--cluster-config", str(cc),
                        "--explain", "-o", "json"], capture_output=True, text=True)
    check(r.returncode == 0, f"resolve failed: {r.stderr}")
    check("not translated: colocation is off" in r.stderr and BATCH_WARNING in r.stderr,
          f"resolve --explain: {r.stderr}")
    offline = [o for o in webhookcfg.parse_json_stream(r.stdout) if o.get("kind") == "Pod"][0]
    check(annotations(offline).get(RESOLVED) == annotations(pod)[RESOLVED],
          "resolve and the webhook disagree")


@scenario("colocation on (colocation-config enable: true, read live): a BE pod with cpu/memory is "
          "stored with kubernetes.io/batch-cpu / batch-memory")
def s_batch(h: Harness) -> None:
    try:
        set_colocation(h, True)
        r = h.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(be_pod("be-batch")))
        check("Warning" not in r.stderr, f"a warning with colocation on: {r.stderr!r}")
    finally:
        restore_configmaps(h)
    pod = h.get_pod(NS_QOS, "be-batch")  # what the apiserver persisted
    res = pod["spec"]["containers"][0]["resources"]
    check("cpu" not in res.get("requests", {}) and "memory" not in res.get("requests", {}),
          f"cpu/memory requests left: {res}")
    check("cpu" not in res.get("limits", {}) and "memory" not in res.get("limits", {}),
          f"cpu/memory limits left: {res}")
    want = {"requests": {BATCH_CPU: 500, BATCH_MEMORY: 256 * 2**20},
            "limits": {BATCH_CPU: 2000, BATCH_MEMORY: 512 * 2**20}}
    for kind, exp in want.items():
        for key, val in exp.items():
            got = res.get(kind, {}).get(key)
            check(got is not None and quantity(got) == val, f"{kind}[{key}] = {got!r}, want {val}")
    check(EXT_SPEC in annotations(pod), f"no {EXT_SPEC} annotation")
    batch = resolved(pod).get("batch")
    check(batch is not None, "resolved-qos has no batch section")
    c = batch["containers"]["app"]
    check(c == {"cpu.shares": 512, "cpu.cfs_quota_us": 200000,
                "memory.limit_in_bytes": 512 * 2**20}, f"batch: {c}")
    check(pod["status"].get("qosClass") == "BestEffort", f"status.qosClass {pod['status']}")


@scenario("out-of-range annotation: rejected, kubectl apply prints the webhook's message")
def s_reject(h: Harness) -> None:
    bad = burstable("bad-annotation",
                    annotations={MEMORY_QOS: '{"policy":"auto","minLimitPercent":150}'})
    r = h.kubectl("apply", "-f", "-", input=json.dumps(bad), check_rc=False)
    check(r.returncode != 0, "kubectl apply succeeded")
    msg = r.stderr.strip()
    log(f"kubectl apply said: {msg}")
    check("denied the request" in msg and "admission webhook" in msg, f"not a webhook denial: {msg}")
    check("minLimitPercent" in msg, f"message does not name the field: {msg}")
    r = h.kubectl("get", "pod", "-n", NS_QOS, "bad-annotation", check_rc=False)
    check(r.returncode != 0, "the rejected pod exists")


def merged_cluster_config(h: Harness, **ls_memory_qos) -> str:
    raw = h.rendered_cm(CLUSTER_CM)["data"]["resource-qos-config"]
    cfg = json.loads(raw)
    cs = cfg.setdefault("clusterStrategy", {})
    cs.setdefault("lsClass", {}).setdefault("memoryQOS", {}).update(ls_memory_qos)
    return json.dumps(cfg)


def patch_cm(h: Harness, name: str, key: str, value: str) -> None:
    h.kubectl("patch", "configmap", "-n", CONFIG_NS, name, "--type", "merge",
              "-p", json.dumps({"data": {key: value}}))


def wait_metric_increase(h: Harness, name: str, before: float, timeout: float = 15, **labs):
    def up():
        return h.metric_sum(h.webhook_metrics_port, name, **labs) > before
    wait_until(f"{name}{labs} to increase", up, timeout, 0.1)


def reload_count(h: Harness, source: str) -> float:
    return h.metric_sum(h.webhook_metrics_port, "koord_webhook_config_reloads_total",
                        config=source)


def error_count(h: Harness, source: str) -> float:
    return h.metric_sum(h.webhook_metrics_port, "koord_webhook_config_errors_total",
                        config=source)


def restore_configmaps(h: Harness) -> None:
    for name in (CLUSTER_CM, POD_CM):
        cm = h.rendered_cm(name)
        h.kubectl("replace", "-f", "-", input=json.dumps(cm))


@scenario("editing ack-slo-config changes the next pod without a restart; a broken edit changes "
          "nothing and pods are still created")
def s_cluster_cm(h: Harness) -> None:
    try:
        before = reload_count(h, "cluster")
        patch_cm(h, CLUSTER_CM, "resource-qos-config",
                 merged_cluster_config(h, enable=True, throttlingPercent=80))
        wait_metric_increase(h, "koord_webhook_config_reloads_total", before, config="cluster")
        rq = resolved(h.create_pod(burstable("cm-edit-1")))["memoryQOS"]
        check(rq["enabled"] and rq["source"] == "cluster-config"
              and rq["params"]["throttlingPercent"] == 80,
              f"after the edit: {rq}")
        check(rq["containers"]["app"]["memory.high"] == (128 * 2**20 * 80 // 100) // 4096 * 4096,
              f"memory.high {rq['containers']['app']['memory.high']}")
        errors = error_count(h, "cluster")
        patch_cm(h, CLUSTER_CM, "resource-qos-config", '{"clusterStrategy": {"lsClass": ')
        wait_metric_increase(h, "koord_webhook_config_errors_total", errors, config="cluster")
        pod = h.create_pod(burstable("cm-broken-1"))
        check(resolved(pod)["memoryQOS"] == rq, f"broken edit changed the result: {resolved(pod)}")
        check(h.metric_sum(h.webhook_metrics_port, "koord_webhook_config_valid",
                           config="cluster") == 0, "config_valid{cluster} is not 0")
    finally:
        restore_configmaps(h)


@scenario("editing ack-slo-pod-config changes the next pod without a restart; a broken edit "
          "changes nothing")
def s_pod_cm(h: Harness) -> None:
    try:
        before = reload_count(h, "namespace")
        patch_cm(h, POD_CM, "memory-qos",
                 json.dumps({"enabledNamespaces": [NS_QOS], "disabledNamespaces": []}))
        wait_metric_increase(h, "koord_webhook_config_reloads_total", before, config="namespace")
        rq = resolved(h.create_pod(burstable("podcm-enabled")))["memoryQOS"]
        check(rq["enabled"] and rq["source"] == "namespace-config", f"enabledNamespaces: {rq}")

        before = reload_count(h, "namespace")
        patch_cm(h, POD_CM, "memory-qos",
                 json.dumps({"enabledNamespaces": [], "disabledNamespaces": [NS_QOS]}))
        wait_metric_increase(h, "koord_webhook_config_reloads_total", before, config="namespace")
        rq = resolved(h.create_pod(burstable("podcm-disabled")))["memoryQOS"]
        check(not rq["enabled"] and rq["source"] == "namespace-config", f"disabledNamespaces: {rq}")

        errors = error_count(h, "namespace")
        patch_cm(h, POD_CM, "memory-qos", '{"enabledNamespaces": "not a list"')
        wait_metric_increase(h, "koord_webhook_config_errors_total", errors, config="namespace")
        pod = h.create_pod(burstable("podcm-broken"))
        check(resolved(pod)["memoryQOS"] == rq, f"broken edit changed the result: {resolved(pod)}")
    finally:
        restore_configmaps(h)


def json_diff(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Paths where two JSON objects differ, e.g. ['qosClassSource: "kubernetes-qos" -> "label"']."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += json_diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}: {json.dumps(va)} -> {json.dumps(vb)}")
    return out


FORGED = '{"version":1,"qosClass":"LSE","hand":"edited"}'


@scenario("kubectl annotate memoryLocality updates resolved-qos; a hand edit of resolved-qos "
          "is overwritten")
def s_update(h: Harness) -> None:
    _, after, loc = hand_edit(h, "annotate-me")
    check(after != FORGED, "the hand edit survived")
    rq = json.loads(after)
    check(rq.get("qosClass") == "LS" and "memoryQOS" in rq and "hand" not in rq
          and rq.get("memoryLocality") == loc, f"not a fresh resolution: {after}")


def hand_edit(h: Harness, name: str) -> tuple[str, str, dict | None]:
    """A pod annotated with memoryLocality, then its resolved-qos replaced by hand: the
    annotation before the edit, the one the webhook wrote over it, the memoryLocality seen."""
    h.create_pod(burstable(name))
    h.kubectl("annotate", "pod", "-n", NS_QOS, name, "--overwrite",
              f'{MEMORY_LOCALITY}={{"policy": "bestEffort", "migrateIntervalMinutes": 10}}')
    pod = h.get_pod(NS_QOS, name)
    loc = resolved(pod).get("memoryLocality")
    check(loc == {"policy": "bestEffort", "migrateIntervalMinutes": 10,
                  "source": "pod-annotation"}, f"memoryLocality after annotate: {loc}")
    before = annotations(pod)[RESOLVED]
    h.kubectl("annotate", "pod", "-n", NS_QOS, name, "--overwrite", f"{RESOLVED}={FORGED}")
    return before, annotations(h.get_pod(NS_QOS, name))[RESOLVED], loc


@scenario("a hand edit of resolved-qos is overwritten with exactly the value it replaced")
def s_update_exact(h: Harness) -> None:
    before, after, _ = hand_edit(h, "exact-me")
    diff = json_diff(json.loads(before), json.loads(after))
    check(after == before, "the forged annotation leaks into the rewritten one; "
          f"before -> after: {'; '.join(diff) or 'key order/formatting'}\n"
          f"  before: {before}\n  after:  {after}")


@scenario("webhook stopped: pods still created (failurePolicy Ignore); the first re-resolution "
          "pass after the restart labels and annotates them (reresolve_e2e.py)")
def s_webhook_down(h: Harness) -> None:
    reresolve_e2e.down(h, sys.modules[__name__])


@scenario("re-resolution: 100 pods, memoryQOS.enable true -> false -> true with two replicas: "
          "only the Lease holder writes; SIGKILL of the holder, the other takes over "
          "(reresolve_e2e.py)")
def s_reresolve_flip(h: Harness) -> None:
    reresolve_e2e.flip(h, sys.modules[__name__])


@scenario("re-resolution at scale: 1,000 pods after one ConfigMap edit with the default limits "
          "(< 30 s); an unchanged pass writes nothing (reresolve_e2e.py)")
def s_reresolve_scale(h: Harness) -> None:
    reresolve_e2e.scale(h, sys.modules[__name__])


@scenario("re-resolution dry run: --reresolve-dry-run counts the pods it would patch and "
          "writes nothing (reresolve_e2e.py)")
def s_reresolve_dry_run(h: Harness) -> None:
    reresolve_e2e.dry_run(h, sys.modules[__name__])


if os.environ.get("KOORD_E2E_MEMORY") == "1":
    @scenario("re-resolution memory: peak RSS of the holder with 1,000 and 5,000 pods vs a pod "
              "reflector (KOORD_E2E_MEMORY=1)")
    def s_reresolve_memory(h: Harness) -> None:
        reresolve_e2e.memory(h, sys.modules[__name__])


@scenario("replicas stopped with SIGTERM one at a time behind a Service, pods created at 20/s: "
          "none admitted without its annotation or batch translation (drain_e2e.py)")
def s_drain(h: Harness) -> None:
    drain_e2e.rolling_restart(h, sys.modules[__name__])


@scenario("kube-apiserver restarted under a running webhook: watches recover, the next config "
          "change is seen")
def s_apiserver_restart(h: Harness) -> None:
    r = subprocess.run([str(CONTROL_PLANE), "restart-apiserver", str(h.cp_dir)],
                       stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    check(r.returncode == 0, "control-plane.sh restart-apiserver failed")
    check(h.procs["webhook"].alive(), "the webhook exited when the apiserver restarted")
    try:
        patch_cm(h, CLUSTER_CM, "resource-qos-config",
                 merged_cluster_config(h, enable=True, throttlingPercent=70))
        t0 = time.monotonic()
        n = 0

        def seen():
            nonlocal n
            n += 1
            rq = resolved(h.create_pod(burstable(f"after-apiserver-restart-{n}")))["memoryQOS"]
            return rq["params"]["throttlingPercent"] == 70
        wait_until("the ConfigMap change after the apiserver restart", seen, 90, 1.0)
        log(f"config change seen {time.monotonic() - t0:.1f}s after the ConfigMap edit ({n} pods)")
        # The Namespace watch too: a namespace opted in after the restart is mutated.
        h.namespace(NS_LATE, True)

        def ns_seen():
            pod = h.create_pod(pod_manifest(f"late-{secrets.token_hex(3)}", NS_LATE))
            return labels(pod).get(QOS_LABEL) == "BE"
        wait_until("a namespace opted in after the restart to be mutated", ns_seen, 60, 1.0)
    finally:
        restore_configmaps(h)


def applier_daemonset(h: Harness) -> dict:
    ds = webhookcfg.select(h.rendered, "DaemonSet")
    if len(ds) != 1:
        raise Check(f"expected one applier DaemonSet in manifests/, found {len(ds)}")
    return ds[0]


def make_cgroup(h: Harness, path: Path) -> None:
    """mkdir -p that records each directory it creates, for leaves-first removal."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        h.cgroup_dirs.append(d)


def read_knob(path: Path) -> str:
    return path.read_text().strip()


@scenario("in-place resize: 20 pods resized up then down through pods/resize follow in their "
          "resolved-qos once the allocation is posted (p50/p99), never before; a CPU-only resize "
          "writes nothing (reresolve_e2e.py)")
def s_resize(h: Harness) -> None:
    reresolve_e2e.resize(h, sys.modules[__name__])


def pod_level_supported(h: Harness) -> bool:
    """Whether this kube-apiserver keeps `spec.resources` (PodLevelResources: beta and on by
    default since 1.34; an older server drops the field)."""
    r = h.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(
        {**pod_manifest("probe-pod-level", NS_PLAIN),
         "spec": {"resources": {"requests": {"memory": "64Mi"}},
                  "containers": [{"name": "app", "image": PAUSE}]}}))
    return bool(json.loads(r.stdout)["spec"].get("resources"))


@scenario("current pod shapes with minLimitPercent 100: a native sidecar is protected and counted "
          "in the pod's memory.min; pod-level requests set the pod's memory.min, a pod-level limit "
          "with throttling its memory.high; plain init containers stay out")
def s_pod_shapes(h: Harness) -> None:
    mib = 2**20
    try:
        before = reload_count(h, "cluster")
        patch_cm(h, CLUSTER_CM, "resource-qos-config",
                 merged_cluster_config(h, enable=True, minLimitPercent=100, throttlingPercent=80))
        wait_metric_increase(h, "koord_webhook_config_reloads_total", before, config="cluster")
        p = pod_manifest("sidecar-pod", NS_QOS, requests={"memory": "1Gi"},
                         limits={"memory": "2Gi"})
        p["spec"]["initContainers"] = [
            {"name": "init-schema", "image": PAUSE,
             "resources": {"requests": {"memory": "512Mi"}}},
            {"name": "proxy", "image": PAUSE, "restartPolicy": "Always",
             "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "512Mi"}}}]
        mq = resolved(h.create_pod(p))["memoryQOS"]
        check(set(mq["containers"]) == {"app", "proxy"}, f"containers: {sorted(mq['containers'])}")
        check(mq["containers"]["proxy"]["memory.min"] == 256 * mib, f"proxy: {mq['containers']}")
        check(mq["pod"]["memory.min"] == 1280 * mib, f"pod memory.min {mq['pod']} (want 1.25Gi)")
        check("memory.high" not in mq["pod"], f"no pod-level limit, no pod memory.high: {mq['pod']}")
        if not pod_level_supported(h):
            raise koordtest.NotRun("this kube-apiserver drops spec.resources: pod-level resources "
                                   "need 1.34+ (the sidecar half passed)")
        for name, container_req, want_min in (("pod-level", None, 1024 * mib),
                                              ("pod-level-mixed", "256Mi", 1024 * mib)):
            c = {"name": "app", "image": PAUSE}
            if container_req:
                c["resources"] = {"requests": {"memory": container_req}}
            pl = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": NS_QOS},
                  "spec": {"resources": {"requests": {"memory": "1Gi"},
                                         "limits": {"memory": "2Gi"}},
                           "containers": [c]}}
            stored = h.create_pod(pl)
            mq = resolved(stored)["memoryQOS"]
            check(mq["pod"]["memory.min"] == want_min,
                  f"{name}: pod memory.min {mq['pod']['memory.min']} (want {want_min})")
            high = (2048 * mib * 80 // 100) // 4096 * 4096
            check(mq["pod"].get("memory.high") == high,
                  f"{name}: pod memory.high {mq['pod'].get('memory.high')} (want {high})")
            if container_req:
                check(mq["containers"]["app"]["memory.min"] == 256 * mib,
                      f"{name}: the container keeps its own request: {mq['containers']}")
    finally:
        restore_configmaps(h)


@scenario("applier: pod bound to a Node, kubelet-like status + cgroup v1 dirs -> knobs written, "
          "MemoryQOSApplied Event in kubectl describe")
def s_applier(h: Harness) -> None:
    for ctrl in ("memory", "cpu"):
        kp = CGROUP_ROOT / ctrl / "kubepods"
        check(not kp.exists(), f"{kp} exists: a real kubelet's tree is on this machine; refusing "
              "to touch it (run the suite on a machine without a kubelet)")
    ds = applier_daemonset(h)
    spec = ds["spec"]["template"]["spec"]
    kc = h.impersonating_kubeconfig("applier", ds["metadata"]["namespace"],
                                    spec.get("serviceAccountName", "default"))
    h.apply({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    try:
        set_colocation(h, True)  # BE pods get batch resources only with colocation on
        pod = h.create_pod(pod_manifest(
            "be-on-node", NS_QOS, requests={"cpu": "500m", "memory": "256Mi"},
            limits={"cpu": "1", "memory": "512Mi"}, labels={QOS_LABEL: "BE"},
            container="ffmpeg", node=NODE))
    finally:
        restore_configmaps(h)
    rq = resolved(pod)
    check("batch" in rq, f"no batch section: {rq}")
    uid = pod["metadata"]["uid"]
    qos = pod["status"]["qosClass"]
    parent = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}[qos]
    cid = secrets.token_hex(32)
    dirs = {}
    for ctrl in ("memory", "cpu"):
        pod_dir = CGROUP_ROOT / ctrl / "kubepods" / parent / f"pod{uid}"
        make_cgroup(h, pod_dir / cid)
        dirs[ctrl] = pod_dir
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1", **workload_env(ds),
           "KUBECONFIG": str(kc), "NODE_NAME": NODE,
           "KOORD_CGROUP_ROOT": str(CGROUP_ROOT), "KOORD_PROC_ROOT": "/proc",
           "KOORD_SYS_ROOT": "/sys", "RUST_LOG": "info"}
    h.applier_metrics_port = free_port()
    env["KOORD_METRICS_ADDR"] = f"127.0.0.1:{h.applier_metrics_port}"
    # The DaemonSet's args, plus the koordlet line the reference tells users to add.
    args = spec["containers"][0].get("args", [])
    check(args[:1] == ["run"], f"the DaemonSet's args must start with run: {args}")
    p = h.start_proc("applier", [h.applier_bin, *args, *KOORDLET_LINE], env)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"status": {
        "phase": "Running", "qosClass": qos, "hostIP": "127.0.0.1", "podIP": "10.0.0.10",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [{
            "name": "ffmpeg", "containerID": f"containerd://{cid}", "image": PAUSE,
            "imageID": "", "ready": True, "restartCount": 0, "started": True,
            "state": {"running": {"startedAt": now}}}]}}
    h.kubectl("patch", "pod", "-n", NS_QOS, "be-on-node", "--subresource=status",
              "--type", "merge", "-p", json.dumps(status))
    batch = rq["batch"]
    want = [
        (dirs["cpu"] / cid / "cpu.shares", batch["containers"]["ffmpeg"]["cpu.shares"]),
        (dirs["cpu"] / cid / "cpu.cfs_quota_us", batch["containers"]["ffmpeg"]["cpu.cfs_quota_us"]),
        (dirs["memory"] / cid / "memory.limit_in_bytes",
         batch["containers"]["ffmpeg"]["memory.limit_in_bytes"]),
        (dirs["cpu"] / "cpu.shares", batch["pod"]["cpu.shares"]),
        (dirs["cpu"] / "cpu.cfs_quota_us", batch["pod"]["cpu.cfs_quota_us"]),
        (dirs["memory"] / "memory.limit_in_bytes", batch["pod"]["memory.limit_in_bytes"]),
    ]
    check((batch["containers"]["ffmpeg"]["cpu.shares"], batch["containers"]["ffmpeg"]["cpu.cfs_quota_us"])
          == (512, 100000), f"unexpected batch numbers {batch}")

    def written():
        if not p.alive():
            raise Check(f"koord-applier exited ({p.popen.returncode}):\n{p.tail()}")
        return all(read_knob(f) == str(v) for f, v in want)

    try:
        wait_until("the applier to write the cgroup knobs", written, 60, 0.25)
    except Check as e:
        now_vals = {str(f): read_knob(f) for f, _ in want}
        raise Check(f"{e}\nfiles now: {now_vals}\n--- applier log ---\n{p.tail()}") from None

    def described():
        d = h.kubectl("describe", "pod", "-n", NS_QOS, "be-on-node").stdout
        return d if "MemoryQOSApplied" in d else None

    try:
        desc = wait_until("the MemoryQOSApplied Event in kubectl describe", described, 30, 0.5)
    except Check as e:
        raise Check(f"{e}\n--- applier log ---\n{p.tail()}") from None
    events = desc[desc.index("Events:"):]
    log("kubectl describe pod be-on-node:\n" + events)
    n = p.logfile.read_text(errors="replace").count(IGNORED_GATES_WARNING)
    check(n == 1, f"the ignored-gates warning appears {n} times in the applier log:\n{p.tail()}")
    for knob in ("cpu.shares=512", "cpu.cfs_quota_us=100000",
                 f"memory.limit_in_bytes={512 * 2**20}"):
        check(knob in desc.replace("\n", " "), f"{knob} not in the Event:\n{events}")


@scenario("colocation: applier advertises batch-cpu/batch-memory on its Node (exact figures), "
          "a BE pod passes the fit check, ConfigMap changes move/zero it (colocation_e2e.py)")
def s_colocation(h: Harness) -> None:
    import colocation_e2e  # tests/e2e/colocation_e2e.py (issue #8)
    colocation_e2e.run(h, sys.modules[__name__])


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def setup(h: Harness) -> None:
    prerequisites(h)
    build(h)
    start_control_plane(h)
    deploy_base(h)


def teardown(h: Harness, passed: list[str], failed: list[str], interrupted: bool) -> None:
    if failed:
        for name, p in h.procs.items():
            print(f"----- last lines of the {name} log ({p.logfile}) -----\n{p.tail(30)}",
                  file=sys.stderr)
    keep = bool(failed) or os.environ.get("KOORD_E2E_KEEP") == "1"
    h.cleanup(keep=keep and not interrupted)
    if h.figures.get("without_webhook") or h.figures.get("with_webhook"):
        print(f"latency ({h.figures.get('profile')} build): "
              f"without webhook {h.figures.get('without_webhook')}, "
              f"with webhook {h.figures.get('with_webhook')}", flush=True)
    for key in ("reresolve_down_s", "reresolve_flip", "reresolve_takeover_s",
                "reresolve_scale", "reresolve_memory", "resize", "drain"):
        if key in h.figures:
            print(f"{key} ({h.figures.get('profile')} build): {json.dumps(h.figures[key])}",
                  flush=True)


def main() -> int:
    return SUITE.main(Harness(), setup, teardown)


if __name__ == "__main__":
    sys.exit(main())
