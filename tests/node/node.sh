#!/usr/bin/env bash
# A one-node Kubernetes cluster from real parts, for the node tests (see tests/node/README.md).
#
# Usage:
#   node.sh build                 build/check everything the node needs; print the binaries' paths
#   node.sh start DIR             bridge, control plane, containerd, kubelet, kube-proxy,
#                                 scheduler, controller-manager; local images imported; waits for
#                                 the Node to be Ready; writes DIR/node.env (eval-able)
#   node.sh import DIR ARCHIVE... import OCI archives into the node's containerd (k8s.io namespace)
#   node.sh stop DIR              tear everything down (by PID), leaving the machine as it was
#   node.sh check-clean           exit 1 (and say what) if anything of a node is left on the machine
#
# Everything stays on this machine: the API server, the kubelet and the pods live on a bridge
# the script creates (KOORD_NODE_BRIDGE, 10.247.0.1/24); the Service range has no route off the
# machine; a FORWARD rule drops anything the bridge would send elsewhere.
#
# The k8s binaries are built by tests/e2e/control-plane.sh (same k8s.io/kubernetes version for
# all, cached under $HOME/.cache/koord-qos-e2e). containerd, runc and the CNI plugins are
# Debian's (.ci/run installs them). Ports and names do not collide with tests/e2e/run.
#
# Environment (all optional): KOORD_NODE_NAME (koord-node), KOORD_NODE_BRIDGE (knode0),
# KOORD_NODE_MAX_PODS (120), KOORD_NODE_READY_TIMEOUT (120 s), and control-plane.sh's
# KOORD_E2E_CACHE / KOORD_E2E_K8S_VERSION / KOORD_E2E_ETCD_VERSION.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CONTROL_PLANE=$REPO/tests/e2e/control-plane.sh
PROG=node.sh
# shellcheck source=tests/lib/cluster.sh
source "$REPO/tests/lib/cluster.sh"
# shellcheck source=tests/lib/node-parts.sh
source "$REPO/tests/lib/node-parts.sh"

NODE_NAME=${KOORD_NODE_NAME:-koord-node}
BRIDGE=${KOORD_NODE_BRIDGE:-knode0}
MAX_PODS=${KOORD_NODE_MAX_PODS:-120}
READY_TIMEOUT=${KOORD_NODE_READY_TIMEOUT:-120}

# Addresses: pods and the node on 10.247.0.0/24 (the bridge is .1), Services on 10.248.0.0/24.
NODE_IP=10.247.0.1
POD_CIDR=10.247.0.0/24
SERVICE_CIDR=10.248.0.0/24
# Ports, all distinct from tests/e2e (23790/23800/26443) and from a real node's defaults.
export KOORD_E2E_ETCD_PORT=24790 KOORD_E2E_ETCD_PEER_PORT=24800 KOORD_E2E_APISERVER_PORT=27443
KUBELET_PORT=27250
KUBELET_HEALTHZ_PORT=27248
PROXY_HEALTHZ_PORT=27256
PROXY_METRICS_PORT=27249
SCHEDULER_PORT=27259
CONTROLLER_MANAGER_PORT=27257

CNI_BIN_DIR=/usr/lib/cni
# A FORWARD rule with this comment keeps pod traffic on the machine; also how stop finds it.
GUARD_COMMENT=koord-node-guard
# Host settings the kubelet, kube-proxy and the bridge plugin change: saved at start, restored
# at stop. (The kubelet sets the first six unconditionally; no flag stops it.)
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
    net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables
    net.bridge.bridge-nf-call-ip6tables)
# Host paths the parts write outside DIR (containerd's shim sockets, CNI result cache, the
# kubelet's container log symlinks): removed at stop if start created them.
HOST_PATHS=(/run/containerd /var/lib/cni /var/log/containers /var/log/pods)
# The applier DaemonSet mounts /sys/fs with HostToContainer propagation, which containerd only
# allows when the host mount holding it is shared or slave. systemd makes every mount shared at
# boot; a host without systemd as init (this one) has them private: start makes /sys shared
# and stop puts it back.
SHARED_MOUNT=/sys
# Every cgroup hierarchy the kubelet creates kubepods in (cgroupfs driver, v1 + the v2 mount).
CGROUP_ROOT=/sys/fs/cgroup

trap 'echo "$PROG: error: \"$BASH_COMMAND\" failed (exit $?) at line $LINENO" >&2' ERR

