#!/usr/bin/env python3
"""Node suite: the product installed as a user installs it, on a real one-node cluster.

Run it through `tests/node/run` (see README.md). Stdlib only (Python 3.11+).

  make images -> node.sh start (etcd, kube-apiserver, controller-manager, scheduler, containerd,
  kubelet, kube-proxy on a test bridge) -> ctr import of the product's images -> koord-webhook
  kubectl apply -k (self-managed certificates) -> scenarios with real pods -> figures ->
  kubectl delete -k manifests/ -> node.sh stop -> node.sh check-clean.

Each scenario prints `PASS <name> (<s>)` or `FAIL <name>: <reason>`; the last line is
`N passed, M failed`. Figures are printed as `figure <what>: ...` lines. Progress on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "lib"))
sys.dont_write_bytecode = True

import colocation  # noqa: E402  (NGINX beside FFmpeg: latency held)
import continuity  # noqa: E402  (rolling update and drain: no admission missed)
import koordtest  # noqa: E402
from koordtest import monitoring  # noqa: E402  (the shipped alerts and dashboards on a real Prometheus)
from koordtest import webhookcfg  # noqa: E402
from koordtest.checks import Check, Fatal, check, quantity, wait_until  # noqa: E402
from koordtest.harness import log  # noqa: E402
from koordtest.metrics import metric_sum, percentile  # noqa: E402
from koordtest.node import SYSTEM_NS, NodeHarness, build_images  # noqa: E402
from koordtest.watch import ApiWatch, Endpoint  # noqa: E402

NODE_SH = HERE / "node.sh"
OVERLAY = HERE / "overlay"
TESTDATA = HERE / "testdata"
MANIFESTS = REPO / "manifests"
CGROUP = Path("/sys/fs/cgroup")

OPT_IN = "koordinator.sh/qos-webhook"
QOS_LABEL = "koordinator.sh/qosClass"
RESOLVED = "koordinator.sh/resolved-qos"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
WEBHOOK_NAME = "pods.qos.koordinator.sh"
APPLIED = "MemoryQOSApplied"

NS_QOS = "node-qos"  # the seeds' shapes, crash/restart, webhook down
NS_BATCH = "node-batch"  # BE pods with batch resources
NS_LOAD = "node-load"  # the figures' pods

# CAP_DAC_OVERRIDE (1), CAP_SYS_PTRACE (19), CAP_SYS_NICE (23): what the DaemonSet adds.
APPLIER_CAPS = (1 << 1) | (1 << 19) | (1 << 23)

koordtest.set_log_tag("node")


# ---------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------


class Harness(NodeHarness):
    """kubectl, pods, events, the applier's pod and metrics, cgroup paths (cgroup v1: one
    hierarchy per controller), file reads on this machine: koordtest.node.NodeHarness."""

    def __init__(self) -> None:
        super().__init__("koord-node.", NODE_SH)

    def container_pid(self, pod: dict, name: str) -> int:
        procs = (self.container_cgroup("pids", pod, name) / "cgroup.procs").read_text().split()
        check(procs, f"no process in the cgroup of {pod['metadata']['name']}/{name}")
        return int(procs[0])


def status_caps(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


# ---------------------------------------------------------------------------------------
# Setup: images, node, install
# ---------------------------------------------------------------------------------------


def prerequisites(h: Harness) -> None:
    if os.geteuid() != 0:
        raise Fatal("must run as root (kubelet, containerd, a bridge, iptables, cgroups)")
    for tool in ("cargo", "python3", "curl", "openssl"):
        if not shutil.which(tool):
            raise Fatal(f"{tool} not on PATH")
    # kubectl: the one node.sh start reports (control-plane.sh build makes one if needed).
    r = h.node_sh("check-clean")
    if r.returncode != 0:
        raise Fatal("the machine has leftovers of a node (see above); refusing to start")


def start_node(h: Harness) -> None:
    log("node.sh build (k8s binaries, cached) + start")
    r = h.node_sh("build")
    if r.returncode != 0:
        raise Fatal("node.sh build failed (see above)")
    h.node_started = True
    t0 = time.monotonic()
    r = h.node_sh("start", str(h.node_dir))
    if r.returncode != 0:
        raise Fatal("node.sh start failed (see above)")
    h.load_node_env()
    h.kubectl_bin = h.env["KUBECTL"]  # of the node's version (node.sh build made one if needed)
    log(f"node up in {time.monotonic() - t0:.0f}s")
    r = h.node_sh("import", str(h.node_dir), *h.images.values())
    if r.returncode != 0:
        raise Fatal("importing the product's images failed")


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

# KOORD_NODE_FULL=1: also the scenarios not yet in `make test` (their SKIP lines say why).
SUITE = koordtest.Suite("KOORD_NODE_ONLY", full_env="KOORD_NODE_FULL")
scenario = SUITE.scenario


@scenario("images: the archives `make images` built are what manifests/ reference, "
          "imported into the node's containerd", base=True)
def s_images(h: Harness) -> None:
    rendered = webhookcfg.render(h.kubectl_bin, str(MANIFESTS))
    refs = sorted({c["image"] for o in webhookcfg.select(rendered, "Deployment", "DaemonSet")
                   for c in o["spec"]["template"]["spec"]["containers"]})
    check(refs == sorted(h.images), f"manifests reference {refs}, make images built {sorted(h.images)}")
    out = subprocess.run(["ctr", "--address", h.env["CONTAINERD_ADDRESS"], "-n", "k8s.io",
                          "images", "ls", "-q"], capture_output=True, text=True, check=True).stdout
    for ref in refs:
        check(ref in out.split(), f"{ref} not in the node's containerd: {out.split()}")


@scenario("install: the README's quickstart (kubectl apply -k, label a namespace) and nothing "
          "else: the webhook makes its own certificates; webhook Available, applier DaemonSet "
          "ready, example ConfigMaps applied, a pod in an opted-in namespace mutated", base=True)
def s_install(h: Harness) -> None:
    # The reference's example ConfigMaps, applied explicitly (not relying on the base).
    h.install(OVERLAY, [NS_QOS, NS_BATCH, NS_LOAD],
              [TESTDATA / "ack-slo-config.yaml", TESTDATA / "ack-slo-pod-config.yaml"])


@scenario("prometheus: Debian's prometheus on loopback scrapes kube-apiserver, both webhook "
          "replicas and the applier as manifests/monitoring's ServiceMonitors have the operator "
          "scrape them, with the shipped rules (a test copy: for 0s, windows / 20); kubectl "
          "apply -k manifests/monitoring installs the PrometheusRule and four dashboards")
def s_prometheus(h: Harness) -> None:
    monitoring.started(h)


@scenario("alert KoordApplierDown: the applier's process stopped (SIGSTOP) fires it, resumed "
          "(SIGCONT) it clears")
def s_alert_applier_down(h: Harness) -> None:
    fault_applier_stopped(h)


def fault_applier_stopped(h: Harness) -> None:
    h.need("fault: applier stopped", monitoring.applier_stopped)


@scenario("alert KoordApplierRefusedAnnotations: a pod with a forged resolved-qos (memory.min "
          "above its request) is refused by the applier, and the alert fires")
def s_alert_refused(h: Harness) -> None:
    fault_refused(h)


def fault_refused(h: Harness) -> None:
    h.need("fault: refused", lambda h: monitoring.refused(h, h.env["WORKLOAD_IMAGE"],
                                                          h.env["NODE_NAME"]))


@scenario("processes: webhook runs as 65532 with no capabilities; applier as root with exactly "
          "DAC_OVERRIDE, SYS_NICE, SYS_PTRACE; both no-new-privs and seccomp-filtered")
def s_processes(h: Harness) -> None:
    webhooks = h.kjson("-n", SYSTEM_NS, "get", "pods", "-l", "app.kubernetes.io/name=koord-webhook")
    for pod in webhooks["items"]:
        st = status_caps(h.container_pid(pod, "webhook"))
        check(st["Uid"].split()[:2] == ["65532", "65532"], f"webhook Uid {st['Uid']}")
        check(int(st["CapEff"], 16) == 0 and int(st["CapBnd"], 16) == 0,
              f"webhook CapEff {st['CapEff']} CapBnd {st['CapBnd']}")
        check(st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", f"webhook {st['NoNewPrivs']=} {st['Seccomp']=}")
    st = status_caps(h.container_pid(h.applier_pod(), "applier"))
    check(st["Uid"].split()[0] == "0", f"applier Uid {st['Uid']}")
    check(int(st["CapEff"], 16) == APPLIER_CAPS and int(st["CapBnd"], 16) == APPLIER_CAPS,
          f"applier CapEff {st['CapEff']} CapBnd {st['CapBnd']}, want {APPLIER_CAPS:016x}")
    check(st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", f"applier {st['NoNewPrivs']=} {st['Seccomp']=}")


def knob_files_check(h: Harness, pod: dict, event_msg: str) -> list[str]:
    """For every knob of the annotation: the kernel's file holds the value, or the Event names
    the knob as unsupported. Returns what was compared, for the log."""
    rq = json.loads(pod["metadata"]["annotations"][RESOLVED])
    mq = rq.get("memoryQOS") or {}
    unsupported = set()
    m = re.search(r"unsupported on this node: ([^;]*)", event_msg)
    if m:
        unsupported = set(m.group(1).split())
    seen = []
    targets = [(h.pod_cgroup("memory", pod), mq.get("pod") or {})]
    for cname, knobs in (mq.get("containers") or {}).items():
        targets.append((h.container_cgroup("memory", pod, cname), knobs))
    for d, knobs in targets:
        for knob, want in knobs.items():
            f = d / knob
            if knob in READ_ONLY:
                # Read back, never written: in the Event where the kernel has the file.
                check(f.exists() == (f"{knob}=" in event_msg),
                      f"{knob}: file {'present' if f.exists() else 'absent'}, Event: {event_msg}")
                continue
            if f.exists():
                got = h.read(f)
                check(str(want) == got or (want == "max" and int(got) >= 2**62),
                      f"{f}: {got}, annotation says {want}")
                seen.append(f"{f.name}={got}")
            else:
                check(knob in unsupported, f"{knob} has no file here and the Event does not "
                      f"list it as unsupported: {event_msg}")
    return seen


NOT_STARTED = "not started yet"
# Knobs of the contract the applier reads back (Alibaba's watermark), never writes.
READ_ONLY = {"memory.wmark_high"}


def applied_events(h: Harness, ns: str, pod: dict) -> list[dict]:
    return h.events(ns, pod["metadata"]["uid"], APPLIED)


def applied_event(h: Harness, ns: str, pod: dict, timeout: float = 60) -> dict:
    """The pod's MemoryQOSApplied Event that covers every container. (A pass made before the
    containers started writes the pod level and says `not started yet: <names>`; that one
    may come first.) Exactly one such Event."""
    def complete():
        return [e for e in applied_events(h, ns, pod) if NOT_STARTED not in e["message"]]
    try:
        evs = wait_until(f"{APPLIED} Event on {ns}/{pod['metadata']['name']}", complete, timeout, 1)
    except Check as e:
        other = [(x["reason"], x["message"]) for x in h.events(ns, pod["metadata"]["uid"])]
        raise Check(f"{e}; events: {other}") from None
    check(len(evs) == 1, f"{len(evs)} {APPLIED} Events: {[x['message'] for x in evs]}")
    ev = evs[0]
    check((ev.get("count") or 1) == 1 and not ev.get("series"), f"repeated Event: {ev}")
    check(ev.get("reportingComponent") == "koordinator.sh/koord-applier",
          f"Event not from koord-applier: {ev.get('reportingComponent')} / {ev.get('source')}")
    return ev


@scenario("colocation: NGINX (LS) under wrk alone, beside FFmpeg as Kubernetes places it, and "
          "beside FFmpeg BE with the product's colocation (batch resources, cpuset suppression "
          "at 65%, cpu.idle): FFmpeg progresses, the product's configuration takes away at least "
          "half of the p99 FFmpeg adds with Kubernetes' defaults and keeps it within 2.5x of NGINX "
          "alone at >= 1.8x its node CPU; the applier cuts BE's CPUs within 8.5 s of the LS load",
          full="a latency figure needs a quiet machine: make test runs its short form alone, "
          "after the other lanes (tests/suites.sh); the full form about 7 minutes")
def s_colocation(h: Harness) -> None:
    # Early, before the scenarios that leave pods running (stress-demo burns a core until the
    # end): the node holds only the product's own pods.
    colocation.run(h)


@scenario("redis-demo shape (LS, memoryQOS auto): label, resolved-qos, MemoryQOSApplied from the "
          "applier, cgroup files hold every knob this kernel has, the rest named unsupported")
def s_redis(h: Harness) -> None:
    h.kubectl("apply", "-n", NS_QOS, "-f", str(TESTDATA / "redis-demo.yaml"))
    pod = h.wait_running(NS_QOS, "redis-demo")
    check(pod["metadata"]["labels"].get(QOS_LABEL) == "LS", f"labels {pod['metadata']['labels']}")
    rq = json.loads(pod["metadata"]["annotations"][RESOLVED])
    check(rq["memoryQOS"]["enabled"] and rq["memoryQOS"]["policy"] == "auto", f"{rq['memoryQOS']}")
    ev = applied_event(h, NS_QOS, pod)
    seen = knob_files_check(h, pod, ev["message"])
    log(f"redis-demo Event: {ev['message']}; files compared: {seen or 'none (see Event)'}")
    # What the kubelet set stays the kubelet's: memory limit 6Gi, CFS quota of 1 CPU.
    check(h.read(h.container_cgroup("memory", pod, "redis") / "memory.limit_in_bytes")
          == str(6 * 2**30), "container memory.limit_in_bytes is not the kubelet's 6Gi")
    desc = h.kubectl("describe", "pod", "-n", NS_QOS, "redis-demo").stdout
    check(APPLIED in desc and RESOLVED in desc, "kubectl describe lacks the Event or the annotation")


@scenario("stress-demo shape (BE, memoryQOS auto): label BE, resolved-qos, MemoryQOSApplied, "
          "cgroup files hold every knob this kernel has, the rest named unsupported")
def s_stress(h: Harness) -> None:
    h.kubectl("apply", "-n", NS_QOS, "-f", str(TESTDATA / "stress-demo.yaml"))
    pod = h.wait_running(NS_QOS, "stress-demo")
    check(pod["metadata"]["labels"].get(QOS_LABEL) == "BE", f"labels {pod['metadata']['labels']}")
    check(pod["status"]["qosClass"] == "BestEffort", pod["status"]["qosClass"])
    rq = json.loads(pod["metadata"]["annotations"][RESOLVED])
    check(rq["qosClass"] == "BE" and rq["memoryQOS"]["enabled"], f"{rq}")
    ev = applied_event(h, NS_QOS, pod)
    seen = knob_files_check(h, pod, ev["message"])
    log(f"stress-demo Event: {ev['message']}; files compared: {seen or 'none (see Event)'}")
    desc = h.kubectl("describe", "pod", "-n", NS_QOS, "stress-demo").stdout
    check(APPLIED in desc, "kubectl describe lacks the Event")


def set_colocation(h: Harness, enable: bool) -> None:
    """colocation-config in the cluster ConfigMap, Koordinator's keys. The whole machine may
    be lent (100%): a test node has nothing else to protect, and the other engineers' builds
    on this shared machine count as system usage."""
    cfg = {"enable": enable, "cpuReclaimThresholdPercent": 100,
           "memoryReclaimThresholdPercent": 65, "metricAggregateDurationSeconds": 30,
           "updateTimeThresholdSeconds": 10, "resourceDiffThreshold": 0.1}
    h.kubectl("-n", "kube-system", "patch", "configmap", "ack-slo-config", "--type=merge", "-p",
              json.dumps({"data": {"colocation-config": json.dumps(cfg)}}))


def node_batch(h: Harness) -> tuple[float, float]:
    alloc = h.kjson("get", "node", h.env["NODE_NAME"])["status"].get("allocatable", {})
    return (quantity(alloc.get(BATCH_CPU, "0")),
            quantity(alloc.get(BATCH_MEMORY, "0")))


def be_pod(name: str, ns: str, image: str, cpu: tuple[str, str] | None,
           mem: tuple[str, str], command: list[str] | None = None,
           node: str | None = None) -> dict:
    req, lim = {"memory": mem[0]}, {"memory": mem[1]}
    if cpu:
        req["cpu"], lim["cpu"] = cpu
    spec: dict = {"containers": [{"name": "work", "image": image,
                                  "command": command or ["pause"],
                                  "resources": {"requests": req, "limits": lim}}],
                  "terminationGracePeriodSeconds": 2}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {QOS_LABEL: "BE"}},
            "spec": spec}


def batch_files_check(h: Harness, pod: dict, container: str) -> dict[str, str]:
    """The batch section of resolved-qos, in the real pod and container cgroups."""
    batch = json.loads(pod["metadata"]["annotations"][RESOLVED])["batch"]
    got = {}
    for ctrl_knobs, d in ((batch["pod"], None), (batch["containers"][container], container)):
        for knob, want in ctrl_knobs.items():
            ctrl = "memory" if knob.startswith("memory.") else "cpu"
            base = h.container_cgroup(ctrl, pod, d) if d else h.pod_cgroup(ctrl, pod)
            v = h.read(base / knob)
            got[f"{'container' if d else 'pod'} {knob}"] = v
            check(v == str(want), f"{base / knob} = {v}, resolved-qos batch says {want}")
    return got


def be_batch_pod(h: Harness) -> dict:
    """A running BE pod on batch resources (colocation on), built by whichever scenario needs
    it first."""
    def start(h: Harness) -> dict:
        set_colocation(h, True)
        want_cpu, want_mem = 100, 64 * 2**20

        def advertised():
            cpu, mem = node_batch(h)
            return (cpu, mem) if cpu >= want_cpu and mem >= want_mem else None
        try:
            cpu, mem = wait_until("batch-cpu/batch-memory on the Node", advertised, 180, 2)
        except Check as e:
            m = h.applier_metrics()
            raise Check(f"{e}; Node has {node_batch(h)}; applier: advertised "
                        f"{[(dict(l), v) for (n, l), v in m.items() if n == 'koord_applier_batch_resource_advertised']}"
                        " (batch-cpu = 2 CPUs x 100% - LS usage - system usage: other load on "
                        "this machine counts as system usage)") from None
        log(f"Node advertises batch-cpu {cpu:.0f}, batch-memory {mem / 2**30:.1f} GiB")
        h.apply_obj(be_pod("be-batch", NS_BATCH, h.env["WORKLOAD_IMAGE"], ("100m", "500m"),
                           ("64Mi", "128Mi"),
                           ["koord-stress", "--vm", "1", "--vm-bytes", "16M", "--vm-hang", "3600"]))
        return h.wait_running(NS_BATCH, "be-batch")
    return h.need("be_batch", start)


@scenario("batch: colocation on -> the applier advertises batch-cpu/batch-memory, a BE pod with "
          "batch resources is scheduled and runs with the batch values in its cgroups; colocation "
          "off -> a new BE pod keeps its cpu/memory (kubectl prints the warning) and runs, the running "
          "batch pod is left alone")
def s_batch(h: Harness) -> None:
    node = h.env["NODE_NAME"]
    be_batch_pod(h)
    stored = h.pod(NS_BATCH, "be-batch")
    res = stored["spec"]["containers"][0]["resources"]
    check(BATCH_CPU in res["requests"] and "cpu" not in res["requests"], f"resources {res}")
    pod = h.wait_running(NS_BATCH, "be-batch")
    sched = [e for e in h.events(NS_BATCH, pod["metadata"]["uid"], "Scheduled")]
    check(sched and node in sched[0]["message"], f"not scheduled by the scheduler: {sched}")
    ev = applied_event(h, NS_BATCH, pod)
    got = batch_files_check(h, pod, "work")
    log(f"be-batch cgroups: {got}; Event: {ev['message']}")

    set_colocation(h, False)
    wait_until("batch capacity withdrawn (0)", lambda: node_batch(h) == (0, 0), 120, 2)
    # Colocation off: the webhook no longer moves a new BE pod to batch resources (no node
    # offers them, it would stay Pending); kubectl prints the webhook's warning and the pod
    # schedules on its cpu/memory.
    out = h.kubectl("-n", NS_BATCH, "apply", "-f", "-", input=json.dumps(
        be_pod("be-batch-off", NS_BATCH, h.env["WORKLOAD_IMAGE"], ("100m", "500m"),
               ("64Mi", "128Mi"))))
    check("colocation is off" in out.stderr, f"no admission warning from kubectl: {out.stderr!r}")
    stored = h.pod(NS_BATCH, "be-batch-off")
    res = stored["spec"]["containers"][0]["resources"]
    check("cpu" in res["requests"] and BATCH_CPU not in res["requests"]
          and stored["metadata"]["labels"].get(QOS_LABEL) == "BE",
          f"colocation off: BE pod stored with {res}, labels {stored['metadata'].get('labels')}")
    h.wait_running(NS_BATCH, "be-batch-off")
    still = h.pod(NS_BATCH, "be-batch")
    check(still["status"]["phase"] == "Running"
          and h.container_id(still, "work") == h.container_id(pod, "work"),
          "the running BE pod was disturbed when colocation was turned off")
    batch_files_check(h, still, "work")
    msg = out.stderr.strip().splitlines()[0]
    log(f"colocation off: {msg}")
    h.kubectl("-n", NS_BATCH, "delete", "pod", "be-batch-off", "--wait=false")
    set_colocation(h, True)


@scenario("container crash: the kubelet restarts it (new container ID), the applier writes the "
          "batch values again within the resync period, no duplicate Event")
def s_crash(h: Harness) -> None:
    # The batch scenario ends by turning colocation on again: the capacity comes back with the
    # applier's next report, and a batch pod admitted by the kubelet before it is refused.
    wait_until("batch-memory on the Node again", lambda: node_batch(h)[1] >= 64 * 2**20, 120, 1)
    pod = be_pod("crashy", NS_BATCH, h.env["WORKLOAD_IMAGE"], None, ("32Mi", "64Mi"),
                 ["koord-stress", "--vm", "1", "--vm-bytes", "4M", "--vm-hang", "60", "-t", "4"])
    h.apply_obj(pod)
    pod = h.wait_running(NS_BATCH, "crashy")
    first = h.container_id(pod, "work")
    applied_event(h, NS_BATCH, pod)
    batch_files_check(h, pod, "work")
    events_before = [e["message"] for e in applied_events(h, NS_BATCH, pod)]
    writes_before = metric_sum(h.applier_metrics(), "koord_applier_cgroup_writes_total",
                               knob="memory.limit_in_bytes", outcome="written")

    def restarted():
        p = h.pod(NS_BATCH, "crashy")
        cs = p["status"]["containerStatuses"][0]
        if cs.get("restartCount", 0) >= 1 and "running" in cs.get("state", {}):
            cid = h.container_id(p, "work")
            return p if cid != first else None
        return None
    pod = wait_until("the kubelet to restart the container", restarted, 90, 0.5)
    t_restart = time.monotonic()
    second = h.container_id(pod, "work")

    def values_back():
        try:
            return batch_files_check(h, pod, "work")
        except (Check, OSError):
            return None
    got = wait_until("the batch values on the new container", values_back, 25, 0.25)
    log(f"new container {second[:12]} (was {first[:12]}): batch values back after "
        f"{time.monotonic() - t_restart:.1f}s: {got}")
    # runc creates the new container's cgroup with the kubelet's values (no memory limit for a
    # BestEffort container): the limit there is the applier's write, counted as one.
    writes = metric_sum(h.applier_metrics(), "koord_applier_cgroup_writes_total",
                        knob="memory.limit_in_bytes", outcome="written")
    check(writes > writes_before, f"memory.limit_in_bytes writes {writes_before} -> {writes}")
    time.sleep(3)  # an Event would have been posted by now
    evs = applied_events(h, NS_BATCH, pod)
    check([e["message"] for e in evs] == events_before
          and all((e.get("count") or 1) == 1 and not e.get("series") for e in evs),
          f"{APPLIED} Events after the restart: {[(e['message'], e.get('count')) for e in evs]}, "
          f"before: {events_before}")
    h.kubectl("-n", NS_BATCH, "delete", "pod", "crashy", "--wait=false")


@scenario("applier pod deleted: the DaemonSet brings it back and it rewrites nothing; a hand "
          "edit of a cgroup file is repaired within the resync period")
def s_applier_restart(h: Harness) -> None:
    be_batch_pod(h)
    be = h.pod(NS_BATCH, "be-batch")
    events_before = len(applied_events(h, NS_BATCH, be))
    old = h.applier_pod()
    h.kubectl("-n", SYSTEM_NS, "delete", "pod", old["metadata"]["name"], "--wait=true",
              timeout=90)
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier", "--timeout=120s",
              timeout=140)

    def new_ready():
        p = h.applier_pod()
        return p if p["metadata"]["uid"] != old["metadata"]["uid"] and all(
            c["ready"] for c in p["status"].get("containerStatuses") or [{"ready": False}]) else None
    new = wait_until("the new applier pod Ready", new_ready, 120, 1)

    def first_pass():
        m = h.applier_metrics(new)
        managed = metric_sum(m, "koord_applier_pods_managed")
        unchanged = metric_sum(m, "koord_applier_cgroup_writes_total", outcome="unchanged")
        return m if managed >= 1 and unchanged > 0 else None
    wait_until("the new applier's first pass", first_pass, 60, 1)
    time.sleep(22)  # and one full resync (20 s)
    m = h.applier_metrics(new)
    written = metric_sum(m, "koord_applier_cgroup_writes_total", outcome="written")
    check(written == 0, f"the new applier wrote {written} knobs that were already right: "
          f"{[(dict(l), v) for (n, l), v in m.items() if n == 'koord_applier_cgroup_writes_total' and v]}")
    check(len(applied_events(h, NS_BATCH, be)) == events_before,
          "the new applier posted another MemoryQOSApplied for an unchanged pod")
    redis = h.pod(NS_QOS, "redis-demo")
    log(f"redis-demo (nothing supported here) has {len(applied_events(h, NS_QOS, redis))} "
        f"{APPLIED} Events after the applier restart (the new process announces it again)")
    log(f"new applier {new['metadata']['name']}: managed "
        f"{metric_sum(m, 'koord_applier_pods_managed'):.0f} pods, "
        f"{metric_sum(m, 'koord_applier_cgroup_writes_total', outcome='unchanged'):.0f} knobs "
        "unchanged, 0 written")

    f = h.container_cgroup("cpu", be, "work") / "cpu.shares"
    want = h.read(f)
    f.write_text("1024\n")
    check(h.read(f) == "1024", "the hand edit did not take")
    t0 = time.monotonic()
    # The resync period (20 s) and 15 s for the pass (16-17 s measured in loaded runs).
    wait_until(f"{f} repaired", lambda: h.read(f) == want, 20 + 15, 0.25)
    log(f"hand edit of {f.name} (1024) repaired to {want} after {time.monotonic() - t0:.1f}s "
        "(resync period 20 s)")
    m2 = h.applier_metrics(new)
    check(metric_sum(m2, "koord_applier_cgroup_writes_total", knob="cpu.shares", outcome="written")
          >= 1, "the repair is not counted as a write")


@scenario("webhook pods deleted: pods created meanwhile start untouched (failurePolicy Ignore); "
          "the next pod after the webhook is back is mutated, and the re-resolver annotates the "
          "one created meanwhile, which the applier then manages")
def s_webhook_down(h: Harness) -> None:
    fault_webhook_down(h)


def fault_webhook_down(h: Harness) -> None:
    h.need("fault: webhook down", webhook_down)


def webhook_down(h: Harness) -> None:
    node = h.env["NODE_NAME"]
    fail_open_before = metric_sum(h.apiserver_metrics(), "apiserver_admission_webhook_fail_open_count",
                                  name=WEBHOOK_NAME)
    # Cordoned, the replacement webhook pods cannot be scheduled: a window without any webhook
    # endpoint that does not depend on timing. The test pod names its node (bypasses the
    # scheduler, as a DaemonSet pod would).
    h.kubectl("cordon", node)
    try:
        h.kubectl("-n", SYSTEM_NS, "delete", "pods", "-l", "app.kubernetes.io/name=koord-webhook",
                  "--wait=true", timeout=120)
        wait_until("no webhook endpoint", lambda: not any(
            ep.get("conditions", {}).get("ready") for s in h.kjson(
                "-n", SYSTEM_NS, "get", "endpointslices", "-l",
                "kubernetes.io/service-name=koord-webhook")["items"]
            for ep in s.get("endpoints") or []), 30, 0.5)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "while-down", "namespace": NS_QOS},
               "spec": {"nodeName": node, "terminationGracePeriodSeconds": 2,
                        "containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"],
                                        "command": ["pause"],
                                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
        t0 = time.monotonic()
        h.apply_obj(pod)
        dt = time.monotonic() - t0
        log(f"pod created in {dt:.2f}s with no webhook running")
        h.figures.append(f"figure kubectl apply of a pod with no webhook endpoint (failurePolicy "
                         f"Ignore, timeoutSeconds 5): {dt:.2f} s")
        p = h.wait_running(NS_QOS, "while-down")
        check(RESOLVED not in (p["metadata"].get("annotations") or {})
              and QOS_LABEL not in (p["metadata"].get("labels") or {}),
              f"mutated while the webhook was down: {p['metadata']}")
        after = metric_sum(h.apiserver_metrics(), "apiserver_admission_webhook_fail_open_count",
                           name=WEBHOOK_NAME)
        check(after > fail_open_before, "the apiserver did not count a fail-open call")
    finally:
        h.kubectl("uncordon", node)
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook", "--timeout=180s",
              timeout=200)
    h.kubectl("-n", SYSTEM_NS, "wait", "deployment/koord-webhook", "--for=condition=Available",
              "--timeout=60s", timeout=80)
    pod["metadata"]["name"] = "after-webhook-back"

    def mutated():
        h.kubectl("-n", NS_QOS, "delete", "pod", "after-webhook-back", "--ignore-not-found",
                  "--wait=true", timeout=60)
        h.apply_obj(pod)
        p = h.pod(NS_QOS, "after-webhook-back")
        return p if RESOLVED in (p["metadata"].get("annotations") or {}) else None
    p = wait_until("the next pod to be mutated", mutated, 60, 1)
    check(p["metadata"]["labels"].get(QOS_LABEL) == "LS", f"labels {p['metadata']['labels']}")

    # The pod admitted without the webhook: the pass of the replica that takes the Lease labels
    # and annotates it, and the applier then manages it like any other.
    def reresolved():
        p = h.pod(NS_QOS, "while-down")
        return p if RESOLVED in (p["metadata"].get("annotations") or {}) else None
    p = wait_until("while-down to be re-resolved", reresolved, 60, 1)
    check(p["metadata"]["labels"].get(QOS_LABEL) == "LS", f"labels {p['metadata']['labels']}")
    ev = reresolved_event(h, NS_QOS, p)
    check("admitted while the webhook was unavailable" in ev["message"], ev["message"])
    ev = applied_event(h, NS_QOS, p)
    seen = knob_files_check(h, p, ev["message"])
    log(f"while-down re-resolved; applier Event: {ev['message']}; files compared: "
        f"{seen or 'none (see Event)'}")
    for name in ("while-down", "after-webhook-back"):
        h.kubectl("-n", NS_QOS, "delete", "pod", name, "--wait=false")


@scenario("rolling update of the webhook to a new image while pods are created at 20/s: none "
          "admitted without its annotation or BE batch translation (continuity.py)")
def s_rolling_update(h: Harness) -> None:
    continuity.rolling_update(h, sys.modules[__name__])


@scenario("kubectl drain of the node holding the webhook replicas while pods are created at "
          "20/s: the PDB keeps one, none admitted without its annotation or BE batch "
          "translation (continuity.py)")
def s_drain(h: Harness) -> None:
    continuity.drain(h, sys.modules[__name__])


RERESOLVED = "MemoryQOSReresolved"


def reresolved_event(h: Harness, ns: str, pod: dict, timeout: float = 60) -> dict:
    """The webhook's newest MemoryQOSReresolved Event on the pod."""
    evs = wait_until(f"{RERESOLVED} Event on {ns}/{pod['metadata']['name']}",
                     lambda: h.events(ns, pod["metadata"]["uid"], RERESOLVED), timeout, 1)
    ev = max(evs, key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")
    check(ev.get("reportingComponent") == "koordinator.sh/koord-webhook",
          f"{RERESOLVED} not from koord-webhook: {ev.get('reportingComponent')}")
    return ev


def set_ls_memory_qos(h: Harness, enable: bool) -> None:
    cm = h.kjson("-n", "kube-system", "get", "configmap", "ack-slo-config")
    cfg = json.loads(cm["data"]["resource-qos-config"])
    cfg["clusterStrategy"]["lsClass"]["memoryQOS"]["enable"] = enable
    h.kubectl("-n", "kube-system", "patch", "configmap", "ack-slo-config", "--type=merge", "-p",
              json.dumps({"data": {"resource-qos-config": json.dumps(cfg)}}))


def ls_enabled(h: Harness, name: str) -> bool:
    p = h.pod(NS_QOS, name)
    return json.loads(p["metadata"]["annotations"][RESOLVED])["memoryQOS"]["enabled"]


def newest(events: list[dict]) -> dict:
    return max(events, key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")


@scenario("re-resolve: lsClass memoryQOS enable true -> false -> true in ack-slo-config reaches a "
          "running LS pod's annotation (MemoryQOSReresolved), the applier takes each new "
          "annotation (its pass's Event, knob files checked), the container is not restarted")
def s_reresolve(h: Harness) -> None:
    # No memoryQOS annotation of its own (redis-demo's `auto` would outrank the ConfigMap).
    spec = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "flip-ls", "namespace": NS_QOS},
            "spec": {"nodeName": h.env["NODE_NAME"], "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"],
                                     "command": ["pause"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                   "limits": {"memory": "64Mi"}}}]}}
    h.apply_obj(spec)
    try:
        before = h.wait_running(NS_QOS, "flip-ls")
        check(ls_enabled(h, "flip-ls"), "flip-ls does not start with memory QoS enabled")
        applied_event(h, NS_QOS, before)
        cid = h.container_id(before, "c")
        for enable in (False, True):
            applied = metric_sum(h.applier_metrics(), "koord_applier_events_total",
                                 reason=APPLIED)
            t0 = time.monotonic()
            set_ls_memory_qos(h, enable)
            wait_until(f"flip-ls to show memoryQOS.enabled={enable}",
                       lambda: ls_enabled(h, "flip-ls") == enable, 60, 0.5)
            took = time.monotonic() - t0
            pod = h.pod(NS_QOS, "flip-ls")
            old_new = (f"memoryQOS enabled={str(not enable).lower()} (cluster-config) -> "
                       f"enabled={str(enable).lower()} (cluster-config)")
            ev = wait_until(f"the {RERESOLVED} Event for enabled={enable}", lambda: next(
                (e for e in h.events(NS_QOS, pod["metadata"]["uid"], RERESOLVED)
                 if e["message"].startswith(old_new)), None), 60, 1)
            check(ev.get("reportingComponent") == "koordinator.sh/koord-webhook", f"{ev}")
            # The applier's first complete pass over this version of the pod: an Event, posted
            # or (same text as one posted within its window) suppressed, both counted.
            wait_until("the applier's pass over the new annotation", lambda: metric_sum(
                h.applier_metrics(), "koord_applier_events_total", reason=APPLIED) > applied,
                60, 1)
            seen = knob_files_check(h, pod, newest(applied_events(h, NS_QOS, pod))["message"])
            log(f"enable={enable}: flip-ls re-resolved {took:.1f}s after the edit; "
                f"Event: {ev['message']}; files compared: {seen or 'none (see Event)'}")
            h.figures.append(f"figure ack-slo-config edit (lsClass memoryQOS enable={enable}) -> "
                             f"a running pod's annotation: {took:.1f} s")
        after = h.pod(NS_QOS, "flip-ls")
        check(h.container_id(after, "c") == cid
              and after["metadata"]["uid"] == before["metadata"]["uid"],
              "flip-ls was re-created or its container restarted")
    finally:
        set_ls_memory_qos(h, True)
        h.kubectl("-n", NS_QOS, "delete", "pod", "flip-ls", "--wait=false", check_rc=False)


