#!/usr/bin/env python3
"""The unprotected window, measured on the node itself: for every new container cgroup under
DIR/pod<uid>/<64-hex id>, the time from its directory appearing (runc makes it just before the
container's first instruction, so this is an upper bound of the window) to FILE in it holding
EXPECTED. Polls every POLL seconds until COUNT containers have been seen holding it or TIMEOUT
passes; prints one JSON object. Pod sandboxes are container cgroups too: they are counted as
seen and, holding no value of the product's, never as done.

  window.py COUNT FILE EXPECTED TIMEOUT POLL DIR

The cgroup v2 node: memory.min of LS pods under /sys/fs/cgroup/kubepods/burstable; the v1 node:
memory.limit_in_bytes of batch pods under /sys/fs/cgroup/memory/kubepods/besteffort.
"""

import json
import os
import sys
import time


def watch(root: str, count: int, file: str, want: str, timeout: float, poll: float) -> dict:
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
                    with open(f"{root}/{key}/{file}") as f:
                        if f.read().strip() == want:
                            done[key] = now
                except OSError:
                    pass
        time.sleep(poll)
    windows = sorted(done[k] - seen[k] for k in done)
    return {"protected": len(done), "seen": len(seen), "windows": windows}


def main() -> None:
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    count, file, want, timeout, poll, root = sys.argv[1:]
    print(json.dumps(watch(root, int(count), file, want, float(timeout), float(poll))))


if __name__ == "__main__":
    main()
