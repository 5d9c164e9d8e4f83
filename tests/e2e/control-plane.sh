#!/usr/bin/env bash
# Build, cache, start and stop a real kube-apiserver + etcd for the end-to-end tests.
#
# No Docker and no prebuilt downloads: both binaries are compiled from the Go module
# proxy through small wrapper modules, once per version, and cached outside the repo.
#
# Usage:
#   control-plane.sh build [CMD...]         build if missing; print the kube-apiserver and etcd paths,
#                                           then those of the extra k8s.io/kubernetes/cmd/CMDs
#                                           (also builds kubectl when none of the server's minor
#                                           version is installed; its path is not printed)
#   control-plane.sh start DIR              start etcd + kube-apiserver (loopback by default), write DIR/kubeconfig
#   control-plane.sh stop DIR               stop both processes started into DIR (by PID)
#   control-plane.sh restart-apiserver DIR  restart only kube-apiserver, same flags, wait until ready
#   control-plane.sh client-cert DIR CN ORG OUT  (node mode) a client cert from DIR's cluster CA
#   control-plane.sh kubectl                print the kubectl binary to use (version-matched if present)
#   control-plane.sh build-helm             build helm if missing (tests/e2e/helm.sh); print its path
#   control-plane.sh helm-path              print the path helm has once built
#
# Extra CMDs (kubelet, kube-proxy, kube-scheduler, kube-controller-manager, kubectl) come from the same
# wrapper module, so every binary is the same k8s.io/kubernetes version. helm (the chart tests
# and installs; helm.sh) and `kwok` (sigs.k8s.io/kwok, the kubelet simulator of tests/scale) are
# built in that wrapper module too: every build of it asks for the same modules (wrapper_pkgs),
# so each resolves the very same versions and Go's build cache compiles a package they share
# (k8s.io/api, client-go, kubectl's libraries: most of helm) once for all of them. kwok's Stage
# files are copied next to it (DIR/stages/*.yaml).
#
# Node mode (KOORD_E2E_NODE_MODE=1, used by tests/node): the apiserver binds and advertises
# KOORD_E2E_BIND_ADDRESS (pods cannot reach loopback, and Endpoints refuse it), keeps the
# ServiceAccount admission plugin (a controller-manager creates the default ServiceAccounts and
# signs tokens with DIR/pki/sa.key), runs the lease endpoint reconciler so the `kubernetes`
# Service points at it, authorizes kubelets with Node,RBAC + NodeRestriction, trusts client
# certificates of DIR/pki/ca.crt and calls kubelets with DIR/pki/kubelet-client.{crt,key}.
#
# Environment (all optional):
#   KOORD_E2E_CACHE            binary cache root       (default: $HOME/.cache/koord-qos-e2e)
#   KOORD_E2E_K8S_VERSION      Kubernetes version      (default below)
#   KOORD_E2E_ETCD_VERSION     etcd version            (default below)
#   KOORD_E2E_ETCD_PORT        etcd client port        (default 23790)
#   KOORD_E2E_ETCD_PEER_PORT   etcd peer port          (default 23800)
#   KOORD_E2E_APISERVER_PORT   kube-apiserver port     (default 26443)
#   KOORD_E2E_READY_TIMEOUT    seconds to wait for /readyz (default 90)
#   KOORD_E2E_BIND_ADDRESS     kube-apiserver bind/advertise address (default 127.0.0.1)
#   KOORD_E2E_SERVICE_CIDR     Service range           (default 10.0.0.0/24)
#   KOORD_E2E_NODE_MODE        1: node mode, see above (default 0)
#   KOORD_E2E_KWOK_VERSION     kwok version for `build kwok` (default below)
#   KOORD_E2E_HELM_VERSION     helm version for `build-helm` (default below)
#   KOORD_E2E_APISERVER_EXTRA_ARGS  more kube-apiserver flags, one per line (tests/scale)
#   KOORD_E2E_EXTRA_TOKENS     more lines of the static token file (token,user,uid,"groups")
#   KUBECTL                    kubectl binary to use   (default: see find_kubectl)
set -Eeuo pipefail

