#!/usr/bin/env bash
# Overhead of the Performance Collector: koord-applier with both collectors on,
# following N real container cgroups for a while, measured from outside.
#
#   sudo applier/benches/collectors_overhead.sh [SECONDS=600] [CONTAINERS=150]
#
# Needs root and a cgroup v2 hierarchy with PSI files (here: /sys/fs/cgroup/unified; set
# UNIFIED=/sys/fs/cgroup on a pure v2 host). Creates a kubelet-like cgroupfs tree
# <UNIFIED>/koord-bench-<pid>/kubepods/burstable/pod<uid>/<container id> (3 containers per
# pod), moves a few busy processes into some containers, writes the pods as a List and runs
#
#   koord-applier --cgroup-root <tree> --cgroup-version v2 --cgroup-driver cgroupfs \
#     --feature-gates=CPICollector=true,PSICollector=true \
#     once -f pods.yaml --collect --collect-serve 127.0.0.1:PORT
#
# which runs the PSI loop (10 s) and the CPI loop (10 s window every 60 s) for that fixed pod
# list with /metrics served, as `run` does for the watched pods. Without a PMU (ENOENT for
# cycles) the CPI loop would idle, so by default it counts software clocks instead
# (CPI_SOFTWARE=1, hidden flag --cpi-software-events): the same perf_event_open/ioctl/read
# path per container and CPU, only the event type differs. CPI_SOFTWARE=0 disables that.
#
# Scrapes /metrics every 15 s (SCRAPE_EVERY) as Prometheus would, samples VmRSS/VmHWM
# (/proc/PID/status) and utime+stime (/proc/PID/stat) every 5 s; prints
# CPU as percent of one core over the run, RSS, and /usr/bin/time -v's summary.
set -euo pipefail

SECONDS_TO_RUN=${1:-600}
CONTAINERS=${2:-150}
PER_POD=3
BUSY=${BUSY:-4}
PORT=${PORT:-19316}
SCRAPE_EVERY=${SCRAPE_EVERY:-15}
UNIFIED=${UNIFIED:-/sys/fs/cgroup/unified}
CPI_SOFTWARE=${CPI_SOFTWARE:-1}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-${CARGO_TARGET_DIR:-$HERE/target}/release/koord-applier}

[ "$(id -u)" = 0 ] || { echo "SKIPPED: needs root (cgroup directories)"; exit 0; }
[ -f "$UNIFIED/cpu.pressure" ] || { echo "SKIPPED: $UNIFIED has no PSI files"; exit 0; }
[ -x "$BIN" ] || (cd "$HERE" && cargo build --release -p koord-applier)

ROOT="$UNIFIED/koord-bench-$$"
WORK=$(mktemp -d)
BUSY_PIDS=()
APP_PID=""
TIME_PID=""

