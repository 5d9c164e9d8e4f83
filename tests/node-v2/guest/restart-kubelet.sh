#!/bin/sh
# Restarts the node's kubelet with the command line it runs with (its config file re-read),
# detached from the caller. Used by the suite to switch the kubelet's own Memory QoS on.
set -eu
G=$1
if [ "$(cat /proc/1/comm)" = systemd ]; then
    # The systemd node: its unit holds the command line (and writes kubelet.pid again).
    exec systemctl restart kv2-kubelet.service
fi
pid=$(cat "$G/kubelet.pid")
args=$(tr '\0' ' ' <"/proc/$pid/cmdline")
# The new one in the old one's cgroup (the caller's is the guest agent's).
cg=$(sed -n 's/^0:://p' "/proc/$pid/cgroup")
kill "$pid"
i=0
while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 100 ] || { echo "kubelet $pid did not exit" >&2; exit 1; }
    sleep 0.1
done
# shellcheck disable=SC2086 # the recorded argv, no argument holds a space
setsid "$(dirname "$0")/in-cgroup.sh" "$cg" $args </dev/null >>"$G/logs/kubelet.log" 2>&1 &
echo $! >"$G/kubelet.pid"
