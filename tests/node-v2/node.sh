#!/usr/bin/env bash
# The node of the current platform, for the cgroup v2 node tests (see tests/node-v2/README.md):
# Kubernetes 1.37 with containerd 2 on cgroup v2, the kubelet with the cgroupfs driver, or with
# the systemd driver under systemd as the guest's PID 1 (KOORD_V2_CGROUP_DRIVER=systemd).
#
# Usage:
#   node.sh build                 build/check everything the node needs; print the binaries' paths
#   node.sh vehicle [LOGDIR]      build the guest kernel and boot it once: one line that says
#                                 whether it starts on this host, and why not
#   node.sh start DIR             tap link, control plane on the host, the UML guest with
#                                 containerd, kubelet and kube-proxy; waits for the Node to be
#                                 Ready; writes DIR/node.env (eval-able)
#   node.sh sh SCRIPT             run SCRIPT (sh) inside the running guest; its output and rc
#   node.sh stop DIR              tear everything down (by PID), leaving the machine as it was
#   node.sh check-clean [DIR]     exit 1 (and say what) if anything of a node is left on the machine
#   node.sh reclaim               remove this slot's tap, guard rule and routes when no node of
#                                 the slot is alive (what a killed run leaves); start does it too
#
# The vehicle is User-Mode Linux (a kernel that runs as a process): the host kernel has no memory
# controller on cgroup v2, UML's has, boots in about 2 s and runs guest code natively. It is
# built from Debian's linux-source-6.12 with a patch that sizes its FP buffer from the host
# (uml/kernel.sh; Debian's prebuilt 6.1 panics on hosts with AMX and has no PSI), and checked
# before each start (uml/vehicle.sh). The guest boots the host's root read-only (hostfs) and gets its own
# writable places (guest/init.sh). The control plane (etcd, kube-apiserver, controller-manager,
# scheduler) runs on the host, bound to the host end of a tap device; the guest's eth0 (vec0) is
# the other end. Pods live on a bridge inside the guest. Nothing is routed off the machine: the
# host routes only the pod and Service ranges, into the tap, and a FORWARD rule drops anything
# from the tap to another interface.
#
# Environment (all optional): KOORD_V2_NODE_NAME (kv2-node), KOORD_V2_GUEST_MEM (1536M: small enough for the protection proof to press),
# KOORD_V2_DISK_MB (6144), KOORD_V2_SWAP_MB (2048: a second disk, /dev/ubdb, that a scenario
# may format and turn on as swap; sparse, nothing written until then), KOORD_V2_MAX_PODS (120),
# KOORD_V2_READY_TIMEOUT (240 s),
# KOORD_V2_KUBELET_CGROUP_ROOT (the kubelet's cgroupRoot, /),
# KOORD_V2_CGROUP_DRIVER (cgroupfs: the guest's init starts the daemons; systemd: it execs
# systemd with the node's own units, and containerd and the kubelet use the systemd driver),
# KOORD_V2_SLOT (0: which of ten side-by-side nodes, see below),
# KOORD_V2_K8S_VERSION (1.37.2), KOORD_V2_ETCD_VERSION (3.6.16), KOORD_V2_CONTAINERD_VERSION
# (build-containerd.sh), KOORD_V2_IMAGES (more OCI archives to import at boot), KOORD_E2E_CACHE.
set -Eeuo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CONTROL_PLANE=$REPO/tests/e2e/control-plane.sh
PROG=node.sh
# shellcheck source=tests/lib/cluster.sh
source "$REPO/tests/lib/cluster.sh"
# shellcheck source=tests/lib/node-parts.sh
source "$REPO/tests/lib/node-parts.sh"
trap 'echo "$PROG: error: \"$BASH_COMMAND\" failed (exit $?) at line $LINENO" >&2' ERR