def set_ls_min_percent(h: Harness, percent: int | None) -> None:
    """lsClass memoryQOS minLimitPercent in ack-slo-config (None: as installed)."""
    cm = h.kjson("-n", "kube-system", "get", "configmap", "ack-slo-config")
    cfg = json.loads(cm["data"]["resource-qos-config"])
    mq = cfg["clusterStrategy"]["lsClass"]["memoryQOS"]
    if percent is None:
        mq.pop("minLimitPercent", None)
    else:
        mq["minLimitPercent"] = percent
    h.kubectl("-n", "kube-system", "patch", "configmap", "ack-slo-config", "--type=merge", "-p",
              json.dumps({"data": {"resource-qos-config": json.dumps(cfg)}}))


NS_RESIZE = "node-resize"


@scenario("in-place resize of 20 running pods (pods/resize, memory request 32Mi -> 48Mi -> 24Mi) on "
          "the real kubelet: each pod's resolved-qos follows within seconds (p50/p99 from the "
          "resize), the applier takes the new annotation, no container restarts",
          full="new, not yet run green on the real kubelet; about 2 more minutes")
def s_resize(h: Harness) -> None:
    names = [f"resize-{i:02d}" for i in range(20)]
    cm = h.kjson("-n", "kube-system", "get", "configmap", "ack-slo-config")
    min_before = json.loads(cm["data"]["resource-qos-config"])["clusterStrategy"]["lsClass"][
        "memoryQOS"].get("minLimitPercent")
    h.namespace(NS_RESIZE, True)
    try:
        set_ls_min_percent(h, 100)
        def probe_min() -> int:
            stored = json.loads(h.kubectl("-n", NS_RESIZE, "create", "--dry-run=server", "-o",
                                          "json", "-f", "-",
                                          input=json.dumps(resize_pod("probe", h))).stdout)
            rq = json.loads(stored["metadata"]["annotations"][RESOLVED])
            return rq["memoryQOS"]["containers"]["c"]["memory.min"]
        wait_until("a new pod to resolve with minLimitPercent 100",
                   lambda: probe_min() == 32 * 2**20, 60, 1)
        h.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": [resize_pod(n, h) for n in names]}))
        before = {n: h.wait_running(NS_RESIZE, n) for n in names}
        for request in ("48Mi", "24Mi"):
            applied = metric_sum(h.applier_metrics(), "koord_applier_events_total",
                                 reason=APPLIED)
            t = h.resize_memory(NS_RESIZE, names, "c", request)
            fig = f"p50 {percentile(t, 50):.2f} s, p99 {percentile(t, 99):.2f} s, max {t[-1]:.2f} s"
            log(f"resize to {request}: resize -> resolved-qos {fig}")
            h.figures.append(f"figure in-place resize of 20 running pods to {request} (kubelet "
                             f"1.37, cgroup v1): resize -> resolved-qos {fig}")
            # The applier's passes over the 20 new annotations: an Event each (posted, or
            # suppressed as the same text within its window: both counted).
            wait_until("the applier's passes over the resized pods", lambda: metric_sum(
                h.applier_metrics(), "koord_applier_events_total", reason=APPLIED)
                >= applied + len(names), 60, 1)
        for n in names:
            after = h.pod(NS_RESIZE, n)
            check(h.container_id(after, "c") == h.container_id(before[n], "c"),
                  f"{n}: the container was restarted by the resize")
            got = after["status"]["containerStatuses"][0].get("resources", {})
            check(got.get("requests", {}).get("memory") == "24Mi",
                  f"{n}: the kubelet reports {got} (want the 24Mi request allocated)")
    finally:
        set_ls_min_percent(h, min_before)
        h.kubectl("-n", NS_RESIZE, "delete", "pods", "--all", "--grace-period=1", "--wait=true",
                  timeout=180, check_rc=False)


