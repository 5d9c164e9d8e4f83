#!/usr/bin/env python3
"""cgroup v2 node suite: the product installed as a user installs it, on the node of the current
platform (Kubernetes 1.37, containerd 2, cgroup v2, the kubelet with the cgroupfs driver) in a
User-Mode Linux guest. Run it through `tests/node-v2/run` (see README.md). Stdlib only.

  make images -> node.sh start (control plane on the host; containerd, kubelet, kube-proxy in
  the guest; the product's images imported at boot) -> kubectl apply -k (the quickstart;
  self-managed certificates) -> scenarios with real pods, cgroup files read inside the guest ->
  kubectl delete -k -> node.sh stop -> node.sh check-clean.

The protection proof (protection.py: configurations A, B, C0, P, C) runs in `make test` on the
production shape, the systemd-driver node (systemd.py); here, on the cgroupfs shape, with
KOORD_NODE_V2_FULL=1.

Each scenario prints `PASS <name> (<s>)` or `FAIL <name>: <reason>`; the last line is
`N passed, M failed`. Figures are printed as `figure <what>: ...` lines. Progress on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "lib"))
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

from koordtest import Suite, set_log_tag  # noqa: E402
from koordtest import monitoring, webhookcfg  # noqa: E402
from koordtest.checks import Check, Fatal, check, quantity, wait_until  # noqa: E402
from koordtest.harness import batch_requests, container_id, kubepods_path, log  # noqa: E402
from koordtest.metrics import metric_sum, percentile  # noqa: E402
from koordtest.node import NodeHarness, build_images  # noqa: E402
from koordtest.sampler import Sampler  # noqa: E402
import protection  # noqa: E402  (the seed's promise on real pods)
import nri  # noqa: E402  (the applier as an NRI plugin)
import reclaim  # noqa: E402  (async reclaim emulated with memory.reclaim)

NODE_SH = HERE / "node.sh"
OVERLAY = HERE / "overlay"  # the v1 node suite's overlay + --cpu-idle-fallback
TESTDATA = HERE / "testdata"
MANIFESTS = REPO / "manifests"
CGROUP = "/sys/fs/cgroup"

SYSTEM_NS = "koordinator-system"
OPT_IN = "koordinator.sh/qos-webhook"
QOS_LABEL = "koordinator.sh/qosClass"
RESOLVED = "koordinator.sh/resolved-qos"
APPLIED = "MemoryQOSApplied"
NOT_STARTED = "not started yet"
QOS_LEVEL = "QoS-level protection"
NS_QOS = "v2-qos"

K8S_VERSION = os.environ.get("KOORD_V2_K8S_VERSION", "1.37.2")
# KOORD_NODE_V2_FULL=1: also the scenarios `make test` leaves out for CI's wall time (SKIP lines
# name them).


set_log_tag("node-v2")
SUITE = Suite("KOORD_NODE_V2_ONLY", wall_time_figure=True, full_env="KOORD_NODE_V2_FULL")
scenario = SUITE.scenario


# ---------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------


class Harness(NodeHarness):
    """The cgroup v2 node: its files are the guest's, read through the guest agent."""
    SA_TIMEOUT = 60.0
    POD_TIMEOUT = 180.0
    POD_INTERVAL = 0.5
    NODE_SH_TIMEOUT = 3600.0

    def __init__(self) -> None:
        super().__init__("koord-node-v2.", NODE_SH)
        self.installed = False
        self.kubelet_log_mark = 0

    # -- the guest ------------------------------------------------------------------------

    def guest(self, script: str, timeout: float = 60, check_rc: bool = True) -> str:
        """Runs a shell script inside the guest (the node) and returns its stdout."""
        req = urllib.request.Request(self.env["GUEST_AGENT"], data=script.encode(),
                                     headers={"X-Timeout": str(timeout)})
        with urllib.request.urlopen(req, timeout=timeout + 10) as r:
            out = json.loads(r.read())
        if check_rc and out["rc"] != 0:
            raise Check(f"in the guest, `{script[:200]}` exited {out['rc']}: {out['stderr'][-800:]}")
        return out["stdout"]

    def read_many(self, paths: list) -> dict[str, str | None]:
        """One round trip for many files; None for a missing file."""
        paths = [str(p) for p in paths]
        script = "".join(f"if [ -e '{p}' ]; then printf '%s\\0' \"$(cat '{p}')\"; "
                         f"else printf '\\1\\0'; fi\n" for p in paths)
        vals = self.guest(script).split("\0")[:-1]
        check(len(vals) == len(paths), f"read {len(vals)} of {len(paths)} files")
        return {p: (None if v == "\1" else v.strip()) for p, v in zip(paths, vals)}

    def node_dead(self) -> str | None:
        """The guest kernel's panic line when the User-Mode Linux guest died (seen once: a UML
        6.12 fault in flush_tlb_mm during a fork flood), else None."""
        if not self.node_started:
            return None
        log_file = self.node_dir / "logs" / "linux.uml.log"
        try:
            lines = log_file.read_text(errors="replace").splitlines()
        except OSError:
            return None
        return next((ln.strip() for ln in lines if "Kernel panic" in ln), None)

    def after_failure(self, name: str) -> None:
        """Says whether the node itself is still alive after a failed scenario (a kubelet or
        containerd that died or hangs fails every later scenario too): the guest's processes,
        memory and load, and the last lines of the kubelet's and containerd's logs."""
        if not self.node_started:
            return
        try:
            state = self.guest("for p in kubelet containerd koord-applier; do "
                               "printf '%s: %s\\n' $p \"$(pgrep -x $p | tr '\\n' ' ')\"; done; "
                               "cat /proc/loadavg; free -m; "
                               "cat /sys/fs/cgroup/kubepods/memory.events 2>/dev/null",
                               timeout=20, check_rc=False)
        except (OSError, ValueError) as e:
            state = f"the guest agent did not answer: {e}"
        print(f"----- the node after {name!r} failed -----\n{state.rstrip()}", file=sys.stderr)
        if self.installed:
            # The applier's last lines without the per-cgroup collector notices (its watch,
            # NRI link, Event posts are what a stalled scenario usually needs).
            r = self.kubectl("-n", SYSTEM_NS, "logs", "-l", "app.kubernetes.io/name=koord-applier",
                             "--tail=200", check_rc=False, timeout=30)
            lines = [l for l in r.stdout.splitlines() if "collectors" not in l][-15:]
            print("----- last lines of the applier's log -----\n"
                  + "\n".join(l[:300] for l in lines), file=sys.stderr)
        self.print_log_tails((("logs/linux.uml.log", 10), ("guest/logs/kubelet.log", 25),
                              ("guest/logs/containerd.log", 25)))

    def print_log_tails(self, files) -> None:
        """The last `n` lines of each (path under the node's dir, n), to stderr."""
        for f, n in files:
            p = self.node_dir / f
            if p.exists():
                lines = p.read_text(errors="replace").splitlines()[-n:]
                print(f"----- last lines of {p} -----\n" + "\n".join(l[:400] for l in lines),
                      file=sys.stderr)

    # -- cgroups (cgroup v2, cgroupfs driver: kubepods[/qos]/pod<uid>/<id>; systemd.py has the
    # systemd driver's node, with cgroupRoot /kubelet) ----------------------------------------

    def pod_cgroup(self, ctrl: str | None, pod: dict) -> str:
        check(ctrl is None, "cgroup v2 has one hierarchy")
        return f"{CGROUP}/{kubepods_path(pod)}"

    def container_cgroup(self, ctrl: str | None, pod: dict, name: str) -> str:
        return f"{self.pod_cgroup(ctrl, pod)}/{container_id(pod, name)}"

    def ancestors(self) -> list[str]:
        """kubepods and the Burstable class: the cgroups whose protection caps an LS pod's."""
        return [f"{CGROUP}/kubepods", f"{CGROUP}/kubepods/burstable"]

    def shape(self) -> str:
        """The node's shape, as the published table names it."""
        return "the cgroup v2 node with the cgroupfs driver (`kubepods`)"


# ---------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------


def prerequisites(h: Harness) -> None:
    if os.geteuid() != 0:
        raise Fatal("must run as root (a tap device, routes, iptables, the UML guest)")
    for tool in ("cargo", "curl", "openssl"):
        if not shutil.which(tool):
            raise Fatal(f"{tool} not on PATH")
    # A killed run's tap, routes and guard rule (when nothing of the slot is alive) go first.
    h.node_sh("reclaim")
    if h.node_sh("check-clean").returncode != 0:
        raise Fatal("the machine has leftovers of a cgroup v2 node (see above); refusing to start")




