#!/bin/busybox sh
# PID 1 of the two-node guest (see run-two-node-guest.sh). Prints GUEST/RESULT/FAIL lines on
# the serial console and powers off.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
exec >/dev/ttyS0 2>&1

fail() { echo "FAIL $*"; echo "RESULT fail"; sync; poweroff -f; }
arg() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
MIB=$(arg hog_mib); MIB=${MIB:-128}
ROUNDS=$(arg rounds); ROUNDS=${ROUNDS:-5}

echo # the firmware leaves escape sequences on the current line
echo "GUEST kernel $(uname -r) nodes online $(cat /sys/devices/system/node/online)" \
  "node0 cpus $(cat /sys/devices/system/node/node0/cpulist)" \
  "node1 cpus $(cat /sys/devices/system/node/node1/cpulist 2>/dev/null)"
[ -d /sys/devices/system/node/node1 ] || fail "guest has no node 1"

# A kubelet-like tree: cgroupfs driver, Burstable pod, containerd container.
UID_=5f2a6b1e-0c1d-4e2f-8a9b-0123456789ab
CID=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
CG=/sys/fs/cgroup/kubepods/burstable/pod$UID_/$CID
mkdir -p $CG || fail "mkdir $CG"
for d in /sys/fs/cgroup /sys/fs/cgroup/kubepods /sys/fs/cgroup/kubepods/burstable \
         /sys/fs/cgroup/kubepods/burstable/pod$UID_; do
  echo "+cpuset +memory" > $d/cgroup.subtree_control || fail "subtree_control $d"
done
# Only the CPUs: cpuset.mems stays empty (all nodes), so v2 does not migrate on attach.
echo 1 > $CG/cpuset.cpus || fail "cpuset.cpus"

cat > /tmp/pod.json <<POD
{"apiVersion":"v1","kind":"Pod",
 "metadata":{"name":"hog-0","namespace":"default","uid":"$UID_",
  "annotations":{"koordinator.sh/resolved-qos":"{\"version\":1,\"qosClass\":\"LS\",\"qosClassSource\":\"label\",\"memoryQOS\":{\"enabled\":false,\"policy\":\"none\",\"source\":\"default\",\"params\":{\"minLimitPercent\":0,\"lowLimitPercent\":0,\"throttlingPercent\":0,\"wmarkRatio\":95,\"wmarkMinAdj\":0,\"wmarkScalePermill\":20,\"priority\":0,\"priorityEnable\":0,\"oomKillGroup\":0},\"pod\":{\"memory.min\":0,\"memory.low\":0},\"containers\":{}},\"memoryLocality\":{\"policy\":\"bestEffort\",\"source\":\"pod-annotation\"}}"}},
 "spec":{"containers":[{"name":"hog","image":"hog","resources":{"requests":{"cpu":"1","memory":"64Mi"}}}]},
 "status":{"phase":"Running","qosClass":"Burstable",
  "containerStatuses":[{"name":"hog","containerID":"containerd://$CID","image":"hog","imageID":"","ready":true,"restartCount":0}]}}
POD

