# shellcheck shell=bash
# What the two test nodes (tests/node on the host's cgroup v1, tests/node-v2 in a cgroup v2
# guest) build and write the same way: their images, the CNI, kubelet and kube-proxy
# configurations, the kubelet's kubeconfig, the control loops on the host. Sourced by their
# node.sh after tests/lib/cluster.sh (launch, wait_for, die); every function takes what differs
# between the nodes as arguments.

PAUSE_IMAGE=localhost/koord-node/pause:1
WORKLOAD_IMAGE=localhost/koord-node/workload:1
REDIS_IMAGE=localhost/koord-node/redis:1

# The node's own images: the sandbox (pause) and the workload (busybox, koord-stress,
# koord-stream); with `redis`, Redis for the protection proof as well. Beside them in
# OUTDIR/build: koord-sample, the suites' sampler inside the node.
build_node_images() { # OUTDIR [redis]
    local out=$1 b=$1/build src=$REPO/tests/node/images
    mkdir -p "$b"
    gcc -O2 -static -Wall -Wextra -Werror -o "$b/pause" "$src/pause.c" || die "building pause failed"
    gcc -O2 -static -Wall -Wextra -Werror -o "$b/koord-stress" "$src/stress.c" -lm ||
        die "building koord-stress failed"
    gcc -O2 -static -Wall -Wextra -Werror -o "$b/koord-stream" "$src/stream.c" ||
        die "building koord-stream failed"
    # Not in an image: the suites' sampler of cgroup files, run inside the node (tests/lib/sample.c).
    gcc -O2 -static -Wall -Wextra -Werror -o "$b/koord-sample" "$REPO/tests/lib/sample.c" ||
        die "building koord-sample failed"
    python3 "$REPO/images/oci.py" --name "$PAUSE_IMAGE" --out "$out/pause.oci.tar" \
        --add "$b/pause:/pause:0755" --user 65535:65535 --entrypoint '["/pause"]' >/dev/null ||
        die "assembling $PAUSE_IMAGE failed"
    local args=(--name "$WORKLOAD_IMAGE" --out "$out/workload.oci.tar"
        --add /bin/busybox:/bin/busybox:0755 --add "$b/koord-stress:/usr/local/bin/koord-stress:0755"
        --add "$b/pause:/usr/local/bin/pause:0755" --add "$b/koord-stream:/usr/local/bin/koord-stream:0755"
        --text "/etc/passwd=root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
        --text "/etc/group=root:x:0:\nnobody:x:65534:\n"
        --dir /tmp:1777 --dir /root:0700 --cmd '["sh"]')
    local applet
    for applet in $(/bin/busybox --list); do
        [[ $applet == busybox ]] || args+=(--symlink "/bin/busybox:/bin/$applet")
    done
    python3 "$REPO/images/oci.py" "${args[@]}" >/dev/null || die "assembling $WORKLOAD_IMAGE failed"
    [[ ${2:-} == redis ]] || return 0
    # The workload image plus Debian's redis-server and exactly the libraries ldd lists for it.
    local redis
    redis=$(command -v redis-server) || die "redis-server not on PATH (Debian: redis-server)"
    args[1]=$REDIS_IMAGE
    args[3]=$out/redis.oci.tar
    python3 "$REPO/images/oci.py" "${args[@]}" --add "$(readlink -f "$redis"):/usr/bin/redis-server:0755" \
        --with-libs /usr/bin/redis-server >/dev/null || die "assembling $REDIS_IMAGE failed"
}

