"""Proactive reclaim with swap on the node: cold anonymous memory goes too.

The node boots without swap (its second disk, /dev/ubdb, is left unformatted). This scenario
formats it, turns it on, and restarts the kubelet with `memorySwap.swapBehavior: LimitedSwap`
(Kubernetes' node swap: the kubelet reads the swap's size when it starts and gives each
Burstable container `memory.swap.max` = its memory request x swap / node memory; BestEffort and
Guaranteed containers get none). Two LS Burstable pods in one namespace touch ANON_MIB of
anonymous memory once and stay idle: `swap-a` not opted in, `swap-b` opted in by its annotation
(CI's short parameters, as the class's in proactive.py). Over WINDOW seconds:

- swap-b's anonymous memory falls by at least half of what the loop may take (`memory.current`
  above its floor, bounded by the kubelet's `memory.swap.max`), and that much is in its
  `memory.swap.current`;
- swap-a (the same pod, not opted in) keeps at least 90% of its anonymous memory: what goes is
  the loop's doing, not the kernel's;
- swap-b never goes below its floor (the annotation's memory.min: the request).

Around it, the protection proof's C0 (protection.py: the reference's ack-slo-config as it
ships, `memory.min` 0, so what keeps the LS working set is the BE-first reclaim and throttle)
with an anonymous flood: the BE pod allocates the node's free memory and page cache but 288 MiB
(anon_flood_mib: sized on the first run, the same on the second), so that without swap the LS
pod's 160 MiB of cache cannot all stay. First before swap is on (the BE-first reclaim finds nothing it
can take: `EAGAIN`), then with swap on and the applier's `--be-swap-percent BE_SWAP_PERCENT`
(the BE container's `memory.swap.max` = that share of its 1600Mi limit, asserted in place through
the flood and put back after): C0 with swap must keep more of the LS working set than without;
how much of the BE pod went to swap (the kernel's choice) is reported beside the kubelet's share.

Whatever happens, the node is put back as it was: pods deleted, the applier's flag removed,
ack-slo-config as it was before, swap off, the kubelet restarted without LimitedSwap.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import protection
from koordtest import published
from koordtest.checks import Check, check, wait_until
from koordtest.harness import log
from koordtest.sampler import Sampler
from proactive import ANNOTATION, INTERVAL_S, MIB, RESULTS_MD, STEP_PERMILL, ls_pod, published_head
from proactive import section, slo_with_class_params, stat_fields

HERE = Path(__file__).resolve().parent
NS = "v2sd-swap"
SWAP_DEV = "/dev/ubdb"
ANON_MIB = 160
REQUEST_MIB = 64
WINDOW = int(os.environ.get("KOORD_V2_PROACTIVE_SWAP_SECONDS", "120"))
SWAP_CONFIG = "memorySwap:\n  swapBehavior: LimitedSwap\n"
BE_SWAP_PERCENT = 50
# The anonymous flood: the node's free memory and all its page cache but this much, so that
# without swap the kernel must drop page cache down to it whichever pages it takes first. The
# node's own file pages (the kubelet's, containerd's and the applier's text, ~230 MiB kept while
# the LS pod lost 96% in a run that left 237 MiB) need their room: a flood leaving 96 MiB
# thrashed them and the LS re-read did not finish in 300 s. Left this much, the LS pod's 160 MiB
# cannot all stay (it keeps at most what the node's own pages leave of it, about a third). Sized on
# the first run and the same on the second. A fixed size fitted in free memory on one node and
# not on another.
ANON_FLOOD_LEAVES_MIB = 288
ANON_FLOOD_MAX_MIB = 1500  # under the BE container's 1600Mi limit
ANON_FLOOD: dict[str, int] = {}
# C0 without swap under the anonymous flood kept less than this share of the LS working set: the
# flood pressed the node (a flood that fits in free memory takes nothing: no comparison).
PRESSED_BELOW = 90
# A flood that did not press is run once more this much larger (both halves then use that size).
RETRY_MORE_MIB = 96
BE_SWAP_FLAG = f"--be-swap-percent={BE_SWAP_PERCENT}"
# The protection proof's BE flood container: its limit, and the grant the flag gives it.
BE_LIMIT = 1600 * MIB
BE_GRANT = BE_LIMIT * BE_SWAP_PERCENT // 100 // 4096 * 4096


def anon_pod(name: str, image: str, opted_in: bool) -> dict:
    run = (f"koord-stress -m 1 --vm-bytes {ANON_MIB}M --vm-hang 1000000 -t 1000000 & "
           f"sleep 5; touch /data/ready; wait")
    notes = {ANNOTATION: json.dumps({"enable": True, "intervalSeconds": INTERVAL_S,
                                     "stepPermill": STEP_PERMILL})} if opted_in else None
    return ls_pod(name, image, run, REQUEST_MIB, notes)


def restart_kubelet(h, config: str) -> None:
    """The kubelet restarted with CONFIG as its configuration file, back and healthy."""
    g = h.node_dir / "guest"
    (g / "kubelet.yaml").write_text(config)
    h.guest(f"{HERE / 'guest' / 'restart-kubelet.sh'} {g}")
    wait_until("the kubelet healthy after its restart", lambda: h.guest(
        "curl -sf http://127.0.0.1:10248/healthz", check_rc=False).strip() == "ok", 120, 1)


def swap_on(h, config: str) -> int:
    """Swap on (the node's second disk) and the kubelet restarted in LimitedSwap with CONFIG
    and the setting; SwapTotal."""
    total = int(h.guest(textwrap.dedent(f"""\
        set -e
        [ -b {SWAP_DEV} ] || {{ echo "no {SWAP_DEV}: the node has no swap disk" >&2; exit 1; }}
        mkswap -f {SWAP_DEV} >/dev/null
        swapon {SWAP_DEV}
        awk '/^SwapTotal:/ {{print $2 * 1024}}' /proc/meminfo
        """)))
    check(total > 0, f"SwapTotal {total} after swapon {SWAP_DEV}")
    restart_kubelet(h, config + SWAP_CONFIG)
    return total


def swap_off(h, config: str) -> None:
    """Whatever swap_on got to: swap off, the kubelet back on CONFIG. A swapoff that fails is
    said (after the kubelet is put back), not hidden."""
    off = h.guest(f"if grep -q '^{SWAP_DEV} ' /proc/swaps; then swapoff {SWAP_DEV}; fi 2>&1; "
                  f"echo rc=$?", timeout=180, check_rc=False).strip()
    restart_kubelet(h, config)
    check(off.endswith("rc=0"), f"swapoff {SWAP_DEV} failed: {off[-300:]}")


class Anon:
    """The two containers' memory, anonymous part and swap, read in one round trip."""

    FILES = ("memory.current", "memory.stat", "memory.swap.current", "memory.swap.max")

    def __init__(self, h, pods: dict[str, dict]) -> None:
        self.h = h
        self.dirs = {k: h.container_cgroup(None, p, "app") for k, p in pods.items()}

    def read(self) -> dict[str, dict[str, int]]:
        got = self.h.read_many([f"{d}/{f}" for d in self.dirs.values() for f in self.FILES])
        out = {}
        for key, d in self.dirs.items():
            cur, st, swap, swap_max = (got[f"{d}/{f}"] for f in self.FILES)
            if None in (cur, st, swap, swap_max):
                raise Check(f"{key}: cgroup files gone under {d}")
            out[key] = {"current": int(cur), "anon": stat_fields(st).get("anon", 0),
                        "swap": int(swap),
                        "swap_max": -1 if swap_max.strip() == "max" else int(swap_max)}
        return out


def meminfo(h) -> dict[str, int]:
    """The guest's /proc/meminfo, MiB."""
    out = {}
    for line in h.guest("cat /proc/meminfo").splitlines():
        k, _, v = line.partition(":")
        out[k] = int(v.split()[0]) >> 10
    return out


def anon_flood_mib(h) -> int:
    """The anonymous flood's size, MiB: free memory and page cache less what it leaves, measured
    the first time."""
    m = meminfo(h)
    log(f"before the anonymous flood: free {m['MemFree']} MiB, available {m['MemAvailable']} MiB, "
        f"file active {m['Active(file)']} inactive {m['Inactive(file)']} MiB, anon "
        f"{m['AnonPages']} MiB, shmem {m['Shmem']} MiB")
    if "mib" not in ANON_FLOOD:
        room = m["MemFree"] + m["Active(file)"] + m["Inactive(file)"]
        ANON_FLOOD["mib"] = min(ANON_FLOOD_MAX_MIB, room - ANON_FLOOD_LEAVES_MIB)
        ANON_FLOOD["room"] = room
    return ANON_FLOOD["mib"]


def run(h) -> None:
    config = (h.node_dir / "guest" / "kubelet.yaml").read_text()
    check("memorySwap" not in config, "the node's kubelet already has a memorySwap setting")
    image = h.env["WORKLOAD_IMAGE"]
    names = ("swap-a", "swap-b")
    h.namespace(NS)
    # The C0 runs set the reference's `enable: true` (memory.min 0): the scenarios after this
    # one (the uninstall's wait for the LS pod's sums) need the cluster's config back.
    got = h.kubectl("-n", "kube-system", "get", "configmap", "ack-slo-config", "-o", "json",
                    check_rc=False)
    slo_before = json.loads(got.stdout).get("data") if got.returncode == 0 else None
    try:
        # C0 with the anonymous flood, without swap: the comparison's first half. Which pages
        # the kernel takes for the flood is its choice: in some runs the node's other page cache
        # went and the LS pod kept all of its own (the same flood, 100% against 13-17% kept).
        # Then once more, RETRY_MORE_MIB larger (the size the run with swap uses too).
        protection.run_config(h, "C0a", anonymous=anon_flood_mib)
        if protection.RESULTS["C0a"]["kept"] >= PRESSED_BELOW:
            log(f"C0a: the {ANON_FLOOD['mib']} MiB flood left the LS pod "
                f"{protection.RESULTS['C0a']['kept']:.0f}% of its working set; once more with "
                f"{RETRY_MORE_MIB} MiB more")
            ANON_FLOOD["mib"] += RETRY_MORE_MIB
            ANON_FLOOD["retried"] = RETRY_MORE_MIB
            protection.run_config(h, "C0a", anonymous=anon_flood_mib)
        protection.set_slo(h, slo_with_class_params())
        total = swap_on(h, config)
        log(f"swap on: {total / MIB:.0f} MiB on {SWAP_DEV}; the kubelet restarted with "
            "LimitedSwap")
        for name in names:
            h.apply_obj(anon_pod(name, image, name == "swap-b"), NS)
        *idle, failed = measure(h, {name[-1]: h.wait_running(NS, name) for name in names}, total)
        h.delete_pods(NS, *names)
        be_swap = protection_with_swap(h)
        failed += be_swap["failed"]
        # Published held or not (what did not hold named in it), then asserted.
        publish(*idle, total, be_swap, failed)
        check(not failed, "; ".join(failed))
    finally:
        h.delete_pods(NS, *names)
        h.delete_pods(protection.NS, "be-flood", "redis-demo")
        h.applier_args(remove=BE_SWAP_FLAG)
        if slo_before is None:
            h.kubectl("-n", "kube-system", "delete", "configmap", "ack-slo-config",
                      "--ignore-not-found")
        else:
            h.apply_obj({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "ack-slo-config", "namespace": "kube-system"},
                         "data": slo_before})
        swap_off(h, config)
        log("swap off; the kubelet restarted without LimitedSwap; ack-slo-config as before")


