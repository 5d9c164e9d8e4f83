#!/usr/bin/env bash
# The real-cluster suites of `make test`, in lanes:
#
#   v2:          two cgroup v2 nodes in User-Mode Linux guests (their own kernel, tap, addresses
#                and ports, one slot each; nothing shared with the host but the cached Kubernetes
#                build), side by side:
#                  node-v2          tests/node-v2/run, the cgroupfs-driver node (slot 0);
#                  node-v2-systemd  its systemd part, systemd as PID 1 and the kubelet's systemd
#                                   driver on its default gates, cgroupRoot / (kubepods.slice:
#                                   the production shape) (slot 1): the protection proof (A, B,
#                                   C0, C), every systemd scenario, proactive reclaim with and
#                                   without swap. (Proactive reclaim in a third guest beside
#                                   them saved ten minutes but loaded 2 cores to 22: the
#                                   protection window's guest stalled 5.3% of it, the async
#                                   reclaim comparison missed its bound.)
#   host:        tests/e2e/run, then (once the systemd guest is past its last scenario sampled
#                at 10 Hz: the guests' windows and latency comparisons need the cores) tests/node/run,
#                the NUMA guest, the scale suite's short size (100 kwok nodes); one at a time,
#                because e2e and the v1 node both make host kubepods cgroups and bind their own
#                fixed ports, and the scale suite loads both cores;
#   quiet:       then, alone, the v1 node's colocation scenario, short form (NGINX's tail
#                latency beside FFmpeg: a latency figure needs a quiet machine).
#
# Usage: tests/suites.sh [all|v2|host|quiet] (default all: the builds, v2 beside host, then
# quiet; tests/all.sh runs the parts itself, each once its inputs are built). Each suite's log
# is printed when it ends, with its wall time. Exits non-zero if any suite failed.
# KOORD_SUITES_LOG_DIR keeps the logs (default: tests/all.sh's, else a temp dir).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LANES_LOG_DIR=${KOORD_SUITES_LOG_DIR:-${LANES_LOG_DIR:-$(mktemp -d /tmp/koord-suites.XXXXXX)}}
# shellcheck source=tests/lib/lanes.sh
source "$here/lib/lanes.sh"
part=${1:-all}

# Each part fails (returns 1) when one of its steps failed; `failed` collects their names.
failed=()
run() { # NAME CMD...: a step of this part
    step "$@" || failed+=("$1")
}

v2() {
    local lanes=() lane
    KOORD_V2_SLOT=0 step node-v2 "$here/node-v2/run" &
    lanes+=("node-v2 $!")
    KOORD_NODE_V2_PART=systemd KOORD_V2_KUBELET_CGROUP_ROOT=/ KOORD_V2_SLOT=1 \
        step node-v2-systemd "$here/node-v2/run" &
    lanes+=("node-v2-systemd $!")
    for lane in "${lanes[@]}"; do
        wait "${lane#* }" || failed+=("${lane% *}")
    done
}

# The last scenario of the systemd guest sampled at 10 Hz; the guests' latency comparisons and
# sampled windows all come before it in their lanes.
GUESTS_SAMPLED_LAST='^(PASS|FAIL) a kubelet restart, then the QoS slices zeroed'
# At most this long a wait; then the host lane goes on anyway (a renamed scenario, a filter).
GUESTS_SAMPLED_CAP=${KOORD_SUITES_GUESTS_CAP:-1500}

# Waits until the v2 lanes are past their sampled and compared scenarios (or the systemd lane
# ended, or the cap): beside the v1 node, the NUMA guest and the scale suite (load 8 on 2 cores)
# the protection window's guest stalled 6.3% of it (bound 5%) and the async reclaim comparison
# read 2.2x (bound 1.25x); beside each other alone they hold. No v2 lane in this run: no wait.
wait_for_guests_sampled() {
    local log=$LANES_LOG_DIR/node-v2-systemd.log t0=$EPOCHSECONDS
    [[ -f $log ]] || return 0
    until grep -q -E "$GUESTS_SAMPLED_LAST" "$log" ||
        grep -q '^node-v2-systemd ' "$LANES_LOG_DIR/timeline" 2>/dev/null; do
        if ((EPOCHSECONDS - t0 >= GUESTS_SAMPLED_CAP)); then
            echo "[$(date -u +%H:%M:%S)] host: the systemd guest has not passed its sampled scenarios; going on at the cap (${GUESTS_SAMPLED_CAP} s)" >&2
            return 0
        fi
        sleep 5
    done
    echo "[$(date -u +%H:%M:%S)] host: waited $((EPOCHSECONDS - t0)) s for the guests' sampled scenarios" >&2
}

host() {
    # Ahead of the v2 lanes, which boot and install their guests meanwhile: e2e holds 1,000
    # pods re-resolved within 30 s (21 s beside them, 31 s once beside three guests starting).
    run e2e nice -n -5 "$here/e2e/run"
    wait_for_guests_sampled
    run node "$here/node/run"
    run numa env KOORD_APPLIER_PROFILE=release "$here/numa/run-two-node-guest.sh"
    run scale "$here/scale/run"
}

quiet() {
    KOORD_NODE_FULL=1 KOORD_NODE_ONLY='^colocation' KOORD_NODE_COLOC=short run colocation "$here/node/run"
}

case $part in
all)
    # Every binary the lanes need, before they start (a no-op when tests/all.sh built them;
    # building first keeps the lanes' timings honest).
    step build "$here/build.sh" || { echo "suites: the builds failed" >&2; exit 1; }
    v2 &
    v2_pid=$!
    host
    wait "$v2_pid"
    quiet
    # The v2 lanes ran in a subshell: every failed step of this run, from the lanes' record.
    read -ra failed <<<"$(lanes_failed)"
    ;;
v2 | host | quiet) "$part" ;;
*)
    echo "usage: tests/suites.sh [all|v2|host|quiet]" >&2
    exit 2
    ;;
esac

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "suites $part: FAILED: ${failed[*]} (logs in $LANES_LOG_DIR)"
    exit 1
fi
echo "suites $part: passed"
