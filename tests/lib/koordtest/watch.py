"""The one watch the suites share: a Kubernetes collection's event stream read straight from
the apiserver (stdlib HTTP, no kubectl process), recording per object the latest value of a
function of it and the first time each value was seen.

The suites time the product by it (a pod's annotation changed, an Event posted, a container
started), so the times are taken when a line arrives, under one lock, and the stream resumes
from the last resourceVersion when the apiserver ends it (`timeoutSeconds`, a restart)."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Endpoint:
    """Where the apiserver is and how to authenticate to it. `ctx` None means plain HTTP (the
    watch's own unit tests)."""

    host: str
    port: int
    ctx: ssl.SSLContext | None
    headers: dict = field(default_factory=dict)

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.ctx is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    @staticmethod
    def from_kubeconfig(kubectl: str, kubeconfig: str | Path) -> Endpoint:
        """The current context of a kubeconfig as the test clusters write it (a bearer token,
        the CA inline), read through `kubectl config view` so the file's own parsing rules
        apply; any other form is an error, not a guess."""
        raw = subprocess.run([kubectl, f"--kubeconfig={kubeconfig}", "config", "view", "--raw",
                              "--minify", "-o", "json"],
                             check=True, capture_output=True, text=True, timeout=30).stdout
        cfg = json.loads(raw)
        cluster = cfg["clusters"][0]["cluster"]
        token = cfg["users"][0]["user"].get("token")
        ca = cluster.get("certificate-authority-data")
        if not token or not ca:
            raise ValueError(f"{kubeconfig}: want a bearer token and certificate-authority-data")
        url = urllib.parse.urlsplit(cluster["server"])
        ctx = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
        return Endpoint(url.hostname or "127.0.0.1", url.port or 443, ctx,
                        {"Accept": "application/json", "Authorization": f"Bearer {token}"})


def namespaced_name(obj: dict) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def object_name(obj: dict) -> str:
    return obj.get("metadata", {}).get("name", "")


class ApiWatch:
    """A watch of `path` (a collection: `/api/v1/namespaces/NS/pods`, `/api/v1/pods`, with
    `query` such as a field selector). Without `resource_version` it lists first, so `latest`
    holds the objects that already exist (`existing=False`: it lists only for the version and
    sees what changes from now); with one it starts there and sees only what changes.

    - `latest[key]`, `rvs[key]`: the value and resourceVersion of the last ADDED/MODIFIED event
    - `first_seen[(key, value)]`: when that value was first seen for that key (monotonic)
    - `error`: the last failure of the stream (it is retried), or None
    """

    def __init__(self, endpoint: Endpoint, path: str, value_of: Callable[[dict], object], *,
                 resource_version: str | None = None, key_of: Callable[[dict], str] = object_name,
                 query: dict | None = None, timeout_s: int = 600, existing: bool = True) -> None:
        self.endpoint, self.path, self.value_of, self.key_of = endpoint, path, value_of, key_of
        self.query, self.timeout_s = dict(query or {}), timeout_s
        self.latest: dict[str, object] = {}
        self.rvs: dict[str, str] = {}
        self.first_seen: dict[tuple[str, object], float] = {}
        self.events = 0
        self.error: str | None = None
        self.cv = threading.Condition()
        self._stop = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self.rv = resource_version if resource_version is not None else self._list(existing)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _url(self, **extra: str) -> str:
        q = {**self.query, **extra}
        return f"{self.path}?{urllib.parse.urlencode(q)}" if q else self.path

    def _list(self, record: bool) -> str:
        conn = self.endpoint.connect(60)
        try:
            conn.request("GET", self._url(), headers=self.endpoint.headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"list {self.path}: HTTP {resp.status}: {data[:200]!r}")
        finally:
            conn.close()
        listed = json.loads(data)
        now = time.monotonic()
        for obj in listed.get("items", []) if record else []:
            self._record(obj, now)
        return listed["metadata"]["resourceVersion"]

    def _record(self, obj: dict, now: float) -> None:
        key, value = self.key_of(obj), self.value_of(obj)
        with self.cv:
            self.latest[key] = value
            self.rvs[key] = obj.get("metadata", {}).get("resourceVersion", "")
            self.first_seen.setdefault((key, value), now)
            self.cv.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            conn = self.endpoint.connect(self.timeout_s + 30)
            self._conn = conn
            try:
                conn.request("GET", self._url(watch="1", allowWatchBookmarks="true",
                                              resourceVersion=self.rv,
                                              timeoutSeconds=str(self.timeout_s)),
                             headers=self.endpoint.headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    self.error = f"watch {self.path}: HTTP {resp.status}: {resp.read()[:200]!r}"
                    self._stop.wait(0.5)
                    continue
                while not self._stop.is_set():
                    line = resp.readline()
                    if not line:
                        break  # the apiserver ended the stream: resume from self.rv
                    now = time.monotonic()
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        # 410 Gone: the resourceVersion is too old to resume from; nothing
                        # after it can be timed, so the watch says so and ends.
                        self.error = f"watch {self.path}: {obj.get('message', obj)}"
                        return
                    self.rv = obj.get("metadata", {}).get("resourceVersion") or self.rv
                    if ev.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    self.events += 1
                    self._record(obj, now)
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self._stop.is_set():
                    self.error = f"watch {self.path}: {e}"
                    self._stop.wait(0.5)
            finally:
                conn.close()

    def seen(self, value: object) -> dict[str, float]:
        """Every key seen with `value`, and when."""
        with self.cv:
            return {k: t for (k, v), t in self.first_seen.items() if v == value}

    def first(self, key: str, accept: Callable[[object], bool]) -> float | None:
        """The first time `key` was seen with a value `accept` takes."""
        with self.cv:
            times = [t for (k, v), t in self.first_seen.items() if k == key and accept(v)]
        return min(times) if times else None

    def wait(self, key: str, accept: Callable[[object], bool], timeout: float) -> float | None:
        """Waits until `key` has been seen with a value `accept` takes; that first time, or None."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                t = self.first(key, accept)
                left = deadline - time.monotonic()
                if t is not None or left <= 0:
                    return t
                self.cv.wait(left)

    def all_are(self, keys: list[str], value: object) -> bool:
        with self.cv:
            return all(self.latest.get(k) == value for k in keys)

    def latencies(self, keys: list[str], value: object, t0: float) -> list[float]:
        """Seconds from t0 to each key's first sight of `value`, sorted."""
        with self.cv:
            return sorted(self.first_seen[(k, value)] - t0 for k in keys)

    def stop(self) -> None:
        """Ends the stream: the reading thread sees its socket shut and returns."""
        self._stop.set()
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(2)
            except OSError:
                pass
        self._thread.join(5)
