"""The applier as an NRI plugin on the cgroup v2 node (containerd 2.4.2, NRI on): container
values are in place before the container's first instruction. Registered into suite.py's
scenario list by `register()` (after the resize scenario); the figures over 2 x 50 pods are
FULL only.

Probe pods read their own cgroup (`/sys/fs/cgroup` in the container's cgroup namespace) as the
entrypoint's first act and print it, then wait until memory.min holds the annotation's value
and print both /proc/uptime readings: the unprotected window measured from inside the
container (0 when the values were written at creation).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from koordtest.checks import Check, check, wait_until
from koordtest.harness import log
from koordtest.metrics import metric_sum, percentile

import protection

HERE = Path(__file__).resolve().parent
SYSTEM_NS = "koordinator-system"
RESOLVED = "koordinator.sh/resolved-qos"
NS = "v2-nri"
LOAD_MIN = 8 * 2**20
BE_ALLOC_MIB = 500
BE_LIMIT_MIB = 800
BE_THROTTLING = 40  # memory.high = 320 MiB, well below the 500 MiB the pod allocates

# The first act of the container: read the own memory.min (and the time); print it with low
# and high; if memory.min does not hold $0 (the annotation's value) yet, poll until it does and
# take the time again. "window A B": A the first reading, B when memory.min held the value (B =
# A: it did at the first instruction), both /proc/uptime.
# The poll reads with the shell's own `read` (no fork) every 50 ms: ten probes that wait for
# their value must not load the one-CPU guest into missing the answer they wait for.
PROBE = ("read a _ </proc/uptime; read m </sys/fs/cgroup/memory.min; "
         "echo \"first min=$m low=$(cat /sys/fs/cgroup/memory.low) "
         "high=$(cat /sys/fs/cgroup/memory.high)\"; b=$a; i=0; "
         "while [ \"$m\" != \"$0\" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); "
         "read m </sys/fs/cgroup/memory.min; read b _ </proc/uptime; done; "
         "echo \"window $a $b\"; exec pause")


def probe_pod(name: str, image: str, want_min: int, request: str = "8Mi",
              limit: str = "32Mi") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"koordinator.sh/qosClass": "LS", "nri-probe": "1"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": image,
                                     "command": ["sh", "-c", PROBE, str(want_min)],
                                     "resources": {"requests": {"cpu": "1m", "memory": request},
                                                   "limits": {"memory": limit}}}]}}


def container_values(pod: dict, name: str) -> dict:
    return json.loads(pod["metadata"]["annotations"][RESOLVED])["memoryQOS"]["containers"][name]


def probe_output(h, name: str, timeout: float = 150) -> tuple[dict[str, str], float]:
    """The probe's first reading and its window in seconds (once it printed both)."""
    def printed():
        out = h.kubectl("-n", NS, "logs", name, check_rc=False).stdout
        return out if "window " in out else None
    out = wait_until(f"{name} to print its window", printed, timeout, 0.5)
    first = dict(kv.split("=", 1) for kv in re.search(r"first (.*)", out).group(1).split())
    a, b = (float(x) for x in re.search(r"window (\S+) (\S+)", out).groups())
    return first, round(b - a, 2)


def mode(h) -> tuple[float, float]:
    m = h.applier_metrics()
    return (metric_sum(m, "koord_applier_apply_mode", mode="nri"),
            metric_sum(m, "koord_applier_apply_mode", mode="watch"))


def wait_mode(h, want: str, timeout: float = 90) -> None:
    def there():
        try:
            nri, watch = mode(h)
        except (Check, OSError):
            return None
        return (nri == 1) if want == "nri" else (watch == 1)
    wait_until(f"the applier in {want} mode", there, timeout, 1)


def set_applier_nri(h, value: str) -> None:
    """KOORD_NRI on the DaemonSet, as an operator sets it; waits for the new applier."""
    h.kubectl("-n", SYSTEM_NS, "set", "env", "daemonset/koord-applier", f"KOORD_NRI={value}")
    h.kubectl("-n", SYSTEM_NS, "rollout", "status", "daemonset/koord-applier", "--timeout=240s",
              timeout=260)