# Pinned versions: one Kubernetes build for every cluster (the e2e control plane, the v1 node
# and the cgroup v2 node), so a cold CI run compiles it once. 1.37.2 is the newest release the
# Go proxy serves (its go line is 1.26.0); its kubectl is built alongside (no packaged kubectl
# is within skew of 1.37). etcd 3.6: kubeadm pairs 1.37 with 3.6; 3.6.16 is the newest 3.6
# patch served. The previous pin stays a tested option:
# KOORD_E2E_K8S_VERSION=1.33.13 KOORD_E2E_ETCD_VERSION=3.5.35 (kubectl.1.33 is within skew).
K8S_DEFAULT=1.37.2
K8S_VERSION=${KOORD_E2E_K8S_VERSION:-$K8S_DEFAULT}
ETCD_VERSION=${KOORD_E2E_ETCD_VERSION:-3.6.16}
# kwok 0.8.0 (requires k8s.io 0.36) builds against the 1.37 libraries unchanged.
KWOK_VERSION=${KOORD_E2E_KWOK_VERSION:-0.8.0}
# Helm 3.22.0: the newest v3 the Go proxy serves that builds with this machine's Go (its own
# requirements are k8s.io v0.37.0: built against the default pin's packages, v0.37.2). A client:
# built with the default Kubernetes pin whatever cluster version a suite starts.
HELM_VERSION=${KOORD_E2E_HELM_VERSION:-3.22.0}

CACHE=${KOORD_E2E_CACHE:-$HOME/.cache/koord-qos-e2e}
APISERVER_BIN=$CACHE/k8s-$K8S_VERSION/bin/kube-apiserver
ETCD_BIN=$CACHE/etcd-$ETCD_VERSION/bin/etcd

# High fixed ports, away from the usual 2379/2380/6443 so a local cluster does not clash.
ETCD_PORT=${KOORD_E2E_ETCD_PORT:-23790}
ETCD_PEER_PORT=${KOORD_E2E_ETCD_PEER_PORT:-23800}
APISERVER_PORT=${KOORD_E2E_APISERVER_PORT:-26443}
READY_TIMEOUT=${KOORD_E2E_READY_TIMEOUT:-90}
BIND_ADDRESS=${KOORD_E2E_BIND_ADDRESS:-127.0.0.1}
SERVICE_CIDR=${KOORD_E2E_SERVICE_CIDR:-10.0.0.0/24}
NODE_MODE=${KOORD_E2E_NODE_MODE:-0}
APISERVER_EXTRA_ARGS=${KOORD_E2E_APISERVER_EXTRA_ARGS:-}
EXTRA_TOKENS=${KOORD_E2E_EXTRA_TOKENS:-}

PROG=${0##*/}
# shellcheck source=tests/lib/cluster.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/cluster.sh"
trap 'echo "$PROG: error: \"$BASH_COMMAND\" failed (exit $?) at line $LINENO" >&2' ERR

# ---------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------

# go build flags shared by every binary: static (upstream ships kube-apiserver static),
# reproducible paths, stripped. -buildvcs=false because the wrapper dirs are not repos. The
# linker's -w drops DWARF, but the compiler still makes it for every package unless told:
# -dwarf=false takes 20% off the CPU of a cold build (etcd: 90 -> 72 CPU s), for the same
# stripped binary. Every Go build of the tests uses GO_GCFLAGS, so Go's build cache still serves
# the packages they share (kwok and helm compile against the Kubernetes build's packages).
GO_GCFLAGS=all=-dwarf=false
go_build() { # OUT PKG [LDFLAGS]
    local out=$1 pkg=$2 ldflags=${3:-}
    # Temp name + mv: an interrupted build never leaves a half-written binary in place.
    local tmp
    tmp="$(dirname "$out")/.$(basename "$out").tmp.$$"
    rm -f "$(dirname "$out")/.$(basename "$out").tmp."* # leftovers of killed builds (we hold the lock)
    if ! CGO_ENABLED=0 nice -n 10 go build -buildvcs=false -trimpath -gcflags="$GO_GCFLAGS" \
            -ldflags "-s -w $ldflags" -o "$tmp" "$pkg"; then
        rm -f "$tmp"
        die "go build of $pkg failed (see the go output above)"
    fi
    mv -f "$tmp" "$out"
}

# Quiet on success, but show go's reason on failure.
go_mod_init() { # MODULE
    local out
    out=$(go mod init "$1" 2>&1) || die "go mod init $1 failed in $PWD: $out"
}

# Binaries of k8s.io/kubernetes/cmd/* built (or to build) into the version's bin/; kwok into its
# own directory, keyed by both versions (it links this Kubernetes version's libraries).
k8s_bin() {
    case $1 in
    kwok) echo "$(kwok_dir)/bin/kwok" ;;
    helm) echo "$CACHE/k8s-$K8S_VERSION/bin/helm-$HELM_VERSION" ;;
    *) echo "$CACHE/k8s-$K8S_VERSION/bin/$1" ;;
    esac
}

