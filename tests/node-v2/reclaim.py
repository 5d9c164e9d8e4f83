"""Async reclaim on a mainline kernel: the same stream twice on the cgroup v2 node, once with
`wmarkRatio: 0` (what every mainline node does today: nothing) and once with `wmarkRatio: 95`
(the reference's default, emulated by the applier with `memory.reclaim`).

The container (memory limit LIMIT_MIB) reads a FILE_MIB file of its emptyDir PASSES times in
1 MiB reads at RATE MiB/s (`koord-stream`, timing each read). The file is written by the guest and dropped
from the page cache first, so every read allocates page cache charged to the container. At the
limit that allocation reclaims first, in the reader's context: the pod's `memory.events` `max`
counts those episodes (the pod's limit, the container's plus the sandbox's, is the one met
first; the file counts the container's too), its `memory.pressure` the time its tasks stalled, and the reads'
tail shows them. With the emulation the applier keeps usage below `wmark_high`, so the reads
should not meet the limit.

`memory.stat` `pgscan_direct` is printed too, but it cannot tell the two apart on kernels of
this kind: `memory.reclaim` is counted as direct reclaim there (mm/vmscan.c `reclaimer_offset`
counts every reclaim that is not kswapd's or khugepaged's as direct).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from koordtest import published
from koordtest.checks import check, wait_until
from koordtest.harness import log
from koordtest.metrics import metric_sum
from protection import emptydir

# The table of docs/async-reclaim.md, written by the run that asserted it.
DOC = Path(__file__).resolve().parents[2] / "docs" / "async-reclaim.md"
NS = "v2-reclaim"
LIMIT_MIB = 192
FILE_MIB = 512
PASSES = 4
RATE = 100


def stream_pod(name: str, image: str, wmark_ratio: int) -> dict:
    run = (f"until [ -f /data/go ]; do sleep 0.2; done; "
           f"koord-stream /data/f {FILE_MIB} {PASSES} {RATE} >/data/out 2>&1; touch /data/done; "
           f"exec sleep 1000000")
    qos = json.dumps({"policy": "auto", "wmarkRatio": wmark_ratio})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "LS"},
                         "annotations": {"koordinator.sh/memoryQOS": qos}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "volumes": [{"name": "data", "emptyDir": {}}],
                     "containers": [{"name": "stream", "image": image, "command": ["sh", "-c", run],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                   "limits": {"cpu": "1",
                                                              "memory": f"{LIMIT_MIB}Mi"}}}]}}


def kv(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split()[:2] for line in text.splitlines() if line.strip())}


def psi_some_us(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("some "):
            return int(dict(f.split("=") for f in line.split()[1:])["total"])
    raise AssertionError(f"no 'some' line in memory.pressure: {text!r}")


def counters(h, pod_cg: str, cg: str) -> dict[str, int]:
    ev, st = kv(h.read(f"{pod_cg}/memory.events")), kv(h.read(f"{cg}/memory.stat"))
    return {"max": ev.get("max", 0), "oom_kill": ev.get("oom_kill", 0),
            "pgscan_direct": st.get("pgscan_direct", 0),
            "pgsteal_direct": st.get("pgsteal_direct", 0),
            "psi_some_us": psi_some_us(h.read(f"{cg}/memory.pressure"))}


def one_stream(h, name: str, wmark_ratio: int) -> dict:
    h.apply_obj(stream_pod(name, h.env["WORKLOAD_IMAGE"], wmark_ratio), NS)
    pod = h.wait_running(NS, name)
    cg, pod_cg = h.container_cgroup(None, pod, "stream"), h.pod_cgroup(None, pod)
    ed = emptydir(pod)
    # The values are in place before the stream starts (memory.max is the kubelet's).
    wait_until(f"{name}: the kubelet's memory.max", lambda: h.read(f"{cg}/memory.max")
               == str(LIMIT_MIB * 2**20), 60, 0.5)
    if wmark_ratio:
        wait_until(f"{name}: the applier to emulate async reclaim for it", lambda: metric_sum(
            h.applier_metrics(), "koord_applier_async_reclaim_containers") >= 1, 120, 1)
    h.guest(f"dd if=/dev/zero of={ed}/f bs=1M count={FILE_MIB} 2>/dev/null && sync && "
            f"echo 3 >/proc/sys/vm/drop_caches", timeout=300)
    before = counters(h, pod_cg, cg)
    h.guest(f"touch {ed}/go")
    wait_until(f"{name}: the stream to finish", lambda: h.guest(
        f"[ -f {ed}/done ] && echo y", check_rc=False).strip() == "y", 900, 1)
    after = counters(h, pod_cg, cg)
    out = h.guest(f"cat {ed}/out").split()
    reads = {out[i]: float(out[i + 1]) for i in range(0, len(out) - 1, 2)}
    check("p99_us" in reads, f"{name}: koord-stream printed no figures: {' '.join(out)!r}")
    m = h.applier_metrics()
    got = {k: after[k] - before[k] for k in after}
    got.update(reads)
    got["reclaimed_mib"] = metric_sum(m, "koord_applier_async_reclaim_bytes_total",
                                      pod=name) / 2**20
    got["writes"] = metric_sum(m, "koord_applier_async_reclaim_writes_total", pod=name)
    got["reclaim_s"] = metric_sum(m, "koord_applier_async_reclaim_seconds_total", pod=name)
    got["over_budget"] = metric_sum(m, "koord_applier_async_reclaim_over_budget_total")
    h.delete_pods(NS, name)
    log(f"{name} (wmarkRatio {wmark_ratio}): {got}")
    return got


def text(r: dict) -> str:
    return (f"memory.events max {r['max']}, stalled {r['psi_some_us'] / 1e3:.0f} ms "
            f"(memory.pressure some), reads p50/p99/p99.9 {r['p50_us']:.0f}/{r['p99_us']:.0f}/"
            f"{r['p999_us']:.0f} us, {r['mib_s']:.0f} MiB/s, pgscan_direct {r['pgscan_direct']}")


def async_reclaim(h) -> None:
    h.namespace(NS)
    off = one_stream(h, "stream-off", 0)
    on = one_stream(h, "stream-on", 95)
    h.figures.append(
        f"figure async reclaim on mainline cgroup v2 (limit {LIMIT_MIB} MiB, {PASSES} x {FILE_MIB} "
        f"MiB read in 1 MiB reads at {RATE} MiB/s): wmarkRatio 0: {text(off)}; wmarkRatio 95 (emulated): "
        f"{text(on)}; the applier reclaimed {on['reclaimed_mib']:.0f} MiB in "
        f"{on['writes']:.0f} writes, {on['reclaim_s']:.2f} s in memory.reclaim, "
        f"{on['over_budget']:.0f} deferred by its CPU budget")
    log(h.figures[-1])
    check(off["max"] >= 100, f"without the emulation the stream never met its limit "
          f"(memory.events max {off['max']}): the experiment measures nothing")
    check(off["oom_kill"] == 0 and on["oom_kill"] == 0, f"OOM kills: {off} {on}")
    check(on["reclaimed_mib"] > 0 and on["writes"] > 0,
          f"the applier wrote no memory.reclaim for stream-on: {on}")
    check(on["max"] * 4 <= off["max"], f"with the emulation the stream met its limit "
          f"{on['max']} times against {off['max']} without: not a quarter")
    check(off["reclaimed_mib"] == 0, f"stream-off (wmarkRatio 0) was reclaimed: {off}")
    publish(off, on)


def publish(off: dict, on: dict) -> None:
    """The asserted run's figures into docs/async-reclaim.md between its markers (see
    `published.wanted`)."""
    if not published.wanted("KOORD_NODE_V2_PUBLISH"):
        return
    rows = [f"Written by the run of {datetime.now(timezone.utc):%Y-%m-%d} that asserted it "
            f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; 6.12 kernel, "
            f"`KOORD_NODE_V2_ONLY='^(node:|images:|install:|async reclaim)' tests/node-v2/run`):",
            "", "| `wmarkRatio` | `memory.events` `max` (allocations that met the limit) | "
            "1 MiB reads p50 / p99 / p99.9 | reclaimed by the applier |",
            "|---|---|---|---|"]
    for name, r in (("0 (no async reclaim)", off), ("**95** (emulated)", on)):
        reclaimed = (f"{r['reclaimed_mib']:,.0f} MiB in {r['writes']:.0f} writes, "
                     f"{r['reclaim_s']:.2f} s" if r["writes"] else "—")
        rows.append(f"| {name} | {r['max']:,} | {r['p50_us']:,.0f} / {r['p99_us']:,.0f} / "
                    f"{r['p999_us']:,.0f} µs | {reclaimed} |")
    published.replace_between_markers(DOC, "async-reclaim", "\n".join(rows))
    log(f"the async reclaim table written into {DOC}")