def measure(h, pods: dict[str, dict], swap_total: int) -> tuple[dict, dict, int, list[str]]:
    """The idle pods' window: their figures and what of its bounds did not hold."""
    for key, pod in pods.items():
        ed = protection.emptydir(pod)
        wait_until(f"swap-{key} warm", lambda ed=ed: h.guest(
            f"[ -f {ed}/ready ] && echo y", check_rc=False).strip() == "y", 300, 1)
    sec = section(h.pod(NS, "swap-b"))
    check(sec.get("enabled") is True, f"swap-b's proactiveReclaim: {sec}")
    floor = sec["containers"]["app"]["floorBytes"]
    cg = Anon(h, pods)
    # In memory or already in swap: the opted-in pod's loop runs from its first interval.
    wait_until(f"both pods holding their {ANON_MIB} MiB of anonymous memory", lambda: all(
        v["anon"] + v["swap"] >= ANON_MIB * MIB * 0.9 for v in cg.read().values()), 120, 2)
    s0 = cg.read()
    for key in "ab":
        check(s0[key]["swap_max"] > 0, f"swap-{key}'s memory.swap.max is "
              f"{s0[key]['swap_max']}: the kubelet's LimitedSwap gave this Burstable pod no swap")
    t0 = time.monotonic()
    samples = Sampler(cg.read, 3.0, t0)
    time.sleep(WINDOW)
    points = samples.stop()
    s1 = cg.read()
    b0, b1, a0, a1 = s0["b"], s1["b"], s0["a"], s1["a"]
    # What the loop may still take at the window's start: above the floor, within the swap the
    # kubelet allows and the pod has not used yet.
    takeable = min(b0["swap_max"] - b0["swap"], b0["current"] - floor)
    went = b0["anon"] - b1["anon"]
    swapped = b1["swap"] - b0["swap"]
    kept_a = a1["anon"] / a0["anon"]
    low = min((v["b"]["current"] for _, v in points), default=b1["current"])
    line = (f"swap-b anonymous {b0['anon'] / MIB:.0f} -> {b1['anon'] / MIB:.0f} MiB "
            f"({100 * went / b0['anon']:.0f}% of it went; swap {b0['swap'] / MIB:.0f} -> "
            f"{b1['swap'] / MIB:.0f} MiB of the kubelet's memory.swap.max "
            f"{b0['swap_max'] / MIB:.0f} MiB; floor {floor / MIB:.0f} MiB, lowest "
            f"{low / MIB:.1f} MiB); swap-a (not opted in) {a0['anon'] / MIB:.0f} -> "
            f"{a1['anon'] / MIB:.0f} MiB, swap {a1['swap'] / MIB:.0f} MiB; node swap "
            f"{swap_total / MIB:.0f} MiB, {WINDOW} s")
    log(line)
    h.figures.append(f"figure proactive reclaim with swap (LimitedSwap): {line}")
    held = [
        (went >= 0.5 * takeable, f"swap-b's anonymous memory fell {went / MIB:.0f} MiB, under "
         f"half of the {takeable / MIB:.0f} MiB the loop may take: {line}"),
        (swapped >= 0.5 * takeable, f"swap-b's memory.swap.current rose "
         f"{swapped / MIB:.0f} MiB: its anonymous memory did not go to swap: {line}"),
        (kept_a >= 0.9, f"swap-a, not opted in, kept {100 * kept_a:.0f}% of its anonymous "
         f"memory: the kernel swapped it, not the loop: {line}"),
        (low >= floor - 2 * MIB, f"swap-b went to {low / MIB:.1f} MiB, below its floor "
         f"{floor / MIB:.0f} MiB"),
    ]
    return s0, s1, floor, [why for ok, why in held if not ok]


