"""What every suite (tests/e2e, tests/node, tests/node-v2) asserts and waits with: the two
failure kinds, `check`, `wait_until` and Kubernetes quantities."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


class Fatal(Exception):
    """A prerequisite or setup step failed: the suite cannot go on."""


class Check(AssertionError):
    """A scenario's assertion failed."""


def check(cond: object, msg: str) -> None:
    if not cond:
        raise Check(msg)


def wait_until(what: str, fn: Callable[[], object], timeout: float, interval: float = 0.2):
    """Polls fn until it returns something truthy; returns it, or raises Check."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried, reported on timeout
            last_err = e
        if time.monotonic() > deadline:
            extra = f" (last error: {last_err})" if last_err else ""
            raise Check(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


# The apiserver canonicalises quantities: "1000" is stored as "1k".
_SUFFIX = {
    "": 1, "m": 0.001, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}


def quantity(q: str) -> float:
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(q))
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"unsupported quantity {q!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]
