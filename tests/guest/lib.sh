# shellcheck shell=bash
# Shared machinery of the QEMU guest tests (tests/numa); sourced, not run.
#
# What both need: host tools from Debian, the current Debian kernel (and any of its modules)
# extracted from the package (not installed) and cached by package version, a busybox
# initramfs holding binaries with their shared libraries, and a TCG boot whose serial console
# the test then parses.
#
# Cache, keyed by the kernel package version:
#   ${KOORD_GUEST_CACHE:-$HOME/.cache/koord-qos-guest}/<linux-image package>/
#       <package>.deb   vmlinuz   modules/<name>.ko
# Env: QEMU_ACCEL (tcg|kvm; default tcg), QEMU_CPU, GUEST_CMDLINE (default "quiet loglevel=3").
#
# Callers set GUEST_TAG (the log prefix) before sourcing.

guest_cache="${KOORD_GUEST_CACHE:-$HOME/.cache/koord-qos-guest}"

glog() { echo "[${GUEST_TAG:-guest}] $*" >&2; }

# guest_host_tools [COMMAND:PACKAGE ...]: installs what the guest machinery needs (QEMU, a
# static busybox with cpio, gcc for static test programs) plus the Debian package of every
# COMMAND that is missing.
guest_host_tools() {
  local need=() pair
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  # a static busybox with cpio: it goes into the initramfs as is
  case "$( { ldd /bin/busybox >/dev/null 2>&1 || /bin/busybox --list; } 2>/dev/null)" in
    *cpio*) ;;
    *) need+=(busybox-static) ;;
  esac
  command -v gcc >/dev/null || need+=(gcc libc6-dev)
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
  done
  if [ ${#need[@]} -gt 0 ]; then
    glog "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
}

_guest_resolve_kpkg() {
  apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}

# guest_kernel [MODULE ...]: the current Debian linux-image-amd64 kernel, cached. Sets
# GUEST_KPKG (package name), GUEST_VMLINUZ and GUEST_MODULES (a directory holding
# <MODULE>.ko for every MODULE named, e.g. virtio_blk).
guest_kernel() {
  GUEST_KPKG="$(_guest_resolve_kpkg)"
  if [ -z "$GUEST_KPKG" ]; then apt-get update -qq || true; GUEST_KPKG="$(_guest_resolve_kpkg)"; fi
  if [ -z "$GUEST_KPKG" ]; then # offline: the newest cached kernel
    GUEST_KPKG="$(cd "$guest_cache" 2>/dev/null && printf '%s\n' linux-image-* | grep -v '\*' | sort -V | tail -1 || true)"
  fi
  [ -n "$GUEST_KPKG" ] || { glog "FATAL: cannot resolve linux-image-amd64 and nothing cached in $guest_cache"; return 1; }
  local kdir="$guest_cache/$GUEST_KPKG" deb tmp m missing=()
  deb="$kdir/$GUEST_KPKG.deb"
  GUEST_VMLINUZ="$kdir/vmlinuz"
  GUEST_MODULES="$kdir/modules"
  for m in "$@"; do [ -s "$GUEST_MODULES/$m.ko" ] || missing+=("$m"); done
  [ -s "$GUEST_VMLINUZ" ] && [ ${#missing[@]} -eq 0 ] && return 0
  mkdir -p "$kdir" "$GUEST_MODULES"
  if [ ! -s "$deb" ]; then
    glog "fetching $GUEST_KPKG into $kdir"
    tmp="$(mktemp -d)"
    chmod 755 "$tmp" # apt's download user must be able to write there
    (cd "$tmp" && apt-get download "$GUEST_KPKG" >/dev/null)
    mv "$tmp"/*.deb "$deb.part" && mv "$deb.part" "$deb"
    rm -rf "$tmp"
  fi
  tmp="$(mktemp -d)"
  local patterns=('./boot/vmlinuz-*')
  for m in "${missing[@]}"; do patterns+=("*/$m.ko"); done
  dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" --wildcards "${patterns[@]}"
  cp "$tmp"/boot/vmlinuz-* "$GUEST_VMLINUZ.part" && mv "$GUEST_VMLINUZ.part" "$GUEST_VMLINUZ"
  for m in "${missing[@]}"; do
    local ko
    ko="$(find "$tmp" -name "$m.ko" | head -1)"
    [ -n "$ko" ] || { glog "FATAL: module $m.ko not in $GUEST_KPKG"; rm -rf "$tmp"; return 1; }
    cp "$ko" "$GUEST_MODULES/$m.ko"
  done
  rm -rf "$tmp"
}

# guest_root DIR: an initramfs tree with busybox; the caller adds /init and its programs.
guest_root() {
  mkdir -p "$1"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,lib/modules,proc,sys,dev,tmp,etc,mnt}
  cp /bin/busybox "$1/bin/busybox"
}

# guest_add_binary ROOT BINARY: the binary into ROOT/usr/bin, plus every library ldd names, at
# the same path as on the host.
guest_add_binary() {
  local root="$1" bin="$2" lib
  cp "$bin" "$root/usr/bin/"
  ldd "$bin" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}

# guest_add_modules ROOT MODULE...: <MODULE>.ko from GUEST_MODULES into ROOT/lib/modules (the
# guest insmods them in the order it needs).
guest_add_modules() {
  local root="$1" m
  shift
  for m in "$@"; do cp "$GUEST_MODULES/$m.ko" "$root/lib/modules/"; done
}

# guest_pack ROOT OUT: a gzip'd newc cpio of ROOT.
guest_pack() {
  (cd "$1" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$2")
}

# guest_boot INITRD CONSOLE TIMEOUT APPEND [QEMU ARG ...]: boots GUEST_VMLINUZ with INITRD,
# the serial console into the file CONSOLE, APPEND added to the kernel command line; the extra
# arguments set memory, CPUs, NUMA, drives. Returns QEMU's status (124 = TIMEOUT seconds passed).
guest_boot() {
  local initrd="$1" console="$2" timeout_s="$3" append="$4"
  shift 4
  # Software emulation by default: nested KVM on CI hosts is not dependable (on the dev VM the
  # guest kernel hangs right after decompression under KVM). QEMU_ACCEL=kvm to try it.
  local accel="${QEMU_ACCEL:-tcg}"
  # -cpu host trips MSR checks under nested KVM; qemu64 boots everywhere.
  local cpu="${QEMU_CPU:-max}"
  [ "$accel" = kvm ] && cpu="${QEMU_CPU:-qemu64}"
  timeout "$timeout_s" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" "$@" \
    -kernel "$GUEST_VMLINUZ" -initrd "$initrd" \
    -append "console=ttyS0 rdinit=/init panic=-1 ${GUEST_CMDLINE:-quiet loglevel=3} $append" \
    -nographic -no-reboot -monitor none -serial "file:$console" </dev/null
}

# guest_applier: the koord-applier binary to put in the guest, stripped, into $1. Uses
# KOORD_APPLIER_BIN if set, else builds it with cargo (profile KOORD_APPLIER_PROFILE = dev,
# the build `make test` already made, or release).
guest_applier() {
  local out="$1" repo bin profile
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  if [ -n "${KOORD_APPLIER_BIN:-}" ]; then
    bin="$KOORD_APPLIER_BIN"
  else
    profile="${KOORD_APPLIER_PROFILE:-dev}"
    glog "building koord-applier (profile $profile)"
    # Both packages, as images/build.sh builds them: cargo unifies features over the packages
    # it is given, and the applier alone turns fewer on (hyper-util's server side), so building
    # it alone would compile kube and link the release binary a second time.
    (cd "$repo" && cargo build --profile "$profile" -q -p koord-webhook -p koord-applier)
    [ "$profile" = dev ] && profile=debug
    bin="${CARGO_TARGET_DIR:-$repo/target}/$profile/koord-applier"
  fi
  cp "$bin" "$out" && strip "$out"
}
