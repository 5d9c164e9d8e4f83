"""A Harness for a real node that a node.sh starts and stops (tests/node, tests/node-v2), with
the product installed on it from its own images."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .checks import Fatal, check, quantity, wait_until
from .harness import Harness, container_id, kubepods_path, log
from .metrics import parse_metrics

REPO = Path(__file__).resolve().parents[3]
SYSTEM_NS = "koordinator-system"
RESOLVED = "koordinator.sh/resolved-qos"


class NodeHarness(Harness):
    NODE_SH_TIMEOUT = 1800.0

    def __init__(self, prefix: str, node_sh: Path) -> None:
        super().__init__(prefix)
        self.node_sh_path = node_sh
        self.node_dir = self.dir / "node"
        self.node_started = False
        self.images: dict[str, str] = {}  # the product's: image name -> archive
        self.webhook_bin = ""
        self.installed = False  # the product installed (install())

    def node_sh(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        """node.sh ARGS: its stdout captured, its stderr (progress, errors) passed through."""
        return subprocess.run([str(self.node_sh_path), *args], stdout=subprocess.PIPE,
                              stderr=sys.stderr, text=True, timeout=timeout or self.NODE_SH_TIMEOUT)

    def load_node_env(self) -> None:
        """DIR/node.env, which node.sh start writes: KUBECONFIG, KUBECTL, NODE_NAME, ..."""
        for line in (self.node_dir / "node.env").read_text().splitlines():
            k, _, v = line.partition("=")
            self.env[k] = v

    # -- the install ------------------------------------------------------------------------

    def install(self, overlay: Path, namespaces: list[str], configmaps: list[Path] = (),
                timeout: int = 300) -> None:
        """The README's quickstart and nothing else: `kubectl apply -k overlay` (the webhook
        makes its own certificates), then `configmaps` applied as an operator would; waits for
        the webhook Available and the applier DaemonSet ready, each pod on the product's own
        images; makes `namespaces` (opted in) and waits until the apiserver, through the
        Service, has a dry-run pod in the first one mutated; checks the Secret the webhook made
        (owned by its MutatingWebhookConfiguration, its CA the caBundle)."""
        t_install = time.monotonic()
        self.installed = True
        self.kubectl("apply", "-k", str(overlay))
        for f in configmaps:
            self.kubectl("apply", "-f", str(f))
        t0 = time.monotonic()
        self.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook",
                     f"--timeout={timeout}s", timeout=timeout + 20)
        self.kubectl("-n", SYSTEM_NS, "wait", "deployment/koord-webhook",
                     "--for=condition=Available", "--timeout=60s", timeout=80)
        self.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier",
                     f"--timeout={timeout}s", timeout=timeout + 20)
        self.figures.append(f"figure install: webhook Available and applier ready "
                            f"{time.monotonic() - t0:.0f}s after kubectl apply -k")
        log(self.figures[-1])
        ds = self.kjson("-n", SYSTEM_NS, "get", "daemonset", "koord-applier")["status"]
        check(ds.get("numberReady") == ds.get("desiredNumberScheduled") == 1, f"DaemonSet status {ds}")
        for pod in self.kjson("-n", SYSTEM_NS, "get", "pods")["items"]:
            for c in pod["status"]["containerStatuses"]:
                check(c["image"] in self.images, f"{pod['metadata']['name']} runs {c['image']}")
                check(c["ready"], f"{pod['metadata']['name']}/{c['name']} not ready")
        for ns in namespaces:
            self.namespace(ns)
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespaces[0]},
                 "spec": {"containers": [{"name": "c", "image": self.env["WORKLOAD_IMAGE"]}]}}
        wait_until("the webhook to mutate a dry-run pod", lambda: RESOLVED in (json.loads(self.kubectl(
            "create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(probe)).stdout)
            ["metadata"].get("annotations") or {}), 90, 0.5)
        self.figures.append(f"figure install: first mutated pod {time.monotonic() - t_install:.1f} s "
                            "after `kubectl apply -k` (images already on the node)")
        log(self.figures[-1])
        secret = self.kjson("-n", SYSTEM_NS, "get", "secret", "koord-webhook-tls")
        mwc = self.kjson("get", "mutatingwebhookconfiguration", "koord-webhook")
        owners = secret["metadata"].get("ownerReferences") or []
        check([o["uid"] for o in owners] == [mwc["metadata"]["uid"]], f"Secret owners {owners}")
        check(mwc["webhooks"][0]["clientConfig"].get("caBundle") == secret["data"]["ca.crt"],
              "the caBundle is not the Secret's CA")

    # -- the product's pods --------------------------------------------------------------

    def applier_pod(self) -> dict:
        pods = self.kjson("get", "pods", "-n", SYSTEM_NS, "-l",
                          "app.kubernetes.io/name=koord-applier")["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        check(len(live) == 1, f"expected one applier pod, found {[p['metadata']['name'] for p in pods]}")
        return live[0]

    def applier_args(self, add: str | None = None, remove: str | None = None) -> None:
        """Adds or removes (if there) one flag of the applier DaemonSet, as an operator would,
        and waits for the new applier pod."""
        ds = self.kjson("-n", SYSTEM_NS, "get", "daemonset", "koord-applier")
        args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        if add:
            ops = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": add}]
        else:
            if remove not in args:
                return
            i = args.index(remove)
            ops = [{"op": "test", "path": f"/spec/template/spec/containers/0/args/{i}",
                    "value": remove},
                   {"op": "remove", "path": f"/spec/template/spec/containers/0/args/{i}"}]
        self.kubectl("-n", SYSTEM_NS, "patch", "daemonset", "koord-applier", "--type=json",
                     "-p", json.dumps(ops))
        self.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier",
                     "--timeout=240s", timeout=260)

    def applier_metrics(self, pod: dict | None = None) -> dict:
        """The applier's /metrics, fetched from its pod IP (routed to the node's pods)."""
        pod = pod or self.applier_pod()
        ip = pod["status"].get("podIP")
        check(ip, "the applier pod has no IP")
        with urllib.request.urlopen(f"http://{ip}:9316/metrics", timeout=5) as r:
            return parse_metrics(r.read().decode())

    def psi_series(self, cid: str, uid: str) -> tuple[dict, list] | None:
        """The applier's PSI series of one container and its pod: ({(resource, precision,
        degree): value}, [pod values]), or None until both are there."""
        m = self.applier_metrics()
        c = {(dict(l)["psi_resource_type"], dict(l)["psi_precision"], dict(l)["psi_degree"]): v
             for (n, l), v in m.items()
             if n == "koordlet_container_psi" and ("container_id", f"containerd://{cid}") in l}
        p = [v for (n, l), v in m.items() if n == "koordlet_pod_psi" and ("pod_uid", uid) in l]
        return (c, p) if c and p else None

    # -- cgroups (cgroupfs driver) ---------------------------------------------------------
    # On cgroup v1 every controller has its hierarchy (CGROUP/<ctrl>/kubepods/...); on v2 there
    # is one (CGROUP/kubepods/...): `ctrl` None.

    CGROUP = Path("/sys/fs/cgroup")

    def pod_cgroup(self, ctrl: str | None, pod: dict) -> Path:
        root = self.CGROUP / ctrl if ctrl else self.CGROUP
        return root / kubepods_path(pod)

    def process_usage(self, pid: int | str, seconds: float) -> tuple[float, float, float]:
        """A node process's RSS and peak RSS (MiB) and CPU (% of one core) over `seconds`, read
        through `self.read` (so a guest node's override reads the guest's /proc)."""
        def ticks() -> int:
            f = self.read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
            return int(f[11]) + int(f[12])  # utime + stime
        t0, c0 = time.monotonic(), ticks()
        time.sleep(seconds)
        c1, t1 = ticks(), time.monotonic()
        st = dict(line.split(":", 1) for line in self.read(f"/proc/{pid}/status").splitlines()
                  if ":" in line)
        mib = lambda k: int(st[k].split()[0]) / 1024  # noqa: E731 - kB -> MiB
        # USER_HZ is 100 on x86 for the host and the UML guest alike.
        return mib("VmRSS"), mib("VmHWM"), 100 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0)

    def resize_memory(self, ns: str, names: list[str], container: str, request: str,
                      timeout: float = 120) -> list[float]:
        """In-place resize of `container`'s memory request in each pod (`kubectl patch
        --subresource resize`, as a user or a VPA does); then, per pod, the seconds from its
        resize to its resolved-qos showing the new request as the container's memory.min (the
        kubelet's allocation and the re-resolver both on the way), sorted. Polls the
        namespace's pods every 0.2 s."""
        want = int(quantity(request))
        started: dict[str, float] = {}
        for n in names:
            started[n] = time.monotonic()
            self.kubectl("-n", ns, "patch", "pod", n, "--subresource", "resize", "--type",
                         "strategic", "-p", json.dumps({"spec": {"containers": [
                             {"name": container,
                              "resources": {"requests": {"memory": request}}}]}}))
        done: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while len(done) < len(names) and time.monotonic() < deadline:
            now = time.monotonic()
            for p in self.kjson("-n", ns, "get", "pods")["items"]:
                n = p["metadata"]["name"]
                raw = (p["metadata"].get("annotations") or {}).get(RESOLVED)
                if n in started and n not in done and raw and json.loads(raw)[
                        "memoryQOS"]["containers"].get(container, {}).get("memory.min") == want:
                    done[n] = now - started[n]
            time.sleep(0.2)
        missing = sorted(set(names) - set(done))
        check(not missing, f"resize to {request}: no new memory.min after {timeout:.0f}s in "
              f"{missing[:5]} ({len(missing)} of {len(names)})")
        return sorted(done.values())

    @staticmethod
    def container_id(pod: dict, name: str) -> str:
        return container_id(pod, name)

    def container_cgroup(self, ctrl: str | None, pod: dict, name: str) -> Path:
        return self.pod_cgroup(ctrl, pod) / container_id(pod, name)


def build_images(h: NodeHarness) -> None:
    """`make images`: the product's images, exactly what manifests/ references; and where the
    release koord-webhook (for `koord-webhook certs`) is."""
    log("make images (images/build.sh)")
    t0 = time.monotonic()
    r = subprocess.run([str(REPO / "images" / "build.sh")], stdout=subprocess.PIPE,
                       stderr=sys.stderr, text=True, cwd=REPO)
    if r.returncode != 0:
        raise Fatal("images/build.sh failed (see above)")
    for line in r.stdout.split("\n"):
        if line.strip():
            name, archive = line.split()
            h.images[name] = archive
    log(f"images built in {time.monotonic() - t0:.0f}s: {', '.join(h.images)}")
    meta = json.loads(subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                                     cwd=REPO, capture_output=True, text=True, check=True).stdout)
    h.webhook_bin = str(Path(meta["target_directory"]) / "release" / "koord-webhook")
