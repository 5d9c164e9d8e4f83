#!/usr/bin/env bash
# Instructions per admission, counted by callgrind: stable on a busy machine, where wall-clock
# figures swing by 2x. Two levels:
#
#   webhook/benches/callgrind.sh            # per review (examples/review_loop): no IO
#   webhook/benches/callgrind.sh --check    # the same, failing on a regression (CI, ~15 s)
#   SERVER=1 webhook/benches/callgrind.sh   # also the real servers over TLS, per request
#   TOP=15 webhook/benches/callgrind.sh     # also the 15 functions with most instructions
#                                           # (self) in 5,000 `create` reviews
#
# Per review: `review_loop CASE N` at N=200 and N=1200; (refs1200 - refs200) / 1000 cancels
# the set-up. Cases: `create` (the load script's Pod CREATE, the reference AdmissionReview),
# `be` (batch resources), `update` (11 KB UPDATE) and `floor` (the floor server's handler body:
# parse for the uid, fixed answer).
#
# --check compares each case with webhook/benches/callgrind-baseline.txt and fails when one
# costs more than MAX_REGRESSION (default 1.25) times its baseline, or less than MIN_RATIO
# (default 0.95): a case that got that much cheaper needs a new baseline, or the next regression
# hides in the gap. review_loop checks every answer it measures (an allowed response with the
# stored patch), so a path that errors out early fails instead of reading as faster. After a
# deliberate change, rewrite the baseline with UPDATE_BASELINE=1 and commit it with the change
# that moved it.
#
# Per request (SERVER=1, needs h2load: apt-get install nghttp2-client): each server runs under
# callgrind; after a warm-up its counters are zeroed, N1 then N2 requests are sent (16
# keep-alive HTTP/1.1 connections each, h2load --h1), counters dumped after each; (I(N2) -
# I(N1)) / (N2 - N1) cancels the TLS handshakes. User-space instructions of every thread.
set -euo pipefail
cd "$(dirname "$0")/../.."

CHECK=0
[ "${1:-}" = --check ] && CHECK=1
MAX_REGRESSION=${MAX_REGRESSION:-1.25}
MIN_RATIO=${MIN_RATIO:-0.95}
BASELINE=webhook/benches/callgrind-baseline.txt
CASES=${CASES:-create be be-off update floor}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 1; }

cargo build --release -q -p koord-webhook --example review_loop
LOOP=${CARGO_TARGET_DIR:-target}/release/examples/review_loop
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

refs() { # refs CASE N -> total instructions; fails when valgrind gives no count
  local out n
  out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$LOOP" "$1" "$2" 2>&1) || {
    echo "valgrind failed on review_loop $1 $2:" >&2; tail -n 20 <<<"$out" >&2; return 1; }
  n=$(awk '/refs:/ {gsub(",", "", $NF); print $NF}' <<<"$out")
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] || {
    echo "no instruction count (refs:) from valgrind for review_loop $1 $2:" >&2
    tail -n 20 <<<"$out" >&2; return 1; }
  echo "$n"
}

echo "valgrind $(valgrind --version | sed 's/valgrind-//'), $(rustc --version | cut -d' ' -f2), review_loop (release, mimalloc, logging at info)"
echo
echo "| case | instructions per review | baseline | ratio |"
echo "|---|---|---|---|"
failed=0
declare -A measured
for c in $CASES; do
  # A count that is missing, or does not grow with the reviews, is a broken measurement, not a
  # pass (ratio 0.000).
  a=$(refs "$c" 200) || exit 1
  b=$(refs "$c" 1200) || exit 1
  per=$(( (b - a) / 1000 ))
  [ "$per" -gt 0 ] || { echo "case $c: $a instructions at 200 reviews, $b at 1200: no cost per review" >&2; exit 1; }
  measured[$c]=$per
  base=$(awk -v c="$c" '$1 == c {print $2}' "$BASELINE" 2>/dev/null || true)
  ratio=-
  if [ "$CHECK" = 1 ] && [ -z "$base" ]; then
    failed=1
    ratio="no baseline for $c in $BASELINE"
  fi
  if [ -n "$base" ]; then
    ratio=$(awk -v p="$per" -v b="$base" 'BEGIN {printf "%.3f", p / b}')
    if awk -v r="$ratio" -v m="$MAX_REGRESSION" 'BEGIN {exit !(r > m)}'; then
      failed=1
      ratio="$ratio REGRESSION (> $MAX_REGRESSION)"
    elif awk -v r="$ratio" -v m="$MIN_RATIO" 'BEGIN {exit !(r < m)}'; then
      failed=1
      ratio="$ratio FASTER than the baseline (< $MIN_RATIO): if meant, UPDATE_BASELINE=1 writes a new one"
    fi
  fi
  printf '| %s | %s | %s | %s |\n' "$c" "$per" "${base:--}" "$ratio"
done
if [ -n "${measured[create]:-}" ] && [ -n "${measured[floor]:-}" ]; then
  echo
  awk -v w="${measured[create]}" -v f="${measured[floor]}" \
    'BEGIN {printf "create / floor: %.2fx (the review does %d instructions more than parsing for the uid)\n", w / f, w - f}'