NODE_NAME=${KOORD_V2_NODE_NAME:-kv2-node}
GUEST_MEM=${KOORD_V2_GUEST_MEM:-1536M}
DISK_MB=${KOORD_V2_DISK_MB:-6144}
SWAP_MB=${KOORD_V2_SWAP_MB:-2048}
MAX_PODS=${KOORD_V2_MAX_PODS:-120}
READY_TIMEOUT=${KOORD_V2_READY_TIMEOUT:-240}
# The kubelet's cgroupRoot (kind runs its kubelet under /kubelet); the guest's init makes it
# (cgroupfs), or it is the slice the kubelet's unit runs in (systemd: /kubelet is kubelet.slice).
KUBELET_CGROUP_ROOT=${KOORD_V2_KUBELET_CGROUP_ROOT:-/}
CGROUP_DRIVER=${KOORD_V2_CGROUP_DRIVER:-cgroupfs}
[[ $CGROUP_DRIVER == cgroupfs || $CGROUP_DRIVER == systemd ]] || {
    echo "$PROG: error: KOORD_V2_CGROUP_DRIVER=$CGROUP_DRIVER: want cgroupfs or systemd" >&2
    exit 2
}
[[ $KUBELET_CGROUP_ROOT =~ ^(/|(/[A-Za-z0-9_.]+)+)$ ]] || {
    echo "$PROG: error: KOORD_V2_KUBELET_CGROUP_ROOT=$KUBELET_CGROUP_ROOT: want / or /name[/name...] (letters, digits, _ .)" >&2
    exit 2
}
SYSTEMD=/lib/systemd/systemd
# Kubernetes 1.37.2: the newest release the Go proxy serves (its go line is 1.26.0). etcd 3.6:
# kubeadm pairs 1.37 with 3.6; 3.6.16 is the newest 3.6 patch served.
export KOORD_E2E_K8S_VERSION=${KOORD_V2_K8S_VERSION:-1.37.2}
export KOORD_E2E_ETCD_VERSION=${KOORD_V2_ETCD_VERSION:-3.6.16}

# Names start with kv2, addresses and ports are distinct from tests/e2e and tests/node. Up to
# ten nodes run side by side, one per slot (KOORD_V2_SLOT, 0-9): slot S has the tap kv2tapS,
# 10.249.S.0/24 (link and pods), Services 10.250.S.0/24 and every host port + 100*S.
SLOT=${KOORD_V2_SLOT:-0}
[[ $SLOT =~ ^[0-9]$ ]] || { echo "$PROG: error: KOORD_V2_SLOT=$SLOT: want one digit, 0-9" >&2; exit 2; }
TAP=kv2tap$SLOT
BRIDGE=kv2br$SLOT
HOST_IP=10.249.$SLOT.1 # the host end of the tap: the apiserver binds here
GUEST_IP=10.249.$SLOT.2 # the guest end: the kubelet's node IP
LINK_PREFIX=30
POD_CIDR=10.249.$SLOT.128/25
POD_GW=10.249.$SLOT.129
POD_PREFIX=25
SERVICE_CIDR=10.250.$SLOT.0/24
export KOORD_E2E_ETCD_PORT=$((25790 + 100 * SLOT)) KOORD_E2E_ETCD_PEER_PORT=$((25800 + 100 * SLOT))
export KOORD_E2E_APISERVER_PORT=$((28443 + 100 * SLOT))
SCHEDULER_PORT=$((28259 + 100 * SLOT))
CONTROLLER_MANAGER_PORT=$((28257 + 100 * SLOT))
AGENT_PORT=$((28900 + 100 * SLOT))
KUBELET_PORT=10250 # inside the guest: its own network stack, no clash with the host
GUARD_COMMENT=kv2-node-guard$SLOT
UML_KERNEL_SH=$HERE/uml/kernel.sh
VEHICLE_SH=$HERE/uml/vehicle.sh
CNI_BIN_DIR=/usr/lib/cni

K8S_CMDS=(kubelet kube-proxy kube-scheduler kube-controller-manager kubectl)

# ---------------------------------------------------------------------------------------
# Prerequisites and build
# ---------------------------------------------------------------------------------------

