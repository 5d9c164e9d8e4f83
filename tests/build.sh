#!/usr/bin/env bash
# Every tool the tests build from source, once per version, cached outside the repo (Go modules
# under ${KOORD_E2E_CACHE:-~/.cache/koord-qos-e2e}, cargo tools by tests/rust-tools.sh); a no-op
# when all are cached. Helm first (`make unit`'s chart tests wait for it; built in the Kubernetes
# wrapper module, so the Kubernetes build after it finds the k8s.io packages they share compiled),
# the cargo tools of `make lint`, then Kubernetes and etcd (every cluster) and kwok (the scale suite), then
# containerd 2 and the User-Mode Linux kernel (the cgroup v2 node; KOORD_BUILD_KERNEL=0 leaves
# it out: tests/all.sh builds it beside the suites). Each builder takes its own lock, so a
# suite that needs a binary while this runs waits for it instead of building it twice.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t0=$SECONDS
lap() { echo "build.sh: $1 ready after $((SECONDS - t0)) s"; }
"$here/e2e/helm.sh" build
lap helm
"$here/rust-tools.sh" build
lap "cargo-deny and cargo-shear"
"$here/e2e/control-plane.sh" build kubelet kube-proxy kube-scheduler kube-controller-manager kubectl kwok
lap "kubernetes + etcd + kwok"
"$here/node-v2/build-containerd.sh"
lap containerd
if [[ ${KOORD_BUILD_KERNEL:-1} != 0 ]]; then
    "$here/node-v2/uml/kernel.sh" build
    lap "the cgroup v2 node's kernel"
fi
