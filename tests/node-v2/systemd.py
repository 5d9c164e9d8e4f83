#!/usr/bin/env python3
"""The cgroup v2 node with the systemd cgroup driver, in kind's shape: systemd 252 as the
guest's PID 1 (the node's own units only), containerd with `SystemdCgroup = true`, the kubelet
with `cgroupDriver: systemd` and `cgroupRoot: /kubelet`, so every pod is below
`kubelet.slice/kubelet-kubepods.slice/...` and every container is a `cri-containerd-<id>.scope`.
Run it as its own part of the cgroup v2 node suite, on a slot of its own beside the main node:

  KOORD_NODE_V2_PART=systemd KOORD_V2_SLOT=1 tests/node-v2/run

node.sh start (KOORD_V2_CGROUP_DRIVER=systemd, the kubelet on its default gates) -> the
protection proof's configuration A (product not installed) -> the README's install ->
configurations B, C0 and C (C through a daemon-reload, a kubelet restart, a containerd restart
and four kubelet minutes, every protection file sampled at 10 Hz; docs/results.md's table is its
verdict's) -> scenarios on the real .slice/.scope files -> kubectl delete -k -> node.sh stop ->
node.sh check-clean. The output contract is the main suite's (PASS/FAIL/SKIP lines, figures,
`N passed, M failed`). KOORD_V2_KUBELET_CGROUP_ROOT=/ runs the same scenarios on the production
shape (`kubepods.slice/...`; make test does). Stdlib only; the harness and helpers are
suite.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "lib"))
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True

# The node this part runs on, before suite.py reads the environment.
os.environ["KOORD_V2_CGROUP_DRIVER"] = "systemd"
os.environ.setdefault("KOORD_V2_KUBELET_CGROUP_ROOT", "/kubelet")

import proactive  # noqa: E402
import proactive_swap  # noqa: E402
import protection  # noqa: E402
import suite as v2  # noqa: E402  (the cgroupfs node's harness, install and helpers)
from koordtest import Suite, coverage, set_log_tag  # noqa: E402
from koordtest.checks import Check, check, wait_until  # noqa: E402
from koordtest.harness import container_id, container_leaf, kubelet_cgroup, kubepods_path, log  # noqa: E402
from koordtest.metrics import metric_sum  # noqa: E402

CGROUP = v2.CGROUP
NS_QOS = "v2sd-qos"
NS_BATCH = v2.NS_BATCH
# The overlay's --resync-seconds: the applier restores what it did not write by then.
RESYNC = 20
# What a restore may take beyond the resync period: one pass over the node's pods on this UML
# guest (every fork+exec ~11 ms) and the sampling interval.
SLACK = 8
# Configuration C's window: the node goes through what a production node does while the flood
# presses the LS pod; every protection file is sampled at 10 Hz inside the guest from the LS pod's
# protection to the end. Offsets in seconds from the BE pod's start.
DISRUPTIONS = [(5, "systemctl daemon-reload", "systemctl daemon-reload"),
               (15, "kubelet restart", "{guest}/restart-kubelet.sh {g}"),
               (60, "containerd restart", "{guest}/restart-containerd.sh {g}")]
# The kubelet updates its QoS slices every minute from its start (periodicQOSCgroupUpdateInterval,
# a timer that runs unconditionally): the window lasts this many of them after the restart.
KUBELET_MINUTES = 4
# 10 Hz samples place a run's ends to a tenth of a second: a reset the applier repairs at its
# next check (every 0.25 s, the files written before systemd is called) reads as about 0.3 s; the
# bound is "repaired within a second", four check periods.
LONGEST_BELOW = 1.0

set_log_tag("node-v2-systemd")
SUITE = Suite("KOORD_NODE_V2_ONLY", wall_time_figure=True, full_env="KOORD_NODE_V2_FULL")
scenario = SUITE.scenario


class Harness(v2.Harness):
    """The node's cgroups as the systemd driver names them (below the kubelet's cgroupRoot)."""

    def __init__(self) -> None:
        super().__init__()
        self.driver = "systemd"
        self.root = os.environ["KOORD_V2_KUBELET_CGROUP_ROOT"]

    def kubelet_dir(self, *names: str) -> str:
        return f"{CGROUP}/{kubelet_cgroup(list(names), self.driver, self.root)}"

    def pod_cgroup(self, ctrl: str | None, pod: dict) -> str:
        check(ctrl is None, "cgroup v2 has one hierarchy")
        return f"{CGROUP}/{kubepods_path(pod, self.driver, self.root)}"

    def container_cgroup(self, ctrl: str | None, pod: dict, name: str) -> str:
        return f"{self.pod_cgroup(ctrl, pod)}/{container_leaf(container_id(pod, name), self.driver)}"

    def ancestors(self) -> list[str]:
        """kubepods and the Burstable class: the cgroups whose protection caps an LS pod's."""
        return [self.kubelet_dir(), self.kubelet_dir("burstable")]

    def shape(self) -> str:
        top = self.kubelet_dir().removeprefix(CGROUP + "/")
        return (f"the cgroup v2 node with the systemd driver (cgroupRoot `{self.root}`: `{top}`), "
                "its kubelet on its default gates (MemoryQoS on)")


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------

@scenario("node: systemd is the guest's PID 1 and runs the node's own units only; cgroup v2 "
          "mounted by systemd (memory_recursiveprot); the 1.37 kubelet made its QoS slices "
          "below its cgroupRoot's slice as systemd units", base=True)
