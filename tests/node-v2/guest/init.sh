#!/bin/sh
# PID 1 of the User-Mode Linux guest that is the cgroup v2 node (see tests/node-v2/README.md).
#
# The root is the host's own filesystem through hostfs, READ-ONLY: the guest must never write
# the host's /var/lib, /etc or /run. Its writable places are its own: tmpfs for /run, /tmp,
# /var/log; an ext4 disk (ubd0, a file in the node dir) for /var/lib (containerd's snapshots,
# the kubelet's root); and one read-write hostfs mount of the node dir's guest/ subdirectory,
# the only host path it writes (configs in, logs and state out).
#
# The kernel command line passes kv2dir=<node dir> (the kernel hands unknown key=value words
# to init as environment). guest/guest.env there says what to run.
set -eu
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "kv2-init: $*"; }
fail() { say "FATAL: $*"; sleep 1; halt -f; }

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mkdir -p /dev/pts && mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /var/log
[ -n "${kv2dir:-}" ] || fail "no kv2dir= on the kernel command line"

# The node's kernel (tests/node-v2/uml/kernel.sh) has no modules: overlay, veth, the bridge and
# netfilter are built in.
[ ! -e /proc/modules ] || fail "this kernel loads modules; the node's kernel (uml/kernel.sh) has them built in"

# /tmp: the host's stays visible (the node dir and the repo may live there) under an overlay
# whose writes land in the guest's memory.
mkdir -p /run/tmp-overlay/upper /run/tmp-overlay/work
mount -t overlay -o lowerdir=/tmp,upperdir=/run/tmp-overlay/upper,workdir=/run/tmp-overlay/work \
    overlay /tmp || fail "cannot mount the /tmp overlay"
G=$kv2dir/guest
mount -t hostfs -o "$G" none "$G" || fail "cannot mount $G read-write"
. "$G/guest.env"
exec >>"$G/logs/init.log" 2>&1
say "init at uptime $(cut -d' ' -f1 /proc/uptime)"

mount -t ext4 /dev/ubda /var/lib || fail "cannot mount the state disk on /var/lib"
if [ "$KV2_CGROUP_DRIVER" = cgroupfs ]; then
    # (With the systemd driver, systemd mounts the hierarchy as on any systemd node, with
    # memory_recursiveprot, enables the controllers and makes / shared.)
    mount -t cgroup2 -o nsdelegate none /sys/fs/cgroup
    # Shared, as systemd makes every mount: the applier's HostToContainer mount of /sys/fs needs it.
    mount --make-rshared /
    echo "+cpu +memory +pids +io" >/sys/fs/cgroup/cgroup.subtree_control
    say "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
    # A kubelet cgroupRoot other than / must exist, with the controllers enabled below it.
    if [ "${KV2_KUBELET_CGROUP_ROOT:-/}" != / ]; then
        mkdir -p "/sys/fs/cgroup$KV2_KUBELET_CGROUP_ROOT"
        echo "+cpu +memory +pids +io" >"/sys/fs/cgroup$KV2_KUBELET_CGROUP_ROOT/cgroup.subtree_control"
    fi
fi
sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 || true
# A reserve for allocations that cannot wait for reclaim. The kernel's default for 1.5 GiB is
# ~5 MB; under the protection proof's BE flood the guest's network and block paths
# (GFP_ATOMIC, in the UML NIC's receive and in kblockd) failed against it with 16 KiB free and
# the node never came back. A real node of a few GiB or more has several times this reserve.
sysctl -q -w vm.min_free_kbytes=65536 || true
hostname "$KV2_NODE_NAME"
# UML's /proc/cpuinfo has no clock speed, and the kubelet's cAdvisor refuses to start without
# one ("could not detect clock speed"): the guest's own view gets the host's figure, as LXCFS
# does for containers. Pods mount their own /proc and never see this file.
{ cat /proc/cpuinfo; printf 'cpu MHz\t\t: %s\n' "$KV2_CPU_MHZ"; } >/run/cpuinfo
mount --bind /run/cpuinfo /proc/cpuinfo

ip link set lo up
ip addr add "$KV2_GUEST_IP/$KV2_LINK_PREFIX" dev vec0 || fail "no vec0 (the tap link)"
ip link set vec0 up
# The CNI bridge exists before the kubelet, with the pods' gateway address.
ip link add "$KV2_BRIDGE" type bridge
ip addr add "$KV2_POD_GW/$KV2_POD_PREFIX" dev "$KV2_BRIDGE"
ip link set "$KV2_BRIDGE" up

# Debian's UML kernel has nf_tables without its ip/inet families (CONFIG_NF_TABLES_IPV4 unset),
# so iptables-nft cannot make a table: kube-proxy and the CNI plugins get the legacy backend.
mkdir -p /run/kv2-bin
for t in iptables ip6tables; do
    for s in "" -save -restore; do ln -sf "/usr/sbin/$t-legacy$s" "/run/kv2-bin/$t$s"; done
done

if [ "$KV2_CGROUP_DRIVER" = systemd ]; then
    # systemd as PID 1, with the node's own units only (node.sh wrote them into guest/systemd):
    # in /run/systemd/system, and the one target they hang off given as the unit to start, so
    # none of the host's enabled units (its root is this guest's) is pulled in. systemd keeps
    # the mounts, the network and /run made above. `container=` (set and empty) tells it that
    # this is no container, whatever files the host's root holds (a /.dockerenv would make it
    # one: the kernel command line ignored, a halt that exits PID 1 instead of the kernel).
    mkdir -p /run/systemd/system
    cp "$G"/systemd/* /run/systemd/system/
    say "exec systemd at uptime $(cut -d' ' -f1 /proc/uptime)"
    exec env container= /lib/systemd/systemd --unit=kv2-node.target --log-target=console \
        --show-status=false
fi

# Each daemon in its own cgroup under /system.slice (in-cgroup.sh says why).
start() { # NAME BIN ARGS...
    name=$1; shift
    "$(dirname "$0")/in-cgroup.sh" "/system.slice/kv2-$name.service" "$@" \
        </dev/null >>"$G/logs/$name.log" 2>&1 &
    echo $! >"$G/$name.pid"
}

start agent /usr/bin/python3 -B "$KV2_REPO/tests/node-v2/guest/agent.py" "$KV2_GUEST_IP" "$KV2_AGENT_PORT"
export PATH="/run/kv2-bin:$KV2_CONTAINERD_BIN:$PATH"
start containerd "$KV2_CONTAINERD_BIN/containerd" --config "$G/containerd.toml"
i=0
until "$KV2_CONTAINERD_BIN/ctr" --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 120 ] || fail "containerd did not answer in 60 s"; sleep 0.5
done
say "containerd up at uptime $(cut -d' ' -f1 /proc/uptime)"
"$(dirname "$0")/images.sh" "$G" || fail "importing the images failed"
# shellcheck disable=SC2086 # the flags as node.sh wrote them, none holds a space
start kubelet "$KV2_K8S_BIN/kubelet" $KV2_KUBELET_FLAGS
start kube-proxy "$KV2_K8S_BIN/kube-proxy" --config="$G/kube-proxy.yaml"
say "kubelet and kube-proxy started at uptime $(cut -d' ' -f1 /proc/uptime)"
echo up >"$G/state"

# PID 1 reaps every orphan: wait blocks in waitpid(-1) while a job (the agent) lives.
while :; do wait || true; sleep 1; done