cleanup() {
    set +e
    [ -n "$TIME_PID" ] && kill -TERM "$APP_PID" 2>/dev/null && wait "$TIME_PID" 2>/dev/null
    for p in "${BUSY_PIDS[@]}"; do
        echo "$p" > "$UNIFIED/cgroup.procs" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    sleep 0.2
    # Leaves first.
    find "$ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

pods=$(( (CONTAINERS + PER_POD - 1) / PER_POD ))
echo "tree: $ROOT ($pods pods, $CONTAINERS containers)"
{
    echo "apiVersion: v1"
    echo "kind: List"
    echo "items:"
} > "$WORK/pods.yaml"
n=0
for p in $(seq 1 "$pods"); do
    uid=$(printf '00000000-0000-4000-8000-%012x' "$p")
    dir="$ROOT/kubepods/burstable/pod$uid"
    mkdir -p "$dir"
    specs=""
    statuses=""
    for c in $(seq 1 "$PER_POD"); do
        [ "$n" -lt "$CONTAINERS" ] || break
        n=$((n + 1))
        id=$(printf '%064x' "$n")
        mkdir "$dir/$id"
        specs+="      - {name: c$c, image: x}"$'\n'
        statuses+="      - {name: c$c, containerID: containerd://$id, image: x, imageID: '', ready: true, restartCount: 0}"$'\n'
    done
    cat >> "$WORK/pods.yaml" <<EOF
  - apiVersion: v1
    kind: Pod
    metadata: {name: bench-$p, namespace: bench, uid: $uid, resourceVersion: "1"}
    spec:
      nodeName: bench-node
      containers:
$specs    status:
      phase: Running
      qosClass: Burstable
      containerStatuses:
$statuses
EOF
done

# A few busy processes (duty-cycled, so the machine stays usable) in the first containers.
i=0
for d in $(find "$ROOT/kubepods/burstable" -mindepth 2 -maxdepth 2 -type d | sort | head -n "$BUSY"); do
    sh -c 'while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done' &
    BUSY_PIDS+=("$!")
    echo "$!" > "$d/cgroup.procs"
    i=$((i + 1))
done

extra=()
[ "$CPI_SOFTWARE" = 1 ] && extra+=(--cpi-software-events)
/usr/bin/time -v -o "$WORK/time.txt" "$BIN" \
    --cgroup-root "$ROOT" --cgroup-version v2 --cgroup-driver cgroupfs \
    --feature-gates=CPICollector=true,PSICollector=true "${extra[@]}" \
    once -f "$WORK/pods.yaml" --collect --collect-serve "127.0.0.1:$PORT" 2> "$WORK/applier.log" &
TIME_PID=$!
for _ in $(seq 1 50); do
    APP_PID=$(pgrep -P "$TIME_PID" || true)
    [ -n "$APP_PID" ] && break
    sleep 0.1
done
[ -n "$APP_PID" ] || { echo "applier did not start"; cat "$WORK/applier.log"; exit 1; }
tck=$(getconf CLK_TCK)
start_ticks() { awk '{print $14 + $15}' "/proc/$APP_PID/stat"; }
t0=$(date +%s.%N)
c0=$(start_ticks)
echo "applier pid $APP_PID; sampling every 5 s for $SECONDS_TO_RUN s"
echo "elapsed_s cpu_ticks vmrss_kib vmhwm_kib" > "$WORK/samples.txt"
end=$(( $(date +%s) + SECONDS_TO_RUN ))
scraped=0
last_scrape=$(date +%s)
while [ "$(date +%s)" -lt "$end" ]; do
    sleep 5
    [ -d "/proc/$APP_PID" ] || { echo "applier exited early"; cat "$WORK/applier.log"; exit 1; }
    now=$(date +%s.%N)
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$APP_PID/status")
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$APP_PID/status")
    echo "$(echo "$now - $t0" | bc) $(( $(start_ticks) - c0 )) $rss $hwm" >> "$WORK/samples.txt"
    # Scraped like Prometheus would (ServiceMonitor interval 15 s): the exposition's cost counts.
    if [ $(( $(date +%s) - last_scrape )) -ge "$SCRAPE_EVERY" ]; then
        last_scrape=$(date +%s)
        scraped=$((scraped + 1))
        curl -s "http://127.0.0.1:$PORT/metrics" > "$WORK/metrics.txt" || true
    fi
done
t1=$(date +%s.%N)
c1=$(start_ticks)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$APP_PID/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$APP_PID/status")
kill -TERM "$APP_PID"
wait "$TIME_PID" || true
TIME_PID=""

elapsed=$(echo "$t1 - $t0" | bc -l)
cpu_pct=$(echo "($c1 - $c0) / $tck / $elapsed * 100" | bc -l)
echo
echo "=== koord-applier, PSI + CPI collectors, $CONTAINERS containers in $pods pods, $(printf %.0f "$elapsed") s ==="
printf 'CPU: %.3f%% of one core (%d ticks of %d Hz over %.1f s)\n' "$cpu_pct" "$((c1 - c0))" "$tck" "$elapsed"
printf 'RSS at end: %.1f MiB; peak (VmHWM): %.1f MiB\n' "$(echo "$rss / 1024" | bc -l)" "$(echo "$hwm / 1024" | bc -l)"
if [ -s "$WORK/metrics.txt" ]; then
    echo "scrapes: $scraped; series in the last: koordlet_pod_psi $(grep -c '^koordlet_pod_psi{' "$WORK/metrics.txt"), koordlet_container_psi $(grep -c '^koordlet_container_psi{' "$WORK/metrics.txt"), koordlet_container_cpi $(grep -c '^koordlet_container_cpi{' "$WORK/metrics.txt")"
    grep '^koord_applier_cpi_collector_supported\|^koord_applier_psi_unavailable' "$WORK/metrics.txt" || true
fi
echo "RSS samples (MiB): min $(awk 'NR>1 {print $3}' "$WORK/samples.txt" | sort -n | head -1 | awk '{printf "%.1f", $1/1024}'), max $(awk 'NR>1 {print $3}' "$WORK/samples.txt" | sort -n | tail -1 | awk '{printf "%.1f", $1/1024}')"
echo "--- /usr/bin/time -v ---"
grep -E 'Maximum resident|User time|System time|Elapsed|Percent of CPU|context switches' "$WORK/time.txt" || true
echo "--- applier log (first lines) ---"
head -5 "$WORK/applier.log"
