#!/usr/bin/env python3
"""The unprotected window, measured inside the node: for every new container cgroup under
kubepods/burstable/pod<uid>/<id>, the time from its directory appearing (runc makes it just
before the container's first instruction, so this is an upper bound of the window) to
`memory.min` holding the expected value. Polls every POLL seconds until COUNT containers have
been seen protected or TIMEOUT passes; prints one JSON object.

  window.py COUNT EXPECTED_MEMORY_MIN TIMEOUT [POLL [BURSTABLE_DIR]]
"""

import json
import os
import sys
import time

BURSTABLE = "/sys/fs/cgroup/kubepods/burstable"


def watch(root: str, count: int, want: str, timeout: float, poll: float) -> dict:
    """The windows of the first `count` containers under `root` that are new to it."""
    known = {d for d in os.listdir(root) if d.startswith("pod")}  # pods already there: not ours
    seen: dict[str, float] = {}
    done: dict[str, float] = {}
    t_end = time.monotonic() + timeout
    while len(done) < count and time.monotonic() < t_end:
        now = time.monotonic()
        for pod in os.listdir(root):
            if not pod.startswith("pod") or pod in known:
                continue
            try:
                kids = os.listdir(f"{root}/{pod}")
            except FileNotFoundError:
                continue
            for c in kids:
                if len(c) != 64:
                    continue
                key = f"{pod}/{c}"
                if key in done:
                    continue
                seen.setdefault(key, now)
                try:
                    with open(f"{root}/{key}/memory.min") as f:
                        if f.read().strip() == want:
                            done[key] = now
                except OSError:
                    pass
        time.sleep(poll)
    windows = sorted(done[k] - seen[k] for k in done)
    return {"protected": len(done), "seen": len(seen), "windows": windows}


def main() -> None:
    a = sys.argv[1:]
    print(json.dumps(watch(a[4] if len(a) > 4 else BURSTABLE, int(a[0]), a[1], float(a[2]),
                           float(a[3]) if len(a) > 3 else 0.01)))


if __name__ == "__main__":
    main()
