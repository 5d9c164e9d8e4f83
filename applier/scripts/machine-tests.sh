#!/usr/bin/env bash
# The applier's machine tests: the ones marked #[ignore = "needs ..."] because they need root
# and real kernel interfaces (cgroup v1 and v2, NUMA, perf). `cargo test` reports them as
# ignored; this runs them with --ignored. Root and cgroup v1 are required: without them this
# fails loudly under CI (CI=true, which provides them) and says loudly that nothing ran
# elsewhere. A PMU is optional hardware: without one the needs_pmu_* tests stay ignored.
# Any other missing piece makes its tests fail with their "needs ..." message.
set -euo pipefail
cargo=${CARGO:-cargo}

missing=""
[ "$(id -u)" = 0 ] || missing="root"
[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] || missing="${missing:+$missing, }cgroup v1 at /sys/fs/cgroup/memory"
if [ -n "$missing" ]; then
    if [ "${CI:-}" = true ]; then
        echo "machine-tests: FAILED: CI must provide $missing" >&2
        exit 1
    fi
    echo "machine-tests: NOT RUN: this machine lacks $missing (the tests stay ignored)" >&2
    exit 0
fi

skip=()
if [ ! -e /sys/bus/event_source/devices/cpu ]; then
    echo "machine-tests: no PMU here (/sys/bus/event_source/devices/cpu): needs_pmu_* tests stay ignored" >&2
    skip=(--skip needs_pmu_)
fi
exec "$cargo" test -p koord-applier --no-fail-fast -- --ignored "${skip[@]}"
