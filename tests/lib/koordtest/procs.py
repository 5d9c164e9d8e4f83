"""Processes a suite starts on the host (the webhook, appliers, kwok), stopped by PID, and the
kubeconfig they use to act as the product's ServiceAccounts."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from pathlib import Path

from .checks import Fatal
from .harness import log


class Proc:
    """A process a suite started, stopped by PID."""

    def __init__(self, name: str, argv: list[str], env: dict, logfile: Path):
        self.name, self.argv, self.env, self.logfile = name, argv, env, logfile
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.logfile, "ab") as f:
            f.write(f"----- start {time.strftime('%FT%T')}: {' '.join(self.argv)}\n".encode())
            f.flush()
            # Own session: a terminal Ctrl-C reaches only the suite, which then stops the
            # children in order instead of racing them.
            self.popen = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                          stdout=f, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        log(f"started {self.name} (pid {self.popen.pid}), log {self.logfile}")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 25.0) -> None:
        p = self.popen
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            log(f"{self.name} (pid {p.pid}) ignored SIGTERM for {timeout:.0f}s; SIGKILL")
            p.kill()
            p.wait(10)
        log(f"stopped {self.name} (pid {p.pid}, exit {p.returncode})")

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class ProcTable:
    """The processes a harness started, by name (a mixin: the harness sets `self.procs` and
    `self.dir`, where the logs go)."""

    procs: dict[str, Proc]
    dir: Path

    def start_proc(self, name: str, argv: list[str], env: dict) -> Proc:
        old = self.procs.get(name)
        if old and old.alive():
            raise Fatal(f"{name} already running")
        p = Proc(name, argv, env, self.dir / f"{name}.log")
        self.procs[name] = p
        p.start()
        return p


def vm_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def impersonating_kubeconfig(path: Path, server: str, ca_pem: bytes, token: str,
                             namespace: str, sa: str) -> Path:
    """A kubeconfig that acts as the ServiceAccount the manifests give a component: the process
    gets exactly the RBAC that manifests/ grants (token auth has no ServiceAccount tokens in
    these control planes, so the admin token impersonates it)."""
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "koord",
        "clusters": [{"name": "koord", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": sa, "user": {
            "token": token,
            "as": f"system:serviceaccount:{namespace}:{sa}",
            "as-groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                          "system:authenticated"]}}],
        "contexts": [{"name": "koord", "context": {"cluster": "koord", "user": sa}}],
    }
    path.write_text(json.dumps(cfg, indent=1))
    path.chmod(0o600)
    return path
