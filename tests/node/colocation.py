"""The reference's colocation promise on real pods: an LS NGINX keeps its tail latency while a BE
FFmpeg raises the node's CPU utilisation. Three configurations in turn on the v1 node (the host's
kernel and its two real cores: the v2 node is a one-CPU User-Mode Linux guest whose scheduler
runs inside one host thread, no place to measure a scheduler):

  1  NGINX alone
  2  NGINX and FFmpeg as Kubernetes places them by default: FFmpeg an ordinary Burstable pod in
     a namespace the webhook does not serve (requests 500m, limits 2 CPUs), no product policy
  3  the same two with the product's colocation on as the reference configures it: FFmpeg `BE`
     moved to batch resources, CPU suppression at `cpuSuppressThresholdPercent` 65 with
     Koordinator's default policy, `cpuset` (BE pods get ceil(budget) whole CPUs from the end of
     the list), CPU QoS where the kernel offers it (no group identity on mainline:
     `groupIdentity` -1 with the applier's `--cpu-idle-fallback --cpu-idle-qos-parents`: the BE
     pod and `kubepods/besteffort` SCHED_IDLE cgroups; an idle pod under a normal
     `besteffort` would not yield to NGINX, whose pod is `besteffort`'s sibling)
  1b NGINX alone again after 3: every ratio is to the quieter of 1 and 1b, so a burst on the
     machine during NGINX alone cannot flatter the product (the less flattering reading)

KOORD_NODE_COLOC=full (the default) also measures the steps of 3 on their own (3a batch resources
only, 3b with `cpu.idle`, then 3 with the suppression as well), 60 s each, and publishes the
tables and the plot. KOORD_NODE_COLOC=short is `make test`'s form (tests/suites.sh runs it alone
after the other lanes, on a quiet machine): 1, 2, 3 and 1b, 20 s each, the same assertions and the
goal's bounds with a margin for a shorter window; it publishes nothing.

NGINX is Debian's nginx-light (one worker, a 612-byte page), Guaranteed with 1 CPU, LS; FFmpeg is
Debian's ffmpeg encoding a generated 720p30 picture with libx264 (`-threads 2`) for ever. The load
is Debian's wrk, twelve keep-alive connections with a 1 ms think time each (a closed loop that
cannot outrun the server: what coordinated omission could hide shows as fewer requests, so each
configuration's request rate is printed and compared), pinned at SCHED_FIFO so that it measures
NGINX and not its own waits for a core, to the last CPU: the one Koordinator's `cpuset` policy
leaves BE, so the load generator, which stands for the network, never sits on the LS side's CPU
(on CPU 0 it would push NGINX's worker onto the last CPU, into FFmpeg's caches, and the figures
would measure where wrk sat as much as the product; docs/decisions.md). A window is a run of 2-second wrk slices, each
printing its whole latency histogram: the window's percentiles come from the merged histograms
(exact, not an average of slices) and each slice's p99 is a point of the plot. Per configuration:
P50/P90/P99/P99.9 and max, requests/s, node CPU utilisation (the machine's /proc/stat, wrk
included, and the pods' alone, kubepods' cpuacct), FFmpeg's frames/s; in 3, the LS load step:
NGINX idle with BE on every CPU, then wrk in 1-second slices while the CPUs BE may use are read
at 20 Hz, which gives how long the applier took to cut them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from koordtest import plot, published
from koordtest.checks import check, quantity, wait_until
from koordtest.metrics import counts_percentile
from koordtest.sampler import Sampler
from koordtest.harness import log

REPO = Path(__file__).resolve().parents[2]
RESULTS_MD = REPO / "docs" / "results.md"
BENCHMARKS = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "img" / "colocation.svg"
NS = "node-coloc"  # opted in: NGINX (LS) and, in 3, FFmpeg (BE)
NS_PLAIN = "node-coloc-plain"  # not opted in: FFmpeg in 2, an ordinary pod
NGINX_IMAGE = "localhost/koord-node/nginx:1"
FFMPEG_IMAGE = "localhost/koord-node/ffmpeg:1"
CGROUP = Path("/sys/fs/cgroup")
MODE = os.environ.get("KOORD_NODE_COLOC", "full")
if MODE not in ("full", "short"):
    raise SystemExit(f"KOORD_NODE_COLOC={MODE!r}: allowed values are full and short")
SHORT = MODE == "short"
# One measurement window per configuration, in slices of SLICE seconds (wrk counts whole seconds).
SECONDS = int(os.environ.get("KOORD_NODE_COLOC_SECONDS", "20" if SHORT else "60"))
SLICE = 2
WARMUP = 5
# The LS load step in 3: this long in 1-second slices, the BE CPUs read every STEP_POLL seconds.
STEP = 10
STEP_POLL = 0.05
# The step's load crosses a whole-CPU boundary of BE's budget (node CPUs x SUPPRESS_PERCENT - LS -
# system, rounded up to CPUs) by STEP_MARGIN_MILLI by the cost 1 measured: at 12 connections a
# fast machine uses 0.38 CPUs, 0.08 past the boundary on 2 CPUs, which one 2-s reading can miss.
SUPPRESS_PERCENT = 65
STEP_MARGIN_MILLI = 300
STEP_MAX_CONNECTIONS = 48
THINK_MS = 1
# wrk's CPU, and the one the `cpuset` suppression leaves BE pods (Koordinator takes from the end).
LAST_CPU = (os.cpu_count() or 1) - 1
# Twelve connections: about 10,000 requests/s, NGINX near a quarter of a core and the machine near
# 30% busy with wrk, the reference's baseline (29%); BE's budget at 65% then stays below one CPU.
CONNECTIONS = 12
RESULTS: dict[str, dict] = {}
STEP_RESULT: dict = {}

NGINX_CONF = """worker_processes 1;
pid /tmp/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path /tmp/body;
    proxy_temp_path /tmp/proxy;
    fastcgi_temp_path /tmp/fastcgi;
    uwsgi_temp_path /tmp/uwsgi;
    scgi_temp_path /tmp/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    default_type text/html;
    server {
        listen 8000;
        root /srv;
    }
}
"""
# The size of NGINX's own welcome page.
PAGE = "<!DOCTYPE html>\n<title>nginx</title>\n" + "<p>" + "x" * 560 + "</p>\n"

WRK_SCRIPT = """
function delay()
  return %d
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("KOORD-WRK %%d %%d %%d\\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout))
  -- The whole histogram (microseconds:count), so that slices merge into exact percentiles.
  local parts = {}
  for i = 1, #latency do
    local value, count = latency(i)
    parts[#parts + 1] = value .. ":" .. count
  end
  io.write("KOORD-HIST " .. table.concat(parts, " ") .. "\\n")
end
""" % THINK_MS

FFMPEG_ARGS = ["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-nostats",
               "-progress", "pipe:1", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30",
               "-c:v", "libx264", "-preset", "veryfast", "-threads", "2", "-f", "null", "-"]


def images(h) -> None:
    """NGINX's and FFmpeg's images, as the node's others are made (images/oci.py: the binary and
    exactly the libraries ldd lists), imported into the node's containerd once per run."""
    def build(h) -> bool:
        for tool in ("nginx", "ffmpeg", "wrk", "chrt", "taskset"):
            check(shutil.which(tool), f"{tool} not on PATH (Debian: nginx-light, ffmpeg, wrk)")
        out = h.node_dir / "images"
        out.mkdir(exist_ok=True)
        oci = [os.environ.get("PYTHON", "python3"), str(REPO / "images" / "oci.py")]
        base = ["--text", "/etc/passwd=root:x:0:0:root:/root:/bin/sh\\nnobody:x:65534:65534:"
                "nobody:/:/bin/false\\n", "--text", "/etc/group=root:x:0:\\nnogroup:x:65534:\\n",
                "--dir", "/tmp:1777"]
        with tempfile.TemporaryDirectory() as tmp:
            conf, page = Path(tmp) / "nginx.conf", Path(tmp) / "index.html"
            conf.write_text(NGINX_CONF)
            page.write_text(PAGE)
            nginx = os.path.realpath(shutil.which("nginx"))
            t0 = time.monotonic()
            subprocess.run(oci + ["--name", NGINX_IMAGE, "--out", str(out / "nginx.oci.tar"),
                                  "--add", f"{nginx}:/usr/sbin/nginx:0755", "--with-libs",
                                  "/usr/sbin/nginx", "--add", f"{conf}:/etc/nginx/nginx.conf:0644",
                                  "--add", f"{page}:/srv/index.html:0644", "--dir", "/var/log/nginx",
                                  "--cmd", '["/usr/sbin/nginx", "-g", "daemon off;"]'] + base,
                           check=True, stdout=subprocess.DEVNULL)
            ffmpeg = os.path.realpath(shutil.which("ffmpeg"))
            subprocess.run(oci + ["--name", FFMPEG_IMAGE, "--out", str(out / "ffmpeg.oci.tar"),
                                  "--add", f"{ffmpeg}:/usr/bin/ffmpeg:0755", "--with-libs",
                                  "/usr/bin/ffmpeg", "--cmd", json.dumps(FFMPEG_ARGS)] + base,
                           check=True, stdout=subprocess.DEVNULL)
            built = time.monotonic() - t0
        r = h.node_sh("import", str(h.node_dir), str(out / "nginx.oci.tar"),
                      str(out / "ffmpeg.oci.tar"))
        check(r.returncode == 0, "importing the NGINX and FFmpeg images failed")
        mib = (out / "ffmpeg.oci.tar").stat().st_size / 2**20
        log(f"colocation images built in {built:.0f}s (FFmpeg {mib:.0f} MiB), imported")
        return True
    h.need("coloc_images", build)


def nginx_pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nginx", "namespace": NS,
                         "labels": {"koordinator.sh/qosClass": "LS", "app": "nginx"}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "nginx", "image": NGINX_IMAGE,
                                     "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                                   "limits": {"cpu": "1", "memory": "64Mi"}}}]}}


def ffmpeg_pod(be: bool) -> dict:
    labels = {"app": "ffmpeg"}
    if be:
        labels["koordinator.sh/qosClass"] = "BE"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "ffmpeg", "namespace": NS if be else NS_PLAIN, "labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "ffmpeg", "image": FFMPEG_IMAGE,
                                     "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                                   "limits": {"cpu": "2", "memory": "512Mi"}}}]}}


def slo(h, key: str, value: dict) -> None:
    h.kubectl("-n", "kube-system", "patch", "configmap", "ack-slo-config", "--type=merge", "-p",
              json.dumps({"data": {key: json.dumps(value)}}))


def qos_config(h, be_cpu_idle: bool) -> None:
    """The cluster's resource-qos-config with the BE class's CPU QoS (group identity -1: on a
    kernel without it, the applier's cpu.idle fallback) on or off; memory QoS as it was."""
    cm = h.kjson("-n", "kube-system", "get", "configmap", "ack-slo-config")
    cfg = json.loads(cm["data"]["resource-qos-config"])
    be = cfg.setdefault("clusterStrategy", {}).setdefault("beClass", {})
    if be_cpu_idle:
        be["cpuQOS"] = {"enable": True, "groupIdentity": -1}
    else:
        be.pop("cpuQOS", None)
    slo(h, "resource-qos-config", cfg)


def colocation(h, on: bool) -> None:
    slo(h, "colocation-config", {"enable": on, "cpuReclaimThresholdPercent": 100,
                                 "memoryReclaimThresholdPercent": 65,
                                 "metricAggregateDurationSeconds": 30,
                                 "updateTimeThresholdSeconds": 10, "resourceDiffThreshold": 0.1})


def suppression(h, on: bool) -> None:
    """BE CPU suppression at 65% with Koordinator's default policy, cpuset."""
    slo(h, "resource-threshold-config", {"clusterStrategy": {
        "enable": on, "cpuSuppressThresholdPercent": SUPPRESS_PERCENT,
        "cpuSuppressPolicy": "cpuset"}})


def be_parent() -> dict[str, str]:
    """kubepods/besteffort's CPU knobs: its CPUs, quota and idle flag."""
    return {"cpus": (CGROUP / "cpuset" / "kubepods" / "besteffort" / "cpuset.cpus").read_text().strip(),
            "quota": (CGROUP / "cpu" / "kubepods" / "besteffort" / "cpu.cfs_quota_us").read_text().strip(),
            "idle": (CGROUP / "cpu" / "kubepods" / "besteffort" / "cpu.idle").read_text().strip()}


def be_cpus() -> int:
    """How many CPUs kubepods/besteffort may run on."""
    n = 0
    for part in be_parent()["cpus"].split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1 if a else 0
    return n


def busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the machine, all CPUs."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f[:8]) - idle, sum(f[:8])


def pods_cpu_ns() -> int:
    return int((CGROUP / "cpuacct" / "kubepods" / "cpuacct.usage").read_text())


def ffmpeg_frames(h, pod: dict) -> int:
    """The last `frame=` FFmpeg's -progress printed (every half second)."""
    ns = pod["metadata"]["namespace"]
    out = h.kubectl("-n", ns, "logs", "ffmpeg", "--tail=40").stdout
    frames = re.findall(r"^frame=(\d+)$", out, re.M)
    check(frames, f"FFmpeg printed no progress: {out[-300:]!r}")
    return int(frames[-1])


def wrk_cmd(ip: str, seconds: int, script: Path, connections: int = CONNECTIONS) -> list[str]:
    """wrk on LAST_CPU at SCHED_FIFO 10: `connections` keep-alive connections, THINK_MS between
    requests on each."""
    return ["chrt", "-f", "10", "taskset", "-c", str(LAST_CPU), "wrk", "-t1", f"-c{connections}",
            f"-d{seconds}s", "--timeout", "5s", "-s", str(script), f"http://{ip}:8000/"]


def wrk(ip: str, seconds: int, script: Path, connections: int = CONNECTIONS) -> dict:
    """One wrk run: its requests, duration (us), errors and latency histogram (us -> count)."""
    r = subprocess.run(wrk_cmd(ip, seconds, script, connections), capture_output=True, text=True,
                       timeout=seconds + 60)
    lines = r.stdout.splitlines()
    line = next((l for l in lines if l.startswith("KOORD-WRK ")), None)
    hist = next((l for l in lines if l.startswith("KOORD-HIST")), None)
    check(r.returncode == 0 and line and hist is not None,
          f"wrk: rc {r.returncode}, {r.stdout[-400:]} {r.stderr[-400:]}")
    n, dur_us, errors = (int(x) for x in line.split()[1:])
    counts = Counter()
    for pair in hist.split()[1:]:
        value, _, count = pair.partition(":")
        counts[int(value)] += int(count)
    return {"requests": n, "duration_us": dur_us, "errors": errors, "hist": counts}


def nginx_worker(pod: dict) -> int | None:
    """The PID of NGINX's worker process, from its pod's cgroup."""
    for procs in (CGROUP / "cpu" / "kubepods" / f"pod{pod['metadata']['uid']}").glob("*/cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"nginx: worker"):
                    return int(pid)
            except OSError:
                continue
    return None


def last_cpu(pid: int | None) -> int | None:
    """The CPU `pid` last ran on (/proc/PID/stat's `processor`)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[36])


def sliced(ip: str, seconds: int, slice_s: int, script: Path, t0: float,
           connections: int = CONNECTIONS) -> tuple[dict, list]:
    """wrk in back-to-back slices for `seconds`: the merged run and each slice's
    (midpoint seconds since t0, p99 ms)."""
    total = {"requests": 0, "duration_us": 0, "errors": 0, "hist": Counter()}
    series = []
    done = 0
    while done < seconds:
        start = time.monotonic()
        r = wrk(ip, min(slice_s, seconds - done), script, connections)
        for key in ("requests", "duration_us", "errors"):
            total[key] += r[key]
        total["hist"].update(r["hist"])
        if r["hist"]:
            series.append(((start + time.monotonic()) / 2 - t0, counts_percentile(r["hist"], 99) / 1000))
        done += slice_s
    return total, series


def measure(h, name: str, ffmpeg: dict | None, script: Path, seconds: int) -> dict:
    """One configuration's window: wrk against NGINX in slices while the machine's and the pods'
    CPU and FFmpeg's frames are read at both ends and the BE CPUs all along."""
    nginx = h.wait_running(NS, "nginx")
    ip = nginx["status"]["podIP"]
    wrk(ip, WARMUP, script)  # connections, caches and the suppression loop's view settle
    b0, p0, f0, t0 = busy_ticks(), pods_cpu_ns(), ffmpeg and ffmpeg_frames(h, ffmpeg), time.monotonic()
    parent0 = be_parent()
    worker = nginx_worker(nginx)
    check(worker is not None, "no NGINX worker process in the nginx pod's cgroup")
    sampler = Sampler(lambda: last_cpu(worker), 0.1, t0)
    run, series = sliced(ip, seconds, SLICE, script, t0)
    nginx_cpus = [c for _, c in sampler.stop() if c is not None]
    b1, p1, f1, t1 = busy_ticks(), pods_cpu_ns(), ffmpeg and ffmpeg_frames(h, ffmpeg), time.monotonic()
    hist = run["hist"]
    r = {"requests": run["requests"], "rps": run["requests"] / (run["duration_us"] / 1e6),
         "errors": run["errors"], "p50": counts_percentile(hist, 50), "p90": counts_percentile(hist, 90),
         "p99": counts_percentile(hist, 99), "p999": counts_percentile(hist, 99.9),
         "max": max(hist, default=0)}
    r["node_cpu"] = 100.0 * (b1[0] - b0[0]) / max(1, b1[1] - b0[1])
    r["pods_cpu"] = 100.0 * (p1 - p0) / 1e9 / (t1 - t0) / os.cpu_count()
    r["fps"] = (f1 - f0) / (t1 - t0) if ffmpeg else None
    r["be_parent"] = f"cpus {parent0['cpus']} -> {be_parent()['cpus']}, idle {parent0['idle']}"
    r["nginx_last"] = 100.0 * nginx_cpus.count(LAST_CPU) / max(1, len(nginx_cpus))
    log(f"colocation {name}: {r} (p99 per {SLICE} s: {[round(y, 2) for _, y in series]} ms)")
    r["series"] = series
    RESULTS[name] = r
    check(r["errors"] == 0, f"{name}: {r['errors']} wrk errors")
    return r


def step_connections(ncpus: int, used_milli: float) -> tuple[int, float]:
    """The step's wrk connections, and the LS + system CPU (milli) they should use, from 1's
    cost (`used_milli` at CONNECTIONS): enough to take BE's budget STEP_MARGIN_MILLI below its
    first whole-CPU boundary, CONNECTIONS at least, STEP_MAX_CONNECTIONS at most."""
    boundary = max(0, ncpus * SUPPRESS_PERCENT * 10 - (ncpus - 1) * 1000)
    per = max(used_milli, 1.0) / CONNECTIONS
    want = math.ceil((boundary + STEP_MARGIN_MILLI) / per)
    n = min(max(want, CONNECTIONS), STEP_MAX_CONNECTIONS)
    return n, n * per


def be_budget(h) -> str:
    """The applier's suppression gauges, for a miss's message."""
    try:
        m = h.applier_metrics()
    except Exception as e:  # noqa: BLE001 - a diagnostic only
        return f"applier metrics unreadable: {e}"
    pick = {n: v for (n, _), v in m.items() if n in (
        "koord_applier_be_cpu_limit_cores", "koord_applier_be_cpu_usage_cores", "koord_applier_be_suppressed")}
    return ", ".join(f"{n.removeprefix('koord_applier_')} {v:.3f}" for n, v in sorted(pick.items()))


def load_step(h, script: Path) -> dict:
    """In 3: NGINX idle with the BE pods on every CPU, then wrk in 1-second slices; the BE CPUs
    read every STEP_POLL seconds from a second before. The reaction: from the load's start to
    the first read with a CPU taken from BE (its sampling interval, 2 s, and one pass)."""
    ip = h.wait_running(NS, "nginx")["status"]["podIP"]
    ncpus = os.cpu_count() or 1
    connections, expect = step_connections(ncpus, RESULTS["1"]["node_cpu"] * ncpus * 10)
    wait_until("BE pods on both CPUs with NGINX idle", lambda: be_cpus() == ncpus, 30, 0.2)
    t0 = time.monotonic() + 1.0
    sampler = Sampler(be_cpus, STEP_POLL, t0)
    time.sleep(1.0)
    run, series = sliced(ip, STEP, 1, script, t0, connections)
    cpus = sampler.stop()
    cut = next((t for t, n in cpus if t >= 0 and n < ncpus), None)
    log(f"colocation load step: {connections} connections (LS + system ~{expect:.0f} milli-CPUs "
        f"by 1's cost), p99 per second {[round(y, 2) for _, y in series]} ms, BE CPUs cut at {cut} s")
    check(cut is not None, f"the applier did not take a CPU from the BE pods within {STEP} s of "
          f"the LS load ({connections} connections; {be_budget(h)}; load "
          f"{os.getloadavg()[0]:.1f} on {ncpus} cores)")
    return {"reaction": cut, "series": series, "cpus": cpus, "errors": run["errors"],
            "connections": connections}


def run(h) -> None:
    images(h)
    h.namespace(NS)
    h.namespace(NS_PLAIN, opted_in=False)
    args = h.kjson("-n", "koordinator-system", "get", "daemonset", "koord-applier")["spec"][
        "template"]["spec"]["containers"][0]["args"]
    flags = {"--cpu-idle-fallback", "--cpu-idle-qos-parents", "--be-suppress-min-cpus=0.2"}
    check(flags <= set(args), f"the applier runs without the overlay's colocation flags: {args}")
    seconds = SECONDS
    log(f"colocation: the {MODE} form, {seconds} s per configuration")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "think.lua"
        script.write_text(WRK_SCRIPT)
        try:
            colocation(h, False)
            suppression(h, False)
            qos_config(h, False)
            h.apply_obj(nginx_pod())
            measure(h, "1", None, script, seconds)

            h.apply_obj(ffmpeg_pod(be=False))
            plain = h.wait_running(NS_PLAIN, "ffmpeg")
            wait_until("FFmpeg's first progress", lambda: ffmpeg_frames(h, plain) > 0, 60, 1)
            measure(h, "2", plain, script, seconds)
            h.delete_pods(NS_PLAIN, "ffmpeg")

            colocation(h, True)
            wait_until("batch-cpu on the Node", lambda: quantity(h.kjson(
                "get", "node", h.env["NODE_NAME"])["status"].get("allocatable", {}).get(
                "kubernetes.io/batch-cpu", "0")) >= 500, 120, 2)
            h.apply_obj(ffmpeg_pod(be=True))
            be = h.wait_running(NS, "ffmpeg")
            res = be["spec"]["containers"][0]["resources"]["requests"]
            check("kubernetes.io/batch-cpu" in res and "cpu" not in res,
                  f"FFmpeg BE not moved to batch resources: {res}")
            wait_until("FFmpeg's first progress", lambda: ffmpeg_frames(h, be) > 0, 60, 1)
            if not SHORT:
                measure(h, "3a", be, script, seconds)
            qos_config(h, True)
            idle = CGROUP / "cpu" / "kubepods" / "besteffort" / f"pod{be['metadata']['uid']}" / "cpu.idle"
            wait_until("the BE pod's and besteffort's cgroups SCHED_IDLE (cpu.idle 1)", lambda: (
                idle.read_text().strip() == "1" and be_parent()["idle"] == "1"), 90, 0.5)
            if not SHORT:
                measure(h, "3b", be, script, seconds)
            suppression(h, True)
            STEP_RESULT.update(load_step(h, script))
            measure(h, "3", be, script, seconds)
            # NGINX alone again, the same minutes' machine: the baseline is the quieter of the two.
            h.delete_pods(NS, "ffmpeg")
            measure(h, "1b", None, script, seconds)
        finally:
            h.delete_pods(NS, "ffmpeg", "nginx")
            h.delete_pods(NS_PLAIN, "ffmpeg")
            suppression(h, False)
            colocation(h, False)
            qos_config(h, False)
            # The node as the scenario found it: the BE parent on every CPU, no quota, not idle
            # (a pod started meanwhile would find its own quota refused, held, until the lift).
            wait_until("kubepods/besteffort back to every CPU, no quota, not idle", lambda: (
                be_cpus() == os.cpu_count() and be_parent()["quota"] == "-1"
                and be_parent()["idle"] == "0"), 60, 0.5)
    verdict(h)


# What is asserted (the full form asserts the goal itself; it publishes its figures held or not,
# naming what it did not hold):
# - the direction: 3 removes at least REMOVED of the p99 that FFmpeg adds to NGINX in 2
#   ((p99(2) - p99(3)) / (p99(2) - p99(1)), judged against the machine's own interference);
# - 3's p99 within the bound of 1's at >= GOAL_CPU its node CPU: the goal, GOAL_P99, in the full
#   form; ASSERT_P99 in the short form (20-s windows on a machine just out of the other suites:
#   a window of 1 can be quick, 436 us against 553 us over 60 s), the bound measured over loaded
#   runs of the short form (docs/benchmarks.md, "Colocation latency", gives the spread);
# - the applier cuts BE's CPUs within REACTION_LIMIT of the LS load's start: it samples every
#   2 s and the first sample may straddle the start, so two samples and one pass.
GOAL_P99, GOAL_CPU = 1.10, 1.8
REMOVED = 0.5
ASSERT_P99 = 2.5
P99_BOUND = ASSERT_P99 if SHORT else GOAL_P99
# 2 s samples: 0.4-2.5 s in quiet and warm runs; 6.5 s and a miss in loaded .ci/runs whose
# machine ran the step 0.08 CPUs past the boundary (the step now sizes itself, step_connections).
# The bound is four samples and a pass; the step lasts longer so a late cut is measured.
REACTION_LIMIT = 8.5


def baseline() -> dict:
    """NGINX alone: the run of 1 and 1b (the same pod after 3) with the lower p99. A burst on the
    machine in one window would flatter every ratio to it; the lower is the less flattering."""
    runs = [RESULTS[n] for n in ("1", "1b") if n in RESULTS]
    return min(runs, key=lambda r: r["p99"])


def removed(one: dict, two: dict, three: dict) -> float:
    """The share of FFmpeg's cost to NGINX's p99 (2 over 1) that 3 takes away."""
    return (two["p99"] - three["p99"]) / max(1, two["p99"] - one["p99"])


def goal_ratios(one: dict, three: dict) -> tuple[float, float, str]:
    """The goal's two ratios, judged on the machine's CPU (the less flattering reading), and
    whether they meet it."""
    p99, cpu = three["p99"] / one["p99"], three["node_cpu"] / max(one["node_cpu"], 0.1)
    return p99, cpu, "met" if p99 <= GOAL_P99 and cpu >= GOAL_CPU else "not met"


def goal(one: dict, three: dict) -> str:
    p99, cpu, met = goal_ratios(one, three)
    return (f"goal (p99 within {GOAL_P99:.2f}x of NGINX alone at >= {GOAL_CPU}x its node CPU) {met}: "
            f"p99 {p99:.2f}x at {cpu:.2f}x the node CPU")


def verdict(h) -> None:
    one, two, three = baseline(), RESULTS["2"], RESULTS["3"]
    reaction = STEP_RESULT["reaction"]
    lines = [f"figure colocation, {MODE} form (NGINX LS + FFmpeg on the v1 node, "
             f"{os.cpu_count()} cores; wrk {CONNECTIONS} connections, {THINK_MS} ms think time, "
             f"{SECONDS} s per configuration):",
             "  config | p50 us | p90 us | p99 us | p99.9 us | max us | requests/s | node CPU % "
             f"(pods %) | FFmpeg frames/s | kubepods/besteffort | NGINX's worker on CPU {LAST_CPU} %"]
    for name in ("1", "2", "3a", "3b", "3", "1b"):
        r = RESULTS.get(name)
        if r:
            lines.append(f"  {name} | {r['p50']} | {r['p90']} | {r['p99']} | {r['p999']} | "
                         f"{r['max']} | {r['rps']:.0f} | {r['node_cpu']:.0f} ({r['pods_cpu']:.0f}) | "
                         f"{r['fps'] if r['fps'] is None else round(r['fps'], 1)} | {r['be_parent']} | "
                         f"{r['nginx_last']:.0f}")
    lines.append(f"  {goal(one, three)}; {100 * removed(one, two, three):.0f}% of FFmpeg's p99 "
                 f"cost removed; the applier took a CPU from BE {reaction:.2f} s after the LS "
                 "load started")
    h.figures.append("\n".join(lines))
    log(h.figures[-1])
    p99, cpu, _ = goal_ratios(one, three)
    gone = removed(one, two, three)
    held = [
        (bool(three["fps"] and three["fps"] > 1), f"3: FFmpeg made no progress ({three['fps']} frames/s)"),
        (bool(two["fps"] and two["fps"] > 1), f"2: FFmpeg made no progress ({two['fps']} frames/s)"),
        (two["p99"] > one["p99"] and gone >= REMOVED,
         f"p99: 1 {one['p99']} us, 2 {two['p99']} us, 3 {three['p99']} us: the product's "
         f"configuration removed {100 * gone:.0f}% of what FFmpeg adds, not {100 * REMOVED:.0f}%"),
        (cpu >= GOAL_CPU, f"3's node CPU {three['node_cpu']:.0f}% is {cpu:.2f}x 1's "
         f"{one['node_cpu']:.0f}%, below the goal's {GOAL_CPU}x"),
        (p99 <= P99_BOUND, f"3's p99 {three['p99']} us is {p99:.2f}x 1's {one['p99']} us, "
         f"above the {MODE} form's {P99_BOUND:.2f}x (the goal: {GOAL_P99:.2f}x; load "
         f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"),
        (reaction <= REACTION_LIMIT, f"the applier cut BE's CPUs {reaction:.2f} s after the LS "
         f"load started, later than {REACTION_LIMIT} s (load {os.getloadavg()[0]:.1f} on "
         f"{os.cpu_count()} cores)"),
        (STEP_RESULT["errors"] == 0, f"the load step: {STEP_RESULT['errors']} wrk errors"),
    ]
    failed = [why for ok, why in held if not ok]
    # The full form publishes what it measured whether its bounds held or not, and says which
    # did not: a figure a run could not hold is reported as not held, never left to an older run.
    if not SHORT:
        publish(h, failed)
    check(not failed, "; ".join(failed))


def publish(h, failed: list[str]) -> None:
    """The results page's table (1, 2, 3), benchmarks.md's (every step, every column) and the plot,
    from the full run, with what its verdict did not hold (`failed`, empty when all held). Not
    under CI=true; KOORD_NODE_PUBLISH=0 neither."""
    if not published.wanted("KOORD_NODE_PUBLISH"):
        return
    one, three = baseline(), RESULTS["3"]
    p99, cpu, met = goal_ratios(one, three)
    day = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    verdict_text = ("every bound held" if not failed else
                    f"NOT HELD: {'; '.join(failed)}")
    head = textwrap.fill(
        f"Run of {day} of the full form ({os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}), {verdict_text}. Goal (3's p99 <= {GOAL_P99:.2f}x 1's at >= "
        f"{GOAL_CPU}x its node CPU) {met}: {p99:.2f}x at {cpu:.2f}x; "
        f"{100 * removed(one, RESULTS['2'], three):.0f}% of FFmpeg's p99 cost removed; BE lost a "
        f"CPU {STEP_RESULT['reaction']:.1f} s after the LS load rose:", 100, break_on_hyphens=False)
    names = {"1": "1 NGINX alone", "2": "2 + FFmpeg, Kubernetes' defaults",
             "3a": "3a + FFmpeg BE on batch resources", "3b": "3b as 3a, `cpu.idle`",
             "3": "**3** + FFmpeg BE, the product's colocation", "1b": "1b NGINX alone, after 3"}
    short = [head, "", "| configuration | p50 | p90 | p99 | p99.9 | requests/s | node CPU (pods) | FFmpeg |",
             "|---|---|---|---|---|---|---|---|"]
    full = [head, "", "| configuration | p50 | p90 | p99 | p99.9 | max | requests/s | node CPU (pods) "
            f"| FFmpeg | `kubepods/besteffort` | NGINX on CPU {LAST_CPU} |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in ("1", "2", "3a", "3b", "3", "1b"):
        r = RESULTS.get(n)
        if not r:
            continue
        fps = "—" if r["fps"] is None else f"{r['fps']:.1f} frames/s"
        cells = (f"| {names[n]} | {r['p50']} µs | {r['p90']} µs | {r['p99']} µs | {r['p999']} µs | ")
        cpu = f"{r['node_cpu']:.0f}% ({r['pods_cpu']:.0f}%)"
        if n in ("1", "2", "3", "1b"):
            short.append(f"{cells}{r['rps']:,.0f} | {cpu} | {fps} |")
        full.append(f"{cells}{r['max']} µs | {r['rps']:,.0f} | {cpu} | {fps} | {r['be_parent']} | "
                    f"{r['nginx_last']:.0f}% |")
    short += ["", "![NGINX's p99 per 2 s in each configuration; the LS load step in 3: p99 and the "
              "CPUs BE may use](img/colocation.svg)"]
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    PLOT.write_text(draw(day))
    published.replace_between_markers(RESULTS_MD, "colocation", "\n".join(short))
    published.replace_between_markers(BENCHMARKS, "colocation", "\n".join(full))
    log(f"the colocation tables written into {RESULTS_MD} and {BENCHMARKS}, the plot into {PLOT}")


def draw(day: str) -> str:
    """Three panels from the run's own samples: each configuration's p99 per slice over its
    window; in 3's load step, p99 per second and the CPUs BE may use."""
    names = {"1": "1 alone", "2": "2 defaults", "3a": "3a batch", "3b": "3b cpu.idle",
             "3": "3 colocation", "1b": "1b alone, after 3"}
    windows = {names[n]: RESULTS[n]["series"] for n in names if n in RESULTS}
    step_p99 = {"3: NGINX p99": STEP_RESULT["series"]}
    step_cpus = {"CPUs kubepods/besteffort may use": [(t, float(n)) for t, n in STEP_RESULT["cpus"]]}
    return plot.stack([
        plot.line_chart(windows, f"NGINX p99 per {SLICE} s while wrk runs ({day})",
                        "seconds into the configuration's window", "p99 (ms)"),
        plot.line_chart(step_p99, "The LS load step in 3: NGINX p99 per second",
                        "seconds from the load's start", "p99 (ms)", x_min=-1.0),
        plot.line_chart(step_cpus, "The LS load step in 3: the CPUs BE may use",
                        "seconds from the load's start", "CPUs", x_min=-1.0),
    ])
