# Steps and lanes for the test runners (tests/all.sh, tests/suites.sh): each step's output goes
# to its own log, printed whole when the step ends, with its wall time; a timeline of every step
# is printed at the end. Sourced, not run. Needs LANES_LOG_DIR set.
#
#   step NAME CMD...        run CMD as step NAME (foreground); returns its exit code
#   lanes_failed            the names of the failed steps so far (one line)
#   lanes_why               the first lines saying why, for each failed step
#   lanes_timeline          the table of steps: start offset, wall time, CPU, exit code, and
#                           how busy the machine's cores were over the run

: "${LANES_LOG_DIR:?LANES_LOG_DIR must be set}"
# Wall-clock seconds (not $SECONDS, which restarts in every script): a nested runner's steps
# (tests/suites.sh under tests/all.sh) are placed on the outer runner's timeline.
LANES_T0=${LANES_T0:-$EPOCHSECONDS}
export LANES_T0
mkdir -p "$LANES_LOG_DIR"
# The machine's busy and total CPU ticks at the outer runner's start (/proc/stat: all but idle and
# iowait is busy): a cold run is bound by CPU on 2 cores, and the timeline says how much was used.
lanes_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat; }
[[ -s $LANES_LOG_DIR/ticks0 ]] || lanes_ticks >"$LANES_LOG_DIR/ticks0"

# CPU seconds (user + system) of the children this shell has waited for, into variable $1: bash's
# `times`, run in this shell (a command substitution would be a subshell with no children).
lanes_cpu() {
    local f=$LANES_LOG_DIR/.times.$BASHPID
    times >"$f"
    printf -v "$1" '%s' "$(awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } printf "%d", s }' "$f")"
    rm -f "$f"
}

step() { # NAME CMD...
    local name=$1 t0=$EPOCHSECONDS rc cpu0
    shift
    lanes_cpu cpu0
    echo "[$(date -u +%H:%M:%S)] start $name" >&2
    "$@" >"$LANES_LOG_DIR/$name.log" 2>&1
    rc=$?
    local cpu
    lanes_cpu cpu
    cpu=$((cpu - cpu0))
    {
        echo "===== $name: exit $rc after $((EPOCHSECONDS - t0)) s, $cpu CPU s ($*) ====="
        cat "$LANES_LOG_DIR/$name.log"
        echo "===== end of $name ====="
    }
    # The timeline row: start offset from the runner's start, wall time, CPU seconds of what the
    # step waited for (a daemon it left running is not counted), exit code.
    printf '%s %d %d %d %d\n' "$name" "$((t0 - LANES_T0))" "$((EPOCHSECONDS - t0))" "$cpu" "$rc" >>"$LANES_LOG_DIR/timeline"
    [[ $rc -eq 0 ]] || echo "$name" >>"$LANES_LOG_DIR/failed"
    return $rc
}

lanes_failed() {
    [[ -f $LANES_LOG_DIR/failed ]] && tr '\n' ' ' <"$LANES_LOG_DIR/failed"
    return 0
}

# Why each failed step failed, in a few lines after the timeline (a CI page that shows only the
# end of the output still names the cause): its first FAIL, FATAL, panic or error lines, cut.
lanes_why() {
    [[ -f $LANES_LOG_DIR/failed ]] || return 0
    local name
    while read -r name; do
        echo "why $name failed (first lines of $LANES_LOG_DIR/$name.log that say):"
        grep -E -m 4 '^(FAIL|FATAL)|panicked|^error|: error|^test .* FAILED' "$LANES_LOG_DIR/$name.log" |
            cut -c1-400 | sed 's/^/  /' || true
    done <"$LANES_LOG_DIR/failed"
}

lanes_timeline() {
    [[ -f $LANES_LOG_DIR/timeline ]] || return 0
    echo "timeline (seconds from the start; wall; CPU seconds; exit):"
    sort -k2 -n "$LANES_LOG_DIR/timeline" |
        awk '{ printf "  %-16s start %5d  wall %5d  cpu %6d  exit %d\n", $1, $2, $3, $4, $5 }'
    local busy0 total0 busy1 total1
    read -r busy0 total0 <"$LANES_LOG_DIR/ticks0"
    read -r busy1 total1 < <(lanes_ticks)
    echo "  machine: $(nproc) cores, $(( (busy1 - busy0) / $(getconf CLK_TCK) )) CPU s busy over" \
        "$((EPOCHSECONDS - LANES_T0)) s ($(( 100 * (busy1 - busy0) / (total1 - total0 + 1) ))% of every core's time)"
}