# The pods' network: a bridge with the node as gateway, on-link pod range, routes only to the
# given destinations (no default route: nothing leaves the machine).
write_cni_conflist() { # FILE NAME BRIDGE IPAM_DIR SUBNET GATEWAY ROUTE_DST...
    local f=$1 name=$2 bridge=$3 ipam=$4 subnet=$5 gw=$6 routes="" r
    shift 6
    for r in "$@"; do routes+="${routes:+, }{\"dst\": \"$r\"}"; done
    cat >"$f" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "$name",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$ipam",
        "ranges": [[{"subnet": "$subnet", "gateway": "$gw"}]],
        "routes": [$routes]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

# The KubeletConfiguration lines both nodes share (after their own address, driver and
# runtime endpoints).
kubelet_config_common() { # CLIENT_CA RESOLV_CONF MAX_PODS
    cat <<EOF
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $1}
authorization:
  mode: Webhook
clusterDNS: []
clusterDomain: cluster.local
resolvConf: $2
# Local images only: never collected.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The memory-pressure proofs want the kernel's reclaim, not the kubelet's evictions, and a
# shared machine's full disk must not evict the test pods.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
makeIPTablesUtilChains: false
maxPods: $3
serializeImagePulls: false
registerNode: true
EOF
}

write_kube_proxy_config() { # FILE KUBECONFIG NODE_NAME POD_CIDR NODE_IP HEALTHZ_ADDR METRICS_ADDR
    cat >"$1" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $2
hostnameOverride: $3
mode: iptables
clusterCIDR: $4
nodePortAddresses: ["$5/32"]
healthzBindAddress: $6
metricsBindAddress: $7
iptables:
  localhostNodePorts: false
# Leave the host's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# The kubelet's kubeconfig: its client certificate (system:node:NAME), the apiserver's CA.
write_node_kubeconfig() { # FILE CLUSTER SERVER CA CERT KEY
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $2
  cluster:
    server: $3
    certificate-authority: $4
users:
- name: kubelet
  user:
    client-certificate: $5
    client-key: $6
contexts:
- name: $2
  context: {cluster: $2, user: kubelet}
current-context: $2
EOF
    chmod 600 "$1"
}

# The controller-manager and the scheduler, on the host, against the node's control plane.
launch_control_loops() { # DIR CONTROLLER_MANAGER SCHEDULER POD_CIDR SERVICE_CIDR CM_PORT SCHEDULER_PORT
    local d=$1 kc=$1/cp/kubeconfig
    launch "$d" kube-controller-manager "$2" --kubeconfig="$kc" \
        --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
        --service-account-private-key-file="$d/cp/pki/sa.key" --root-ca-file="$d/cp/pki/apiserver.crt" \
        --use-service-account-credentials=false --leader-elect=false \
        --bind-address=127.0.0.1 --secure-port="$6" \
        --cluster-cidr="$4" --service-cluster-ip-range="$5" --allocate-node-cidrs=false
    launch "$d" kube-scheduler "$3" --kubeconfig="$kc" \
        --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
        --leader-elect=false --bind-address=127.0.0.1 --secure-port="$7"
}

# The controller-manager creates the default ServiceAccount (pods need it) and the
# kube-root-ca.crt ConfigMap (their in-cluster CA) in every namespace.
wait_namespace_defaults() { # KUBECTL KUBECONFIG
    wait_for "ServiceAccount default/default" 60 "$1" --kubeconfig="$2" get serviceaccount default ||
        die "the controller-manager did not create the default ServiceAccount"
    wait_for "ConfigMap default/kube-root-ca.crt" 60 "$1" --kubeconfig="$2" get configmap kube-root-ca.crt ||
        die "the controller-manager did not publish kube-root-ca.crt"
}

# What the node script's `leftovers [DIR]` finds, under HEAD, and exit 1; nothing found: return.
exit_if_left() { # HEAD [DIR]
    local left
    left=$(leftovers "${2:-}") && true
    [[ -n $left ]] || return 0
    echo "$PROG: $1" >&2
    echo "$left" >&2
    exit 1
}

# The node script's check-clean: a line saying what clean means for this node, or exit 1.
check_clean() { # WHAT_CLEAN_MEANS [DIR]
    exit_if_left "not clean:" "${2:-}"
    log "clean: $1"
}