class BeSwapWindow:
    """Hooks of protection.run_config for C0 with swap: the BE flood container's grant when the
    flood starts, its swap when the flood is over."""

    def __init__(self) -> None:
        self.cg = ""
        self.swap_max = 0
        self.swap = 0
        self.after = ""

    def start(self, h, ls: dict) -> None:
        pass

    def flood(self, h) -> None:
        be = h.pod(protection.NS, "be-flood")
        self.cg = h.container_cgroup(None, be, "flood")
        try:
            self.swap_max = int(wait_until("the applier's swap grant in the BE container", lambda: (
                lambda v: v if v == str(BE_GRANT) else None)(h.read(f"{self.cg}/memory.swap.max")),
                30, 0.5))
        except Check as e:
            raise Check(f"{e}: memory.swap.max {h.read(f'{self.cg}/memory.swap.max')}, want "
                        f"{BE_GRANT} ({BE_SWAP_PERCENT}% of the 1600Mi limit)") from None

    def finish(self, h) -> None:
        self.swap = int(h.read(f"{self.cg}/memory.swap.current"))
        # The flag removed: the applier that granted it exits and puts the value before back
        # (the kubelet's LimitedSwap share, below the grant).
        h.applier_args(remove=BE_SWAP_FLAG)
        self.after = h.read(f"{self.cg}/memory.swap.max")
        check(self.after.isdigit() and int(self.after) < BE_GRANT, "the BE container's "
              f"memory.swap.max is {self.after} after the applier with the flag exited: the "
              f"grant ({BE_GRANT}) was not put back")


