#!/usr/bin/env bash
# The machine tests of the applier and its translator crate: the ones marked
# #[ignore = "needs ..."] because they need root and real kernel interfaces (cgroup v1 and v2,
# NUMA, perf). `cargo test` reports them as
# ignored; this runs them with --ignored. Root and cgroup v1 are required: without them this
# fails (exit 1) naming what is missing, unless told that not running them is fine:
#   applier/scripts/machine-tests.sh --allow-not-run
#   KOORD_MACHINE_TESTS_ALLOW_NOT_RUN=1 applier/scripts/machine-tests.sh
# then it says "NOT RUN" and exits 0. Under CI (CI=true) a missing piece always fails.
# A PMU is optional hardware: without one the needs_pmu_* tests stay ignored, with one the
# no_pmu_* tests (their twins, which check the start without one). Any other
# missing piece makes its tests fail with their "needs ..." message.
# A fresh machine gets what it can install (not a cgroup v1 kernel) from .ci/run.
set -euo pipefail
cargo=${CARGO:-cargo}

allow_not_run=${KOORD_MACHINE_TESTS_ALLOW_NOT_RUN:-0}
for arg in "$@"; do
    case $arg in
        --allow-not-run) allow_not_run=1 ;;
        *) echo "machine-tests: unknown argument $arg (usage: $0 [--allow-not-run])" >&2; exit 2 ;;
    esac
done

missing=""
[ "$(id -u)" = 0 ] || missing="root"
[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] || missing="${missing:+$missing, }cgroup v1 at /sys/fs/cgroup/memory"
if [ -n "$missing" ]; then
    if [ "${CI:-}" = true ]; then
        echo "machine-tests: FAILED: CI must provide $missing" >&2
        exit 1
    fi
    if [ "$allow_not_run" = 1 ]; then
        echo "machine-tests: NOT RUN (allowed): this machine lacks $missing (the tests stay ignored)" >&2
        exit 0
    fi
    echo "machine-tests: FAILED: this machine lacks $missing; run as root on a cgroup v1 host," \
        "or pass --allow-not-run (KOORD_MACHINE_TESTS_ALLOW_NOT_RUN=1) to skip them knowingly" >&2
    exit 1
fi

# Each PMU test has a twin for the other kind of machine: the one this machine can run runs.
if [ ! -e /sys/bus/event_source/devices/cpu ]; then
    echo "machine-tests: no PMU here (/sys/bus/event_source/devices/cpu): needs_pmu_* tests stay ignored, no_pmu_* run" >&2
    skip=(--skip needs_pmu_)
else
    echo "machine-tests: a PMU here (/sys/bus/event_source/devices/cpu): no_pmu_* tests stay ignored, needs_pmu_* run" >&2
    skip=(--skip no_pmu_)
fi
# The systemd_real tests need systemd as PID 1 and a kubelet on its driver: the systemd node
# of tests/node-v2 (KOORD_NODE_V2_PART=systemd) runs them in its guest before the install, in
# `make test`. On a host without them they stay ignored here.
if [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ]; then
    echo "machine-tests: PID 1 is not systemd: systemd_real::* stay ignored here (the node-v2 systemd part runs them in its guest)" >&2
    skip+=(--skip systemd_real::)
fi
# The translator's own (statfs on this machine's cgroup v1 root) run with the applier's. Built as
# `cargo test --workspace` builds (the workspace's features, the same binaries): selecting only
# the applier and the translator would resolve the dependencies' features without the webhook's
# and compile tokio, hyper, kube and the crates above them a second time (minutes of CPU on a cold
# run). The webhook's ignored tests are others' (the chart tests: `make unit`; the HTTP/2 attack:
# `make perf`), skipped by name.
exec "$cargo" test --workspace --no-fail-fast -- --ignored --skip manifests:: --skip server_abuse_h2:: "${skip[@]}"
