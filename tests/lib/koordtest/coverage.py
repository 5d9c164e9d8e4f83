"""What a series of samples from tests/lib/sample.c (koord-sample) saw of its window, and what
it could not see.

A bound like "never below its value longer than 1.0 s" holds only over the time the sampler
looked: a reset shorter than the gap between two samples can come and go unseen. So a series
is held to its rate by its longest gap, not by its count of samples: no two consecutive samples
more than MAX_GAP apart, except where the sampler can be shown to have been unable to run (the
guest stalled, or its scheduler kept the sampler waiting). Such a gap is counted as unobserved:
reported (count, total, longest, share of the window), and failing the series when its total is
above MAX_UNOBSERVED_SHARE of the window. A gap without that evidence fails at once: the
sampler could have looked and did not.

The evidence is what koord-sample writes after its values on each line, at the tick's start:
`late` (how long after its requested wake-up the tick started), `delay` (its own run delay:
time runnable but not running, /proc/self/schedstat's second field, cumulative) and `cpu` (the
time the guest's kernel accounted on its CPUs, /proc/stat's first line per CPU, cumulative). A
User-Mode Linux guest loses ticks while the host deschedules it, so a guest that accounted far
less time than passed was not running; the sampler's timer then fires late as well, which is
what an idle guest (its idle time comes from the clock, not from ticks) shows of such a stall.

Pure: the suites parse the guest's output and assert with it; tests/lib/test_koordtest.py holds
the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# The sampler runs at 10 Hz: three periods without a sample is a gap a repair (the applier's
# 0.25-s ancestors check) could fall into unseen.
MAX_GAP = 0.3
# Unobserved time a window may hold: above it the window says too little of what happened.
MAX_UNOBSERVED_SHARE = 0.05
# The lines' times are written to the millisecond: a difference of two of them is exact to half
# of one, so a gap of exactly MAX_GAP as written is not over it.
RESOLUTION = 0.0005


@dataclass(frozen=True)
class Tick:
    """One line of koord-sample: its time (seconds since the sampler started), its values (one
    per file: a number, "max", or None) and the evidence it recorded (None when the line has
    none or the guest could not give it)."""
    t: float
    values: list
    late: float | None = None
    delay: float | None = None
    cpu: float | None = None


def parse(text: str, nfiles: int) -> list[Tick]:
    """koord-sample's output: `[t, value...]`, or `[t, value..., {"late":..,"delay":..,"cpu":..}]`
    (lines without the evidence have none). A line of another shape is an error, not a gap."""
    ticks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        ev = {}
        if len(row) == 2 + nfiles and isinstance(row[-1], dict):
            ev = row[-1]
        elif len(row) != 1 + nfiles:
            raise ValueError(f"a sampler line of {len(row)} fields for {nfiles} files: {line!r}")
        ticks.append(Tick(float(row[0]), row[1:1 + nfiles], ev.get("late"), ev.get("delay"),
                          ev.get("cpu")))
    return ticks


@dataclass(frozen=True)
class Gap:
    """Two consecutive samples `seconds` apart from `start`, and the seconds of it the sampler
    can be shown unable to run (`stalled`, with `why`)."""
    start: float
    seconds: float
    stalled: float
    why: str

    def __str__(self) -> str:
        return f"at {self.start:.1f} s for {self.seconds:.2f} s ({self.why})"


def stall_evidence(a: Tick, b: Tick) -> tuple[float, str]:
    """How much of the time between samples a and b the sampler could not run, and every kind
    of evidence read. The kinds overlap (a stalled guest also wakes the sampler late), so the
    largest is taken, never their sum."""
    dt = b.t - a.t
    kinds = []
    if a.delay is not None and b.delay is not None:
        kinds.append((max(0.0, b.delay - a.delay), f"run delay {b.delay - a.delay:.2f} s"))
    if a.cpu is not None and b.cpu is not None:
        accounted = b.cpu - a.cpu
        kinds.append((max(0.0, dt - accounted), f"the guest accounted {accounted:.2f} s"))
    if b.late is not None:
        kinds.append((max(0.0, b.late), f"woke {b.late:.2f} s late"))
    if not kinds:
        return 0.0, "no evidence recorded"
    return max(k[0] for k in kinds), ", ".join(k[1] for k in kinds)


@dataclass
class Coverage:
    """The window (first to last sample) and its gaps over max_gap: `unobserved` (the sampler
    shown unable to run for all but max_gap of it) and `unexplained` (not)."""
    start: float
    end: float
    samples: int
    max_gap: float = MAX_GAP
    max_share: float = MAX_UNOBSERVED_SHARE
    unobserved: list[Gap] = field(default_factory=list)
    unexplained: list[Gap] = field(default_factory=list)

    @property
    def window(self) -> float:
        return self.end - self.start

    @property
    def total(self) -> float:
        return sum(g.seconds for g in self.unobserved)

    @property
    def longest(self) -> float:
        return max([0.0] + [g.seconds for g in self.unobserved])

    @property
    def share(self) -> float:
        return self.total / self.window if self.window > 0 else 0.0

    def text(self) -> str:
        out = f"{self.samples} samples over {self.window:.0f} s"
        n = len(self.unexplained)
        if n:
            out += (f", {n} gap{'s' if n > 1 else ''} over {self.max_gap} s with no stall to "
                    f"explain {'them' if n > 1 else 'it'} ("
                    + "; ".join(map(str, self.unexplained[:3])) + (" ..." if n > 3 else "") + ")")
        else:
            out += f", no gap over {self.max_gap} s"
        if not self.unobserved:
            return out + " and none unobserved"
        n = len(self.unobserved)
        return (f"{out} {'and' if self.unexplained else 'except'} {n} guest "
                f"stall{'s' if n > 1 else ''} counted as unobserved: {self.total:.1f} s in all, "
                f"longest {self.longest:.1f} s, {100 * self.share:.1f}% of the window")

    def failures(self) -> list[str]:
        out = []
        if self.samples < 2:
            out.append(f"{self.samples} samples: no window")
        if self.unexplained:
            n = len(self.unexplained)
            out.append(f"{n} gap{'s' if n > 1 else ''} over {self.max_gap} s between samples "
                       f"without the sampler shown unable to run: "
                       + ", ".join(map(str, self.unexplained[:5])))
        if self.share > self.max_share:
            out.append(f"{self.total:.1f} s unobserved (guest stalls), {100 * self.share:.1f}% "
                       f"of the {self.window:.0f}-s window, above {100 * self.max_share:.0f}%: "
                       + ", ".join(map(str, sorted(self.unobserved, key=lambda g: -g.seconds)[:5])))
        return out


def coverage(ticks: list[Tick], max_gap: float = MAX_GAP,
             max_share: float = MAX_UNOBSERVED_SHARE) -> Coverage:
    """Every gap over max_gap between consecutive samples, sorted into unobserved (the evidence
    leaves at most max_gap of it unexplained) and unexplained."""
    cov = Coverage(ticks[0].t if ticks else 0.0, ticks[-1].t if ticks else 0.0, len(ticks),
                   max_gap, max_share)
    for a, b in zip(ticks, ticks[1:]):
        dt = b.t - a.t
        if dt <= max_gap + RESOLUTION:
            continue
        stalled, why = stall_evidence(a, b)
        gap = Gap(a.t, dt, stalled, why)
        (cov.unobserved if dt - stalled <= max_gap + RESOLUTION else cov.unexplained).append(gap)
    return cov


@dataclass(frozen=True)
class Run:
    """A run of samples below the wanted value: from its first sample below to the first at or
    above it (or the last sample), and `up_to` what it may have lasted when the time before its
    first sample below was unobserved (from the last sample at or above it)."""
    start: float
    seconds: float
    up_to: float

    def __str__(self) -> str:
        s = f"at {self.start:.0f} s for {self.seconds:.1f} s"
        if self.up_to > self.seconds:
            s += f" (up to {self.up_to:.1f} s: {self.up_to - self.seconds:.1f} s unobserved before it)"
        return s


def below_runs(ticks: list[Tick], ok: list[bool], unobserved: list[Gap] = ()) -> list[Run]:
    """The runs where `ok` (one per tick: the value at or above what is wanted) is False. A run
    still open at the end lasts to the last sample."""
    stalls = {g.start for g in unobserved}
    runs, first, before = [], None, None
    for i, (tick, good) in enumerate(zip(ticks, ok)):
        if not good and first is None:
            first = tick.t
            before = ticks[i - 1].t if i > 0 and ticks[i - 1].t in stalls else None
        elif good and first is not None:
            runs.append(Run(first, tick.t - first, tick.t - (before if before is not None else first)))
            first = None
    if first is not None:
        last = ticks[-1].t
        runs.append(Run(first, last - first, last - (before if before is not None else first)))
    return runs
