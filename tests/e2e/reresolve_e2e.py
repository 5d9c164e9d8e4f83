#!/usr/bin/env python3
"""Re-resolution end to end: a ConfigMap edit reaches the running pods (issue #13).

On the real kube-apiserver, with the webhook as its ServiceAccount (so the RBAC of manifests/
is exercised) and registered as the cluster's mutating webhook, so every write of the
re-resolver passes through admission like any other pod UPDATE:

- `flip`: 100 pods; `clusterStrategy.lsClass.memoryQOS.enable` true -> false -> true with two
  replicas running; per pod, the time from the ConfigMap edit until a watch on the pods shows
  the new value (p50, p99, max). Only the Lease holder writes (both replicas' metrics, the
  Events' reportingInstance); SIGKILL of the holder: the other takes over within the lease
  duration and the next flip is its work.
- `down`: a pod created while the webhook is stopped gets its annotation in the first pass
  after the webhook is back.
- `scale`: 1,000 pods re-resolved after one edit with the default rate limits (< 30 s), then
  a policy change that concerns none of them: a full pass that writes nothing (no patch, no
  Event, every resourceVersion unchanged).
- `dry_run`: `--reresolve-dry-run` counts the pods a pass would patch and writes nothing.
- `memory` (KOORD_E2E_MEMORY=1, not in CI: ~6 min): the leader's peak RSS during passes over
  1,000 and 5,000 realistic pods, against a kube reflector holding the same pods
  (`webhook/examples/pod_cache_rss.rs`).

Used from suite.py (`reresolve_e2e.<fn>(h, suite)` inside scenarios); the functions here
reuse the suite's harness.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import time

from koordtest.procs import vm_status
from koordtest.watch import ApiWatch, Endpoint

NS_FLIP = "e2e-flip"
NS_SCALE = "e2e-scale"
NS_MEM = "e2e-mem"
NS_RESIZE = "e2e-resize"
SECOND_ID = "koord-webhook-b"
REASON = "MemoryQOSReresolved"
LEASE = "koord-webhook-reresolver"
LEASE_NS = "koordinator-system"


# ---------------------------------------------------------------------------------------
# Shared steps
# ---------------------------------------------------------------------------------------


def api_conn(h) -> tuple[http.client.HTTPSConnection, dict]:
    """A keep-alive HTTPS connection to the apiserver with the admin token."""
    port = int(h.cp_state()["APISERVER_PORT"])
    token = (h.cp_dir / "token").read_text().strip()
    ctx = ssl.create_default_context(cafile=str(h.cp_dir / "pki" / "apiserver.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=60)
    hdr = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
           "Accept": "application/json"}
    return conn, hdr


def create_pods(h, s, ns: str, pods: list[dict]) -> None:
    """POSTs the pods over one keep-alive connection (kubectl would start a process per pod)."""
    conn, hdr = api_conn(h)
    t0 = time.monotonic()
    for pod in pods:
        conn.request("POST", f"/api/v1/namespaces/{ns}/pods", body=json.dumps(pod), headers=hdr)
        resp = conn.getresponse()
        data = resp.read()
        s.check(resp.status == 201, f"POST pod: HTTP {resp.status}: {data[:300]!r}")
    conn.close()
    s.log(f"created {len(pods)} pods in {ns} in {time.monotonic() - t0:.1f}s")


def delete_pods(h, ns: str) -> None:
    # No kubelet: pods without a node are removed at once; no namespace controller either, so
    # the namespace itself stays (deleting it would leave it Terminating).
    h.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false", timeout=300)


def enabled_of(pod: dict, s) -> bool | None:
    raw = s.annotations(pod).get(s.RESOLVED)
    return json.loads(raw)["memoryQOS"]["enabled"] if raw else None


def pod_watch(h, s, ns: str, timeout_s: int = 300, value_of=None) -> ApiWatch:
    """A watch on a namespace's pods (the apiserver's own event stream, not polling): the
    time each pod was first seen with each value of value_of(pod, s) (default
    memoryQOS.enabled), the latest value and resourceVersion of each."""
    value_of = value_of or enabled_of
    port = int(h.cp_state()["APISERVER_PORT"])
    token = (h.cp_dir / "token").read_text().strip()
    ctx = ssl.create_default_context(cafile=str(h.cp_dir / "pki" / "apiserver.crt"))
    endpoint = Endpoint("127.0.0.1", port, ctx, {"Authorization": f"Bearer {token}",
                                                "Accept": "application/json"})
    return ApiWatch(endpoint, f"/api/v1/namespaces/{ns}/pods", lambda p: value_of(p, s),
                    timeout_s=timeout_s)


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return values[max(0, min(len(values) - 1, int(-(-p * len(values) // 100)) - 1))]


def figure(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": round(pct(values, 50), 2), "p99_s": round(pct(values, 99), 2),
            "max_s": round(values[-1], 2)}


def metric(h, s, port: int, name: str, **labels) -> float:
    return h.metric_sum(port, name, **labels)


def patched(h, s, port: int) -> float:
    return metric(h, s, port, "koord_webhook_reresolve_pods_patched_total", mode="write")


def is_leader(h, s, port: int) -> bool:
    try:
        return metric(h, s, port, "koord_webhook_reresolve_is_leader") == 1
    except OSError:
        return False


def set_ls_enabled(h, s, enabled: bool) -> None:
    s.patch_cm(h, s.CLUSTER_CM, "resource-qos-config",
               s.merged_cluster_config(h, enable=enabled))


def flip_and_measure(h, s, ns: str, names: list[str], enabled: bool, timeout: float,
                     holder_port: int | None = None) -> dict:
    """Edits the ConfigMap and measures, per pod, the time until the watch shows the value;
    then waits for the holder's pass to end (the watch sees a write before the writer has
    counted it)."""
    port = holder_port or h.webhook_metrics_port
    before = passes(h, s, port, "cluster-config")
    watch = pod_watch(h, s, ns)
    try:
        t0 = time.monotonic()  # before kubectl: its start-up counts against us
        set_ls_enabled(h, s, enabled)
        s.wait_until(f"all {len(names)} pods in {ns} to show memoryQOS.enabled={enabled}",
                     lambda: watch.all_are(names, enabled), timeout, 0.05)
        fig = figure(watch.latencies(names, enabled, t0))
    finally:
        watch.stop()
    s.wait_until("the pass to end", lambda: passes(h, s, port, "cluster-config") > before,
                 timeout, 0.1)
    return fig


def reresolved_events(h, ns: str, since: str) -> list[dict]:
    items = h.kjson("get", "events", "-n", ns, "--field-selector", f"reason={REASON}")["items"]
    return [e for e in items if (e.get("eventTime") or e.get("firstTimestamp") or "") >= since]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def passes(h, s, port: int, trigger: str) -> float:
    return metric(h, s, port, "koord_webhook_reresolve_passes_total", trigger=trigger,
                  outcome="completed")


def opt_in_with_pods(h, s, ns: str, pods: list[dict]) -> None:
    """Creates the opted-in namespace and its pods, and waits for the pass its opt-in
    triggers, so a measurement that follows starts from a re-resolver at rest (not inside the
    debounce window of that pass)."""
    port = h.webhook_metrics_port
    s.wait_until("replica a to hold the Lease", lambda: is_leader(h, s, port), 30, 0.1)
    before = passes(h, s, port, "namespace-opt-in")
    h.namespace(ns, True)
    create_pods(h, s, ns, pods)
    s.wait_until(f"the pass for {ns} opting in",
                 lambda: passes(h, s, port, "namespace-opt-in") > before, 30, 0.1)


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------


def down(h, s) -> None:
    """A pod created while no webhook answers gets label + annotation in the first pass after
    the webhook is back (the pass a new Lease holder runs)."""
    fp = h.mwc["webhooks"][0].get("failurePolicy")
    s.check(fp == "Ignore", f"rendered failurePolicy is {fp!r}, not Ignore")
    h.procs["webhook"].stop()  # SIGTERM: the Lease is handed back
    t0 = time.monotonic()
    pod = h.create_pod(s.burstable("while-down"))
    s.log(f"pod created in {time.monotonic() - t0:.2f}s with the webhook down")
    s.check(s.RESOLVED not in s.annotations(pod), "mutated while the webhook was down?")
    s.check(s.QOS_LABEL not in s.labels(pod), "labelled while the webhook was down?")
    t_start = time.monotonic()
    s.start_webhook(h)
    port = h.webhook_metrics_port

    def resolved_now():
        p = h.get_pod(s.NS_QOS, "while-down")
        return p if s.RESOLVED in s.annotations(p) else None

    pod = s.wait_until("while-down to be re-resolved", resolved_now, 60, 0.2)
    took = time.monotonic() - t_start
    rq = s.resolved(pod)
    s.check(s.labels(pod).get(s.QOS_LABEL) == "LS" and rq["qosClassSource"] == "kubernetes-qos",
            f"label {s.labels(pod)}, resolved {rq}")

    def elected_passes() -> float:
        return metric(h, s, port, "koord_webhook_reresolve_passes_total", trigger="elected",
                      outcome="completed")

    # The pod is patched during the pass; the pass is counted when it has walked every pod.
    s.wait_until("the elected pass to be counted", elected_passes, 30, 0.1)
    passes = metric(h, s, port, "koord_webhook_reresolve_passes_total", outcome="completed")
    elected = elected_passes()
    s.check(elected == 1, f"elected passes {elected}, all passes {passes}: expected the first")
    # Its write went through admission as an UPDATE, which kept it (one engine, one answer).
    creates = metric(h, s, port, "koord_webhook_admissions_total", operation="CREATE")
    s.check(creates == 0, f"the restarted webhook counts {creates} CREATE admissions")
    kept = metric(h, s, port, "koord_webhook_admissions_total", operation="UPDATE",
                  outcome="unchanged")
    s.check(kept >= 1, "admission did not see the re-resolver's write")
    mutated = metric(h, s, port, "koord_webhook_admissions_total", operation="UPDATE",
                     outcome="mutated")
    s.check(mutated == 0, f"admission changed the re-resolver's write ({mutated} times)")

    def event():
        d = h.kubectl("describe", "pod", "-n", s.NS_QOS, "while-down").stdout
        return d if REASON in d else None

    desc = s.wait_until("the MemoryQOSReresolved Event", event, 30, 0.5)
    events = desc[desc.index("Events:"):]
    s.log("kubectl describe pod while-down:\n" + events)
    s.check("admitted while the webhook was unavailable" in events, events)
    h.figures["reresolve_down_s"] = round(took, 2)
    s.log(f"while-down re-resolved {took:.1f}s after the webhook was started")
    pod = h.create_pod(s.burstable("after-restart"))
    s.check(s.labels(pod).get(s.QOS_LABEL) == "LS" and s.RESOLVED in s.annotations(pod),
            "not mutated after the webhook restart")


def flip(h, s) -> None:
    """100 pods, two replicas, true -> false -> true; kill the holder; false -> true by the
    other one."""
    names = [f"flip-{i:03d}" for i in range(100)]
    try:
        flip_with_two_replicas(h, s, names)
    finally:
        delete_pods(h, NS_FLIP)


def flip_with_two_replicas(h, s, names: list[str]) -> None:
    opt_in_with_pods(h, s, NS_FLIP, [s.burstable(n, NS_FLIP) for n in names])
    a_port = h.webhook_metrics_port
    s.wait_until("replica a to hold the Lease", lambda: is_leader(h, s, a_port), 30, 0.2)
    b_ports = (s.free_port(), s.free_port())
    s.start_webhook(h, "webhook-b", SECOND_ID, b_ports)
    b_port = b_ports[1]
    lease = h.kjson("get", "lease", "-n", LEASE_NS, LEASE)["spec"]
    s.check(lease.get("holderIdentity") == s.WEBHOOK_ID, f"Lease: {lease}")
    s.check(not is_leader(h, s, b_port), "both replicas claim the Lease")
    try:
        figures = {}
        since = utc_now()
        before = (patched(h, s, a_port), patched(h, s, b_port))
        for target in (False, True):
            fig = flip_and_measure(h, s, NS_FLIP, names, target, 60)
            figures[f"{'true->false' if not target else 'false->true'}"] = fig
            s.log(f"flip to enable={target}: {fig}")
        after = (patched(h, s, a_port), patched(h, s, b_port))
        s.check(after[0] - before[0] >= 200, f"holder a patched {after[0] - before[0]} (< 200)")
        s.check(after[1] == before[1], f"replica b patched {after[1] - before[1]} pods too")
        s.check(metric(h, s, b_port, "koord_webhook_reresolve_pods_checked_total") == 0,
                "replica b ran a pass")
        s.wait_until("200 MemoryQOSReresolved Events",
                     lambda: len(reresolved_events(h, NS_FLIP, since)) >= 200, 60, 0.5)
        instances = {e.get("reportingInstance") for e in reresolved_events(h, NS_FLIP, since)}
        s.check(instances == {s.WEBHOOK_ID}, f"Events reported by {instances}")

        # SIGKILL the holder: no release; the other waits out the lease duration.
        lease = h.kjson("get", "lease", "-n", LEASE_NS, LEASE)["spec"]
        duration = lease["leaseDurationSeconds"]
        a = h.procs["webhook"]
        t_kill = time.monotonic()
        assert a.popen is not None
        a.popen.send_signal(signal.SIGKILL)
        a.popen.wait(10)
        s.wait_until("replica b to take the Lease over", lambda: is_leader(h, s, b_port),
                     duration + 15, 0.1)
        takeover = time.monotonic() - t_kill
        s.log(f"takeover {takeover:.1f}s after SIGKILL of the holder (lease duration {duration}s)")
        # b takes over once the record it last saw has not changed for the lease duration. It
        # first sees a's last renewal up to one retry period (2 s) late and then looks again
        # right at the expiry, so the bound is duration + one period, plus the write and this
        # poll of b's metrics: 15.5 s measured with a 15 s lease; bound duration + two periods
        # + 1 s for a loaded machine.
        s.check(takeover <= duration + 5, f"takeover took {takeover:.1f}s (lease {duration}s; "
                f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        lease = h.kjson("get", "lease", "-n", LEASE_NS, LEASE)["spec"]
        s.check(lease.get("holderIdentity") == SECOND_ID and lease.get("leaseTransitions", 0) >= 1,
                f"Lease after takeover: {lease}")
        s.start_webhook(h)  # a comes back as the follower; admission is served again
        s.check(not is_leader(h, s, a_port), "the restarted replica took the Lease back")
        # b's first pass as the holder (everything) runs after the debounce; measure after it.
        s.wait_until("b's pass on taking the Lease", lambda: metric(
            h, s, b_port, "koord_webhook_reresolve_passes_total", trigger="elected",
            outcome="completed") >= 1, 30, 0.1)

        since = utc_now()
        before = (patched(h, s, a_port), patched(h, s, b_port))
        fig = flip_and_measure(h, s, NS_FLIP, names, False, 60, b_port)
        figures["true->false after takeover"] = fig
        s.log(f"flip to enable=False by the new holder: {fig}")
        after = (patched(h, s, a_port), patched(h, s, b_port))
        s.check(after[1] - before[1] >= 100 and after[0] == before[0],
                f"patched by a {after[0] - before[0]}, by b {after[1] - before[1]}")
        s.wait_until("100 more Events", lambda: len(reresolved_events(h, NS_FLIP, since)) >= 100,
                     60, 0.5)
        instances = {e.get("reportingInstance") for e in reresolved_events(h, NS_FLIP, since)}
        s.check(instances == {SECOND_ID}, f"Events after the takeover reported by {instances}")
        fig = flip_and_measure(h, s, NS_FLIP, names, True, 60, b_port)
        figures["false->true after takeover"] = fig
        h.figures["reresolve_flip"] = figures

        def described():
            d = h.kubectl("describe", "pod", "-n", NS_FLIP, names[0]).stdout
            return d if d.count(REASON) >= 4 else None

        desc = s.wait_until("four MemoryQOSReresolved Events on one pod", described, 30, 0.5)
        s.log(f"kubectl describe pod {names[0]} (Events):\n" + desc[desc.index("Events:"):])
        h.figures["reresolve_takeover_s"] = round(takeover, 1)
    finally:
        b = h.procs.get("webhook-b")
        if b:
            b.stop()  # SIGTERM: hands the Lease back to a at once
        s.restore_configmaps(h)
    s.wait_until("replica a to hold the Lease again", lambda: is_leader(h, s, a_port), 10, 0.1)


def scale(h, s) -> None:
    """1,000 pods after one ConfigMap edit with the default limits, then a pass that writes
    nothing."""
    n = int(os.environ.get("KOORD_E2E_SCALE_PODS", "1000"))
    names = [f"scale-{i:04d}" for i in range(n)]
    port = h.webhook_metrics_port
    try:
        opt_in_with_pods(h, s, NS_SCALE, [s.burstable(x, NS_SCALE) for x in names])
        fig = flip_and_measure(h, s, NS_SCALE, names, False, 120)
        s.log(f"{n} pods re-resolved after one edit: {fig}")
        h.figures["reresolve_scale"] = fig
        s.check(fig["max_s"] < 30, f"{n} pods took {fig['max_s']}s (goal < 30 s)")

        # Every patched pod queues one Event, posted at the same pace: let them all leave.
        def events_done():
            return (metric(h, s, port, "koord_webhook_reresolve_events_total")
                    >= patched(h, s, port))
        s.wait_until("the Events of the pass to be posted", events_done, 60, 0.5)

        # A policy change that concerns none of these pods: a full pass, zero writes.
        watch = pod_watch(h, s, NS_SCALE, 60)
        try:
            rvs = dict(watch.rvs)
            m0 = h.metrics(port)

            def val(m, name, **labels):
                return sum(v for (k, labs), v in m.items()
                           if k == name and all((a, b) in labs for a, b in labels.items()))

            passes0 = val(m0, "koord_webhook_reresolve_passes_total", trigger="cluster-config",
                          outcome="completed")
            cfg = json.loads(s.merged_cluster_config(h, enable=False))
            cfg["clusterStrategy"].setdefault("systemClass", {})["memoryQOS"] = {
                "enable": True, "wmarkRatio": 90}
            s.patch_cm(h, s.CLUSTER_CM, "resource-qos-config", json.dumps(cfg))
            s.wait_until("the pass after the systemClass edit",
                         lambda: metric(h, s, port, "koord_webhook_reresolve_passes_total",
                                        trigger="cluster-config", outcome="completed") > passes0,
                         60, 0.2)
            time.sleep(2)  # Events trail their patches: give any a chance to show
            m1 = h.metrics(port)
            checked = (val(m1, "koord_webhook_reresolve_pods_checked_total")
                       - val(m0, "koord_webhook_reresolve_pods_checked_total"))
            wrote = (val(m1, "koord_webhook_reresolve_pods_patched_total")
                     - val(m0, "koord_webhook_reresolve_pods_patched_total"))
            events = (val(m1, "koord_webhook_reresolve_events_total")
                      - val(m0, "koord_webhook_reresolve_events_total"))
            s.check(checked >= n, f"the pass checked {checked} pods (< {n})")
            s.check(wrote == 0 and events == 0, f"an unchanged pass wrote {wrote} patches, "
                    f"{events} Events")
            with watch.cv:
                moved = [x for x in names if watch.rvs.get(x) != rvs.get(x)]
            s.check(not moved, f"{len(moved)} pods changed resourceVersion: {moved[:5]}")
            s.log(f"unchanged pass: {int(checked)} pods checked, 0 patches, 0 Events, "
                  "no resourceVersion moved")
        finally:
            watch.stop()
    finally:
        delete_pods(h, NS_SCALE)
        s.restore_configmaps(h)


def dry_run(h, s) -> None:
    """`--reresolve-dry-run`: a pass that would change pods counts them and writes nothing."""
    port = h.webhook_metrics_port
    h.procs["webhook"].stop()
    try:
        s.start_webhook(h, extra_env={"KOORD_RERESOLVE_DRY_RUN": "true"})
        s.wait_until("the dry-run replica to hold the Lease", lambda: is_leader(h, s, port),
                     30, 0.1)
        s.wait_until("its first pass", lambda: passes(h, s, port, "elected") >= 1, 30, 0.1)
        before = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                  for p in h.kjson("get", "pods", "-n", s.NS_QOS)["items"]}
        n_before = passes(h, s, port, "cluster-config")
        set_ls_enabled(h, s, False)
        s.wait_until("the dry-run pass", lambda: passes(h, s, port, "cluster-config") > n_before,
                     30, 0.1)
        would = metric(h, s, port, "koord_webhook_reresolve_pods_patched_total", mode="dry-run")
        wrote = patched(h, s, port)
        events = metric(h, s, port, "koord_webhook_reresolve_events_total")
        after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                 for p in h.kjson("get", "pods", "-n", s.NS_QOS)["items"]}
        s.check(would >= 1, f"dry run counted {would} pods to patch")
        s.check(wrote == 0 and events == 0, f"dry run wrote {wrote} patches, {events} Events")
        s.check(after == before, "pods changed in a dry run: "
                f"{sorted(k for k in after if after[k] != before.get(k))[:5]}")
        s.log(f"dry run: {int(would)} pods would be patched, none was")
    finally:
        s.restore_configmaps(h)
        h.procs["webhook"].stop()
        s.start_webhook(h)


def pod_min_of(pod: dict, s) -> int | None:
    raw = s.annotations(pod).get(s.RESOLVED)
    return json.loads(raw)["memoryQOS"]["pod"]["memory.min"] if raw else None


def allocated_status(s, memory_request: str, memory_limit: str) -> dict:
    """The container status a kubelet posts once it has allocated (and actuated) a size."""
    return {"containerStatuses": [{
        "name": "app", "image": s.PAUSE, "imageID": "", "ready": True, "restartCount": 0,
        "started": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        "allocatedResources": {"cpu": "100m", "memory": memory_request},
        "resources": {"requests": {"cpu": "100m", "memory": memory_request},
                      "limits": {"memory": memory_limit}}}]}


def patch_many(h, s, ns: str, names: list[str], sub: str, body: dict) -> None:
    """One PATCH per pod to the subresource `sub` over one keep-alive connection: strategic
    (containers merge by name; `resize` forbids touching anything but their cpu/memory), a
    plain merge for `status` (the list of container statuses is replaced, as a kubelet does)."""
    conn, hdr = api_conn(h)
    kind = "merge" if sub == "status" else "strategic-merge"
    hdr = {**hdr, "Content-Type": f"application/{kind}-patch+json"}
    for n in names:
        conn.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{n}/{sub}", body=json.dumps(body),
                     headers=hdr)
        resp = conn.getresponse()
        data = resp.read()
        s.check(resp.status == 200, f"PATCH {n}/{sub}: HTTP {resp.status}: {data[:400]!r}")
    conn.close()


def resize(h, s) -> None:
    """20 running pods resized in place, memory up then down (and CPU only), on the real
    kube-apiserver through `pods/resize`. The test stands in for the kubelet (no kubelet
    here): right after each resize it posts the allocated size in
    `status.containerStatuses[].resources`, as a kubelet does once it has actuated it. Measured
    per pod: the resize request to the annotation's new memory.min, seen by a watch."""
    mib = 2**20
    names = [f"resize-{i:02d}" for i in range(20)]
    port = h.webhook_metrics_port

    def pod(n: str) -> dict:
        p = s.pod_manifest(n, NS_RESIZE, requests={"cpu": "100m", "memory": "64Mi"},
                           limits={"memory": "256Mi"}, node=s.NODE)
        p["spec"]["containers"][0]["resizePolicy"] = [
            {"resourceName": "memory", "restartPolicy": "NotRequired"},
            {"resourceName": "cpu", "restartPolicy": "NotRequired"}]
        return p
    # The resize admission checks the pod's node (it must exist to fit the new size).
    h.apply({"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": s.NODE, "labels": {"kubernetes.io/hostname": s.NODE}}})
    size = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    h.kubectl("patch", "node", s.NODE, "--subresource", "status", "--type", "merge", "-p",
              json.dumps({"status": {"capacity": size, "allocatable": size}}))
    try:
        s.patch_cm(h, s.CLUSTER_CM, "resource-qos-config",
                   s.merged_cluster_config(h, enable=True, minLimitPercent=100))
        s.wait_until("replica a to hold the Lease", lambda: is_leader(h, s, port), 30, 0.1)
        opt_in_with_pods(h, s, NS_RESIZE, [pod(n) for n in names])
        patch_many(h, s, NS_RESIZE, names, "status", {"status": allocated_status(s, "64Mi", "256Mi")})
        items = h.kjson("get", "pods", "-n", NS_RESIZE)["items"]
        got = {p["metadata"]["name"]: pod_min_of(p, s) for p in items}
        s.check(all(got[n] == 64 * mib for n in names), f"before: pod memory.min {got}")
        figures = {}
        previous = 64 * mib
        for step, (req, lim) in (("up", ("128Mi", "256Mi")), ("down", ("32Mi", "256Mi"))):
            want = int(req[:-2]) * mib
            resized0 = metric(h, s, port, "koord_webhook_reresolve_pods_resized_total")
            watch = pod_watch(h, s, NS_RESIZE, 120, pod_min_of)
            try:
                t0 = time.monotonic()
                patch_many(h, s, NS_RESIZE, names, "resize", {"spec": {"containers": [
                    {"name": "app", "resources": {"requests": {"cpu": "100m", "memory": req},
                                                  "limits": {"memory": lim}}}]}})
                # Before the kubelet allocates it, a resize changes nothing.
                time.sleep(1)
                with watch.cv:
                    early = [n for n in names if watch.latest.get(n) != previous]
                s.check(not early, f"annotation moved before the allocation: {early[:5]}")
                t_alloc = time.monotonic()
                patch_many(h, s, NS_RESIZE, names, "status", {"status": allocated_status(s, req, lim)})
                s.wait_until(f"all 20 pods to show memory.min {req} ({step})",
                             lambda: all(watch.latest.get(n) == want for n in names), 60, 0.05)
                fig = figure(watch.latencies(names, want, t_alloc))
            finally:
                watch.stop()
            s.check(metric(h, s, port, "koord_webhook_reresolve_pods_resized_total")
                    - resized0 >= len(names), "pods_resized_total did not count the 20 pods")
            s.log(f"resize {step} to {req}: allocation -> annotation {fig} "
                  f"(the resize requests took {t_alloc - t0 - 1:.2f}s)")
            figures[step] = fig
            previous = want
        # CPU only: the allocated memory is unchanged, so no pod is planned or written.
        watch = pod_watch(h, s, NS_RESIZE, 30, pod_min_of)
        try:
            patched0 = patched(h, s, port)
            patch_many(h, s, NS_RESIZE, names[:5], "resize", {"spec": {"containers": [
                {"name": "app", "resources": {"requests": {"cpu": "200m"}}}]}})
            time.sleep(3)
            s.check(patched(h, s, port) == patched0, "a CPU-only resize patched pods")
            with watch.cv:
                moved = [n for n in names[:5] if watch.latest.get(n) != 32 * mib]
            s.check(not moved, f"memory.min changed on a CPU-only resize: {moved}")
        finally:
            watch.stop()
        h.figures["resize"] = figures
        # kubectl describe names the resize in the Event.
        ev = [e for e in h.kjson("get", "events", "-n", NS_RESIZE)["items"]
              if "in-place resize" in e.get("message", "")]
        s.check(len(ev) >= 1, "no Event names the in-place resize")
    finally:
        # Bound to a node without a kubelet: only a forced delete removes them (else they stay
        # Terminating and the applier scenario's node would see them).
        h.kubectl("delete", "pods", "--all", "-n", NS_RESIZE, "--force", "--grace-period=0",
                  "--wait=false", timeout=120)
        s.restore_configmaps(h)