def protection_with_swap(h) -> dict:
    """C0 with the anonymous flood again, swap on and the BE grant; compared with C0a (before
    swap was on)."""
    h.applier_args(add=BE_SWAP_FLAG)
    window = BeSwapWindow()
    protection.run_config(h, "C0as", window, anonymous=anon_flood_mib)
    c0a, c0as = protection.RESULTS["C0a"], protection.RESULTS["C0as"]
    # What the kubelet alone would let the BE pod swap (LimitedSwap: its 64Mi request's share).
    kubelet_share = 64 * MIB * int(h.guest("awk '/^SwapTotal:/ {print $2}' /proc/meminfo")) // int(
        h.guest("awk '/^MemTotal:/ {print $2}' /proc/meminfo"))
    flood = ANON_FLOOD
    line = (f"protection C0, anonymous flood of {flood['mib']} MiB (the node's free "
            f"memory and page cache {flood['room']} MiB less {ANON_FLOOD_LEAVES_MIB}"
            f"{', plus ' + str(flood['retried']) + ' MiB after a first flood that did not press' if flood.get('retried') else ''}"
            f"), with swap (the "
            f"BE container granted {window.swap_max / MIB:.0f} MiB of swap, "
            f"{window.swap / MIB:.0f} MiB used, memory.swap.max {int(window.after) / MIB:.0f} MiB "
            f"once the applier exited; BE-first reclaimed {c0as['be_first_mib']:.0f} MiB): "
            f"LS working set kept {c0as['kept']:.1f}% ({c0as['file_before']} -> "
            f"{c0as['file_after']} MiB) against {c0a['kept']:.1f}% ({c0a['file_before']} -> "
            f"{c0a['file_after']} MiB, BE-first {c0a['be_first_mib']:.0f} MiB) without swap; "
            f"refaults {c0as['refaults']} against {c0a['refaults']}; OOM kills {c0as['oom']} "
            f"against {c0a['oom']}")
    log(line)
    h.figures.append(f"figure {line}")
    # Whether the BE pod's own memory goes to swap is the kernel's choice: with swap on it may
    # swap the node's other cold anonymous memory first, and the flood then fits (runs of the same
    # code: 215 MiB of the BE pod in swap in one, 0 MiB in another). Held: the grant in place
    # through the flood and put back after (BeSwapWindow), the LS pod kept more than without
    # swap; the BE pod's swap beside the kubelet's own share is the figure, printed and published.
    log(f"the BE pod swapped {window.swap / MIB:.0f} MiB (the kubelet's own share "
        f"{kubelet_share / MIB:.0f} MiB)")
    held = [
        # Without swap the flood must have taken from the LS pod, or there is nothing to compare.
        (c0a["kept"] < PRESSED_BELOW, f"C0 without swap kept {c0a['kept']:.1f}% (at least "
         f"{PRESSED_BELOW}%): the flood did not press the node"),
        (c0as["kept"] > c0a["kept"], f"C0 with swap kept no more than without: {line}"),
        (not c0as["oom"], f"{c0as['oom']} OOM kills in C0 with swap"),
        (c0as["released"] is not False, "C0 with swap: the BE throttle was not released with "
         f"free memory back (memory.high {c0as['be_high_after']})"),
    ]
    return {"c0": c0a, "c0s": c0as, "grant": window.swap_max, "used": window.swap,
            "failed": [why for ok, why in held if not ok]}


