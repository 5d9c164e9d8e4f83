#!/usr/bin/env bash
# Two-NUMA-node proof of memory locality (issue #6), in a tiny QEMU guest.
#
# Boots a Debian kernel with two NUMA nodes (node 0: CPU 0 + 256 MiB, node 1: CPU 1 + 256 MiB)
# and an initramfs holding busybox, koord-applier (+ its shared libraries), numactl's
# migratepages and tests/numa/hog.c. In the guest (tests/numa/guest-init.sh):
#   1. a kubelet-like cgroup v2 tree kubepods/burstable/pod<uid>/<container id> with
#      cpuset.cpus = 1 (node 1);
#   2. hog touches HOG_MIB MiB while pinned to CPU 0 (so its pages land on node 0), then is
#      moved into the container cgroup (its CPUs are now on node 1, its memory on node 0);
#   3. `koord-applier once -f pod.json` (the real path: layout, cgroup.procs, cpuset,
#      numa_maps, migrate_pages, Event text);
#   4. checks from numa_maps that >= 95% of hog's pages are on node 1 and hog still runs with
#      its data intact (SIGUSR1 re-reads every page);
#   5. throughput: koord-applier (migrate_pages) vs numactl `migratepages` on the same process,
#      same direction (node 0 -> 1), ROUNDS rounds each, plus one rate-limited move_pages pass.
# The host parses the serial console and exits non-zero on any failure.
#
# The kernel is cached outside the repo, keyed by version (tests/guest/lib.sh):
#   ${KOORD_GUEST_CACHE:-$HOME/.cache/koord-qos-guest}/<linux-image package>/vmlinuz
# Env: HOG_MIB (default 128), ROUNDS (3), KOORD_APPLIER_BIN (else cargo build, profile
#      KOORD_APPLIER_PROFILE = dev (default) or release),
#      QEMU_ACCEL (tcg|kvm; default tcg), GUEST_TIMEOUT (seconds, 600).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
GUEST_TAG=two-node
# shellcheck source=tests/guest/lib.sh
. "$here/../guest/lib.sh"
HOG_MIB="${HOG_MIB:-128}"
ROUNDS="${ROUNDS:-3}"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-600}"
started=$(date +%s)

guest_host_tools migratepages:numactl
guest_kernel

work="$(mktemp -d)"
if [ -n "${KOORD_NUMA_KEEP:-}" ]; then glog "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
root="$work/root"
guest_root "$root"
gcc -O2 -static -Wall -o "$root/bin/hog" "$here/hog.c"
guest_applier "$work/koord-applier"

# --- initramfs ----------------------------------------------------------------------------
guest_add_binary "$root" "$work/koord-applier"
guest_add_binary "$root" "$(command -v migratepages)"
cp "$here/guest-init.sh" "$root/init"
chmod +x "$root/init" "$root/bin/hog"
guest_pack "$root" "$work/initrd.gz"
glog "initramfs $(du -h "$work/initrd.gz" | cut -f1), kernel $GUEST_KPKG"

# --- boot ---------------------------------------------------------------------------------
glog "booting (accel=${QEMU_ACCEL:-tcg}, hog ${HOG_MIB} MiB, $ROUNDS rounds)"
out="$work/console.log"
boot_start=$(date +%s)
set +e
guest_boot "$work/initrd.gz" "$out" "$GUEST_TIMEOUT" \
  "transparent_hugepage=never hog_mib=$HOG_MIB rounds=$ROUNDS" \
  -smp 2 -m 512M \
  -object memory-backend-ram,id=m0,size=256M -object memory-backend-ram,id=m1,size=256M \
  -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1
rc=$?
set -e
boot_secs=$(( $(date +%s) - boot_start ))
tr -d '\r' < "$out" | grep -E '^(GUEST|RESULT|FAIL|EVENT|hog )' >&2 || true
if [ $rc -ne 0 ]; then
  glog "qemu exited $rc (124 = timeout after ${GUEST_TIMEOUT}s); console tail:"
  tail -40 "$out" >&2
  exit 1
fi
if ! grep -q '^RESULT pass' <(tr -d '\r' < "$out"); then
  glog "FAIL: the guest did not report a pass; console tail:"
  tail -60 "$out" >&2
  exit 1
fi
# Throughput, same process and direction (node 0 -> 1): pages per second.
tr -d '\r' < "$out" | awk '
  / applier pages / && /^RESULT round/ { ap += $6; aw += $10; as += $12 }
  / migratepages pages / { mp += $6; mw += $10 }
  END {
    if (aw == 0 || mw == 0) exit
    r = (ap / as) / (mp / mw)
    if (r < 0.8) printf "[two-node] WARN: koord-applier below 80%% of migratepages (goal: within 20%%)\n"
    printf "[two-node] throughput: koord-applier %.0f pages/s in migrate_pages (%.0f pages/s whole command), migratepages %.0f pages/s (whole command); applier/migratepages = %.2f\n",
      ap / as * 1e6, ap / aw * 1e6, mp / mw * 1e6, (ap / as) / (mp / mw)
  }' >&2
glog "PASS: guest ${boot_secs}s, total $(( $(date +%s) - started ))s (accel=${QEMU_ACCEL:-tcg})"
