# Steps and lanes for the test runners (tests/all.sh, tests/suites.sh): each step's output goes
# to its own log, printed whole when the step ends, with its wall time; a timeline of every step
# is printed at the end. Sourced, not run. Needs LANES_LOG_DIR set.
#
#   step NAME CMD...        run CMD as step NAME (foreground); returns its exit code
#   lanes_failed            the names of the failed steps so far (one line)
#   lanes_timeline          the table of steps: start offset, wall time, exit code

: "${LANES_LOG_DIR:?LANES_LOG_DIR must be set}"
# Wall-clock seconds (not $SECONDS, which restarts in every script): a nested runner's steps
# (tests/suites.sh under tests/all.sh) are placed on the outer runner's timeline.
LANES_T0=${LANES_T0:-$EPOCHSECONDS}
export LANES_T0
mkdir -p "$LANES_LOG_DIR"

step() { # NAME CMD...
    local name=$1 t0=$EPOCHSECONDS rc
    shift
    echo "[$(date -u +%H:%M:%S)] start $name" >&2
    "$@" >"$LANES_LOG_DIR/$name.log" 2>&1
    rc=$?
    {
        echo "===== $name: exit $rc after $((EPOCHSECONDS - t0)) s ($*) ====="
        cat "$LANES_LOG_DIR/$name.log"
        echo "===== end of $name ====="
    }
    # The timeline row: start offset from the runner's start, wall time, exit code.
    printf '%s %d %d %d\n' "$name" "$((t0 - LANES_T0))" "$((EPOCHSECONDS - t0))" "$rc" >>"$LANES_LOG_DIR/timeline"
    [[ $rc -eq 0 ]] || echo "$name" >>"$LANES_LOG_DIR/failed"
    return $rc
}

lanes_failed() {
    [[ -f $LANES_LOG_DIR/failed ]] && tr '\n' ' ' <"$LANES_LOG_DIR/failed"
    return 0
}

lanes_timeline() {
    [[ -f $LANES_LOG_DIR/timeline ]] || return 0
    echo "timeline (seconds from the start; wall; exit):"
    sort -k2 -n "$LANES_LOG_DIR/timeline" | awk '{ printf "  %-12s start %5d  wall %5d  exit %d\n", $1, $2, $3, $4 }'
}
