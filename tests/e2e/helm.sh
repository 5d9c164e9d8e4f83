#!/usr/bin/env bash
# Build and cache Helm from its Go module (no prebuilt downloads). It is built in the Kubernetes
# wrapper module of control-plane.sh, against the packages the Kubernetes build compiles (one
# module graph: Go's build cache compiles k8s.io/api, client-go and kubectl's libraries once for
# both), with the default Kubernetes pin whatever cluster version a suite starts: it is a client.
#
# Usage:
#   helm.sh build     build if missing; print the helm binary's path
#   helm.sh path      print the path the binary has once built (built or not)
#
# Environment (all optional): KOORD_E2E_CACHE (binary cache root), KOORD_E2E_HELM_VERSION
# (control-plane.sh has the pin).
set -Eeuo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
plane() { env -u KOORD_E2E_K8S_VERSION -u KOORD_E2E_ETCD_VERSION "$here/control-plane.sh" "$@"; }

case ${1:-} in
    build) plane build-helm ;;
    path) plane helm-path ;;
    *) echo "usage: ${0##*/} build|path" >&2; exit 2 ;;
esac