check_host() {
    local problems=() t
    [[ $(id -u) == 0 ]] || problems+=("must run as root (tap device, routes, iptables)")
    [[ -f /usr/src/linux-source-6.12.tar.xz ]] || problems+=("no kernel source for the guest (Debian: linux-source-6.12)")
    [[ -f /usr/share/doc/user-mode-linux/config.gz ]] || problems+=("no base config for the guest kernel (Debian: user-mode-linux)")
    [[ -c /dev/net/tun ]] || problems+=("no /dev/net/tun (the guest's network)")
    if [[ $CGROUP_DRIVER == systemd ]]; then
        [[ -x $SYSTEMD ]] || problems+=("$SYSTEMD missing (Debian: systemd; the guest's PID 1 with KOORD_V2_CGROUP_DRIVER=systemd)")
    fi
    for t in runc iptables ip mkfs.ext4 gcc make flex bison bc openssl curl /usr/bin/python3 redis-server redis-benchmark; do
        command -v "$t" >/dev/null || problems+=("$t not on PATH (Debian: runc iptables iproute2 e2fsprogs gcc make flex bison bc openssl curl python3 redis-server redis-tools)")
    done
    for t in bridge host-local loopback; do
        [[ -x $CNI_BIN_DIR/$t ]] || problems+=("$CNI_BIN_DIR/$t missing (Debian: containernetworking-plugins)")
    done
    [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 ||
        problems+=("/bin/busybox is not a static binary (Debian: busybox-static)")
    if [[ ${#problems[@]} -gt 0 ]]; then
        printf '%s: error: this machine cannot run the cgroup v2 node:\n' "$PROG" >&2
        printf '  - %s\n' "${problems[@]}" >&2
        exit 1
    fi
}

# Prints: kube-apiserver etcd kubelet kube-proxy kube-scheduler kube-controller-manager kubectl
# containerd containerd-shim-runc-v2 ctr linux.uml (one path a line).
cmd_build() {
    check_host
    "$CONTROL_PLANE" build "${K8S_CMDS[@]}"
    "$HERE/build-containerd.sh"
    "$UML_KERNEL_SH" build
}

# The guest kernel, booted once with a probe as init: one line, ok or the cause. Debian's
# prebuilt UML (6.1) is never the vehicle: it has no PSI, and it panics at its first process on
# hosts whose xstate is larger than its fixed 2696 bytes (AMX); the line names this host's.
cmd_vehicle() { # [LOGDIR]
    local kernel line
    kernel=$("$UML_KERNEL_SH" build) || die "building the guest kernel failed"
    if line=$("$VEHICLE_SH" check "$kernel" "${1:-}"); then
        [[ -z ${1:-} ]] || echo "$line" >"$1/vehicle.line"
        log "$line"
        log "vehicle: chosen: the kernel built from linux-source-6.12 with uml/host-fp-size.patch (its FP buffer sized from this host's xstate; PSI on), not Debian's prebuilt 6.1 (no PSI; a fixed 2696-byte FP buffer that hosts with AMX refuse)"
    else
        echo "$PROG: $line" >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------------------
# Configuration (written on the host into DIR/guest, read by the guest)
# ---------------------------------------------------------------------------------------

write_configs() { # DIR K8S_BIN_DIR CONTAINERD_BIN_DIR IMAGES...
    local d=$1 k8s=$2 ctrd=$3 g=$1/guest
    shift 3
    mkdir -p "$g/logs" "$g/cni"
    cat >"$g/guest.env" <<EOF
KV2_REPO='$REPO'
KV2_NODE_NAME='$NODE_NAME'
KV2_GUEST_IP='$GUEST_IP'
KV2_LINK_PREFIX='$LINK_PREFIX'
KV2_BRIDGE='$BRIDGE'
KV2_POD_GW='$POD_GW'
KV2_POD_PREFIX='$POD_PREFIX'
KV2_AGENT_PORT='$AGENT_PORT'
KV2_K8S_BIN='$k8s'
KV2_CONTAINERD_BIN='$ctrd'
KV2_IMAGES='$*'
KV2_KUBELET_CGROUP_ROOT='$KUBELET_CGROUP_ROOT'
KV2_CGROUP_DRIVER='$CGROUP_DRIVER'
KV2_KUBELET_FLAGS='$(kubelet_flags "$g")'
KV2_CPU_MHZ='$(awk -F': *' '/^cpu MHz/ { print $2; exit }' /proc/cpuinfo | grep -E '^[0-9]+\.[0-9]+$' || echo 2000.000)'
EOF
    # containerd 2 (config version 3) with the guest's default paths (all on guest-only
    # filesystems). NRI on, said explicitly (2.x's default): the applier registers there as a
    # plugin; tests/node-v2/nri.py turns it off and on to test the fallback.
    cat >"$g/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"

[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = $([[ $CGROUP_DRIVER == systemd ]] && echo true || echo false)
        BinaryName = "$(command -v runc)"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$CNI_BIN_DIR"]
    conf_dir = "$g/cni"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "/var/run/nri/nri.sock"
EOF
    # Pods: on-link pod range, routes to the Service range and to the host end of the link
    # (the apiserver), no default route.
    write_cni_conflist "$g/cni/10-kv2.conflist" kv2 "$BRIDGE" /var/lib/cni/ipam "$POD_CIDR" "$POD_GW" \
        "$SERVICE_CIDR" "$HOST_IP/32"
    printf 'nameserver %s\noptions ndots:1 timeout:1 attempts:1\n' "$HOST_IP" >"$g/resolv.conf"
    cat >"$g/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GUEST_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
# cgroup v2; cgroupfs under the shell init, systemd (over its private socket) under systemd.
cgroupDriver: $CGROUP_DRIVER
cgroupsPerQOS: true
cgroupRoot: $KUBELET_CGROUP_ROOT
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: unix:///run/containerd/containerd.sock
$(kubelet_config_common "$d/cp/pki/ca.crt" "$g/resolv.conf" "$MAX_PODS")
$(kubelet_feature_gates)
EOF
    write_kube_proxy_config "$g/kube-proxy.yaml" "$d/cp/kubeconfig" "$NODE_NAME" "$POD_CIDR" "$GUEST_IP" \
        127.0.0.1:10256 127.0.0.1:10249
    "$CONTROL_PLANE" client-cert "$d/cp" "system:node:$NODE_NAME" system:nodes "$g/node-client"
    write_node_kubeconfig "$g/kubelet.kubeconfig" kv2 "https://$HOST_IP:$KOORD_E2E_APISERVER_PORT" \
        "$d/cp/pki/apiserver.crt" "$g/node-client.crt" "$g/node-client.key"
    if [[ $CGROUP_DRIVER == systemd ]]; then write_units "$g" "$k8s" "$ctrd"; fi
}

kubelet_flags() { # GUEST_DIR
    echo "--config=$1/kubelet.yaml --kubeconfig=$1/kubelet.kubeconfig --root-dir=/var/lib/kubelet" \
        "--cert-dir=/var/lib/kubelet/pki --node-ip=$GUEST_IP --hostname-override=$NODE_NAME"
}

# The systemd slice of a cgroupfs path, as the kubelet spells it: /kubelet -> kubelet.slice,
# /a/b -> a-b.slice (a `-` in a name becomes `_`).
slice_of() { # CGROUP_ROOT
    local IFS=/ n out=
    for n in ${1#/}; do out+=${out:+-}${n//-/_}; done
    echo "$out.slice"
}

# The node's own systemd units (KOORD_V2_CGROUP_DRIVER=systemd), copied by the guest's init
# into /run/systemd/system. Every unit has DefaultDependencies=no: nothing pulls in
# sysinit.target or basic.target, whose wants are the host's enabled units. The daemons run as
# on a kubeadm node: containerd in system.slice with Delegate=yes and KillMode=process (its
# shims outlive a restart; nothing Requires= it, so its restart restarts nothing else, as on a
# kubeadm node), the kubelet in the slice of its cgroupRoot (kind: kubelet.slice,
# which must exist before the kubelet starts). Logs are appended to guest/logs as under the
# shell init, and the main PID goes to guest/NAME.pid for node.sh stop.
write_units() { # GUEST_DIR K8S_BIN_DIR CONTAINERD_BIN_DIR
    local g=$1 k8s=$2 ctrd=$3 u=$1/systemd
    mkdir -p "$u"
    cat >"$u/kv2-node.target" <<EOF
[Unit]
Description=the cgroup v2 node (tests/node-v2): its own units, none of the host's
DefaultDependencies=no
Wants=kv2-agent.service kv2-containerd.service kv2-images.service kv2-kubelet.service kv2-kube-proxy.service
EOF
    service_unit "$u" "$g" agent "the suite's test agent (guest/agent.py)" "" \
        "ExecStart=/usr/bin/python3 -B $REPO/tests/node-v2/guest/agent.py $GUEST_IP $AGENT_PORT"
    service_unit "$u" "$g" containerd "containerd (SystemdCgroup)" "" "Type=notify
Environment=PATH=/run/kv2-bin:$ctrd:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=$ctrd/containerd --config $g/containerd.toml
Delegate=yes
KillMode=process
TasksMax=infinity
LimitNOFILE=infinity
OOMScoreAdjust=-999"
    cat >"$u/kv2-images.service" <<EOF
[Unit]
Description=the node's images imported into containerd
DefaultDependencies=no
Wants=kv2-containerd.service
After=kv2-containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
StandardOutput=append:$g/logs/init.log
StandardError=inherit
ExecStart=$HERE/guest/images.sh $g
EOF
    local slice=
    [[ $KUBELET_CGROUP_ROOT == / ]] || slice="Slice=$(slice_of "$KUBELET_CGROUP_ROOT")"
    service_unit "$u" "$g" kubelet "kubelet (cgroupDriver systemd, cgroupRoot $KUBELET_CGROUP_ROOT)" \
        "Requires=kv2-images.service
After=kv2-images.service kv2-containerd.service" "Environment=PATH=/run/kv2-bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=$k8s/kubelet $(kubelet_flags "$g")
$slice
TasksMax=infinity"
    # kube-proxy exits when it sees its Node's IPs change (the kubelet registering it): as its
    # DaemonSet would, systemd starts it again.
    service_unit "$u" "$g" kube-proxy kube-proxy "After=kv2-kubelet.service" \
        "Environment=PATH=/run/kv2-bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=$k8s/kube-proxy --config=$g/kube-proxy.yaml
Restart=on-failure
RestartSec=2"
    if [[ $KUBELET_CGROUP_ROOT != / ]]; then
        # As kind's kubelet.slice: accounting on, so the controllers reach the kubepods below.
        cat >"$u/$(slice_of "$KUBELET_CGROUP_ROOT")" <<EOF
[Unit]
Description=the kubelet's cgroupRoot $KUBELET_CGROUP_ROOT
DefaultDependencies=no

[Slice]
MemoryAccounting=yes
CPUAccounting=yes
EOF
    fi
}

service_unit() { # UNIT_DIR GUEST_DIR NAME DESCRIPTION UNIT_LINES SERVICE_LINES
    local u=$1 g=$2 name=$3
    cat >"$u/kv2-$name.service" <<EOF
[Unit]
Description=$4
DefaultDependencies=no
$5

[Service]
StandardOutput=append:$g/logs/$name.log
StandardError=inherit
$6
ExecStartPost=/bin/sh -c 'echo \$MAINPID >$g/$name.pid'
EOF
}

# ---------------------------------------------------------------------------------------
# Host network: the tap, two routes into it, the guard rule
# ---------------------------------------------------------------------------------------

setup_network() { # DIR
    ip tuntap add "$TAP" mode tap || die "cannot create tap $TAP"
    echo "$TAP" >"$1/tap.created"
    ip addr add "$HOST_IP/$LINK_PREFIX" dev "$TAP"
    ip link set "$TAP" up
    # The apiserver calls the webhook through its Service, and the suite reaches pod IPs.
    ip route add "$POD_CIDR" via "$GUEST_IP" dev "$TAP" onlink
    ip route add "$SERVICE_CIDR" via "$GUEST_IP" dev "$TAP" onlink
    iptables -I FORWARD 1 -i "$TAP" -m comment --comment "$GUARD_COMMENT" -j DROP
}

# ---------------------------------------------------------------------------------------
# The guest
# ---------------------------------------------------------------------------------------

guest_sh() { # SCRIPT [TIMEOUT]  -> the script's stdout and stderr; returns its rc
    local out
    out=$(curl -sS --max-time "$((${2:-60} + 10))" -H "X-Timeout: ${2:-60}" \
        --data-binary "$1" "http://$GUEST_IP:$AGENT_PORT/sh") || return 255
    python3 -c 'import json, sys
o = json.loads(sys.argv[1])
sys.stdout.write(o["stdout"]); sys.stderr.write(o["stderr"]); sys.exit(o["rc"])' "$out"
}

# The kubelet's feature gates: its defaults, as most production nodes run it (1.37: MemoryQoS
# beta and on, memoryReservationPolicy None: at start the kubelet writes 0 into kubepods'
# memory.min/memory.low and the Burstable class's memory.low), unless KOORD_V2_KUBELET_MEMORY_QOS
# (true or false) sets the MemoryQoS gate.
kubelet_feature_gates() {
    [[ -n ${KOORD_V2_KUBELET_MEMORY_QOS:-} ]] || return 0
    [[ $KOORD_V2_KUBELET_MEMORY_QOS == true || $KOORD_V2_KUBELET_MEMORY_QOS == false ]] ||
        die "KOORD_V2_KUBELET_MEMORY_QOS=$KOORD_V2_KUBELET_MEMORY_QOS: want true or false"
    printf 'featureGates:\n  MemoryQoS: %s\n' "$KOORD_V2_KUBELET_MEMORY_QOS"
}

start_guest() { # DIR KERNEL
    local d=$1 kernel=$2
    truncate -s "${DISK_MB}M" "$d/disk.img"
    mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$d/disk.img" ||
        die "mkfs.ext4 of the guest's state disk failed"
    # The node runs without swap; the swap scenario formats this disk and turns it on.
    rm -f "$d/swap.img"
    truncate -s "${SWAP_MB}M" "$d/swap.img"
    mkdir -p "$d/uml"
    # ro: the guest must not write the host's files (see guest/init.sh). uml_dir/umid: UML's
    # pid file and mconsole socket go under DIR, not $HOME/.uml. TMPDIR: where UML creates (and
    # at once unlinks) the file that backs the guest's memory: tmpfs, not the disk.
    # systemd.hostname: systemd as PID 1 would otherwise name the guest from the host's
    # /etc/hostname (the shell init ignores the word). gro=1: UML opens the tap with TSO
    # offloads, so the host hands the guest frames of up to 64 KiB; without it UML's receive
    # buffers are MTU-sized and those frames are cut ("Incoming GSO frames and GRO disabled on
    # the interface", ~1,400 times a run): TCP into the guest then stalls in retransmissions
    # under load (the applier's pod watch went quiet for two minutes during a BE flood).
    TMPDIR=/dev/shm launch "$d" linux.uml "$kernel" mem="$GUEST_MEM" root=/dev/root rootfstype=hostfs \
        rootflags=/ ro init="$HERE/guest/init.sh" kv2dir="$d" ubd0="$d/disk.img" ubd1="$d/swap.img" \
        vec0:transport=tap,ifname="$TAP",gro=1 uml_dir="$d/uml" umid="kv2-$SLOT" con=null con0=fd:0,fd:1 \
        systemd.hostname="$NODE_NAME"
}

guest_tails() { # DIR
    local f
    for f in "$1/logs/linux.uml.log" "$1/guest/logs/init.log" "$1/guest/logs/containerd.log" \
        "$1/guest/logs/kubelet.log" "$1/guest/logs/kube-proxy.log"; do
        [[ -f $f ]] || continue
        echo "----- last 25 lines of $f -----" >&2
        tail -n 25 "$f" >&2
    done
}

cmd_start() {
    local d=$1
    check_host
    mkdir -p "$d"
    d=$(cd "$d" && pwd)
    [[ ! -e $d/node.env ]] || die "$d holds a started node; run: $PROG stop $d"
    cmd_reclaim
    local problems
    problems=$(leftovers) && true
    [[ -z $problems ]] || die "the machine is not clean (run $PROG stop on the old dir, or remove these):
$problems"
    local t0=$SECONDS bins
    mapfile -t bins < <(cmd_build)
    [[ ${#bins[@]} -eq 11 ]] || die "build printed ${#bins[@]} paths, expected 11"
    # The guest kernel must start here before anything else does (one line if it cannot).
    cmd_vehicle "$d/logs" || die "the guest kernel cannot start a guest on this host (the line above)"
    local scheduler=${bins[4]} cm=${bins[5]}
    local kubectl
    kubectl=$("$CONTROL_PLANE" kubectl)
    echo "$d" >"$d/.node-dir" # marks the dir for stop
    mkdir -p "$d/logs"

    build_node_images "$d/images" redis
    setup_network "$d"
    KOORD_E2E_NODE_MODE=1 KOORD_E2E_BIND_ADDRESS=$HOST_IP KOORD_E2E_SERVICE_CIDR=$SERVICE_CIDR \
        "$CONTROL_PLANE" start "$d/cp" >/dev/null || die "control plane did not start"
    local kc=$d/cp/kubeconfig
    # shellcheck disable=SC2086
    write_configs "$d" "$(dirname "${bins[2]}")" "$(dirname "${bins[7]}")" \
        "$d/images/pause.oci.tar" "$d/images/workload.oci.tar" "$d/images/redis.oci.tar" ${KOORD_V2_IMAGES:-}
    launch_control_loops "$d" "$cm" "$scheduler" "$POD_CIDR" "$SERVICE_CIDR" "$CONTROLLER_MANAGER_PORT" \
        "$SCHEDULER_PORT"

    local tb=$SECONDS
    start_guest "$d" "${bins[10]}"
    if ! wait_for "guest agent up" 120 guest_sh true 5; then
        guest_tails "$d"
        die "the guest did not come up"
    fi
    echo "$((SECONDS - tb))" >"$d/boot.seconds"
    if ! wait_for "Node $NODE_NAME Ready" "$READY_TIMEOUT" node_ready "$kubectl" "$kc"; then
        guest_tails "$d"
        die "Node $NODE_NAME not Ready after ${READY_TIMEOUT}s"
    fi
    echo "$((SECONDS - tb))" >"$d/ready.seconds"
    local c
    for c in kube-controller-manager kube-scheduler linux.uml; do
        pid_alive "$(read_pid "$d/$c.pid")" "$c" || { guest_tails "$d"; die "$c exited during start"; }
    done
    wait_namespace_defaults "$kubectl" "$kc"

    cat >"$d/node.env" <<EOF
KUBECONFIG=$kc
KUBECTL=$kubectl
NODE_NAME=$NODE_NAME
NODE_IP=$GUEST_IP
HOST_IP=$HOST_IP
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
PAUSE_IMAGE=$PAUSE_IMAGE
WORKLOAD_IMAGE=$WORKLOAD_IMAGE
REDIS_IMAGE=$REDIS_IMAGE
GUEST_MEM=$GUEST_MEM
CGROUP_DRIVER=$CGROUP_DRIVER
KUBELET_CGROUP_ROOT=$KUBELET_CGROUP_ROOT
GUEST_AGENT=http://$GUEST_IP:$AGENT_PORT/sh
CTR=${bins[9]}
BOOT_SECONDS=$(cat "$d/boot.seconds")
READY_SECONDS=$(cat "$d/ready.seconds")
EOF
    log "node $NODE_NAME up in $((SECONDS - t0))s (guest start to agent $(cat "$d/boot.seconds")s, to Ready $(cat "$d/ready.seconds")s; dir $d)"
    cat "$d/node.env"
}

# ---------------------------------------------------------------------------------------
# Stop
# ---------------------------------------------------------------------------------------

cmd_stop() {
    local d=$1
    [[ -d $d ]] || die "no such directory: $d"
    d=$(cd "$d" && pwd)
    [[ -f $d/.node-dir ]] || die "$d was not made by $PROG start"
    local kubectl kc=$d/cp/kubeconfig
    kubectl=$("$CONTROL_PLANE" kubectl)
    # 1. Controllers (nothing recreates pods), then the pods through the API so the kubelet
    #    stops them and CNI tears their network down inside the guest.
    stop_proc "$d" kube-controller-manager
    stop_proc "$d" kube-scheduler
    if pid_alive "$(read_pid "$d/linux.uml.pid")" linux.uml && [[ -f $kc ]] &&
        "$kubectl" --kubeconfig="$kc" get --raw /readyz >/dev/null 2>&1; then
        "$kubectl" --kubeconfig="$kc" delete pods --all --all-namespaces --grace-period=2 \
            --wait=false >/dev/null 2>&1 || true
        local i
        for ((i = 0; i < 60; i++)); do
            [[ -z $("$kubectl" --kubeconfig="$kc" get pods -A -o name 2>/dev/null) ]] && break
            sleep 0.5
        done
    fi
    # 2. The guest: its daemons get SIGTERM, then its kernel halts. Every guest process is a
    #    host process of the UML kernel's; they end with it (checked below).
    if pid_alive "$(read_pid "$d/linux.uml.pid")" linux.uml; then
        guest_sh "for n in kube-proxy kubelet containerd; do
                f=$d/guest/\$n.pid; [ -f \$f ] && kill -TERM \$(cat \$f) 2>/dev/null
            done
            sleep 2; (sync; sleep 0.5; halt -f) >/dev/null 2>&1 &" 20 >/dev/null 2>&1 || true
        stop_proc "$d" linux.uml 30
    fi
    rm -f "$d/linux.uml.pid"
    # 3. The control plane, the tap (its routes go with it) and the guard rule.
    if [[ -f $d/cp/state.env ]]; then "$CONTROL_PLANE" stop "$d/cp" || warn "control-plane.sh stop failed"; fi
    if [[ -f $d/tap.created ]]; then ip link del "$TAP" 2>/dev/null || true; fi
    while iptables -D FORWARD -i "$TAP" -m comment --comment "$GUARD_COMMENT" -j DROP 2>/dev/null; do :; done
    # The guest's state disk is throwaway.
    rm -f "$d/disk.img" "$d/swap.img" "$d/node.env"
    exit_if_left "error: stop left things behind:" "$d"
    log "node stopped; nothing left behind"
}

# What a node leaves on the machine, one line per item (empty: clean). With DIR: also any
# process that names DIR on its command line (the UML kernel and its guest processes do).
leftovers() { # [DIR]
    local out=() l
    ip link show "$TAP" >/dev/null 2>&1 && out+=("tap $TAP")
    ip link show "$BRIDGE" >/dev/null 2>&1 && out+=("bridge $BRIDGE (on the host)")
    grep -q "$GUARD_COMMENT" <<<"$(iptables -S FORWARD 2>/dev/null)" && out+=("iptables FORWARD guard rule")
    while read -r l; do [[ -n $l ]] && out+=("route $l"); done < <(ip route show | grep -E "^(${POD_CIDR%/*}|${SERVICE_CIDR%/*})/" || true)
    local p
    for p in "$KOORD_E2E_ETCD_PORT" "$KOORD_E2E_ETCD_PEER_PORT"; do
        if port_busy "$p"; then out+=("port 127.0.0.1:$p in use"); fi
    done
    # This slot's guest only: another slot's node may be running beside this one.
    while read -r l; do [[ -n $l ]] && out+=("process linux.uml pid $l"); done < <(pgrep -f -- "ifname=$TAP " 2>/dev/null || true)
    if [[ -n ${1:-} ]]; then
        local d=$1 pid
        for pid in $(pgrep -f -- "$d/" 2>/dev/null || true); do
            [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
            tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$d/" || continue
            out+=("process $(cat "/proc/$pid/comm" 2>/dev/null) pid $pid")
        done
    fi
    [[ ${#out[@]} -eq 0 ]] || printf '%s\n' "${out[@]}"
}

# A run killed before its stop (CI's machine restarted under it, a SIGKILL) leaves the slot's
# network plumbing: the tap is persistent, so it outlives the UML kernel that used it, and its
# routes and the guard rule stay with it. Nothing else of a node outlives its processes (the
# control plane's are gone when its ports are free; the guest's state is in the run's dir).
# When nothing of the slot is alive, that plumbing is stale: it is removed, loudly. When
# something is alive, it is left alone and check-clean (or start) says what.
cmd_reclaim() {
    local alive=() p
    while read -r p; do [[ -n $p ]] && alive+=("linux.uml pid $p"); done < <(pgrep -f -- "ifname=$TAP " 2>/dev/null || true)
    for p in "$KOORD_E2E_ETCD_PORT" "$KOORD_E2E_ETCD_PEER_PORT" "$KOORD_E2E_APISERVER_PORT"; do
        if port_busy "$p"; then alive+=("port $p"); fi
    done
    if [[ ${#alive[@]} -gt 0 ]]; then
        log "slot $SLOT has a live node (${alive[*]}): nothing reclaimed"
        return 0
    fi
    local stale
    stale=$(leftovers) && true
    [[ -n $stale ]] || return 0
    warn "slot $SLOT: no node alive, removing what a killed run left:"$'\n'"$stale"
    # The routes go with the tap.
    ip link del "$TAP" 2>/dev/null || true
    while iptables -D FORWARD -i "$TAP" -m comment --comment "$GUARD_COMMENT" -j DROP 2>/dev/null; do :; done
}

cmd_check_clean() {
    check_clean "no tap, guard rule, route, UML guest or control-plane port of a node${1:+; no process of $1}" "${1:-}"
}

usage() {
    sed -n '5,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case ${1:-} in
build) cmd_build ;;
vehicle) cmd_vehicle "${2:-}" ;;
start) [[ $# -eq 2 ]] || usage; cmd_start "$2" ;;
sh) [[ $# -eq 2 ]] || usage; guest_sh "$2" 600 ;;
stop) [[ $# -eq 2 ]] || usage; cmd_stop "$2" ;;
check-clean) cmd_check_clean "${2:-}" ;;
reclaim) cmd_reclaim ;;
*) usage ;;
esac
