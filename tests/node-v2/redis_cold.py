"""A live service's cold part, with swap on the node: Redis whose keys are mostly never read
again gives that memory back, while the GETs on its hot keys keep their tail.

Run inside proactive_swap.py's swap window (swap on, the kubelet in LimitedSwap, the class's
proactive reclaim parameters set and off). Two Redis pods of the same spec, A in NS_A never
opted in, B in NS_B opted in through ack-slo-pod-config once both are loaded. Each holds KEYS
keys of VALUE_BYTES (`SET key:%012d`, through `redis-cli --pipe`); the GET load reads the first
HOT_SHARE of them only (`redis-benchmark -r`), so the rest is cold: written once, never read
again. Over WINDOW seconds, GET rounds in pairs (one of A, one of B, back to back, the order
alternating):

- B's anonymous memory falls by at least COLD_TAKEN of its cold part (the keys the load never
  reads, in bytes: B's anonymous memory loaded less empty, times 1 - HOT_SHARE), and that much
  is in its swap;
- A keeps at least 90% of its anonymous memory (what goes from B is the loop's doing);
- B's GET p99 over A's, the median over the pairs, at most proactive.P99_TOLERANCE (1.10; more
  pairs, up to MAX_ROUNDS, while the median is above it: the bound never moves).

Twice: with the swap disk alone, then with zswap in front of it (the kernel's compressed cache,
on at run time: /sys/module/zswap/parameters/enabled), each with fresh pods. What each costs is
reported beside it: the applier's CPU over the window (a `memory.reclaim` compresses in the
writer's context), and with zswap what it holds of B (memory.stat `zswapped`) against the pool
it takes (`zswap`, charged to B's memory.current). The node's kernel has zswap built in
(zbud, lzo); it is off at boot.
"""

from __future__ import annotations

import os
import textwrap
import time

from koordtest.checks import check, wait_until
from koordtest.harness import log
from koordtest.metrics import paired_ratio_median
from proactive import FORM, MIB, P99_TOLERANCE, ls_pod, patch_pod_config, section, stat_fields

NS_A, NS_B = "v2sd-rcold-a", "v2sd-rcold-b"
# CI's short form: smaller pods (about 115 MiB of keys) and a shorter window; the defaults'
# FULL form about 170 MiB for 300 s. The bounds are the same.
KEYS = {"short": 160_000, "defaults": 240_000}[FORM]
VALUE_BYTES = 512
HOT_SHARE = 0.2
HOT_KEYS = int(KEYS * HOT_SHARE)
# The request sets the floor (the protection config's memory.min = the request) and the
# kubelet's swap share (LimitedSwap: request x swap / node memory): 80 MiB leaves the loop
# room for the cold part above the floor and within the swap share.
REQUEST_MIB = 80
COLD_TAKEN = 0.5
KEPT_A = 0.9
WINDOW = int(os.environ.get("KOORD_V2_REDIS_COLD_SECONDS",
                            {"short": "90", "defaults": "300"}[FORM]))
ROUNDS = 7
MAX_ROUNDS = 21
ZSWAP = "/sys/module/zswap/parameters/enabled"


def redis_pod(image: str) -> dict:
    pod = ls_pod("redis", image, "exec redis-server --port 6379 --save '' --appendonly no "
                 "--protected-mode no", REQUEST_MIB)
    pod["spec"]["volumes"] = []
    del pod["spec"]["containers"][0]["volumeMounts"]
    return pod


def hot_round(h, ip: str) -> float:
    """One round of GETs on the hot keys: its p99, ms."""
    bench = h.guest(f"redis-benchmark -h {ip} -t get -n 15000 -r {HOT_KEYS} -c 8 --csv",
                    timeout=300)
    rows = [line.replace('"', "").split(",") for line in bench.strip().splitlines()]
    head, get = rows[0], next(r for r in rows[1:] if r[0] == "GET")
    return float(dict(zip(head, get))["p99_latency_ms"])


