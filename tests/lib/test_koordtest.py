"""Unit tests of the shared harness (no cluster needed): python3 tests/lib/test_koordtest.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import koordtest  # noqa: E402
from koordtest import Check, Fatal, Harness, Suite, check  # noqa: E402
from koordtest.harness import (batch_requests, container_id, container_leaf,  # noqa: E402
                               kubelet_cgroup, kubepods_path)
from koordtest.metrics import (histogram_quantile, metric_sum, paired_ratio_median,  # noqa: E402
                               parse_metrics, percentile)
from koordtest import prometheus as promlib  # noqa: E402
from koordtest import coverage  # noqa: E402
from koordtest import monitoring  # noqa: E402
from koordtest import plot  # noqa: E402
from koordtest import published  # noqa: E402
from koordtest import watch as watchlib  # noqa: E402


class FakeHarness:
    def __init__(self) -> None:
        self.torn_down: tuple | None = None


def run_suite(suite: Suite, setup=lambda h: None, env: dict | None = None):
    h = FakeHarness()

    def teardown(h, passed, failed, interrupted):
        h.torn_down = (list(passed), list(failed), interrupted)
        passed.append("teardown")

    out, err = io.StringIO(), io.StringIO()
    old = dict(os.environ)
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = suite.main(h, setup, teardown)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return rc, out.getvalue().splitlines(), h


class Runner(unittest.TestCase):
    def make(self) -> Suite:
        suite = Suite("KOORD_TEST_ONLY")

        @suite.scenario("first passes")
        def _a(h):
            pass

        @suite.scenario("second fails a check")
        def _b(h):
            check(False, "nope")

        @suite.scenario("third raises KeyError")
        def _c(h):
            {}["x"]

        @suite.scenario("fourth passes after failures")
        def _d(h):
            pass
        return suite

    def test_pass_fail_lines_and_count(self):
        rc, lines, h = run_suite(self.make())
        self.assertEqual(rc, 1)
        self.assertRegex(lines[0], r"^PASS first passes \(\d+\.\ds\)$")
        self.assertEqual(lines[1], "FAIL second fails a check: nope")
        self.assertEqual(lines[2], "FAIL third raises KeyError: 'x'")
        self.assertRegex(lines[3], r"^PASS fourth passes after failures ")
        self.assertEqual(lines[-1], "3 passed, 2 failed, 0 skipped")  # teardown counts as passed
        self.assertEqual(h.torn_down, (["first passes", "fourth passes after failures"],
                                       ["second fails a check", "third raises KeyError"], False))

    def test_a_dead_node_fails_the_rest_at_once_with_its_cause(self):
        suite = self.make()
        h = FakeHarness()
        h.node_dead = lambda: "Kernel panic - not syncing: Kernel mode fault"
        passed, failed = [], []
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            suite.run_scenarios(h, passed, failed)
        lines = out.getvalue().splitlines()
        self.assertEqual(passed, ["first passes"])
        self.assertEqual(failed, ["second fails a check", "third raises KeyError",
                                  "fourth passes after failures"])
        self.assertEqual(lines[2], "FAIL third raises KeyError: not run, the node died: "
                                   "Kernel panic - not syncing: Kernel mode fault")

    def test_only_filter_skips(self):
        rc, lines, _ = run_suite(self.make(), env={"KOORD_TEST_ONLY": "first|fourth"})
        self.assertEqual(rc, 0)
        self.assertIn("SKIP second fails a check (KOORD_TEST_ONLY)", lines)
        self.assertEqual(lines[-1], "3 passed, 0 failed, 2 skipped")

    def test_a_base_scenario_runs_whatever_the_filter_selects(self):
        suite = Suite("KOORD_TEST_ONLY")
        ran = []

        @suite.scenario("install", base=True)
        def _a(h):
            ran.append("install")

        @suite.scenario("one")
        def _b(h):
            ran.append("one")

        @suite.scenario("two")
        def _c(h):
            ran.append("two")
        rc, lines, _ = run_suite(suite, env={"KOORD_TEST_ONLY": "^two$"})
        self.assertEqual((rc, ran), (0, ["install", "two"]))
        self.assertIn("SKIP one (KOORD_TEST_ONLY)", lines)
        self.assertEqual(lines[-1], "3 passed, 0 failed, 1 skipped")
        with self.assertRaises(ValueError):
            Suite("X", full_env="Y").scenario("n", full="1 min", base=True)

    def test_setup_failure_skips_scenarios_but_tears_down(self):
        def setup(h):
            raise Fatal("no root")
        rc, lines, h = run_suite(self.make(), setup)
        self.assertEqual(rc, 1)
        self.assertEqual(lines[0], "FAIL setup: no root")
        self.assertEqual(lines[-1], "1 passed, 1 failed, 0 skipped")
        self.assertEqual(h.torn_down, ([], ["setup"], False))

    def test_interrupt_is_reported_and_torn_down(self):
        suite = Suite("KOORD_TEST_ONLY")

        @suite.scenario("interrupted")
        def _a(h):
            raise KeyboardInterrupt("signal 15")
        rc, lines, h = run_suite(suite)
        self.assertEqual(rc, 130)
        self.assertEqual(lines[0], "FAIL interrupted (signal 15)")
        self.assertEqual(h.torn_down, ([], ["interrupted"], True))

    def test_full_only_scenarios_skip_unless_asked(self):
        def make() -> Suite:
            suite = Suite("KOORD_TEST_ONLY", full_env="KOORD_TEST_FULL")

            @suite.scenario("always")
            def _a(h):
                pass

            @suite.scenario("long one", full="2 more minutes")
            def _b(h):
                check(False, "ran")
            return suite
        rc, lines, _ = run_suite(make())
        self.assertEqual(rc, 0)
        self.assertIn("SKIP long one (KOORD_TEST_FULL=1 runs it: 2 more minutes)", lines)
        self.assertEqual(lines[-1], "2 passed, 0 failed, 1 skipped")
        rc, lines, _ = run_suite(make(), env={"KOORD_TEST_FULL": "1"})
        self.assertEqual(rc, 1)
        self.assertIn("FAIL long one: ran", lines)
        with self.assertRaises(ValueError):
            Suite("KOORD_TEST_ONLY").scenario("x", full="needs a full_env")

    def test_not_run_is_a_skip_and_under_ci_a_failure_unless_the_machine_cannot(self):
        def make() -> Suite:
            suite = Suite("KOORD_TEST_ONLY")

            @suite.scenario("needs a newer apiserver")
            def _a(h):
                raise koordtest.NotRun("this apiserver drops the field")

            @suite.scenario("needs a PMU")
            def _b(h):
                raise koordtest.NotRun("no PMU here", machine=True)
            return suite
        rc, lines, _ = run_suite(make(), env={"CI": ""})
        self.assertEqual(rc, 0)
        self.assertIn("SKIP needs a newer apiserver (this apiserver drops the field)", lines)
        self.assertEqual(lines[-1], "1 passed, 0 failed, 2 skipped")
        rc, lines, _ = run_suite(make(), env={"CI": "true"})
        self.assertEqual(rc, 1)
        self.assertIn("FAIL needs a newer apiserver: not run under CI=true, which provides what "
                      "it needs: this apiserver drops the field", lines)
        self.assertIn("SKIP needs a PMU (no PMU here)", lines)
        self.assertEqual(lines[-1], "1 passed, 1 failed, 1 skipped")

    def test_wall_time_as_figure(self):
        rc, lines, _ = run_suite(Suite("KOORD_TEST_ONLY", wall_time_figure=True))
        self.assertEqual(rc, 0)
        self.assertRegex(lines[-2], r"^figure suite wall time: \d+s$")


class Files(unittest.TestCase):
    def test_read_many_and_read(self):
        h = Harness("koordtest-unit.")
        try:
            f = h.dir / "memory.min"
            f.write_text("1024\n")
            missing = h.dir / "memory.low"
            self.assertEqual(h.read_many([f, str(missing)]), {str(f): "1024", str(missing): None})
            self.assertEqual(h.read(f), "1024")
            with self.assertRaises(Check):
                h.read(missing)
        finally:
            f.unlink()
            h.dir.rmdir()

    def test_a_fixture_is_built_once_by_whoever_needs_it_first(self):
        h = Harness("koordtest-need-")
        self.addCleanup(lambda: h.dir.rmdir())
        made = []

        def make(h):
            made.append(1)
            return {"pod": len(made)}
        self.assertEqual(h.need("ls", make), {"pod": 1})
        self.assertIs(h.need("ls", make), h.need("ls", make))
        self.assertEqual(made, [1])
        with self.assertRaises(Check):  # a failed build is not cached: the next need retries
            h.need("be", lambda h: check(False, "no node"))
        self.assertNotIn("be", h.carry)

    def test_kubeconfig_from_env_or_set(self):
        h = Harness("koordtest-unit.")
        h.dir.rmdir()
        h.env["KUBECONFIG"] = "/a"
        self.assertEqual(h.kubeconfig, "/a")
        h.kubeconfig = Path("/b")
        self.assertEqual(h.kubeconfig, Path("/b"))


class Kubelet(unittest.TestCase):
    POD = {"metadata": {"uid": "u1"}, "status": {"qosClass": "Burstable", "containerStatuses": [
        {"name": "app", "containerID": "containerd://" + "a" * 64}]}}

    def test_paths(self):
        self.assertEqual(kubepods_path(self.POD), "kubepods/burstable/podu1")
        g = {"metadata": {"uid": "u2"}, "status": {"qosClass": "Guaranteed"}}
        self.assertEqual(kubepods_path(g), "kubepods/podu2")
        self.assertEqual(container_id(self.POD, "app"), "a" * 64)
        with self.assertRaises(Check):
            container_id(self.POD, "sidecar")

    def test_driver_spellings(self):
        """The kubelet's names for both drivers and cgroupRoots (the applier's layout.rs table
        has the same rows)."""
        u = "5f2a6b1e-0c1d"
        for names, driver, root, want in [
            ([], "cgroupfs", "/", "kubepods"),
            (["burstable", f"pod{u}"], "cgroupfs", "/kubelet", f"kubelet/kubepods/burstable/pod{u}"),
            ([], "systemd", "/", "kubepods.slice"),
            (["burstable", f"pod{u}"], "systemd", "/",
             "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f2a6b1e_0c1d.slice"),
            ([f"pod{u}"], "systemd", "/kubelet",
             "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod5f2a6b1e_0c1d.slice"),
            (["besteffort"], "systemd", "/a/my-root",
             "a.slice/a-my_root.slice/a-my_root-kubepods.slice/a-my_root-kubepods-besteffort.slice"),
        ]:
            self.assertEqual(kubelet_cgroup(names, driver, root), want, (names, driver, root))
        g = {"metadata": {"uid": u}, "status": {"qosClass": "Guaranteed"}}
        self.assertEqual(kubepods_path(g, "systemd", "/kubelet"),
                         "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod5f2a6b1e_0c1d.slice")
        self.assertEqual(container_leaf("ab", "systemd"), "cri-containerd-ab.scope")
        self.assertEqual(container_leaf("ab"), "ab")
        with self.assertRaises(Check):
            kubelet_cgroup([], "systemdd")


class BatchRoom(unittest.TestCase):
    def test_requests_as_the_kubelet_sums_them(self):
        def c(**req):
            return {"resources": {"requests": {f"kubernetes.io/batch-{k}": v
                                               for k, v in req.items()}}}
        pod = {"spec": {"containers": [c(cpu="100", memory="64Mi"), c(cpu="10"), {}],
                        "initContainers": [c(cpu="250"), c(memory="16Mi")]}}
        self.assertEqual(batch_requests(pod), (250.0, 64 * 2**20))
        self.assertEqual(batch_requests({"spec": {"containers": [{}]}}), (0, 0))

    def test_waits_for_room_seen_twice(self):
        """The pod is created only after two reads with room; a node that never has it fails
        with the figures."""
        class Node(Harness):
            POD_TIMEOUT = 0.5

            def __init__(self, free):  # no temporary directory: nothing here needs one
                self.free, self.applied = list(free), []

            def kubectl(self, *args, input=None, **kw):
                spec = json.loads(input)
                spec["spec"]["containers"][0]["resources"] = {"requests": {
                    "kubernetes.io/batch-cpu": "10"}}
                return subprocess.CompletedProcess(args, 0, json.dumps(spec), "")

            def batch_free(self):
                return self.free.pop(0) if len(self.free) > 1 else self.free[0]

            def apply_obj(self, obj, ns=None):
                self.applied.append(obj["metadata"]["name"])
        spec = {"metadata": {"name": "be"}, "spec": {"containers": [{"name": "c"}]}}
        sleeps = []
        real_sleep = time.sleep
        time.sleep = sleeps.append
        try:
            n = Node([(5, 0), (10, 0), (12, 0)])
            n.apply_batch_pod(spec)
            self.assertEqual((n.applied, sleeps), (["be"], [1, 2]))
            n = Node([(5, 0)])
            n.POD_TIMEOUT = -1
            with self.assertRaises(Check) as e:
                n.apply_batch_pod(spec)
            self.assertIn("no room on the node for be's batch requests (10.0, 0.0)", str(e.exception))
            self.assertEqual(n.applied, [])
        finally:
            time.sleep = real_sleep


class Metrics(unittest.TestCase):
    def test_parse_and_sum(self):
        m = parse_metrics('# HELP x\nw_total{knob="cpu.shares",outcome="written"} 3\n'
                          'w_total{knob="memory.min",outcome="written"} 2 1700000000\n'
                          'w_total{knob="memory.min",outcome="unchanged"} 5\n')
        self.assertEqual(metric_sum(m, "w_total", outcome="written"), 5)
        self.assertEqual(metric_sum(m, "w_total"), 10)

    def test_percentile_nearest_rank(self):
        v = [float(i) for i in range(1, 101)]
        self.assertEqual((percentile(v, 50), percentile(v, 99), percentile(v, 100)),
                         (50.0, 99.0, 100.0))

    def test_counts_percentile_as_wrk_computes_it(self):
        from koordtest.metrics import counts_percentile
        # 100 requests: 1..100 us, one each; and the same merged with 100 more at 500 us.
        one = {v: 1 for v in range(1, 101)}
        merged = dict(one)
        merged[500] = 100
        # (case, counts, p, want)
        cases = [
            ("median of 1..100: rank round(50.5) = 51, C's round", one, 50, 51),
            ("p99 of 1..100: rank round(99.5) = 100", one, 99, 100),
            ("p98: rank round(98.5) = 99", one, 98, 99),
            ("p99.9: rank round(100.4) = 100", one, 99.9, 100),
            ("merged: p49 still in the first run", merged, 49, 99),
            ("merged: the median in the second run's value", merged, 50, 500),
            ("nothing counted", {}, 99, 0),
        ]
        for case, counts, p, want in cases:
            self.assertEqual(counts_percentile(counts, p), want, case)

    def test_histogram_quantile_between_scrapes(self):
        def scrape(counts, other=0):
            lines = [f'd_bucket{{name="w",le="{le}"}} {c}'
                     for le, c in zip(("0.005", "0.025", "0.1", "+Inf"), counts)]
            lines.append(f'd_bucket{{name="other",le="0.005"}} {other}')
            return parse_metrics("\n".join(lines))
        before = scrape((10, 10, 10, 10), other=7)
        # (case, after, q, want)
        cases = [
            ("all in the first bucket: halfway into it", (110, 110, 110, 110), 0.5, 0.0025),
            ("rank in the second bucket", (60, 110, 110, 110), 0.99, 0.005 + 0.02 * 0.98),
            ("rank in +Inf: its lower bound", (10, 10, 20, 110), 0.99, 0.1),
            ("nothing observed", (10, 10, 10, 10), 0.5, None),
        ]
        for case, after, q, want in cases:
            got = histogram_quantile(scrape(after, other=99), before, "d", q, name="w")
            if want is None:
                self.assertIsNone(got, case)
            else:
                self.assertAlmostEqual(got, want, places=9, msg=case)


class PairedRatio(unittest.TestCase):
    """The proactive reclaim scenario's latency bound: the median of B/A over interleaved pairs
    of rounds, held at a fixed 1.10."""

    def test_pairs_within_and_over_the_bound(self):
        # (what, A's rounds, B's rounds, the median of B/A, within 1.10)
        cases = [
            ("B as fast as A, each pair a little apart",
             [30.0, 31.0, 29.0, 32.0, 30.0, 31.0, 30.0], [31.0, 30.0, 30.0, 33.0, 29.0, 32.0, 30.5],
             1.0312, True),
            ("B 20% slower in most pairs",
             [30.0, 31.0, 29.0, 32.0, 30.0, 31.0, 30.0], [36.0, 37.0, 35.0, 38.0, 31.0, 37.5, 36.0],
             1.2, False),
            # The guest's load doubled both rounds of two pairs: A's own max/min is 2.0, which the
            # old rule allowed as B's bound; each pair's ratio sees no difference.
            ("a noisy guest: A spreads 2x, every pair within",
             [20.0, 40.0, 21.0, 22.0, 38.0, 20.5, 21.0], [21.0, 41.0, 21.5, 22.0, 40.0, 20.0, 22.0],
             1.025, True),
            # The same noise with B 40% slower: max/min 2.0 would have let it through.
            ("a noisy guest, B 40% slower",
             [20.0, 40.0, 21.0, 22.0, 38.0, 20.5, 21.0], [28.0, 56.0, 29.4, 30.8, 53.2, 28.7, 29.4],
             1.4, False),
            ("one burst in B alone does not move the median",
             [30.0, 30.0, 30.0, 30.0, 30.0], [30.0, 90.0, 31.0, 29.0, 30.0], 1.0, True),
            ("an even count: the middle two averaged", [10.0, 10.0, 10.0, 10.0],
             [10.0, 11.0, 12.0, 20.0], 1.15, False),
        ]
        for what, a, b, want, within in cases:
            got, ratios = paired_ratio_median(a, b)
            self.assertAlmostEqual(got, want, 3, what)
            self.assertEqual(len(ratios), len(a), what)
            self.assertEqual(got <= 1.10, within, what)
        a = [20.0, 40.0, 21.0, 22.0, 38.0, 20.5, 21.0]
        self.assertAlmostEqual(max(a) / min(a), 2.0)

    def test_uneven_or_empty_rounds_are_an_error(self):
        for a, b in [([], []), ([1.0], [1.0, 2.0]), ([0.0], [1.0])]:
            with self.assertRaises(ValueError):
                paired_ratio_median(a, b)


class PromQL(unittest.TestCase):
    """What the node suite's monitoring checks rest on: selectors, the rules' test copy, the
    dashboards' variables."""

    def test_selectors_skip_functions_aggregations_keywords_and_label_lists(self):
        expr = ('sum by (instance, knob) (increase(a_total{outcome="failed"}[15m])) > 0 '
                'and on (instance) max(b{x=~"y|z"}) by (le) * 7 * 86400 '
                '- time() or vector(0) unless c offset 5m')
        self.assertEqual(promlib.selectors(expr),
                         [("a_total", '{outcome="failed"}'), ("b", '{x=~"y|z"}'), ("c", "")])

    def test_matcher_labels(self):
        self.assertEqual(promlib.matcher_labels('{a="x",b=~"y|z",c!="",d!~"q"}'),
                         {"a": '="x"', "b": '=~"y|z"', "c": '!=""', "d": '!~"q"'})

    def test_quick_rules_zero_for_and_divided_windows(self):
        text = ("    expr: rate(x[10m]) > 0 and increase(y[1h]) > 0 and z[5m] unless w offset 10m\n"
                "    for: 15m\n")
        self.assertEqual(promlib.quick_rules(text),
                         "    expr: rate(x[30s]) > 0 and increase(y[180s]) > 0 and z[20s] unless w "
                         "offset 30s\n    for: 0s\n")

    def test_every_shipped_rule_and_panel_names_a_metric(self):
        rules = promlib.RULES.read_text()
        exprs = [m.group(1) for m in
                 __import__("re").finditer(r"expr: \|\n((?:\s{10}.*\n)+)", rules)]
        self.assertEqual(len(exprs), rules.count("- alert:"))
        for e in exprs:
            self.assertTrue(promlib.selectors(e), e)
        import json
        for f in sorted(promlib.MONITORING.glob("grafana-dashboard-*.json")):
            board = json.loads(f.read_text())
            for where, e in promlib.dashboard_queries(board, 900):
                self.assertNotIn("$", e, f"{f.name} {where}: a variable left")
                self.assertTrue(promlib.selectors(e), f"{f.name} {where}")

    def test_dashboard_variables_at_their_defaults(self):
        board = {"templating": {"list": [
            {"name": "datasource", "type": "datasource"},
            {"name": "node", "type": "query", "includeAll": True, "allValue": ".*",
             "current": {"value": ["$__all"]}, "query": {"query": "label_values(m, node)"}},
            {"name": "w", "type": "custom", "current": {"value": "avg10"}}]},
            "panels": [{"title": "t", "panels": [], "targets": [
                {"refId": "A", "expr": 'rate(m{node=~"$node",p="${w}"}[$__rate_interval])'}]}]}
        self.assertEqual(promlib.dashboard_queries(board, 900),
                         [("panel 't' A", 'rate(m{node=~".*",p="avg10"}[1m])'),
                          ("variable $node", "m")])


