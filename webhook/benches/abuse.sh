#!/usr/bin/env bash
# Abuse figures for the README: the release build of webhook/tests/attack/server_abuse.rs at full
# size. One server process holds, at once, 5,000 silent TLS connections (cap 1,024: the oldest
# silent ones are evicted), 200 connections sending a request head at one byte per second,
# and two clients posting 3 MiB bodies back to back, while a normal client sends admissions
# over a kept-alive connection for $SECONDS_PER_ROUND seconds. Then the HTTP/2 round
# (webhook/tests/attack/server_abuse_h2.rs at full size): $H2_ATTACKS, 1,000 attacking connections
# in all against the default cap of 1,024, while a normal HTTP/2 client sends admissions one
# after another. Prints one ABUSE line per round (normal client's p50/p99/max, peak RSS of the
# server) and the load average around it. Then the lock-out round
# (webhook/tests/attack/server_lockout.rs at full size): $HALF connections that keep a request head
# (HTTP/1.1) or a preface and frame (HTTP/2, where granted) half-sent with a byte every 5 s,
# plus $SILENT silent ones, from $LOCKOUT_SOURCES loopback addresses, reopening what the
# server closes, against the default cap of 1,024; a normal client sends admissions over
# kept-alive HTTP/1.1 and HTTP/2 connections and over new connections. Then the same attack
# from the normal client's own address ($LOCKOUT_SHARED_SOURCES addresses, the first the
# client's 127.0.0.1, at the default 512 per address), the client connecting only once the
# attack holds the address's slots (its second kept-alive connection offers h2 and is served
# in what it gets). Each LOCKOUT line gives the answered counts, p50/p99/max of each kind and
# the peak RSS; the round fails if a kind gets under 99% answered, a kept-alive p99 is at or
# above $LOCKOUT_P99_MS ms, the new connections' p99 at or above $LOCKOUT_NEW_P99_MS ms (when
# set), or the RSS reaches 64 MiB.
#
#   webhook/benches/abuse.sh                  # 3 rounds of 20 s: HTTP/1.1, HTTP/2, lock-out
#   ROUNDS=1 IDLE=10000 webhook/benches/abuse.sh
#   PROTOCOLS=lockout ROUNDS=1 webhook/benches/abuse.sh   # other addresses, then one shared
#   PROTOCOLS=h2 H2_SERVER_ARGS="--h2-max-concurrent-streams 200" webhook/benches/abuse.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
IDLE=${IDLE:-5000}
SLOW=${SLOW:-200}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-20}
MAX_CONNECTIONS=${MAX_CONNECTIONS:-1024}
PROTOCOLS=${PROTOCOLS:-"http1 h2 lockout"}
H2_ATTACKS=${H2_ATTACKS:-"stalled-bodies=250,stalled-small-bodies=150,limit-bodies=100,header-lists=200,zero-window=200,rapid-reset=20,continuation=20,ping-flood=30,settings-flood=30"}
H2_SERVER_ARGS=${H2_SERVER_ARGS:-}
HALF=${HALF:-3000}
SILENT=${SILENT:-5000}
LOCKOUT_SOURCES=${LOCKOUT_SOURCES:-2}
LOCKOUT_SHARED_SOURCES=${LOCKOUT_SHARED_SOURCES:-1}
LOCKOUT_P99_MS=${LOCKOUT_P99_MS:-5}
LOCKOUT_NEW_P99_MS=${LOCKOUT_NEW_P99_MS:-}
# The normal client's p99 under the HTTP/1.1 and HTTP/2 attacks: the median round must be under it.
ABUSE_P99_MS=${ABUSE_P99_MS:-5}
P99_LOG=$(mktemp)
trap 'rm -f "$P99_LOG"' EXIT

