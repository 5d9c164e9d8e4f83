#!/usr/bin/env python3
"""No admission missed while webhook replicas are stopped with SIGTERM, on the real
kube-apiserver.

A replica that a rolling update or a node drain replaces gets SIGTERM while the Service may
still send it new connections (the endpoint change takes a while to reach every kube-proxy)
and while the apiserver holds kept-alive connections to it. With `failurePolicy: Ignore`,
every admission that fails meanwhile is a pod admitted without its annotation, and a BE pod
without its batch translation, which only happens at CREATE: nothing repairs it later.

`rolling_restart`: two replicas (`koord-webhook serve` in in-cluster mode, as the suite runs
the webhook, with a shutdown delay of 3 s) behind ServiceProxy, a Service as kube-proxy makes
it, in userspace on loopback: a new connection goes to the next replica (round robin) among
those whose `/readyz` was 200 at the probe `LAG` seconds ago (a readiness probe every
`PROBE_PERIOD` s feeding the endpoints, which reach the proxy a moment later); an established
connection stays with its replica until one side closes it (conntrack). The
MutatingWebhookConfiguration's url is the proxy's (localhost: the apiserver speaks HTTP/2 to
it). Replica a offers HTTP/2, replica b only HTTP/1.1 (`--max-h2-connections 0`), so both of
the apiserver's client paths meet a draining replica. While pods are created at `RATE`/s
(LS and BE alternating, colocation on), the replica carrying the apiserver's connections is
stopped with SIGTERM and started again, then the other (which carried everything meanwhile):
a rolling update of two replicas, one at a time. Checked: every creation answered 201, every
pod stored with `koordinator.sh/resolved-qos` (the object the create returned, so a later
repair by the re-resolver cannot hide a miss), every BE pod with batch resources, the
apiserver's fail-open count unchanged, and each replica answered admissions after a SIGTERM
(the drain was exercised, not skipped: a replica that carried nothing when stopped is stopped
again later).

`KOORD_E2E_DRAIN_DELAY=0s` runs the same with the shutdown delay off: the replicas close their
listener at SIGTERM and answer nothing after it, and the scenario fails on that. (It lost no
pod in the runs made: the apiserver kept connections to both replicas and moved to the other
one's on the graceful close. The pods are lost when the apiserver must open a connection while
the Service still leads to the stopped replica: the node suite's rolling update.)

Used from suite.py (`drain_e2e.rolling_restart(h, suite)`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time

from koordtest import admissions as admissions_lib

NS_DRAIN = "e2e-drain"
RATE = 20.0  # pods per second
PROBE_PERIOD = 0.5
LAG = 1.0
DELAY = os.environ.get("KOORD_E2E_DRAIN_DELAY", "3s")
MAX_STOPS = 5


def _reset(sock: socket.socket) -> None:
    """Closes with RST, as a host does for a connection to a closed port."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class ServiceProxy:
    """A Service as kube-proxy makes it, for replicas on loopback (see the module's doc)."""

    def __init__(self, backends: dict[str, tuple[int, int]], h) -> None:
        self.backends = backends  # name -> (listen port, metrics port)
        self.h = h
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(512)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.endpoints: list[str] = []
        self.connections = {name: 0 for name in backends}
        self.refused = {name: 0 for name in backends}
        self.no_endpoint = 0
        self.stopping = threading.Event()
        self.open: set[socket.socket] = set()
        self.turn = 0
        self.threads = [threading.Thread(target=self._probe, daemon=True),
                        threading.Thread(target=self._accept, daemon=True)]
        for t in self.threads:
            t.start()

    def _ready(self, metrics_port: int) -> bool:
        try:
            return self.h.http_get(metrics_port, "/readyz")[0] == 200
        except OSError:
            return False

    def _probe(self) -> None:
        seen = {name: (False, 0.0) for name in self.backends}  # readiness, since when
        while not self.stopping.is_set():
            now = time.monotonic()
            for name, (_, metrics_port) in self.backends.items():
                ready = self._ready(metrics_port)
                if ready != seen[name][0]:
                    seen[name] = (ready, now)
            # The endpoints the proxy has: what the probe saw LAG seconds ago.
            eps = [n for n, (ready, since) in seen.items()
                   if (ready if now - since >= LAG else not ready)]
            with self.lock:
                self.endpoints = eps
            self.stopping.wait(PROBE_PERIOD)

    def ready(self, name: str) -> bool:
        with self.lock:
            return name in self.endpoints

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with self.lock:
                eps = list(self.endpoints)
                self.turn += 1
                name = eps[self.turn % len(eps)] if eps else None
            if name is None:
                self.no_endpoint += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.backends[name][0]), 2)
            except OSError:
                with self.lock:
                    self.refused[name] += 1
                _reset(client)
                continue
            with self.lock:
                self.connections[name] += 1
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            self._splice(client, upstream)

    def _splice(self, a: socket.socket, b: socket.socket) -> None:
        with self.lock:
            self.open.update((a, b))
        done = threading.Barrier(2, action=lambda: self._close(a, b))

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        break
                    dst.sendall(data)
            except OSError:
                # A reset on one side resets the other, as it does through a NAT.
                _reset(dst)
            try:
                done.wait()
            except threading.BrokenBarrierError:
                pass

        threading.Thread(target=pump, args=(a, b), daemon=True).start()
        threading.Thread(target=pump, args=(b, a), daemon=True).start()

    def _close(self, a: socket.socket, b: socket.socket) -> None:
        with self.lock:
            self.open.difference_update((a, b))
        a.close()
        b.close()

    def stop(self) -> None:
        self.stopping.set()
        self.listener.close()
        for t in self.threads:
            t.join(5)
        with self.lock:
            socks = list(self.open)
        for s in socks:
            try:
                s.close()
            except OSError:
                pass