def resize_pod(name: str, h: Harness) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS_RESIZE, "labels": {QOS_LABEL: "LS"}},
            "spec": {"nodeName": h.env["NODE_NAME"], "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"],
                                     "command": ["pause"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                                   "limits": {"memory": "64Mi"}}}]}}


@scenario("PSI: koordlet_container_psi / koordlet_pod_psi for the real containers, labelled with "
          "their containerd IDs")
def s_psi(h: Harness) -> None:
    pod = h.pod(NS_QOS, "stress-demo")
    cid = h.container_id(pod, "stress")
    uid = pod["metadata"]["uid"]
    unified = CGROUP / "unified" / "kubepods" / "besteffort" / f"pod{uid}" / cid
    log(f"pressure files of stress-demo's container: v1 cpuacct "
        f"{sorted(p.name for p in h.container_cgroup('cpuacct', pod, 'stress').glob('*.pressure'))}, "
        f"v2 {unified}: {sorted(p.name for p in unified.glob('*.pressure')) if unified.is_dir() else 'no such dir'}")

    try:
        c, p = wait_until("PSI series for stress-demo", lambda: h.psi_series(cid, uid), 40, 2)
    except Check as e:
        m = h.applier_metrics()
        raise Check(f"{e}; koord_applier_psi_unavailable_cgroups = "
                    f"{metric_sum(m, 'koord_applier_psi_unavailable_cgroups')}") from None
    check(("cpu", "avg10", "some") in c and ("mem", "avg10", "some") in c, f"series {sorted(c)}")
    # Its own CPU worker, at cpu.shares 2 on a shared machine, waits for the CPU.
    log(f"stress-demo PSI: cpu some avg10 {c[('cpu', 'avg10', 'some')]}, "
        f"mem some avg10 {c[('mem', 'avg10', 'some')]}; {len(c)} container series, {len(p)} pod series")


