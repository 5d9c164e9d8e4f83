"""The part of a suite's harness that talks to the cluster: kubectl and the objects every suite
creates and waits for. A suite subclasses Harness with what only it has (processes it starts,
the node it boots, the guest it reads files from)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .checks import Check, check, quantity, wait_until

OPT_IN = "koordinator.sh/qos-webhook"
BATCH_RESOURCES = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")

_tag = "test"


def set_log_tag(tag: str) -> None:
    """The prefix of every progress line: `[<tag> HH:MM:SS] ...`."""
    global _tag
    _tag = tag


def log(msg: str) -> None:
    """Progress on stderr; stdout carries only PASS/FAIL, figures and the count."""
    print(f"[{_tag} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def batch_requests(pod: dict) -> tuple[float, ...]:
    """A pod's batch-cpu (milli) and batch-memory (bytes) requests: its containers' sum, or its
    init containers' largest when that is more."""
    spec = pod.get("spec", {})

    def of(c: dict, key: str) -> float:
        return quantity(c.get("resources", {}).get("requests", {}).get(key, "0"))
    return tuple(max(sum(of(c, k) for c in spec.get("containers", [])),
                     max((of(c, k) for c in spec.get("initContainers") or []), default=0))
                 for k in BATCH_RESOURCES)


class Harness:
    # Per cluster: how long kubectl may take, how long a new namespace's default
    # ServiceAccount may take to appear (None: no controller-manager makes one, do not wait),
    # and how long a pod may take to run and how often to look.
    KUBECTL_TIMEOUT = 120.0
    SA_TIMEOUT: float | None = 30.0
    POD_TIMEOUT = 120.0
    POD_INTERVAL = 0.2

    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.env: dict[str, str] = {}  # what the cluster's start script printed (node.env)
        self.kubectl_bin = ""
        self._kubeconfig: str | Path | None = None
        self.figures: list[str] = []  # `figure ...` lines, printed at the end
        # What scenarios share (a pod, a running Prometheus): built by `need`, by whichever
        # scenario of this run asks first.
        self.carry: dict = {}

    def need(self, key: str, make: Callable[[Harness], Any]) -> Any:
        """A fixture: `make(self)` the first time any scenario of this run needs `key`, the same
        value after. A scenario selected alone by the ONLY filter builds what it needs; a full
        run builds it once."""
        if key not in self.carry:
            self.carry[key] = make(self)
        return self.carry[key]

    @property
    def kubeconfig(self) -> str | Path:
        """Set by the suite, or the KUBECONFIG its cluster's start script reported."""
        return self._kubeconfig if self._kubeconfig is not None else self.env["KUBECONFIG"]

    @kubeconfig.setter
    def kubeconfig(self, value: str | Path) -> None:
        self._kubeconfig = value

    # -- kubectl -------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check_rc: bool = True,
                timeout: float | None = None) -> subprocess.CompletedProcess:
        argv = [self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args]
        p = subprocess.run(argv, input=input, capture_output=True, text=True,
                           timeout=timeout or self.KUBECTL_TIMEOUT)
        if check_rc and p.returncode != 0:
            raise Check(f"`kubectl {' '.join(args)}` failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def kjson(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply_obj(self, obj: dict, ns: str | None = None) -> None:
        self.kubectl(*(["-n", ns] if ns else []), "apply", "-f", "-", input=json.dumps(obj))

    def apply_batch_pod(self, spec: dict, ns: str | None = None) -> None:
        """Creates a pod once the node has had room for its batch requests (as the webhook
        resolves them) for two reads 2 s apart; a pod without batch requests at once.

        Why wait: the kubelet admits a pod against its own copy of the Node, which can be an
        update behind the scheduler's. A pod bound the instant batch capacity rose to fit it is
        then rejected (`OutOfkubernetes.io/batch-cpu`) and a bare pod stays Failed; the
        applier cannot order the two watches (it never advertises less than what is bound,
        colocation_formulas.rs). docs/colocation.md tells users to run BE work under a
        controller that recreates such a pod."""
        ns_args = ["-n", ns] if ns else []
        mutated = json.loads(self.kubectl(*ns_args, "create", "--dry-run=server", "-f", "-",
                                          "-o", "json", input=json.dumps(spec)).stdout)
        want = batch_requests(mutated)
        if any(want):
            def room() -> bool:
                free = self.batch_free()
                return all(f >= w for f, w in zip(free, want))
            deadline = time.monotonic() + self.POD_TIMEOUT
            while True:
                if room():
                    time.sleep(2)
                    if room():
                        break
                if time.monotonic() > deadline:
                    raise Check(f"no room on the node for {spec['metadata']['name']}'s batch "
                                f"requests {want} in {self.POD_TIMEOUT:.0f}s: free (cpu milli, "
                                f"memory bytes) {self.batch_free()}")
                time.sleep(1)
        self.apply_obj(spec, ns)

    def batch_free(self) -> tuple[float, float]:
        """The node's advertised batch-cpu (milli) and batch-memory (bytes) less the batch
        requests of the active pods bound to it, as the kubelet's admission counts them."""
        node = self.env["NODE_NAME"]
        alloc = self.kjson("get", "node", node)["status"].get("allocatable", {})
        pods = self.kjson("get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")
        used = [batch_requests(p) for p in pods["items"]
                if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        return tuple(quantity(alloc.get(k, "0")) - sum(u[i] for u in used)
                     for i, k in enumerate(BATCH_RESOURCES))

    def pod(self, ns: str, name: str) -> dict:
        return self.kjson("get", "pod", "-n", ns, name)

    def namespace(self, name: str, opted_in: bool = True) -> None:
        """A namespace (opted in to the webhook unless told otherwise), usable once the
        controller-manager made its ServiceAccount."""
        labels = {OPT_IN: "enabled"} if opted_in else {}
        self.apply_obj({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": name, "labels": labels}})
        if self.SA_TIMEOUT is not None:
            wait_until(f"ServiceAccount {name}/default", lambda: self.kubectl(
                "-n", name, "get", "serviceaccount", "default", check_rc=False).returncode == 0,
                self.SA_TIMEOUT)

    def wait_running(self, ns: str, name: str, timeout: float | None = None) -> dict:
        """The pod once it is Running with every container ready or started; on timeout the
        Check carries the end of `kubectl describe`."""
        def running():
            p = self.pod(ns, name)
            st = p.get("status", {})
            cs = st.get("containerStatuses") or []
            if st.get("phase") == "Running" and cs and all(c.get("ready") or c.get("started")
                                                           for c in cs):
                return p
            return None
        try:
            return wait_until(f"pod {ns}/{name} Running", running, timeout or self.POD_TIMEOUT,
                              self.POD_INTERVAL)
        except Check as e:
            desc = self.kubectl("describe", "pod", "-n", ns, name, check_rc=False).stdout
            raise Check(f"{e}\n{desc[-1500:]}") from None

    def delete_pods(self, ns: str, *names: str) -> None:
        """Deletes the pods and waits until they are gone."""
        self.kubectl("-n", ns, "delete", "pod", *names, "--grace-period=1", "--wait=true",
                     "--ignore-not-found", timeout=180)

    def events(self, ns: str, uid: str, reason: str | None = None) -> list[dict]:
        sel = f"involvedObject.uid={uid}" + (f",reason={reason}" if reason else "")
        return self.kjson("get", "events", "-n", ns, "--field-selector", sel)["items"]

    def apiserver_metrics(self) -> dict:
        from .metrics import parse_metrics
        return parse_metrics(self.kubectl("get", "--raw", "/metrics").stdout)

    # -- files of the node ----------------------------------------------------------------
    # Here the node's files are this machine's. A node in a guest overrides read_many (one
    # round trip for many files); read goes through it.

    def read_many(self, paths: list[str | Path]) -> dict[str, str | None]:
        """{path: stripped content, or None for a missing file}, keyed by str(path)."""
        out: dict[str, str | None] = {}
        for p in paths:
            try:
                out[str(p)] = Path(p).read_text().strip()
            except FileNotFoundError:
                out[str(p)] = None
        return out

    def read(self, path: str | Path) -> str:
        """The stripped content of one file; a missing file fails the scenario."""
        v = self.read_many([path])[str(path)]
        check(v is not None, f"{path}: no such file")
        return v

    # -- figures ---------------------------------------------------------------------------

    def figure(self, line: str) -> None:
        """A measured figure, printed as `figure <line>` after the scenarios."""
        self.figures.append(f"figure {line}")


# -- the kubelet's cgroup layout (cgroupfs driver) -------------------------------------------

def kubepods_path(pod: dict, driver: str = "cgroupfs", root: str = "/") -> str:
    """The pod's cgroup below the hierarchy root: kubepods[/burstable|/besteffort]/pod<uid>
    with the cgroupfs driver and cgroupRoot / (see kubelet_cgroup for the others)."""
    parent = {"Guaranteed": [], "Burstable": ["burstable"], "BestEffort": ["besteffort"]}[
        pod["status"]["qosClass"]]
    return kubelet_cgroup([*parent, f"pod{pod['metadata']['uid']}"], driver, root)


def kubelet_cgroup(names: list[str], driver: str = "cgroupfs", root: str = "/") -> str:
    """The kubelet's cgroup <root>/kubepods/<names...> below the hierarchy root, as its cgroup
    driver spells it (pkg/kubelet/cm/cgroup_manager_linux.go): cgroupfs joins the names with
    `/`; systemd escapes `-` as `_` in each name and nests slices named by their prefix, so
    cgroupRoot /kubelet and [burstable] is
    kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice."""
    parts = [p for p in root.split("/") if p] + ["kubepods", *names]
    if driver == "cgroupfs":
        return "/".join(parts)
    check(driver == "systemd", f"unknown cgroup driver {driver!r}")
    out, prefix = [], ""
    for p in parts:
        prefix = f"{prefix}-{p.replace('-', '_')}" if prefix else p.replace("-", "_")
        out.append(f"{prefix}.slice")
    return "/".join(out)


def container_leaf(cid: str, driver: str = "cgroupfs") -> str:
    """A containerd container's cgroup below its pod's: the bare ID (cgroupfs), or the scope
    runc makes through systemd (cri-containerd-<id>.scope)."""
    return f"cri-containerd-{cid}.scope" if driver == "systemd" else cid


def container_id(pod: dict, name: str) -> str:
    """The 64-hex containerd ID of container `name` (the last part of its cgroup path)."""
    statuses = (pod["status"].get("containerStatuses") or []) + (
        pod["status"].get("initContainerStatuses") or [])
    for c in statuses:
        if c["name"] == name and c.get("containerID"):
            scheme, _, cid = c["containerID"].partition("://")
            check(scheme == "containerd" and re.fullmatch(r"[0-9a-f]{64}", cid),
                  f"unexpected containerID {c['containerID']}")
            return cid
    raise Check(f"container {name} has no containerID yet")
