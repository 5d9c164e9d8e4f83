#!/usr/bin/env bash
# Profile-guided builds of the webhook and the floor server, the same way for both:
#
#   1. both built instrumented (-Cprofile-generate) into target/pgo-generate;
#   2. each trained on its own load over TLS on loopback: Pod CREATE, BE and UPDATE reviews
#      over 16 kept-alive HTTP/1.1 connections, HTTP/2 (4 connections x 10 streams) and a new
#      connection per request, then stopped with SIGTERM so that it writes its profile;
#   3. the profiles merged (llvm-profdata) into target/pgo/merged.profdata;
#   4. both built again with -Cprofile-use into target/pgo (release profile: fat LTO, one
#      codegen unit, as the plain build).
#
#   webhook/benches/pgo.sh          # prints the two binaries; a second run with nothing
#                                   # changed only checks (cargo no-ops, no retraining)
#   BUILD=pgo webhook/benches/load.sh     # the load scripts call it themselves
#
# Why both: the floor is the yardstick of the webhook's own cost, so it gets the same
# compiler treatment. After the build, the PGO webhook's answer to every training review is
# compared with the plain release build's, byte for byte.
#
# Needs llvm-profdata able to read rustc's raw profiles (Debian's llvm-19 reads those of
# rustc 1.95: apt-get install -y llvm-19; or rustup's llvm-tools) and h2load
# (apt-get install -y nghttp2-client).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The newest versioned llvm-profdata first: the unversioned one on PATH may be older than the
# raw profile format of rustc's LLVM (Debian's /usr/bin/llvm-profdata is LLVM 14's, which
# refuses them as "unsupported instrumentation profile format version").
PROFDATA=${LLVM_PROFDATA:-$( (ls /usr/lib/llvm-*/bin/llvm-profdata 2>/dev/null | sort -V | tail -1) || true)}
PROFDATA=${PROFDATA:-$(command -v llvm-profdata || true)}
[ -x "${PROFDATA:-}" ] || { echo "llvm-profdata not found: apt-get install -y llvm-19 (or set LLVM_PROFDATA)" >&2; exit 1; }
command -v h2load >/dev/null || { echo "h2load not found: apt-get install -y nghttp2-client" >&2; exit 1; }

GEN_DIR=target/pgo-generate
USE_DIR=target/pgo
MERGED=$PWD/$USE_DIR/merged.profdata
RAW=$PWD/$GEN_DIR/profiles
PACKAGES=(-p koord-webhook --bin koord-webhook --example floor_server)

# Build scripts and proc macros are instrumented too and write into this directory when
# they run; the training runs name their own files (LLVM_PROFILE_FILE), and only those merge.
RUSTFLAGS="-Cprofile-generate=$PWD/$GEN_DIR/build-profiles" CARGO_TARGET_DIR=$GEN_DIR \
  cargo build --release -q "${PACKAGES[@]}"
GEN_BIN=$GEN_DIR/release/koord-webhook
GEN_FLOOR=$GEN_DIR/release/examples/floor_server

# shellcheck source=lib.sh
. webhook/benches/lib.sh
REVIEWS=(pod-create pod-create-be pod-update)
for f in "${REVIEWS[@]}"; do compact_review "webhook/tests/fixtures/$f.json" "$WORK/$f.json"; done

if [ ! -f "$MERGED" ] || [ "$GEN_BIN" -nt "$MERGED" ] || [ "$GEN_FLOOR" -nt "$MERGED" ]; then
  rm -rf "$RAW"
  mkdir -p "$RAW" "$USE_DIR"
  train() { # train NAME PORT CMD...
    local name=$1 port=$2; shift 2
    LLVM_PROFILE_FILE="$RAW/$name-%p.profraw" "$@" 2>"$WORK/$name.err" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$port"
    local url="https://127.0.0.1:$port/mutate-pod"
    # load N REVIEW H2LOAD-ARGS...: N requests, every one answered 2xx.
    load() {
      local n=$1 review=$2 out; shift 2
      out=$(h2load -n "$n" "$@" -H 'content-type: application/json' -d "$WORK/$review.json" "$url")
      grep -q " $n succeeded" <<<"$out" || { echo "$name: training load failed: $out" >&2; exit 1; }
    }
    load 40000 pod-create --h1 -c16
    load 10000 pod-create-be --h1 -c16
    load 10000 pod-update --h1 -c16
    load 40000 pod-create -c4 -m10
    load 1000 pod-create --h1 -c4 -H 'connection: close'
    kill -TERM "$pid"
    wait "$pid" || { echo "$name did not exit cleanly: $(cat "$WORK/$name.err")" >&2; exit 1; }
    ls "$RAW/$name"-*.profraw >/dev/null || { echo "$name wrote no profile" >&2; exit 1; }
  }
  port=$(free_port)
  train webhook "$port" "$GEN_BIN" serve --standalone --listen "127.0.0.1:$port" --log-level warn \
    --shutdown-grace 1s
  port=$(free_port)
  train floor "$port" "$GEN_FLOOR" "127.0.0.1:$port"
  "$PROFDATA" merge -o "$MERGED" "$RAW"/*.profraw
  # A new profile is new input to every crate: build the profile-use binaries from scratch.
  rm -rf "$USE_DIR/release"
fi

# Functions without a profile (code the training never ran) are expected; say nothing of them.
RUSTFLAGS="-Cprofile-use=$MERGED -Cllvm-args=-pgo-warn-missing-function=false" CARGO_TARGET_DIR=$USE_DIR \
  cargo build --release -q "${PACKAGES[@]}"
BIN=$USE_DIR/release/koord-webhook
FLOOR=$USE_DIR/release/examples/floor_server

# Same answers as the plain build, byte for byte, for every training review.
cargo build --release -q "${PACKAGES[@]}"
answers() { # answers BIN SUFFIX: one server, its answer to every training review in $WORK/REVIEW.SUFFIX
  local port pid
  port=$(free_port)
  "$1" serve --standalone --listen "127.0.0.1:$port" --log-level warn 2>/dev/null &
  pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  for f in "${REVIEWS[@]}"; do
    curl -sk "https://127.0.0.1:$port/mutate-pod" -H 'content-type: application/json' \
      --data-binary @"$WORK/$f.json" > "$WORK/$f.$2"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
answers target/release/koord-webhook plain
answers "$BIN" pgo
for f in "${REVIEWS[@]}"; do
  [ -s "$WORK/$f.plain" ] && cmp -s "$WORK/$f.plain" "$WORK/$f.pgo" \
    || { echo "PGO build answers $f differently from the plain build" >&2; exit 1; }
done
echo "$BIN"
echo "$FLOOR"