def restart_containerd(h, nri_enabled: bool | None = None) -> None:
    """containerd restarted in the guest (optionally with NRI switched); pods keep running."""
    cfg = h.node_dir / "guest" / "containerd.toml"
    if nri_enabled is not None:
        text = cfg.read_text()
        text = re.sub(r"(\[plugins\.'io\.containerd\.nri\.v1\.nri'\]\n  disable = )\w+",
                      lambda m: m.group(1) + ("false" if nri_enabled else "true"), text)
        cfg.write_text(text)
    h.guest(f"{HERE / 'guest' / 'restart-containerd.sh'} {h.node_dir / 'guest'}", timeout=90)


def protected_namespace(h) -> None:
    """The probes' namespace under the protecting ack-slo-config, in force at the webhook: a
    probe that never sees its value polls for 2 minutes."""
    h.namespace(NS)
    protection.set_slo(h, protection.SLO_PROTECT)
    protection.wait_resolved(h, True, 100, NS)


def containerd_log(h):
    return h.node_dir / "guest" / "logs" / "containerd.log"


def containerd_log_since(h, since: int) -> str:
    """containerd's log after byte `since` (containerd_log_size before the step)."""
    with open(containerd_log(h), "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


def create_latencies(log_text: str) -> list[float]:
    """CRI CreateContainer durations (containerd's own log lines, NRI hooks included) of the
    probe containers in `log_text`."""
    lines = log_text.splitlines()
    ts = re.compile(r'time="([^"]+)"')
    start: dict[str, float] = {}
    took = []
    # containerd 2 prints the CRI metadata as protobuf text: `for container name:\"c\"` and
    # `for name:\"c\" returns container id ...`, with ` attempt:N` only when N > 0.
    meta = re.compile(r'CreateContainer within sandbox \\"(\w+)\\" for (container )?'
                      r'name:\\"c\\"(?:\s+attempt:(\d+))?')
    for line in lines:
        m = meta.search(line)
        t = ts.search(line)
        if not m or not t:
            continue
        key = f"{m.group(1)}/{m.group(3) or 0}"
        when = parse_ts(t.group(1))
        if m.group(2):
            start[key] = when
        elif "returns container id" in line and key in start:
            took.append(when - start.pop(key))
    return took


def parse_ts(s: str) -> float:
    """containerd's RFC 3339 time with nanoseconds -> seconds (only differences are used)."""
    hms = s.split("T", 1)[1].rstrip("Z")
    h_, m_, sec = hms.split(":")
    return int(h_) * 3600 + int(m_) * 60 + float(sec)


def plugin_closures(log_text: str) -> int:
    """How often containerd dropped the plugin in `log_text`: an answer (or a synchronisation)
    later than its NRI request timeout closes the connection, and until the applier registers
    again new containers start without it."""
    return len(re.findall(r"closing plugin \S+, failed to handle|failed to synchronize plugin",
                          log_text))


def create_outcomes(h) -> dict[str, float]:
    """The applier's CreateContainer answers by outcome (adjusted, unknown_pod, deadline...),
    since it started; empty when it is not in NRI mode."""
    out: dict[str, float] = {}
    for (name, labels), v in h.applier_metrics().items():
        lab = dict(labels)
        if name == "koord_applier_nri_requests_total" and lab.get("event") == "CreateContainer":
            out[lab.get("outcome", "")] = v
    return out


def outcome_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(v - before.get(k, 0)) for k, v in after.items() if v - before.get(k, 0)}


def containerd_log_size(h) -> int:
    return containerd_log(h).stat().st_size


def apply_probes(h, names: list[str], batch: int = 10) -> None:
    """Probe pods `batch` at a time, each batch Running before the next (the UML node's
    containerd times out when too many sandboxes start at once)."""
    image = h.env["WORKLOAD_IMAGE"]
    for i in range(0, len(names), batch):
        part = names[i:i + batch]
        h.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List",
             "items": [probe_pod(n, image, LOAD_MIN) for n in part]}))

        def running():
            items = h.kjson("-n", NS, "get", "pods", "-l", "nri-probe=1")["items"]
            up = {p["metadata"]["name"] for p in items if p["status"].get("phase") == "Running"}
            return set(part) <= up
        wait_until(f"probe pods {part[0]}..{part[-1]} Running", running, 600, 2)


