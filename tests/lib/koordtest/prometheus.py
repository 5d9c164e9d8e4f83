"""A real Prometheus (Debian's `prometheus`) beside a suite's cluster: it scrapes the product and
kube-apiserver the way manifests/monitoring's ServiceMonitors have the operator scrape them,
evaluates the shipped alerting rules, and answers queries; plus what the suites check with it:
every metric selector of every alert and every dashboard panel returns series.

Prometheus listens on loopback only; its data lives in the suite's directory. Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "manifests" / "monitoring" / "koord-qos.rules.yaml"
MONITORING = REPO / "manifests" / "monitoring"

# -- the scrape configuration: what the ServiceMonitors make the operator scrape -------------

# Debian's Prometheus is built without Kubernetes service discovery, so the targets come from
# `file_sd_configs` files that TargetSync keeps equal to what the prometheus-operator derives
# from manifests/monitoring's ServiceMonitors: the endpoints of the Services whose labels match
# the selector, on the named port, labelled namespace, service, pod, container, job (the
# jobLabel's value, else the Service's name), endpoint (the port name), then the endpoint's
# relabelings. Every endpoint, ready or not, as the operator's generated config keeps them.

class Monitor:
    def __init__(self, name: str, selector: dict[str, str], port: str, job_label: str | None,
                 relabel: list[tuple[str, str]]) -> None:
        self.name, self.selector, self.port = name, selector, port
        self.job_label, self.relabel = job_label, relabel


def _relabelings(servicemonitor_yaml: str) -> list[tuple[str, str]]:
    """(source meta label, target label) for each `relabelings` entry of a ServiceMonitor file.
    Only the one-source, replace form manifests/monitoring uses; another form fails here
    rather than being ignored."""
    pairs = re.findall(r"- sourceLabels: \[([^\],]+)\]\n\s+targetLabel: (\S+)\n?",
                       servicemonitor_yaml)
    rest = servicemonitor_yaml.split("relabelings:", 1)[1] if "relabelings:" in servicemonitor_yaml else ""
    if rest.count("- ") != len(pairs):
        raise ValueError("a ServiceMonitor relabeling this harness does not translate")
    return [(a.strip(), b) for a, b in pairs]


def shipped_monitors() -> list[Monitor]:
    """manifests/monitoring's two ServiceMonitors (checked against the files)."""
    webhook = (MONITORING / "servicemonitor.yaml").read_text()
    applier = (MONITORING / "applier-servicemonitor.yaml").read_text()
    for text, needles in ((webhook, ("app.kubernetes.io/name: koord-webhook", "- port: metrics")),
                          (applier, ("jobLabel: koord-app", "koord-app: koordlet",
                                     "app.kubernetes.io/name: koord-applier",
                                     "- port: koordlet-service"))):
        for n in needles:
            if n not in text:
                raise ValueError(f"the ServiceMonitor changed ({n!r} missing): update this harness")
    return [Monitor("koord-webhook", {"app.kubernetes.io/name": "koord-webhook"}, "metrics",
                    None, _relabelings(webhook)),
            Monitor("koord-applier", {"koord-app": "koordlet",
                                      "app.kubernetes.io/name": "koord-applier"},
                    "koordlet-service", "koord-app", _relabelings(applier))]


