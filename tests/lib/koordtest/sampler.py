"""One background sampler for the suites: `read()` every `every` seconds in a thread, each value
kept with its time (seconds since `t0`, monotonic clock). A read that raises leaves a gap and is
counted (`missed`): a sampler measures, the suite decides what a gap means."""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Sampler(Generic[T]):
    """Starts at once; `stop()` ends it and returns [(seconds since t0, value)]."""

    def __init__(self, read: Callable[[], T], every: float, t0: float | None = None) -> None:
        self.read, self.every = read, every
        self.t0 = time.monotonic() if t0 is None else t0
        self.points: list[tuple[float, T]] = []
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - self.t0
            try:
                self.points.append((t, self.read()))
            except Exception:  # noqa: BLE001 - a gap in the series, counted
                self.missed += 1
            self._stop.wait(self.every)

    def stop(self) -> list[tuple[float, T]]:
        self._stop.set()
        self._thread.join(10)
        return self.points

    def peak(self) -> T | None:
        """The largest value read so far (None before the first)."""
        return max((v for _, v in self.points), default=None)
