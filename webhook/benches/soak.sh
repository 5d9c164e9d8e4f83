#!/usr/bin/env bash
# Soak: `koord-webhook serve --standalone` (release) at a fixed rate for a long time, half the
# admissions over kept-alive HTTP/1.1 connections and half over HTTP/2 streams, both from
# h2load at a fixed rate. Samples the server's RSS and open file descriptors every $SAMPLE
# seconds and checks, at the end:
#   - 0 errors: every request answered 2xx (h2load), no admission answered error/denied
#     (the webhook's own counters), and at least 95% of the asked-for admissions were sent;
#   - RSS flat: the mean RSS over the last third of the run is within 10% of the mean over
#     its second sixth (for 30 minutes: minutes 20-30 against minutes 5-10);
#   - no fd growth: the most fds open in the last third is at most the most in the second
#     sixth plus 2 (a /metrics scrape may still be closing).
#
#   webhook/benches/soak.sh                    # 30 min at 5,000 admissions/s (the README's figure)
#   webhook/benches/soak.sh 60                 # 60 s, sampled every 2 s (make perf, CI)
#   RATE=2000 SAMPLE=5 webhook/benches/soak.sh 300
#
# Needs h2load (apt-get install -y nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${1:-1800}
RATE=${RATE:-5000}
if [ "$DURATION" -le 120 ]; then SAMPLE=${SAMPLE:-2}; else SAMPLE=${SAMPLE:-10}; fi
H1_CONNS=${H1_CONNS:-10}
H2_CONNS=${H2_CONNS:-2}
H2_STREAMS=${H2_STREAMS:-10}
FIXTURE=${FIXTURE:-webhook/tests/fixtures/pod-create.json}
command -v h2load >/dev/null || { echo "h2load not found: apt-get install -y nghttp2-client" >&2; exit 1; }

cargo build --release -q -p koord-webhook --bin koord-webhook
BIN=${CARGO_TARGET_DIR:-target}/release/koord-webhook

# shellcheck source=lib.sh
. webhook/benches/lib.sh

compact_review "$FIXTURE"

PORT=$(free_port)
METRICS_PORT=$(free_port)
"$BIN" serve --standalone --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$METRICS_PORT" \
  --log-level warn 2>"$WORK/server.err" &
