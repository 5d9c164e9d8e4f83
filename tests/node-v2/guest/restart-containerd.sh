#!/bin/sh
# Restarts the node's containerd with the command line and environment it runs with (its
# config file re-read), detached from the caller; running containers keep running (their
# shims do not belong to containerd). Used by tests/node-v2/nri.py: a runtime restart while
# pods start, and NRI turned off and on; by the systemd node's
# protection proof. Waits until the new containerd answers.
set -eu
G=$1
if [ "$(cat /proc/1/comm)" = systemd ]; then
    # The systemd node: its unit holds the command line (KillMode=process: the shims stay).
    systemctl restart kv2-containerd.service
    pid=$(systemctl show -p MainPID --value kv2-containerd.service)
    ctr=$(dirname "$(readlink "/proc/$pid/exe")")/ctr
    i=0
    until "$ctr" --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -lt 120 ] || { echo "containerd did not answer in 60 s" >&2; exit 1; }
        sleep 0.5
    done
    exit 0
fi
pid=$(cat "$G/containerd.pid")
args=$(tr '\0' ' ' <"/proc/$pid/cmdline")
# The new one in the old one's cgroup (the caller's is the guest agent's).
cg=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
# containerd finds its shim and runc on PATH: keep the one init gave it.
path=$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^PATH=//p')
bin=${args%% *}
kill "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 200 ] || { echo "containerd $pid did not exit" >&2; exit 1; }
    sleep 0.1
done
# shellcheck disable=SC2086 # the recorded argv, no argument holds a space
PATH=$path setsid "$(dirname "$0")/in-cgroup.sh" "$cg" $args </dev/null >>"$G/logs/containerd.log" 2>&1 &
echo $! >"$G/containerd.pid"
i=0
until "$(dirname "$bin")/ctr" --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 120 ] || { echo "containerd did not answer in 60 s" >&2; exit 1; }
    sleep 0.5
done