def admissions(h, metrics_port: int) -> float | None:
    try:
        return h.metric_sum(metrics_port, "koord_webhook_admissions_total")
    except OSError:
        return None


def busy(h, metrics_port: int) -> bool:
    """The replica answered admissions in the last half second."""
    before = admissions(h, metrics_port)
    time.sleep(0.5)
    after = admissions(h, metrics_port)
    return before is not None and after is not None and after > before


def stop_draining(h, s, proc, metrics_port: int) -> float:
    """SIGTERM, then the replica's admissions counted until it exits: what it answered after
    the signal (the last reading before exit, so a lower bound)."""
    before = admissions(h, metrics_port) or 0.0
    last = before
    proc.popen.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    while proc.popen.poll() is None:
        now = admissions(h, metrics_port)
        if now is not None:
            last = now
        s.check(time.monotonic() - t0 < 40, f"{proc.name} still running 40 s after SIGTERM")
        time.sleep(0.1)
    s.log(f"{proc.name} exited {time.monotonic() - t0:.1f}s after SIGTERM "
          f"(exit {proc.popen.returncode}); answered {last - before:.0f} admissions meanwhile")
    s.check(proc.popen.returncode == 0, f"{proc.name} exited {proc.popen.returncode}:\n"
            f"{proc.tail()}")
    return last - before