# What every build of the wrapper module asks `go get` for, whatever it compiles: the same
# modules, so minimal version selection picks the same versions each time (helm's and kwok's
# requirements raise a few of Kubernetes' by a patch or minor release, for all of them alike)
# and Go's build cache serves what one build compiled to the others.
wrapper_pkgs() {
    local c
    for c in kube-apiserver kubelet kube-proxy kube-scheduler kube-controller-manager kubectl; do
        echo "k8s.io/kubernetes/cmd/$c@v$K8S_VERSION"
    done
    # The other pins' (tests/e2e's 1.33 option) are Kubernetes alone: helm needs v0.37 packages,
    # and kwok's Stages are checked against the default pin.
    if [[ $K8S_VERSION == "$K8S_DEFAULT" ]]; then
        echo "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
        echo "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
    fi
}

# A command's package, and the version stamps upstream's own build gives it.
cmd_pkg() {
    case $1 in
    helm) echo helm.sh/helm/v3/cmd/helm ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    *) echo "k8s.io/kubernetes/cmd/$1" ;;
    esac
}
cmd_ldflags() {
    case $1 in
    # What `helm version` prints and what charts' kubeVersion checks read.
    helm) echo "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" ;;
    kwok) echo "" ;;
    *) k8s_version_ldflags ;;
    esac
}
kwok_dir() { echo "$CACHE/kwok-$KWOK_VERSION-k8s-$K8S_VERSION"; }

# The wrapper module of k8s.io/kubernetes@v$K8S_VERSION in the current directory: staging
# modules pinned, k8s's godebug line; prints the path of k8s's go.mod.
k8s_wrapper_module() { # MODULE-NAME
    # Fresh each time, so a half-finished earlier attempt cannot poison it.
    rm -f go.mod go.sum
    go_mod_init "$1"

    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
    # ./staging/... ; those replaces are ignored for a dependency, so pin each staging
    # module to its published tag v0.<minor>.<patch>. Derive the list from k8s's own
    # go.mod: the set changes between releases.
    local json gomod
    # go mod download reports its error inside the JSON on stdout, so surface it.
    json=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION") ||
        die "cannot fetch k8s.io/kubernetes@v$K8S_VERSION: $(sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")"
    gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$json")
    [[ -f $gomod ]] || die "no go.mod for k8s.io/kubernetes@v$K8S_VERSION in: $json"
    local staging
    staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod")
    [[ -n $staging ]] || die "no staging replaces found in $gomod"
    local m
    for m in $staging; do
        go mod edit "-replace=$m=$m@v0.${K8S_VERSION#1.}" >&2
    done
    # Same GODEBUG defaults as an upstream build (k8s's godebug line only applies when
    # it is the main module).
    local godebug
    godebug=$(sed -n 's/^godebug[[:space:]]\{1,\}\(.*\)$/\1/p' "$gomod")
    if [[ -n $godebug ]]; then go mod edit "-godebug=$godebug" >&2; fi
    echo "$gomod"
}

