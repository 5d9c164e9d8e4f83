#!/usr/bin/env bash
# Load benchmark: `koord-webhook serve --standalone` against the floor server (same axum +
# rustls stack, handler only parses the AdmissionReview), side by side, with wrk over TLS.
#
#   webhook/benches/load.sh                 # 10 s per run, c=16, wrk -t1 (shares both cores)
#   DURATION=30s ROUNDS=3 webhook/benches/load.sh
#   BUILD=pgo PIN=1 ROUNDS=3 webhook/benches/load.sh   # both servers built with PGO (pgo.sh)
#   PROBE_RPS=0 webhook/benches/load.sh                 # without the probe client
#
# Beside wrk's 16 connections a probe client (h2load, one more kept-alive connection at
# $PROBE_RPS requests/s, on wrk's CPU) sends the same review and logs every request: the
# latency a client of the loaded server sees, the way the kube-apiserver would. wrk's own p99
# carries a tail of wrk's besides (1.4-4x the probe's on the same process at the same time,
# the floor's as much as the webhook's); it stays the goal's figure, the less flattering one.
#
# Needs wrk and h2load (apt-get install -y wrk nghttp2-client). Prints one row per server and
# mode, and the ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10s}
CONNS=${CONNS:-16}
# One generator thread, as the reference floor was measured (one oha worker): a second wrk
# thread takes a core-share from the server and measures the generator, not the webhook.
THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-1}
# PIN=1: server on CPU 1, wrk on CPU 0 (the reference's "pinned" rows: one core's worth of
# server, the generator never steals from it). Default: unpinned, both share both cores.
PIN=${PIN:-0}
if [ "$PIN" = 1 ]; then SERVER_CPU=(taskset -c 1); WRK_CPU=(taskset -c 0); else SERVER_CPU=(); WRK_CPU=(); fi
FIXTURE=${FIXTURE:-webhook/tests/fixtures/pod-create.json}
PROBE_RPS=${PROBE_RPS:-500}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }
if [ "$PROBE_RPS" != 0 ]; then
  command -v h2load >/dev/null || { echo "h2load not found (the probe client): apt-get install -y nghttp2-client, or PROBE_RPS=0" >&2; exit 1; }
fi
# h2load takes whole seconds; wrk takes 10s / 2m.
DURATION_SECS=$(awk -v d="$DURATION" 'BEGIN{ n = d + 0; if (d ~ /m$/) n *= 60; else if (d ~ /h$/) n *= 3600; print n }')

# shellcheck source=lib.sh
. webhook/benches/lib.sh
build_servers

compact_review "$FIXTURE"
cat > "$WORK/post.lua" <<LUA
local f = io.open("$WORK/review.json", "rb")
wrk.method = "POST"; wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "application/json"
if os.getenv("WRK_CLOSE") == "1" then wrk.headers["Connection"] = "close" end
LUA

to_ms() { # wrk prints 850.00us / 1.20ms / 1.02s
  awk -v v="$1" 'BEGIN{ if (v ~ /us$/) {sub(/us$/,"",v); printf "%.2f", v/1000}
    else if (v ~ /ms$/) {sub(/ms$/,"",v); printf "%.2f", v}
    else if (v ~ /s$/) {sub(/s$/,"",v); printf "%.2f", v*1000} else print v }'
}

