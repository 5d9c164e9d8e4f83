#!/usr/bin/env python3
"""Colocation end to end (issue #8): the applier advertises batch resources on its Node.

On the real kube-apiserver: a Node with allocatable cpu/memory, an LS pod and a BE pod bound
to it, `koord-applier run` as the applier's ServiceAccount (the RBAC of manifests/ for real)
with colocation enabled through the cluster ConfigMap. The applier reads a synthetic
--proc-root (node usage fixed: cpu idle, 2 GiB memory used) and an empty cgroup tree (so the
LS pod counts its request as its usage), which makes the expected numbers exact:

    batch-cpu    = 8000m x 60% - 1000m (LS) - 0 (system)               = 3800
    batch-memory = 16Gi x 65% - 1Gi (LS) - (2Gi node - 1Gi pods) system = 9019431321

Then: a BE pod's batch requests pass (and a too-large one fails) the scheduler's fit check
against the Node status (sum of requests of pods bound to the node + the new pod <=
allocatable); a changed threshold moves the Node (ConfigMap watch + diff rule); broken JSON
keeps the last good config and is counted in a metric; `enable: false` sets both to 0.

Used two ways:
  - from suite.py: `colocation_e2e.run(h, suite)` inside a scenario (the suite's harness);
  - standalone: `python3 tests/e2e/colocation_e2e.py` builds, starts its own control plane
    (honours KOORD_E2E_APISERVER_PORT etc.), runs only this scenario and cleans up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

NODE = "e2e-coloc-node"
GI = 2**30
ALLOC_CPU_MILLI = 8000
ALLOC_MEM = 16 * GI
LS_CPU_MILLI, LS_MEM = 1000, GI
NODE_MEM_USED = 2 * GI


def expected(cpu_pct: int, mem_pct: int) -> tuple[int, int]:
    system_mem = max(NODE_MEM_USED - LS_MEM, 0)
    cpu = ALLOC_CPU_MILLI * cpu_pct // 100 - LS_CPU_MILLI - 0
    mem = ALLOC_MEM * mem_pct // 100 - LS_MEM - system_mem
    return max(cpu, 0), max(mem, 0)


def write_proc(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    # Busy time never moves: node CPU usage 0. Two CPUs listed.
    # Shaped like the kernel's: every line a real /proc/stat has, as the parser requires.
    (d / "stat").write_text("cpu  1000 0 1000 100000 0 0 0 0 0 0\n"
                            "cpu0 500 0 500 50000 0 0 0 0 0 0\ncpu1 500 0 500 50000 0 0 0 0 0 0\n"
                            "intr 0\nctxt 1000\nbtime 1700000000\nprocesses 100\n"
                            "procs_running 1\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n")
    total_kb = 64 * GI // 1024
    rest = ("Buffers SwapCached Active Inactive SwapTotal SwapFree Dirty Writeback Mapped Slab "
            "Committed_AS VmallocTotal VmallocUsed VmallocChunk Cached").split()
    (d / "meminfo").write_text(f"MemTotal: {total_kb} kB\nMemFree: 1 kB\n"
                               f"MemAvailable: {total_kb - NODE_MEM_USED // 1024} kB\n"
                               + "".join(f"{k}: 0 kB\n" for k in rest))


def node_batch(h, s) -> tuple[int, int, dict] | None:
    st = h.kjson("get", "node", NODE).get("status", {})
    cap, alloc = st.get("capacity", {}), st.get("allocatable", {})
    if s.BATCH_CPU not in alloc or s.BATCH_MEMORY not in alloc:
        return None
    cpu, mem = int(s.quantity(alloc[s.BATCH_CPU])), int(s.quantity(alloc[s.BATCH_MEMORY]))
    s.check((cap.get(s.BATCH_CPU), cap.get(s.BATCH_MEMORY))
            == (alloc[s.BATCH_CPU], alloc[s.BATCH_MEMORY]),
            f"capacity and allocatable disagree: {cap} vs {alloc}")
    return cpu, mem, st


def fits(h, s, new_requests: dict) -> tuple[bool, str]:
    """The scheduler's NodeResourcesFit arithmetic for the batch resources: for each resource
    the new pod asks for, sum of requests of pods bound to the node + the new pod's <=
    the Node's allocatable."""
    alloc = h.kjson("get", "node", NODE)["status"]["allocatable"]
    pods = h.kjson("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}")["items"]
    why = []
    ok = True
    for res, want in new_requests.items():
        used = 0.0
        for p in pods:
            if p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for c in p["spec"]["containers"]:
                used += s.quantity(c.get("resources", {}).get("requests", {}).get(res, "0"))
        total = used + s.quantity(want)
        cap = s.quantity(alloc.get(res, "0"))
        fit = total <= cap
        why.append(f"{res}: {used:.0f} used + {s.quantity(want):.0f} new "
                   f"{'<=' if fit else '>'} {cap:.0f} allocatable")
        ok &= fit
    return ok, "; ".join(why)


