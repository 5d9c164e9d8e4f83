#!/usr/bin/env bash
# `make test`: everything CI runs, in lanes ordered by what each needs, so that a cold run (empty
# caches) fits CI's budget on 2 cores. The cgroup v2 nodes are the long pole and spend most of
# their time waiting on their guests: they start as soon as their inputs are built, and the rest
# (the Rust tests, the host suites, the performance counts) fills the cores beside them.
#
#   1. what the v2 nodes need, and only that: Kubernetes, etcd and containerd 2 (tests/build.sh
#      nodes) and the User-Mode Linux kernel (tests/node-v2/uml/kernel.sh), niced, beside
#      `make images` (the release binaries and the images every node suite installs), then the
#      Rust lane: `make unit UNIT_ATTACK=0` (its compile niced; the attack tests left for the
#      end), `make lint` and `make perf-counts` (niced);
#   2. tests/suites.sh v2 (two guests) in the background; beside it the host: helm, the cargo
#      tools and kwok (tests/build.sh tools), then tests/suites.sh host (e2e, v1 node, NUMA
#      guest, scale);
#   3. alone, on a quiet machine: tests/suites.sh quiet (colocation, a latency figure), `make
#      attack` (the attack tests' small forms: latency bounds under hostile connections; beside
#      the suites a lock-out test missed its bound) and `make perf-latency` (the HTTP/2
#      attacks' normal-client p99 and the soak).
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

ok() { ! grep -qxE "$1" "$LANES_LOG_DIR/failed" 2>/dev/null; }

# 1. The v2 nodes' inputs. The Go builds and the kernel niced: the release build beside them is
# the one of these that also feeds the host lanes.
step builds-nodes nice -n 10 env KOORD_BUILD_KERNEL=0 "$here/build.sh" nodes &
builds=$!
step kernel nice -n 10 "$here/node-v2/uml/kernel.sh" build &
kernel=$!
step images "$MAKE" --no-print-directory images
# The Rust lane before the suites: beside them (load 7 to 12 on 2 cores) the guests' protection
# window and async reclaim comparison missed their bounds.
step unit-build nice -n 10 "${CARGO:-cargo}" test --workspace --no-run -q
step unit "$MAKE" --no-print-directory unit UNIT_ATTACK=0
step lint nice -n 10 "$MAKE" --no-print-directory lint
step perf-counts nice -n 10 "$MAKE" --no-print-directory perf-counts
wait "$builds" "$kernel"

# 2. The v2 lanes, then the host suites beside them. A lane whose inputs failed to build
# does not run (the failed build is the run's failure).
v2=
if ok 'builds-nodes|kernel|images'; then
    "$here/suites.sh" v2 &
    v2=$!
else
    echo "all: not running the v2 suites: $(lanes_failed)failed" >&2
fi
step builds-tools nice -n 10 "$here/build.sh" tools
if ok 'builds-nodes|builds-tools|images'; then
    "$here/suites.sh" host
else
    echo "all: not running the host suites: $(lanes_failed)failed" >&2
fi
[[ -z $v2 ]] || wait "$v2"

# 3. Alone.
if ok 'builds-nodes|images'; then
    "$here/suites.sh" quiet
fi
step attack "$MAKE" --no-print-directory attack
step perf-latency "$MAKE" --no-print-directory perf-latency
lanes_timeline
lanes_why
failed=$(lanes_failed)
if [[ -n $failed ]]; then
    echo "all: FAILED: $failed(logs in $LANES_LOG_DIR)"
    exit 1
fi
echo "all: passed"