def monitor_targets(m: Monitor, services: list[dict], slices: list[dict]) -> list[dict]:
    """file_sd groups for one ServiceMonitor, from Services and EndpointSlices."""
    groups = []
    for svc in services:
        labels = svc["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in m.selector.items()):
            continue
        name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
        job = labels.get(m.job_label, name) if m.job_label else name
        for sl in slices:
            if (sl["metadata"].get("labels") or {}).get("kubernetes.io/service-name") != name:
                continue
            port = next((p["port"] for p in sl.get("ports") or [] if p.get("name") == m.port), None)
            if port is None:
                continue
            for ep in sl.get("endpoints") or []:
                ref = ep.get("targetRef") or {}
                meta = {"__meta_kubernetes_pod_node_name": ep.get("nodeName", ""),
                        "__meta_kubernetes_pod_name": ref.get("name", "")}
                for addr in ep.get("addresses") or []:
                    lab = {"namespace": ns, "service": name, "pod": ref.get("name", ""),
                           "job": job, "endpoint": m.port}
                    for src, dst in m.relabel:
                        if src not in meta:
                            raise ValueError(f"relabeling from {src}: not emulated here")
                        lab[dst] = meta[src]
                    groups.append({"targets": [f"{addr}:{port}"], "labels": lab})
    return sorted(groups, key=lambda g: g["targets"])


class TargetSync:
    """Keeps one file_sd file per ServiceMonitor equal to the cluster's endpoints, polling the
    apiserver (the suite's token and CA) every `every` seconds; Prometheus re-reads a changed
    file at once."""

    def __init__(self, server: str, token: str, ca_file: Path, workdir: Path,
                 monitors: list[Monitor], namespace: str = "koordinator-system",
                 every: float = 1.0) -> None:
        import ssl
        self.server, self.token, self.ns = server, token, namespace
        self.ctx = ssl.create_default_context(cafile=str(ca_file))
        self.dir, self.monitors, self.every = workdir, monitors, every
        self.errors = 0
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def file(self, m: Monitor) -> Path:
        return self.dir / f"targets-{m.name}.json"

    def _get(self, path: str) -> list[dict]:
        req = urllib.request.Request(f"https://{self.server}{path}",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=10, context=self.ctx) as r:
            return json.loads(r.read().decode())["items"]

    def sync(self) -> None:
        services = self._get(f"/api/v1/namespaces/{self.ns}/services")
        slices = self._get(f"/apis/discovery.k8s.io/v1/namespaces/{self.ns}/endpointslices")
        for m in self.monitors:
            text = json.dumps(monitor_targets(m, services, slices), indent=1)
            f = self.file(m)
            if not f.exists() or f.read_text() != text:
                tmp = f.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(f)

    def start(self) -> "TargetSync":
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sync()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.paused.is_set():
                continue
            try:
                self.sync()
            except Exception:  # noqa: BLE001 - an apiserver hiccup: next round
                self.errors += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def scrape_config(apiserver: str, token_file: Path, ca_file: Path, interval: str,
                  apiserver_interval: str, rule_file: Path, sync: TargetSync,
                  apiserver_keep: str) -> str:
    jobs = [{"job_name": "apiserver", "scheme": "https", "scrape_interval": apiserver_interval,
             "scrape_timeout": "2s",
             "authorization": {"credentials_file": str(token_file)},
             "tls_config": {"ca_file": str(ca_file)},
             "static_configs": [{"targets": [apiserver]}],
             "metric_relabel_configs": [{"source_labels": ["__name__"], "action": "keep",
                                         "regex": apiserver_keep}]}]
    for m in sync.monitors:
        jobs.append({"job_name": f"serviceMonitor/koordinator-system/{m.name}/0",
                     "scrape_interval": interval, "scrape_timeout": "1s",
                     "file_sd_configs": [{"files": [str(sync.file(m))], "refresh_interval": "5s"}]})
    cfg = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
           "rule_files": [str(rule_file)], "scrape_configs": jobs}
    return json.dumps(cfg, indent=1)  # JSON is YAML


# -- a test copy of the rules: short `for:` and windows, so a fault fires and clears in a run --

_DURATION = re.compile(r"(\d+)([smh])")


def _seconds(d: str) -> int:
    return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in _DURATION.findall(d))


def quick_rules(text: str, divide: int = 20, floor_s: int = 20) -> str:
    """The rule file with every `for:` at 0s and every range window and offset divided by
    `divide` (at least `floor_s`): 10m -> 30s, 1h -> 3m. Thresholds and expressions are the
    file's."""
    text = re.sub(r"^(\s*)for: \S+$", r"\1for: 0s", text, flags=re.M)
    short = lambda d: f"{max(floor_s, _seconds(d) // divide)}s"  # noqa: E731
    text = re.sub(r"\[(\d+[smh])\]", lambda m: f"[{short(m.group(1))}]", text)
    return re.sub(r"\boffset (\d+[smh])\b", lambda m: f"offset {short(m.group(1))}", text)


# -- Prometheus --------------------------------------------------------------------------------

def ensure_installed(ci: bool) -> str | None:
    """The path of `prometheus`, installing Debian's package if it is missing (no service
    started: policy-rc.d 101 for the install). None when it cannot be had (and not CI)."""
    exe = shutil.which("prometheus")
    if exe:
        return exe
    script = REPO / "tests" / "monitoring" / "install-prometheus.sh"
    r = subprocess.run([str(script)], capture_output=True, text=True, timeout=900)
    exe = shutil.which("prometheus")
    if not exe and ci:
        raise RuntimeError(f"prometheus missing and could not be installed: {r.stderr[-800:]}")
    return exe


class Prometheus:
    """One Prometheus process on 127.0.0.1:`port`, stopped by its PID."""

    def __init__(self, exe: str, workdir: Path, port: int) -> None:
        self.exe, self.dir, self.port = exe, workdir, port
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}"

    def start(self, config: str, timeout: float = 60) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "prometheus.yml").write_text(config)
        log = open(self.dir / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [self.exe, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}", "--storage.tsdb.retention.time=2h",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--web.enable-lifecycle"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: "
                                   + (self.dir / "prometheus.log").read_text()[-1500:])
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError("prometheus not ready within %ds" % timeout)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def pause(self, stopped: bool) -> None:
        """SIGSTOP (no scrape, no rule evaluation, no load on the targets) or SIGCONT."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP if stopped else signal.SIGCONT)

    def reload(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/-/reload", method="POST"),
                               timeout=10).read()

    def api(self, path: str, **params: str) -> dict | list:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=30) as r:
            body = json.loads(r.read().decode())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query's result (vector), or an error naming the expression."""
        try:
            data = self.api("query", query=expr)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"query {expr!r}: {e.read().decode()[:500]}") from None
        res = data["result"]
        return res if data["resultType"] == "vector" else [{"metric": {}, "value": res}]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def rule_groups(self) -> list[dict]:
        return self.api("rules", type="alert")["groups"]


