#!/usr/bin/env bash
# `make test`: everything CI runs, in lanes, so that a cold run (empty caches) fits CI's budget
# on 2 cores. The Go builds are long and partly single-threaded, the Rust steps leave cores idle
# while their tests wait on sockets, timers and valgrind: run side by side, each fills the
# other's gaps.
#
#   builds (background, from the start): helm, cargo-deny and cargo-shear, Kubernetes
#          (kube-apiserver, kubelet, kube-proxy, kube-scheduler, kube-controller-manager,
#          kubectl), etcd and containerd 2, each built once per version and cached
#          (tests/build.sh)
#   rust   (foreground): make unit (its chart tests wait for helm), make perf, make images (the
#          release binaries the suites install), make lint (its cargo tools come from builds)
#   kernel (background, from the start): the cgroup v2 node's User-Mode Linux kernel (11
#          CPU-minutes cold, nothing warm), beside the builds so that it is ready when the
#          suites start; the v2 lanes wait for it on its builder's lock, the host lane does not
#          need it
#   suites (once builds and rust are done): tests/suites.sh
#
# Usage: tests/all.sh (as `make test`; `make suites` runs tests/suites.sh alone). Each step's
# log is printed when the step ends; a timeline closes the run. Exits non-zero if any step failed.
# KOORD_TEST_LOG_DIR keeps the logs (default: a new temp dir).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
export LANES_LOG_DIR=${KOORD_TEST_LOG_DIR:-$(mktemp -d /tmp/koord-test.XXXXXX)}
# shellcheck source=tests/lib/lanes.sh
source "$here/lib/lanes.sh"
MAKE=${MAKE:-make}

# Niced: the Rust lane runs tests that hold servers to latency bounds (tests/attack) and the
# soak; the builds take the cycles those leave.
step builds nice -n 10 env KOORD_BUILD_KERNEL=0 "$here/build.sh" &
builds=$!
# The v2 lanes need the kernel only when the suites start, after the builds: built beside them
# (at the builds' priority), it is ready by then on a cold run instead of holding the v2 lanes
# back by its own build time.
step kernel nice -n 10 "$here/node-v2/uml/kernel.sh" build &
kernel=$!

step unit "$MAKE" --no-print-directory unit
step perf "$MAKE" --no-print-directory perf
# The release binaries and the images every node suite installs, built once here rather than
# by the first suite that needs them while the others wait on cargo's lock.
step images "$MAKE" --no-print-directory images
# Last: its cargo-deny and cargo-shear come from the builds lane.
step lint "$MAKE" --no-print-directory lint
wait "$builds"

# The suites run even after a failed lint, unit or perf step (one CI run then shows every
# failure); they cannot run without their binaries.
if grep -qxE 'builds|images' "$LANES_LOG_DIR/failed" 2>/dev/null; then
    echo "all: not running the suites: $(lanes_failed)failed" >&2
else
    KOORD_BUILD_KERNEL=0 step suites "$here/suites.sh"
fi
wait "$kernel"
lanes_timeline
failed=$(lanes_failed)
if [[ -n $failed ]]; then
    echo "all: FAILED: $failed(logs in $LANES_LOG_DIR)"
    exit 1
fi
echo "all: passed"