def container_ids(pod: dict) -> str:
    return " ".join(c.get("containerID", "") for c in pod.get("status", {}).get("containerStatuses", []))


def create_pods_timed(h: Harness, pods: list[dict], ns: str) -> dict[str, list[float]]:
    """kubectl apply each pod, one after the other, and wait for its MemoryQOSApplied Event
    covering every container. Seconds from the apply to: the pod's first MemoryQOSApplied (the
    pod level, often before the container started), the container ID in the pod's status (the
    kubelet's report, which the applier waits for), and the complete Event."""
    endpoint = Endpoint.from_kubeconfig(h.kubectl_bin, h.env["KUBECONFIG"])
    # Only what happens from now: an Event of an earlier pod of the same name is not this one's.
    events = ApiWatch(endpoint, f"/api/v1/namespaces/{ns}/events", lambda e: e.get("message", ""),
                      key_of=lambda e: e["involvedObject"]["name"], existing=False,
                      query={"fieldSelector": f"reason={APPLIED}"})
    started = ApiWatch(endpoint, f"/api/v1/namespaces/{ns}/pods", container_ids, existing=False)
    out: dict[str, list[float]] = {"first": [], "container_id": [], "complete": []}
    try:
        for pod in pods:
            name = pod["metadata"]["name"]
            t0 = time.monotonic()
            h.kubectl("apply", "-f", "-", input=json.dumps(pod))
            t_done = events.wait(name, lambda m: NOT_STARTED not in m, 90)
            check(t_done is not None, f"no complete {APPLIED} Event for {ns}/{name} within 90 s")
            out["complete"].append(t_done - t0)
            for key, w, accept in (("first", events, lambda m: True),
                                   ("container_id", started,
                                    lambda cid: cid.startswith("containerd://"))):
                t = w.wait(name, accept, 15)  # already there: only the watch's lag counts
                check(t is not None, f"{key} of {ns}/{name} not seen")
                out[key].append(t - t0)
    finally:
        for w in (events, started):
            w.stop()
    return out


