#!/bin/sh
# in-cgroup.sh CGROUP CMD [ARGS...]: runs CMD in the cgroup v2 group CGROUP (a path below
# /sys/fs/cgroup, made if missing). The cgroupfs node's init starts each daemon in its own
# group under /system.slice, as systemd (or OpenRC) places services on a real node: the
# node's daemons then compete with kubepods for the CPU as one group, not each thread of
# containerd, its shims and runc on its own against the whole of kubepods.
set -eu
cg=/sys/fs/cgroup$1
shift
mkdir -p "$cg"
echo 0 >"$cg/cgroup.procs"
exec "$@"