class AlertWatch:
    """Polls /api/v1/alerts in the background: for each alert name, when it was first seen
    firing, last seen firing, and the label sets it fired with."""

    def __init__(self, prom: Prometheus, every: float = 1.0) -> None:
        self.prom, self.every = prom, every
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.labels: dict[str, list[dict]] = {}
        self.errors = 0
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "AlertWatch":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.paused.is_set():
                continue
            try:
                alerts = self.prom.alerts()
            except Exception:  # noqa: BLE001 - a missed poll is counted, not fatal
                self.errors += 1
                continue
            now = time.monotonic()
            with self._lock:
                for a in alerts:
                    if a.get("state") != "firing":
                        continue
                    name = a["labels"].get("alertname", "?")
                    self.first.setdefault(name, now)
                    self.last[name] = now
                    labs = {k: v for k, v in a["labels"].items() if k != "alertname"}
                    if labs not in self.labels.setdefault(name, []):
                        self.labels[name].append(labs)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def fired_since(self, name: str, t0: float) -> bool:
        with self._lock:
            return self.last.get(name, -1.0) >= t0

    def firing_now(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.prom.alerts() if a.get("state") == "firing"}


# -- PromQL: the vector selectors an expression names -----------------------------------------

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan",
             # aggregations, which may be followed by `by (...)` rather than `(`
             "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk",
             "quantile", "count_values"}
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|\d+(?:\.\d+)?(?:e[+-]?\d+)?[smhdwy]*'
                    r'|[A-Za-z_:][A-Za-z0-9_:]*|\[[^\]]*\]|\S', re.I)
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def selectors(expr: str) -> list[tuple[str, str]]:
    """`(metric, '{matchers}')` for each vector selector of a PromQL expression: a name that is
    not called as a function, not a keyword, not in the label list of by/without/on/ignoring/
    group_left/group_right, not a label name inside {...}."""
    toks = _TOKEN.findall(expr)
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t.lower() in _GROUPING and nxt == "(":
            i = toks.index(")", i + 1) + 1
            continue
        if _IDENT.fullmatch(t) and t.lower() not in _KEYWORDS and nxt != "(":
            matchers = ""
            if nxt == "{":
                j = toks.index("}", i + 1)
                matchers = "".join(toks[i + 1:j + 1])
                i = j
            out.append((t, matchers))
        i += 1
    return out


def matcher_labels(matchers: str) -> dict[str, str]:
    """{label: 'op value'} of a '{a="x",b=~"y"}' text."""
    return {m.group(1): m.group(2) + m.group(3)
            for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")',
                                 matchers)}


# -- dashboards: their queries with the variables at their defaults ----------------------------

def dashboard_variables(board: dict, range_s: int) -> dict[str, str]:
    """Every variable at what a fresh dashboard shows: All (its allValue) for multi-value query
    variables, else the current or first option; Grafana's own ($__rate_interval, ...)."""
    values = {"__rate_interval": "1m", "__interval": "10s", "__range": f"{range_s}s",
              "__range_s": str(range_s), "datasource": "prometheus"}
    for v in board.get("templating", {}).get("list", []):
        cur = (v.get("current") or {}).get("value")
        cur = cur[0] if isinstance(cur, list) and cur else cur
        if v.get("includeAll") and cur in (None, "$__all"):
            values[v["name"]] = v.get("allValue") or ".*"
        elif cur:
            values[v["name"]] = cur
        elif v.get("options"):
            values[v["name"]] = v["options"][0]["value"]
    return values


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value")
        return values[name]
    return re.sub(r"\$\{([A-Za-z_]+)(?::[a-z]+)?\}|\$([A-Za-z_]+)", one, text)


def dashboard_queries(board: dict, range_s: int) -> list[tuple[str, str]]:
    """(where, expr) for every panel target and every query variable, substituted."""
    values = dashboard_variables(board, range_s)
    out = []
    panels = list(board.get("panels", []))
    for p in list(panels):
        panels.extend(p.get("panels", []))
    for p in panels:
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((f"panel {p.get('title')!r} {t.get('refId')}",
                            substitute(t["expr"], values)))
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_]+)\)\s*", q, re.S)
            if m:
                out.append((f"variable ${v['name']}", substitute(m.group(1), values)))
    return out
