#!/bin/sh
# PID 1 of the vehicle check's guest (vehicle.sh): what the node needs of its kernel, printed as
# `probe:` lines, then halt. The root is the host's, read-only; nothing is written.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null
echo "probe: kernel $(uname -r)"
if [ -r /proc/pressure/memory ]; then echo "probe: psi $(head -n 1 /proc/pressure/memory)"; else echo "probe: psi none"; fi
echo "probe: cgroup2 $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
# Threads doing floating point and hashing: every switch between them saves and restores the
# FP registers through the host's ptrace (PTRACE_SETREGSET NT_X86_XSTATE), which a kernel with
# the wrong buffer size fails (EFAULT at the first process, or EINVAL and a segfault here).
if python3 -B -c '
import hashlib, math, threading
def work(i, out):
    s = 0.0
    for k in range(1, 200000):
        s += math.sqrt(k * (i + 1)) / k
    h = hashlib.sha256()
    for k in range(20000):
        h.update(str(k * i).encode())
    out[i] = (round(s, 6), h.hexdigest())
want, got = {}, {}
for i in range(4):
    work(i, want)
ts = [threading.Thread(target=work, args=(i, got)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
assert got == want, (got, want)
'; then echo "probe: threads ok"; else echo "probe: threads FAILED (rc $?)"; fi
echo "probe: done"
halt -f
