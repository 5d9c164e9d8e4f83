#!/usr/bin/env bash
# Every Go-built tool the tests need, built from its module once per version and cached outside
# the repo (under ${KOORD_E2E_CACHE:-~/.cache/koord-qos-e2e}); a no-op when all are cached.
# Helm first (`make unit`'s chart tests wait for it), then Kubernetes and etcd (every cluster),
# then containerd 2 (the cgroup v2 node). Each builder takes its own lock, so a suite that needs
# a binary while this runs waits for it instead of building it twice.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
t0=$SECONDS
lap() { echo "build.sh: $1 ready after $((SECONDS - t0)) s"; }
"$here/e2e/helm.sh" build
lap helm
"$here/e2e/control-plane.sh" build kubelet kube-proxy kube-scheduler kube-controller-manager kubectl
lap "kubernetes + etcd"
"$here/node-v2/build-containerd.sh"
lap containerd
