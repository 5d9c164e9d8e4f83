#!/usr/bin/env python3
"""No admission missed while the webhook Deployment is updated or its node drained, on the
real kubelet, kube-proxy and controllers of the node suite, with the product as
`kubectl apply -k` installed it (two replicas, a PodDisruptionBudget of minAvailable 1, the
rolling update strategy, the shutdown delay and termination grace of manifests/).

- `rolling_update`: the Deployment's image set to a second tag of the same archive (`ctr
  images tag`, so a new ReplicaSet as with a new release); the rollout replaces both replicas
  one at a time; the window lasts until every old pod has exited.
- `drain`: `kubectl drain` of the node, limited to the webhook's pods (`--pod-selector`; the
  node holds both replicas, a one-node cluster has nowhere else for them): the PDB lets one
  replica be evicted and refuses the other until the drain gives up; the evicted pod's
  replacement cannot be scheduled on the cordoned node, so one replica serves alone until
  `kubectl uncordon`.

Throughout each, pods are created at `RATE`/s in an opted-in namespace (LS and BE alternating,
colocation on) with a scheduling gate, so the kubelet runs none of them: only admission
matters here. Checked (koordtest/admissions.py): every creation answered 201, every pod
stored with `koordinator.sh/resolved-qos`, every BE pod with its batch resources, and the
apiserver's fail-open count for the webhook unchanged. Reported per replica that got SIGTERM
(seen as its `/readyz` turning 503, polled on the pod IP every 0.2 s): the admissions it
answered after the signal and how long after it the last one came, which is how long this
cluster takes to stop sending it new connections.

Used from suite.py (`continuity.rolling_update(h, suite)`, `continuity.drain(h, suite)`).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request

from koordtest import admissions
from koordtest.checks import check, wait_until
from koordtest.harness import log
from koordtest.metrics import metric_sum, parse_metrics
from koordtest.node import SYSTEM_NS

NS = "node-continuity"
RATE = 20.0
SELECTOR = "app.kubernetes.io/name=koord-webhook"
GATE = "koord-qos.test/admission-only"


class ReplicaWatch(threading.Thread):
    """Polls every webhook pod's `/readyz` and admission count on its pod IP (port 8080):
    when it got SIGTERM and what it answered after."""

    def __init__(self, h) -> None:
        super().__init__(daemon=True)
        self.h = h
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        # name -> ip, sigterm (monotonic), count at sigterm, last count, when it last moved
        self.pods: dict[str, dict] = {}

    def _list(self) -> None:
        for p in self.h.kjson("-n", SYSTEM_NS, "get", "pods", "-l", SELECTOR)["items"]:
            ip = p["status"].get("podIP")
            name = p["metadata"]["name"]
            if ip and name not in self.pods:
                with self.lock:
                    self.pods[name] = {"ip": ip, "sigterm": None, "at_sigterm": 0.0,
                                       "count": None, "moved": None, "gone": False,
                                       "ready": False}

    @staticmethod
    def _get(ip: str, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{ip}:8080{path}", timeout=1) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""

    def _poll(self, st: dict) -> None:
        try:
            status, _ = self._get(st["ip"], "/readyz")
            count = metric_sum(parse_metrics(self._get(st["ip"], "/metrics")[1]),
                               "koord_webhook_admissions_total")
        except OSError:
            st["gone"] = st["sigterm"] is not None
            return
        now = time.monotonic()
        with self.lock:
            if st["count"] is not None and count > st["count"]:
                st["moved"] = now
            st["count"] = count
            # 503 after 200: the SIGTERM's drain. A new replica answers 503 until its first
            # look at the certificate; that is not a stop.
            st["ready"] = st["ready"] or status == 200
            if status == 503 and st["ready"] and st["sigterm"] is None and st["count"] is not None:
                st["sigterm"], st["at_sigterm"] = now, count

    def run(self) -> None:
        listed = 0.0
        while not self.stopping.is_set():
            if time.monotonic() - listed >= 1.0:
                try:
                    self._list()
                except Exception as e:  # noqa: BLE001 (a kubectl hiccup: list again later)
                    log(f"listing webhook pods: {e}")
                listed = time.monotonic()
            for st in list(self.pods.values()):
                if not st["gone"]:
                    self._poll(st)
            self.stopping.wait(0.2)

    def stop(self) -> dict:
        self.stopping.set()
        self.join(10)
        out = {}
        with self.lock:
            for name, st in self.pods.items():
                if st["sigterm"] is None:
                    continue
                last = st["moved"] if st["moved"] and st["moved"] > st["sigterm"] else None
                out[name] = {"answered_after_sigterm": int((st["count"] or 0) - st["at_sigterm"]),
                             "last_answer_after_sigterm_s":
                                 round(last - st["sigterm"], 1) if last else None}
        return out


def make_pod(h, i: int) -> dict:
    name = f"cont-{i:04d}"
    if i % 2 == 0:
        res = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}
        labels = {}
    else:
        res = {"requests": {"cpu": "100m", "memory": "32Mi"},
               "limits": {"cpu": "200m", "memory": "64Mi"}}
        labels = {admissions.QOS_LABEL: "BE"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"schedulingGates": [{"name": GATE}],
                     "containers": [{"name": "c", "image": h.env["WORKLOAD_IMAGE"],
                                     "command": ["pause"], "resources": res}]}}


def prepare(h, s) -> None:
    """The namespace, and colocation on as seen by admission (a BE dry run translated)."""
    h.namespace(NS)
    s.set_colocation(h, True)

    def translated():
        r = h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                      input=json.dumps(make_pod(h, 1)))
        res = json.loads(r.stdout)["spec"]["containers"][0]["resources"]
        return admissions.BATCH_CPU in (res.get("requests") or {})
    wait_until("a BE dry run translated to batch resources", translated, 30, 0.5)


def measured(h, s, name: str, action) -> dict:
    """`action()` with pods created at RATE/s from 2 s before it until 2 s after; the tally,
    the replicas' drains and the fail-open count, as figure `name`."""
    watch = ReplicaWatch(h)
    watch.start()
    before = admissions.fail_open_count(h)
    creator = admissions.PodCreator(h.node_dir / "cp", NS, lambda i: make_pod(h, i), RATE)
    creator.start()
    try:
        time.sleep(2)
        t0 = time.monotonic()
        action()
        took = time.monotonic() - t0
        time.sleep(2)
        creator.stop()
        replicas = watch.stop()
        figure = creator.tally() | {"action_s": round(took, 1),
                                    "fail_open": admissions.fail_open_count(h) - before,
                                    "replicas_stopped": replicas}
    finally:
        creator.stop()
        watch.stop()
        h.kubectl("delete", "pods", "--all", "-n", NS, "--wait=false", timeout=300)
    h.figures.append(f"figure {name}: {json.dumps(figure)}")
    log(h.figures[-1])
    problems = admissions.missed(figure)
    check(not problems, "; ".join(problems))
    check(figure["fail_open"] == 0, f"the apiserver failed open {figure['fail_open']} times")
    return figure


