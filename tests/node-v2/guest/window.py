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

ROOT = "/sys/fs/cgroup/kubepods/burstable"


def main() -> None:
    count, want, timeout = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    poll = float(sys.argv[4]) if len(sys.argv) > 4 else 0.01
    global ROOT
    ROOT = sys.argv[5] if len(sys.argv) > 5 else ROOT
    known = {d for d in os.listdir(ROOT) if d.startswith("pod")}  # pods already there: not ours
    seen: dict[str, float] = {}
    done: dict[str, float] = {}
    t_end = time.monotonic() + timeout
    while len(done) < count and time.monotonic() < t_end:
        now = time.monotonic()
        for pod in os.listdir(ROOT):
            if not pod.startswith("pod") or pod in known:
                continue
            try:
                kids = os.listdir(f"{ROOT}/{pod}")
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
                    with open(f"{ROOT}/{key}/memory.min") as f:
                        if f.read().strip() == want:
                            done[key] = now
                except OSError:
                    pass
        time.sleep(poll)
    windows = sorted(done[k] - seen[k] for k in done)
    print(json.dumps({"protected": len(done), "seen": len(seen), "windows": windows}))


if __name__ == "__main__":
    main()
