#!/usr/bin/env bash
# HTTP/2 load, the way kube-apiserver calls a webhook: few connections, many concurrent
# streams. `koord-webhook serve --standalone` and the floor server (same axum + rustls stack,
# handler only parses the AdmissionReview) side by side in one run, with h2load over TLS
# (ALPN h2): 1, 4 and 16 connections x 10 and 100 streams each.
#
#   webhook/benches/load-h2.sh                       # 10 s per run, unpinned
#   PIN=1 ROUNDS=3 webhook/benches/load-h2.sh         # server on CPU 1, h2load on CPU 0
#   BUILD=pgo PIN=1 webhook/benches/load-h2.sh        # both servers built with PGO (pgo.sh)
#   CONNS="4" STREAMS="100" webhook/benches/load-h2.sh
#   SERVER_ARGS="--h2-max-concurrent-streams 64" webhook/benches/load-h2.sh   # webhook flags
#
# Needs h2load (apt-get install -y nghttp2-client). p50/p99 come from h2load's per-request
# log (--log-file), CPU per admission from the server's utime+stime in /proc.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10}
CONNS=${CONNS:-"1 4 16"}
STREAMS=${STREAMS:-"10 100"}
ROUNDS=${ROUNDS:-1}
SERVERS=${SERVERS:-"webhook floor"}
SERVER_ARGS=${SERVER_ARGS:-}
PIN=${PIN:-0}
if [ "$PIN" = 1 ]; then SERVER_CPU=(taskset -c 1); GEN_CPU=(taskset -c 0); else SERVER_CPU=(); GEN_CPU=(); fi
FIXTURE=${FIXTURE:-webhook/tests/fixtures/pod-create.json}
command -v h2load >/dev/null || { echo "h2load not found: apt-get install -y nghttp2-client" >&2; exit 1; }

# shellcheck source=lib.sh
. webhook/benches/lib.sh
build_servers

compact_review "$FIXTURE"

h2() { # h2 PORT CONNS STREAMS SECONDS [LOG]
  "${GEN_CPU[@]}" h2load -t1 -c"$2" -m"$3" -D"$4" --warm-up-time=1 \
    -H 'content-type: application/json' -d "$WORK/review.json" ${5:+--log-file="$5"} \
    "https://127.0.0.1:$1/mutate-pod"
}

# run_h2load NAME PID PORT CONNS STREAMS -> one table row
run_h2load() {
  local name=$1 pid=$2 port=$3 c=$4 m=$5
  local log="$WORK/req.log" before after out
  rm -f "$log"
  before=$(cpu_ticks "$pid")
  out=$(h2 "$port" "$c" "$m" "$DURATION" "$log")
  after=$(cpu_ticks "$pid")
  local rps done_ok failed errored proto
  rps=$(awk '/^finished in/{gsub(",",""); print $4}' <<<"$out")
  # requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
  done_ok=$(awk '/^requests:/{print $8}' <<<"$out")
  failed=$(awk '/^requests:/{print $10 + $12 + $14}' <<<"$out")
  errored=$(awk '/^status codes:/{print $5 + $7 + $9}' <<<"$out")
  proto=$(awk '/^Application protocol:/{print $3}' <<<"$out")
  [ "$proto" = h2 ] || echo "WARNING: negotiated '$proto', not h2" >&2
  # The log has one line per measured request (warm-up excluded): start, status, microseconds.
  local p50 p99
  read -r p50 p99 < <(cut -f3 "$log" | sort -n \
    | awk '{ v[NR] = $1 } END { i50 = int(NR*0.50); i99 = int(NR*0.99); if (i50 < 1) i50 = 1; if (i99 < 1) i99 = 1;
             printf "%.2f %.2f\n", v[i50]/1000, v[i99]/1000 }')
  local hwm cpu_us
  hwm=$(hwm_mib "$pid")
  cpu_us=$(cpu_us_per_request $((after - before)) "$done_ok")
  printf "| %-8s | %5s x %-7s | %9.0f | %6s | %6s | %10s | %7s | %6s | %8s |\n" \
    "$name" "$c" "$m" "$rps" "$p50" "$p99" "$cpu_us" "$hwm" "$((failed + errored))" "$done_ok"
  echo "$name $c $m $rps" >> "$WORK/results"
}

echo "h2load -t1 -D$DURATION (1 s warm-up), fixture $(wc -c < "$WORK/review.json") bytes, $(nproc) cores, pinned=$PIN, load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$SERVER_ARGS" ] && echo "webhook flags: $SERVER_ARGS"
echo
echo "| server   | conns x streams |     req/s | p50 ms | p99 ms | CPU us/req | RSS MiB | errors | requests |"
echo "|----------|-----------------|-----------|--------|--------|------------|---------|--------|----------|"
port=20443
for round in $(seq 1 "$ROUNDS"); do
  for c in $CONNS; do
    for m in $STREAMS; do
      for name in $SERVERS; do
        port=$((port + 2))
        start_server "$name" "$port"
        pid=$STARTED
        run_h2load "$name" "$pid" "$port" "$c" "$m"
        if [ "$name" = webhook ]; then
          errors=$(curl -s "http://127.0.0.1:$((port + 1))/metrics" \
            | awk '/^koord_webhook_admissions_total/ && /outcome="(error|denied)"/ {s += $NF} END {print s+0}')
          # When its duration ends h2load resets the streams in flight (up to conns x streams),
          # whose bodies the server then fails to read: counted as errors, not answered.
          if [ "$errors" -gt $((c * m)) ]; then
            echo "WARNING: $errors admissions answered error/denied" >&2
          elif [ "$errors" -gt 0 ]; then
            echo "($errors bodies cut off by h2load's stop, at most $((c * m)) streams in flight)" >&2
          fi
        fi
        kill "$pid"; wait "$pid" 2>/dev/null || true
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
awk '{ k = $2" x "$3; s[$1" "k] += $4; n[$1" "k]++; keys[k] = 1 }
  END { for (k in keys) { w = s["webhook "k]/n["webhook "k]; f = s["floor "k]/n["floor "k];
          if (f > 0 && w > 0) printf "%s: webhook %.0f req/s = %.0f%% of the floor (%.0f req/s)\n", k, w, 100*w/f, f } }' \
  "$WORK/results" | sort -n