class FamiliesWithSeries(unittest.TestCase):
    """The cgroup v2 node's monitoring check: every protection, NRI and proactive reclaim metric
    the shipped alerts and dashboards name must have had series under one of its selectors."""

    FAMILIES = ("koord_applier_qos_memory_protection", "koord_applier_nri_",
                "koord_applier_proactive_reclaim")

    def shipped(self) -> set:
        rules = promlib.RULES.read_text()
        exprs = [m.group(1) for m in
                 __import__("re").finditer(r"expr: \|\n((?:\s{10}.*\n)+)", rules)]
        for f in sorted(promlib.MONITORING.glob("grafana-dashboard-*.json")):
            exprs += [e for _, e in promlib.dashboard_queries(json.loads(f.read_text()), 900)]
        return {sel for e in exprs for sel in promlib.selectors(e)}

    def test_every_family_with_series_passes_and_a_fault_only_value_does_not_fail(self):
        named = self.shipped()
        lost = ("koord_applier_nri_connections_total", '{result="lost"}')
        self.assertIn(lost, named, "the shipped NRI alert names lost connections")
        required = {m for m, _ in named if m.startswith(self.FAMILIES)}
        self.assertGreaterEqual(len(required), 8, sorted(required))
        # No connection was lost in the run: that selector has no series, the metric has.
        self.assertEqual(monitoring.families_without_series(named, named - {lost},
                                                            self.FAMILIES), [])

    def test_a_family_named_but_without_series_fails_naming_it(self):
        named = self.shipped()
        gone = "koord_applier_nri_requests_total"
        with_series = {(m, sel) for m, sel in named if m != gone}
        failures = monitoring.families_without_series(named, with_series, self.FAMILIES)
        self.assertEqual(len(failures), 1, failures)
        self.assertTrue(failures[0].startswith(f"{gone}: no series"), failures)
        self.assertIn(f'{gone}{{cluster=~".*",instance=~".*"}}', failures[0])
        # A metric outside the families (the v1 node's check covers it) is not this check's.
        self.assertIn("koord_applier_pod_qos_info", {m for m, _ in named})
        other = {(m, sel) for m, sel in named if m != "koord_applier_pod_qos_info"}
        self.assertEqual(monitoring.families_without_series(named, other, self.FAMILIES), [])

    def test_a_planted_metric_without_series_fails(self):
        named = self.shipped() | {("koord_applier_planted_missing", "")}
        failures = monitoring.families_without_series(
            named, self.shipped(), self.FAMILIES, ("koord_applier_planted_missing",))
        self.assertEqual(failures, ["koord_applier_planted_missing: no series (planted: a "
                                    "metric that must have series here)"])
        # Planted but present (the operator named a real metric): nothing to report.
        present = self.shipped() | {("koord_applier_planted_missing", "")}
        self.assertEqual(monitoring.families_without_series(
            named, present, self.FAMILIES, ("koord_applier_planted_missing",)), [])