fi

if [ -n "${TOP:-}" ]; then
  valgrind --tool=callgrind --callgrind-out-file="$WORK/top.out" "$LOOP" create 5000 >/dev/null 2>&1
  echo
  echo "Top $TOP functions by instructions (self), review_loop create 5000 (set-up included):"
  echo
  echo "| instructions | share | function |"
  echo "|---|---|---|"
  # callgrind_annotate prints "COUNT (PCT%)  FILE:FUNCTION [OBJECT]", one line per source file
  # a function's code came from (inlining): sum per function.
  callgrind_annotate --auto=no --threshold=100 "$WORK/top.out" 2>/dev/null | awk '
    /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1; next }
    /^ *[0-9,]+ \( *[0-9.]+%\) +[^ ]*:/ {
      count = $1; gsub(",", "", count)
      line = $0; sub(/^ *[0-9,]+ \( *[0-9.]+%\) +/, "", line); sub(/ \[[^]]*\]$/, "", line)
      sub(/^[^:]*:/, "", line); sum[line] += count
    }
    END { for (f in sum) printf "%d\t%.2f%%\t%s\n", sum[f], 100 * sum[f] / total, f }' \
    | sort -t$'\t' -k1,1nr | head -n "$TOP" | awk -F'\t' '{printf "| %d | %s | `%s` |\n", $1, $2, $3}'
fi

if [ "${UPDATE_BASELINE:-0}" = 1 ]; then
  {
    echo "# Instructions per review (webhook/benches/callgrind.sh), the baseline of --check."
    for c in $CASES; do echo "$c ${measured[$c]}"; done
  } > "$BASELINE"
  echo "wrote $BASELINE"
fi

if [ "${SERVER:-0}" = 1 ]; then
  command -v h2load >/dev/null || { echo "h2load not found: apt-get install -y nghttp2-client" >&2; exit 1; }
  cargo build --release -q -p koord-webhook --bin koord-webhook --example floor_server
  N1=${N1:-1000}
  N2=${N2:-3000}
  python3 -c 'import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1])), separators=(",",":")))' \
    webhook/tests/fixtures/pod-create.json > "$WORK/review.json"
  dumped() { # the Ir total of the newest dump of PID
    local f
    f=$(ls -t "$WORK"/cg."$1".* 2>/dev/null | head -1)
    awk '/^totals:/ {print $2}' "$f"
  }
  server_refs() { # server_refs NAME PORT CMD... -> per request
    local name=$1 port=$2; shift 2
    valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" "$@" 2>"$WORK/$name.vg" &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 1 600); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    local load=(h2load -c 16 --h1 -d "$WORK/review.json" -H content-type:application/json "https://127.0.0.1:$port/mutate-pod")
    # Warm-up; under valgrind the listener may open before the server answers.
    for _ in 1 2 3 4 5; do
      "${load[@]}" -n 500 2>/dev/null | grep -q " 500 succeeded" && break
      sleep 2
    done
    callgrind_control -z "$pid" > /dev/null 2>&1
    local out
    out=$("${load[@]}" -n "$N1")
    grep -q " $N1 succeeded" <<<"$out" || { echo "$name: requests failed: $out" >&2; exit 1; }
    callgrind_control -d "$pid" > /dev/null 2>&1
    local i1
    i1=$(dumped "$pid")
    callgrind_control -z "$pid" > /dev/null 2>&1
    out=$("${load[@]}" -n "$N2")
    grep -q " $N2 succeeded" <<<"$out" || { echo "$name: requests failed: $out" >&2; exit 1; }
    callgrind_control -d "$pid" > /dev/null 2>&1
    local i2
    i2=$(dumped "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo $(( (i2 - i1) / (N2 - N1) ))
  }
  w=$(server_refs webhook 19791 "${CARGO_TARGET_DIR:-target}"/release/koord-webhook serve --standalone --listen 127.0.0.1:19791 --log-level warn)
  f=$(server_refs floor 19793 "${CARGO_TARGET_DIR:-target}"/release/examples/floor_server 127.0.0.1:19793)
  echo
  echo "| server (TLS, HTTP/1.1 keep-alive, 16 connections) | instructions per request |"
  echo "|---|---|"
  echo "| webhook | $w |"
  echo "| floor | $f |"
  awk -v w="$w" -v f="$f" 'BEGIN {printf "\nwebhook / floor: %.2fx\n", w / f}'
fi

if [ "$CHECK" = 1 ]; then
  [ -s "$BASELINE" ] || { echo "no baseline in $BASELINE: run with UPDATE_BASELINE=1" >&2; exit 1; }
  if [ "$failed" = 1 ]; then
    echo "FAIL: a case outside $MIN_RATIO..$MAX_REGRESSION x its baseline, or without one ($BASELINE)" >&2
    exit 1
  fi
  echo "ok: every case within $MIN_RATIO..$MAX_REGRESSION x its baseline, every answer checked"
fi
