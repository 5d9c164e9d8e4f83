#!/bin/busybox sh
# PID 1 of the memory-protection guest (see run-memqos-guest.sh). Prints GUEST/RESULT/FAIL
# lines on the serial console and powers off.
#
# Nothing here writes a QoS value into a cgroup file. The tree is made the way the kubelet and
# the runtime make it (directories, +memory in cgroup.subtree_control, processes into
# cgroup.procs); every memory.min/low/high/max comes from `koord-applier once` applying the
# pods that `koord-webhook resolve` mutated on the host.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/sbin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
exec >/dev/ttyS0 2>&1

FAILED=0
fail() { echo "FAIL $*"; echo "RESULT fail"; sync; poweroff -f; }
# A failed check that does not stop the guest: the other configurations still report.
soft_fail() { echo "FAIL $*"; FAILED=1; }
arg() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
CONFIGS=$(arg configs); CONFIGS=${CONFIGS:-ABC}
RUNS=$(arg runs); RUNS=${RUNS:-3}
HOT_RUNS=$(arg hot_runs); HOT_RUNS=${HOT_RUNS:-1}
BE_ANON=$(arg be_anon_mib); BE_ANON=${BE_ANON:-160}
BE_PASSES=$(arg be_passes); BE_PASSES=${BE_PASSES:-3}
AFTER_ROUNDS=$(arg after_rounds); AFTER_ROUNDS=${AFTER_ROUNDS:-3}
REDIS=$(arg redis); REDIS=${REDIS:-0}
REDIS_KEYS=$(arg redis_keys); REDIS_KEYS=${REDIS_KEYS:-40000}
REDIS_REQUESTS=$(arg redis_requests); REDIS_REQUESTS=${REDIS_REQUESTS:-20000}
# 1: this koord-applier has --protect-ancestors (the host read `once --help`)
ANCESTORS_FLAG=$(arg ancestors_flag); ANCESTORS_FLAG=${ANCESTORS_FLAG:-0}

for m in crc32c_generic crc16 mbcache jbd2 ext4 virtio_ring virtio virtio_pci_modern_dev \
         virtio_pci_legacy_dev virtio_pci virtio_blk; do
  insmod /lib/modules/$m.ko || fail "insmod $m"
done
for disk in vda $([ $REDIS = 1 ] && echo vdb); do
  i=0; until [ -b /dev/$disk ]; do i=$((i+1)); [ $i -gt 100 ] && fail "no /dev/$disk"; sleep 0.1; done
done
mkdir -p /data /redis
mount_disks() {
  mount -t ext2 -o ro /dev/vda /data || fail "mount /dev/vda"
  [ $REDIS = 1 ] && { mount -t ext2 /dev/vdb /redis || fail "mount /dev/vdb"; }
  return 0
}
mount_disks
echo # the firmware leaves escape sequences on the current line
echo "GUEST kernel $(uname -r) $(grep MemTotal /proc/meminfo | tr -s ' ') swap devices $(awk 'NR>1' /proc/swaps | wc -l)" \
  "mglru $(cat /sys/kernel/mm/lru_gen/enabled 2>/dev/null || echo none)"

CGR=/sys/fs/cgroup
KP=$CGR/kubepods
BU=$KP/burstable
BQ=$KP/besteffort
# pod<uid>/<containerd id>, as in the manifests' metadata.uid and status.containerStatuses
LS_POD=$BU/pod1c5e0a57-4b8e-4d2a-9f3b-7a1e2d3c4b5a
LS_CG=$LS_POD/1c5e0a574b8e4d2a9f3b7a1e2d3c4b5a1c5e0a574b8e4d2a9f3b7a1e2d3c4b5a
LR_POD=$BU/pod4f8b3d8a-7e1b-4a5d-8c6e-ad4b5a6f7e8d
LR_CG=$LR_POD/4f8b3d8a7e1b4a5d8c6ead4b5a6f7e8d4f8b3d8a7e1b4a5d8c6ead4b5a6f7e8d
BE_POD=$BQ/pod2d6f1b68-5c9f-4e3b-8a4c-8b2f3e4d5c6b
BE_CG=$BE_POD/2d6f1b685c9f4e3b8a4c8b2f3e4d5c6b2d6f1b685c9f4e3b8a4c8b2f3e4d5c6b
BT_POD=$BQ/pod3e7a2c79-6d0a-4f4c-9b5d-9c3a4f5e6d7c
BT_CG=$BT_POD/3e7a2c796d0a4f4c9b5d9c3a4f5e6d7c3e7a2c796d0a4f4c9b5d9c3a4f5e6d7c

