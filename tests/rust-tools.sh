#!/usr/bin/env bash
# The cargo subcommands `make lint` runs, built once with `cargo install --locked` and cached
# outside the repo keyed by version (cold, on two cores: cargo-deny without default features
# ~335 CPU seconds, cargo-machete ~180; docs/testing.md); then nothing.
#
# Usage: rust-tools.sh build    build what is missing; print the directory to put on PATH
#        rust-tools.sh path     print that directory (built or not)
set -euo pipefail
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/koord-qos-ci
TOOLS=("cargo-deny 0.20.2 --no-default-features" "cargo-machete 0.9.2")
BIN=$CACHE/bin-$(printf '%s\n' "${TOOLS[@]}" | cksum | cut -d' ' -f1)

build() {
    mkdir -p "$BIN"
    # One builder at a time (tests/all.sh builds them in the background while `make lint` may
    # already be waiting for them).
    exec {lock}>"$CACHE/.rust-tools.lock"
    flock "$lock"
    local t crate version root
    for t in "${TOOLS[@]}"; do
        read -r crate version flags <<<"$t"
        root=$CACHE/$crate-$version
        if [[ ! -x $root/bin/$crate ]]; then
            # shellcheck disable=SC2086
            nice -n 10 cargo install --locked --quiet --root "$root" --version "$version" $flags "$crate" >&2
        fi
        ln -sf "$root/bin/$crate" "$BIN/$crate"
    done
    exec {lock}>&-
    echo "$BIN"
}

case ${1:-} in
build) build ;;
path) echo "$BIN" ;;
*) echo "usage: rust-tools.sh build|path" >&2; exit 2 ;;
esac
