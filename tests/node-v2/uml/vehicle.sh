#!/usr/bin/env bash
# The vehicle check: does the cgroup v2 node's kernel start a guest on this host, with what the
# node needs (PSI, cgroup2 memory, threads doing floating point)? Boots the kernel for a few
# seconds with probe-init.sh as init and prints ONE line:
#
#   vehicle: ok: User-Mode Linux 6.12.118 (...), host CPU ... (AMX yes, xstate 11008 bytes): ...
#   vehicle: FAIL: <the cause, e.g. the kernel's panic line> (host CPU ..., AMX ..., xstate ...)
#
# and exits 0 or 1. The full guest log stays in the file the line names.
#
# Usage: vehicle.sh check KERNEL [LOGDIR]
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TIMEOUT=${KOORD_UML_PROBE_TIMEOUT:-120}

host_cpu() {
    local model amx xstate bin
    model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
    grep -qw amx_tile /proc/cpuinfo && amx=yes || amx=no
    bin=$(mktemp /tmp/koord-xstate.XXXXXX)
    if gcc -O2 -o "$bin" "$HERE/xstate.c" 2>/dev/null; then xstate=$("$bin" 2>&1 | tail -n 1); else xstate="unknown (no gcc)"; fi
    rm -f "$bin"
    echo "host CPU ${model:-unknown}, AMX $amx, xstate ${xstate} bytes"
}

cmd_check() { # KERNEL [LOGDIR]
    local kernel=$1 logdir=${2:-} tmp log rc host
    host=$(host_cpu)
    [[ -x $kernel ]] || { echo "vehicle: FAIL: no kernel at $kernel ($host)"; return 1; }
    tmp=$(mktemp -d /tmp/koord-vehicle.XXXXXX)
    log=${logdir:-$tmp}/vehicle.log
    mkdir -p "$(dirname "$log")"
    # TMPDIR: the file that backs the guest's memory, on tmpfs. uml_dir: its pid file and
    # mconsole socket, in the temp dir.
    # (The subshell's own word on a killed kernel, "Aborted", goes to the log too.)
    (TMPDIR=/dev/shm timeout "$TIMEOUT" "$kernel" mem=256M root=/dev/root rootfstype=hostfs rootflags=/ ro \
        init="$HERE/probe-init.sh" uml_dir="$tmp" umid="kv2-probe-$$" con=null con0=fd:0,fd:1 \
        </dev/null >"$log" 2>&1; exit $?) 2>>"$log"
    rc=$?
    rm -rf "$tmp/kv2-probe-$$"
    local kver psi cg threads cause
    kver=$(sed -n 's/^probe: kernel //p' "$log" | head -n 1 | tr -d '\r')
    psi=$(sed -n 's/^probe: psi //p' "$log" | head -n 1 | tr -d '\r')
    cg=$(sed -n 's/^probe: cgroup2 //p' "$log" | head -n 1 | tr -d '\r')
    threads=$(sed -n 's/^probe: threads //p' "$log" | head -n 1 | tr -d '\r')
    if grep -q '^probe: done' "$log" && [[ $threads == ok ]] && [[ $psi == some* ]] && [[ " $cg " == *" memory "* ]]; then
        echo "vehicle: ok: User-Mode Linux $kver ($kernel), $host: boots, PSI on, cgroup2 $cg, threaded FP ok (log $log)"
        [[ -n $logdir ]] || rm -rf "$tmp"
        return 0
    fi
    # The cause: the kernel's own words where it said any, else what the probe lacked.
    cause=$(grep -m1 -E 'Kernel panic|panic|failed, errno|returned -[0-9]+|Segmentation fault|BUG:|Oops' "$log" | tr -d '\r')
    if [[ -z $cause ]]; then
        if [[ $rc -eq 124 ]]; then cause="no answer in ${TIMEOUT} s"
        elif [[ -z $kver ]]; then cause="the guest printed nothing of its init (exit $rc): $(tail -n 1 "$log" | tr -d '\r')"
        elif [[ $threads != ok ]]; then cause="threads doing floating point failed in the guest ($threads)"
        elif [[ $psi != some* ]]; then cause="the kernel has no PSI (/proc/pressure/memory: $psi)"
        else cause="cgroup2 has no memory controller ($cg)"
        fi
    fi
    echo "vehicle: FAIL: $cause ($host; kernel $kernel${kver:+ $kver}; log $log)"
    return 1
}

case ${1:-} in
check) [[ $# -ge 2 ]] || { echo "usage: vehicle.sh check KERNEL [LOGDIR]" >&2; exit 2; }; shift; cmd_check "$@" ;;
*) echo "usage: vehicle.sh check KERNEL [LOGDIR]" >&2; exit 2 ;;
esac