# A new kubelet tree on a cold page cache: the old tree goes, the disks are remounted (their
# cache charged to the old tree goes with them), then what the kubelet makes: directories and
# the memory controller down to the pods.
fresh_tree() {
  for cg in $LS_CG $LR_CG $BE_CG $BT_CG $LS_POD $LR_POD $BE_POD $BT_POD $BU $BQ $KP; do
    [ -d $cg ] && { rmdir $cg || fail "rmdir $cg (a process left behind?)"; }
  done
  umount /data; [ $REDIS = 1 ] && umount /redis
  sync; echo 3 > /proc/sys/vm/drop_caches
  mount_disks
  mkdir -p $LS_CG $LR_CG $BE_CG $BT_CG || fail "mkdir tree"
  for d in $CGR $KP $BU $BQ $LS_POD $LR_POD $BE_POD $BT_POD; do
    echo "+memory" > $d/cgroup.subtree_control || fail "subtree_control $d"
  done
}
# stop CGROUP: SIGTERM to the processes of CGROUP, then wait until they are gone (SIGKILL
# after 10 s). ($! of a backgrounded in_cg is a subshell, not the container's process.)
stop() {
  local i=0
  kill $(cat "$1/cgroup.procs") 2>/dev/null # one pid per line: split on purpose
  while [ -n "$(cat $1/cgroup.procs)" ]; do
    i=$((i+1)); [ $i = 50 ] && kill -9 $(cat $1/cgroup.procs) 2>/dev/null
    [ $i -gt 100 ] && fail "processes left in $1: $(cat $1/cgroup.procs)"
    sleep 0.2
  done
}
# in_cg CGROUP CMD...: run CMD as a process of CGROUP (as the runtime starts a container).
in_cg() { sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$@"; }
stat_of() { awk -v k="$2" '$1==k{print $2}' "$1/memory.stat"; }
event_of() { awk -v k="$2" '$1==k{print $2}' "$1/memory.events"; }
resident() { probe resident /data/$1 | sed 's/resident_pages=\([0-9]*\).*/\1/'; }
read_us() { in_cg $LS_CG probe read /data/ls.dat | sed -n 's/read_us=\([0-9]*\).*/\1/p'; }
# lat_round TAG PHASE: one timed read of the LS working set, with the refaults it caused.
lat_round() {
  local rf="$(stat_of $LS_POD workingset_refault_file)" us="$(read_us)"
  echo "RESULT lat $1 $2 $us refaults=$(( $(stat_of $LS_POD workingset_refault_file) - rf ))"
}

# apply CONFIG POD...: `koord-applier once` on each pod, as configuration CONFIG runs it
# (T: memory QoS on, the applier's defaults).
apply() {
  local cfg=$1 dir=/pods/on flags=""
  shift
  case $cfg in
    A) dir=/pods/off ;;
    B) [ "$ANCESTORS_FLAG" = 1 ] && flags="--protect-ancestors=false" ;;
    C) [ "$ANCESTORS_FLAG" = 1 ] || fail "configuration C needs koord-applier --protect-ancestors" ;;
  esac
  for pod in "$@"; do
    koord-applier --cgroup-root $CGR once $flags -f $dir/$pod.json > /tmp/apply-$pod.json 2>/tmp/apply.err \
      || { cat /tmp/apply-$pod.json /tmp/apply.err; fail "koord-applier once $flags -f $dir/$pod.json"; }
  done
}

# check_tree CONFIG TAG POD_DIR POD: the values the applier left on an LS pod (its manifest
# /pods/on/POD.json) and its ancestors.
check_tree() {
  local cfg=$1 tag=$2 pod=$3 name=$4
  local pod_min="$(cat $pod/memory.min)" pod_low="$(cat $pod/memory.low)"
  local bu_min="$(cat $BU/memory.min)" bu_low="$(cat $BU/memory.low)"
  local kp_min="$(cat $KP/memory.min)" kp_low="$(cat $KP/memory.low)"
  local bq_min="$(cat $BQ/memory.min)" bq_low="$(cat $BQ/memory.low)"
  echo "RESULT tree $tag ls_pod_min=$pod_min ls_pod_low=$pod_low burstable_min=$bu_min" \
    "burstable_low=$bu_low kubepods_min=$kp_min kubepods_low=$kp_low besteffort_min=$bq_min besteffort_low=$bq_low"
  case $cfg in
    A) [ "$pod_min$pod_low$bu_min$bu_low$kp_min$kp_low" = 000000 ] || soft_fail "$tag: the no-QoS tree holds protection" ;;
    B) [ "$pod_min" -gt 0 ] || soft_fail "$tag: the applier left the LS pod without memory.min"
       [ "$bu_min$bu_low$kp_min$kp_low" = 0000 ] || soft_fail "$tag: ancestors written with --protect-ancestors=false" ;;
    C) [ "$pod_min" -gt 0 ] || soft_fail "$tag: the applier left the LS pod without memory.min"
       # The LS pod is the only child of burstable holding anything and BE pods hold 0, so the
       # sums are exact: burstable = the pod, besteffort = 0, kubepods = burstable + besteffort.
       [ "$bu_min" = "$pod_min" ] && [ "$bu_low" = "$pod_low" ] && [ "$kp_min" = "$bu_min" ] && [ "$kp_low" = "$bu_low" ] \
         || soft_fail "$tag: ancestors are not the sums of their children (burstable $bu_min/$bu_low, kubepods $kp_min/$kp_low, pod $pod_min/$pod_low)"
       # A second pass on the real kernel writes nothing, ancestors included.
       koord-applier --cgroup-root $CGR once -f /pods/on/$name.json > /tmp/again.json 2>/tmp/apply.err \
         || soft_fail "$tag: second koord-applier once failed"
       ! grep -q '"outcome": "written"' /tmp/again.json || soft_fail "$tag: the second pass wrote: $(grep -B8 '"outcome": "written"' /tmp/again.json | tr -s ' \n' ' ')" ;;
  esac
  [ "$bq_min$bq_low" = 00 ] || soft_fail "$tag: besteffort gained protection ($bq_min/$bq_low)"
}