# Version stamps as hack/lib/version.sh sets them. /version must report the real version: the
# compatibility-version check and kubectl skew warnings read it.
k8s_version_ldflags() {
    local minor=${K8S_VERSION#1.} ld="" p
    minor=${minor%%.*}
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
        ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    done
    echo "$ld"
}

build_k8s() { # CMD...   (the missing ones; all from one wrapper module)
    local dir=$CACHE/k8s-$K8S_VERSION
    mkdir -p "$dir/src" "$dir/bin"
    cd "$dir/src"
    local t0=$SECONDS
    log "building $* in $dir/src, Kubernetes v$K8S_VERSION (cold on 2 cores: kube-apiserver 6-16 min, the node binaries 2-8 min more, depending on load)"
    k8s_wrapper_module koord-qos-e2e/kube-apiserver >/dev/null

    local cmd pkgs=()
    mapfile -t pkgs < <(wrapper_pkgs)
    go get "${pkgs[@]}" ||
        die "go get ${pkgs[*]} failed (a module not served by the proxy, or a Go toolchain too old?)"

    for cmd in "$@"; do
        local t1=$SECONDS
        go_build "$(k8s_bin "$cmd")" "$(cmd_pkg "$cmd")" "$(cmd_ldflags "$cmd")"
        log "built $(k8s_bin "$cmd") in $((SECONDS - t1))s"
    done
    log "k8s binaries done in $((SECONDS - t0))s"
}

# kwok in the Kubernetes wrapper module (wrapper_pkgs): kwok's own, older k8s.io and third-party
# requirements are raised to Kubernetes' by minimal version selection, so kwok compiles against
# the very packages the k8s binaries were built from and Go's build cache serves them (measured:
# 27 s of CPU after the k8s build, tests/scale/README.md). The Stage files kwok needs (nodes Ready
# with a Lease, pods Running, deletions honoured) come from its module.
build_kwok() {
    [[ $K8S_VERSION == "$K8S_DEFAULT" ]] || die "kwok is built with the default Kubernetes pin ($K8S_DEFAULT) only"
    local dir
    dir=$(kwok_dir)
    mkdir -p "$dir/bin" "$dir/stages"
    build_k8s kwok
    local src
    src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok) || die "sigs.k8s.io/kwok is not in the module cache"
    local stage
    for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
        pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
        [[ -f $src/kustomize/stage/$stage.yaml ]] || die "kwok v$KWOK_VERSION has no stage $stage"
        install -m 0644 "$src/kustomize/stage/$stage.yaml" "$dir/stages/${stage##*/}.yaml"
    done
}

build_etcd() {
    local dir=$CACHE/etcd-$ETCD_VERSION
    mkdir -p "$dir/src" "$dir/bin"
    cd "$dir/src"
    local t0=$SECONDS
    log "building etcd v$ETCD_VERSION in $dir/src (~1 min cold)"
    rm -f go.mod go.sum
    go_mod_init koord-qos-e2e/etcd
    # `go install ...@v` is refused (server/go.mod has replace directives); as a plain
    # dependency its require lines name the real sibling versions, so this works.
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" ||
        die "go get go.etcd.io/etcd/server/v3@v$ETCD_VERSION failed"
    go_build "$dir/bin/etcd" go.etcd.io/etcd/server/v3
    log "built $dir/bin/etcd in $((SECONDS - t0))s"
}

KNOWN_CMDS=" kube-apiserver kubelet kube-proxy kube-scheduler kube-controller-manager kubectl kwok helm "