def set_cm(h, s, data: dict) -> None:
    h.kubectl("patch", "configmap", "-n", s.CONFIG_NS, s.CLUSTER_CM, "--type", "merge",
              "-p", json.dumps({"data": data}))


def run(h, s) -> None:
    """The scenario. `h` is suite.Harness (control plane up, manifests applied), `s` the suite
    module (helpers: check, wait_until, pod_manifest, ...)."""
    ds = s.applier_daemonset(h)
    spec = ds["spec"]["template"]["spec"]
    kc = h.impersonating_kubeconfig("applier-colocation", ds["metadata"]["namespace"],
                                    spec.get("serviceAccountName", "default"))
    h.apply({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}})
    h.kubectl("patch", "node", NODE, "--subresource=status", "--type", "merge", "-p", json.dumps(
        {"status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}))
    ns = s.NS_PLAIN  # not opted in: the pods are stored as written
    suffix = str(int(time.time()) % 100000)
    ls_name, be_name = f"coloc-ls-{suffix}", f"coloc-be-{suffix}"
    h.create_pod(s.pod_manifest(ls_name, ns, requests={"cpu": "1", "memory": "1Gi"},
                                limits={"cpu": "2", "memory": "2Gi"},
                                labels={s.QOS_LABEL: "LS"}, node=NODE))
    h.create_pod(s.pod_manifest(be_name, ns,
                                requests={s.BATCH_CPU: "1000", s.BATCH_MEMORY: "1Gi"},
                                limits={s.BATCH_CPU: "1000", s.BATCH_MEMORY: "1Gi"},
                                labels={s.QOS_LABEL: "BE"}, node=NODE))
    root = h.dir / "colocation"
    proc_root, cg_root = root / "proc", root / "cgroup"
    write_proc(proc_root)
    for c in ("cpu", "cpuacct", "cpuset", "memory"):
        (cg_root / c).mkdir(parents=True, exist_ok=True)
    port = s.free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NO_COLOR": "1",
           **s.workload_env(ds),
           "KUBECONFIG": str(kc), "NODE_NAME": NODE,
           "KOORD_CGROUP_ROOT": str(cg_root), "KOORD_CGROUP_VERSION": "v1",
           "KOORD_CGROUP_DRIVER": "cgroupfs", "KOORD_PROC_ROOT": str(proc_root),
           "KOORD_SYS_ROOT": "/sys", "RUST_LOG": "info,koord_applier::colocation=debug",
           "KOORD_METRICS_ADDR": f"127.0.0.1:{port}",
           "KOORD_COLOCATION_SAMPLE_SECONDS": "0.5",
           "KOORD_COLOCATION_REPORT_SECONDS": "1"}
    before = h.kjson("get", "configmap", "-n", s.CONFIG_NS, s.CLUSTER_CM).get("data", {})
    p = h.start_proc("applier-colocation", [h.applier_bin, "run"], env)

    def alive():
        if not p.alive():
            raise s.Check(f"koord-applier exited ({p.popen.returncode}):\n{p.tail()}")

    def wait_batch(what: str, want: tuple[int, int], timeout: float = 30):
        def ok():
            alive()
            b = node_batch(h, s)
            return b if b and b[:2] == want else None
        try:
            return s.wait_until(what, ok, timeout, 0.25)
        except s.Check as e:
            raise s.Check(f"{e}; node has {node_batch(h, s)}, want {want}\n"
                          f"--- applier log ---\n{p.tail()}") from None

    try:
        set_cm(h, s, {"colocation-config": json.dumps({
            "enable": True, "metricAggregateDurationSeconds": 60,
            "updateTimeThresholdSeconds": 300, "resourceDiffThreshold": 0.1})})
        want = expected(60, 65)
        cpu, mem, st = wait_batch("the Node to advertise batch resources", want)
        s.log(f"Node {NODE} status: capacity {st['capacity']}, allocatable {st['allocatable']}")

        ok, why = fits(h, s, {s.BATCH_CPU: "1500", s.BATCH_MEMORY: "2Gi"})
        s.check(ok, f"a BE pod asking for 1500 batch-cpu / 2Gi should fit: {why}")
        s.log(f"fit check (fits): {why}")
        ok, why = fits(h, s, {s.BATCH_CPU: "3000", s.BATCH_MEMORY: "1Gi"})
        s.check(not ok, f"a BE pod asking for 3000 batch-cpu must not fit next to 1000: {why}")
        s.log(f"fit check (does not fit): {why}")

        # A threshold change moves batch-cpu by 21% (> resourceDiffThreshold): patched.
        set_cm(h, s, {"colocation-config": json.dumps({
            "enable": True, "cpuReclaimThresholdPercent": 50,
            "metricAggregateDurationSeconds": 60, "resourceDiffThreshold": 0.1})})
        wait_batch("the Node to follow cpuReclaimThresholdPercent 50", expected(50, 65))

        # Broken JSON: counted, last good config kept (the Node keeps the 50% figure).
        errs = h.metric_sum(port, "koord_applier_colocation_config_errors_total",
                            key="colocation-config")
        set_cm(h, s, {"colocation-config": "{broken"})
        s.wait_until("the config error metric to count the broken JSON",
                     lambda: h.metric_sum(port, "koord_applier_colocation_config_errors_total",
                                          key="colocation-config") > errs, 15, 0.25)
        time.sleep(2)
        b = node_batch(h, s)
        s.check(b is not None and b[:2] == expected(50, 65),
                f"broken JSON must keep the last good config, node has {b}")
        alive()
        patches = h.metric_sum(port, "koord_applier_node_status_patches_total", result="ok")
        s.check(patches >= 2, f"expected at least 2 node status patches, metric says {patches}")

        # Disabled: both resources withdrawn to 0.
        set_cm(h, s, {"colocation-config": json.dumps({"enable": False})})
        wait_batch("the Node's batch resources to fall to 0", (0, 0))
    finally:
        try:
            p.stop()
        finally:
            # Put the cluster ConfigMap back as it was and remove our objects.
            patch = {k: before.get(k) for k in ("colocation-config", "resource-threshold-config")}
            h.kubectl("patch", "configmap", "-n", s.CONFIG_NS, s.CLUSTER_CM, "--type", "merge",
                      "-p", json.dumps({"data": patch}), check_rc=False)
            h.kubectl("delete", "pod", "-n", ns, ls_name, be_name, "--wait=false",
                      check_rc=False)
            h.kubectl("delete", "node", NODE, "--wait=false", check_rc=False)


def main() -> int:
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    import suite as s  # noqa: E402 - the harness and helpers

    h = s.Harness()
    ok = False
    try:
        s.prerequisites(h)
        s.build(h)
        s.start_control_plane(h)
        s.deploy_base(h)
        s.install_base(h)
        s.install_examples(h)
        t0 = time.monotonic()
        run(h, s)
        ok = True
        print(f"PASS colocation ({time.monotonic() - t0:.1f}s)", flush=True)
    except Exception as e:  # noqa: BLE001 - reported, then cleanup
        print(f"FAIL colocation: {e}", flush=True)
    finally:
        h.cleanup(keep=not ok or os.environ.get("KOORD_E2E_KEEP") == "1")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