# run_wrk NAME PID PORT MODE -> one table row
run_wrk() {
  local name=$1 pid=$2 port=$3 mode=$4 close=0
  [ "$mode" = "new-conn" ] && close=1
  local before after out probe_pid="" probe_p99="-" probe_n=0 probe_bad=0
  before=$(cpu_ticks "$pid")
  # The probe only in keep-alive mode: at a few thousand handshakes/s it would be a sixth of
  # the load it is meant to observe.
  if [ "$PROBE_RPS" != 0 ] && [ "$mode" = keep-alive ]; then
    rm -f "$WORK/probe.log" # h2load appends to its log
    "${WRK_CPU[@]}" h2load --h1 -c1 -t1 --rps "$PROBE_RPS" -D "$DURATION_SECS" \
      -d "$WORK/review.json" -H 'Content-Type: application/json' --log-file="$WORK/probe.log" \
      "https://127.0.0.1:$port/mutate-pod" > "$WORK/probe.out" 2>&1 &
    probe_pid=$!
    PIDS+=("$probe_pid")
  fi
  out=$(WRK_CLOSE=$close "${WRK_CPU[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$WORK/post.lua" \
    "https://127.0.0.1:$port/mutate-pod")
  if [ -n "$probe_pid" ]; then
    wait "$probe_pid" || { echo "probe client failed:" >&2; cat "$WORK/probe.out" >&2; return 1; }
    # Log lines: start time (us), status, request time (us). h2load's "failed" counts every
    # request not answered 2xx (errored and timed-out ones included).
    probe_n=$(wc -l < "$WORK/probe.log")
    [ "$probe_n" -gt 0 ] || { echo "the probe client logged no request" >&2; return 1; }
    probe_p99=$(sort -n -k3,3 "$WORK/probe.log" | awk -v n="$probe_n" 'BEGIN { i = int(n * 0.99); if (i < 1) i = 1 }
      NR == i { printf "%.2f", $3 / 1000 }')
    probe_bad=$(awk '/^requests:/{ print $10 }' "$WORK/probe.out")
  fi
  after=$(cpu_ticks "$pid")
  local rps p50 p99 total non2xx sockerr hwm
  rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  p50=$(to_ms "$(awk '$1=="50%"{print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1=="99%"{print $2}' <<<"$out")")
  total=$(awk '/requests in/{print $1}' <<<"$out")
  non2xx=$(awk '/Non-2xx/{print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  sockerr=$(awk '/Socket errors/{gsub(",",""); print $4+$6+$8+$10}' <<<"$out"); sockerr=${sockerr:-0}
  hwm=$(hwm_mib "$pid")
  local cpu_us
  # The probe's requests are served too: they count in the CPU per request and the errors.
  cpu_us=$(cpu_us_per_request $((after - before)) $((total + probe_n)))
  printf "| %-10s | %-9s | %9.0f | %6s | %6s | %8s | %7s | %6s | %8s | %8s |\n" \
    "$name" "$mode" "$rps" "$p50" "$p99" "$probe_p99" "$cpu_us" "$hwm" "$((non2xx + sockerr + ${probe_bad:-0}))" "$total"
  echo "$name $mode $rps $round" >> "$WORK/results"
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION, probe $PROBE_RPS req/s on one more connection, fixture $(wc -c < "$WORK/review.json") bytes, $(nproc) cores, pinned=$PIN"
echo
echo "| server     | mode      |     req/s | p50 ms | p99 ms | probe p99 | CPU us/req | RSS MiB | errors   | requests |"
echo "|------------|-----------|-----------|--------|--------|-----------|------------|---------|----------|----------|"
port=19443
# Like with like, adjacent in time: each mode runs on the two servers back to back, and the
# server that goes first alternates by round, so a host that drifts over a round (the floor
# alone has swung 39,134 -> 60,951 req/s between two 10 s rounds here) favours neither.
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then servers="webhook floor"; else servers="floor webhook"; fi
  for mode in keep-alive new-conn; do
    for name in $servers; do
      port=$((port + 2))
      start_server "$name" "$port"
      pid=$STARTED
      # A short warm-up so the first run does not pay for page faults and allocator growth.
      wrk -t1 -c2 -d1s -s "$WORK/post.lua" "https://127.0.0.1:$port/mutate-pod" >/dev/null
      run_wrk "$name" "$pid" "$port" "$mode"
      if [ "$name" = webhook ]; then
        errors=$(curl -s "http://127.0.0.1:$((port + 1))/metrics" \
          | awk '/^koord_webhook_admissions_total/ && /outcome="(error|denied)"/ {s += $NF} END {print s+0}')
        [ "$errors" = 0 ] || echo "WARNING: $errors admissions answered error/denied" >&2
      fi
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
done
echo
# The webhook's share of the floor over the run, then per round: the goal is judged round by
# round, and a noisy host shows up there first.
awk '{ sum[$1" "$2] += $3; n[$1" "$2]++; r[$2" "$4" "$1] = $3
       if (!($2 in seen)) { seen[$2] = 1; order[++modes] = $2 } if ($4 > last) last = $4 }
  END { for (i = 1; i <= modes; i++) { m = order[i]
          w = sum["webhook "m] / n["webhook "m]; f = sum["floor "m] / n["floor "m]
          if (f > 0) printf "%s: webhook %.0f req/s = %.0f%% of the floor (%.0f req/s)\n", m, w, 100 * w / f, f }
        for (i = 1; i <= modes; i++) { m = order[i]; line = m": per round"
          for (k = 1; k <= last; k++) { f = r[m" "k" floor"]
            line = line sprintf(" %.1f%%", f > 0 ? 100 * r[m" "k" webhook"] / f : 0) }
          print line } }' "$WORK/results"