# ---------------------------------------------------------------------------------------
# Prerequisites and build
# ---------------------------------------------------------------------------------------

K8S_CMDS=(kubelet kube-proxy kube-scheduler kube-controller-manager)

check_host() {
    local problems=() t
    [[ $(id -u) == 0 ]] || problems+=("must run as root (kubelet, containerd, bridge, iptables)")
    for t in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables ip conntrack gcc openssl curl python3; do
        command -v "$t" >/dev/null || problems+=("$t not on PATH (Debian: containerd runc iptables iproute2 conntrack gcc openssl curl)")
    done
    for t in bridge host-local loopback; do
        [[ -x $CNI_BIN_DIR/$t ]] || problems+=("$CNI_BIN_DIR/$t missing (Debian: containernetworking-plugins)")
    done
    [[ -x /bin/busybox ]] && file_is_static /bin/busybox ||
        problems+=("/bin/busybox is not a static binary (Debian: busybox-static)")
    [[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || problems+=("no static libc for gcc -static (Debian: libc6-dev)")
    local ctrl
    for ctrl in cpu cpuacct cpuset memory pids; do
        grep -qE "^\S+ $CGROUP_ROOT/$ctrl cgroup \S*\b$ctrl\b" /proc/mounts ||
            problems+=("no cgroup v1 '$ctrl' hierarchy at $CGROUP_ROOT/$ctrl (this node runs the kubelet on cgroup v1 with cgroupfs)")
    done
    grep -q overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
        problems+=("no overlay filesystem (containerd's overlayfs snapshotter)")
    [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] || modprobe br_netfilter 2>/dev/null ||
        problems+=("no br_netfilter (kube-proxy's Service rules for pod traffic on the bridge)")
    if [[ ${#problems[@]} -gt 0 ]]; then
        printf '%s: error: this machine cannot run the test node:\n' "$PROG" >&2
        printf '  - %s\n' "${problems[@]}" >&2
        exit 1
    fi
}

file_is_static() { ! ldd "$1" >/dev/null 2>&1; }

cmd_build() {
    check_host
    "$CONTROL_PLANE" build "${K8S_CMDS[@]}"
}

# ---------------------------------------------------------------------------------------
# Processes (tests/lib/cluster.sh: stopped by PID, the name checked so a reused PID is never
# signalled)
# ---------------------------------------------------------------------------------------

# containerd's runc shims re-parent to init and outlive containerd; ours are the ones whose
# -address is this node's socket.
shim_pids() { # DIR
    local sock=$1/containerd/containerd.sock p
    for p in $(pgrep -f '^/usr/bin/containerd-shim-runc-v2 ' 2>/dev/null || true); do
        if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "-address $sock "; then echo "$p"; fi
    done
    return 0
}

# ---------------------------------------------------------------------------------------
# Start
# ---------------------------------------------------------------------------------------

write_configs() { # DIR
    local d=$1
    mkdir -p "$d/containerd" "$d/cni/net.d" "$d/kubelet" "$d/pod-logs" "$d/logs"
    cat >"$d/containerd/config.toml" <<EOF
# containerd for the test node: its own root, state and socket under the test dir.
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$d/containerd/containerd.sock"
[ttrpc]
  address = "$d/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # Root here lacks CAP_SYS_RESOURCE: without this runc fails every sandbox with
  # "can't get final child's PID from pipe: EOF" (nsexec cannot lower oom_score_adj).
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
EOF
    # No default route in pods: only the pod subnet (on-link) and the Service range.
    write_cni_conflist "$d/cni/net.d/10-koord-node.conflist" koord-node "$BRIDGE" "$d/cni/ipam" \
        "$POD_CIDR" "$NODE_IP" "$SERVICE_CIDR"
    printf 'nameserver %s\noptions ndots:1 timeout:1 attempts:1\n' "$NODE_IP" >"$d/resolv.conf"
    cat >"$d/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
# This machine: cgroup v1, no systemd as init. Since 1.35 the kubelet refuses cgroup v1 unless
# told not to.
cgroupDriver: cgroupfs
cgroupsPerQOS: true
failCgroupV1: false
# The kubelet's own Memory QoS (on by default since 1.37) works only on cgroup v2; off here, so
# the v1 node stays what it was (and the kubelet does not warn at start).
featureGates:
  MemoryQoS: false
failSwapOn: false
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
imageServiceEndpoint: unix://$d/containerd/containerd.sock
podLogsDir: $d/pod-logs
$(kubelet_config_common "$d/cp/pki/ca.crt" "$d/resolv.conf" "$MAX_PODS")
EOF
    write_kube_proxy_config "$d/kube-proxy.yaml" "$d/cp/kubeconfig" "$NODE_NAME" "$POD_CIDR" "$NODE_IP" \
        "127.0.0.1:$PROXY_HEALTHZ_PORT" "127.0.0.1:$PROXY_METRICS_PORT"
}

write_kubelet_kubeconfig() { # DIR
    local d=$1
    "$CONTROL_PLANE" client-cert "$d/cp" "system:node:$NODE_NAME" system:nodes "$d/kubelet/node-client"
    write_node_kubeconfig "$d/kubelet/kubeconfig" koord-node "https://$NODE_IP:$KOORD_E2E_APISERVER_PORT" \
        "$d/cp/pki/apiserver.crt" "$d/kubelet/node-client.crt" "$d/kubelet/node-client.key"
}

# shared, slave or private: the propagation of a mount point, from its optional fields.
propagation() { # MOUNTPOINT
    awk -v m="$1" '$5 == m {
        p = "private"
        for (i = 7; $i != "-"; i++) { if ($i ~ /^shared:/) p = "shared"; else if ($i ~ /^master:/ && p != "shared") p = "slave" }
        print p; exit }' /proc/self/mountinfo
}

save_host_state() { # DIR
    local d=$1 s p
    : >"$d/sysctls.saved"
    for s in "${SYSCTLS[@]}"; do
        if [[ -e /proc/sys/${s//.//} ]]; then
            echo "$s=$(cat "/proc/sys/${s//.//}")" >>"$d/sysctls.saved"
        fi
    done
    veth_names >"$d/veths.saved"
    propagation "$SHARED_MOUNT" >"$d/propagation.saved"
    : >"$d/host-paths.created"
    for p in "${HOST_PATHS[@]}"; do
        [[ -e $p ]] || echo "$p" >>"$d/host-paths.created"
    done
}

share_sys() { # DIR
    case $(cat "$1/propagation.saved") in
    shared | slave) ;;
    private) mount --make-shared "$SHARED_MOUNT" || die "cannot make $SHARED_MOUNT a shared mount" ;;
    *) die "$SHARED_MOUNT is not a mount point here" ;;
    esac
}

setup_network() { # DIR
    ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
    echo "$BRIDGE" >"$1/bridge.created"
    ip addr add "$NODE_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    iptables -I FORWARD 1 -i "$BRIDGE" ! -o "$BRIDGE" -m comment --comment "$GUARD_COMMENT" -j DROP
}

cmd_start() {
    local d=$1
    check_host
    mkdir -p "$d"
    d=$(cd "$d" && pwd)
    [[ ! -e $d/node.env ]] || die "$d holds a started node; run: $PROG stop $d"
    # Images, container layers and logs need little, but a full disk makes the kubelet taint
    # the node (disk-pressure) and every later step time out: say so up front.
    local avail_kib
    avail_kib=$(df -Pk "$d" | awk 'NR == 2 { print $4 }')
    ((avail_kib >= 2 * 1024 * 1024)) ||
        die "only $((avail_kib / 1024)) MiB free on the filesystem of $d; the node needs 2 GiB"
    local problems
    problems=$(leftovers) && true
    [[ -z $problems ]] || die "the machine is not clean (run $PROG stop on the old dir, or remove these):
$problems"
    local t0=$SECONDS bins
    mapfile -t bins < <("$CONTROL_PLANE" build "${K8S_CMDS[@]}")
    local kubelet=${bins[2]} proxy=${bins[3]} scheduler=${bins[4]} cm=${bins[5]}
    printf 'KUBE_PROXY=%q\n' "$proxy" >"$d/bins.env"
    local kubectl
    kubectl=$("$CONTROL_PLANE" kubectl)
    echo "$d" >"$d/.node-dir" # marks the dir for stop

    save_host_state "$d"
    write_configs "$d"
    build_node_images "$d/images"
    setup_network "$d"
    share_sys "$d"

    KOORD_E2E_NODE_MODE=1 KOORD_E2E_BIND_ADDRESS=$NODE_IP KOORD_E2E_SERVICE_CIDR=$SERVICE_CIDR \
        "$CONTROL_PLANE" start "$d/cp" >/dev/null || die "control plane did not start"
    local kc=$d/cp/kubeconfig
    write_kubelet_kubeconfig "$d"

    launch "$d" containerd "$(command -v containerd)" --config "$d/containerd/config.toml"
    wait_for "containerd up" 30 ctr --address "$d/containerd/containerd.sock" version ||
        { must_run "$d" containerd; die "containerd did not answer"; }
    cmd_import "$d" "$d/images/pause.oci.tar" "$d/images/workload.oci.tar"

    launch_control_loops "$d" "$cm" "$scheduler" "$POD_CIDR" "$SERVICE_CIDR" "$CONTROLLER_MANAGER_PORT" \
        "$SCHEDULER_PORT"
    launch "$d" kubelet "$kubelet" --config="$d/kubelet/config.yaml" \
        --kubeconfig="$d/kubelet/kubeconfig" --root-dir="$d/kubelet/root" \
        --cert-dir="$d/kubelet/pki" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
    launch "$d" kube-proxy "$proxy" --config="$d/kube-proxy.yaml"

    local c
    if ! wait_for "Node $NODE_NAME Ready" "$READY_TIMEOUT" node_ready "$kubectl" "$kc"; then
        for c in kubelet containerd kube-proxy kube-scheduler kube-controller-manager; do
            must_run "$d" "$c" || true
        done
        tail -n 30 "$d/logs/kubelet.log" >&2 || true
        die "Node $NODE_NAME not Ready after ${READY_TIMEOUT}s"
    fi
    for c in containerd kube-controller-manager kube-scheduler kubelet kube-proxy; do
        must_run "$d" "$c" || die "$c exited during start"
    done
    wait_namespace_defaults "$kubectl" "$kc"

    cat >"$d/node.env" <<EOF
KUBECONFIG=$kc
KUBECTL=$kubectl
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
PAUSE_IMAGE=$PAUSE_IMAGE
WORKLOAD_IMAGE=$WORKLOAD_IMAGE
CONTAINERD_ADDRESS=$d/containerd/containerd.sock
EOF
    log "node $NODE_NAME up in $((SECONDS - t0))s (dir $d)"
    cat "$d/node.env"
}

cmd_import() { # DIR ARCHIVE...
    local d=$1 a
    shift
    for a in "$@"; do
        [[ -f $a ]] || die "no such archive: $a"
        ctr --address "$d/containerd/containerd.sock" -n k8s.io images import "$a" >/dev/null ||
            die "ctr images import $a failed"
        log "imported $a"
    done
}

# ---------------------------------------------------------------------------------------
# Stop
# ---------------------------------------------------------------------------------------

# Mount points at or below DIR, deepest first.
mounts_under() { # DIR
    awk -v d="$1" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print p }' \
        /proc/self/mountinfo | sort -r
}

kube_chains() { # iptables|ip6tables
    local t
    for t in filter nat mangle; do
        "$1" -t "$t" -S 2>/dev/null | awk -v t="$t" '$1 == "-N" && $2 ~ /^KUBE-/ { print t, $2 }'
    done
}

remove_kube_chains() {
    local ipt t c
    for ipt in iptables ip6tables; do
        # Rules in the built-in chains that jump to KUBE-* chains first, then the chains.
        for t in filter nat mangle; do
            "$ipt" -t "$t" -S 2>/dev/null | { grep -E '^-A [A-Z]+ .*-j KUBE-' || true; } |
                { grep -vE '^-A KUBE-' || true; } | while read -r line; do
                    # shellcheck disable=SC2086
                    "$ipt" -t "$t" ${line/-A/-D} 2>/dev/null || true
                done
        done
        kube_chains "$ipt" | while read -r t c; do "$ipt" -t "$t" -F "$c" 2>/dev/null || true; done
        kube_chains "$ipt" | while read -r t c; do "$ipt" -t "$t" -X "$c" 2>/dev/null || true; done
    done
}

# kubepods cgroup directories of every hierarchy, deepest first.
kubepods_dirs() {
    local h
    for h in "$CGROUP_ROOT"/*/; do
        [[ -d ${h}kubepods ]] && find "${h}kubepods" -depth -type d
    done
    return 0
}

# Processes in any kubepods cgroup.
kubepods_pids() {
    local d
    while read -r d; do
        [[ -n $d ]] && cat "$d/cgroup.procs" 2>/dev/null
    done < <(kubepods_dirs)
    return 0
}

cmd_stop() {
    local d=$1
    [[ -d $d ]] || die "no such directory: $d"
    d=$(cd "$d" && pwd)
    [[ -f $d/.node-dir ]] || die "$d was not made by $PROG start"
    local kubectl kc=$d/cp/kubeconfig
    kubectl=$("$CONTROL_PLANE" kubectl)

    # 1. Controllers first (nothing recreates pods), then every pod through the API, so the
    #    kubelet stops them and the CNI plugin tears down their network.
    stop_proc "$d" kube-controller-manager
    stop_proc "$d" kube-scheduler
    if pid_alive "$(read_pid "$d/kubelet.pid")" kubelet && [[ -f $kc ]] &&
        "$kubectl" --kubeconfig="$kc" get --raw /readyz >/dev/null 2>&1; then
        "$kubectl" --kubeconfig="$kc" delete pods --all --all-namespaces --grace-period=2 \
            --wait=false >/dev/null 2>&1 || true
        local i
        for ((i = 0; i < 120; i++)); do
            [[ -z $("$kubectl" --kubeconfig="$kc" get pods -A -o name 2>/dev/null) ]] &&
                [[ -z $(ip -o link show master "$BRIDGE" 2>/dev/null || true) ]] && break
            sleep 0.5
        done
        ((i < 120)) || warn "pods or veths still there after 60 s; removing them by force"
    fi
    # 2. kube-proxy and its rules (--cleanup exits 1 without ipset but removes what it can).
    stop_proc "$d" kube-proxy
    local KUBE_PROXY=""
    # shellcheck disable=SC1091
    [[ -f $d/bins.env ]] && source "$d/bins.env"
    if [[ -x $KUBE_PROXY ]]; then "$KUBE_PROXY" --cleanup >>"$d/logs/kube-proxy.log" 2>&1 || true; fi
    # 3. kubelet, then the control plane.
    stop_proc "$d" kubelet 30
    if [[ -f $d/cp/state.env ]]; then "$CONTROL_PLANE" stop "$d/cp" || warn "control-plane.sh stop failed"; fi
    # 4. Containers the kubelet did not remove, then containerd and its shims.
    local sock=$d/containerd/containerd.sock c
    if pid_alive "$(read_pid "$d/containerd.pid")" containerd; then
        for c in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
        done
        sleep 0.5
        for c in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
        done
        for c in $(ctr --address "$sock" -n k8s.io containers ls -q 2>/dev/null); do
            ctr --address "$sock" -n k8s.io containers delete "$c" >/dev/null 2>&1 || true
        done
    fi
    stop_proc "$d" containerd
    local p
    for p in $(shim_pids "$d"); do
        log "stopping leftover shim pid $p"
        kill -KILL "$p" 2>/dev/null || true
    done
    # Container processes outlive their shims when those died with the rest (a suite killed
    # by SIGKILL). Whatever is still in kubepods is this node's: start refuses to run while a
    # kubepods cgroup exists.
    local pids
    pids=$(kubepods_pids | sort -un | tr '\n' ' ')
    if [[ -n $pids ]]; then
        log "killing container processes left in kubepods: $pids"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        local i
        for ((i = 0; i < 50; i++)); do [[ -z $(kubepods_pids) ]] && break; sleep 0.1; done
    fi
    # 5. Mounts (netns bind mounts, rootfs overlays, pod volumes, the kubelet's root).
    local m
    for m in $(mounts_under "$d"); do umount "$m" 2>/dev/null || umount -l "$m" || warn "cannot unmount $m"; done
    # 6. kubepods cgroups, leaves first (processes still inside make rmdir fail: said below).
    local cg
    while read -r cg; do
        [[ -n $cg ]] || continue
        rmdir "$cg" 2>/dev/null || warn "cannot remove cgroup $cg ($(wc -l <"$cg/cgroup.procs" 2>/dev/null) processes)"
    done < <(kubepods_dirs)
    # 7. Network: veths left on the bridge, the bridge, the guard rule, KUBE-* chains.
    local v
    for v in $({ ip -o link show master "$BRIDGE" 2>/dev/null || true; } | awk -F': ' '{print $2}' | cut -d@ -f1); do
        ip link del "$v" 2>/dev/null || true
    done
    if [[ -f $d/bridge.created ]]; then ip link del "$BRIDGE" 2>/dev/null || true; fi
    while iptables -D FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -m comment --comment "$GUARD_COMMENT" -j DROP 2>/dev/null; do :; done
    remove_kube_chains
    # 8. Host settings and paths.
    local line
    if [[ -f $d/sysctls.saved ]]; then
        while IFS= read -r line; do
            sysctl -q -w "$line" >/dev/null || warn "cannot restore $line"
        done <"$d/sysctls.saved"
    fi
    if [[ -f $d/host-paths.created ]]; then
        while IFS= read -r p; do
            [[ -n $p ]] && rm -rf -- "$p"
        done <"$d/host-paths.created"
    fi
    if [[ $(cat "$d/propagation.saved" 2>/dev/null) == private && $(propagation "$SHARED_MOUNT") != private ]]; then
        mount --make-private "$SHARED_MOUNT" || warn "cannot make $SHARED_MOUNT private again"
    fi
    rm -f "$d/node.env"
    exit_if_left "error: stop left things behind:" "$d"
    log "node stopped; nothing left behind"
}

# What a node leaves on the machine, one line per item (empty: clean). Without DIR (before a
# start): what would clash with a new node. With DIR (after stop): also its processes, mounts,
# veths that were not there at start, and sysctls or host paths that differ from start.
leftovers() { # [DIR]
    local out=() l
    ip link show "$BRIDGE" >/dev/null 2>&1 && out+=("bridge $BRIDGE")
    while read -r l; do [[ -n $l ]] && out+=("iptables chain $l"); done < <(kube_chains iptables)
    while read -r l; do [[ -n $l ]] && out+=("ip6tables chain $l"); done < <(kube_chains ip6tables)
    grep -q "$GUARD_COMMENT" <<<"$(iptables -S FORWARD 2>/dev/null)" && out+=("iptables FORWARD guard rule")
    while read -r l; do [[ -n $l ]] && out+=("cgroup $l"); done < <(kubepods_dirs)
    local comm
    for comm in kubelet kube-proxy; do
        while read -r l; do [[ -n $l ]] && out+=("process $comm pid $l"); done < <(pgrep -x "$comm" 2>/dev/null || true)
    done
    if [[ -n ${1:-} ]]; then
        local d=$1 pid
        # Any process started for this node names its dir on the command line (flags, config,
        # the shims' -address).
        for pid in $(pgrep -f -- "$d/" 2>/dev/null || true); do
            [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
            tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$d/" || continue
            out+=("process $(cat "/proc/$pid/comm" 2>/dev/null) pid $pid")
        done
        while read -r l; do [[ -n $l ]] && out+=("mount $l"); done < <(mounts_under "$d")
        if [[ -f $d/veths.saved ]]; then
            while read -r l; do
                [[ -n $l ]] && ! grep -qxF "$l" "$d/veths.saved" && out+=("veth $l")
            done < <(veth_names)
        fi
        if [[ -f $d/sysctls.saved ]]; then
            local k v
            while IFS='=' read -r k v; do
                [[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] || out+=("sysctl $k=$(sysctl -n "$k") (was $v)")
            done <"$d/sysctls.saved"
        fi
        if [[ -f $d/host-paths.created ]]; then
            while read -r l; do [[ -n $l && -e $l ]] && out+=("path $l"); done <"$d/host-paths.created"
        fi
        if [[ -f $d/propagation.saved ]]; then
            l=$(propagation "$SHARED_MOUNT")
            [[ $l == "$(cat "$d/propagation.saved")" ]] ||
                out+=("mount propagation of $SHARED_MOUNT: $l (was $(cat "$d/propagation.saved"))")
        fi
    fi
    [[ ${#out[@]} -eq 0 ]] || printf '%s\n' "${out[@]}"
}

veth_names() { ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1; }

cmd_check_clean() {
    check_clean "no bridge, KUBE-* chain, guard rule, kubepods cgroup or node process${1:+; no process, mount or new veth of $1, sysctls and host paths as before}" "${1:-}"
}

usage() {
    sed -n '5,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case ${1:-} in
build) cmd_build ;;
start) [[ $# -eq 2 ]] || usage; cmd_start "$2" ;;
import) [[ $# -ge 3 ]] || usage; shift; cmd_import "$@" ;;
stop) [[ $# -eq 2 ]] || usage; cmd_stop "$2" ;;
check-clean) cmd_check_clean "${2:-}" ;;
*) usage ;;
esac