# flood_run PROFILE CONFIG RUN BEFORE_ROUNDS: the LS reads its working set once (from disk) and
# BEFORE_ROUNDS more times; then a BE pod holds BE_ANON MiB and streams be.dat (larger than the
# guest's memory) BE_PASSES times, the LS reading its working set once after each pass but the
# last; then the LS reads it AFTER_ROUNDS more times.
flood_run() {
  local tag="$1 $2 $3" before=$4
  fresh_tree
  apply $2 ls-cache be-flood
  check_tree $2 "$tag" $LS_POD ls-cache
  local ws="$(probe resident /data/ls.dat | sed 's/.*total_pages=//')"
  local cold="$(read_us)" r=1
  while [ $r -le $before ]; do lat_round "$tag" before; r=$((r+1)); done
  local cur0="$(cat $LS_POD/memory.current)" res0="$(resident ls.dat)"
  local rf0="$(stat_of $LS_POD workingset_refault_file)" mf0="$(stat_of $LS_POD pgmajfault)"
  in_cg $BE_CG probe be $BE_ANON /data/be.dat $BE_PASSES > /tmp/be.out 2>&1 &
  local be=$! min_res=$res0 seen=0 n res
  while kill -0 $be 2>/dev/null; do
    sleep 0.2
    n=$(grep -c '^be pass' /tmp/be.out)
    [ $n -gt $seen ] || continue
    seen=$n
    grep -q '^be done' /tmp/be.out && break
    res=$(resident ls.dat)
    [ $res -lt $min_res ] && min_res=$res
    lat_round "$tag" during
  done
  wait $be
  grep -q "be done" /tmp/be.out || { cat /tmp/be.out; fail "$tag: the BE workload did not finish"; }
  local res1="$(resident ls.dat)" cur1="$(cat $LS_POD/memory.current)"
  [ $res1 -lt $min_res ] && min_res=$res1
  local rf1="$(stat_of $LS_POD workingset_refault_file)" mf1="$(stat_of $LS_POD pgmajfault)"
  r=1
  while [ $r -le $AFTER_ROUNDS ]; do lat_round "$tag" after; r=$((r+1)); done
  local rf2="$(stat_of $LS_POD workingset_refault_file)" mf2="$(stat_of $LS_POD pgmajfault)"
  echo "RESULT run $tag ws_pages=$ws cold_us=$cold resident_before=$res0 resident_min=$min_res" \
    "resident_end=$res1 current_before=$cur0 current_end=$cur1 refault_during=$((rf1 - rf0))" \
    "refault_after=$((rf2 - rf1)) pgmajfault_during=$((mf1 - mf0)) pgmajfault_after=$((mf2 - mf1))" \
    "be_peak=$(cat $BE_POD/memory.peak) be_passes_us=$(sed -n 's/be pass [0-9]* us=//p' /tmp/be.out | tr '\n' ,)"
}