def rolling_restart(h, s) -> None:
    h.namespace(NS_DRAIN, True)
    s.set_colocation(h, True)  # BE pods are translated to batch resources from here on
    names = {"a": ("drain-a", "koord-webhook-drain-a"), "b": ("drain-b", "koord-webhook-drain-b")}
    ports = {k: (s.free_port(), s.free_port()) for k in names}
    env = {"a": {"KOORD_SHUTDOWN_DELAY": DELAY},
           "b": {"KOORD_SHUTDOWN_DELAY": DELAY, "KOORD_MAX_H2_CONNECTIONS": "0"}}
    proxy = None
    creator = None
    try:
        # The suite's replica steps aside: a and b are the Service's only endpoints.
        h.procs["webhook"].stop()
        procs = {k: s.start_webhook(h, names[k][0], names[k][1], ports[k], env[k]) for k in names}
        proxy = ServiceProxy({k: ports[k] for k in names}, h)
        s.wait_until("both replicas in the proxy's endpoints",
                     lambda: proxy.ready("a") and proxy.ready("b"), 10, 0.1)
        rendered = s.webhookcfg.only(h.rendered, s.webhookcfg.MWC_KIND)
        h.apply(s.webhookcfg.service_to_url(rendered, "127.0.0.1", proxy.port, h.ca_bundle))

        def through_proxy():
            before = sum(proxy.connections.values())
            r = h.kubectl("create", "--dry-run=server", "-f", "-", "-o", "json",
                          input=json.dumps(s.burstable("probe", NS_DRAIN)))
            return (s.RESOLVED in s.annotations(json.loads(r.stdout))
                    and sum(proxy.connections.values()) > before) or None
        s.wait_until("admissions through the proxy", through_proxy, 30, 0.25)
        fail_open_before = admissions_lib.fail_open_count(h)

        def make_pod(i: int) -> dict:
            name = f"drain-{i:04d}"
            if i % 2 == 0:
                return s.burstable(name, NS_DRAIN)
            pod = s.be_pod(name)
            pod["metadata"]["namespace"] = NS_DRAIN
            return pod

        creator = admissions_lib.PodCreator(h.cp_dir, NS_DRAIN, make_pod, RATE).start()
        time.sleep(2)
        # The replica carrying the apiserver's connections is stopped (as a rollout meets it)
        # and started again; while it is down every connection moves to the other, which is
        # stopped next. The apiserver may move its traffic between the check and the signal
        # (a new connection that lands on the HTTP/2 replica takes everything), and a replica
        # stopped while carrying nothing proves nothing: it is stopped again later, until each
        # has drained under traffic (at most MAX_STOPS stops).
        during: dict[str, float] = {}
        for _ in range(MAX_STOPS):
            if all(during.get(k, 0) > 0 for k in names):
                break
            k = s.wait_until("a replica carrying admissions", lambda: next(
                (k for k in sorted(names, key=lambda k: during.get(k, 0) > 0)
                 if busy(h, ports[k][1])), None), 10, 0)
            answered = stop_draining(h, s, procs[k], ports[k][1])
            during[k] = max(during.get(k, 0), answered)
            procs[k] = s.start_webhook(h, names[k][0], names[k][1], ports[k], env[k])
            s.wait_until(f"replica {k} back in the endpoints", lambda k=k: proxy.ready(k), 15, 0.1)
        time.sleep(2)
        creator.stop()
        fail_open_after = admissions_lib.fail_open_count(h)
    finally:
        if creator:
            creator.stop()
        if proxy:
            proxy.stop()
        for k in names:
            p = h.procs.get(names[k][0])
            if p:
                p.stop()
        if not h.procs["webhook"].alive():
            s.start_webhook(h)
            s.register_webhook(h)
        s.restore_configmaps(h)

    figure = creator.tally() | {
        "delay": DELAY, "fail_open": fail_open_after - fail_open_before,
        "answered_while_draining": {k: int(v) for k, v in during.items()},
        "proxy_connections": dict(proxy.connections), "proxy_refused": dict(proxy.refused)}
    h.figures["drain"] = figure
    s.log(f"drain: {json.dumps(figure)}")
    try:
        problems = admissions_lib.missed(figure)
        s.check(not problems, "; ".join(problems))
        s.check(figure["fail_open"] == 0, f"the apiserver failed open {figure['fail_open']} times")
        s.check(figure["pods"] >= RATE * 5, f"only {figure['pods']} pods created")
        for k in names:
            s.check(during.get(k, 0) > 0, f"replica {k} answered nothing after its SIGTERM: the scenario did "
                    "not exercise its drain")
    finally:
        h.kubectl("delete", "pods", "--all", "-n", NS_DRAIN, "--wait=false", timeout=300)