def applier_usage(h: Harness, seconds: float) -> tuple[float, float, float]:
    """The applier process's RSS (MiB), peak RSS (MiB) and CPU (% of one core) over a window."""
    return h.process_usage(h.container_pid(h.applier_pod(), "applier"), seconds)


def load_pod(i: int, h: Harness) -> dict:
    return be_pod(f"load-{i:03d}", NS_LOAD, h.env["WORKLOAD_IMAGE"], None, ("16Mi", "32Mi"))


@scenario("figures: apply -> MemoryQOSApplied p50/p99 over 50 batch pods; the unprotected window "
          "(container cgroup appears -> its memory.limit_in_bytes holds the batch limit) of each; "
          "applier RSS and CPU with 50 and 100 pods on the node")
def s_figures(h: Harness) -> None:
    load_pods_measured(h)


def load_pods_measured(h: Harness) -> None:
    """The 100 load pods created and measured once (the admission figure reads their calls)."""
    def run(h: Harness) -> bool:
        monitoring.paused(h, True)  # the figures measure the product without a scraper
        try:
            figures(h)
        finally:
            monitoring.paused(h, False)
        return True
    h.need("load_pods_measured", run)


def figures(h: Harness) -> None:
    # Memory-only batch pods: batch-memory is plentiful here, batch-cpu depends on what the
    # rest of this shared machine is doing. Colocation on again: the rolling update and drain
    # scenarios end with it off.
    set_colocation(h, True)
    wait_until("batch-memory for 100 load pods on the Node",
               lambda: node_batch(h)[1] >= 100 * 32 * 2**20, 180, 2)
    h.carry["admission_before"] = admission_histogram(h)
    pods = [load_pod(i, h) for i in range(50)]
    # On this cgroup v1 node the kubelet leaves a batch pod's memory unlimited (it does not
    # know batch-memory); until the applier writes the container's limit, nothing bounds it.
    limit = quantity(pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    poller = subprocess.Popen(
        [sys.executable, "-B", str(HERE.parent / "lib" / "window.py"), str(len(pods)),
         "memory.limit_in_bytes", str(int(limit)), "900", "0.05",
         str(CGROUP / "memory" / "kubepods" / "besteffort")], stdout=subprocess.PIPE, text=True)
    time.sleep(1)  # the poller has listed the pods already there
    try:
        t = create_pods_timed(h, pods, NS_LOAD)
    except Check:
        poller.kill()
        raise
    out, _ = poller.communicate(timeout=960)
    win = json.loads(out)
    stored = h.pod(NS_LOAD, pods[0]["metadata"]["name"])["spec"]["containers"][0]["resources"]
    check(BATCH_MEMORY in stored["limits"], f"load pods are not batch pods: {stored}")
    w = win["windows"]
    check(win["protected"] == len(pods), f"{win['protected']} of {len(pods)} containers reached "
          f"memory.limit_in_bytes {limit:.0f} ({win['seen']} container cgroups seen)")
    h.figures.append(f"figure unprotected window on cgroup v1 (container cgroup appears -> its "
                     f"memory.limit_in_bytes holds the batch limit), {len(w)} batch pods one after "
                     f"the other: p50 {percentile(w, 50):.2f} s, p99 {percentile(w, 99):.2f} s, "
                     f"max {max(w):.2f} s")
    log(h.figures[-1])

    def p(key: str) -> str:
        return f"p50 {percentile(t[key], 50):.2f} s, p99 {percentile(t[key], 99):.2f} s"
    h.figures.append(
        f"figure kubectl apply -> {APPLIED} covering the container, {len(t['complete'])} pods one "
        f"after the other, seen on watches: {p('complete')} (mean "
        f"{statistics.mean(t['complete']):.2f} s, max {max(t['complete']):.2f} s); of which "
        f"apply -> containerID in the pod status (kubelet) {p('container_id')}; apply -> first "
        f"{APPLIED} (pod level) {p('first')}")
    log(h.figures[-1])
    for n, target in ((50, 50), (100, 100)):
        if n == 100:
            for i in range(50, 100):
                h.apply_obj(load_pod(i, h))

            def all_running():
                items = h.kjson("-n", NS_LOAD, "get", "pods")["items"]
                return len([p for p in items if p["status"].get("phase") == "Running"]) >= target
            wait_until(f"{target} load pods Running", all_running, 600, 3)
            h.carry["admission_after"] = admission_histogram(h)
        total = len(h.kjson("get", "pods", "-A", "--field-selector",
                            f"spec.nodeName={h.env['NODE_NAME']},status.phase=Running")["items"])
        time.sleep(25)  # settle: one full resync after the last pod
        rss, hwm, cpu = applier_usage(h, 60)
        m = h.applier_metrics()
        h.figures.append(f"figure applier with {n} load pods ({total} pods Running on the node, "
                         f"{metric_sum(m, 'koord_applier_pods_managed'):.0f} managed): RSS "
                         f"{rss:.1f} MiB (peak {hwm:.1f} MiB), CPU {cpu:.2f}% of one core over 60 s "
                         "(3 resyncs, PSI every 10 s)")
        log(h.figures[-1])


ADMISSION = "apiserver_admission_webhook_admission_duration_seconds"


def admission_histogram(h: Harness) -> tuple[dict[float, float], float, float]:
    """kube-apiserver's view of the webhook's CREATE admissions: cumulative buckets, count, sum."""
    m = h.apiserver_metrics()
    labs = {"name": WEBHOOK_NAME, "type": "admit", "operation": "CREATE", "rejected": "false"}
    buckets = {float(dict(l)["le"]): v for (n, l), v in m.items()
               if n == f"{ADMISSION}_bucket" and all((k, w) in l for k, w in labs.items())}
    return (buckets, metric_sum(m, f"{ADMISSION}_count", **labs),
            metric_sum(m, f"{ADMISSION}_sum", **labs))


@scenario("figure: the webhook's admission latency as kube-apiserver measures it, over the "
          "100 load pods")
def s_admission_latency(h: Harness) -> None:
    load_pods_measured(h)
    (b0, c0, s0), (b1, c1, s1) = h.carry["admission_before"], h.carry["admission_after"]
    buckets = sorted((le, b1[le] - b0.get(le, 0.0)) for le in b1)
    count, total = c1 - c0, s1 - s0
    check(count >= 100 and buckets, f"{count} admissions recorded for 100 pods")

    def quantile(q: float) -> float:  # Prometheus histogram_quantile: linear in the bucket
        rank, prev_le, prev_c = q * count, 0.0, 0.0
        for le, c in buckets:
            if c >= rank:
                if le == float("inf"):
                    return prev_le
                return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
            prev_le, prev_c = le, c
        return buckets[-1][0]
    slow = count - next((c for le, c in buckets if le >= 0.1), count)
    h.figures.append(f"figure webhook admission latency ({ADMISSION}, CREATE, the {count:.0f} "
                     f"calls of the load pods): mean {1000 * total / count:.2f} ms, p50 "
                     f"{1000 * quantile(0.5):.1f} ms, p99 {1000 * quantile(0.99):.1f} ms "
                     f"(bucket-interpolated), {slow:.0f} calls over 100 ms")
    log(h.figures[-1])


def doctor(h: Harness) -> dict:
    r = subprocess.run([h.webhook_bin, "doctor", f"--kubeconfig={h.env['KUBECONFIG']}", "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode in (0, 1), f"doctor exit {r.returncode}: {r.stderr.strip()}")
    report = json.loads(r.stdout)
    check((r.returncode == 0) == report["healthy"], f"doctor exit {r.returncode} vs {report}")
    return report


def doctor_status(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def doctor_green(h: Harness) -> bool:
    return doctor(h)["healthy"]


@scenario("doctor: green on the install; with the writer stopped, a deleted Secret and an "
          "emptied caBundle are named; each repairs itself with the webhook running; a node "
          "without the applier is named")
def s_doctor(h: Harness) -> None:
    report = doctor(h)
    check(report["healthy"], f"doctor not green on a good install: {report}")
    table = subprocess.run([h.webhook_bin, "doctor", f"--kubeconfig={h.env['KUBECONFIG']}"],
                           capture_output=True, text=True, timeout=60).stdout
    log("doctor on a good install:\n" + table)
    # Broken with nobody to repair it: every replica stopped, the Secret deleted, the caBundle
    # emptied. Doctor names each link.
    h.kubectl("-n", SYSTEM_NS, "scale", "deployment/koord-webhook", "--replicas=0")
    wait_until("webhook pods gone", lambda: not h.kjson("-n", SYSTEM_NS, "get", "pods", "-l",
               "app.kubernetes.io/name=koord-webhook")["items"], 90, 1)
    h.kubectl("-n", SYSTEM_NS, "delete", "secret", "koord-webhook-tls")
    h.kubectl("patch", "mutatingwebhookconfiguration", "koord-webhook", "--type=json", "-p",
              json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}]))
    report = doctor(h)
    st = doctor_status(report)
    check(not report["healthy"] and report["first_broken"] == "webhook-deployment", f"{report}")
    for name in ("webhook-endpoints", "webhook-configuration", "serving-certificate", "dry-run-pod"):
        check(st[name] == "fail", f"doctor did not name {name}: {report}")
    table = subprocess.run([h.webhook_bin, "doctor", f"--kubeconfig={h.env['KUBECONFIG']}"],
                           capture_output=True, text=True, timeout=60).stdout
    log("doctor on a broken install:\n" + table)
    t0 = time.monotonic()
    h.kubectl("-n", SYSTEM_NS, "scale", "deployment/koord-webhook", "--replicas=2")
    wait_until("doctor green after the restart", lambda: doctor_green(h), 180, 1)
    h.figures.append(f"figure repair: replicas 0 -> 2 with the Secret deleted and the caBundle "
                     f"emptied: doctor green after {time.monotonic() - t0:.1f} s")
    log(h.figures[-1])
    # With the webhook running: each repairs itself.
    for what, act in (
        ("Secret deleted", lambda: h.kubectl("-n", SYSTEM_NS, "delete", "secret", "koord-webhook-tls")),
        ("caBundle emptied", lambda: h.kubectl(
            "patch", "mutatingwebhookconfiguration", "koord-webhook", "--type=json", "-p",
            json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": ""}]))),
    ):
        t0 = time.monotonic()
        act()
        wait_until(f"doctor green after: {what}", lambda: doctor_green(h), 60, 0.5)
        took = time.monotonic() - t0
        check(took < 30, f"{what}: repaired after {took:.1f} s, more than 30 s")
        h.figures.append(f"figure repair: {what}: doctor green again after {took:.1f} s")
        log(h.figures[-1])
    # The applier kept off the node.
    h.kubectl("-n", SYSTEM_NS, "patch", "daemonset", "koord-applier", "--type=merge", "-p",
              json.dumps({"spec": {"template": {"spec": {"nodeSelector": {"koord-qos/doctor": "away"}}}}}))
    try:
        wait_until("applier named by doctor", lambda: doctor_status(doctor(h))["applier"] == "fail",
                   120, 1)
        report = doctor(h)
        applier = next(c for c in report["checks"] if c["name"] == "applier")
        check("no ready applier on node" in applier["detail"], f"{applier}")
        log(f"doctor, applier missing: {applier['detail']}")
    finally:
        h.kubectl("-n", SYSTEM_NS, "patch", "daemonset", "koord-applier", "--type=json", "-p",
                  json.dumps([{"op": "remove", "path": "/spec/template/spec/nodeSelector/koord-qos~1doctor"}]))
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier", "--timeout=180s",
              timeout=200)
    wait_until("doctor green with the applier back", lambda: doctor_green(h), 120, 1)


@scenario("monitoring: every alert expression of the installed PrometheusRule and every panel "
          "and variable query of the four installed dashboards evaluated against the real "
          "Prometheus, each metric selector with series (or named why not); the alerts driven to "
          "firing by real faults (applier stopped, webhook down with a pod created, a refused "
          "pod) fired and are silent again")
def s_monitoring(h: Harness) -> None:
    # The faults that drive the alerts: their own scenarios in a full run, here when run alone.
    for fault in (fault_applier_stopped, fault_webhook_down, fault_refused):
        fault(h)
    try:
        monitoring.queries(h)
        monitoring.driven_alerts(h)
    finally:
        monitoring.remove_stub_crds(h)


@scenario("kubectl delete -k manifests/: the webhook configuration is gone, the workload pods "
          "keep running, new pods are no longer mutated")
def s_uninstall(h: Harness) -> None:
    before = {p["metadata"]["uid"]: h.container_id(p, p["spec"]["containers"][0]["name"])
              for ns in (NS_QOS, NS_BATCH) for p in h.kjson("-n", ns, "get", "pods")["items"]
              if p["status"].get("phase") == "Running"}
    check(before, "no workload pods running")
    h.kubectl("delete", "-k", str(MANIFESTS), "--wait=true", timeout=180)
    r = h.kubectl("get", "mutatingwebhookconfiguration", "koord-webhook", check_rc=False)
    check(r.returncode != 0 and "NotFound" in r.stderr, "the MutatingWebhookConfiguration is still there")
    r = h.kubectl("-n", SYSTEM_NS, "get", "secret", "koord-webhook-tls", check_rc=False)
    check(r.returncode != 0 and "NotFound" in r.stderr, "the serving certificate Secret is still there")
    wait_until(f"namespace {SYSTEM_NS} gone", lambda: h.kubectl(
        "get", "namespace", SYSTEM_NS, check_rc=False).returncode != 0, 120, 1)
    time.sleep(3)
    after = {p["metadata"]["uid"]: h.container_id(p, p["spec"]["containers"][0]["name"])
             for ns in (NS_QOS, NS_BATCH) for p in h.kjson("-n", ns, "get", "pods")["items"]
             if p["status"].get("phase") == "Running"}
    check(after == before, f"workload pods changed: before {len(before)}, after {len(after)}")
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-uninstall", "namespace": NS_QOS},
         "spec": {"containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"], "command": ["pause"]}],
                  "terminationGracePeriodSeconds": 2}}
    h.apply_obj(p)
    got = h.pod(NS_QOS, "after-uninstall")
    check(RESOLVED not in (got["metadata"].get("annotations") or {}), "mutated after uninstall")
    log(f"{len(after)} workload pods still running with the same containers")


