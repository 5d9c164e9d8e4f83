"""The seed's promise on real pods: an LS Redis pod keeps its memory while a BE pod floods the
node. One run, configurations in order on the same node:

  A   the product not installed
  B   installed, memory QoS off in ack-slo-config (enable: false for LS and BE)
  C0  installed, the reference's ack-slo-config as it is (enable: true, no parameters)
  P   as C, but the applier with --protect-ancestors=false: the pod-level memory.min/low only,
      kubepods and kubepods/burstable left at the kubelet's 0
  C   installed, the reference's ack-slo-config with the parameters that protect: LS
      minLimitPercent/lowLimitPercent 100 (memory.min/low = request), BE throttlingPercent 80
      (memory.high = 80% of the limit)

The recommended parameters of Koordinator (and of this product, docs/contract.md section 2) are
0 for minLimitPercent, lowLimitPercent and throttlingPercent: `enable: true` alone writes
memory.min = 0 and memory.high = max. What C0 keeps comes from the BE class's wmarkMinAdj
(BE-first reclaim and throttle, emulated), not from protection; C is what an operator writes
for a guarantee (memory.min holds whatever the BE pod does).

The LS pod (redis-demo's shape: label LS, redis-server, no memoryQOS annotation so that the
cluster configuration decides; the seed's `{"policy": "auto"}` would take the class's recommended
parameters, i.e. 0, whatever the cluster says) has two containers: `redis` and `cache`, which
reads a file of its emptyDir once (its page cache is the working set; a second read would
activate the pages and even A would keep them). The BE pod holds anonymous memory and streams a
file larger than the node's free memory through the page cache (written, then read once).

Per configuration: LS working set kept (the LS pod's file pages after the flood / before, from
its memory.stat), the refaults of its re-read after the flood (workingset_refault_file), Redis
GET throughput and p50/p99 during the flood (redis-benchmark inside the guest), the BE pod's
memory.events high/max and the guest's OOM kills.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

from koordtest import plot, published
from koordtest.checks import Check, check, wait_until
from koordtest.harness import log
from koordtest.metrics import metric_sum
from koordtest.sampler import Sampler

# The results page's table and its plot, written by the verdict of the run that asserted them.
RESULTS_MD = Path(__file__).resolve().parents[2] / "docs" / "results.md"
PLOT = RESULTS_MD.parent / "img" / "protection.svg"
NS = "v2-protect"
LS_FILE_MIB = 160
BE_ANON = "700M"
BE_FILE_MIB = 1400
RESULTS: dict[str, dict] = {}
# The LS pod's containers' requests (redis, cache) and their sum: its memory.min/low in C.
LS_REQUESTS = {"redis": 64 * 2**20, "cache": 200 * 2**20}
LS_REQUEST = sum(LS_REQUESTS.values())

SLO_ON = {"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": True}},
                              "beClass": {"memoryQOS": {"enable": True}}}}
SLO_OFF = {"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": False}},
                               "beClass": {"memoryQOS": {"enable": False}}}}
SLO_PROTECT = {"clusterStrategy": {
    "lsClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100, "lowLimitPercent": 100}},
    "beClass": {"memoryQOS": {"enable": True, "throttlingPercent": 80}}}}




def ls_pod(image: str) -> dict:
    cache = ("until [ -f /data/go ]; do sleep 0.2; done; cat /data/ws >/dev/null; touch /data/warm; "
             "until [ -f /data/reread ]; do sleep 0.2; done; cat /data/ws >/dev/null; "
             "touch /data/reread-done; exec sleep 1000000")
    mounts = [{"name": "data", "mountPath": "/data"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "redis-demo", "labels": {"koordinator.sh/qosClass": "LS",
                                                          "name": "redis-demo"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "data", "emptyDir": {}}],
                     "containers": [
                         {"name": "redis", "image": image,
                          "command": ["redis-server", "--port", "6379", "--save", "",
                                      "--appendonly", "no", "--protected-mode", "no"],
                          "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                        "limits": {"cpu": "1", "memory": "256Mi"}}},
                         {"name": "cache", "image": image, "command": ["sh", "-c", cache],
                          "volumeMounts": mounts,
                          "resources": {"requests": {"cpu": "10m", "memory": "200Mi"},
                                        "limits": {"cpu": "1", "memory": "400Mi"}}}]}}


def be_pod(image: str, anonymous: int = 0) -> dict:
    """The BE flood pod: anonymous 0 for the file flood, else the MiB of an anonymous flood (C0
    with swap, proactive_swap.py: no file, done once it is all allocated, in memory or in swap,
    or after a minute)."""
    flood = (f"koord-stress --vm 1 --vm-bytes {BE_ANON} --vm-hang 100000 & sleep 3; "
             f"dd if=/dev/zero of=/data/be bs=1M count={BE_FILE_MIB} 2>/dev/null; "
             f"cat /data/be >/dev/null; touch /data/done; "
             f"exec sleep 1000000")
    if anonymous:
        cg = "/sys/fs/cgroup"
        flood = (f"koord-stress --vm 1 --vm-bytes {anonymous}M --vm-hang 100000 & "
                 f"i=0; while [ $i -lt 60 ] && [ $(( $(cat {cg}/memory.current) + "
                 f"$(cat {cg}/memory.swap.current) )) -lt {anonymous * 2**20} ]; do "
                 f"sleep 1; i=$((i+1)); done; touch /data/done; exec sleep 1000000")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "be-flood", "labels": {"koordinator.sh/qosClass": "BE"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "data", "emptyDir": {}}],
                     "containers": [{"name": "flood", "image": image, "command": ["sh", "-c", flood],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                     "resources": {"requests": {"cpu": "10m", "memory": "64Mi"},
                                                   "limits": {"cpu": "1", "memory": "1600Mi"}}}]}}


PRESSURE_REQUEST = 32 * 2**20


def pressure_pod(image: str) -> dict:
    """A small LS pod created while the BE flood fills the node."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ls-under-pressure", "labels": {"koordinator.sh/qosClass": "LS"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": image, "command": ["pause"],
                                     "resources": {"requests": {"memory": "32Mi"},
                                                   "limits": {"memory": "64Mi"}}}]}}


