"""Prometheus text format, as the webhook, the applier and kube-apiserver serve it."""

from __future__ import annotations

import re

Metrics = dict[tuple[str, frozenset], float]


def parse_metrics(text: str) -> Metrics:
    """{(name, frozenset of (label, value)): value}; a trailing timestamp is ignored."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?", line)
        if m:
            labs = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            out[(m.group(1), labs)] = float(m.group(3))
    return out


def metric_sum(metrics: Metrics, metric: str, **want: str) -> float:
    """The sum of every series of `metric` whose labels include `want`."""
    return sum(v for (n, labs), v in metrics.items()
               if n == metric and all((k, w) in labs for k, w in want.items()))


def percentile(values: list[float], p: float) -> float:
    """Nearest rank."""
    v = sorted(values)
    return v[max(0, min(len(v) - 1, -(-int(p * len(v)) // 100) - 1))]
