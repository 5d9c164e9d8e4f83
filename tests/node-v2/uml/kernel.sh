#!/usr/bin/env bash
# The cgroup v2 node's kernel: User-Mode Linux built from Debian's linux-source-6.12, with
# host-fp-size.patch (the FP buffer sized from the host at start: hosts with AMX refuse
# Debian's fixed 2696 bytes) and the configuration below, cached outside the repo.
#
# Usage:
#   kernel.sh build    build (or find in the cache) and print the kernel's path
#   kernel.sh path     print the cached kernel's path; exit 1 if it is not built
#   kernel.sh key      print the cache key
#
# The configuration is Debian's own UML build's (/usr/share/doc/user-mode-linux/config.gz, the
# prebuilt 6.1 kernel's) with modules off, every module the node needs built in (netfilter,
# bridge, veth, overlay, IPv6, ...: KEEP below; the others out), PSI on (the collectors read
# pressure), a 64 KiB kernel stack (thread_info holds an FP buffer of 12 KiB), and no debug info.
# The cache key is the source package's version, the configuration made here (with Debian's
# base), the patch and RECIPE: a change to any of them builds a new kernel and removes the others.
#
# Environment: KOORD_UML_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/koord-qos-uml),
# KOORD_UML_JOBS (nproc).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=kernel.sh
SOURCE_PKG=linux-source-6.12
SOURCE_TAR=/usr/src/$SOURCE_PKG.tar.xz
BASE_CONFIG=/usr/share/doc/user-mode-linux/config.gz
CACHE=${KOORD_UML_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/koord-qos-uml}
JOBS=${KOORD_UML_JOBS:-$(nproc)}
# Modules of the base config that the node needs, built in (CONFIG_ names, as regular expressions).
KEEP='(NETFILTER|NF|NFT|IP_NF|IP6_NF|IP_SET|BRIDGE|INET)(_[A-Z0-9_]*)?|STP|LLC|GARP|MRP|VLAN_8021Q|IPV6|VETH|TUN|DUMMY|OVERLAY_FS|FUSE_FS|AUTOFS_FS|AUTOFS4_FS|CONFIGFS_FS|UNIX_DIAG|PACKET_DIAG|NETLINK_DIAG|BLK_DEV_LOOP|IKCONFIG'

die() { echo "$PROG: error: $*" >&2; exit 1; }

