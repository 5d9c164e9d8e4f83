#!/usr/bin/env bash
# koord-api's quantity parser against the crates that could replace it (docs/decisions.md,
# "Our own quantity parser"):
#   1. answers against Go's `Value()` / `MilliValue()` (rounded up) on api/src/quantity.rs's table;
#   2. instructions to read the benchmark AdmissionReview's 8 quantities (4 memory as bytes, 4
#      cpu as milli-cores), counted by callgrind: (I(1200) - I(200)) / 1000 cancels the set-up;
#   3. what each crate would add to the product's dependency tree (packages at versions the
#      root Cargo.lock does not have) and which k8s-openapi it needs.
# Needs valgrind. Builds into target/quantity-crates; the crate is not a workspace member.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export CARGO_TARGET_DIR=$root/target/quantity-crates
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 1; }
cargo build --release -q --manifest-path "$here/Cargo.toml"
bin=$CARGO_TARGET_DIR/release/quantity-crates

echo "## Answers"
echo
"$bin" check

refs() { # refs PARSER N -> total instructions
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 \
    | awk '/refs:/ {gsub(",", "", $NF); print $NF}'
}
echo
echo "## Instructions per review's quantities (valgrind $(valgrind --version | sed 's/valgrind-//'), $(rustc --version | cut -d' ' -f2))"
echo
echo "| parser | instructions for the 8 quantities |"
echo "|---|---|"
for p in ours kube_quantity k8s_quantity_parser; do
  a=$(refs "$p" 200)
  b=$(refs "$p" 1200)
  echo "| $p | $(( (b - a) / 1000 )) |"
done

echo
echo "## Packages each would add to the product's tree"
echo
ours=$(awk '/^name = / {n = $3} /^version = / {print n " v" $3}' "$root/Cargo.lock" | tr -d '"' | sort -u)
echo "| crate | new packages | of which | k8s-openapi |"
echo "|---|---|---|---|"
for c in kube_quantity k8s_quantity_parser; do
  tree=$(cargo tree -q --manifest-path "$here/Cargo.toml" -p "$c" -e normal --prefix none \
    --format '{p}' | sed 's/ (.*//; s/ (\*)//' | sort -u)
  new=$(comm -13 <(echo "$ours") <(echo "$tree") | grep -v "^$c " || true)
  k8s=$(echo "$tree" | awk '$1 == "k8s-openapi" {print $2}' | paste -sd' ')
  echo "| $c | $(echo "$new" | grep -c . || true) | $(echo "$new" | paste -sd',' | sed 's/,/, /g') | $k8s |"
done
