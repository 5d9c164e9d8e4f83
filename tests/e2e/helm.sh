#!/usr/bin/env bash
# Build and cache Helm from its Go module (no prebuilt downloads), like control-plane.sh
# builds kube-apiserver and etcd.
#
# Usage:
#   helm.sh build     build if missing; print the helm binary's path
#   helm.sh path      print the path the binary has once built (built or not)
#
# Environment (all optional):
#   KOORD_E2E_CACHE          binary cache root   (default: $HOME/.cache/koord-qos-e2e)
#   KOORD_E2E_HELM_VERSION   Helm version        (default below)
set -Eeuo pipefail

# Pinned: the newest v3 the Go proxy serves that builds with this machine's Go.
HELM_VERSION=${KOORD_E2E_HELM_VERSION:-3.22.0}
CACHE=${KOORD_E2E_CACHE:-$HOME/.cache/koord-qos-e2e}
DIR=$CACHE/helm-$HELM_VERSION
HELM_BIN=$DIR/bin/helm

PROG=${0##*/}
trap 'echo "$PROG: error: \"$BASH_COMMAND\" failed (exit $?) at line $LINENO" >&2' ERR
die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

build() {
    command -v go >/dev/null || die "go is not on PATH; it is needed to build helm"
    mkdir -p "$DIR/bin"
    local t0=$SECONDS tmp
    log "building helm v$HELM_VERSION into $DIR (cold: minutes; ~30 min on 2 busy cores)"
    tmp=$(mktemp -d "$DIR/.gobin.XXXXXX")
    # `go install pkg@version` builds the module as published (its own go.mod and go.sum).
    # The version stamp is what `helm version` prints and what chart kubeVersion checks read.
    # -dwarf=false: the binary is stripped (-w) anyway; see control-plane.sh's GO_GCFLAGS.
    if ! GOBIN=$tmp CGO_ENABLED=0 nice -n 10 go install -trimpath -gcflags=all=-dwarf=false \
            -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
            "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"; then
        rm -rf "$tmp"
        die "go install helm.sh/helm/v3/cmd/helm@v$HELM_VERSION failed (see the go output above)"
    fi
    mv -f "$tmp/helm" "$HELM_BIN"
    rm -rf "$tmp"
    log "built $HELM_BIN in $((SECONDS - t0))s"
}

ensure_built() {
    [[ -x $HELM_BIN ]] && return 0
    mkdir -p "$CACHE"
    # Serialise concurrent builders; a waiting run then finds the binary built.
    local lockfd
    exec {lockfd}>"$CACHE/.helm-build.lock"
    flock "$lockfd"
    if [[ ! -x $HELM_BIN ]]; then build; fi
    exec {lockfd}>&-
    [[ -x $HELM_BIN ]] || die "build finished but $HELM_BIN is missing"
}

case ${1:-} in
    build) ensure_built; echo "$HELM_BIN" ;;
    path) echo "$HELM_BIN" ;;
    *) echo "usage: $PROG build|path" >&2; exit 2 ;;
esac
