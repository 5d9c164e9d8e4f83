#!/usr/bin/env bash
# Every tool the tests build from source, once per version, cached outside the repo (Go modules
# under ${KOORD_E2E_CACHE:-~/.cache/koord-qos-e2e}, cargo tools by tests/rust-tools.sh); a no-op
# when all are cached. Each builder takes its own lock, so a suite that needs a binary while this
# runs waits for it instead of building it twice.
#
#   build.sh nodes   what the cgroup v2 nodes need: Kubernetes (kube-apiserver, kubelet,
#                    kube-proxy, kube-scheduler, kube-controller-manager, kubectl) and etcd, then
#                    containerd 2, then the User-Mode Linux kernel (KOORD_BUILD_KERNEL=0 leaves
#                    it out: tests/all.sh builds it beside)
#   build.sh tools   the rest: helm (the chart tests, e2e and the v1 node; built in the
#                    Kubernetes wrapper module, so it finds the k8s.io packages they share
#                    compiled), the cargo tools of `make lint`, kwok (the scale suite)
#   build.sh [all]   both
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t0=$SECONDS
lap() { echo "build.sh: $1 ready after $((SECONDS - t0)) s"; }

nodes() {
    "$here/e2e/control-plane.sh" build kubelet kube-proxy kube-scheduler kube-controller-manager kubectl
    lap "kubernetes + etcd"
    "$here/node-v2/build-containerd.sh"
    lap containerd
    if [[ ${KOORD_BUILD_KERNEL:-1} != 0 ]]; then
        "$here/node-v2/uml/kernel.sh" build
        lap "the cgroup v2 node's kernel"
    fi
}

tools() {
    "$here/e2e/helm.sh" build
    lap helm
    "$here/rust-tools.sh" build
    lap "cargo-deny and cargo-shear"
    "$here/e2e/control-plane.sh" build kwok
    lap kwok
}

case ${1:-all} in
nodes) nodes ;;
tools) tools ;;
all) nodes; tools ;;
*) echo "usage: tests/build.sh [nodes|tools|all]" >&2; exit 2 ;;
esac