def s_node(h: Harness) -> None:
    info = h.kjson("get", "node", h.env["NODE_NAME"])["status"]["nodeInfo"]
    check(info["kubeletVersion"] == f"v{v2.K8S_VERSION}", f"kubeletVersion {info['kubeletVersion']}")
    check(info["containerRuntimeVersion"].startswith("containerd://2."),
          f"containerRuntimeVersion {info['containerRuntimeVersion']}")
    check(h.env.get("CGROUP_DRIVER") == "systemd", f"node.env CGROUP_DRIVER {h.env.get('CGROUP_DRIVER')}")
    pid1 = h.guest("cat /proc/1/comm").strip()
    check(pid1 == "systemd", f"PID 1 is {pid1!r}")
    version = h.guest("systemctl --version").splitlines()[0]
    mount = h.guest("grep ' /sys/fs/cgroup ' /proc/self/mountinfo").strip()
    check(" - cgroup2 " in mount and "memory_recursiveprot" in mount,
          f"/sys/fs/cgroup not cgroup2 with memory_recursiveprot: {mount!r}")
    services = [line.split()[0] for line in h.guest(
        "systemctl list-units --type=service --state=active --plain --no-legend").splitlines()]
    others = [u for u in services if not u.startswith("kv2-")]
    check("kv2-kubelet.service" in services and not others,
          f"services other than the node's run: {others} (all: {services})")
    # PID 1's own view (guest/init.sh tells it this is no container).
    virt = h.guest("systemctl show -p Virtualization --value").strip()
    check(virt == "uml", f"systemd sees virtualization {virt!r}, not uml")
    burst = h.kubelet_dir("burstable")
    unit = burst.rsplit("/", 1)[1]
    cg = h.guest(f"systemctl show -p ControlGroup --value {unit}; [ -d {burst} ] && echo dir; "
                 f"[ -e {CGROUP}/kubepods ] && echo cgroupfs-tree || true").split()
    check(cg[:2] == [burst.removeprefix(CGROUP), "dir"],
          f"{unit}: systemd's ControlGroup {cg[:1]}, directory {burst}: {cg}")
    check("cgroupfs-tree" not in cg, f"a cgroupfs kubepods directory exists beside {burst}")
    h.figures.append(f"figure systemd node: kubelet {info['kubeletVersion']}, "
                     f"{info['containerRuntimeVersion']}, {version} as PID 1 (virt uml), "
                     f"cgroupDriver systemd, cgroupRoot {h.root}: {burst.removeprefix(CGROUP + '/')}")


def applier_it_binary() -> str:
    """The applier's integration-test binary (`cargo test --test it`), built on the host; the
    guest runs it from the host's filesystem. The workspace selected, as `make unit` selects it:
    the same features, so the binary `make unit` built is found, not compiled again."""
    out = subprocess.run(["cargo", "test", "-q", "--workspace", "--test", "it", "--no-run",
                          "--message-format=json"], cwd=HERE.parents[1], capture_output=True,
                         text=True, timeout=1800)
    check(out.returncode == 0, f"building the applier's tests failed: {out.stderr[-800:]}")
    exes = [m["executable"] for m in map(json.loads, out.stdout.splitlines())
            if m.get("reason") == "compiler-artifact" and m.get("executable")
            and m["target"]["name"] == "it" and "koord-applier" in m["package_id"]]
    check(len(exes) == 1, f"no single `it` test binary in cargo's answer: {exes}")
    return exes[0]


@scenario("the applier's systemd connection on a real systemd (applier/tests/it/systemd_real.rs "
          "in the guest, before the install): a MemoryMin set through SetUnitProperties is "
          "stored and survives daemon-reload, a value only written into the file does not")
def s_systemd_real(h: Harness) -> None:
    binary = applier_it_binary()
    out = h.guest(f"{binary} --ignored --exact "
                  "systemd_real::a_value_set_through_systemd_survives_daemon_reload --nocapture "
                  "--test-threads 1 2>&1", timeout=180, check_rc=False)
    check("test result: ok. 1 passed" in out, f"systemd_real in the guest: {out[-1500:]}")
    # libtest prints the test's name and then, on the same line, what the test printed.
    figure = next((line[line.index("figure real systemd"):] for line in out.splitlines()
                   if "figure real systemd" in line), "")
    check(figure != "", f"systemd_real printed no figure: {out[-800:]}")
    h.figures.append(figure)


@scenario("protection A (product not installed): LS redis + BE flood, measured")
def s_protect_a(h: Harness) -> None:
    protection.run_config(h, "A")


@scenario("install: the README's quickstart (kubectl apply -k) on the systemd node; webhook "
          "Available, applier ready, a dry-run pod mutated", base=True)
def s_install(h: Harness) -> None:
    installed(h)


def installed(h: Harness) -> None:
    h.need("installed", v2.install)


def ls_pod(h: Harness) -> dict:
    """The LS pod every later scenario measures against (built by whichever needs it first)."""
    def start(h: Harness) -> dict:
        installed(h)
        protection.set_slo(h, protection.SLO_PROTECT)
        h.namespace(NS_QOS)
        protection.wait_resolved(h, True, 100, NS_QOS)
        h.apply_obj(v2.ls_pod("ls-app", h.env["WORKLOAD_IMAGE"]), NS_QOS)
        return h.wait_running(NS_QOS, "ls-app")
    return h.need("ls", start)