SERVER=$!
PIDS+=("$SERVER")
for _ in $(seq 1 100); do
  (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.1
done

admissions() { # admissions OUTCOME_REGEX -> sum of koord_webhook_admissions_total over those outcomes
  curl -s "http://127.0.0.1:$METRICS_PORT/metrics" \
    | awk -v re="$1" '/^koord_webhook_admissions_total/ && $0 ~ "outcome=\"(" re ")\"" {s += $NF} END {printf "%d", s}'
}

# h2load's --rps is per client: split each half of the rate over the connections.
h1_rps=$(( RATE / 2 / H1_CONNS ))
h2_rps=$(( RATE / 2 / H2_CONNS ))
echo "soak: ${DURATION}s at $((h1_rps * H1_CONNS + h2_rps * H2_CONNS)) admissions/s" \
  "($H1_CONNS HTTP/1.1 keep-alive connections x $h1_rps/s, $H2_CONNS HTTP/2 connections x $H2_STREAMS streams x $h2_rps/s)," \
  "sampled every ${SAMPLE}s; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
h2load --h1 -t1 -c"$H1_CONNS" --rps="$h1_rps" -D"$DURATION" -H 'content-type: application/json' \
  -d "$WORK/review.json" "https://127.0.0.1:$PORT/mutate-pod" > "$WORK/h1.out" 2>&1 &
H1=$!
PIDS+=("$H1")
h2load -t1 -c"$H2_CONNS" -m"$H2_STREAMS" --rps="$h2_rps" -D"$DURATION" -H 'content-type: application/json' \
  -d "$WORK/review.json" "https://127.0.0.1:$PORT/mutate-pod" > "$WORK/h2.out" 2>&1 &
H2=$!
PIDS+=("$H2")

# Samples: seconds since start, VmRSS KiB, open fds, admissions so far.
start=$(date +%s)
echo "  t(s)  RSS(MiB)  fds  admissions"
while kill -0 "$H1" 2>/dev/null || kill -0 "$H2" 2>/dev/null; do
  sleep "$SAMPLE"
  t=$(( $(date +%s) - start ))
  [ "$t" -le "$DURATION" ] || break
  rss=$(awk '/^VmRSS/{print $2}' "/proc/$SERVER/status")
  fds=$(find "/proc/$SERVER/fd" -mindepth 1 | wc -l)
  n=$(admissions '[a-z_]+')
  echo "$t $rss $fds $n" >> "$WORK/samples"
  awk '{printf "%6d  %8.1f  %3d  %10d\n", $1, $2/1024, $3, $4}' <<<"$t $rss $fds $n"
done
wait "$H1" "$H2" || true
hwm=$(awk '/^VmHWM/{print $2}' "/proc/$SERVER/status")
bad=$(admissions 'error|denied')

# h2load: requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout
#         status codes: N 2xx, N 3xx, N 4xx, N 5xx
summary() { awk '/^requests:/{ok = $8; bad = $10 + $12 + $14} /^status codes:/{bad += $5 + $7 + $9}
                 /^Application protocol:/{proto = $3}
                 END {printf "%d %d %s\n", ok, bad, proto}' "$1"; }
read -r h1_ok h1_bad h1_proto < <(summary "$WORK/h1.out")
read -r h2_ok h2_bad h2_proto < <(summary "$WORK/h2.out")

fail=0
check() { # check OK? MESSAGE
  if [ "$1" = 1 ]; then echo "ok:   $2"; else echo "FAIL: $2"; fail=1; fi
}
asked=$(( (h1_rps * H1_CONNS + h2_rps * H2_CONNS) * DURATION ))
done_total=$(( h1_ok + h2_ok ))
check "$([ "$h1_proto" = http/1.1 ] && [ "$h2_proto" = h2 ] && echo 1)" \
  "protocols: $h1_proto and $h2_proto"
check "$([ $((h1_bad + h2_bad + bad)) = 0 ] && echo 1)" \
  "errors: $h1_bad (HTTP/1.1) + $h2_bad (HTTP/2) failed or non-2xx, $bad admissions answered error/denied"
check "$(awk -v d="$done_total" -v a="$asked" 'BEGIN{print (d >= 0.95 * a) ? 1 : 0}')" \
  "admissions: $done_total answered ($h1_ok HTTP/1.1, $h2_ok HTTP/2) of $asked asked ($(( done_total / DURATION ))/s)"
# Windows: reference = (D/6, D/3], final = (2D/3, D].
read -r ref_rss fin_rss ref_fds fin_fds < <(awk -v d="$DURATION" '
  $1 > d/6 && $1 <= d/3 { rs += $2; rn++; if ($3 > rf) rf = $3 }
  $1 > 2*d/3            { fs += $2; fn++; if ($3 > ff) ff = $3 }
  END { printf "%.0f %.0f %d %d\n", rn ? rs/rn : 0, fn ? fs/fn : 0, rf, ff }' "$WORK/samples")
check "$(awk -v r="$ref_rss" -v f="$fin_rss" 'BEGIN{print (r > 0 && f > 0 && f <= 1.10*r && f >= 0.90*r) ? 1 : 0}')" \
  "RSS: mean $(awk -v f="$fin_rss" 'BEGIN{printf "%.1f", f/1024}') MiB over the last third vs $(awk -v r="$ref_rss" 'BEGIN{printf "%.1f", r/1024}') MiB over the second sixth (within 10%); peak $(awk -v h="$hwm" 'BEGIN{printf "%.1f", h/1024}') MiB"
check "$([ "$fin_fds" -gt 0 ] && [ "$fin_fds" -le $((ref_fds + 2)) ] && echo 1)" \
  "fds: at most $fin_fds open in the last third vs $ref_fds in the second sixth"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$fail"