# pages of $1 on node $2 (numa_maps N<node>= summed)
pages() { awk -v n="N$2=" '{for(i=1;i<=NF;i++) if(index($i,n)==1) s+=substr($i,length(n)+1)} END{print s+0}' /proc/$1/numa_maps; }
# microseconds of `hog time` output
elapsed_us() { sed -n 's/^elapsed_ns=//p' "$1" | awk '{printf "%d", $1/1000}'; }
# the first number named $1 in the pretty-printed report /tmp/r.json
num() { sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p" /tmp/r.json | head -1; }

hog $MIB 0 > /tmp/hog.out &
HOG=$!
i=0; until grep -q "hog ready" /tmp/hog.out; do i=$((i+1)); [ $i -gt 600 ] && fail "hog not ready"; sleep 0.1; done
echo $HOG > $CG/cgroup.procs || fail "attach hog"
echo "GUEST hog pid $HOG ${MIB} MiB: node0 $(pages $HOG 0) node1 $(pages $HOG 1) pages; now Cpus_allowed_list $(sed -n 's/Cpus_allowed_list:\s*//p' /proc/$HOG/status)"
[ "$(pages $HOG 0)" -gt $((MIB * 256 * 9 / 10)) ] || fail "hog memory is not on node 0 before the pass"

# --- the proof ---
koord-applier --cgroup-root /sys/fs/cgroup once -f /tmp/pod.json > /tmp/report.json 2>/tmp/applier.err
rc=$?
N0=$(pages $HOG 0); N1=$(pages $HOG 1)
echo "GUEST after koord-applier (rc $rc): node0 $N0 node1 $N1 pages"
sed -n 's/.*"message": "\(.*\)".*/EVENT \1/p' /tmp/report.json | sed 's/\\n/\nEVENT /g'
[ $rc -eq 0 ] || { cat /tmp/report.json /tmp/applier.err; fail "koord-applier once exited $rc"; }
PCT=$(( N1 * 100 / (N0 + N1) ))
kill -USR1 $HOG; sleep 0.5
kill -0 $HOG 2>/dev/null || fail "hog died"
grep -q "hog verify ok" /tmp/hog.out || fail "hog data check: $(cat /tmp/hog.out)"
echo "RESULT local_pct $PCT"
[ $PCT -ge 95 ] || fail "only $PCT% of the pages on node 1"
grep -q '"MemoryLocalityCompleted"' /tmp/report.json || fail "no MemoryLocalityCompleted in the report"
grep -q '"timings"' /tmp/report.json && fail "timings in the report without --timings"

# --- throughput: same process, same direction (0 -> 1), alternating tools ---
# Each side measured twice over: the whole thing and the migrate_pages syscall alone.
#  koord-applier: `once --timings` gives the pass as `run`'s worker performs it (passMicros:
#    topology, cgroup reads, numa_maps before and after, the syscall; no process start), the
#    syscall (migrateMicros) and the in-process phases; `hog time` gives the whole command.
#  migratepages: `hog time` gives the whole command; the syscall alone comes from a second
#    run under `strace -T -e trace=migrate_pages` (the time between the syscall's entry and
#    exit stops; strace slows the rest of that run, so its whole time is not used).
reset0() { migratepages $HOG 1 0; }
r=1
while [ $r -le $ROUNDS ]; do
  reset0; P=$(pages $HOG 0)
  hog time koord-applier --cgroup-root /sys/fs/cgroup once --timings -f /tmp/pod.json >/tmp/r.json 2>/tmp/t
  US=$(elapsed_us /tmp/t)
  echo "RESULT round $r applier pages $(num pagesMigrated) of $P wall_us $US pass_us $(num passMicros) syscall_us $(num migrateMicros) in_process_us $(num totalMicros)"
  echo "TIMINGS round $r applier setup_us $(num setupMicros) layout_us $(num layoutMicros)" \
    "manifest_us $(num manifestMicros) cgroup_pass_us $(num cgroupPassMicros) resctrl_us $(num resctrlMicros)" \
    "locality_us $(num localityMicros) topology_us $(num topologyMicros) cgroup_reads_us $(num cgroupMicros)" \
    "numa_maps_before_us $(num numaMapsBeforeMicros) numa_maps_after_us $(num numaMapsAfterMicros)"
  reset0; P=$(pages $HOG 0)
  hog time migratepages $HOG 0 1 2>/tmp/t
  US=$(elapsed_us /tmp/t); M=$((P - $(pages $HOG 0)))
  echo "RESULT round $r migratepages pages $M of $P wall_us $US"
  reset0; P=$(pages $HOG 0)
  strace -T -e trace=migrate_pages -o /tmp/st migratepages $HOG 0 1 || fail "strace migratepages"
  M=$((P - $(pages $HOG 0)))
  SYS=$(sed -n 's/^migrate_pages(.*<\([0-9.]*\)>$/\1/p' /tmp/st | awk '{s += $1} END {printf "%d", s * 1e6}')
  [ "${SYS:-0}" -gt 0 ] || fail "no migrate_pages in strace output: $(cat /tmp/st)"
  echo "RESULT round $r migratepages_syscall pages $M of $P syscall_us $SYS"
  r=$((r+1))
done
# one rate-limited move_pages pass (batches, limit far above what the guest reaches)
reset0; P=$(pages $HOG 0)
hog time koord-applier --cgroup-root /sys/fs/cgroup --locality-max-pages-per-second 10000000 \
  once -f /tmp/pod.json >/tmp/r.json 2>/tmp/t
US=$(elapsed_us /tmp/t); MIG=$(sed -n 's/.*"migrateMicros": \([0-9]*\).*/\1/p' /tmp/r.json | head -1)
MOVED=$(sed -n 's/.*"pagesMigrated": \([0-9]*\).*/\1/p' /tmp/r.json | head -1)
echo "RESULT move_pages applier pages $MOVED of $P wall_us $US syscall_us $MIG node1_after $(pages $HOG 1)"
# and one limited to 8000 pages/s (well under what the guest reaches): at least P/8000 s
reset0; P=$(pages $HOG 0)
hog time koord-applier --cgroup-root /sys/fs/cgroup --locality-max-pages-per-second 8000 \
  once -f /tmp/pod.json >/tmp/r.json 2>/tmp/t
US=$(elapsed_us /tmp/t)
echo "RESULT rate_limited 8000 pages $P wall_us $US node1_after $(pages $HOG 1)"
# the limit holds: P pages at 8000/s cannot take less than P/8000 s
[ "$US" -ge $(( P * 125 * 95 / 100 )) ] || fail "rate limit not honoured: $P pages in $US us"
[ "$(pages $HOG 1)" -ge $(( P * 95 / 100 )) ] || fail "rate-limited pass left pages behind"
kill -USR1 $HOG; sleep 0.5
grep -c "hog verify ok" /tmp/hog.out | sed 's/^/GUEST hog verify ok count /'
grep -q FAILED /tmp/hog.out && fail "hog data corrupted"
kill -0 $HOG 2>/dev/null || fail "hog died"
echo "RESULT pass"
sync
poweroff -f
