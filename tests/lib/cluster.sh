# shellcheck shell=bash
# Process and wait helpers of every test cluster's scripts (tests/e2e/control-plane.sh,
# tests/node/node.sh, tests/node-v2/node.sh), sourced, not run. Nothing in here knows about a
# particular cluster. The caller sets PROG (its name in messages) before sourcing and keeps
# `set -Eeuo pipefail`.
#
#   die MSG / log MSG / warn MSG
#   pid_alive PID NAME           a live, non-zombie process whose comm is NAME (15 chars)
#   read_pid FILE                the PID in FILE, or nothing
#   launch DIR NAME BIN ARGS...  start BIN detached, log to DIR/logs/NAME.log, PID in DIR/NAME.pid
#   stop_proc DIR NAME [SECONDS] SIGTERM, wait (20 s), SIGKILL; by the PID file, name checked
#   must_run DIR NAME            NAME (launched into DIR) is alive; else its log tail, return 1
#   wait_for WHAT SECONDS CMD... until CMD succeeds (every 0.5 s); logs how long it took
#   port_busy PORT [ADDRESS]     something listens there
#   node_ready KUBECTL KUBECONFIG  the Node $NODE_NAME reports Ready

die() { echo "${PROG:-lib.sh}: error: $*" >&2; exit 1; }
log() { echo "${PROG:-lib.sh}: $*" >&2; }
warn() { echo "${PROG:-lib.sh}: warning: $*" >&2; }

# Checking the name guards against a stale pid file whose PID was reused by something else.
pid_alive() { # PID NAME
    local pid=$1 name=$2 state
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state != Z ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "${name:0:15}" ]]
}

read_pid() { if [[ -f $1 ]]; then cat "$1"; fi; }

launch() { # DIR NAME BIN ARGS...   (stdin/out/err detached so callers' pipes close)
    local dir=$1 name=$2 bin=$3
    shift 3
    mkdir -p "$dir/logs"
    "$bin" "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
    local pid=$! i
    echo "$pid" >"$dir/$name.pid"
    # Until the fork has exec'd, /proc/PID/comm is still the shell's and pid_alive would call
    # the process dead (seen on a loaded machine).
    for ((i = 0; i < 100; i++)); do
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$(basename "$bin" | cut -c1-15)" ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
}

stop_proc() { # DIR NAME [SECONDS]
    local pidfile=$1/$2.pid pid i limit=$((${3:-20} * 10))
    pid=$(read_pid "$pidfile")
    [[ -n $pid ]] || return 0
    if pid_alive "$pid" "$2"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < limit; i++)); do pid_alive "$pid" "$2" || break; sleep 0.1; done
        if pid_alive "$pid" "$2"; then
            log "$2 (pid $pid) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do pid_alive "$pid" "$2" || break; sleep 0.1; done
        fi
        if pid_alive "$pid" "$2"; then die "$2 (pid $pid) is still running"; fi
        log "stopped $2 (pid $pid)"
    fi
    rm -f "$pidfile"
}

wait_for() { # WHAT SECONDS CMD...
    local what=$1 limit=$2 t0=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - t0 < limit)) || return 1
        sleep 0.5
    done
    log "$what after $((SECONDS - t0))s"
}

port_busy() { # PORT [ADDRESS]
    (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null
}

must_run() { # DIR NAME  (for start: show why a component died)
    pid_alive "$(read_pid "$1/$2.pid")" "$2" && return 0
    echo "----- last 30 lines of $1/logs/$2.log -----" >&2
    tail -n 30 "$1/logs/$2.log" >&2 || true
    return 1
}

node_ready() { # KUBECTL KUBECONFIG   (the caller sets NODE_NAME)
    [[ $("$1" --kubeconfig="$2" get node "$NODE_NAME" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
