#!/usr/bin/env bash
# The alerting rules and dashboards, offline (make unit):
#   - manifests/monitoring/generate.py --check: the PrometheusRule, the chart's copies and the
#     dashboards are what the generator writes from the rule file and its code;
#   - promtool check rules: the rule file parses, every expression is valid PromQL;
#   - promtool test rules tests/monitoring/rules.test.yaml: every alert fires on series made to
#     fire it and stays silent on the others (with its annotations expanded);
#   - the node suite's PromQL helpers (tests/lib/test_koordtest.py PromQL): every shipped rule
#     and panel names a metric, the dashboards' variables all substituted.
# promtool is Debian's `prometheus` package; missing, it is installed (root) or, outside CI,
# the promtool steps are reported as not run. Under CI=true a missing promtool fails.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
python3 manifests/monitoring/generate.py --check
(cd tests/lib && python3 -B -m unittest -q test_koordtest.PromQL)
if ! command -v promtool >/dev/null; then
    if ! tests/monitoring/install-prometheus.sh; then
        if [[ ${CI:-} == true ]]; then
            echo "FATAL: promtool missing (Debian package prometheus) and CI=true" >&2
            exit 1
        fi
        echo "NOT RUN: promtool check/test rules (no promtool: apt-get install prometheus)" >&2
        exit 0
    fi
fi
promtool check rules manifests/monitoring/koord-qos.rules.yaml charts/koord-qos/files/koord-qos.rules.yaml
promtool test rules tests/monitoring/rules.test.yaml