def start_node(h: Harness) -> None:
    log("node.sh build (k8s 1.37 + containerd 2 binaries, cached)")
    t0 = time.monotonic()
    if h.node_sh("build").returncode != 0:
        raise Fatal("node.sh build failed (see above)")
    h.figures.append(f"figure builds (node.sh build, warm if cached): {time.monotonic() - t0:.0f}s")
    h.node_started = True
    t0 = time.monotonic()
    os.environ["KOORD_V2_IMAGES"] = " ".join(h.images.values())
    if h.node_sh("start", str(h.node_dir)).returncode != 0:
        raise Fatal("node.sh start failed (see above)")
    h.load_node_env()
    h.kubectl_bin = h.env["KUBECTL"]  # built with the node's binaries: 1.37 like the server
    vehicle = h.node_dir / "logs" / "vehicle.line"
    if vehicle.is_file():
        h.figures.append(f"figure {vehicle.read_text().strip()}")
    h.figures.append(f"figure node start (node.sh start, control plane + guest + Ready): "
                     f"{time.monotonic() - t0:.0f}s; guest start to its agent "
                     f"{h.env['BOOT_SECONDS']}s, to Node Ready {h.env['READY_SECONDS']}s")
    log(f"node up in {time.monotonic() - t0:.0f}s")


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

@scenario("node: Kubernetes 1.37 kubelet and containerd 2 report in, cgroup v2 with the memory "
          "controller in the guest, the kubelet's kubepods tree made with the cgroupfs driver", base=True)
def s_node(h: Harness) -> None:
    info = h.kjson("get", "node", h.env["NODE_NAME"])["status"]["nodeInfo"]
    check(info["kubeletVersion"] == f"v{K8S_VERSION}", f"kubeletVersion {info['kubeletVersion']}")
    check(re.fullmatch(r"containerd://2\.\d+\.\d+", info["containerRuntimeVersion"]),
          f"containerRuntimeVersion {info['containerRuntimeVersion']}")
    fstype = h.guest(f"stat -f -c %T {CGROUP}").strip()
    check(fstype == "cgroup2fs", f"{CGROUP} in the guest is {fstype}, not cgroup2fs")
    ctl = h.read(f"{CGROUP}/kubepods/cgroup.subtree_control").split()
    check("memory" in ctl and "cpu" in ctl, f"kubepods subtree_control {ctl}")
    for knob in ("memory.min", "memory.low", "memory.high", "memory.max"):
        check(h.guest(f"[ -e {CGROUP}/kubepods/burstable/{knob} ] && echo y").strip() == "y",
              f"no {knob} in kubepods/burstable")
    h.figures.append(f"figure node: kubelet {info['kubeletVersion']}, "
                     f"{info['containerRuntimeVersion']}, kernel {info['kernelVersion']} (UML), "
                     f"cgroup v2, cgroupfs driver")


@scenario("images: the archives `make images` built are what manifests/ reference, imported "
          "into the guest's containerd", base=True)
def s_images(h: Harness) -> None:
    rendered = webhookcfg.render(h.kubectl_bin, str(MANIFESTS))
    refs = sorted({c["image"] for o in webhookcfg.select(rendered, "Deployment", "DaemonSet")
                   for c in o["spec"]["template"]["spec"]["containers"]})
    check(refs == sorted(h.images), f"manifests reference {refs}, make images built {sorted(h.images)}")
    out = h.guest(f"{h.env['CTR']} --address /run/containerd/containerd.sock -n k8s.io images ls -q")
    for ref in refs:
        check(ref in out.split(), f"{ref} not in the guest's containerd: {out.split()}")


@scenario("protection A (product not installed): LS redis + BE flood, measured",
          full="they run on the systemd-driver node in make test (tests/node-v2/systemd.py)")
def s_protect_a(h: Harness) -> None:
    protection.run_config(h, "A")


def install(h: Harness) -> None:
    """The README's quickstart and nothing else (koordtest.node.NodeHarness.install); the
    apiserver (host) calls the webhook through its Service, routed into the guest."""
    h.install(OVERLAY, [NS_QOS])


@scenario("install: the README's quickstart (kubectl apply -k) and nothing else: the webhook "
          "makes its own certificates; webhook Available, applier ready, a dry-run pod mutated", base=True)
def s_install(h: Harness) -> None:
    install(h)


def applied_event(h: Harness, ns: str, pod: dict, timeout: float = 90) -> dict:
    """The pod's one MemoryQOSApplied Event that covers every container."""
    def complete():
        evs = h.events(ns, pod["metadata"]["uid"], APPLIED)
        # The pass before the containers start says `not started yet`; the ancestors pass
        # posts its own `QoS-level protection` Event on the pod that triggered it.
        return [e for e in evs if NOT_STARTED not in e["message"] and QOS_LEVEL not in e["message"]]
    try:
        evs = wait_until(f"{APPLIED} Event on {ns}/{pod['metadata']['name']}", complete, timeout, 1)
    except Check as e:
        other = [(x["reason"], x["message"]) for x in h.events(ns, pod["metadata"]["uid"])]
        raise Check(f"{e}; events: {other}") from None
    check(len(evs) == 1, f"{len(evs)} {APPLIED} Events: {[x['message'] for x in evs]}")
    ev = evs[0]
    check(ev.get("reportingComponent") == "koordinator.sh/koord-applier",
          f"Event not from koord-applier: {ev.get('reportingComponent')}")
    return ev


def emulated_knobs(event_msg: str) -> set[tuple[str, str]]:
    """(container, knob) for each knob the Event names emulated: `emulated on this node with
    memory.reclaim: k1 k2 for c1 c2, k3 for c3`."""
    m = re.search(r"emulated on this node with memory\.reclaim: ([^;]*)", event_msg)
    out = set()
    for group in (m.group(1).split(", ") if m else []):
        knobs, _, names = group.partition(" for ")
        out |= {(c, k) for c in names.split() for k in knobs.split()}
    return out


def knob_files(h: Harness, pod: dict, event_msg: str) -> list[str]:
    """Every knob of the annotation: the guest's cgroup file holds the value, or the Event names
    the knob unsupported. Returns what was compared."""
    mq = json.loads(pod["metadata"]["annotations"][RESOLVED]).get("memoryQOS") or {}
    m = re.search(r"unsupported on this node: ([^;]*)", event_msg)
    unsupported = set(m.group(1).split()) if m else set()
    emulated = emulated_knobs(event_msg)
    targets = [(h.pod_cgroup(None, pod), mq.get("pod") or {}, None)]
    for cname, knobs in (mq.get("containers") or {}).items():
        targets.append((h.container_cgroup(None, pod, cname), knobs, cname))
    paths = [f"{d}/{k}" for d, knobs, _ in targets for k in knobs]
    got = h.read_many(paths)
    seen = []
    for d, knobs, cname in targets:
        for knob, want in knobs.items():
            v = got[f"{d}/{knob}"]
            if knob == "memory.wmark_high":  # read back, never written (Alibaba's kernel)
                check(v is None, f"{knob} exists on a mainline kernel?")
                continue
            if v is None:
                check(knob in unsupported or (cname, knob) in emulated,
                      f"{knob}: no file in {d} and the Event lists it neither as unsupported nor "
                      f"as emulated for {cname}: {event_msg}")
                continue
            check(str(want) == v or (want == "max" and v == "max"),
                  f"{d}/{knob} = {v}, the annotation says {want}")
            seen.append(f"{'pod' if d == targets[0][0] else 'container'} {knob}={v}")
    return seen