need() {
    local missing=() t
    [[ -f $SOURCE_TAR ]] || missing+=("$SOURCE_PKG")
    [[ -f $BASE_CONFIG ]] || missing+=(user-mode-linux)
    for t in make gcc flex bison bc patch xz; do command -v "$t" >/dev/null || missing+=("$t"); done
    [[ -f /usr/include/libelf.h || -f /usr/include/elfutils/libelf.h ]] || missing+=(libelf-dev)
    [[ ${#missing[@]} -eq 0 ]] || die "missing: ${missing[*]} (Debian: $SOURCE_PKG user-mode-linux make gcc flex bison bc patch xz-utils libelf-dev)"
}

source_version() { dpkg-query -W -f '${Version}' "$SOURCE_PKG" 2>/dev/null || echo unknown; }

# The recipe's version: raise it when a build step below changes what comes out.
RECIPE=1
key() {
    { source_version; echo "recipe $RECIPE"; make_config; cat "$HERE/host-fp-size.patch"; } | sha256sum | cut -c1-12
}

kernel_dir() { echo "$CACHE/$(source_version | tr -c 'A-Za-z0-9.\n' '_')-$(key)"; }

# Debian's config -> ours (stdin -> stdout).
make_config() {
    zcat "$BASE_CONFIG" | sed -E \
        -e "s/^CONFIG_($KEEP)=m$/CONFIG_\1=y/" \
        -e 's/^CONFIG_([A-Za-z0-9_]+)=m$/# CONFIG_\1 is not set/' \
        -e '/^(# )?CONFIG_(MODULES|PSI|PSI_DEFAULT_DISABLED|KERNEL_STACK_ORDER|UML_NET_VDE|UML_NET_PCAP|IKCONFIG_PROC|DEBUG_INFO[A-Z0-9_]*|NF_TABLES_IPV4|NF_TABLES_IPV6|NF_TABLES_INET)[ =]/d'
    cat <<'EOF'
# CONFIG_MODULES is not set
CONFIG_PSI=y
# CONFIG_PSI_DEFAULT_DISABLED is not set
CONFIG_KERNEL_STACK_ORDER=4
# CONFIG_UML_NET_VDE is not set
# CONFIG_UML_NET_PCAP is not set
CONFIG_IKCONFIG_PROC=y
CONFIG_DEBUG_INFO_NONE=y
CONFIG_NF_TABLES_IPV4=y
CONFIG_NF_TABLES_IPV6=y
CONFIG_NF_TABLES_INET=y
EOF
}

cmd_build() {
    need
    local dir
    dir=$(kernel_dir)
    if [[ -x $dir/linux.uml ]]; then echo "$dir/linux.uml"; return; fi
    mkdir -p "$CACHE"
    # One build at a time (the suites' lanes start side by side); the others wait and find it.
    exec 9>"$CACHE/lock"
    flock 9
    if [[ -x $dir/linux.uml ]]; then echo "$dir/linux.uml"; return; fi
    local work=$CACHE/build.$$ t0=$SECONDS
    rm -rf "$work"
    mkdir -p "$work"
    trap 'rm -rf "${work:-}"' EXIT
    echo "$PROG: building User-Mode Linux from $SOURCE_PKG $(source_version) into $dir ($JOBS jobs)" >&2
    tar -xJf "$SOURCE_TAR" -C "$work"
    local src=$work/$SOURCE_PKG
    patch -s -d "$src" -p1 <"$HERE/host-fp-size.patch" || die "host-fp-size.patch does not apply to $SOURCE_PKG $(source_version)"
    make_config >"$src/.config"
    make -s -C "$src" ARCH=um olddefconfig
    local want v
    # What olddefconfig could have dropped (a dependency unmet) and the node cannot do without.
    for want in PSI=y MEMCG=y CGROUP_SCHED=y CFS_BANDWIDTH=y HOSTFS=y BLK_DEV_UBD=y UML_NET_VECTOR=y \
        OVERLAY_FS=y VETH=y BRIDGE=y BRIDGE_NETFILTER=y NF_NAT=y IP_NF_IPTABLES=y IP_NF_NAT=y \
        NETFILTER_XT_MATCH_COMMENT=y NETFILTER_XT_TARGET_MASQUERADE=y KERNEL_STACK_ORDER=4; do
        v=$(grep -E "^CONFIG_${want%%=*}=" "$src/.config" || true)
        [[ $v == "CONFIG_$want" ]] || die "the configuration lost CONFIG_$want (has: ${v:-unset})"
    done
    make -s -C "$src" ARCH=um -j"$JOBS" linux >"$work/build.log" 2>&1 ||
        { tail -n 40 "$work/build.log" >&2; die "the kernel build failed"; }
    strip "$src/linux" 2>/dev/null || true
    find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "build.*" ! -path "$dir" -exec rm -rf {} +
    mkdir -p "$dir.new"
    cp "$src/linux" "$dir.new/linux.uml"
    cp "$src/.config" "$dir.new/config"
    rm -rf "$dir"
    mv "$dir.new" "$dir"
    echo "$PROG: built in $((SECONDS - t0)) s: $dir/linux.uml" >&2
    echo "$dir/linux.uml"
}

case ${1:-} in
build) cmd_build ;;
path)
    d=$(kernel_dir)
    [[ -x $d/linux.uml ]] || exit 1
    echo "$d/linux.uml"
    ;;
key) key ;;
*) echo "usage: $PROG build|path|key" >&2; exit 2 ;;
esac