def applier_restarts(h) -> int:
    return sum(c.get("restartCount", 0)
               for c in h.applier_pod()["status"].get("containerStatuses") or [])


def keeps_applying(h, restarts_before: int) -> None:
    """During the flood: the pod created under pressure holds its memory.min, the applier
    answers /metrics, its container was neither restarted nor OOM-killed."""
    pod = h.wait_running(NS, "ls-under-pressure")
    cg = h.pod_cgroup(None, pod)
    wait_until("the applier to protect the pod created under memory pressure", lambda: h.read(
        f"{cg}/memory.min") == str(PRESSURE_REQUEST), 30, 0.5)
    applier = h.applier_pod()
    ev = kv(h.read(f"{h.container_cgroup(None, applier, 'applier')}/memory.events"))
    writes = metric_sum(h.applier_metrics(applier), "koord_applier_cgroup_writes_total")
    log(f"under pressure: ls-under-pressure memory.min {PRESSURE_REQUEST}; applier memory.events "
        f"{ev}; applier cgroup writes so far {writes:.0f}")
    check(applier_restarts(h) == restarts_before, "the applier restarted during the flood")
    check(ev.get("oom_kill", 0) == 0, f"the applier's cgroup saw OOM kills: {ev}")
    h.delete_pods(NS, "ls-under-pressure")


def set_slo(h, cfg: dict) -> None:
    h.apply_obj({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "ack-slo-config", "namespace": "kube-system"},
                 "data": {"resource-qos-config": json.dumps(cfg)}})


def wait_resolved(h, want_enabled: bool, min_percent: int, ns: str = NS) -> None:
    """Until the webhook answers a dry run of the LS pod with this configuration."""
    probe = ls_pod(h.env["REDIS_IMAGE"])
    probe["metadata"]["namespace"] = ns

    def seen():
        out = json.loads(h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                                   input=json.dumps(probe)).stdout)
        rq = json.loads(out["metadata"].get("annotations", {}).get("koordinator.sh/resolved-qos", "{}"))
        mq = rq.get("memoryQOS") or {}
        return mq.get("enabled") == want_enabled and (
            not want_enabled or (mq.get("params") or {}).get("minLimitPercent", 0) == min_percent
            or min_percent == 0)
    wait_until(f"the webhook to resolve memoryQOS enabled={want_enabled}", seen, 90, 1)


def memstat(h, cg: str) -> dict[str, int]:
    out = {}
    for line in h.read(f"{cg}/memory.stat").splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v)
    return out