def ls_pod(name: str, image: str) -> dict:
    """redis-demo's shape without its `{"policy": "auto"}` annotation: the cluster ConfigMap
    decides (auto takes the class's recommended parameters, 0, whatever the cluster says)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {QOS_LABEL: "LS"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "command": ["pause"],
                                     "resources": {"requests": {"cpu": "50m", "memory": "128Mi"},
                                                   "limits": {"cpu": "500m", "memory": "512Mi"}}}]}}


def ls_protected(h: Harness) -> None:
    """The LS class protected in ack-slo-config (minLimitPercent/lowLimitPercent 100) and the
    webhook answering with it: what every scenario that reads an LS pod's memory.min stands on.
    Set by each such scenario (one before it may have changed the ConfigMap); a no-op edit when
    it holds already."""
    protection.set_slo(h, protection.SLO_PROTECT)
    protection.wait_resolved(h, True, 100, NS_QOS)


@scenario("LS pod (ack-slo-config: minLimitPercent/lowLimitPercent 100): resolved-qos and "
          "MemoryQOSApplied; memory.min/low/high in the REAL pod and container cgroups the 1.37 "
          "kubelet made on cgroup v2; kubepods and burstable hold at least their children's sum")
def s_ls_cgroups(h: Harness) -> None:
    ls_protected(h)
    h.apply_obj(ls_pod("ls-app", h.env["WORKLOAD_IMAGE"]), NS_QOS)
    pod = h.wait_running(NS_QOS, "ls-app")
    check(pod["metadata"]["labels"].get(QOS_LABEL) == "LS", f"labels {pod['metadata']['labels']}")
    check(pod["status"]["qosClass"] == "Burstable", pod["status"]["qosClass"])
    ev = applied_event(h, NS_QOS, pod)
    seen = knob_files(h, pod, ev["message"])
    mins = [s for s in seen if "memory.min" in s]
    check(any(s.startswith("pod ") for s in mins) and any(s.startswith("container ") for s in mins),
          f"memory.min not compared at both levels: {seen}")
    check(any("memory.high" in s for s in seen), f"no memory.high compared: {seen}")
    log(f"ls-app Event: {ev['message']}; files: {seen}")
    # The kubelet's own: memory.max = the 512Mi limit, cpu.max = 500m.
    c, pc = h.container_cgroup(None, pod, "app"), h.pod_cgroup(None, pod)
    kp, burst = f"{CGROUP}/kubepods", f"{CGROUP}/kubepods/burstable"
    v = h.read_many([f"{c}/memory.max", f"{c}/cpu.max", f"{pc}/memory.min", f"{burst}/memory.min",
                     f"{kp}/memory.min", f"{pc}/memory.low", f"{burst}/memory.low"])
    check(v[f"{c}/memory.max"] == str(512 * 2**20), f"container memory.max {v[f'{c}/memory.max']}")
    check(v[f"{c}/cpu.max"] == "50000 100000", f"container cpu.max {v[f'{c}/cpu.max']}")
    podmin = int(v[f"{pc}/memory.min"] or 0)
    check(podmin == 128 * 2**20, f"pod memory.min {podmin}, want the 128Mi request")
    check(int(v[f"{pc}/memory.low"] or 0) == 128 * 2**20, f"pod memory.low {v[f'{pc}/memory.low']}")
    # Without the ancestors the pod's memory.min is not effective: cgroup v2 caps a child's
    # protection at its parent's. The ancestors pass follows the pod's own (with NRI the pod's
    # values are written at creation, before it): wait for it.
    def ancestors_hold() -> dict | None:
        a = h.read_many([f"{burst}/memory.min", f"{kp}/memory.min"])
        return a if all(int(x or 0) >= podmin for x in a.values()) else None
    try:
        v.update(wait_until("kubepods and burstable at least the pod's memory.min",
                            ancestors_hold, 15, 0.5))
    except Check:
        raise Check(f"ancestors: burstable memory.min {h.read(f'{burst}/memory.min')}, kubepods "
                    f"{h.read(f'{kp}/memory.min')}, below the pod's {podmin} after 15 s") from None
    h.figures.append(f"figure LS pod cgroups on cgroup v2 (kubelet 1.37, cgroupfs): {', '.join(seen)}; "
                     f"kubepods/burstable memory.min {v[f'{burst}/memory.min']}, kubepods "
                     f"{v[f'{kp}/memory.min']}")
    h.delete_pods(NS_QOS, "ls-app")


@scenario("PSI on cgroup v2: the node's kernel has PSI, and the collectors export "
          "koordlet_container_psi / koordlet_pod_psi for a real container, labelled with its "
          "containerd ID")
def s_psi(h: Harness) -> None:
    check(h.guest("[ -r /proc/pressure/memory ] && echo y").strip() == "y",
          "no /proc/pressure/memory in the guest: its kernel was built without PSI")
    h.apply_obj(ls_pod("psi-app", h.env["WORKLOAD_IMAGE"]), NS_QOS)
    pod = h.wait_running(NS_QOS, "psi-app")
    cid, uid = h.container_id(pod, "app"), pod["metadata"]["uid"]
    pressure = h.guest(f"ls {h.container_cgroup(None, pod, 'app')}").split()
    check({"cpu.pressure", "memory.pressure", "io.pressure"} <= set(pressure),
          f"the container's cgroup has no pressure files: {pressure}")

    try:
        c, p = wait_until("PSI series for psi-app", lambda: h.psi_series(cid, uid), 60, 2)
    except Check as e:
        m = h.applier_metrics()
        raise Check(f"{e}; koord_applier_psi_unavailable_cgroups = "
                    f"{metric_sum(m, 'koord_applier_psi_unavailable_cgroups')}") from None
    check(("cpu", "avg10", "some") in c and ("mem", "avg10", "some") in c, f"series {sorted(c)}")
    h.figures.append(f"figure PSI on the v2 node: {len(c)} container series and {len(p)} pod "
                     f"series for psi-app (cpu some avg10 {c[('cpu', 'avg10', 'some')]}, mem some "
                     f"avg10 {c[('mem', 'avg10', 'some')]})")
    h.delete_pods(NS_QOS, "psi-app")


# -- metrics, events ---------------------------------------------------------------------










BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
NS_BATCH = "v2-batch"


# The protection runs come before the batch scenario turns colocation on: with colocation on,
# the BE flood pod would need batch-cpu, which this one-CPU node may not have to lend.
@scenario("protection B (installed, memory QoS off in ack-slo-config)",
          full="they run on the systemd-driver node in make test (tests/node-v2/systemd.py)")
def s_protect_b(h: Harness) -> None:
    protection.run_config(h, "B")


@scenario("protection C0 (installed, the reference's ack-slo-config as it is: enable true, "
          "no parameters; memory.min stays 0 and the BE pod is reclaimed first, wmarkMinAdj 50 "
          "emulated with memory.reclaim)",
          full="they run on the systemd-driver node in make test (tests/node-v2/systemd.py)")
def s_protect_c0(h: Harness) -> None:
    protection.run_config(h, "C0")


@scenario("protection P (as C, the applier with --protect-ancestors=false: pod-level "
          "memory.min/low only, the ancestors at 0)",
          full="4 more minutes; the other configurations run on the systemd-driver node")
def s_protect_p(h: Harness) -> None:
    protection.run_config(h, "P")


@scenario("protection C (installed, the reference's ack-slo-config: LS protected, BE throttled): "
          "C keeps >= 90% of the LS working set and has at most a tenth of the refaults on its "
          "re-read that the harder-hit of A and B had; under the flood the applier keeps "
          "applying (a pod created then is protected) and is neither restarted nor OOM-killed",
          full="they run on the systemd-driver node in make test (tests/node-v2/systemd.py)")
def s_protect_c(h: Harness) -> None:
    protection.run_config(h, "C")
    protection.verdict(h)


@scenario("BE throttled: throttlingPercent 80 of a 400Mi limit -> memory.high 320Mi; streaming 900 "
          "MiB the pod is reclaimed at memory.high (high events), never reaches memory.max, no OOM "
          "kill, and the LS pod next to it keeps its working set")
def s_throttled(h: Harness) -> None:
    protection.throttled(h)


@scenario("async reclaim on mainline (wmarkRatio 95, emulated with memory.reclaim): a container "
          "reading a file larger than its limit meets the limit (memory.events max) a quarter as "
          "often or less than the same stream with wmarkRatio 0 (medians of five interleaved "
          "rounds), its reads' p99 within 1.25x of the stream's without, and the applier says so")
def s_async_reclaim(h: Harness) -> None:
    reclaim.async_reclaim(h)


def shares_to_weight(shares: int) -> int:
    """The kubelet's cgroup v2 formula (koord_api::knobs::shares_to_weight)."""
    shares = min(max(shares, 2), 262144)
    return min(max(1 + (shares - 2) * 9999 // 262142, 1), 10000)


def v2_file(knob: str, want) -> tuple[str, str]:
    """A contract knob (v1 name, as in resolved-qos) -> the cgroup v2 file and its text."""
    if knob == "cpu.shares":
        return "cpu.weight", str(shares_to_weight(int(want)))
    if knob == "cpu.cfs_quota_us":
        return "cpu.max", f"{'max' if int(want) < 0 else int(want)} 100000"
    if knob == "memory.limit_in_bytes":
        return "memory.max", "max" if int(want) < 0 else str(int(want) // 4096 * 4096)
    return knob, str(want)


def batch_files(h: Harness, pod: dict, container: str) -> dict[str, str]:
    """The batch section of resolved-qos, translated to cgroup v2, in the real cgroups."""
    batch = json.loads(pod["metadata"]["annotations"][RESOLVED])["batch"]
    targets = [(h.pod_cgroup(None, pod), batch["pod"]), (h.container_cgroup(None, pod, container),
                                                   batch["containers"][container])]
    files = {f"{d}/{v2_file(k, w)[0]}": v2_file(k, w)[1] for d, knobs in targets
             for k, w in knobs.items()}
    # A SCHED_IDLE cgroup (cpu.idle = 1, BE with --cpu-idle-fallback) has no weight: the kernel
    # reads cpu.weight as 0 and refuses writes (docs/cpu-qos.md).
    if h.read(f"{h.pod_cgroup(None, pod)}/cpu.idle") == "1":
        files[f"{h.pod_cgroup(None, pod)}/cpu.weight"] = "0"
    got = h.read_many(list(files))
    for path, want in files.items():
        check(got[path] == want, f"{path} = {got[path]}, resolved-qos batch says {want}")
    return {p.rsplit("/", 2)[-2][:12] + "/" + p.rsplit("/", 1)[-1]: v for p, v in got.items()}


def be_batch_pod(name: str, image: str, command: list[str] | None = None,
                 cpu: tuple[str, str] | None = ("100m", "500m"),
                 mem: tuple[str, str] = ("64Mi", "128Mi")) -> dict:
    req, lim = {"memory": mem[0]}, {"memory": mem[1]}
    if cpu:
        req["cpu"], lim["cpu"] = cpu
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS_BATCH, "labels": {QOS_LABEL: "BE"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "work", "image": image,
                                     "command": command or ["pause"],
                                     "resources": {"requests": req, "limits": lim}}]}}


