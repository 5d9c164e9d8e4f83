#!/usr/bin/env bash
# Build containerd 2.x (containerd, containerd-shim-runc-v2, ctr) from its Go module, once per
# version, cached outside the repo next to the Kubernetes binaries.
#
# Usage: build-containerd.sh     build if missing; print the three binaries' paths
#
# Environment (optional): KOORD_E2E_CACHE (default $HOME/.cache/koord-qos-e2e),
# KOORD_V2_CONTAINERD_VERSION (default below).
#
# No replace directives in containerd's go.mod, so a plain wrapper module builds it. Static and
# CGO-free as upstream's static release: the btrfs snapshotter (cgo only) drops out by itself;
# NRI is compiled in and on by default in 2.x.
set -Eeuo pipefail
PROG=build-containerd.sh
# 2.4.2: the newest 2.x the Go proxy serves (go line 1.26.6, builds with the installed Go).
VERSION=${KOORD_V2_CONTAINERD_VERSION:-2.4.2}
CACHE=${KOORD_E2E_CACHE:-$HOME/.cache/koord-qos-e2e}
DIR=$CACHE/containerd-$VERSION
CMDS=(containerd containerd-shim-runc-v2 ctr)
MOD=github.com/containerd/containerd/v2

trap 'echo "$PROG: error: \"$BASH_COMMAND\" failed (exit $?) at line $LINENO" >&2' ERR
die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

all_built() {
    local c
    for c in "${CMDS[@]}"; do [[ -x $DIR/bin/$c ]] || return 1; done
}

build() {
    command -v go >/dev/null || die "go is not on PATH; it is needed to build containerd $VERSION"
    mkdir -p "$DIR/src" "$DIR/bin"
    cd "$DIR/src"
    local t0=$SECONDS out
    log "building containerd v$VERSION in $DIR/src (cold on 2 cores: a few minutes)"
    rm -f go.mod go.sum
    out=$(go mod init koord-qos-e2e/containerd 2>&1) || die "go mod init failed: $out"
    # The commands' packages, not just the module: go.sum must cover all they import.
    local c pkgs=()
    for c in "${CMDS[@]}"; do pkgs+=("$MOD/cmd/$c@v$VERSION"); done
    go get "${pkgs[@]}" || die "go get ${pkgs[*]} failed"
    # The same stamps and tags as upstream's Makefile (static build; the shim without gRPC).
    local ld="-s -w -X $MOD/version.Version=v$VERSION -X $MOD/version.Package=$MOD"
    local tags tmp
    for c in "${CMDS[@]}"; do
        tags="urfave_cli_no_docs osusergo netgo static_build"
        [[ $c != containerd-shim-runc-v2 ]] || tags+=" no_grpc"
        tmp=$DIR/bin/.$c.tmp.$$
        # -dwarf=false: stripped (-w) anyway; see tests/e2e/control-plane.sh's GO_GCFLAGS.
        CGO_ENABLED=0 nice -n 10 go build -buildvcs=false -trimpath -gcflags=all=-dwarf=false \
            -tags "$tags" -ldflags "$ld" \
            -o "$tmp" "$MOD/cmd/$c" || { rm -f "$tmp"; die "go build of $MOD/cmd/$c failed"; }
        mv -f "$tmp" "$DIR/bin/$c"
    done
    log "built containerd v$VERSION in $((SECONDS - t0))s"
}

if ! all_built; then
    mkdir -p "$CACHE"
    exec {lockfd}>"$CACHE/.containerd-build.lock"
    flock "$lockfd"
    all_built || build
    exec {lockfd}>&-
fi
for c in "${CMDS[@]}"; do echo "$DIR/bin/$c"; done
