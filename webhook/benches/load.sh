#!/usr/bin/env bash
# Load benchmark: `koord-webhook serve --standalone` against the floor server (same axum +
# rustls stack, handler only parses the AdmissionReview), side by side, with wrk over TLS.
#
#   webhook/benches/load.sh                 # 10 s per run, c=16, wrk -t1 (shares both cores)
#   DURATION=30s ROUNDS=3 webhook/benches/load.sh
#   BUILD=pgo PIN=1 ROUNDS=3 webhook/benches/load.sh   # both servers built with PGO (pgo.sh)
#
# Needs wrk (apt-get install -y wrk). Prints one row per server and mode, and the ratio.
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
command -v wrk >/dev/null || { echo "wrk not found: apt-get install -y wrk" >&2; exit 1; }

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

# run_one NAME PID PORT MODE -> one table row
run_one() {
  local name=$1 pid=$2 port=$3 mode=$4 close=0
  [ "$mode" = "new-conn" ] && close=1
  local before after out
  before=$(cpu_ticks "$pid")
  out=$(WRK_CLOSE=$close "${WRK_CPU[@]}" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$WORK/post.lua" \
    "https://127.0.0.1:$port/mutate-pod")
  after=$(cpu_ticks "$pid")
  local rps p50 p99 total non2xx sockerr hwm
  rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  p50=$(to_ms "$(awk '$1=="50%"{print $2}' <<<"$out")")
  p99=$(to_ms "$(awk '$1=="99%"{print $2}' <<<"$out")")
  total=$(awk '/requests in/{print $1}' <<<"$out")
  non2xx=$(awk '/Non-2xx/{print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  sockerr=$(awk '/Socket errors/{gsub(",",""); print $4+$6+$8+$10}' <<<"$out"); sockerr=${sockerr:-0}
  hwm=$(awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$pid/status")
  local cpu_us
  cpu_us=$(awk -v t=$((after - before)) -v n="$total" 'BEGIN{ if (n>0) printf "%.0f", t*10000/n; else print "-" }')
  printf "| %-10s | %-9s | %9.0f | %6s | %6s | %7s | %6s | %8s | %8s |\n" \
    "$name" "$mode" "$rps" "$p50" "$p99" "$cpu_us" "$hwm" "$((non2xx + sockerr))" "$total"
  echo "$name $mode $rps $round" >> "$WORK/results"
}

start_server() { # start_server NAME PORT -> PID in $STARTED
  case $1 in
    webhook) RUST_LOG=warn "${SERVER_CPU[@]}" "$BIN" serve --standalone --listen "127.0.0.1:$2" \
               --metrics-listen "127.0.0.1:$(( $2 + 1 ))" --log-level warn 2>"$WORK/$1.err" & ;;
    floor)   "${SERVER_CPU[@]}" "$FLOOR" "127.0.0.1:$2" 2>"$WORK/$1.err" & ;;
  esac
  STARTED=$!
  PIDS+=("$STARTED")
  wait_port "$2"
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION, fixture $(wc -c < "$WORK/review.json") bytes, $(nproc) cores, pinned=$PIN"
echo
echo "| server     | mode      |     req/s | p50 ms | p99 ms | CPU us/req | RSS MiB | errors   | requests |"
echo "|------------|-----------|-----------|--------|--------|------------|---------|----------|----------|"
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
      run_one "$name" "$pid" "$port" "$mode"
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
