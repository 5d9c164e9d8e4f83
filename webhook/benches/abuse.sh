#!/usr/bin/env bash
# Abuse figures for the README: the release build of webhook/tests/server_abuse.rs at full
# size. One server process holds, at once, 5,000 silent TLS connections (cap 1,024: the oldest
# silent ones are evicted), 200 connections sending a request head at one byte per second,
# and two clients posting 3 MiB bodies back to back, while a normal client sends admissions
# over a kept-alive connection for $SECONDS_PER_ROUND seconds. Prints one ABUSE line per round
# (normal client's p50/p99/max, peak RSS of the server) and the load average around it.
#
#   webhook/benches/abuse.sh                  # 3 rounds of 20 s
#   ROUNDS=1 IDLE=10000 webhook/benches/abuse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
IDLE=${IDLE:-5000}
SLOW=${SLOW:-200}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-20}
MAX_CONNECTIONS=${MAX_CONNECTIONS:-1024}

# Both ends of every connection live on this machine: the client side needs one descriptor
# per connection, the server one per admitted connection.
need=$((IDLE + SLOW + 1024))
if [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
echo "ulimit -n $(ulimit -n); $(nproc) CPUs"

cargo test --release -q -p koord-webhook --test server_abuse --no-run
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  ABUSE_IDLE=$IDLE ABUSE_SLOW=$SLOW ABUSE_SECONDS=$SECONDS_PER_ROUND \
    ABUSE_MAX_CONNECTIONS=$MAX_CONNECTIONS ABUSE_HEADER_TIMEOUT_SECS=10 \
    cargo test --release -q -p koord-webhook --test server_abuse -- --nocapture --exact \
    idle_slow_and_large_clients_do_not_starve_admissions 2>&1 | grep -E '^.*ABUSE|panicked|FAILED' | sed 's/^.*ABUSE/ABUSE/'
  echo "round $round: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
done
