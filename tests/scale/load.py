"""Talking to the scale cluster's kube-apiserver without kubectl: one keep-alive HTTPS
connection per thread (as a controller holds them), creation bursts paced at a target rate
(open loop: a slow answer does not delay the next pod's start, it only occupies a worker) and
raw JSON requests. Stdlib only."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Api:
    """JSON requests on one keep-alive HTTPS connection (reconnects after an error)."""

    def __init__(self, host: str, port: int, cafile: str, token: str, timeout: float = 60):
        self.host, self.port, self.timeout = host, port, timeout
        self.ctx = ssl.create_default_context(cafile=cafile)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.conn: http.client.HTTPSConnection | None = None

    def _conn(self) -> http.client.HTTPSConnection:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                    timeout=self.timeout)
        return self.conn

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = content_type
        # The apiserver may close a kept-alive connection between two requests (its idle
        # timeout, a GOAWAY under load): a read-only request is then sent again once on a new
        # connection. A POST is not, so a create is never counted twice.
        attempts = 2 if method in ("GET", "DELETE") else 1
        for attempt in range(attempts):
            reused = self.conn is not None
            try:
                conn = self._conn()
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException) as e:
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                closed = isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError,
                                        BrokenPipeError))
                if not (reused and closed and attempt + 1 < attempts):
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, obj: object | None = None,
             content_type: str = "application/json") -> dict:
        body = None if obj is None else json.dumps(obj).encode()
        status, data = self.request(method, path, body, content_type)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {data[:300]!r}")
        return json.loads(data) if data else {}

    def list_all(self, path: str, page: int = 500, **params: str) -> list[dict]:
        """Every item of a paginated list."""
        items: list[dict] = []
        token = ""
        while True:
            q = "&".join([f"limit={page}"] + [f"{k}={v}" for k, v in params.items()]
                         + ([f"continue={token}"] if token else []))
            out = self.json("GET", f"{path}?{q}")
            items.extend(out.get("items") or [])
            token = out.get("metadata", {}).get("continue") or ""
            if not token:
                return items

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Burst:
    """What a creation burst achieved."""
    target_rate: float
    seconds: float
    sent: int = 0
    created: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    # Worst delay between a pod's due time and its request leaving (the load generator or
    # the apiserver falling behind).
    max_lag_s: float = 0.0
    elapsed_s: float = 0.0
    # Filled by the caller's `inspect` of each stored pod.
    findings: dict[str, int] = field(default_factory=dict)

    @property
    def achieved_rate(self) -> float:
        return self.created / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, p: float) -> float:
        v = sorted(self.latencies_ms)
        if not v:
            return 0.0
        return v[max(0, min(len(v) - 1, -(-int(p * len(v)) // 100) - 1))]


def burst(api_factory: Callable[[], Api], pods: list[tuple[str, bytes]], rate: float,
          workers: int, inspect: Callable[[dict], list[str]]) -> Burst:
    """Creates `pods` ((namespace, body)) starting one every 1/rate s. `inspect` returns the
    names of what is wrong with a stored pod (counted in findings)."""
    result = Burst(target_rate=rate, seconds=len(pods) / rate)
    lock = threading.Lock()
    next_index = iter(range(len(pods)))
    t0 = time.monotonic() + 0.2  # every worker connected before the first due time
    last_done = [t0]

    def worker() -> None:
        api = api_factory()
        try:
            while True:
                with lock:
                    i = next(next_index, None)
                if i is None:
                    return
                due = t0 + i / rate
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                ns, body = pods[i]
                start = time.monotonic()
                try:
                    status, data = api.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
                except (OSError, http.client.HTTPException) as e:
                    status, data = 0, str(e).encode()
                done = time.monotonic()
                wrong = inspect(json.loads(data)) if status == 201 else []
                with lock:
                    result.sent += 1
                    result.max_lag_s = max(result.max_lag_s, start - due)
                    last_done[0] = max(last_done[0], done)
                    if status == 201:
                        result.created += 1
                        result.latencies_ms.append((done - start) * 1000)
                        for w in wrong:
                            result.findings[w] = result.findings.get(w, 0) + 1
                    else:
                        key = f"HTTP {status}: {data[:160].decode(errors='replace')}"
                        result.errors[key] = result.errors.get(key, 0) + 1
        finally:
            api.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.elapsed_s = last_done[0] - t0
    return result