class Published(unittest.TestCase):
    def test_a_table_goes_between_its_markers_and_nothing_else_moves(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "README.md"
            f.write_text("intro\n<!-- t: begin -->\nold\nrows\n<!-- t: end -->\nafter\n")
            published.replace_between_markers(f, "t", "| a |\n|---|\n| 1 |\n")
            self.assertEqual(f.read_text(), "intro\n<!-- t: begin -->\n| a |\n|---|\n| 1 |\n"
                                            "<!-- t: end -->\nafter\n")
            published.replace_between_markers(f, "t", "new")
            self.assertEqual(f.read_text(), "intro\n<!-- t: begin -->\nnew\n<!-- t: end -->\nafter\n")
            for text in ("no markers\n", "<!-- t: end -->\n<!-- t: begin -->\n"):
                f.write_text(text)
                with self.assertRaises(Check):
                    published.replace_between_markers(f, "t", "x")
                self.assertEqual(f.read_text(), text)


class Stamps(unittest.TestCase):
    """The freshness check `make check` runs (tests/lib/stamps.py) on a planted tree."""

    def tree(self, d: str) -> tuple[Path, dict]:
        root = Path(d)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        (root / "docs").mkdir()
        (root / "s.py").write_text("assert 1 < 2\n")
        (root / "docs" / "r.md").write_text("x\n<!-- t: begin -->\nold\n<!-- t: end -->\n")
        (root / "README.md").write_text("<!-- certificates: begin -->\ntext\n<!-- certificates: end -->\n")
        for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"]):
            subprocess.run(["git", "-C", str(root), *args], check=True)
        return root, {"t": (("s.py",), "run-t")}

    def test_a_block_written_by_its_scenario_is_fresh_until_the_scenario_changes(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            root, scenarios = self.tree(d)
            doc = root / "docs" / "r.md"
            published.replace_between_markers(doc, "t", "| a |\n|---|\n| 1 |", root, scenarios)
            head = subprocess.run(["git", "-C", d, "rev-parse", "--short=12", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()
            self.assertIn(f"<sub>Stamp: commit `{head}`, scenario `", doc.read_text())
            self.assertIn("(s.py).</sub>\n<!-- t: end -->", doc.read_text())
            self.assertEqual(published.stale_blocks(root, scenarios), [])
            # The planted edit of the scenario: the block is stale, the command to rerun named.
            (root / "s.py").write_text("assert 1 < 3\n")
            problems = published.stale_blocks(root, scenarios)
            self.assertEqual(len(problems), 1)
            self.assertIn("docs/r.md: block 't' was written at", problems[0])
            self.assertIn("rerun to publish: run-t", problems[0])
            # Written again by the changed scenario: fresh.
            published.replace_between_markers(doc, "t", "| a |\n|---|\n| 2 |", root, scenarios)
            self.assertEqual(published.stale_blocks(root, scenarios), [])
            # Run from a tree whose tracked files differ from its commit: said so.
            self.assertIn(f"commit `{head}-dirty`", doc.read_text())
            # A table written by the run (docs/) is not a change of its code.
            subprocess.run(["git", "-C", d, "checkout", "-q", "s.py"], check=True)
            published.replace_between_markers(doc, "t", "| a |\n|---|\n| 3 |", root, scenarios)
            self.assertIn(f"commit `{head}`,", doc.read_text())
            self.assertEqual(doc.read_text().count("Stamp:"), 1)

    def test_unstamped_unknown_and_misnamed_blocks_are_refused(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            root, scenarios = self.tree(d)
            doc = root / "docs" / "r.md"
            self.assertIn("block 't' has 0 stamps", published.stale_blocks(root, scenarios)[0])
            doc.write_text(doc.read_text() + "<!-- u: begin -->\n| 1 |\n<!-- u: end -->\n")
            published.replace_between_markers(doc, "t", "fig", root, scenarios)
            problems = published.stale_blocks(root, scenarios)
            self.assertEqual(len(problems), 1)
            self.assertIn("block 'u' is not in published.SCENARIOS", problems[0])
            doc.write_text(doc.read_text().replace("<!-- u: begin -->\n| 1 |\n<!-- u: end -->\n", ""))
            other = {"t": (("s.py", "other.py"), "run-t")}
            self.assertIn("is stamped for s.py, its scenario is s.py, other.py",
                          published.stale_blocks(root, other)[0])

    def test_the_repository_registry_names_existing_files(self):
        for name, (files, command) in published.SCENARIOS.items():
            for f in files:
                self.assertTrue((published.REPO / f).is_file(), f"{name}: {f}")
            self.assertIn("tests/", command)


class FakeApiserver:
    """A loopback HTTP server that lists two pods and then serves watch streams from a script:
    each watch request takes the next list of events, writes them as lines and closes."""

    def __init__(self, streams: list[list[dict]]) -> None:
        import http.server
        import threading
        self.streams, self.requests = list(streams), []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                if "watch=1" not in self.path:
                    body = {"metadata": {"resourceVersion": "10"}, "items": [
                        pod("a", "10", False), pod("b", "9", None)]}
                    lines = [json.dumps(body).encode()]
                elif outer.streams:
                    lines = [json.dumps(e).encode() + b"\n" for e in outer.streams.pop(0)]
                else:
                    lines = []  # an empty stream: the watch comes back, as from timeoutSeconds
                    time.sleep(0.05)
                self.send_response(200)
                self.end_headers()
                for line in lines:
                    self.wfile.write(line)
                    self.wfile.flush()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = watchlib.Endpoint("127.0.0.1", self.server.server_address[1], None)

    def close(self):
        self.server.shutdown()


def pod(name: str, rv: str, enabled) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
            "status": {"enabled": enabled}}


class Watch(unittest.TestCase):
    def test_lists_then_records_first_sight_and_resumes_from_the_last_version(self):
        api = FakeApiserver([
            [{"type": "MODIFIED", "object": pod("a", "11", True)},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}],
            [{"type": "ADDED", "object": pod("c", "13", True)},
             {"type": "MODIFIED", "object": pod("a", "14", True)},
             {"type": "DELETED", "object": pod("b", "15", None)}],
        ])
        w = watchlib.ApiWatch(api.endpoint, "/api/v1/namespaces/ns/pods",
                              lambda o: o["status"]["enabled"])
        try:
            t_c = w.wait("c", lambda v: v is True, 5)
            self.assertIsNotNone(t_c)
            deadline = time.monotonic() + 5
            while w.rv != "15" and time.monotonic() < deadline:  # the second stream read out
                time.sleep(0.01)
            self.assertTrue(w.all_are(["a", "c"], True))
            self.assertFalse(w.all_are(["a", "b"], True))
            self.assertEqual(w.latest["b"], None, "a DELETED event is not a new value")
            self.assertEqual(w.rvs["a"], "14")
            self.assertEqual(set(w.seen(True)), {"a", "c"})
            # a's first sight of True is the first MODIFIED, not the later one.
            self.assertLess(w.first("a", lambda v: v is True), t_c)
            self.assertEqual(len(w.latencies(["a", "c"], True, 0.0)), 2)
            self.assertEqual(w.events, 3)
            self.assertIsNone(w.wait("b", lambda v: v is True, 0.2))
        finally:
            w.stop()
            api.close()
        watches = [r for r in api.requests if "watch=1" in r]
        self.assertIn("resourceVersion=10", watches[0], "the first watch starts at the list")
        self.assertIn("resourceVersion=12", watches[1], "a bookmark moves the resume point")
        self.assertIn("resourceVersion=15", watches[2])
        self.assertFalse(w._thread.is_alive())

    def test_a_too_old_version_is_an_error_not_a_silent_gap(self):
        api = FakeApiserver([[{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]])
        w = watchlib.ApiWatch(api.endpoint, "/api/v1/pods", lambda o: 1, resource_version="3")
        try:
            w._thread.join(5)
            self.assertFalse(w._thread.is_alive())
            self.assertIn("too old", w.error or "")
            self.assertEqual(api.requests, ["/api/v1/pods?watch=1&allowWatchBookmarks=true"
                                            "&resourceVersion=3&timeoutSeconds=600"],
                             "with a resourceVersion given nothing is listed")
        finally:
            w.stop()
            api.close()


class Plot(unittest.TestCase):
    def test_round_tick_steps(self):
        for span, want in ((160, 50), (100, 20), (7, 2), (0.9, 0.2), (1000, 200), (0, 1.0)):
            self.assertAlmostEqual(plot.nice_step(span), want, msg=f"span {span}")

    def test_one_polyline_per_series_inside_the_plot_area(self):
        import xml.etree.ElementTree as ET
        svg = plot.line_chart({"A <none>": [(0, 160), (30, 20), (61, 5)], "C": [(0, 160), (61, 158)]},
                              "LS working set", "seconds", "MiB")
        root = ET.fromstring(svg)
        ns = "{http://www.w3.org/2000/svg}"
        lines = root.findall(f"{ns}polyline")
        self.assertEqual([l.find(f"{ns}title").text for l in lines], ["A <none>", "C"])
        pts = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
        self.assertEqual(len(pts), 3)
        # x 0..61 on an axis to 70 (step 10... rounded up), y 0..160 on an axis to 200.
        left, top, w, h = 64, 40, 720 - 64 - 16, 380 - 40 - 84
        for x, y in pts:
            self.assertTrue(left <= x <= left + w and top <= y <= top + h, (x, y))
        self.assertAlmostEqual(pts[0][0], left)
        self.assertLess(pts[0][1], pts[1][1], "a larger value is drawn higher")
        self.assertIn(">seconds<", svg)

    def test_negative_x_axis_starts_at_a_tick_below_x_min(self):
        import xml.etree.ElementTree as ET
        svg = plot.line_chart({"cpus": [(-1.0, 2), (0.4, 1), (8.0, 1)]}, "step", "s", "CPUs",
                              x_min=-1.0)
        ns = "{http://www.w3.org/2000/svg}"
        line = ET.fromstring(svg).find(f"{ns}polyline")
        xs = [float(p.split(",")[0]) for p in line.get("points").split()]
        left, w = 64, 720 - 64 - 16
        # Step 2 over a span of 9: the axis runs -2..8, so -1 is a tenth of the way in.
        self.assertAlmostEqual(xs[0], left + w * 0.1, places=1)
        self.assertAlmostEqual(xs[-1], left + w, places=1)
        self.assertIn(">-2<", svg)

    def test_stacked_charts_one_below_the_other(self):
        import xml.etree.ElementTree as ET
        a = plot.line_chart({"p99": [(0, 1), (2, 3)]}, "a", "s", "ms", height=300)
        b = plot.line_chart({"cpus": [(0, 2), (2, 1)]}, "b", "s", "CPUs", height=200)
        root = ET.fromstring(plot.stack([a, b]))
        ns = "{http://www.w3.org/2000/svg}"
        inner = root.findall(f"{ns}svg")
        self.assertEqual([(i.get("y"), i.get("height")) for i in inner], [("0", "300"), ("300", "200")])
        self.assertEqual(root.get("height"), "500")


class SamplerTest(unittest.TestCase):
    def test_values_with_their_times_and_gaps_counted(self):
        from koordtest.sampler import Sampler  # noqa: PLC0415
        calls = iter(range(1000))

        def read() -> int:
            n = next(calls)
            if n == 2:
                raise OSError("a file gone for one read")
            return n

        s = Sampler(read, 0.01, t0=time.monotonic() - 5)
        time.sleep(0.2)
        points = s.stop()
        self.assertGreaterEqual(len(points), 5)
        self.assertEqual(s.missed, 1)
        self.assertNotIn(2, [v for _, v in points])
        times = [t for t, _ in points]
        self.assertEqual(times, sorted(times))
        self.assertGreaterEqual(times[0], 5)
        self.assertEqual(s.peak(), max(v for _, v in points))
        n = len(points)
        time.sleep(0.05)
        self.assertEqual(len(s.points), n, "stopped: no more reads")


def ticks(t_end: float, gap_at: float | None = None, gap: float = 0.0, delay: float = 0.0,
          accounted: float | None = None, late: float = 0.0, below: tuple = ()) -> list:
    """A 10 Hz series from 0 to t_end whose evidence shows a guest running all along, but for
    one gap of `gap` seconds after the sample at `gap_at`, across which the sampler's run delay
    grows by `delay`, the guest accounts `accounted` seconds (all of them when None) and the
    sampler wakes `late` seconds late. Samples at times in `below` read 0, the others 100."""
    out, t, d, cpu = [], 0.0, 1.0, 500.0
    while t <= t_end + 1e-9:
        value = 0 if any(abs(t - b) < 1e-6 for b in below) else 100
        out.append(coverage.Tick(round(t, 3), [value], 0.0, d, cpu))
        if gap_at is not None and abs(t - gap_at) < 1e-6:
            t, d = t + gap, d + delay
            cpu += gap if accounted is None else accounted
            out.append(coverage.Tick(round(t, 3), [0 if any(abs(t - b) < 1e-6 for b in below)
                                                   else 100], late, d, cpu))
        t, cpu = t + 0.1, cpu + 0.1
    return out


class Coverage(unittest.TestCase):
    """A sampler's series held by its gaps: none over 0.3 s but stalls the evidence shows,
    counted as unobserved and failing above 5% of the window."""

    def test_parse_with_and_without_evidence(self):
        text = ('[0.000,5,"max",{"late":0.001,"delay":0.25,"cpu":812.5}]\n\n'
                '[0.100,null,7]\n'
                '[0.200,5,6,{"late":0.0,"delay":null,"cpu":null}]\n')
        got = coverage.parse(text, 2)
        self.assertEqual(got[0], coverage.Tick(0.0, [5, "max"], 0.001, 0.25, 812.5))
        self.assertEqual(got[1], coverage.Tick(0.1, [None, 7]))
        self.assertEqual(got[2], coverage.Tick(0.2, [5, 6], 0.0, None, None))
        with self.assertRaises(ValueError):
            coverage.parse("[0.0,5,6,7]", 2)
        with self.assertRaises(ValueError):
            coverage.parse("[0.0,5]", 2)

    def test_gaps_sorted_by_their_evidence(self):
        # (what, the series, unobserved spans, unexplained gaps, fails)
        cases = [
            ("10 Hz all along", ticks(20), 0, 0, False),
            ("0.3 s apart is not a gap", ticks(20, gap_at=5, gap=0.3), 0, 0, False),
            ("0.35 s apart without evidence is", ticks(20, gap_at=5, gap=0.35), 0, 1, True),
            ("0.5 s, the guest ran and the sampler was not kept waiting",
             ticks(20, gap_at=5, gap=0.5), 0, 1, True),
            ("0.5 s, the sampler waited 0.45 s on the run queue",
             ticks(20, gap_at=5, gap=0.5, delay=0.45), 1, 0, False),
            ("0.5 s, the guest accounted 0.05 s of it (ticks lost: the host descheduled it)",
             ticks(20, gap_at=5, gap=0.5, accounted=0.05), 1, 0, False),
            ("0.5 s, the sampler's timer fired 0.4 s late (an idle guest stalled)",
             ticks(20, gap_at=5, gap=0.5, late=0.4), 1, 0, False),
            ("1.0 s, 0.5 s of run delay leaves 0.5 s unexplained",
             ticks(20, gap_at=5, gap=1.0, delay=0.5), 0, 1, True),
            ("a stall of 0.8 s in a 10-s window: 8% unobserved",
             ticks(10, gap_at=5, gap=0.8, accounted=0.0), 1, 0, True),
            ("the same stall in a 20-s window: 4%",
             ticks(20, gap_at=5, gap=0.8, accounted=0.0), 1, 0, False),
            ("no evidence recorded: a 0.5 s gap cannot be a stall",
             [coverage.Tick(t / 10, [100]) for t in range(51)]
             + [coverage.Tick(5.5 + t / 10, [100]) for t in range(50)], 0, 1, True),
            ("one sample", ticks(0), 0, 0, True),
        ]
        for what, series, unobserved, unexplained, fails in cases:
            cov = coverage.coverage(series)
            self.assertEqual((len(cov.unobserved), len(cov.unexplained), bool(cov.failures())),
                             (unobserved, unexplained, fails), f"{what}: {cov.failures()}")

    def test_what_the_figure_and_the_failure_say(self):
        cov = coverage.coverage(ticks(20, gap_at=5, gap=0.5))
        self.assertEqual(cov.failures(), [
            "1 gap over 0.3 s between samples without the sampler shown unable to run: at 5.0 s "
            "for 0.50 s (run delay 0.00 s, the guest accounted 0.50 s, woke 0.00 s late)"])
        cov = coverage.coverage(ticks(10, gap_at=5, gap=0.8, accounted=0.0))
        self.assertAlmostEqual(cov.total, 0.8)
        self.assertAlmostEqual(cov.longest, 0.8)
        self.assertAlmostEqual(cov.share, 0.8 / cov.window)
        self.assertIn("1 guest stall counted as unobserved: 0.8 s in all, longest 0.8 s, 8.0% "
                      "of the window", cov.text())
        self.assertIn("above 5%", cov.failures()[0])
        self.assertEqual(coverage.coverage(ticks(3)).text(),
                         "31 samples over 3 s, no gap over 0.3 s and none unobserved")

    def test_a_run_below_beside_an_unobserved_gap_is_reported_with_what_it_may_have_lasted(self):
        # A stall from 5.0 s to 5.8 s, the first sample after it below, the next one back.
        series = ticks(20, gap_at=5, gap=0.8, delay=0.8, below=(5.8,))
        cov = coverage.coverage(series)
        self.assertEqual(len(cov.unobserved), 1)
        runs = coverage.below_runs(series, [t.values[0] > 0 for t in series], cov.unobserved)
        self.assertEqual(len(runs), 1)
        self.assertAlmostEqual(runs[0].seconds, 0.1)
        self.assertAlmostEqual(runs[0].up_to, 0.9)
        self.assertIn("up to 0.9 s: 0.8 s unobserved before it", str(runs[0]))
        # The same run where nothing was unobserved: what was seen is all it may have lasted.
        series = ticks(20, below=(5.8, 5.9))
        runs = coverage.below_runs(series, [t.values[0] > 0 for t in series])
        self.assertEqual([(r.start, round(r.seconds, 3), round(r.up_to, 3)) for r in runs],
                         [(5.8, 0.2, 0.2)])
        self.assertEqual(str(runs[0]), "at 6 s for 0.2 s")
        # Still below at the last sample: the run lasts to it.
        series = ticks(2, below=(1.9, 2.0))
        runs = coverage.below_runs(series, [t.values[0] > 0 for t in series])
        self.assertEqual([(r.start, round(r.seconds, 3)) for r in runs], [(1.9, 0.1)])


class ColocationStep(unittest.TestCase):
    """The load step's size: BE's budget lands STEP_MARGIN_MILLI past a whole-CPU boundary."""

    def test_connections_from_the_measured_cost(self):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "node"))
        import colocation as c  # noqa: PLC0415 - the suite module, only for its pure helpers
        # (CPUs, 1's LS + system milli at 12 connections) -> connections
        for ncpus, used, want in [(2, 580, 13), (2, 380, 19), (2, 100, 48), (4, 300, 12),
                                  (1, 200, 48), (2, 900, 12)]:
            n, expect = c.step_connections(ncpus, used)
            self.assertEqual(n, want, (ncpus, used))
            if c.CONNECTIONS < n < c.STEP_MAX_CONNECTIONS:
                # BE's predicted budget is a whole CPU short of the node, with the margin
                budget = ncpus * c.SUPPRESS_PERCENT * 10 - expect
                self.assertLessEqual(budget + c.STEP_MARGIN_MILLI, (ncpus - 1) * 1000)


if __name__ == "__main__":
    unittest.main()
