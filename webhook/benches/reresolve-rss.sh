#!/usr/bin/env bash
# The Lease holder's memory over re-resolution passes of many pods (webhook/tests/attack/reresolve_memory.rs
# at full size, release build): the re-resolver as `serve` runs it against the fake API server
# in a process of its own; VmRSS after each of four passes (patch all, list, patch all, list)
# and the peak VmHWM. Run as shipped (transparent huge pages off) and, for comparison, with them
# on as the binary had them before. Figures: docs/benchmarks.md (re-resolver memory).
#
#   webhook/benches/reresolve-rss.sh [PODS]    (default 50000; ~10 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
pods=${1:-50000}
cargo test --release -q -p koord-webhook --test attack --no-run
for thp in 0 1; do
    KOORD_RERESOLVE_RSS_PODS=$pods KOORD_RERESOLVE_RSS_THP=$thp \
        cargo test --release -q -p koord-webhook --test attack -- reresolve_memory:: --nocapture 2>&1 |
        grep -E '^(pass [0-9]|reresolve-rss)'
done