# Both ends of every connection live on this machine: the client side needs one descriptor
# per connection, the server one per admitted connection.
need=$((IDLE + SLOW + 2048))
[ "$need" -ge $((HALF + SILENT + 2048)) ] || need=$((HALF + SILENT + 2048))
if [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fi
echo "ulimit -n $(ulimit -n); $(nproc) CPUs"

cargo test --release -q -p koord-webhook --test attack --no-run
failed=0
for round in $(seq 1 "$ROUNDS"); do
  for protocol in $PROTOCOLS; do
    echo "round $round $protocol: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    case $protocol in
      http1)
        ABUSE_IDLE=$IDLE ABUSE_SLOW=$SLOW ABUSE_SECONDS=$SECONDS_PER_ROUND \
          ABUSE_MAX_CONNECTIONS=$MAX_CONNECTIONS ABUSE_HEADER_TIMEOUT_SECS=10 \
          cargo test --release -q -p koord-webhook --test attack -- --nocapture --exact \
          server_abuse::idle_slow_and_large_clients_do_not_starve_admissions 2>&1 \
          | grep -E '^.*ABUSE|panicked|FAILED' | sed 's/^.*ABUSE/ABUSE/' | tee -a "$P99_LOG" ;;
      h2)
        ABUSE_H2_ATTACKS=$H2_ATTACKS ABUSE_H2_SECONDS=$SECONDS_PER_ROUND \
          ABUSE_H2_SERVER_ARGS=$H2_SERVER_ARGS \
          KOORD_WEBHOOK_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/koord-webhook \
          cargo test --release -q -p koord-webhook --test attack -- server_abuse_h2:: --nocapture \
          --include-ignored --test-threads 1 2>&1 \
          | grep -E '^.*ABUSE|panicked|FAILED|above|took|answers' | sed 's/^.*ABUSE/ABUSE/' | tee -a "$P99_LOG" ;;
      lockout)
        for variant in "other $LOCKOUT_SOURCES half_sent_and_silent_connections_do_not_lock_admissions_out" \
          "shared $LOCKOUT_SHARED_SOURCES a_flood_from_the_clients_own_address_does_not_lock_it_out"; do
          read -r kind sources test <<<"$variant"
          echo "lock-out, $kind addresses: load average $(cut -d' ' -f1-3 /proc/loadavg)"
          # Both variants run; the script fails at the end if either did.
          if ! LOCKOUT_HALF=$HALF LOCKOUT_SILENT=$SILENT LOCKOUT_SOURCES=$sources LOCKOUT_PER_SOURCE=512 \
            LOCKOUT_MAX_CONNECTIONS=$MAX_CONNECTIONS LOCKOUT_SECONDS=$SECONDS_PER_ROUND \
            LOCKOUT_P99_MS=$LOCKOUT_P99_MS LOCKOUT_NEW_P99_MS=$LOCKOUT_NEW_P99_MS \
            cargo test --release -q -p koord-webhook --test attack -- --exact "server_lockout::$test" \
            --nocapture 2>&1 \
            | grep -E '^.*LOCKOUT|panicked|FAILED|answered|above|took' | sed 's/^.*LOCKOUT/LOCKOUT/'; then
            failed=1
          fi
        done ;;
    esac
    echo "round $round $protocol: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
# The normal client's p99 under the HTTP/1.1 and HTTP/2 attacks, every round, and the bound on
# the median round (one round can meet a burst of the machine's other work).
for kind in http1 h2; do
  if [ "$kind" = http1 ]; then pattern='^ABUSE idle='; else pattern='^ABUSE h2 caps=shipped '; fi
  p99s=$(grep -E "$pattern" "$P99_LOG" | sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' | sort -n)
  [ -n "$p99s" ] || continue
  n=$(wc -l <<<"$p99s")
  median=$(sed -n "$(( (n + 1) / 2 ))p" <<<"$p99s")
  echo "ABUSE_P99 $kind: rounds $n, p99 $(paste -sd' ' <<<"$p99s") ms, median $median ms (bound < $ABUSE_P99_MS ms)"
  if ! awk -v m="$median" -v b="$ABUSE_P99_MS" 'BEGIN {exit !(m < b)}'; then
    echo "FAIL: $kind: the normal client's median p99 $median ms is not under $ABUSE_P99_MS ms" >&2
    failed=1
  fi
done
exit $failed