def webhook_pods(h) -> list[dict]:
    return h.kjson("-n", SYSTEM_NS, "get", "pods", "-l", SELECTOR)["items"]


def rolling_update(h, s) -> None:
    prepare(h, s)
    dep = h.kjson("-n", SYSTEM_NS, "get", "deployment", "koord-webhook")
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    new = f"{image}-rollout"
    subprocess.run(["ctr", "--address", h.env["CONTAINERD_ADDRESS"], "-n", "k8s.io", "images",
                    "tag", "--force", image, new], check=True, capture_output=True)
    old = {p["metadata"]["name"] for p in webhook_pods(h)}

    def update():
        h.kubectl("-n", SYSTEM_NS, "set", "image", "deployment/koord-webhook", f"webhook={new}")
        h.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook",
                  "--timeout=180s", timeout=200)
        wait_until("every old webhook pod to exit", lambda: not old & {
            p["metadata"]["name"] for p in webhook_pods(h)}, 90, 0.5)

    try:
        figure = measured(h, s, "rolling update of the webhook (pods created at 20/s)", update)
    finally:
        s.set_colocation(h, False)
    check(len(figure["replicas_stopped"]) >= 2,
          f"saw {len(figure['replicas_stopped'])} replicas get SIGTERM, not both old ones")
    running = webhook_pods(h)
    check(all(p["spec"]["containers"][0]["image"] == new for p in running),
          f"pods after the rollout: {[p['spec']['containers'][0]['image'] for p in running]}")


def drain(h, s) -> None:
    prepare(h, s)
    node = h.env["NODE_NAME"]
    before = {p["metadata"]["name"] for p in webhook_pods(h)}
    check(len(before) == 2, f"webhook pods before the drain: {sorted(before)}")
    result = {}

    def drain_node():
        h.kubectl("cordon", node)
        try:
            r = h.kubectl("drain", node, f"--pod-selector={SELECTOR}", "--ignore-daemonsets",
                          "--timeout=20s", check_rc=False, timeout=60)
            result["drain"] = r
            # The PDB kept one replica: exactly one of the two is gone, the other Ready.
            now = {p["metadata"]["name"]: p for p in webhook_pods(h)}
            result["kept"] = [n for n in before if n in now
                              and not now[n]["metadata"].get("deletionTimestamp")]
        finally:
            h.kubectl("uncordon", node)
        h.kubectl("-n", SYSTEM_NS, "rollout", "status", "deployment/koord-webhook",
                  "--timeout=180s", timeout=200)
        h.kubectl("-n", SYSTEM_NS, "wait", "deployment/koord-webhook",
                  "--for=condition=Available", "--timeout=60s", timeout=80)

    try:
        figure = measured(h, s, "drain of the node holding the webhook replicas (pods created at "
                          "20/s)", drain_node)
    finally:
        s.set_colocation(h, False)
    r = result["drain"]
    said = r.stdout + r.stderr
    check(r.returncode != 0 and "disruption budget" in said,
          f"kubectl drain did not stop at the PodDisruptionBudget (exit {r.returncode}): {said}")
    check(len(result["kept"]) == 1, f"replicas kept through the drain: {result['kept']}")
    check(len(figure["replicas_stopped"]) == 1,
          f"replicas that got SIGTERM: {figure['replicas_stopped']}")