def kv(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def emptydir(pod: dict) -> str:
    return f"/var/lib/kubelet/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~empty-dir/data"


def run_config(h, name: str, window=None, anonymous=None) -> None:
    """One configuration, measured. `window` (configuration C on the systemd node): an object
    whose start(h, ls_pod) is called once the LS pod is protected, flood(h) when the BE pod
    starts and finish(h) after the re-read; the verdict reads its `text` and calls its
    verdict(). `anonymous(h)`: the MiB of an anonymous flood instead of the file flood, asked
    once the LS pod holds its working set."""
    image = h.env["REDIS_IMAGE"]
    if name == "A":
        check(not h.installed, "configuration A must run before the product is installed")
    # Each configuration makes the namespace (a no-op after the first), so that one selected
    # alone runs.
    h.namespace(NS)
    if name == "B":
        set_slo(h, SLO_OFF)
        wait_resolved(h, False, 0)
    elif name in ("C0", "C0a", "C0as"):
        set_slo(h, SLO_ON)
        wait_resolved(h, True, 0)
    elif name == "P":
        set_slo(h, SLO_PROTECT)
        wait_resolved(h, True, 100)
        h.applier_args(add="--protect-ancestors=false")
    elif name == "C":
        h.applier_args(remove="--protect-ancestors=false")  # after P, if it ran
        set_slo(h, SLO_PROTECT)
        wait_resolved(h, True, 100)
    h.apply_obj(ls_pod(image), NS)
    ls = h.wait_running(NS, "redis-demo")
    ls_cg = h.pod_cgroup(None, ls)
    if name in ("P", "C"):
        # The applier's pass: the LS pod's memory.min = its request (64Mi + 200Mi).
        wait_until("the applier to write the LS pod's memory.min", lambda: int(
            h.read(f"{ls_cg}/memory.min")) >= LS_REQUEST, 90, 1)
    if window:
        window.start(h, ls)
    ip = ls["status"]["podIP"]
    # The working set: a file written from outside the pod, caches dropped, read once by `cache`.
    ed = emptydir(ls)
    h.guest(f"dd if=/dev/urandom of={ed}/ws bs=1M count={LS_FILE_MIB} 2>/dev/null && sync && "
            f"echo 3 >/proc/sys/vm/drop_caches && touch {ed}/go", timeout=180)
    wait_until("the LS pod to read its working set", lambda: h.guest(
        f"[ -f {ed}/warm ] && echo y", check_rc=False).strip() == "y", 120, 0.5)
    h.guest(f"redis-benchmark -h {ip} -t set -n 20000 -r 20000 -d 512 -q >/dev/null", timeout=300)
    before = memstat(h, ls_cg)
    ancestors = [f"{a}/memory.min" for a in h.ancestors()]
    prot = h.read_many([f"{ls_cg}/memory.min", f"{ls_cg}/memory.low"] + ancestors)
    oom0 = kv(h.guest("grep oom_kill /proc/vmstat")).get("oom_kill", 0)
    log(f"{name}: LS file {before['file'] >> 20} MiB anon {before['anon'] >> 20} MiB; protection {prot}")

    # The LS pod's file pages (its working set), MiB, once a second: the plot's line.
    sampler = Sampler(lambda: memstat(h, ls_cg)["file"] / 2**20, 1.0)
    h.apply_batch_pod(be_pod(h.env["WORKLOAD_IMAGE"], anonymous(h) if anonymous else 0), NS)
    be = h.wait_running(NS, "be-flood")
    be_cg, be_ed = h.pod_cgroup(None, be), emptydir(be)
    if window:
        window.flood(h)
    if name == "C":
        # The node under the flood's memory pressure: the applier, which protects the node,
        # must keep working through it (not be reclaimed into uselessness or OOM-killed).
        applier0 = applier_restarts(h)
        h.apply_obj(pressure_pod(h.env["WORKLOAD_IMAGE"]), NS)
    t0 = time.monotonic()
    bench = h.guest(f"redis-benchmark -h {ip} -t get -n 40000 -r 20000 -c 8 --csv", timeout=600)
    if name == "C":
        keeps_applying(h, applier0)
    wait_until("the BE flood to finish", lambda: h.guest(
        f"[ -f {be_ed}/done ] && echo y", check_rc=False).strip() == "y", 600, 1)
    flood_s = time.monotonic() - t0
    samples = [(round(t, 1), v) for t, v in sampler.stop()]
    after = memstat(h, ls_cg)
    # BE-first (memory.wmark_min_adj emulated): what the applier reclaimed from the BE pod.
    m = h.applier_metrics() if h.installed else {}
    be_first_mib = metric_sum(m, "koord_applier_async_reclaim_bytes_total", pod="be-flood",
                              why="be-first") / 2**20
    be_first_episodes = metric_sum(m, "koord_applier_be_first_episodes_total")
    be_throttles = metric_sum(m, "koord_applier_be_throttles_total", pod="be-flood")
    be_events = kv(h.read(f"{be_cg}/memory.events"))
    be_flood_cg = h.container_cgroup(None, be, "flood")
    be_high = h.read(f"{be_flood_cg}/memory.high")
    # The re-read after the flood: what it must fetch again is what was lost.
    h.guest(f"touch {ed}/reread")
    wait_until("the LS pod to re-read its working set", lambda: h.guest(
        f"[ -f {ed}/reread-done ] && echo y", check_rc=False).strip() == "y", 300, 0.5)
    reread = memstat(h, ls_cg)
    if window:
        window.finish(h)
    oom = kv(h.guest("grep oom_kill /proc/vmstat")).get("oom_kill", 0) - oom0
    released, be_high_after = None, be_high
    if be_throttles:
        # The measurements taken, the node's page cache dropped: free memory is back above the
        # refill level and the BE throttle must go, the value before (the annotation's) back in
        # the file.
        h.guest("echo 1 >/proc/sys/vm/drop_caches")
        try:
            released = wait_until("the BE throttle to be released", lambda: metric_sum(
                h.applier_metrics(), "koord_applier_be_throttled_containers") == 0, 30, 0.5)
        except Check as e:
            log(f"{name}: {e}")
            released = False
        be_high_after = h.read(f"{be_flood_cg}/memory.high")
    rows = [line.replace('"', "").split(",") for line in bench.strip().splitlines()]
    head, get = rows[0], next(r for r in rows[1:] if r[0] == "GET")
    col = dict(zip(head, get))
    r = {"kept": 100.0 * after["file"] / max(1, before["file"]),
         "file_before": before["file"] >> 20, "file_after": after["file"] >> 20,
         "refaults": reread["workingset_refault_file"] - after["workingset_refault_file"],
         "rps": float(col["rps"]), "p50": float(col["p50_latency_ms"]),
         "p99": float(col["p99_latency_ms"]), "be_high": be_events.get("high", 0),
         "be_max": be_events.get("max", 0), "be_memory_high": be_high, "oom": oom,
         "ls_min": prot[f"{ls_cg}/memory.min"], "flood_s": flood_s,
         "be_first_mib": be_first_mib, "be_first_episodes": be_first_episodes,
         "be_throttles": be_throttles, "released": released, "be_high_after": be_high_after,
         "samples": samples, "window": window,
         "ancestors_min": sum(int(prot[a] or 0) for a in ancestors)}
    RESULTS[name] = r
    log(f"{name}: {({k: v for k, v in r.items() if k not in ('samples', 'window')})}")
    h.delete_pods(NS, "be-flood", "redis-demo")
    check(r["file_before"] >= LS_FILE_MIB * 0.9,
          f"the LS working set was not warm: {r['file_before']} MiB of {LS_FILE_MIB}")


def verdict(h) -> None:
    """The configurations' figures asserted, then published: a run whose A, B and C were measured
    publishes its table whether its assertions held or not, naming the first that did not."""
    try:
        compared = assert_configs(h)
    except Check as e:
        if all(n in RESULTS for n in ("A", "B", "C")):
            publish(h, str(e))
        raise
    if compared:
        publish(h, None)


def assert_configs(h) -> bool:
    """The assertions of the measured configurations; True when A and B were measured beside C
    (the comparison and the published table need them)."""
    lines = ["figure protection (LS redis-demo + BE flood on a "
             f"{h.env.get('GUEST_MEM', '?')} cgroup v2 node; tests/node-v2/run):",
             "  config | LS kept | LS file MiB before->after | refaults on re-read | GET rps | "
             "p50 ms | p99 ms | BE memory.high | BE events high/max | OOM kills | LS pod memory.min | "
             "kubepods + burstable memory.min"]
    for name in ("A", "B", "C0", "P", "C"):
        r = RESULTS.get(name)
        if r:
            lines.append(f"  {name:6} | {r['kept']:5.1f}% | {r['file_before']} -> {r['file_after']} | "
                         f"{r['refaults']} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                         f"{r['be_memory_high']} | {r['be_high']}/{r['be_max']} | {r['oom']} | {r['ls_min']} | "
                         f"{r['ancestors_min']}")
    h.figures.append("\n".join(lines))
    check("C" in RESULTS, f"configurations measured: {sorted(RESULTS)}")
    c = RESULTS["C"]
    check(c["kept"] >= 90, f"C kept {c['kept']:.1f}% of the LS working set (< 90%)")
    if c["window"]:
        h.figures.append(f"figure protection C's window: {c['window'].text}")
        c["window"].verdict()
    check(not c["oom"], f"{c['oom']} OOM kills in C")
    # The BE pod's memory.high is throttlingPercent 80 of its 1600Mi limit (held there: the
    # scenario after this one), once any BE-first throttle is released.
    check(c["be_high_after"] == str(1600 * 2**20 * 80 // 100 // 4096 * 4096),
          f"C: BE memory.high {c['be_high_after']}, want 80% of 1600Mi")
    for name in ("C0", "P", "C"):
        r = RESULTS.get(name)
        check(not r or r["released"] is not False, f"{name}: the BE throttle was not released "
              f"with free memory back (memory.high {r and r['be_high_after']})")
    if "A" not in RESULTS or "B" not in RESULTS:
        # C selected without the unprotected configurations (the ONLY filter): its own
        # figures are asserted; the comparison, and the published table, need A and B
        # measured in the same run (a failed A or B is its own FAIL).
        log(f"protection: only {sorted(RESULTS)} measured: C's own figures asserted, not the "
            "comparison with A and B")
        return False
    # The baseline: of the two configurations without protection (A, and B: installed with
    # memory QoS off), the one whose LS pod the flood reached harder. Each configuration is its
    # own flood, and how hard one reaches the LS pod varies from run to run on this 6.12
    # kernel (one run: A 1,802 refaults and 97% kept, B 40,960 and 9%). The pressure must
    # have reached it (1,000 pages = 4 MiB at least refaulted on its re-read); C must refault
    # at most a tenth of it, a margin noise cannot give, and keep more.
    base_name = max(("A", "B"), key=lambda n: RESULTS[n]["refaults"])
    base = RESULTS[base_name]
    check(base["refaults"] >= 1000, f"A and B: {RESULTS['A']['refaults']} and "
          f"{RESULTS['B']['refaults']} refaults on the LS re-read: no pressure?")
    check(c["refaults"] * 10 <= base["refaults"],
          f"refaults on the LS re-read: C {c['refaults']}, {base_name} {base['refaults']} "
          f"(want C <= {base_name} / 10)")
    check(c["kept"] > base["kept"], f"C kept {c['kept']:.1f}%, {base_name} {base['kept']:.1f}%")
    # Without protection the flood takes most of the LS working set: the harder-hit of A and B
    # kept at most half (one of them alone may be spared by chance, as above).
    check(base["kept"] <= 50, f"A and B kept {RESULTS['A']['kept']:.1f}% and "
          f"{RESULTS['B']['kept']:.1f}%: the flood never pressed the LS pod")
    c0 = RESULTS.get("C0")
    if c0:
        # The reference's ConfigMap as it ships: no protection parameters, so memory.min is 0
        # everywhere, and what is left is BE-first (the BE pod's wmarkMinAdj 50, emulated):
        # the applier reclaims the BE pod's page cache before the kernel's global reclaim
        # reaches the LS pod, and holds the BE pod's growth with memory.high while the node is
        # short (its anonymous memory cannot be reclaimed without swap). The kernel's own count
        # shows the throttle: the BE pod met memory.high (its `high` events; its annotation
        # says max, so in A and B there is none). The direction of the LS pod's gain is
        # asserted, not a size; the refaults of the re-read are no measure here (the kernel
        # drops the shadow entries that count them under heavy pressure).
        check(c0["be_first_mib"] > 0 and c0["be_first_episodes"] > 0,
              f"C0: the applier reclaimed nothing from the BE pod first: {c0}")
        check(c0["be_throttles"] > 0 and c0["be_high"] > 0,
              f"C0: the BE pod was not throttled (throttles {c0['be_throttles']}, memory.events "
              f"high {c0['be_high']})")
        check(RESULTS["A"]["be_high"] == 0, f"A: BE memory.events high {RESULTS['A']['be_high']}"
              " with memory.high max: the count is not the throttle's")
        check(c0["be_high_after"] == "max", f"C0: BE memory.high {c0['be_high_after']} after the "
              "throttle, not the annotation's max")
        check(c0["kept"] > base["kept"], f"C0 kept {c0['kept']:.1f}%, {base_name} "
              f"{base['kept']:.1f}%: BE-first kept less than nothing")
    p = RESULTS.get("P")
    if p:
        # The kernel caps a cgroup's protection at its ancestors': pod-level values alone
        # protect nothing while kubepods and kubepods/burstable are 0.
        check(p["ancestors_min"] == 0, f"P: the ancestors' memory.min is {p['ancestors_min']}, not 0")
        check(p["kept"] <= 50, f"P kept {p['kept']:.1f}% with the ancestors at 0 (> 50%)")
    return True


CONFIGS = {
    "A": "A product not installed",
    "B": "B installed, memory QoS off",
    "C0": "C0 installed, `enable: true` as the reference ships it (`memory.min` 0; BE reclaimed "
          "and throttled first)",
    "P": "P as C, `--protect-ancestors=false`",
    "C": "**C** installed, `minLimitPercent`/`lowLimitPercent` 100 for LS, `throttlingPercent` "
         "80 for BE",
}


CONFIG_SHORT = {"A": "A not installed", "B": "B memory QoS off", "C0": "C0 enable: true as shipped",
                "P": "P ancestors at 0", "C": "C protection parameters"}


def bytes_text(v: str) -> str:
    if not v.isdigit():
        return v
    return f"{int(v) / 2**30:.2f} GiB" if int(v) >= 2**30 else f"{int(v) / 2**20:.0f} MiB"


def be_high_text(r: dict) -> str:
    """The BE container's memory.high as its annotation sets it, the BE-first throttle's value
    at the end of the flood where one held it, and the kernel's count of `high` events."""
    text = bytes_text(r["be_high_after"])
    if r["be_throttles"] and r["be_memory_high"] != r["be_high_after"]:
        text += f", held at {bytes_text(r['be_memory_high'])} under pressure"
    return f"{text} ({r['be_high']:,} events)"


def publish(h, failed: str | None) -> None:
    """The run's table into docs/results.md between its markers, with the first assertion it did
    not hold (`failed`). Not under CI=true (a checkout thrown away); KOORD_NODE_V2_PUBLISH=0
    leaves it alone too."""
    if not published.wanted("KOORD_NODE_V2_PUBLISH"):
        return
    held = f"**not held**: {failed}" if failed else "every assertion held"
    rows = [textwrap.fill(
        f"Written by the run of {datetime.now(timezone.utc):%Y-%m-%d} that asserted it, on "
        f"{h.shape()} ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the "
        f"verdict), {held}:", 100, break_on_hyphens=False), "",
            "| configuration | LS working set kept | refaults on the LS re-read | Redis GET "
            "during the flood: rps, p99 | BE `memory.high` (`high` events) | OOM kills |",
            "|---|---|---|---|---|---|"]
    for name in ("A", "B", "C0", "P", "C"):
        r = RESULTS.get(name)
        if not r:
            continue
        kept, sizes = f"{r['kept']:.1f}%", f"({r['file_before']} -> {r['file_after']} MiB)"
        refaults = f"{r['refaults']:,}"
        if name == "C":
            kept, refaults = f"**{kept}**", f"**{refaults}**"
        rows.append(f"| {CONFIGS[name]} | {kept} {sizes} | {refaults} | {r['rps']:.0f}, "
                    f"{r['p99']:.0f} ms | {be_high_text(r)} | {r['oom']} |")
    if RESULTS["C"]["window"]:
        rows += ["", textwrap.fill(f"While C ran: {RESULTS['C']['window'].text}.", 100,
                                   break_on_hyphens=False)]
    rows += ["", "![The LS pod's working set during the BE flood, per configuration]"
             "(img/protection.svg)"]
    series = {CONFIG_SHORT[n]: RESULTS[n]["samples"] for n in ("A", "B", "C0", "P", "C")
              if n in RESULTS and RESULTS[n]["samples"]}
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    PLOT.write_text(plot.line_chart(
        series, f"LS redis-demo's working set (file pages) while the BE pod floods the node "
        f"({datetime.now(timezone.utc):%Y-%m-%d})", "seconds from the BE pod's creation",
        "LS pod file pages (MiB)"))
    published.replace_between_markers(RESULTS_MD, "protection", "\n".join(rows))
    log(f"the protection table written into {RESULTS_MD}, its plot into {PLOT}")


def throttled(h) -> None:
    """A BE pod with throttlingPercent 80 of a 400Mi limit (memory.high 320Mi) streams 900 MiB
    through the page cache next to the LS pod: the kernel reclaims the BE pod at memory.high
    (its `high` counter grows), nothing reaches memory.max or is OOM-killed, the LS working set
    stays."""
    # C's configuration, set again so that the scenario also runs alone (a no-op after C).
    h.namespace(NS)
    set_slo(h, SLO_PROTECT)
    wait_resolved(h, True, 100)
    image = h.env["REDIS_IMAGE"]
    h.apply_obj(ls_pod(image), NS)
    ls = h.wait_running(NS, "redis-demo")
    ls_cg, ed = h.pod_cgroup(None, ls), emptydir(ls)
    wait_until("the applier to write the LS pod's memory.min", lambda: int(
        h.read(f"{ls_cg}/memory.min")) >= LS_REQUEST, 90, 1)
    h.guest(f"dd if=/dev/urandom of={ed}/ws bs=1M count={LS_FILE_MIB} 2>/dev/null && sync && "
            f"echo 3 >/proc/sys/vm/drop_caches && touch {ed}/go", timeout=180)
    wait_until("the LS pod to read its working set", lambda: h.guest(
        f"[ -f {ed}/warm ] && echo y", check_rc=False).strip() == "y", 120, 0.5)
    before = memstat(h, ls_cg)["file"]
    oom0 = kv(h.guest("grep oom_kill /proc/vmstat")).get("oom_kill", 0)
    pod = be_pod(h.env["WORKLOAD_IMAGE"])
    pod["metadata"]["name"] = "be-throttled"
    c = pod["spec"]["containers"][0]
    c["command"] = ["sh", "-c", "dd if=/dev/zero of=/data/be bs=1M count=900 2>/dev/null; "
                    "cat /data/be >/dev/null; touch /data/done; exec sleep 1000000"]
    c["resources"]["limits"]["memory"] = "400Mi"
    h.apply_obj(pod, NS)
    be = h.wait_running(NS, "be-throttled")
    cg = h.container_cgroup(None, be, "flood")
    want = str(400 * 2**20 * 80 // 100 // 4096 * 4096)
    wait_until("the BE container's memory.high", lambda: h.read(f"{cg}/memory.high") == want, 90, 0.5)
    wait_until("the BE stream to finish", lambda: h.guest(
        f"[ -f {emptydir(be)}/done ] && echo y", check_rc=False).strip() == "y", 600, 1)
    ev = kv(h.read(f"{h.pod_cgroup(None, be)}/memory.events"))
    peak = int(h.read(f"{cg}/memory.peak")) if h.guest(f"[ -e {cg}/memory.peak ] && echo y",
                                                       check_rc=False).strip() == "y" else None
    after = memstat(h, ls_cg)["file"]
    oom = kv(h.guest("grep oom_kill /proc/vmstat")).get("oom_kill", 0) - oom0
    h.delete_pods(NS, "be-throttled", "redis-demo")
    h.figures.append(f"figure BE throttled (throttlingPercent 80 of 400Mi: memory.high {want}): "
                     f"900 MiB streamed, memory.events high {ev.get('high', 0)} max {ev.get('max', 0)}"
                     f" oom_kill {ev.get('oom_kill', 0)}, peak "
                     f"{'n/a' if peak is None else f'{peak >> 20} MiB'}, node OOM kills {oom}; LS file "
                     f"{before >> 20} -> {after >> 20} MiB")
    log(h.figures[-1])
    check(ev.get("high", 0) > 0, f"memory.events high {ev.get('high', 0)}: never throttled")
    check(ev.get("max", 0) == 0 and ev.get("oom_kill", 0) == 0 and oom == 0,
          f"BE reached memory.max or was OOM-killed: {ev}, node OOM kills {oom}")
    check(after >= before * 0.9, f"the LS pod lost its working set: {before >> 20} -> {after >> 20} MiB")