def blames_nri(event: dict) -> bool:
    """A Warning whose message names NRI as a word (a plugin's error fails the creation with
    one); "nri" inside a name (this namespace, a pod called be-alloc-nri) is not that."""
    words = re.findall(r"[A-Za-z0-9_./:-]+", event.get("message") or "")
    return event.get("type") == "Warning" and any(w.strip(".:").lower() == "nri" for w in words)


def nri_failures(h) -> list[str]:
    """Events in the namespace that blame NRI."""
    evs = h.kjson("-n", NS, "get", "events")["items"]
    return [f"{e['involvedObject'].get('name')}: {e.get('reason')} {e.get('message', '')[:200]}"
            for e in evs if blames_nri(e)]


class ColocationOff:
    """colocation-config with enable false while the NRI scenarios run (a BE pod would be
    moved to batch resources, which this small node lends little of), then as it was."""

    def __init__(self, h) -> None:
        self.h = h

    def __enter__(self) -> None:
        cm = self.h.kjson("-n", "kube-system", "get", "configmap", "ack-slo-config")
        self.before = (cm.get("data") or {}).get("colocation-config")
        self.patch(json.dumps({"enable": False}))
        probe = probe_pod("probe", self.h.env["WORKLOAD_IMAGE"], 0, "64Mi", "400Mi")
        probe["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"

        def not_batch():
            out = json.loads(self.h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                                            input=json.dumps(probe)).stdout)
            return "batch" not in json.loads(out["metadata"]["annotations"][RESOLVED])
        wait_until("the webhook to see colocation off", not_batch, 60, 1)

    def __exit__(self, *exc) -> None:
        if self.before is not None:
            self.patch(self.before)

    def patch(self, value: str) -> None:
        self.h.kubectl("-n", "kube-system", "patch", "configmap", "ack-slo-config",
                       "--type=merge", "-p", json.dumps({"data": {"colocation-config": value}}))


