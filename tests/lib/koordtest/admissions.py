"""Pods created at a steady rate while something happens to the webhook, and what admission
made of each: the zero-missed-admission scenarios of tests/e2e (drain_e2e.py) and tests/node
(continuity.py).

With `failurePolicy: Ignore` an admission that fails is a pod stored without
`koordinator.sh/resolved-qos`, and a BE pod stored without its batch translation, which only
happens at CREATE (the re-resolver repairs the annotation later, never the resources). The
creator keeps the object each create returned, so a later repair cannot hide a miss.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

RESOLVED = "koordinator.sh/resolved-qos"
QOS_LABEL = "koordinator.sh/qosClass"
BATCH_CPU = "kubernetes.io/batch-cpu"
WEBHOOK_NAME = "pods.qos.koordinator.sh"
FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"


class PodCreator:
    """POSTs `make_pod(i)` at `rate` per second from a few threads, each on its own kept-alive
    connection to the apiserver of a control-plane.sh dir `cp_dir` (its address and admin
    token), and keeps each answer: (name, HTTP status, stored object or error text, seconds
    taken)."""

    THREADS = 4

    def __init__(self, cp_dir: Path, ns: str, make_pod: Callable[[int], dict],
                 rate: float) -> None:
        self.cp_dir, self.ns, self.make_pod, self.rate = cp_dir, ns, make_pod, rate
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.next = 0
        self.results: list[tuple[str, int, dict | str, float]] = []
        self.t0 = 0.0
        self.threads = [threading.Thread(target=self._run, daemon=True)
                        for _ in range(self.THREADS)]

    def start(self) -> PodCreator:
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def _conn(self) -> tuple[http.client.HTTPSConnection, dict]:
        state = dict(line.partition("=")[::2]
                     for line in (self.cp_dir / "state.env").read_text().splitlines())
        token = (self.cp_dir / "token").read_text().strip()
        ctx = ssl.create_default_context(cafile=str(self.cp_dir / "pki" / "apiserver.crt"))
        conn = http.client.HTTPSConnection(state.get("BIND_ADDRESS") or "127.0.0.1",
                                           int(state["APISERVER_PORT"]), context=ctx, timeout=30)
        return conn, {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                      "Accept": "application/json"}

    def _run(self) -> None:
        conn, hdr = self._conn()
        while not self.stopping.is_set():
            with self.lock:
                i = self.next
                self.next += 1
            wait = self.t0 + i / self.rate - time.monotonic()
            if wait > 0 and self.stopping.wait(wait):
                return
            pod = self.make_pod(i)
            sent = time.monotonic()
            try:
                conn.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body=json.dumps(pod),
                             headers=hdr)
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
                body: dict | str = json.loads(raw) if status == 201 else raw[:300].decode()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn, hdr = self._conn()
                status, body = 0, f"{type(e).__name__}: {e}"
            with self.lock:
                self.results.append((pod["metadata"]["name"], status, body,
                                     time.monotonic() - sent))

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(60)

    def tally(self) -> dict:
        """What admission made of the pods: failed creates, pods without the annotation, BE
        pods (by their label) without batch-cpu in their requests; a few names of each."""
        with self.lock:
            results = list(self.results)
        failed = [f"{n}: {st} {b}" for n, st, b, _ in results if st != 201]
        stored = [b for _, st, b, _ in results if st == 201 and isinstance(b, dict)]
        unannotated = [p["metadata"]["name"] for p in stored
                       if RESOLVED not in (p["metadata"].get("annotations") or {})]
        be = [p for p in stored if (p["metadata"].get("labels") or {}).get(QOS_LABEL) == "BE"]
        untranslated = [p["metadata"]["name"] for p in be
                        if any(BATCH_CPU not in (c.get("resources", {}).get("requests") or {})
                               for c in p["spec"]["containers"])]
        return {"pods": len(results), "be": len(be), "rate": self.rate,
                "failed_creates": len(failed), "unannotated": len(unannotated),
                "be_untranslated": len(untranslated),
                "slowest_create_s": round(max((d for *_, d in results), default=0.0), 2),
                "examples": {"failed": failed[:3], "unannotated": unannotated[:5],
                             "be_untranslated": untranslated[:5]}}


def fail_open_count(h) -> float:
    """kube-apiserver's count of calls to our webhook that failed open (`failurePolicy:
    Ignore` admitted the object unmutated), read through harness `h`'s kubectl."""
    total = 0.0
    for line in h.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith(FAIL_OPEN + "{") and f'name="{WEBHOOK_NAME}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def missed(tally: dict) -> list[str]:
    """Why a tally is not zero-missed (empty when it is)."""
    problems = []
    if tally["failed_creates"]:
        problems.append(f"{tally['failed_creates']} creations failed: "
                        f"{tally['examples']['failed']}")
    if tally["unannotated"]:
        problems.append(f"{tally['unannotated']} of {tally['pods']} pods admitted without "
                        f"{RESOLVED}: {tally['examples']['unannotated']}")
    if tally["be_untranslated"]:
        problems.append(f"{tally['be_untranslated']} of {tally['be']} BE pods admitted without "
                        f"batch resources: {tally['examples']['be_untranslated']}")
    return problems