HELM_SH = REPO / "tests" / "e2e" / "helm.sh"
NS_HELM_POD = "node-helm"


def helm(h: Harness, *args: str, timeout: float = 300) -> str:
    """helm (built from its Go module and cached by tests/e2e/helm.sh) against this cluster."""
    built = subprocess.run([str(HELM_SH), "build"], capture_output=True, text=True, timeout=3600)
    if built.returncode != 0:
        raise Fatal(f"tests/e2e/helm.sh build failed: {built.stderr[-800:]}")
    argv = [built.stdout.strip().splitlines()[-1], f"--kubeconfig={h.env['KUBECONFIG']}", *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    check(r.returncode == 0, f"`helm {' '.join(args)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


@scenario("helm install after the uninstall, as the README gives it (nothing else): the chart's "
          "webhook makes its own certificates, a pod in an opted-in namespace is mutated and "
          "applied; helm uninstall leaves no Secret or webhook configuration, the running pods "
          "untouched")
def s_helm(h: Harness) -> None:
    check(h.kubectl("get", "mutatingwebhookconfiguration", "koord-webhook",
                    check_rc=False).returncode != 0, "not a fresh cluster: the webhook is installed")
    t_install = time.monotonic()
    helm(h, "install", "koord-qos", str(REPO / "charts" / "koord-qos"))
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook", "--timeout=180s",
              timeout=200)
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier", "--timeout=180s",
              timeout=200)
    h.namespace(NS_HELM_POD)
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "probe", "namespace": NS_HELM_POD},
             "spec": {"containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"]}]}}
    wait_until("the chart's webhook to mutate a dry-run pod", lambda: RESOLVED in (json.loads(
        h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                  input=json.dumps(probe)).stdout)["metadata"].get("annotations") or {}), 90, 0.5)
    h.figures.append(f"figure install: first mutated pod {time.monotonic() - t_install:.1f} s "
                     "after `helm install` (images already on the node)")
    log(h.figures[-1])
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "helm-ls", "namespace": NS_HELM_POD, "labels": {QOS_LABEL: "LS"}},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"],
                                    "command": ["pause"],
                                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                  "limits": {"memory": "32Mi"}}}]}}
    h.apply_obj(pod)
    running = h.wait_running(NS_HELM_POD, "helm-ls")
    check(RESOLVED in (running["metadata"].get("annotations") or {}), "helm-ls not mutated")
    applied_event(h, NS_HELM_POD, running)
    cid = h.container_id(running, "c")
    helm(h, "uninstall", "koord-qos", "--wait")
    r = h.kubectl("get", "mutatingwebhookconfiguration", "koord-webhook", check_rc=False)
    check(r.returncode != 0 and "NotFound" in r.stderr, "helm uninstall left the webhook configuration")
    wait_until(f"namespace {SYSTEM_NS} gone (its Secret with it)", lambda: h.kubectl(
        "get", "namespace", SYSTEM_NS, check_rc=False).returncode != 0, 120, 1)
    r = h.kubectl("get", "secrets", "-A", "-o", "name", check_rc=False)
    check("koord-webhook-tls" not in r.stdout, f"a serving certificate Secret is left: {r.stdout}")
    after = h.pod(NS_HELM_POD, "helm-ls")
    check(after["status"].get("phase") == "Running" and h.container_id(after, "c") == cid,
          "helm uninstall touched the running pod")
    h.delete_pods(NS_HELM_POD, "helm-ls")


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def setup(h: Harness) -> None:
    prerequisites(h)
    build_images(h)
    start_node(h)


