# Shared by the load, HTTP/2 and soak scripts (sourced, not run): the work directory and the
# processes to stop on exit, the review body as kube-apiserver sends it, starting a server,
# and small helpers.

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# compact_review FIXTURE [OUT]: the body as kube-apiserver sends it (compact JSON) in OUT
# (default $WORK/review.json).
compact_review() {
  python3 -c 'import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1])), separators=(",",":")))' \
    "$1" > "${2:-$WORK/review.json}"
}

# build_servers: the webhook and the floor server, built the same way, in $BIN and $FLOOR.
# BUILD=release (default): `cargo build --release`. BUILD=pgo: both built with profile-guided
# optimization, each trained on its own load (webhook/benches/pgo.sh).
build_servers() {
  case ${BUILD:-release} in
    release)
      cargo build --release -q -p koord-webhook --bin koord-webhook --example floor_server
      BIN=${CARGO_TARGET_DIR:-target}/release/koord-webhook
      FLOOR=${CARGO_TARGET_DIR:-target}/release/examples/floor_server ;;
    pgo)
      webhook/benches/pgo.sh >&2
      BIN=target/pgo/release/koord-webhook
      FLOOR=target/pgo/release/examples/floor_server ;;
    *) echo "BUILD=$BUILD: release or pgo" >&2; return 1 ;;
  esac
}

wait_port() {
  for _ in $(seq 1 100); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 never opened" >&2; return 1
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# CPU ticks (user + system) a process has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# cpu_us_per_request TICKS REQUESTS: CPU microseconds per request ("-" without requests).
cpu_us_per_request() { awk -v t="$1" -v n="$2" 'BEGIN{ if (n>0) printf "%.0f", t*10000/n; else print "-" }'; }

# hwm_mib PID: the process's peak RSS (VmHWM) in MiB.
hwm_mib() { awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$1/status"; }

# start_server NAME PORT: the webhook (extra flags in $SERVER_ARGS, metrics on PORT+1) or the
# floor server on PORT, pinned by $SERVER_CPU (an array, may be empty); its PID in $STARTED.
start_server() {
  case $1 in
    # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
    webhook) RUST_LOG=warn "${SERVER_CPU[@]}" "$BIN" serve --standalone --listen "127.0.0.1:$2" \
               --metrics-listen "127.0.0.1:$(( $2 + 1 ))" --log-level warn ${SERVER_ARGS:-} 2>"$WORK/$1.err" & ;;
    floor)   "${SERVER_CPU[@]}" "$FLOOR" "127.0.0.1:$2" 2>"$WORK/$1.err" & ;;
  esac
  STARTED=$!
  PIDS+=("$STARTED")
  wait_port "$2"
}