def realistic_pod(s, name: str, ns: str) -> dict:
    """A pod the size of a typical Deployment pod (~4 KB stored, two containers, env, mounts,
    probes), so list pages and cached objects weigh what they do in a real cluster."""
    env = [{"name": f"APP_SETTING_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(12)]
    mounts = [{"name": f"vol-{i}", "mountPath": f"/etc/app/config-{i}"} for i in range(4)]
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    container = {"name": "app", "image": "registry.example/app:1.2.3", "env": env,
                 "volumeMounts": mounts, "readinessProbe": probe, "livenessProbe": probe,
                 "ports": [{"containerPort": 8080, "name": "http"}],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                               "limits": {"memory": "512Mi"}}}
    sidecar = {"name": "proxy", "image": "registry.example/proxy:4.5.6",
               "args": ["--listen=:15001", "--upstream=127.0.0.1:8080", "--log-level=info"],
               "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                             "limits": {"memory": "128Mi"}}}
    volumes = [{"name": f"vol-{i}", "configMap": {"name": f"app-config-{i}"}} for i in range(4)]
    labels = {"app.kubernetes.io/name": "app", "app.kubernetes.io/instance": "app-prod",
              "pod-template-hash": "6d9f8b7c5d", "team": "payments"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels,
                         "annotations": {"prometheus.io/scrape": "true",
                                         "prometheus.io/port": "8080"}},
            "spec": {"containers": [container, sidecar], "volumes": volumes,
                     "terminationGracePeriodSeconds": 30}}


def pod_cache_example(h, s) -> str:
    """Builds webhook/examples/pod_cache_rss.rs with the suite's profile."""
    profile = os.environ.get("KOORD_E2E_PROFILE", "debug")
    argv = ["cargo", "build", "-p", "koord-webhook", "--example", "pod_cache_rss"]
    if profile == "release":
        argv.append("--release")
    r = subprocess.run(argv, cwd=s.REPO, capture_output=True, text=True)
    s.check(r.returncode == 0, f"{' '.join(argv)} failed: {r.stderr[-800:]}")
    target = os.environ.get("CARGO_TARGET_DIR", str(s.REPO / "target"))
    return f"{target}/{profile}/examples/pod_cache_rss"


def memory(h, s) -> None:
    """Peak RSS of the holder during passes over 1,000 and 5,000 pods (paginated lists), and of
    a kube reflector holding the same pods."""
    h.namespace(NS_MEM, True)
    port = h.webhook_metrics_port
    example = pod_cache_example(h, s)
    results = {}
    created = 0
    try:
        for total in (1000, 5000):
            create_pods(h, s, NS_MEM, [realistic_pod(s, f"mem-{i:05d}", NS_MEM)
                                       for i in range(created, total)])
            created = total
            sample = h.kjson("get", "pod", "-n", NS_MEM, "mem-00000")
            size = len(json.dumps(sample))
            # A fresh holder: stop (hands the Lease back) and start again; its first pass
            # lists every opted-in namespace.
            h.procs["webhook"].stop()
            p = s.start_webhook(h)
            assert p.popen is not None
            base = vm_status(p.popen.pid)
            s.wait_until("the elected pass", lambda: metric(
                h, s, port, "koord_webhook_reresolve_passes_total", trigger="elected",
                outcome="completed") >= 1, 120, 0.2)
            after_list = vm_status(p.popen.pid)
            # Then a pass that patches every one of them, and one that puts them back.
            t0 = time.monotonic()
            fig = flip_and_measure(h, s, NS_MEM, [f"mem-{i:05d}" for i in range(total)], False,
                                   total / 20 + 60)
            wall = round(time.monotonic() - t0, 1)
            after_write = vm_status(p.popen.pid)
            flip_and_measure(h, s, NS_MEM, [f"mem-{i:05d}" for i in range(total)], True,
                             total / 20 + 60)
            row = {"pod_json_bytes": size, "base_rss_kib": base["VmRSS"],
                   "hwm_after_list_pass_kib": after_list["VmHWM"],
                   "hwm_after_patch_pass_kib": after_write["VmHWM"],
                   "patch_pass_max_s": fig["max_s"], "patch_pass_wall_s": wall}
            r = subprocess.run([example, NS_MEM], capture_output=True, text=True,
                               env={**os.environ, "KUBECONFIG": str(h.kubeconfig)}, timeout=300)
            s.check(r.returncode == 0, f"pod_cache_rss failed: {r.stderr[-500:]}")
            row["reflector"] = r.stdout.strip()
            results[total] = row
            s.log(f"memory with {total} pods: {row}")
        h.figures["reresolve_memory"] = results
    finally:
        delete_pods(h, NS_MEM)