def teardown(h: Harness, passed: list[str], failed: list[str], interrupted: bool) -> None:
    monitoring.stop(h)
    if failed and h.node_started:
        for comp in ("kubelet", "containerd"):
            f = h.node_dir / "logs" / f"{comp}.log"
            if f.exists():
                print(f"----- last lines of {f} -----\n"
                      + "\n".join(f.read_text(errors="replace").splitlines()[-15:]),
                      file=sys.stderr)
    keep = bool(failed) or os.environ.get("KOORD_NODE_KEEP") == "1"
    if h.node_started:
        t0 = time.monotonic()
        r = h.node_sh("stop", str(h.node_dir), timeout=600)
        ok = r.returncode == 0 and h.node_sh("check-clean", str(h.node_dir)).returncode == 0
        if ok:
            passed.append("teardown")
            print(f"PASS teardown: nothing left (no bridge, veth, KUBE-* chain, kubepods cgroup, "
                  f"mount, node process; sysctls restored) ({time.monotonic() - t0:.1f}s)",
                  flush=True)
        else:
            failed.append("teardown")
            print("FAIL teardown: node.sh stop left things behind (see above)", flush=True)
    for line in h.figures:
        print(line, flush=True)
    if keep and not interrupted:
        log(f"kept logs and state in {h.dir}")
    else:
        shutil.rmtree(h.dir, ignore_errors=True)


def main() -> int:
    return SUITE.main(Harness(), setup, teardown)


if __name__ == "__main__":
    sys.exit(main())