def kubelet_log_size(h: Harness) -> int:
    return (h.node_dir / "guest" / "logs" / "kubelet.log").stat().st_size


def kubelet_log_since(h: Harness, offset: int) -> list[str]:
    with open(h.node_dir / "guest" / "logs" / "kubelet.log", "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def patch_slo_key(h: Harness, key: str, value: dict | None,
                  configmap: str = "ack-slo-config") -> None:
    """One key of a kube-system ConfigMap (ack-slo-config unless told; None removes the key);
    the ConfigMap made when no scenario before made it (a scenario run alone)."""
    data = {"data": {key: None if value is None else json.dumps(value)}}
    r = h.kubectl("-n", "kube-system", "patch", "configmap", configmap, "--type=merge",
                  "-p", json.dumps(data), check_rc=False)
    missing = r.returncode != 0 and "NotFound" in r.stderr
    if missing and value is not None:
        h.apply_obj({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": configmap, "namespace": "kube-system"}, **data})
    elif r.returncode != 0 and not missing:
        raise Check(f"kubectl patch configmap {configmap}: {r.stderr.strip()}")


def node_batch(h: Harness) -> tuple[float, float]:
    alloc = h.kjson("get", "node", h.env["NODE_NAME"])["status"].get("allocatable", {})
    return quantity(alloc.get(BATCH_CPU, "0")), quantity(alloc.get(BATCH_MEMORY, "0"))


def start_batch_pod(h: Harness, spec: dict) -> dict:
    """Starts a pod on batch resources and returns it Running, once: the applier never advertises
    less than the batch requests already bound to the node, so a pod the scheduler placed is not
    rejected by the kubelet for capacity (`OutOfkubernetes.io/batch-memory`); such a rejection
    fails here."""
    ns, name = spec["metadata"].get("namespace", NS_BATCH), spec["metadata"]["name"]

    def settled() -> dict | None:
        p = h.pod(ns, name)
        return p if p.get("status", {}).get("phase") in ("Running", "Failed") else None
    h.apply_batch_pod(spec)
    pod = wait_until(f"pod {ns}/{name} Running or rejected", settled, h.POD_TIMEOUT, 0.5)
    status = pod["status"]
    check(status["phase"] == "Running", f"{name} {status['phase']} "
          f"({status.get('reason', '')}: {status.get('message', '')}); Node batch {node_batch(h)}")
    return pod


def bound_batch_memory(h: Harness) -> tuple[int, list[str]]:
    """The batch-memory requests of the active pods bound to the node, and the names of the pods
    the kubelet rejected for batch capacity."""
    pods = h.kjson("get", "pods", "-A", "--field-selector", f"spec.nodeName={h.env['NODE_NAME']}")
    total, rejected = 0, []
    for p in pods["items"]:
        st = p.get("status", {})
        if st.get("reason", "").startswith("OutOf"):
            rejected.append(f"{p['metadata']['name']} ({st['reason']})")
        if st.get("phase") in ("Succeeded", "Failed"):
            continue
        total += int(batch_requests(p)[1])
    return total, rejected


def batch_on(h: Harness) -> None:
    """Colocation on and batch capacity on the Node, BE cpuQOS on: what every batch scenario
    stands on (set up by whichever needs it first)."""
    def start(h: Harness) -> None:
        h.namespace(NS_BATCH)
        # BE cpuQOS on (group identity -1): with --cpu-idle-fallback the BE pod becomes SCHED_IDLE.
        cfg = json.loads(json.dumps(protection.SLO_PROTECT))
        cfg["clusterStrategy"]["beClass"]["cpuQOS"] = {"enable": True}
        protection.set_slo(h, cfg)
        patch_slo_key(h, "colocation-config", {
            "enable": True, "cpuReclaimThresholdPercent": 100, "memoryReclaimThresholdPercent": 65,
            "metricAggregateDurationSeconds": 30, "updateTimeThresholdSeconds": 10,
            "resourceDiffThreshold": 0.1})
        try:
            cpu, mem = wait_until("batch-cpu/batch-memory on the Node", lambda: (
                node_batch(h) if node_batch(h)[0] >= 100 and node_batch(h)[1] >= 64 * 2**20
                else None), 180, 2)
        except Check as e:
            raise Check(f"{e}; Node has {node_batch(h)}") from None
        log(f"Node advertises batch-cpu {cpu:.0f}, batch-memory {mem / 2**20:.0f} MiB")
    h.need("batch on", start)


def be_batch(h: Harness) -> None:
    """The BE pod `be-batch` on batch resources, created by whichever scenario needs it first."""
    def start(h: Harness) -> None:
        batch_on(h)
        spec = be_batch_pod("be-batch", h.env["WORKLOAD_IMAGE"])
        wait_until("the webhook to resolve BE cpuQOS and batch resources", lambda: (lambda a: (
            json.loads(a).get("cpuQOS") or {}).get("enabled") and "batch" in json.loads(a))(
            json.loads(h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                                 input=json.dumps(spec)).stdout)["metadata"]["annotations"][RESOLVED]),
            60, 1)
        h.apply_batch_pod(spec)
    h.need("be-batch", start)


@scenario("batch on cgroup v2: colocation on -> batch-cpu/batch-memory on the Node; a BE pod is "
          "moved to batch resources and its pod and container cgroups hold the batch values as "
          "cgroup v2 files (cpu.weight from the shares, cpu.max, memory.max); --cpu-idle-fallback "
          "refused on v2, cpu.idle stays 0")
def s_batch(h: Harness) -> None:
    be_batch(h)
    res = h.pod(NS_BATCH, "be-batch")["spec"]["containers"][0]["resources"]
    check(BATCH_CPU in res["requests"] and "cpu" not in res["requests"], f"resources {res}")
    pod = h.wait_running(NS_BATCH, "be-batch")
    check(pod["status"]["qosClass"] == "BestEffort", pod["status"]["qosClass"])
    applied_event(h, NS_BATCH, pod)
    got = batch_files(h, pod, "work")
    # --cpu-idle-fallback is refused on cgroup v2 (an idle cgroup's cpu.weight reads 0, which
    # the kubelet counts as ~1.8e15 CPUs used and then fails new pods with OutOfcpu): the BE
    # pod and the QoS cgroup stay non-idle, the applier says why.
    idle = h.read_many([f"{h.pod_cgroup(None, pod)}/cpu.idle", f"{CGROUP}/kubepods/besteffort/cpu.idle"])
    check(set(idle.values()) == {"0"}, f"cpu.idle on cgroup v2: {idle}")
    logs = h.kubectl("-n", SYSTEM_NS, "logs", h.applier_pod()["metadata"]["name"]).stdout
    check("--cpu-idle-fallback is refused on cgroup v2" in logs, "no refusal in the applier log")
    h.kubelet_log_mark = kubelet_log_size(h)
    h.figures.append(f"figure BE batch pod on cgroup v2: {got}")


@scenario("batch capacity while LS usage swings (an LS pod holding 450 MiB 30 s on, 30 s off): BE "
          "pods placed before and during the swing all run, the kubelet rejects none for batch "
          "capacity, and the Node's batch-memory never falls below the batch requests bound to it "
          "and sits at that floor at least once")
def s_batch_swing(h: Harness) -> None:
    batch_on(h)
    # Three pods take three fifths of what the Node lends, placed before the swing; the swing
    # then takes the formula below what they hold (measured: 672 MiB lent fell to 262 MiB while
    # LS held its 450 MiB), so the floor is what keeps the Node at their requests. A fourth,
    # small pod is placed during the swing (it fits on an upswing).
    lent = node_batch(h)[1]
    big = max(8, min(128, int(lent / 2**20) // 5))
    small = max(8, int(lent / 2**20) // 20)
    swing = ls_pod("ls-swing", h.env["WORKLOAD_IMAGE"])
    swing["metadata"]["namespace"] = NS_BATCH
    swing["spec"]["containers"][0].update(command=["sh", "-c", (
        "while true; do koord-stress -m 1 --vm-bytes 450M --vm-hang 30 -t 30; sleep 30; done")],
        resources={"requests": {"memory": "16Mi"}, "limits": {"memory": "512Mi"}})
    sizes = {"be-swing-0": big, "be-swing-1": big, "be-swing-2": big, "be-swing-3": small}
    def read() -> tuple[int, int]:
        """The Node's advertised batch-memory and the batch requests bound to it."""
        return int(node_batch(h)[1]), bound_batch_memory(h)[0]

    t0 = time.monotonic()
    sampler: Sampler[tuple[int, int]] | None = None

    def place(name: str) -> None:
        each = sizes[name]
        start_batch_pod(h, be_batch_pod(name, h.env["WORKLOAD_IMAGE"], cpu=("10m", "100m"),
                                        mem=(f"{each}Mi", f"{2 * each}Mi")))
    try:
        # A missed sample is a gap; the count is checked.
        sampler = Sampler(read, 2.0, t0)
        for name in list(sizes)[:3]:
            place(name)
        h.apply_obj(swing)
        h.wait_running(NS_BATCH, "ls-swing")
        place("be-swing-3")
        # A whole swing more with every pod bound: the formula falls while LS holds its
        # 450 MiB, the floor holds the bound requests.
        time.sleep(65)
    finally:
        points = sampler.stop() if sampler else []
        bound, rejected = bound_batch_memory(h)
        h.delete_pods(NS_BATCH, "ls-swing", *sizes)
    # (seconds since t0, advertised batch-memory, bound requests)
    samples = [(t, a, b) for t, (a, b) in points]
    below = [(round(t), a, b) for t, a, b in samples if a < b]
    lo = min(samples, key=lambda x: x[1]) if samples else (0.0, 0, 0)
    at_floor = sum(1 for _, a, b in samples if a == b and b > 0)
    line = (f"BE pods of batch-memory 3 x {big}Mi, then {small}Mi while LS swung 450 MiB (the "
            f"Node lent {lent / 2**20:.0f} MiB before); {len(samples)} samples over "
            f"{round(time.monotonic() - t0)} s: advertised batch-memory {lo[1] / 2**20:.0f}-"
            f"{max([0] + [a for _, a, _ in samples]) / 2**20:.0f} MiB (bound {lo[2] / 2**20:.0f} MiB "
            f"at the lowest), at the floor in {at_floor} samples; rejected {len(rejected)}")
    log(line)
    h.figures.append(f"figure batch capacity under an LS swing: {line}")
    # A sample every 2 s over the swing: 40 measured (one every 2.4 s on a loaded machine).
    check(len(samples) >= 20, f"only {len(samples)} samples of the Node's batch-memory (load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    check(not rejected, f"the kubelet rejected BE pods for batch capacity: {rejected}")
    check(not below, f"batch-memory below the bound requests (t, advertised, bound): {below[:5]}")
    # Not below the floor proves the floor only if the formula went under it at least once.
    check(at_floor >= 1, "the swing never took the formula below the bound requests, so the "
          "floor was never exercised; samples (t, advertised MiB, bound MiB): "
          + ", ".join(f"({t:.0f}, {a / 2**20:.0f}, {b / 2**20:.0f})" for t, a, b in samples[:40]))


@scenario("container crash: the kubelet restarts it (new container ID, new cgroup), the applier "
          "writes the batch values into the new cgroup within the resync period, no second Event")
def s_crash(h: Harness) -> None:
    batch_on(h)
    h.apply_obj(be_batch_pod("crashy", h.env["WORKLOAD_IMAGE"],
                             ["koord-stress", "--vm", "1", "--vm-bytes", "4M", "--vm-hang", "60",
                              "-t", "6"], cpu=None, mem=("32Mi", "64Mi")))
    pod = h.wait_running(NS_BATCH, "crashy")
    first = h.container_id(pod, "work")
    applied_event(h, NS_BATCH, pod)
    batch_files(h, pod, "work")
    before = [e["message"] for e in h.events(NS_BATCH, pod["metadata"]["uid"], APPLIED)]

    def restarted():
        p = h.pod(NS_BATCH, "crashy")
        cs = p["status"]["containerStatuses"][0]
        ok = cs.get("restartCount", 0) >= 1 and "running" in cs.get("state", {})
        return p if ok and h.container_id(p, "work") != first else None
    pod = wait_until("the kubelet to restart the container", restarted, 120, 0.5)
    t0 = time.monotonic()

    def back():
        try:
            return batch_files(h, pod, "work")
        except Check:
            return None
    got = wait_until("the batch values on the new container", back, 30, 0.5)
    log(f"crashy: batch values on the new container after {time.monotonic() - t0:.1f}s: {got}")
    time.sleep(3)
    after = [e["message"] for e in h.events(NS_BATCH, pod["metadata"]["uid"], APPLIED)]
    check(after == before, f"{APPLIED} Events after the restart: {after}, before: {before}")
    h.kubectl("-n", NS_BATCH, "delete", "pod", "crashy", "--wait=false")


@scenario("applier pod deleted: the DaemonSet brings it back and it rewrites nothing; a hand edit "
          "of a v2 file (the container's cpu.max) is repaired within the resync period")
def s_applier_restart(h: Harness) -> None:
    be_batch(h)
    be = h.pod(NS_BATCH, "be-batch")
    old = h.applier_pod()
    h.kubectl("-n", SYSTEM_NS, "delete", "pod", old["metadata"]["name"], "--wait=true", timeout=120)

    def new_ready():
        p = h.applier_pod()
        return p if p["metadata"]["uid"] != old["metadata"]["uid"] and all(
            c["ready"] for c in p["status"].get("containerStatuses") or [{"ready": False}]) else None
    new = wait_until("the new applier pod Ready", new_ready, 180, 1)
    wait_until("the new applier's first pass", lambda: metric_sum(
        h.applier_metrics(new), "koord_applier_cgroup_writes_total", outcome="unchanged") > 0,
        60, 1)
    time.sleep(22)  # and one full resync (20 s)
    m = h.applier_metrics(new)
    written = {dict(l)["knob"]: v for (n, l), v in m.items()
               if n == "koord_applier_cgroup_writes_total" and ("outcome", "written") in l and v}
    check(not written, f"the new applier wrote knobs that were already right: {written}")
    f = f"{h.container_cgroup(None, be, 'work')}/cpu.max"
    want = h.read(f)
    h.guest(f"echo '90000 100000' > {f}")
    check(h.read(f) == "90000 100000", "the hand edit did not take")
    t0 = time.monotonic()
    wait_until(f"{f} repaired", lambda: h.read(f) == want, 35, 0.5)
    took = time.monotonic() - t0
    log(f"hand edit of the container's cpu.max repaired to {want} after {took:.1f}s (resync 20 s)")
    h.figures.append(f"figure hand edit of a v2 file repaired: {took:.1f} s (resync period 20 s)")
    # Through BE pods created, crashed and deleted and the applier replaced: the kubelet's QoS
    # cgroup updates never failed on a file the applier changed.
    fails = [line for line in kubelet_log_since(h, h.kubelet_log_mark)
             if "Failed to update QoS cgroup configuration" in line or "OutOfcpu" in line]
    check(not fails, f"the kubelet failed QoS cgroup updates or admissions: {fails[:3]}")


@scenario("webhook down: a pod created with no webhook endpoint starts untouched (failurePolicy "
          "Ignore); when the webhook is back the re-resolver annotates it and the applier "
          "writes its cgroup v2 files")
def s_webhook_down(h: Harness) -> None:
    ls_protected(h)
    node = h.env["NODE_NAME"]
    h.kubectl("cordon", node)
    try:
        h.kubectl("-n", SYSTEM_NS, "delete", "pods", "-l", "app.kubernetes.io/name=koord-webhook",
                  "--wait=true", timeout=120)
        pod = ls_pod("while-down", h.env["WORKLOAD_IMAGE"])
        pod["spec"]["nodeName"] = node  # bypasses the scheduler, as a DaemonSet pod would
        t0 = time.monotonic()
        h.apply_obj(pod, NS_QOS)
        h.figures.append(f"figure kubectl apply of a pod with no webhook endpoint on 1.37: "
                         f"{time.monotonic() - t0:.2f} s")
        p = h.wait_running(NS_QOS, "while-down")
        check(RESOLVED not in (p["metadata"].get("annotations") or {}),
              f"mutated while the webhook was down: {p['metadata']}")
        h.carry["failed open"] = True  # kube-apiserver now counts a fail-open (monitoring)
    finally:
        h.kubectl("uncordon", node)
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook", "--timeout=240s",
              timeout=260)
    p = wait_until("while-down to be re-resolved", lambda: (lambda q: q if RESOLVED in (
        q["metadata"].get("annotations") or {}) else None)(h.pod(NS_QOS, "while-down")), 120, 1)
    ev = applied_event(h, NS_QOS, p, timeout=120)
    seen = knob_files(h, p, ev["message"])
    check(any("pod memory.min=134217728" == s for s in seen), f"files: {seen}")
    h.delete_pods(NS_QOS, "while-down")


@scenario("ConfigMap flip: lsClass memoryQOS enable true -> false in ack-slo-config reaches a "
          "running LS pod's annotation and its cgroup v2 files (memory.min 0), then back")
def s_flip(h: Harness) -> None:
    ls_protected(h)
    h.apply_obj(ls_pod("flip-ls", h.env["WORKLOAD_IMAGE"]), NS_QOS)
    pod = h.wait_running(NS_QOS, "flip-ls")
    applied_event(h, NS_QOS, pod)
    cid = h.container_id(pod, "app")
    path = f"{h.pod_cgroup(None, pod)}/memory.min"
    check(h.read(path) == str(128 * 2**20), f"{path} = {h.read(path)} before the flip")
    try:
        for enable, want in ((False, "0"), (True, str(128 * 2**20))):
            cfg = json.loads(json.dumps(protection.SLO_PROTECT))
            cfg["clusterStrategy"]["lsClass"]["memoryQOS"]["enable"] = enable
            t0 = time.monotonic()
            protection.set_slo(h, cfg)
            wait_until(f"{path} = {want}", lambda: h.read(path) == want, 120, 0.5)
            took = time.monotonic() - t0
            log(f"enable={enable}: {path} = {want} {took:.1f}s after the ConfigMap edit")
            h.figures.append(f"figure ack-slo-config edit (lsClass memoryQOS enable={enable}) -> "
                             f"a running pod's memory.min on cgroup v2: {took:.1f} s")
    finally:
        protection.set_slo(h, protection.SLO_PROTECT)
    after = h.pod(NS_QOS, "flip-ls")
    check(h.container_id(after, "app") == cid, "the container was restarted by the flip")
    h.delete_pods(NS_QOS, "flip-ls")


@scenario("in-place resize (pods/resize, memory request 128Mi -> 192Mi -> 96Mi): the annotation "
          "follows the kubelet's allocation and the REAL pod and container memory.min follow it, "
          "the container is not restarted")
def s_resize(h: Harness) -> None:
    ls_protected(h)
    pods = [f"resize-{i}" for i in range(3)]
    for n in pods:
        h.apply_obj(ls_pod(n, h.env["WORKLOAD_IMAGE"]), NS_QOS)
    running = {n: h.wait_running(NS_QOS, n) for n in pods}
    for n in pods:
        applied_event(h, NS_QOS, running[n])
    try:
        for request in ("192Mi", "96Mi"):
            want = str(int(quantity(request)))
            t0 = time.monotonic()
            annotated = h.resize_memory(NS_QOS, pods, "app", request)
            paths = [f"{h.container_cgroup(None, running[n], 'app')}/memory.min" for n in pods]
            paths += [f"{h.pod_cgroup(None, running[n])}/memory.min" for n in pods]
            wait_until(f"memory.min = {request} in {len(paths)} cgroups",
                       lambda: all(v == want for v in h.read_many(paths).values()), 60, 0.5)
            took = time.monotonic() - t0
            # The ancestors' pass follows the pods' (its own debounce): the QoS class's sum
            # catches up a moment later, within the resync at most.
            burstable = f"{CGROUP}/kubepods/burstable/memory.min"
            wait_until(f"burstable memory.min >= the resized pods' sum {len(pods) * int(want)}",
                       lambda: int(h.read(burstable)) >= len(pods) * int(want), 30, 0.25)
            ancestors = time.monotonic() - t0
            log(f"resize to {request}: annotations after {annotated}, every memory.min after "
                f"{took:.1f}s, burstable's sum after {ancestors:.1f}s")
            h.figures.append(f"figure in-place resize to {request} on cgroup v2 (3 pods): "
                             f"resize -> annotation max {annotated[-1]:.1f} s, -> pod and "
                             f"container memory.min {took:.1f} s, -> burstable's sum "
                             f"{ancestors:.1f} s")
        for n in pods:
            after = h.pod(NS_QOS, n)
            check(h.container_id(after, "app") == h.container_id(running[n], "app"),
                  f"{n}: the container was restarted by the resize")
    finally:
        h.delete_pods(NS_QOS, *pods)


SUPPRESS_PHASE_SECONDS = 20
# The BE budget's floor on this one-CPU node (the applier's default, 2 CPUs capped at the node's,
# would make the budget the whole node).
SUPPRESS_FLOOR_CPUS = 0.05


def be_cores(h: Harness, cg: str, seconds: int) -> tuple[float, str]:
    """The cores a cgroup used over `seconds` (cpu.stat usage_usec, timed in the guest) and the
    BE parent's cpu.max over the window: read every second, the median. (One read in the
    middle once caught the budget at its floor for a moment of the guest's own work, in a
    window whose BE pod ran at 0.28 cores.)"""
    out = h.guest(
        f"a=$(awk '/^usage_usec/ {{print $2}}' {cg}/cpu.stat); t0=$(date +%s%N); "
        f"for i in $(seq {seconds}); do sleep 1; cat {CGROUP}/kubepods/besteffort/cpu.max; done; "
        f"b=$(awk '/^usage_usec/ {{print $2}}' {cg}/cpu.stat); "
        f"t1=$(date +%s%N); echo \"$a $b $t0 $t1\"", timeout=seconds * 2 + 60).splitlines()
    a, b, t0, t1 = (int(x) for x in out[-1].split())
    return (b - a) * 1000 / (t1 - t0), median_quota([line.split() for line in out[:-1] if line.strip()])


def median_quota(reads: list[list[str]]) -> str:
    """The median of cpu.max reads (`QUOTA PERIOD`, `max` the largest), as cpu.max writes it."""
    check(reads, "no cpu.max read in the window")
    ordered = sorted(reads, key=lambda r: 10**18 if r[0] == "max" else int(r[0]))
    return " ".join(ordered[len(ordered) // 2])


@scenario("BE suppression on cgroup v2 (cfsQuota, threshold 65%): a BE pod burning CPU is held "
          "by kubepods/besteffort's cpu.max at node CPUs x 65% - LS - system; an LS pod burning "
          "CPU lowers the quota and the BE pod's cores, stopping it gives them back")
def s_suppress(h: Harness) -> None:
    batch_on(h)
    h.applier_args(add=f"--be-suppress-min-cpus={SUPPRESS_FLOOR_CPUS}")
    patch_slo_key(h, "resource-threshold-config", {"clusterStrategy": {
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota"}})
    burn = ["koord-stress", "-c", "1"]
    be_spec = be_batch_pod("be-burn", h.env["WORKLOAD_IMAGE"], burn, cpu=("50m", "1"),
                           mem=("16Mi", "32Mi"))
    ls = ls_pod("ls-burn", h.env["WORKLOAD_IMAGE"])
    ls["metadata"]["namespace"] = NS_BATCH
    ls["spec"]["containers"][0].update(command=burn, resources={
        "requests": {"cpu": "200m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}})
    parent = f"{CGROUP}/kubepods/besteffort/cpu.max"
    try:
        be = start_batch_pod(h, be_spec)
        cg = h.pod_cgroup(None, be)
        # Suppression on, and calm means calm: the pod's start (kubelet, containerd, the image)
        # counts as system usage and can hold the budget at the floor for a while on this
        # one-CPU node; on a loaded host that lasted into the calm phase, which then had
        # nothing to fall from.
        floor_us = round(SUPPRESS_FLOOR_CPUS * 100_000)

        def above_floor() -> bool:
            quota = h.read(parent).split()[0]
            return quota != "max" and int(quota) > floor_us
        wait_until(f"the BE quota above its floor ({SUPPRESS_FLOOR_CPUS} CPU) with no LS load",
                   above_floor, 120, 1)
        phases = [("calm", *be_cores(h, cg, SUPPRESS_PHASE_SECONDS))]
        h.apply_obj(ls)
        h.wait_running(NS_BATCH, "ls-burn")
        time.sleep(4)  # two samples of the colocation loop with the LS pod busy
        phases.append(("LS busy", *be_cores(h, cg, SUPPRESS_PHASE_SECONDS)))
        h.delete_pods(NS_BATCH, "ls-burn")
        time.sleep(4)
        phases.append(("LS stopped", *be_cores(h, cg, SUPPRESS_PHASE_SECONDS)))
        table = ", ".join(f"{n}: BE {c:.2f} cores, besteffort cpu.max {q}" for n, c, q in phases)
        log(table)
        quota = [int(q.split()[0]) if q.split()[0] != "max" else 10**9 for _, _, q in phases]
        cores = [c for _, c, _ in phases]
        check(quota[1] < quota[0] and quota[2] > quota[1],
              f"the BE quota did not fall under LS load and come back: {table}")
        check(cores[1] < 0.7 * cores[0] and cores[2] > cores[1],
              f"the BE pod's cores did not follow the quota: {table}")
        h.figures.append(f"figure BE suppression on cgroup v2 (one CPU, threshold 65%): {table}")
    finally:
        h.delete_pods(NS_BATCH, "ls-burn", "be-burn")
        patch_slo_key(h, "resource-threshold-config", {"clusterStrategy": {"enable": False}})
    wait_until("the BE parent's quota lifted", lambda: h.read(parent).split()[0] == "max", 60, 1)


# The applier as an NRI plugin: values at the container's first instruction (tests/node-v2/nri.py).
nri.register(scenario, applied_event)


NS_LOAD = "v2-load"
LOAD_MIN = 8 * 2**20


def load_pod(i: int, image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"load-{i:03d}", "namespace": NS_LOAD, "labels": {QOS_LABEL: "LS"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": image, "command": ["pause"],
                                     "resources": {"requests": {"cpu": "1m", "memory": "8Mi"},
                                                   "limits": {"memory": "32Mi"}}}]}}




def applier_usage(h: Harness, seconds: float) -> tuple[float, float, float]:
    """The applier process in the guest: RSS and peak (MiB), CPU % of one core over `seconds`."""
    pid = h.guest("pgrep -f '^/koord-applier run|koord-applier run' | head -1").strip()
    check(pid.isdigit(), f"no applier process in the guest: {pid!r}")
    return h.process_usage(pid, seconds)


def apply_load(h: Harness, first: int, last: int, batch: int = 10) -> None:
    """Load pods first..last-1, `batch` at a time, each batch Running before the next: the UML
    node's containerd (every fork and exec costs ~11 ms there) times out sandbox creation when
    50 arrive at once."""
    for b in range(first, last, batch):
        names = [f"load-{i:03d}" for i in range(b, min(last, b + batch))]
        h.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List",
             "items": [load_pod(i, h.env["WORKLOAD_IMAGE"]) for i in range(b, min(last, b + batch))]}))

        def running():
            items = h.kjson("-n", NS_LOAD, "get", "pods")["items"]
            up = {p["metadata"]["name"] for p in items if p["status"].get("phase") == "Running"}
            return set(names) <= up
        wait_until(f"load pods {names[0]}..{names[-1]} Running", running, 600, 2)


OWNERSHIP_SECONDS = int(os.environ.get("KOORD_NODE_V2_OWNERSHIP_SECONDS", "300"))


def g_pod(name: str, image: str) -> dict:
    """A Guaranteed LS pod (requests = limits)."""
    res = {"cpu": "100m", "memory": "96Mi"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {QOS_LABEL: "LS"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": image, "command": ["pause"],
                                     "resources": {"requests": res, "limits": res}}]}}


@scenario("the kubelet's own Memory QoS (1.37 gate on, TieredReservation) with the applier's "
          "--kubelet-memory-qos=tiered: after convergence every protection file of kubepods, the "
          "QoS classes, the pods and containers is sampled every second and never changes, and "
          "the applier writes nothing")
def s_kubelet_memory_qos(h: Harness) -> None:
    # Runs after install alone as well (make test gives it a node of its own, see
    # tests/suites.sh): nothing it needs comes from the scenarios before it.
    h.namespace(NS_QOS)
    cfg = h.node_dir / "guest" / "kubelet.yaml"
    text = cfg.read_text()
    # The node's kubelet runs with its defaults (the MemoryQoS gate on, policy None): the
    # scenario turns the reservation on.
    check("memoryReservationPolicy" not in text and "MemoryQoS: false" not in text,
          "the node's kubelet does not run with its default Memory QoS settings")
    cfg.write_text(text + "memoryReservationPolicy: TieredReservation\n")
    g = h.node_dir / "guest"
    h.guest(f"{HERE / 'guest' / 'restart-kubelet.sh'} {g}")
    log("kubelet restarted with memoryReservationPolicy TieredReservation (MemoryQoS on by default)")
    h.applier_args(add="--kubelet-memory-qos=tiered")
    protection.set_slo(h, protection.SLO_PROTECT)
    protection.wait_resolved(h, True, 100, NS_QOS)
    h.apply_obj(ls_pod("own-b", h.env["WORKLOAD_IMAGE"]), NS_QOS)
    h.apply_obj(g_pod("own-g", h.env["WORKLOAD_IMAGE"]), NS_QOS)
    pods = [h.wait_running(NS_QOS, "own-b"), h.wait_running(NS_QOS, "own-g")]
    check(pods[1]["status"]["qosClass"] == "Guaranteed", pods[1]["status"]["qosClass"])
    for p in pods:
        applied_event(h, NS_QOS, p, timeout=120)
    kp, burst = f"{CGROUP}/kubepods", f"{CGROUP}/kubepods/burstable"
    files = [f"{d}/{k}" for d in (kp, burst, f"{CGROUP}/kubepods/besteffort")
             for k in ("memory.min", "memory.low")]
    for p in pods:
        for d in (h.pod_cgroup(None, p), h.container_cgroup(None, p, "app")):
            files += [f"{d}/{k}" for k in ("memory.min", "memory.low", "memory.high")]
    # The kubelet's sums (its rule, contract section 6): kubepods memory.min covers both pods'
    # requests; the annotation's values at pod level (min = low = the request).
    want_pod = {h.pod_cgroup(None, pods[0]): 128 * 2**20, h.pod_cgroup(None, pods[1]): 96 * 2**20}

    def converged():
        v = h.read_many(files)
        ok = int(v[f"{kp}/memory.min"]) >= 224 * 2**20 and all(
            v[f"{d}/memory.min"] == str(w) for d, w in want_pod.items())
        return v if ok else None
    try:
        first = wait_until("the kubelet's and the applier's values to settle", converged, 120, 1)
    except Check as e:
        raise Check(f"{e}: {h.read_many(files)}") from None
    time.sleep(25)  # a full resync of the applier and a kubelet QoS update after the pods
    first = h.read_many(files)
    written = lambda: metric_sum(h.applier_metrics(), "koord_applier_cgroup_writes_total",  # noqa: E731
                                 outcome="written")
    w0 = written()
    changes: list[str] = []
    t_end = time.monotonic() + OWNERSHIP_SECONDS
    samples = 0
    while time.monotonic() < t_end:
        v = h.read_many(files)
        samples += 1
        changes += [f"{f}: {first[f]} -> {v[f]}" for f in files if v[f] != first[f]]
        time.sleep(1)
    w1 = written()
    check(not changes, f"{len(changes)} changes in {samples} samples: {changes[:5]}")
    check(w1 == w0, f"the applier wrote {w1 - w0:.0f} knobs during the window")
    short = {f.replace(CGROUP + "/", ""): first[f] for f in files[:4]}
    h.figures.append(f"figure kubelet Memory QoS (TieredReservation) + applier "
                     f"--kubelet-memory-qos=tiered: {samples} samples over {OWNERSHIP_SECONDS} s of "
                     f"{len(files)} files, 0 changes, 0 applier writes; {short}")
    log(h.figures[-1])
    h.delete_pods(NS_QOS, "own-b", "own-g")


# What this node cannot give a Prometheus (a panel or alert selector naming only these is not
# failed); everything the v1 node lacks and this one has (the QoS-level protection files,
# containerd 2's NRI) must have series here.
NEEDS_V2 = {
    "koordlet_container_cpi": "a PMU and the CPICollector gate (a User-Mode Linux guest has no PMU)",
    "koord_applier_cpi_collector_supported": "the CPICollector gate, which the suite leaves off "
    "(no PMU: CPI would stay idle)",
}
# The metric families only this node can give (the v1 node excuses them): every metric of them
# that an alert or a dashboard names must have had series here under one of its selectors.
V2_FAMILIES = ("koord_applier_qos_memory_protection", "koord_applier_nri_",
               "koord_applier_proactive_reclaim")


@scenario("monitoring on cgroup v2: every alert expression and dashboard query of the installed "
          "monitoring kustomization evaluated against a real Prometheus scraping this node; every "
          "memory protection, NRI and proactive reclaim metric they name has series, excused "
          "only what this node lacks (no PMU) and values that appear with an event")
def s_monitoring(h: Harness) -> None:
    ls_protected(h)
    # A container made through NRI and a protected LS pod, so those series exist even when the
    # scenario runs alone.
    pod = ls_pod("ls-prom", h.env["WORKLOAD_IMAGE"])
    pod["metadata"]["namespace"] = NS_QOS
    # Opted in to proactive reclaim (a 1-s interval): the loop's per-container series exist.
    pod["metadata"]["annotations"] = {
        "koordinator.sh/proactiveReclaim": json.dumps({"enable": True, "intervalSeconds": 1})}
    h.apply_obj(pod)
    h.wait_running(NS_QOS, "ls-prom")
    port = 27091 + int(os.environ.get("KOORD_V2_SLOT", "0"))
    try:
        monitoring.started(h, port)
        needs = dict(NEEDS_V2)
        # kube-apiserver counts a fail-open only once one happened: the webhook-down scenario
        # makes one before this one in a whole run; run alone, there was none to count.
        if not h.carry.get("failed open"):
            needs["apiserver_admission_webhook_fail_open_count"] = (
                "no fail-open in this run (the webhook-down scenario, not run here, makes one)")
        prom = h.carry["prom"]
        wait_until("Prometheus to scrape the proactive reclaim loop's stall (ls-prom)",
                   lambda: prom.query("count(koord_applier_proactive_reclaim_stall_seconds)"), 90, 1)
        found = monitoring.queries(h, needs)
        # KOORD_V2_MONITORING_PLANT: a metric that must have series too (one that does not
        # exist shows this check failing on purpose).
        plant = os.environ.get("KOORD_V2_MONITORING_PLANT", "").strip()
        planted = (plant,) if plant else ()
        for metric in planted:
            found.named.add((metric, ""))
            if monitoring.has_series(prom, metric, ""):
                found.with_series.add((metric, ""))
        missing = monitoring.families_without_series(found.named, found.with_series,
                                                     V2_FAMILIES, planted)
        required = sorted({m for m, _ in found.named if m.startswith(V2_FAMILIES)} | set(planted))
        lacking = sorted(s for s, why in found.excused.items() if why.startswith("not on this node"))
        h.figures.append(f"figure monitoring on cgroup v2: {len(required) - len(missing)} of the "
                         f"{len(required)} protection, NRI and proactive reclaim metrics the "
                         f"alerts and dashboards name had series"
                         + (f" (planted: {', '.join(planted)})" if planted else "")
                         + f"; {len(found.excused)} selectors excused, {len(lacking)} for what "
                         f"this node lacks ({', '.join(lacking) or 'none'})")
        check(not missing, "metrics this node must give without series: " + "; ".join(missing))
    finally:
        monitoring.stop(h)
        h.carry.pop("prometheus started", None)
        monitoring.remove_stub_crds(h)
        h.delete_pods(NS_QOS, "ls-prom")


@scenario("figures (KOORD_NODE_V2_FULL=1, a guest of 4 GiB): the unprotected window (a "
          "container's cgroup appearing -> its memory.min holding the annotation's value) over 50 "
          "LS pods; the applier's RSS and CPU with 50 and 100 pods on the node",
          full="UML creates pods slowly; 100 pods need KOORD_V2_GUEST_MEM=4096M")
def s_figures(h: Harness) -> None:
    # Batches of 10: 50 at once timed this UML node's containerd shims out. 100 pods' shims
    # and pause processes do not fit beside the kubelet in the protection proof's 1536 MiB.
    mem = int(h.guest("awk '/MemTotal/ {print $2}' /proc/meminfo").strip()) * 1024
    check(mem >= 3 * 2**30, f"the guest has {mem / 2**20:.0f} MiB: 100 load pods need "
          "KOORD_V2_GUEST_MEM=4096M")
    n_window = 50
    h.namespace(NS_LOAD)
    # The protecting ack-slo-config, in force at the webhook (run alone, nothing set it).
    protection.set_slo(h, protection.SLO_PROTECT)
    protection.wait_resolved(h, True, 100, NS_LOAD)
    try:
        figures(h, n_window, (n_window, 100))
    finally:
        h.kubectl("delete", "namespace", NS_LOAD, "--wait=true", "--ignore-not-found", timeout=900)


def applier_mode(h: Harness) -> str:
    m = h.applier_metrics()
    return next((dict(l)["mode"] for (n, l), v in m.items()
                 if n == "koord_applier_apply_mode" and v == 1), "unknown")


def figures(h: Harness, n_window: int, rss_at: tuple[int, ...]) -> None:
    script = HERE.parent / "lib" / "window.py"
    poller = subprocess.Popen(
        [sys.executable, "-c", "import json,sys,urllib.request;"
         "r=urllib.request.Request(sys.argv[1],data=sys.argv[2].encode(),headers={'X-Timeout':'1500'});"
         "print(urllib.request.urlopen(r,timeout=1520).read().decode())",
         h.env["GUEST_AGENT"],
         f"python3 -B {script} {n_window} memory.min {LOAD_MIN} 1480 0.05 "
         f"{CGROUP}/kubepods/burstable"],
        stdout=subprocess.PIPE, text=True)
    time.sleep(2)  # the poller has listed the pods already there
    t0 = time.monotonic()
    try:
        apply_load(h, 0, n_window)
    except Check:
        poller.kill()
        raise
    took = time.monotonic() - t0
    out, _ = poller.communicate(timeout=1540)
    res = json.loads(json.loads(out)["stdout"])
    w = res["windows"]
    check(res["protected"] == n_window, f"{res['protected']} of {n_window} containers reached "
          f"memory.min {LOAD_MIN} ({res['seen']} container cgroups seen)")
    # An upper bound: runc makes the container's cgroup, sets its resources once runc init
    # reports back, and execs the process only at start; NRI figures reads the value from the
    # process itself.
    h.figures.append(f"figure unprotected window on cgroup v2, upper bound (container cgroup "
                     f"appears -> its memory.min holds the annotation's value; applier mode "
                     f"{applier_mode(h)}), {n_window} LS pods in batches of "
                     f"10 ({took:.0f} s): p50 {percentile(w, 50):.2f} s, p99 {percentile(w, 99):.2f} s, "
                     f"max {max(w):.2f} s")
    log(h.figures[-1])
    have = n_window
    for n in rss_at:
        if n > have:
            apply_load(h, have, n)
            have = n
        time.sleep(25)  # one full resync after the last pod
        rss, hwm, cpu = applier_usage(h, 60)
        m = h.applier_metrics()
        h.figures.append(f"figure applier on cgroup v2 with {n} load pods "
                         f"({metric_sum(m, 'koord_applier_pods_managed'):.0f} managed): RSS "
                         f"{rss:.1f} MiB (peak {hwm:.1f} MiB), CPU {cpu:.2f}% of one core over 60 s "
                         "(3 resyncs of 20 s)")
        log(h.figures[-1])


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def setup(h: Harness) -> None:
    prerequisites(h)
    build_images(h)
    start_node(h)


def teardown(h: Harness, passed: list[str], failed: list[str], interrupted: bool) -> None:
    if failed and h.node_started:
        h.print_log_tails((f, 15) for f in ("logs/linux.uml.log", "guest/logs/init.log",
                                             "guest/logs/kubelet.log", "guest/logs/containerd.log"))
    keep = bool(failed) or os.environ.get("KOORD_NODE_V2_KEEP") == "1"
    if h.node_started:
        t0 = time.monotonic()
        if h.installed and not interrupted:
            # Uninstall as a user would, before the node goes.
            try:
                h.kubectl("delete", "-k", str(OVERLAY), "--ignore-not-found", "--wait=true",
                          check_rc=False, timeout=300)
            except subprocess.TimeoutExpired:
                # A node that no longer deletes pods must still be stopped and checked.
                print("teardown: `kubectl delete -k` did not finish in 300 s; stopping the node",
                      file=sys.stderr, flush=True)
        r = h.node_sh("stop", str(h.node_dir), timeout=600)
        ok = r.returncode == 0 and h.node_sh("check-clean", str(h.node_dir)).returncode == 0
        if ok:
            passed.append("teardown")
            print(f"PASS teardown: nothing left (no tap, route, guard rule, guest or control-plane "
                  f"process) ({time.monotonic() - t0:.1f}s)", flush=True)
        else:
            failed.append("teardown")
            print("FAIL teardown: node.sh stop left things behind (see above)", flush=True)
    for line in h.figures:
        print(line, flush=True)
    if keep and not interrupted:
        log(f"kept logs and state in {h.dir}")
    else:
        shutil.rmtree(h.dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(SUITE.main(Harness(), setup, teardown))
