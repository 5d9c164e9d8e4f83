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
#   5. throughput: koord-applier vs numactl `migratepages` on the same process, same direction
#      (node 0 -> 1), ROUNDS rounds each, each side read as a whole (the applier's pass as `run`
#      performs it, and its whole `once` command; migratepages' whole command) and as the
#      migrate_pages syscall alone (the applier's own clock; strace -T for migratepages); fails
#      when the applier's whole pass is below MIN_PASS_RATIO of migratepages' whole command in
#      the median round;
#      plus one rate-limited move_pages pass.
# The host parses the serial console and exits non-zero on any failure.
#
# The kernel is cached outside the repo, keyed by version (tests/guest/lib.sh):
#   ${KOORD_GUEST_CACHE:-$HOME/.cache/koord-qos-guest}/<linux-image package>/vmlinuz
# Env: HOG_MIB (default 128), ROUNDS (9), MIN_PASS_RATIO (0.8), KOORD_APPLIER_BIN (else
#      cargo build, profile KOORD_APPLIER_PROFILE = dev (default) or release),
#      QEMU_ACCEL (tcg|kvm; default tcg), GUEST_TIMEOUT (seconds, 600).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
GUEST_TAG=two-node
# shellcheck source=tests/guest/lib.sh
. "$here/../guest/lib.sh"
HOG_MIB="${HOG_MIB:-128}"
ROUNDS="${ROUNDS:-9}"
GUEST_TIMEOUT="${GUEST_TIMEOUT:-600}"
started=$(date +%s)

guest_host_tools migratepages:numactl strace:strace
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
guest_add_binary "$root" "$(command -v strace)"
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
tr -d '\r' < "$out" | grep -E '^(GUEST|RESULT|TIMINGS|FAIL|EVENT|hog )' >&2 || true
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
# Throughput, same process and direction (node 0 -> 1), in pages per second, both tools read
# the same two ways: the whole thing (koord-applier: the pass as `run` performs it, and the
# whole `once` command; migratepages: the whole command) and the migrate_pages syscall alone.
# Summed over the rounds (pages / time). Gate: the applier's whole pass reaches at least
# MIN_PASS_RATIO (0.8) of migratepages' whole command in the median round (measured: 1.01-1.18
# quiet, 0.93 and 1.01 in loaded .ci/runs with 5 rounds; 9 rounds narrow the median), each round's ratio
# taken between the two tools run back to back: under TCG on a shared host one round moves by
# +/-40% with the load (even the same syscall on both sides), and a load swing hits both tools
# of one round, where a sum over the rounds carries a single slow round whole.
if ! tr -d '\r' < "$out" | awk -v min="${MIN_PASS_RATIO:-0.8}" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" -v cores="$(nproc)" '
  /^RESULT round/ && $4 == "applier" {
    n++; ap += $6; aw += $10; apass += $12; asys += $14; ain += $16
    if ($6 / $12 > bpass) bpass = $6 / $12
    rp[$3] = $6 / $12
  }
  /^RESULT round/ && $4 == "migratepages" {
    mp += $6; mw += $10; if ($6 / $10 > bmw) bmw = $6 / $10
    rm[$3] = $6 / $10
  }
  /^RESULT round/ && $4 == "migratepages_syscall" { sp += $6; ss += $10 }
  /^TIMINGS round/ { for (i = 5; i < NF; i += 2) t[$i] += $(i + 1) }
  END {
    if (n == 0 || mw == 0 || ss == 0) { print "[two-node] FAIL: no throughput rounds"; exit 1 }
    printf "[two-node] koord-applier: %.0f pages/s whole pass, %.0f pages/s in migrate_pages (%.0f pages/s whole once command); migratepages: %.0f pages/s whole command, %.0f pages/s in migrate_pages\n",
      ap / apass * 1e6, ap / asys * 1e6, ap / aw * 1e6, mp / mw * 1e6, sp / ss * 1e6
    r = (ap / apass) / (mp / mw)
    m = 0
    for (k in rp) if (k in rm) {
      x = rp[k] / rm[k]
      for (j = m; j > 0 && pr[j - 1] > x; j--) pr[j] = pr[j - 1]
      pr[j] = x; m++
    }
    if (m == 0) { print "[two-node] FAIL: no round with both tools"; exit 1 }
    med = (m % 2) ? pr[(m - 1) / 2] : (pr[m / 2 - 1] + pr[m / 2]) / 2
    printf "[two-node] ratios over %d rounds: whole pass / whole command %.2f in the median round (single rounds %.2f-%.2f; summed over the rounds %.2f; best of %d: %.2f); whole once command / whole command %.2f; migrate_pages / migrate_pages %.2f\n",
      n, med, pr[0], pr[m - 1], r, n, bpass / bmw, (ap / aw) / (mp / mw), (ap / asys) / (sp / ss)
    printf "[two-node] koord-applier once, mean us per round: whole %d = process start, report printing and exit %d + setup %d + layout %d + manifest %d + cgroup pass %d + resctrl %d + locality %d (topology %d, cgroup reads %d, numa_maps before %d, migrate_pages %d, numa_maps after %d); the pass %d of it (other work in the pass %d)\n",
      aw / n, (aw - ain) / n, t["setup_us"] / n, t["layout_us"] / n, t["manifest_us"] / n, t["cgroup_pass_us"] / n,
      t["resctrl_us"] / n, t["locality_us"] / n, t["topology_us"] / n, t["cgroup_reads_us"] / n,
      t["numa_maps_before_us"] / n, asys / n, t["numa_maps_after_us"] / n, apass / n,
      (apass - t["topology_us"] - t["cgroup_reads_us"] - t["numa_maps_before_us"] - asys - t["numa_maps_after_us"]) / n
    if (med < min) {
      rounds = ""
      for (j = 0; j < m; j++) rounds = rounds sprintf(" %.2f", pr[j])
      printf "[two-node] FAIL: koord-applier whole pass is %.2f of migratepages whole command in the median round (need >= %.2f; rounds sorted:%s; host load %s on %d cores)\n", med, min, rounds, load, cores
      exit 1
    }
  }' >&2; then
  exit 1
fi
glog "PASS: guest ${boot_secs}s, total $(( $(date +%s) - started ))s (accel=${QEMU_ACCEL:-tcg})"