def load(h, ip: str) -> None:
    """KEYS keys of VALUE_BYTES: half of each value from a pool of random hex chunks (what a
    compressor cannot shrink much), half a record-like text (what it can)."""
    half = VALUE_BYTES // 2
    script = textwrap.dedent(f"""\
        BEGIN {{
            srand(7)
            for (c = 0; c < 1024; c++) {{
                s = ""
                for (j = 0; j < {half}; j++) s = s sprintf("%x", int(rand() * 16))
                chunk[c] = s
            }}
            text = ""
            while (length(text) < {half}) text = text "status=active;region=eu-west;tier=gold;"
            text = substr(text, 1, {half})
            for (i = 0; i < {KEYS}; i++)
                printf "SET key:%012d %s%s\\r\\n", i, chunk[i % 1024], text
        }}""")
    out = h.guest(f"awk '{script}' </dev/null | redis-cli -h {ip} --pipe", timeout=300)
    check(f"errors: 0, replies: {KEYS}" in out, f"redis-cli --pipe to {ip}: {out[-300:]}")


class Memory:
    """The two Redis containers' anonymous memory and swap."""

    FILES = ("memory.current", "memory.stat", "memory.swap.current", "memory.swap.max")

    def __init__(self, h, pods: dict[str, dict]) -> None:
        self.h = h
        self.dirs = {k: h.container_cgroup(None, p, "app") for k, p in pods.items()}

    def read(self) -> dict[str, dict[str, int]]:
        got = self.h.read_many([f"{d}/{f}" for d in self.dirs.values() for f in self.FILES])
        out = {}
        for key, d in self.dirs.items():
            cur, st, swap, swap_max = (got[f"{d}/{f}"] for f in self.FILES)
            check(None not in (cur, st, swap, swap_max), f"{key}: cgroup files gone under {d}")
            fields = dict(line.split() for line in st.splitlines() if len(line.split()) == 2)
            out[key] = {"current": int(cur), "anon": stat_fields(st).get("anon", 0),
                        "swap": int(swap), "zswap": int(fields.get("zswap", 0)),
                        "zswapped": int(fields.get("zswapped", 0)),
                        "swap_max": -1 if swap_max.strip() == "max" else int(swap_max)}
        return out


def applier_cpu_us(h) -> int:
    """The applier pod's CPU so far (its pod cgroup's cpu.stat usage_usec)."""
    pod = h.applier_pod()
    st = h.read(f"{h.pod_cgroup(None, pod)}/cpu.stat")
    return int(next(line.split()[1] for line in st.splitlines() if line.startswith("usage_usec")))


def run(h) -> list[dict]:
    """Both passes (swap alone, then zswap in front of it); their figures, each with what of
    its bounds did not hold."""
    results = []
    for zswap in (False, True):
        h.guest(f"echo {'Y' if zswap else 'N'} > {ZSWAP}")
        try:
            results.append(one_pass(h, zswap))
        finally:
            h.guest(f"echo N > {ZSWAP}", check_rc=False)
    return results


def one_pass(h, zswap: bool) -> dict:
    image = h.env["REDIS_IMAGE"]
    for ns in (NS_A, NS_B):
        h.namespace(ns)
        h.apply_obj(redis_pod(image), ns)
    try:
        return measure(h, zswap)
    finally:
        patch_pod_config(h, "proactive-reclaim", None)
        for ns in (NS_A, NS_B):
            h.delete_pods(ns, "redis")


