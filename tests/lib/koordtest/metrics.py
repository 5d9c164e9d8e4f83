"""Prometheus text format, as the webhook, the applier and kube-apiserver serve it."""

from __future__ import annotations

import math
import re
import statistics

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


def counts_percentile(counts: dict[int, int], p: float) -> int:
    """wrk's definition over exact counts (latency -> how many requests took it, merged from
    several runs): the smallest latency whose cumulative count reaches round(p/100 * total + 0.5),
    with C's round (half away from zero, not Python's half to even). 0 when nothing was counted."""
    # C's round(x + 0.5) for x >= 0 is floor(x + 1).
    rank = math.floor(p / 100 * sum(counts.values())) + 1
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return max(counts, default=0)


def histogram_quantile(after: Metrics, before: Metrics, metric: str, q: float,
                       **want: str) -> float | None:
    """The q-quantile (0..1) of what a Prometheus histogram observed between two scrapes, as
    PromQL's histogram_quantile computes it: the bucket the rank falls in, interpolated
    linearly within it (the +Inf bucket answers its lower bound). Every series of
    `metric`_bucket whose labels include `want` is summed. None when nothing was observed."""
    buckets: dict[float, float] = {}
    for snapshot, sign in ((after, 1), (before, -1)):
        for (n, labs), v in snapshot.items():
            if n != f"{metric}_bucket" or not all((k, w) in labs for k, w in want.items()):
                continue
            le = dict(labs).get("le")
            if le is None:
                continue
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + sign * v
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for b in bounds:
        if buckets[b] >= rank:
            if b == float("inf"):
                return lower
            inside = buckets[b] - below
            return lower + (b - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = b, buckets[b]
    return lower


def paired_ratio_median(a: list[float], b: list[float]) -> tuple[float, list[float]]:
    """The median of b[i] / a[i] and the ratios, for measurements taken in pairs (round i of A
    and round i of B back to back, the order alternating from pair to pair). A guest's load
    moves both rounds of a pair together, so each ratio cancels what the pair shared, and the
    median drops the pairs one side's burst still reached: a bound held on it stays fixed
    instead of widening with the noise."""
    if len(a) != len(b) or not a:
        raise ValueError(f"pairs need as many rounds on each side, at least one: {a} {b}")
    if min(a) <= 0:
        raise ValueError(f"a round of A measured {min(a)}: no ratio to it")
    ratios = [y / x for x, y in zip(a, b)]
    return statistics.median(ratios), ratios
