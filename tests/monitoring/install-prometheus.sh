#!/usr/bin/env bash
# Debian's `prometheus` (prometheus and promtool) when either is missing, as tests/guest/lib.sh
# installs what the guest lacks: no recommends (node-exporter), and no service started by the
# package's install script (policy-rc.d 101 = "action forbidden", for this install only; there
# may be no init system, and a daemon on 0.0.0.0:9090 is not wanted). Root; apt.
set -euo pipefail
command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "install-prometheus.sh: prometheus/promtool missing; install Debian's prometheus package (needs root and apt)" >&2
    exit 1
fi
echo "installing Debian's prometheus package (prometheus, promtool)" >&2
apt-get update -qq
policy=/usr/sbin/policy-rc.d
made_policy=
[[ -e $policy ]] || { printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; made_policy=1; }
trap '[[ -z $made_policy ]] || rm -f "$policy"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2
command -v prometheus >/dev/null && command -v promtool >/dev/null