def publish(s0, s1, floor: int, swap_total: int, be_swap: dict, failed: list[str]) -> None:
    if not published.wanted("KOORD_NODE_V2_PUBLISH"):
        return
    head = published_head(f"the systemd-driver cgroup v2 node with {swap_total / MIB:.0f} MiB "
                          f"of swap, the kubelet in LimitedSwap; {WINDOW} s",
                          "proactive-reclaim-swap")
    if failed:
        head += "\n\n" + textwrap.fill(f"**Not held** in this run: {'; '.join(failed)}.", 100,
                                         break_on_hyphens=False)
    rows = [head, "", "| pod | anonymous MiB | in swap MiB | memory.swap.max MiB "
            "| floor MiB |", "|---|---|---|---|---|"]
    for key, label, fl in (("a", "idle anonymous, A (not opted in)", "—"),
                           ("b", "idle anonymous, **B** (opted in)", f"{floor / MIB:.0f}")):
        b, a = s0[key], s1[key]
        rows.append(f"| {label} | {b['anon'] / MIB:.0f} -> {a['anon'] / MIB:.0f} | "
                    f"{a['swap'] / MIB:.0f} | {b['swap_max'] / MIB:.0f} | {fl} |")
    c0, c0s = be_swap["c0"], be_swap["c0s"]
    rows += ["", "The protection proof's C0 (the reference's `enable: true`, `memory.min` 0) with\n"
             f"a BE pod allocating {ANON_FLOOD.get('mib', 0)} MiB of anonymous memory, "
             f"its free memory and page cache less {ANON_FLOOD_LEAVES_MIB} MiB"
             f"{' (plus ' + str(ANON_FLOOD['retried']) + ' MiB: a first flood did not press)' if ANON_FLOOD.get('retried') else ''}, before "
             f"swap is on\nand with swap on and `--be-swap-percent {BE_SWAP_PERCENT}`:", "",
             "| C0, anonymous flood | LS working set kept | refaults on the LS re-read | BE "
             "`memory.swap.max` | BE in swap | BE-first reclaimed | OOM kills |",
             "|---|---|---|---|---|---|---|"]
    for label, r, grant, used in (("without swap", c0, "—", "—"),
                                  ("**with swap**", c0s, f"{be_swap['grant'] / MIB:.0f} MiB",
                                   f"{be_swap['used'] / MIB:.0f} MiB")):
        rows.append(f"| {label} | {r['kept']:.1f}% ({r['file_before']} -> {r['file_after']} MiB) "
                    f"| {r['refaults']:,} | {grant} | {used} | {r['be_first_mib']:.0f} MiB "
                    f"| {r['oom']} |")
    published.replace_between_markers(RESULTS_MD, "proactive-reclaim-swap", "\n".join(rows))
    log(f"the proactive reclaim swap table written into {RESULTS_MD}")
