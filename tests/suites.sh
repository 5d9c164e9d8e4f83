#!/usr/bin/env bash
# The real-cluster suites of `make test`, in two lanes at once:
#
#   host (foreground): tests/e2e/run, then tests/node/run, then the NUMA guest, then the scale
#                      suite's short size (100 kwok nodes); one at a time, because e2e and the v1
#                      node both make host kubepods cgroups and bind their own fixed ports, and
#                      the scale suite loads both cores (it ends about when node-v2 does);
#   v2 (background):   tests/node-v2/run, the cgroup v2 node in a User-Mode Linux guest (its own
#                      kernel, tap, addresses and ports: slot 0; nothing shared with the host
#                      lane but the cached Kubernetes build);
#   v2-systemd (background): its systemd part, a second such node with systemd as PID 1 and
#                      the kubelet's systemd driver on its default gates, cgroupRoot /
#                      (kubepods.slice: the production shape) (slot 1): the protection proof
#                      (A, B, C0, C) runs there, not on the cgroupfs node.
#   then, alone:       the v1 node's colocation scenario, short form (NGINX's tail latency beside
#                      FFmpeg: a latency figure needs a quiet machine, so nothing else runs).
#
# Each suite's log is printed when it ends, with its wall time. Exits non-zero if any suite
# failed. KOORD_SUITES_LOG_DIR keeps the logs (default: tests/all.sh's, else a temp dir).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LANES_LOG_DIR=${KOORD_SUITES_LOG_DIR:-${LANES_LOG_DIR:-$(mktemp -d /tmp/koord-suites.XXXXXX)}}
# shellcheck source=tests/lib/lanes.sh
source "$here/lib/lanes.sh"

# Every binary both lanes need, before they start (a no-op when tests/all.sh built them; the
# lanes would wait on the builders' locks anyway, and building first keeps their timings honest).
# Under tests/all.sh (KOORD_BUILD_KERNEL=0) the v2 node's kernel is still being built beside
# this: the v2 lanes wait for it on its builder's lock, the host lane starts at once.
step build "$here/build.sh" || { echo "suites: the builds failed" >&2; exit 1; }

KOORD_V2_SLOT=0 step node-v2 "$here/node-v2/run" &
v2=$!
KOORD_V2_SLOT=1 KOORD_NODE_V2_PART=systemd KOORD_V2_KUBELET_CGROUP_ROOT=/ step node-v2-systemd "$here/node-v2/run" &
v2s=$!
step e2e "$here/e2e/run"
step node "$here/node/run"
step numa env KOORD_APPLIER_PROFILE=release "$here/numa/run-two-node-guest.sh"
step scale "$here/scale/run"
wait "$v2" "$v2s"
KOORD_NODE_FULL=1 KOORD_NODE_ONLY='^colocation' KOORD_NODE_COLOC=short step colocation "$here/node/run"

failed=$(lanes_failed)
if [[ -n $failed ]]; then
    echo "suites: FAILED: $failed(logs in $LANES_LOG_DIR)"
    exit 1
fi
echo "suites: all passed (e2e, node, numa, scale; node-v2 and its systemd part beside them; colocation)"