# The protection runs come before the batch scenario turns colocation on: with colocation on,
# the BE flood pod would need batch-cpu, which this one-CPU node may not have to lend.
@scenario("protection B (installed, memory QoS off in ack-slo-config)")
def s_protect_b(h: Harness) -> None:
    protection.run_config(h, "B")


@scenario("protection C0 (installed, the reference's ack-slo-config as it is: enable true, no "
          "parameters; memory.min stays 0, the BE pod is reclaimed and throttled first)")
def s_protect_c0(h: Harness) -> None:
    protection.run_config(h, "C0")


@scenario("protection P (as C, the applier with --protect-ancestors=false: pod-level "
          "memory.min/low only, the ancestors at 0)", full="4 more minutes")
def s_protect_p(h: Harness) -> None:
    protection.run_config(h, "P")


@scenario("protection C (installed, LS protected, BE throttled) through a daemon-reload, a "
          "kubelet restart, a containerd restart and four kubelet minute updates: every "
          "protection file of the QoS slices, the LS pod slice and its scopes sampled at 10 Hz "
          f"is never below its sum longer than {LONGEST_BELOW} s; C keeps >= 90% of the LS "
          "working set, the harder-hit of A and B <= 50%, and C refaults a tenth of it at most")
def s_protect_c(h: Harness) -> None:
    protection.run_config(h, "C", DisruptedWindow())
    protection.verdict(h)


@scenario("LS pod: memory.min/low/high of the REAL pod .slice and container .scope = the "
          "annotation; kubepods and burstable slices hold at least the pod's; the applier "
          "reports the systemd layout and warns about the cgroupRoot slice's own 0")
def s_ls(h: Harness) -> None:
    pod = ls_pod(h)
    ev = v2.applied_event(h, NS_QOS, pod)
    seen = v2.knob_files(h, pod, ev["message"])
    pc, c = h.pod_cgroup(None, pod), h.container_cgroup(None, pod, "app")
    check(pc.endswith(".slice") and c.endswith(".scope"), f"not systemd units: {c}")
    for want in ("pod memory.min=134217728", "container memory.min=134217728",
                 "pod memory.low=134217728"):
        check(want in seen, f"{want} not in {seen}")
    check(any(s.startswith("container memory.high=") for s in seen), f"no memory.high: {seen}")
    # The kubelet's own values (as systemd unit properties): the 512Mi limit, the 500m quota.
    v = h.read_many([f"{c}/memory.max", f"{c}/cpu.max"])
    check(v[f"{c}/memory.max"] == str(512 * 2**20), f"container memory.max {v[f'{c}/memory.max']}")
    check(v[f"{c}/cpu.max"] == "50000 100000", f"container cpu.max {v[f'{c}/cpu.max']}")
    # The ancestors: the applier's sums (systemd may have just reset them, see the next
    # scenario: wait one resync at most).
    anc = h.ancestors()
    try:
        got = wait_until("kubepods and burstable memory.min >= the pod's", lambda: (lambda r: r if all(
            int(r[f"{a}/memory.min"]) >= 128 * 2**20 for a in anc) else None)(
            h.read_many([f"{a}/memory.min" for a in anc])), RESYNC + SLACK, 0.5)
    except Check as e:
        raise Check(f"{e}: {h.read_many([f'{a}/memory.min' for a in anc])}") from None
    m = h.applier_metrics()
    info = [dict(l) for (n, l), val in m.items() if n == "koord_applier_cgroup_layout_info" and val == 1]
    check(info == [{"driver": "systemd", "kubelet_cgroup_root": h.root, "version": "v2"}],
          f"layout info {info}")
    if h.root != "/":
        top = h.kubelet_dir().rsplit("/", 1)[0]
        check(h.read(f"{top}/memory.min") == "0", f"{top} memory.min is not 0")
        logs = h.kubectl("-n", v2.SYSTEM_NS, "logs", h.applier_pod()["metadata"]["name"]).stdout
        check("0 above kubepods" in logs, f"no warning about {top}'s own memory.min in the log")
    h.figures.append(f"figure LS pod on the systemd node: {', '.join(seen)}; "
                     + ", ".join(f"{f.rsplit('/', 2)[-2]} memory.min {v}" for f, v in got.items())
                     + f"; applier layout {info[0]}")