ensure_built() { # [EXTRA CMD...]
    local cmd missing=()
    for cmd in kube-apiserver "$@"; do
        [[ $KNOWN_CMDS == *" $cmd "* ]] || die "unknown k8s command: $cmd (known:$KNOWN_CMDS)"
        [[ -x $(k8s_bin "$cmd") ]] || missing+=("$cmd")
    done
    [[ -x $ETCD_BIN && ${#missing[@]} -eq 0 ]] && return 0
    command -v go >/dev/null || die "go is not on PATH; it is needed to build ${missing[*]:-} etcd"
    mkdir -p "$CACHE"
    # Serialise concurrent builders of the same versions (two test runs at once); a waiting
    # run then finds the binaries built. Builds of other versions (the cgroup v2 node's) go
    # on in parallel. The lock fd is closed afterwards so it does not leak into the daemons
    # that `start` launches.
    local lockfd oldpwd=$PWD
    exec {lockfd}>"$CACHE/.build-k8s-$K8S_VERSION-etcd-$ETCD_VERSION.lock"
    flock "$lockfd"
    if [[ ! -x $ETCD_BIN ]]; then build_etcd; fi
    missing=()
    for cmd in kube-apiserver "$@"; do
        [[ -x $(k8s_bin "$cmd") ]] || missing+=("$cmd")
    done
    local want_kwok=0 k8s_missing=()
    for cmd in "${missing[@]}"; do
        if [[ $cmd == kwok ]]; then want_kwok=1; else k8s_missing+=("$cmd"); fi
    done
    if [[ ${#k8s_missing[@]} -gt 0 ]]; then build_k8s "${k8s_missing[@]}"; fi
    # After the k8s binaries: kwok then compiles little more than itself.
    if [[ $want_kwok == 1 ]]; then build_kwok; fi
    exec {lockfd}>&-
    cd "$oldpwd"
    for cmd in kube-apiserver "$@"; do
        [[ -x $(k8s_bin "$cmd") ]] || die "build finished but $(k8s_bin "$cmd") is missing"
    done
    [[ -x $ETCD_BIN ]] || die "build finished but $ETCD_BIN is missing"
}

# ---------------------------------------------------------------------------------------
# Processes (pid_alive, launch, stop_proc, ...: tests/lib/cluster.sh; logs in DIR/logs/)
# ---------------------------------------------------------------------------------------

tail_logs() { # DIR
    local f
    for f in "$1/logs/etcd.log" "$1/logs/kube-apiserver.log"; do
        [[ -f $f ]] || continue
        echo "----- last 40 lines of $f -----" >&2
        tail -n 40 "$f" >&2
    done
}

fail_start() { # DIR MESSAGE
    echo "$PROG: error: $2" >&2
    tail_logs "$1"
    stop_proc "$1" kube-apiserver || true
    stop_proc "$1" etcd || true
    exit 1
}

wait_etcd() { # DIR
    local dir=$1 deadline=$((SECONDS + READY_TIMEOUT))
    while ((SECONDS < deadline)); do
        pid_alive "$(read_pid "$dir/etcd.pid")" etcd || fail_start "$dir" "etcd exited during startup"
        if curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; then
            return 0
        fi
        sleep 0.2
    done
    fail_start "$dir" "etcd not healthy after ${READY_TIMEOUT}s"
}

wait_apiserver() { # DIR
    local dir=$1 start=$SECONDS
    while ((SECONDS < start + READY_TIMEOUT)); do
        pid_alive "$(read_pid "$dir/kube-apiserver.pid")" kube-apiserver ||
            fail_start "$dir" "kube-apiserver exited during startup"
        if curl -fsS --max-time 2 --cacert "$dir/pki/apiserver.crt" \
                -H "Authorization: Bearer $(cat "$dir/token")" \
                "https://$BIND_ADDRESS:$APISERVER_PORT/readyz" >/dev/null 2>&1; then
            log "kube-apiserver ready after $((SECONDS - start))s"
            return 0
        fi
        sleep 0.5
    done
    fail_start "$dir" "kube-apiserver not ready after ${READY_TIMEOUT}s"
}

start_apiserver() { # DIR   (flags come from DIR/kube-apiserver.args, written by cmd_start)
    local dir=$1 args=()
    mapfile -t args <"$dir/kube-apiserver.args"
    launch "$dir" kube-apiserver "$APISERVER_BIN" "${args[@]}"
    wait_apiserver "$dir"
}

write_kubeconfig() { # DIR
    local dir=$1 ca
    ca=$(base64 -w0 <"$dir/pki/apiserver.crt")
    # Embedded CA: the kubeconfig keeps working if DIR is copied or mounted elsewhere.
    cat >"$dir/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: koord-e2e
  cluster:
    server: https://$BIND_ADDRESS:$APISERVER_PORT
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $(cat "$dir/token")
contexts:
- name: koord-e2e
  context:
    cluster: koord-e2e
    user: admin
current-context: koord-e2e
EOF
    chmod 600 "$dir/kubeconfig.tmp"
    mv -f "$dir/kubeconfig.tmp" "$dir/kubeconfig"
}

# Node mode: a cluster CA for client certificates (kubelets, and the apiserver's client
# certificate towards kubelets). ECDSA P-256, valid two days: test clusters are short-lived.
node_pki() { # DIR
    local pki=$1/pki
    (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 2 -subj "/CN=koord-e2e-cluster-ca" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        2>/dev/null) || die "openssl could not make the cluster CA"
    issue_client_cert "$pki" kube-apiserver-kubelet-client system:masters "$pki/kubelet-client"
}

issue_client_cert() { # PKI CN ORG OUT   -> OUT.crt, OUT.key
    local pki=$1 cn=$2 org=$3 out=$4 ext
    ext=$(mktemp)
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$ext"
    if ! (umask 077 && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout "$out.key" -out "$out.csr" -subj "/O=$org/CN=$cn" 2>/dev/null &&
            openssl x509 -req -in "$out.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
                -CAcreateserial -days 2 -extfile "$ext" -out "$out.crt" 2>/dev/null); then
        rm -f "$ext"
        die "openssl could not issue a client certificate for $cn"
    fi
    rm -f "$ext" "$out.csr"
}

# Ports and paths of a started DIR, so stop/restart reuse them even if the env changed.
save_state() {
    printf 'APISERVER_PORT=%q\nETCD_PORT=%q\nETCD_PEER_PORT=%q\nBIND_ADDRESS=%q\nSERVICE_CIDR=%q\nNODE_MODE=%q\n' \
        "$APISERVER_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT" "$BIND_ADDRESS" "$SERVICE_CIDR" \
        "$NODE_MODE" >"$1/state.env"
}
load_state() {
    [[ -f $1/state.env ]] || die "$1 was not started by $PROG start (no state.env)"
    # shellcheck disable=SC1091
    source "$1/state.env"
}

# ---------------------------------------------------------------------------------------
# kubectl
# ---------------------------------------------------------------------------------------

# Prefer a kubectl of the server's minor version: plain `kubectl` may be an old distro
# build (outside skew) or a dispatcher. Versioned binaries such as kubectl.1.33 can sit
# next to the dispatcher without being on PATH, so look there too.
find_kubectl() {
    if [[ -n ${KUBECTL:-} ]]; then echo "$KUBECTL"; return; fi
    # One built with the cluster's binaries (the cgroup v2 node builds its own: no packaged
    # kubectl is within skew of 1.37).
    if [[ -x $(k8s_bin kubectl) ]]; then k8s_bin kubectl; return; fi
    local minor=${K8S_VERSION%.*} k real
    if k=$(command -v "kubectl.$minor"); then echo "$k"; return; fi
    if k=$(command -v kubectl); then
        real=$(readlink -f "$k")
        if [[ -x ${real%/*}/kubectl.$minor ]]; then echo "${real%/*}/kubectl.$minor"; return; fi
        echo "$k"
        return
    fi
    die "no kubectl found (set KUBECTL)"
}

# ---------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------

# A kubectl of the server's minor version exists (KUBECTL, one built with the cluster's
# binaries, or a packaged kubectl.<minor>)? Otherwise `build` compiles one: plain `kubectl` may be
# far outside skew (no package ships a 1.37 kubectl here).
have_matched_kubectl() {
    [[ -n ${KUBECTL:-} || -x $(k8s_bin kubectl) ]] && return 0
    local minor=${K8S_VERSION%.*} k
    command -v "kubectl.$minor" >/dev/null && return 0
    k=$(command -v kubectl) || return 1
    k=$(readlink -f "$k")
    [[ -x ${k%/*}/kubectl.$minor ]]
}

cmd_build() { # [CMD...]
    local extra=()
    if ! have_matched_kubectl && [[ " $* " != *" kubectl "* ]]; then extra=(kubectl); fi
    ensure_built "$@" "${extra[@]}"
    echo "$APISERVER_BIN"
    echo "$ETCD_BIN"
    local cmd
    for cmd in "$@"; do k8s_bin "$cmd"; done
}

# helm, for tests/e2e/helm.sh: built in the default pin's wrapper module, under the same lock as
# the Kubernetes build (one wrapper directory), without waiting for etcd.
cmd_build_helm() {
    [[ $K8S_VERSION == "$K8S_DEFAULT" ]] || die "helm is built with the default Kubernetes pin ($K8S_DEFAULT): unset KOORD_E2E_K8S_VERSION"
    local bin lockfd
    bin=$(k8s_bin helm)
    if [[ ! -x $bin ]]; then
        command -v go >/dev/null || die "go is not on PATH; it is needed to build helm"
        mkdir -p "$CACHE"
        exec {lockfd}>"$CACHE/.build-k8s-$K8S_VERSION-etcd-$ETCD_VERSION.lock"
        flock "$lockfd"
        [[ -x $bin ]] || (build_k8s helm)
        exec {lockfd}>&-
        [[ -x $bin ]] || die "build finished but $bin is missing"
    fi
    echo "$bin"
}

cmd_start() {
    local dir=$1
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd) # absolute: paths end up in flags and the kubeconfig
    if pid_alive "$(read_pid "$dir/etcd.pid")" etcd ||
        pid_alive "$(read_pid "$dir/kube-apiserver.pid")" kube-apiserver; then
        die "a control plane is already running in $dir (run: $PROG stop $dir)"
    fi
    ensure_built
    command -v openssl >/dev/null || die "openssl is needed for the service-account key"
    command -v curl >/dev/null || die "curl is needed for readiness checks"
    local p
    for p in "$ETCD_PORT" "$ETCD_PEER_PORT"; do
        if port_busy "$p"; then die "port 127.0.0.1:$p is already in use (override with KOORD_E2E_*_PORT)"; fi
    done
    if port_busy "$APISERVER_PORT" "$BIND_ADDRESS"; then
        die "port $BIND_ADDRESS:$APISERVER_PORT is already in use (override with KOORD_E2E_APISERVER_PORT)"
    fi
    # Read whole, then matched: `ip ... | grep -q` under pipefail fails when grep exits at its
    # match before ip has written everything (SIGPIPE), which a host with many interfaces
    # (the other node suites' veths) made happen.
    if [[ $BIND_ADDRESS != 127.0.0.1 ]] && ! grep -q " inet $BIND_ADDRESS/" <<<"$(ip -4 -o addr show)"; then
        die "KOORD_E2E_BIND_ADDRESS=$BIND_ADDRESS is not an address of this machine"
    fi

    local t0=$SECONDS
    # Fresh state each start: old etcd data or certs from another run must not leak in.
    rm -rf "$dir/etcd-data" "$dir/pki" "$dir/logs"
    mkdir -p "$dir/pki"
    save_state "$dir"

    # Token auth: one static admin in system:masters, simpler than client certs.
    (umask 077 && openssl rand -hex 24 >"$dir/token")
    (umask 077 && echo "$(cat "$dir/token"),admin,admin,\"system:masters\"" >"$dir/pki/tokens.csv")
    # More users of the caller's (tests/scale: one per applier, named as its ServiceAccount).
    if [[ -n $EXTRA_TOKENS ]]; then
        (umask 077 && grep -v '^[[:space:]]*$' <<<"$EXTRA_TOKENS" >>"$dir/pki/tokens.csv") || true
    fi
    # Service-account signing key: mandatory flag; the key-file flag accepts the private key.
    (umask 077 && openssl genrsa -out "$dir/pki/sa.key" 2048 2>/dev/null)
    if [[ $NODE_MODE == 1 ]]; then node_pki "$dir"; fi

    # --unsafe-no-fsync: throwaway data, and fsync on a busy CI disk slows every write.
    launch "$dir" etcd "$ETCD_BIN" \
        --name=default \
        --data-dir="$dir/etcd-data" \
        --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" \
        --unsafe-no-fsync
    wait_etcd "$dir"

    # Minimal flags (as envtest): no --tls-cert-file, so the apiserver writes a
    # self-signed pki/apiserver.crt (SANs: the advertise address, the first Service IP and
    # kubernetes.default.svc...), reused on restart, which the kubeconfig trusts.
    # --advertise-address/--bind-address: never depend on the host having a default route.
    cat >"$dir/kube-apiserver.args" <<EOF
--etcd-servers=http://127.0.0.1:$ETCD_PORT
--bind-address=$BIND_ADDRESS
--advertise-address=$BIND_ADDRESS
--secure-port=$APISERVER_PORT
--cert-dir=$dir/pki
--service-cluster-ip-range=$SERVICE_CIDR
--service-account-issuer=https://$BIND_ADDRESS:$APISERVER_PORT
--service-account-key-file=$dir/pki/sa.key
--service-account-signing-key-file=$dir/pki/sa.key
--token-auth-file=$dir/pki/tokens.csv
--allow-privileged=true
--profiling=false
EOF
    if [[ $NODE_MODE == 1 ]]; then
        # A node: the controller-manager creates the default ServiceAccounts (ServiceAccount
        # admission stays on) and signs their tokens with pki/sa.key; the lease reconciler
        # points the `kubernetes` Service at the bind address; kubelets authenticate with
        # certificates of pki/ca.crt and are limited to their own Node (Node authorizer,
        # NodeRestriction); `kubectl logs/exec` reach the kubelet with pki/kubelet-client.
        cat >>"$dir/kube-apiserver.args" <<EOF
--authorization-mode=Node,RBAC
--enable-admission-plugins=NodeRestriction
--endpoint-reconciler-type=lease
--client-ca-file=$dir/pki/ca.crt
--kubelet-client-certificate=$dir/pki/kubelet-client.crt
--kubelet-client-key=$dir/pki/kubelet-client.key
--kubelet-preferred-address-types=InternalIP
EOF
    else
        # --disable-admission-plugins=ServiceAccount: no controller-manager creates the
        #   "default" ServiceAccount, so Pod creation would fail without it.
        # --endpoint-reconciler-type=none: the "kubernetes" Endpoints cannot hold a loopback
        #   address; the reconciler would only spam the log.
        cat >>"$dir/kube-apiserver.args" <<EOF
--authorization-mode=RBAC
--disable-admission-plugins=ServiceAccount
--endpoint-reconciler-type=none
EOF
    fi
    # The caller's own (tests/scale: aggregator routing for Service webhooks, an audit log).
    if [[ -n $APISERVER_EXTRA_ARGS ]]; then
        grep -v '^[[:space:]]*$' <<<"$APISERVER_EXTRA_ARGS" >>"$dir/kube-apiserver.args" || true
    fi
    start_apiserver "$dir"
    write_kubeconfig "$dir"
    log "control plane up in $((SECONDS - t0))s: etcd pid $(cat "$dir/etcd.pid"), kube-apiserver pid $(cat "$dir/kube-apiserver.pid")"
    # stdout: eval-able lines for the caller.
    echo "KUBECONFIG=$dir/kubeconfig"
    local kc
    if kc=$(find_kubectl 2>/dev/null); then echo "KUBECTL=$kc"; fi
}

cmd_stop() {
    local dir=$1
    [[ -d $dir ]] || die "no such directory: $dir"
    # apiserver first, so it does not log a storm of etcd connection errors.
    stop_proc "$dir" kube-apiserver
    stop_proc "$dir" etcd
}

cmd_restart_apiserver() {
    local dir
    dir=$(cd "$1" && pwd)
    load_state "$dir"
    [[ -f $dir/kube-apiserver.args ]] || die "$dir/kube-apiserver.args missing; run $PROG start first"
    pid_alive "$(read_pid "$dir/etcd.pid")" etcd || die "etcd is not running in $dir"
    stop_proc "$dir" kube-apiserver
    # The old listener can linger for a moment after exit.
    local i
    for ((i = 0; i < 50; i++)); do port_busy "$APISERVER_PORT" "$BIND_ADDRESS" || break; sleep 0.1; done
    if port_busy "$APISERVER_PORT" "$BIND_ADDRESS"; then die "port $BIND_ADDRESS:$APISERVER_PORT still in use after stopping kube-apiserver"; fi
    mkdir -p "$dir/logs"
    echo "----- restart at $(date -u +%FT%TZ) -----" >>"$dir/logs/kube-apiserver.log"
    start_apiserver "$dir"
    # The serving cert is reused from --cert-dir, but rewrite in case it was regenerated.
    write_kubeconfig "$dir"
}

cmd_client_cert() { # DIR CN ORG OUT
    local dir
    dir=$(cd "$1" && pwd)
    load_state "$dir"
    [[ $NODE_MODE == 1 && -f $dir/pki/ca.key ]] || die "$dir was not started in node mode (KOORD_E2E_NODE_MODE=1)"
    issue_client_cert "$dir/pki" "$2" "$3" "$4"
}

usage() {
    sed -n '7,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case ${1:-} in
build) shift; cmd_build "$@" ;;
start) [[ $# -eq 2 ]] || usage; cmd_start "$2" ;;
stop) [[ $# -eq 2 ]] || usage; cmd_stop "$2" ;;
restart-apiserver) [[ $# -eq 2 ]] || usage; cmd_restart_apiserver "$2" ;;
client-cert) [[ $# -eq 5 ]] || usage; cmd_client_cert "$2" "$3" "$4" "$5" ;;
kubectl) find_kubectl ;;
build-helm) cmd_build_helm ;;
helm-path) k8s_bin helm ;;
*) usage ;;
esac