# throttle_run: a BE pod with a batch-memory limit streams be.dat through the memory.high the
# applier set from throttlingPercent, next to the LS (memory QoS on, the applier's defaults).
throttle_run() {
  fresh_tree
  apply T ls-cache be-throttled
  local high="$(cat $BT_CG/memory.high)" max="$(cat $BT_CG/memory.max)" pod_max="$(cat $BT_POD/memory.max)"
  [ "$high" != max ] || soft_fail "throttle: the applier left memory.high at max"
  read_us > /dev/null
  local res0="$(resident ls.dat)" rf0="$(stat_of $LS_POD workingset_refault_file)" cur0="$(cat $LS_POD/memory.current)"
  in_cg $BT_CG probe be 16 /data/be.dat 1 > /tmp/bt.out 2>&1
  grep -q '^be done' /tmp/bt.out || { cat /tmp/bt.out; fail "throttle: the BE workload did not finish"; }
  local res1="$(resident ls.dat)" rf1="$(stat_of $LS_POD workingset_refault_file)" cur1="$(cat $LS_POD/memory.current)"
  echo "RESULT throttle memory_high=$high memory_max=$max pod_memory_max=$pod_max" \
    "events_high=$(event_of $BT_CG high) events_max=$(event_of $BT_CG max) events_oom=$(event_of $BT_CG oom)" \
    "peak=$(cat $BT_CG/memory.peak) ls_resident_before=$res0 ls_resident_after=$res1" \
    "ls_current_before=$cur0 ls_current_after=$cur1 ls_refaults=$((rf1 - rf0))" \
    "be_us=$(sed -n 's/be pass 1 us=//p' /tmp/bt.out)"
}

# redis_run CONFIG: the seeds' experiment shape. Redis (LS) runs from its own disk, like a
# container image, with an append-only file there; the BE pod floods the node while
# redis-benchmark (outside the pods, as a client would be) measures it.
redis_run() {
  local cfg=$1 sock=/tmp/redis.sock
  fresh_tree
  apply $cfg ls-redis be-flood
  check_tree $cfg "redis $cfg" $LR_POD ls-redis
  rm -rf /redis/data; mkdir -p /redis/data
  in_cg $LR_CG /redis/lib/ld-linux-x86-64.so.2 --library-path /redis/lib /redis/bin/redis-server \
    --port 0 --unixsocket $sock --save "" --appendonly yes --appendfsync no --dir /redis/data \
    --auto-aof-rewrite-percentage 0 \
    > /tmp/redis.log 2>&1 &
  local redis=$! i=0
  until redis-benchmark -s $sock -t ping -n 1 -q > /dev/null 2>&1; do
    i=$((i+1)); [ $i -gt 150 ] && { cat /tmp/redis.log; fail "redis $cfg: redis-server did not start"; }
    sleep 0.2
  done
  redis-benchmark -s $sock -t set -n $REDIS_KEYS -r $REDIS_KEYS -d 1024 -P 16 -q > /dev/null 2>&1
  local mf0="$(stat_of $LR_POD pgmajfault)" rf0="$(stat_of $LR_POD workingset_refault_file)"
  in_cg $BE_CG probe be $BE_ANON /data/be.dat 99 > /tmp/be.out 2>&1 &
  local be=$!
  i=0; until grep -q '^be pass 1' /tmp/be.out; do
    i=$((i+1)); [ $i -gt 600 ] && fail "redis $cfg: the BE pod never finished a pass"; sleep 0.2
  done
  redis-benchmark -s $sock -t get,set -n $REDIS_REQUESTS -r $REDIS_KEYS -d 1024 -c 8 --csv > /tmp/bench.csv 2>/dev/null
  stop $BE_CG; wait $be 2>/dev/null
  local mf1="$(stat_of $LR_POD pgmajfault)" rf1="$(stat_of $LR_POD workingset_refault_file)"
  tr -d '"' < /tmp/bench.csv | awk -F, -v c=$cfg '$1=="GET"||$1=="SET"{print "RESULT redis " c " " $1 " rps=" $2 " avg_ms=" $3 " p50_ms=" $5 " p99_ms=" $7 " max_ms=" $8}'
  echo "RESULT redis $cfg lsstat pgmajfault=$((mf1 - mf0)) refaults=$((rf1 - rf0)) current=$(cat $LR_POD/memory.current) be_passes=$(grep -c '^be pass' /tmp/be.out)"
  grep -q GET /tmp/bench.csv || soft_fail "redis $cfg: no redis-benchmark result"
  stop $LR_CG; wait $redis 2>/dev/null
}

CFGS=""
for cfg in $(echo $CONFIGS | sed 's/./& /g'); do
  if [ $cfg = C ] && [ "$ANCESTORS_FLAG" != 1 ]; then
    soft_fail "configuration C not run: koord-applier has no --protect-ancestors flag"
    continue
  fi
  CFGS="$CFGS $cfg"
done

# "cold": the working set was read once before the flood (the asserted profile);
# "hot": read twice, so the kernel has it on the active list when the flood starts.
for run in $(seq 1 $RUNS); do
  for cfg in $CFGS; do flood_run cold $cfg $run 0; done
done
for run in $(seq 1 $HOT_RUNS); do
  for cfg in $CFGS; do flood_run hot $cfg $run 1; done
done
throttle_run
if [ $REDIS = 1 ]; then
  for cfg in $CFGS; do redis_run $cfg; done
fi

[ $FAILED = 0 ] && echo "RESULT pass" || echo "RESULT fail"
sync
poweroff -f