def be_pod(h: Harness) -> dict:
    """The BE pod on batch resources (colocation on), built by whichever scenario needs it first."""
    def start(h: Harness) -> dict:
        installed(h)
        h.namespace(NS_BATCH)
        v2.patch_slo_key(h, "colocation-config", {
            "enable": True, "cpuReclaimThresholdPercent": 100, "memoryReclaimThresholdPercent": 65,
            "metricAggregateDurationSeconds": 30, "updateTimeThresholdSeconds": 10,
            "resourceDiffThreshold": 0.1})
        try:
            wait_until("batch-cpu/batch-memory on the Node", lambda: (lambda b: b[0] >= 100 and b[1] >= 64 * 2**20)(
                v2.node_batch(h)), 180, 2)
        except Check as e:
            raise Check(f"{e}; Node has {v2.node_batch(h)}") from None
        spec = v2.be_batch_pod("be-batch", h.env["WORKLOAD_IMAGE"])
        wait_until("the webhook to resolve batch resources", lambda: "batch" in json.loads(json.loads(
            h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json", input=json.dumps(spec)).stdout)
            ["metadata"]["annotations"][v2.RESOLVED]), 60, 1)
        h.apply_batch_pod(spec)
        return h.wait_running(NS_BATCH, "be-batch")
    return h.need("be", start)


@scenario("BE pod with batch resources: its pod .slice and container .scope hold the batch "
          "values as cgroup v2 files (cpu.weight, cpu.max, memory.max); a hand edit of the "
          "scope's cpu.max is repaired within one resync")
def s_batch(h: Harness) -> None:
    pod = be_pod(h)
    check(pod["status"]["qosClass"] == "BestEffort", pod["status"]["qosClass"])
    v2.applied_event(h, NS_BATCH, pod)

    # systemd enables the cpu controller of the BestEffort slice's children when the kubelet's
    # unit asks for it; a pass before that finds no cpu.* file and retries at the next resync.
    def batch_values():
        try:
            return v2.batch_files(h, pod, "work")
        except Check:
            return None
    try:
        got = wait_until("the batch values in the pod slice and scope", batch_values,
                         RESYNC + SLACK, 0.5)
    except Check:
        got = v2.batch_files(h, pod, "work")  # raises with the file that differs
    f = f"{h.container_cgroup(None, pod, 'work')}/cpu.max"
    want = h.read(f)
    edited = h.guest(f"echo '90000 100000' > {f}; cat {f}").strip()
    check(edited == "90000 100000", f"the hand edit did not take: {f} reads {edited!r}")
    t0 = time.monotonic()
    wait_until(f"{f} repaired", lambda: h.read(f) == want, RESYNC + SLACK + 7, 0.5)
    took = time.monotonic() - t0
    h.figures.append(f"figure BE batch pod on the systemd node: {got}; a hand edit of the "
                     f"scope's cpu.max repaired after {took:.1f}s (resync {RESYNC}s)")


# The one sampler of cgroup files inside the guest: tests/lib/sample.c, built static with the
# node's images (no interpreter between two samples). Each `every` seconds a JSON line
# [seconds since start, first word of each file: a number, "max", or None when unreadable,
# the evidence of a stall], into `out`, until `until` (a number of seconds, or a path whose
# existence stops it). Its series is held by coverage.py: no gap over coverage.MAX_GAP (0.3 s)
# between two samples but the guest's stalls, counted as unobserved and failing above
# coverage.MAX_UNOBSERVED_SHARE (5%) of the window.
SAMPLE_HZ = 10


def sampler(h: "Harness", files: list[str], every: float, out: str, until: float | str) -> str:
    """The guest's command that runs the sampler (in the foreground: add `&` to run it beside)."""
    return f"{h.node_dir / 'images' / 'build' / 'koord-sample'} {','.join(files)} {every} {out} {until}"


def load_note(h: "Harness") -> str:
    """What a failed timing bound can see of its cause: the host's load and the guest's (its
    load average and CPU pressure: a guest that stalls repairs late)."""
    try:
        guest = h.guest("cat /proc/loadavg; head -n 1 /proc/pressure/cpu", timeout=20).split("\n")
        inside = f"guest load {' '.join(guest[0].split()[:3])}, guest cpu pressure {guest[1].strip()}"
    except Exception as e:  # noqa: BLE001 - a note, never the failure itself
        inside = f"the guest's load unreadable ({str(e)[:80]})"
    return f"host load {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; {inside}"


def sampled(text: str, nfiles: int) -> tuple[list[coverage.Tick], coverage.Coverage]:
    """The sampler's lines and what they covered of their window."""
    ticks = coverage.parse(text, nfiles)
    return ticks, coverage.coverage(ticks)


def covered(h: "Harness", cov: coverage.Coverage, what: str) -> None:
    """Fails when the samples cannot hold a bound: a gap over 0.3 s with no stall to explain
    it, or guest stalls over 5% of the window."""
    failures = cov.failures()
    if failures:
        raise Check(f"{what} sampled at {SAMPLE_HZ} Hz: {'; '.join(failures)}; {load_note(h)}")


def at_least(ticks: list[coverage.Tick], wants: list[int]) -> list[list[bool]]:
    """Per sample, each file >= its want (unreadable counts as below, max as above)."""
    return [[v == "max" or (isinstance(v, int) and v >= w) for v, w in zip(t.values, wants)]
            for t in ticks]


def column(oks: list[list[bool]], i: int) -> list[bool]:
    return [row[i] for row in oks]


class DisruptedWindow:
    """protection.run_config's window for configuration C on this node: the QoS slices', the LS
    pod slice's and its scopes' memory.min and memory.low sampled at 10 Hz while the node goes
    through a daemon-reload, a kubelet restart (MemoryQoS on: it writes 0 into the QoS slices
    through systemd at start), a containerd restart and KUBELET_MINUTES of the kubelet's minute
    updates. Each file is compared with the annotation's value (pod, containers) or the LS pod's
    (the QoS slices hold at least the sum of their children's)."""

    OUT, STOP = "/tmp/koord-window.jsonl", "/tmp/koord-window.stop"

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.done: list[tuple[str, float, float, str]] = []  # (what, at, took, error)
        self.thread: threading.Thread | None = None
        self.t0 = 0.0
        self.text = "not measured"
        self.checks: list[tuple[bool, str]] = []

    def start(self, h: Harness, ls: dict) -> None:
        pc = h.pod_cgroup(None, ls)
        dirs = [(a, protection.LS_REQUEST) for a in h.ancestors()] + [(pc, protection.LS_REQUEST)]
        dirs += [(h.container_cgroup(None, ls, c), want) for c, want in protection.LS_REQUESTS.items()]
        self.files = {f"{d}/{k}": want for d, want in dirs for k in ("memory.min", "memory.low")}
        try:
            wait_until("every protection file at its value", lambda: all(
                int(v or 0) >= self.files[f] for f, v in h.read_many(list(self.files)).items()),
                RESYNC + SLACK, 0.5)
        except Check as e:
            raise Check(f"{e}: {h.read_many(list(self.files))}") from None
        h.guest(f"rm -f {self.OUT} {self.STOP}; setsid "
                f"{sampler(h, list(self.files), 1 / SAMPLE_HZ, self.OUT, self.STOP)} </dev/null >/dev/null 2>&1 &")
        self.t0 = time.monotonic()

    def flood(self, h: Harness) -> None:
        """The disruptions, on their own thread, from now (the BE pod's start)."""
        def run() -> None:
            t_flood = time.monotonic()
            for offset, what, cmd in DISRUPTIONS:
                time.sleep(max(0.0, t_flood + offset - time.monotonic()))
                at = time.monotonic()
                err = ""
                try:
                    h.guest(cmd.format(guest=HERE / "guest", g=h.node_dir / "guest"), timeout=120)
                except Exception as e:  # noqa: BLE001 - recorded, asserted by verdict()
                    err = str(e)[:300]
                self.done.append((what, at - self.t0, time.monotonic() - at, err))
                log(f"window: {what} at {at - self.t0:.0f}s{' failed: ' + err if err else ''}")
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def finish(self, h: Harness) -> None:
        """Waits for the disruptions and the kubelet's minutes, stops the sampler, sums up."""
        check(self.thread is not None, "the window's disruptions never started")
        self.thread.join(240)
        check(not self.thread.is_alive(), "the window's disruptions did not end in 240 s")
        restart = next((at for what, at, _, err in self.done if what == "kubelet restart"
                        and not err), None)
        if restart is not None:
            end = self.t0 + restart + KUBELET_MINUTES * 60 + 5
            log(f"window: sampling until {KUBELET_MINUTES} kubelet minutes after its restart "
                f"({max(0, end - time.monotonic()):.0f}s more)")
            time.sleep(max(0.0, end - time.monotonic()))
        out = h.guest(f"touch {self.STOP}; sleep 1; cat {self.OUT}")
        files = list(self.files)
        ticks, cov = sampled(out, len(files))
        oks = at_least(ticks, list(self.files.values()))
        span = ticks[-1].t if ticks else 0.0
        below = coverage.below_runs(ticks, [all(o) for o in oks], cov.unobserved)
        total = sum(r.seconds for r in below)
        longest = max([0.0] + [r.seconds for r in below])
        per_file = []
        for i, f in enumerate(files):
            runs = coverage.below_runs(ticks, column(oks, i), cov.unobserved)
            if runs:
                per_file.append(f"{'/'.join(f.rsplit('/', 2)[-2:])[-48:]} "
                                + ", ".join(map(str, runs)))
        events = ", ".join(f"{what} at {at:.0f} s" + (" FAILED" if err else "")
                           for what, at, _, err in self.done)
        self.text = (f"{len(files)} protection files (the QoS slices, the LS pod's slice and its "
                     f"two scopes) sampled at {SAMPLE_HZ} Hz through {events} and "
                     f"{KUBELET_MINUTES} kubelet minute updates after the restart, "
                     f"{cov.text()}: below the sums {total:.1f} s "
                     f"({100 * total / max(span, 1):.1f}% of the time), longest {longest:.1f} s")
        if per_file:
            self.text += f" ({'; '.join(per_file)})"
        log(f"window: {self.text}")
        self.checks = [
            (all(not err for _, _, _, err in self.done) and len(self.done) == len(DISRUPTIONS),
             f"a disruption failed or did not run: {self.done}"),
            (restart is not None and span >= restart + KUBELET_MINUTES * 60,
             f"the window ({span:.0f}s) does not cover {KUBELET_MINUTES} kubelet minutes after "
             f"its restart"),
            (not cov.failures(), f"the window sampled at {SAMPLE_HZ} Hz: "
             f"{'; '.join(cov.failures())}; {load_note(h) if cov.failures() else ''}"),
            (longest <= LONGEST_BELOW, f"a protection file stayed below its sum {longest:.1f}s "
             f"(bound {LONGEST_BELOW} s): {self.text}; {load_note(h) if longest > LONGEST_BELOW else ''}"),
        ]

    def verdict(self) -> None:
        for ok, why in self.checks:
            check(ok, why)


@scenario("systemd keeps the sums with the applier's default resync (60 s): the same sampling "
          "over three of the kubelet's minutes, no sample below the LS pod's value",
          full="4 more minutes; its figure is in tests/node-v2/README.md")
def s_systemd_rewrites_default(h: Harness) -> None:
    h.applier_args(remove=f"--resync-seconds={RESYNC}")
    try:
        sample_rewrites(h, 60, 3 * 60 + 10)
    finally:
        h.applier_args(add=f"--resync-seconds={RESYNC}")


def sample_rewrites(h: Harness, resync: int, seconds: int) -> None:
    """Samples the QoS slices' memory.min at 10 Hz inside the guest for `seconds` (a kubelet
    minute at least); asserts that no sample is below the LS pod's value: the applier set the
    sums through systemd (SetUnitProperties), so what systemd re-applies is the sum."""
    ls_pod(h)
    anc = h.ancestors()
    files = [f"{a}/memory.min" for a in anc]
    wait_until("the QoS slices at the applier's sums", lambda: all(
        int(v) >= 128 * 2**20 for v in h.read_many(files).values()), resync + SLACK, 0.5)
    out = h.guest(f"{sampler(h, files, 1 / SAMPLE_HZ, '/tmp/koord-rewrites.jsonl', seconds)}; "
                  "cat /tmp/koord-rewrites.jsonl", timeout=seconds + 30)
    ticks, cov = sampled(out, len(files))
    oks = at_least(ticks, [128 * 2**20] * len(files))
    lines, worst, hidden = [], 0.0, []
    for i, a in enumerate(anc):
        runs = coverage.below_runs(ticks, column(oks, i), cov.unobserved)
        below = sum(r.seconds for r in runs)
        worst = max([worst] + [r.seconds for r in runs])
        hidden += [f"{a.rsplit('/', 1)[1]} {r}" for r in runs if r.up_to > r.seconds]
        lines.append(f"{a.rsplit('/', 1)[1]}: {len(runs)} resets, below the pod's {below:.1f}s "
                     f"({100 * below / max(cov.window, 1):.0f}%), longest "
                     f"{max([0] + [r.seconds for r in runs]):.1f}s")
    log("; ".join(lines + hidden))
    h.figures.append(f"figure systemd re-applying the kubelet's QoS slices (applier resync "
                     f"{resync}s, sampled at {SAMPLE_HZ} Hz, {cov.text()}): " + "; ".join(lines + hidden))
    covered(h, cov, "the QoS slices' memory.min")
    check(worst == 0, f"an ancestor was below the pod's value (longest {worst:.1f}s; "
          f"resync {resync}s): {lines}")


@scenario("systemctl daemon-reload: systemd re-applies units' stored properties; the applier "
          "stored its values in them (the LS pod's slice and scope, the QoS slices, the BE "
          "pod's batch values), so no file changes")
def s_daemon_reload(h: Harness) -> None:
    ls, be = ls_pod(h), be_pod(h)
    pc, c = h.pod_cgroup(None, ls), h.container_cgroup(None, ls, "app")
    anc = [f"{a}/memory.min" for a in h.ancestors()]
    files = [f"{pc}/memory.min", f"{pc}/memory.low", f"{c}/memory.min", f"{c}/memory.low",
             f"{c}/memory.high"] + anc
    # Between two of systemd's resets of the QoS slices (previous scenario): the reference
    # values come from the one read that saw the slices at the applier's sums (a second read
    # could already see the next reset, and nothing would then ever equal it).
    def converged():
        v = h.read_many(files)
        return v if all(int(v[a]) >= 128 * 2**20 for a in anc) else None
    before = wait_until("the QoS slices at the applier's sums", converged, RESYNC + SLACK, 0.5)
    v2.batch_files(h, be, "work")
    w0 = metric_sum(h.applier_metrics(), "koord_applier_cgroup_writes_total", outcome="written")
    h.guest("systemctl daemon-reload")
    t0 = time.monotonic()
    after = h.read_many(files)
    reset = [f"{f.rsplit('/', 2)[-2][-14:]}/{f.rsplit('/', 1)[1]}={after[f]}"
             for f in files if after[f] != before[f]]
    try:
        v2.batch_files(h, be, "work")
        be_reset = "kept"
    except Check as e:
        be_reset = f"reset ({e})"
    log(f"daemon-reload: reset {reset}; BE batch values {be_reset}")
    check(not reset and be_reset == "kept",
          f"daemon-reload reset {reset}, BE batch values {be_reset}: systemd does not store "
          f"the applier's values")

    def restored():
        if h.read_many(files) != before:
            return False
        v2.batch_files(h, be, "work")
        return True
    try:
        wait_until("every file restored", restored, RESYNC + SLACK, 0.5)
    except Check as e:
        raise Check(f"{e}: {h.read_many(files)} (before {before})") from None
    took = time.monotonic() - t0
    w1 = metric_sum(h.applier_metrics(), "koord_applier_cgroup_writes_total", outcome="written")
    h.figures.append(f"figure systemctl daemon-reload on the systemd node: {len(reset)} of "
                     f"{len(files)} LS protection files reset by systemd, BE batch values "
                     f"{be_reset.split(' ')[0]}; all restored by the applier after {took:.1f}s "
                     f"({w1 - w0:.0f} writes; resync {RESYNC}s)")


@scenario("BE suppression on the systemd node: with an LS pod burning CPU the BestEffort slice's "
          "cpu.max holds a quota, stored by systemd as the slice's CPUQuotaPerSecUSec, and at "
          "10 Hz across a kubelet minute no reset to max stands longer than 1 s")
def s_be_suppress(h: Harness) -> None:
    be_pod(h)  # colocation on and its namespace: be-burn asks batch resources
    h.applier_args(add="--be-suppress-min-cpus=0.05")
    v2.patch_slo_key(h, "resource-threshold-config", {"clusterStrategy": {
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota"}})
    burn = ["koord-stress", "-c", "1"]
    h.apply_obj(v2.be_batch_pod("be-burn", h.env["WORKLOAD_IMAGE"], burn, cpu=("50m", "1"),
                                mem=("16Mi", "32Mi")))
    ls = v2.ls_pod("ls-burn", h.env["WORKLOAD_IMAGE"])
    ls["metadata"]["namespace"] = NS_BATCH
    ls["spec"]["containers"][0].update(command=burn, resources={
        "requests": {"cpu": "200m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}})
    slice_dir = h.kubelet_dir("besteffort")
    unit = slice_dir.rsplit("/", 1)[1]
    parent = f"{slice_dir}/cpu.max"
    seconds = 70
    try:
        h.wait_running(NS_BATCH, "be-burn")
        h.apply_obj(ls)
        h.wait_running(NS_BATCH, "ls-burn")
        wait_until("the BestEffort slice's quota (suppression on, LS busy)",
                   lambda: h.read(parent).split()[0] != "max", 60, 1)
        stored = h.guest(f"systemctl show -p CPUQuotaPerSecUSec --value {unit}").strip()
        check(stored not in ("", "infinity"),
              f"systemd stores no quota for {unit} (CPUQuotaPerSecUSec={stored!r})")
        out = h.guest(f"{sampler(h, [parent], 1 / SAMPLE_HZ, '/tmp/koord-quota.jsonl', seconds)}; "
                      "cat /tmp/koord-quota.jsonl", timeout=seconds + 30)
        ticks, cov = sampled(out, 1)
        # A quota is a number (cpu.max's first word); "max" is the quota lifted.
        runs = coverage.below_runs(ticks, [isinstance(t.values[0], int) for t in ticks],
                                   cov.unobserved)
        longest = max([0.0] + [r.seconds for r in runs])
        quotas = sorted({str(t.values[0]) for t in ticks})
        hidden = [str(r) for r in runs if r.up_to > r.seconds]
        line = (f"sampled at {SAMPLE_HZ} Hz, {cov.text()}: {len(runs)} resets to max, "
                f"longest {longest:.1f}s{' (' + '; '.join(hidden) + ')' if hidden else ''}; "
                f"systemd's CPUQuotaPerSecUSec {stored}; "
                f"quotas seen {', '.join(quotas[:4])}{' ...' if len(quotas) > 4 else ''}")
        log(line)
        h.figures.append(f"figure BE suppression through the kubelet's minute on the systemd "
                         f"node: {line}")
        covered(h, cov, "the BestEffort slice's cpu.max")
        if longest > 1.0:
            raise Check(f"the BestEffort slice's quota was lifted for {longest:.1f}s: {line}; "
                        f"{load_note(h)}")
    finally:
        h.delete_pods(NS_BATCH, "ls-burn", "be-burn")
        v2.patch_slo_key(h, "resource-threshold-config", {"clusterStrategy": {"enable": False}})
        h.applier_args(remove="--be-suppress-min-cpus=0.05")
    wait_until("the BestEffort slice's quota lifted",
               lambda: h.read(parent).split()[0] == "max", 60, 1)


@scenario("a kubelet restart, then the QoS slices zeroed through systemd as the kubelet's "
          "MemoryQoS does when it starts: the applier notices within its ancestors check "
          "(0.25 s) and restores the sums; sampled at 10 Hz, no run below the LS pod's value "
          f"longer than {LONGEST_BELOW} s")
def s_kubelet_restart(h: Harness) -> None:
    ls_pod(h)
    anc = h.ancestors()
    files = [f"{a}/{f}" for a in anc for f in ("memory.min", "memory.low")]
    want = 128 * 2**20
    wait_until("the QoS slices at the applier's sums", lambda: all(
        int(v) >= want for v in h.read_many(files).values()), RESYNC + SLACK, 0.5)
    r0 = metric_sum(h.applier_metrics(), "koord_applier_qos_memory_protection_repairs_total")
    kubepods_unit = anc[0].rsplit("/", 1)[1]
    burstable_unit = anc[1].rsplit("/", 1)[1]
    # The sampler runs through both events: the real restart (the kubelet may or may not write
    # its QoS values at start), then the zeroing it does with MemoryQoS on, through systemd.
    seconds = 40
    out = h.guest(
        f"{sampler(h, files, 1 / SAMPLE_HZ, '/tmp/koord-restart.jsonl', seconds)} & "
        f"sleep 2; systemctl restart kv2-kubelet.service; sleep 18; "
        f"systemctl set-property --runtime {kubepods_unit} MemoryMin=0 MemoryLow=0; "
        f"systemctl set-property --runtime {burstable_unit} MemoryLow=0; "
        f"wait; cat /tmp/koord-restart.jsonl", timeout=seconds + 40)
    ticks, cov = sampled(out, len(files))
    oks = at_least(ticks, [want] * len(files))
    lines, worst, zeroed = [], 0.0, 0
    for i, f in enumerate(files):
        runs = coverage.below_runs(ticks, column(oks, i), cov.unobserved)
        zeroed += len(runs)
        worst = max([worst] + [r.seconds for r in runs])
        name = "/".join(f.rsplit("/", 2)[-2:])
        hidden = [str(r) for r in runs if r.up_to > r.seconds]
        lines.append(f"{name}: {len(runs)} below, longest {max([0] + [r.seconds for r in runs]):.1f}s"
                     + (f" ({'; '.join(hidden)})" if hidden else ""))
    r1 = metric_sum(h.applier_metrics(), "koord_applier_qos_memory_protection_repairs_total")
    log("; ".join(lines) + f"; repairs {r1 - r0:.0f}")
    h.figures.append(f"figure a kubelet restart and its QoS zeroing through systemd on the "
                     f"systemd node (sampled at {SAMPLE_HZ} Hz, {cov.text()}): "
                     + "; ".join(lines) + f"; the applier's repairs {r1 - r0:.0f} (resync "
                     f"{RESYNC}s, ancestors check 0.25 s)")
    covered(h, cov, "the QoS slices' memory.min and memory.low")
    check(zeroed > 0 and r1 > r0, f"the zeroing through systemd was never seen: {lines}, "
          f"repairs {r1 - r0:.0f}")
    if worst > LONGEST_BELOW:
        raise Check(f"a QoS slice stayed below the LS pod's value {worst:.1f}s "
                    f"(bound {LONGEST_BELOW} s): {lines}; {load_note(h)}")


@scenario(f"proactive reclaim (memory.pressure-driven, opted in per namespace; the {proactive.FORM} "
          f"form: {proactive.INTERVAL_S}-s intervals, the defaults' step): an idle pod's active file "
          "cache goes back to the node and batch-memory follows; Redis, a hot pod (promotions at "
          "most 0.2% of its working set per 10 intervals) and a pod's floor keep theirs; "
          "memory.reclaim ignores a cgroup's own memory.min on this kernel")
def s_proactive(h: Harness) -> None:
    installed(h)
    proactive.run(h)


@scenario("proactive reclaim with swap on the node (the kubelet in LimitedSwap): an idle pod's "
          "cold anonymous memory goes to swap within what the kubelet allows it, the same pod "
          "not opted in keeps its own, the floor holds; protection C0 under an anonymous BE "
          "flood keeps more with swap and --be-swap-percent than without swap; the node put "
          "back without swap")
def s_proactive_swap(h: Harness) -> None:
    installed(h)
    proactive_swap.run(h)


@scenario("uninstall: kubectl delete -k removes the product; the node's pods keep running")
def s_uninstall(h: Harness) -> None:
    uninstalled(h)
    left = h.kubectl("get", "namespace", v2.SYSTEM_NS, check_rc=False)
    check(left.returncode != 0, f"{v2.SYSTEM_NS} still there: {left.stdout}")
    pod = h.pod(NS_QOS, "ls-app")
    check(pod["status"]["phase"] == "Running", f"ls-app {pod['status']['phase']} after uninstall")


def uninstalled(h: Harness) -> None:
    """The product removed once the LS pod's sums are in the QoS slices (so systemd stores them)."""
    def remove(h: Harness) -> None:
        ls_pod(h)
        files = [f"{a}/memory.min" for a in h.ancestors()]
        wait_until("the QoS slices at the applier's sums", lambda: all(
            int(v) >= 128 * 2**20 for v in h.read_many(files).values()), RESYNC + SLACK, 0.5)
        h.kubectl("delete", "-k", str(v2.OVERLAY), "--wait=true", timeout=300)
        h.installed = False
    h.need("uninstalled", remove)


INSTALL_MD = HERE.parents[1] / "docs" / "install.md"


def cleanup_command(units: list[str]) -> str:
    """docs/install.md's command that clears what systemd stores of the applier's after an
    uninstall, with this node's slice names (the doc spells them for cgroupRoot /)."""
    line = next(l for l in INSTALL_MD.read_text().splitlines()
                if l.startswith("for u in kubepods.slice "))
    for doc, unit in sorted(zip(["kubepods.slice", "kubepods-burstable.slice",
                                 "kubepods-besteffort.slice"], units), key=lambda p: -len(p[0])):
        line = line.replace(f" {doc}", f" {unit}")
    return line


@scenario("after uninstall: systemd still stores the applier's last sums as the QoS slices' "
          "MemoryMin/MemoryLow; docs/install.md's command clears them (and the BE slice's "
          "CPUQuota), and systemctl daemon-reload then leaves 0 in the files")
def s_systemd_cleanup(h: Harness) -> None:
    uninstalled(h)
    dirs = [h.kubelet_dir(), h.kubelet_dir("burstable"), h.kubelet_dir("besteffort")]
    units = [d.rsplit("/", 1)[1] for d in dirs]
    props = "-p MemoryMin -p MemoryLow -p CPUQuotaPerSecUSec"

    def shown(unit: str) -> dict[str, str]:
        out = h.guest(f"systemctl show {props} {unit}")
        return dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
    before = {u: shown(u) for u in units}
    log(f"stored after the uninstall: {before}")
    burst = before[units[1]]
    check(burst["MemoryMin"].isdigit() and int(burst["MemoryMin"]) >= 128 * 2**20,
          f"{units[1]} MemoryMin {burst['MemoryMin']}: the applier's sum is not stored by systemd")
    cmd = cleanup_command(units)
    h.guest(cmd)
    h.guest("systemctl daemon-reload")
    after = {u: shown(u) for u in units}
    files = h.read_many([f"{d}/{f}" for d in dirs for f in ("memory.min", "memory.low")])
    for u in units:
        check(after[u]["MemoryMin"] == "0" and after[u]["MemoryLow"] == "0",
              f"{u} after the command: {after[u]}")
    check(after[units[2]]["CPUQuotaPerSecUSec"] == "infinity",
          f"{units[2]} CPUQuota after the command: {after[units[2]]}")
    check(all(v == "0" for v in files.values()), f"files after daemon-reload: {files}")
    h.figures.append(f"figure after uninstall on the systemd node: {units[1]} MemoryMin "
                     f"{burst['MemoryMin']} still stored by systemd; docs/install.md's command "
                     f"({cmd!r}) and a daemon-reload left every QoS slice at 0")


def main() -> int:
    return SUITE.main(Harness(), v2.setup, v2.teardown)


if __name__ == "__main__":
    sys.exit(main())