def measure(h, zswap: bool) -> dict:
    pods = {"a": h.wait_running(NS_A, "redis"), "b": h.wait_running(NS_B, "redis")}
    ips = {k: p["status"]["podIP"] for k, p in pods.items()}
    mem = Memory(h, pods)
    empty = mem.read()
    for ip in ips.values():
        load(h, ip)
    for ip in ips.values():
        hot_round(h, ip)  # the hot keys read once before the window
    s0 = mem.read()
    cold = (s0["b"]["anon"] - empty["b"]["anon"]) * (1 - HOT_SHARE)
    cpu0, t0 = applier_cpu_us(h), time.monotonic()
    patch_pod_config(h, "proactive-reclaim", {"enabledNamespaces": [NS_B]})
    wait_until("the re-resolver to turn proactive reclaim on for redis B", lambda: section(
        h.pod(NS_B, "redis")).get("enabled") is True, 90, 1)
    p99: dict[str, list[float]] = {"a": [], "b": []}
    pair = 0
    while pair < ROUNDS or (pair < MAX_ROUNDS
                            and paired_ratio_median(p99["a"], p99["b"])[0] > P99_TOLERANCE):
        for k in ("ab" if pair % 2 == 0 else "ba"):
            p99[k].append(hot_round(h, ips[k]))
        pair += 1
    left = WINDOW - (time.monotonic() - t0)
    if left > 0:
        time.sleep(left)
    s1, cpu1 = mem.read(), applier_cpu_us(h)
    window_s = time.monotonic() - t0
    b0, b1, a0, a1 = s0["b"], s1["b"], s0["a"], s1["a"]
    went, swapped = b0["anon"] - b1["anon"], b1["swap"] - b0["swap"]
    kept_a = a1["anon"] / a0["anon"]
    ratio, ratios = paired_ratio_median(p99["a"], p99["b"])
    cpu_share = (cpu1 - cpu0) / 1e6 / window_s
    # zswap's share of B (memory.stat): what it holds uncompressed, and the pool it takes,
    # charged to B's memory.current.
    stored, pool = b1["zswapped"], b1["zswap"]
    label = "zswap in front of the swap disk" if zswap else "the swap disk alone"
    line = (f"{label}: redis B anonymous {b0['anon'] / MIB:.0f} -> {b1['anon'] / MIB:.0f} MiB "
            f"({went / MIB:.0f} MiB went, {100 * went / cold:.0f}% of its {cold / MIB:.0f} MiB "
            f"cold part; swap {b0['swap'] / MIB:.0f} -> {b1['swap'] / MIB:.0f} MiB of the "
            f"kubelet's {b0['swap_max'] / MIB:.0f} MiB); redis A {a0['anon'] / MIB:.0f} -> "
            f"{a1['anon'] / MIB:.0f} MiB; GET p99 (hot keys) A {p99['a']} B {p99['b']} ms, B/A "
            f"per pair {[round(r, 2) for r in ratios]}, median {ratio:.2f} (bound "
            f"{P99_TOLERANCE}); the applier's CPU {100 * cpu_share:.2f}% of a core over "
            f"{window_s:.0f} s")
    if zswap:
        line += (f"; zswap holds {stored / MIB:.0f} MiB of B in a {pool / MIB:.0f} MiB pool "
                 f"({stored / pool if pool else 0:.1f}x; B's memory.current "
                 f"{b0['current'] / MIB:.0f} -> {b1['current'] / MIB:.0f} MiB, the pool in it)")
    log(line)
    h.figures.append(f"figure proactive reclaim, Redis' cold part ({label}): {line}")
    held = [
        (went >= COLD_TAKEN * cold, f"{label}: redis B's anonymous memory fell {went / MIB:.0f} "
         f"MiB, under {100 * COLD_TAKEN:.0f}% of its {cold / MIB:.0f} MiB cold part: {line}"),
        (swapped >= COLD_TAKEN * cold * 0.9, f"{label}: redis B's swap rose {swapped / MIB:.0f} "
         f"MiB: its cold part did not go to swap: {line}"),
        (kept_a >= KEPT_A, f"{label}: redis A, not opted in, kept {100 * kept_a:.0f}%: {line}"),
        (ratio <= P99_TOLERANCE, f"{label}: redis GET p99 B over A, median {ratio:.2f} over "
         f"{len(ratios)} pairs, above {P99_TOLERANCE}: {line}"),
    ]
    if zswap:
        held.append((stored > 0, f"zswap holds nothing of redis B: {line}"))
    return {"zswap": zswap, "s0": s0, "s1": s1, "cold": cold, "p99": p99, "ratio": ratio,
            "pairs": len(ratios), "cpu_share": cpu_share, "stored": stored, "pool": pool,
            "window_s": window_s, "line": line, "failed": [why for ok, why in held if not ok]}