def register(scenario, applied_event) -> None:
    """Adds the NRI scenarios at this point of the suite. `applied_event(h, ns, pod)` is the
    suite's: the one MemoryQOSApplied Event covering every container."""

    @scenario("NRI: the applier registers with containerd 2.4.2's NRI socket "
              "(koord_applier_apply_mode nri, koord_applier_nri_runtime_info) and an LS and a BE "
              "container read their own memory.min/low/high as their first act: the annotation's "
              "values, before the first instruction; the Event says so")
    def s_nri_first_instruction(h) -> None:
        protected_namespace(h)  # ack-slo-config too, which ColocationOff reads
        with ColocationOff(h):
            first_instruction(h)

    def first_instruction(h) -> None:
        wait_mode(h, "nri")
        m = h.applier_metrics()
        rt = [dict(labels) for (n, labels), v in m.items()
              if n == "koord_applier_nri_runtime_info" and v == 1]
        check(rt and rt[0].get("runtime") == "containerd" and rt[0].get("version") == "v2.4.2",
              f"runtime info {rt}")
        protection.set_slo(h, protection.SLO_PROTECT)
        image = h.env["WORKLOAD_IMAGE"]
        ls = probe_pod("nri-ls", image, 128 * 2**20, "128Mi", "512Mi")
        be = probe_pod("nri-be", image, 0, "64Mi", "400Mi")
        be["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
        for p in (ls, be):
            h.apply_batch_pod(p)
        seen = []
        try:
            for name in ("nri-ls", "nri-be"):
                pod = h.wait_running(NS, name)
                want = container_values(pod, "c")
                first, window = probe_output(h, name)
                for knob in ("min", "low", "high"):
                    check(first[knob] == str(want[f"memory.{knob}"]),
                          f"{name}: memory.{knob} at the first instruction {first[knob]}, the "
                          f"annotation says {want[f'memory.{knob}']} (NRI did not set it)")
                check(window == 0, f"{name}: unprotected window {window} s")
                ev = applied_event(h, NS, pod)
                check("set at container creation (NRI)" in ev["message"], ev["message"])
                seen.append(f"{name} min={first['min']} high={first['high']}")
        finally:
            h.delete_pods(NS, "nri-ls", "nri-be")
        h.figures.append("figure NRI: values at the container's first instruction (cgroup v2, "
                         f"containerd v2.4.2): {'; '.join(seen)}")
        log(h.figures[-1])

    @scenario(f"NRI: a BE pod that allocates {BE_ALLOC_MIB} MiB at start (memory limit "
              f"{BE_LIMIT_MIB}Mi, throttlingPercent {BE_THROTTLING}) is held at memory.high from "
              "the first page (memory.peak), against the same pod with the applier in watch "
              "mode (KOORD_NRI=off)")
    def s_nri_be_peak(h) -> None:
        h.namespace(NS)
        protection.set_slo(h, protection.SLO_PROTECT)
        results = {}
        with ColocationOff(h):
            for applier_mode in ("nri", "watch"):
                if applier_mode == "watch":
                    set_applier_nri(h, "off")
                wait_mode(h, applier_mode)
                try:
                    results[applier_mode] = be_peak(h, f"be-alloc-{applier_mode}")
                finally:
                    if applier_mode == "watch":
                        set_applier_nri(h, "auto")
        nri, watch = results["nri"], results["watch"]
        line = (f"figure NRI: BE pod allocating {BE_ALLOC_MIB} MiB at start, memory.high "
                f"{nri['high'] >> 20} MiB: peak {nri['peak'] >> 20} MiB with NRI (high events "
                f"{nri['events']}), {watch['peak'] >> 20} MiB in watch mode (high events "
                f"{watch['events']})")
        h.figures.append(line)
        log(line)
        # Above memory.high the kernel only slows the allocation down (reclaim cannot free
        # anonymous memory without swap): the peak creeps past it, far from the 500 MiB.
        check(nri["peak"] <= nri["high"] + 64 * 2**20,
              f"NRI: peak {nri['peak']} above memory.high {nri['high']} + 64 MiB")
        check(nri["events"] > 0, "NRI: memory.high never throttled the allocation")

    def be_peak(h, name: str) -> dict:
        pod = probe_pod(name, h.env["WORKLOAD_IMAGE"], 0, "64Mi", f"{BE_LIMIT_MIB}Mi")
        pod["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
        pod["metadata"]["annotations"] = {"koordinator.sh/memoryQOS": json.dumps(
            {"policy": "default", "throttlingPercent": BE_THROTTLING})}
        c = pod["spec"]["containers"][0]
        c["command"] = ["koord-stress", "--vm", "1", "--vm-bytes", f"{BE_ALLOC_MIB}M",
                        "--vm-hang", "100000"]
        h.apply_batch_pod(pod)
        try:
            p = h.wait_running(NS, name)
            want = container_values(p, "c")["memory.high"]
            check(want != "max" and int(want) < BE_ALLOC_MIB * 2**20,
                  f"memory.high {want}: not below the allocation")
            cg = h.container_cgroup(None, p, "c")
            wait_until(f"memory.high {want} on {name}", lambda: h.read(f"{cg}/memory.high") == str(want),
                       90, 0.5)
            files = [f"{cg}/memory.peak", f"{cg}/memory.events"]

            def reading() -> dict:
                v = h.read_many(files)
                check(v[files[0]] is not None, "no memory.peak (kernel before 5.19?)")
                events = dict(line.split() for line in v[files[1]].splitlines())
                return {"peak": int(v[files[0]]), "high": int(want),
                        "events": int(events.get("high", 0))}

            # The allocation's end, whichever comes: held at memory.high (its first `high`
            # event) or through it (the whole allocation in); a loaded guest faults its pages
            # in at a few MiB a second, so no fixed wait fits.
            last = {}

            def ended():
                last.update(reading())
                return last["events"] > 0 or last["peak"] >= BE_ALLOC_MIB * 2**20 * 95 // 100
            try:
                wait_until(f"{name}'s allocation to meet memory.high or end", ended, 180, 1)
            except Check as e:
                raise Check(f"{e}: {last}") from None
            time.sleep(3)  # held: the peak creeps on while the kernel reclaims
            return reading()
        finally:
            h.delete_pods(NS, name)

    @scenario("NRI fallback: containerd restarted with NRI disabled -> the applier says watch "
              "mode and still applies a new pod's values (no NRI answer: the watch path); NRI "
              "enabled again -> the applier registers by itself and the next pod has them at "
              "creation")
    def s_nri_fallback(h) -> None:
        protected_namespace(h)
        image = h.env["WORKLOAD_IMAGE"]
        try:
            restart_containerd(h, nri_enabled=False)
            wait_mode(h, "watch")
            answered = metric_sum(h.applier_metrics(), "koord_applier_nri_requests_total")
            h.apply_obj(probe_pod("nri-off", image, LOAD_MIN))
            pod = h.wait_running(NS, "nri-off")
            first, off_window = probe_output(h, "nri-off")
            check(h.read(f"{h.container_cgroup(None, pod, 'c')}/memory.min") == str(LOAD_MIN),
                  "the watch path did not apply the value")
            # Not NRI: the plugin answered nothing while containerd ran without it. The watch path
            # usually writes after the start (the probe reads 0 first); on a loaded machine the
            # container's cgroup can wait long enough between runc's create and start for the
            # pod's pass to reach it first, which is not the runtime's doing.
            again = metric_sum(h.applier_metrics(), "koord_applier_nri_requests_total")
            check(again == answered, f"NRI answered {again - answered:.0f} requests while "
                  "containerd ran without NRI")
            log(f"NRI off: memory.min in place {off_window:.2f} s after the container's start"
                if first["min"] == "0" else
                f"NRI off: memory.min {first['min']} already at the container's start (the "
                "watch path reached its cgroup between runc's create and start)")
        finally:
            restart_containerd(h, nri_enabled=True)
        t0 = time.monotonic()
        wait_mode(h, "nri")
        back = time.monotonic() - t0
        h.apply_obj(probe_pod("nri-on", image, LOAD_MIN))
        h.wait_running(NS, "nri-on")
        first, window = probe_output(h, "nri-on")
        check(first["min"] == str(LOAD_MIN) and window == 0,
              f"after NRI came back: memory.min {first['min']} at start, window {window}")
        # The counter the check above held still counts: NRI's answer for nri-on moved it.
        check(metric_sum(h.applier_metrics(), "koord_applier_nri_requests_total") > again,
              "koord_applier_nri_requests_total did not move with NRI back: the check that it "
              "stays still without NRI proves nothing")
        h.delete_pods(NS, "nri-off", "nri-on")
        h.figures.append(f"figure NRI fallback: containerd without NRI -> watch mode, values "
                         f"{off_window:.2f} s after start; NRI back -> registered again {back:.1f} s "
                         "after containerd answered")

    @scenario("NRI restarts: containerd restarted and the applier pod replaced while 10 probe "
              "pods start: no container fails to start and every container ends with the "
              "annotation's memory.min")
    def s_nri_restarts(h) -> None:
        protected_namespace(h)
        names = [f"restart-{i:02d}" for i in range(10)]
        image = h.env["WORKLOAD_IMAGE"]
        h.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "List",
             "items": [probe_pod(n, image, LOAD_MIN) for n in names]}))
        time.sleep(2)
        restart_containerd(h)
        old = h.applier_pod()
        h.kubectl("-n", SYSTEM_NS, "delete", "pod", old["metadata"]["name"], "--wait=false")
        try:
            def all_running():
                items = h.kjson("-n", NS, "get", "pods", "-l", "nri-probe=1")["items"]
                up = [p for p in items if p["metadata"]["name"] in names
                      and p["status"].get("phase") == "Running"]
                return up if len(up) == len(names) else None
            pods = wait_until("the 10 pods Running", all_running, 600, 2)
            # A container the kubelet had to create again because containerd went away under
            # it is the restart's doing; one the runtime failed because of the plugin is not.
            restarts = {p["metadata"]["name"]: c.get("restartCount", 0) for p in pods
                        for c in p["status"]["containerStatuses"] if c.get("restartCount", 0)}
            check(not nri_failures(h), f"creations failed on NRI: {nri_failures(h)[:3]}")
            paths = [f"{h.container_cgroup(None, p, 'c')}/memory.min" for p in pods]
            wait_until("every container's memory.min", lambda: all(
                v == str(LOAD_MIN) for v in h.read_many(paths).values()), 90, 1)
            at_start = sum(1 for n in names if probe_output(h, n)[0]["min"] == str(LOAD_MIN))
            wait_mode(h, "nri")
        finally:
            h.delete_pods(NS, *names)
        h.figures.append(f"figure NRI restarts: containerd restarted and the applier replaced "
                         f"while 10 pods started: none failed on NRI, 10/10 applied, {at_start}/10 "
                         f"with the values at their first instruction, container restarts "
                         f"{restarts or 'none'}")
        log(h.figures[-1])

    @scenario("NRI figures: the unprotected window (the container's first instruction -> "
              "memory.min in place, read by the container itself) and the CRI CreateContainer "
              "latency (containerd's log) over 50 LS pods in batches of 10, with NRI and in "
              "watch mode (KOORD_NRI=off); the plugin's own answer time",
              full="2 x 50 pods, about 10 more minutes on this UML node")
    def s_nri_figures(h) -> None:
        protected_namespace(h)
        n = 50
        per_mode = {}
        try:
            for applier_mode in ("nri", "watch"):
                if applier_mode == "watch":
                    set_applier_nri(h, "off")
                wait_mode(h, applier_mode)
                names = [f"{applier_mode}-{i:03d}" for i in range(n)]
                since = containerd_log_size(h)
                answers = create_outcomes(h)
                t0 = time.monotonic()
                apply_probes(h, names)
                took = time.monotonic() - t0
                load = h.guest("cat /proc/loadavg").split()[:3]
                windows = [probe_output(h, name)[1] for name in names]
                text = containerd_log_since(h, since)
                lat = create_latencies(text)
                check(len(lat) >= n, f"{len(lat)} CreateContainer pairs in containerd's log")
                per_mode[applier_mode] = (windows, lat, took, plugin_closures(text))
                late = [f"{name} {w:.2f}s" for name, w in zip(names, windows) if w]
                log(f"{applier_mode} mode: guest load {' '.join(load)}; the plugin's "
                    f"CreateContainer answers {outcome_delta(answers, create_outcomes(h))}; "
                    f"containers with a window above 0: {late or 'none'}")
                h.kubectl("-n", NS, "delete", "pods", "-l", "nri-probe=1", "--wait=true",
                          "--grace-period=1", timeout=600)
        finally:
            set_applier_nri(h, "auto")
        m = h.applier_metrics()
        for applier_mode, (w, lat, took, closed) in per_mode.items():
            line = (f"figure NRI figures, {applier_mode} mode, {len(w)} LS pods in batches of 10 "
                    f"({took:.0f} s): unprotected window p50 {percentile(w, 50):.2f} s, p99 "
                    f"{percentile(w, 99):.2f} s, max {max(w):.2f} s, {sum(1 for x in w if x)} "
                    f"above 0; CRI CreateContainer p50 {percentile(lat, 50) * 1000:.0f} ms, p99 "
                    f"{percentile(lat, 99) * 1000:.0f} ms; containerd closed the plugin "
                    f"{closed} times (its request timeout)")
            h.figures.append(line)
            log(line)
        answered = metric_sum(m, "koord_applier_nri_answer_duration_seconds_count",
                              event="CreateContainer")
        total = metric_sum(m, "koord_applier_nri_answer_duration_seconds_sum",
                           event="CreateContainer")
        if answered:
            h.figures.append(f"figure NRI plugin answer (CreateContainer, the new applier "
                             f"since its restart): {answered:.0f} answers, mean "
                             f"{total / answered * 1000:.2f} ms")
        check(max(per_mode["nri"][0]) == 0,
              f"NRI mode: a container ran unprotected (windows {per_mode['nri'][0]})")
