"""The scenario registry and the run loop every suite shares, with its output contract:

  PASS <name> (<seconds>s)      a scenario passed
  FAIL <name>: <reason>         a scenario failed (a traceback on stderr if it was not a Check)
  SKIP <name> (<ONLY_ENV>)      not selected by the ONLY_ENV regex (a `base` scenario, which the
                                others stand on (the cluster, the install), runs all the same)
  SKIP <name> (<reason>)        left out of this run: the scenario raised NotRun; under CI=true
                                that is a FAIL unless the scenario said the machine cannot run it
                                (NotRun(reason, machine=True))
  N passed, M failed, K skipped the last line; the exit code is 1 on any failure, 130 if
                                interrupted (SIGINT, SIGTERM, SIGHUP)

Usage:

    suite = Suite("KOORD_NODE_ONLY")

    @suite.scenario("what it proves")
    def s_x(h): ...

    sys.exit(suite.main(h, setup, teardown))
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable

from .checks import Check, Fatal
from .harness import log
from .webhookcfg import RenderError

# What a failed setup step raises: reported as `FAIL setup`, then teardown.
SETUP_ERRORS = (Fatal, Check, RenderError, subprocess.SubprocessError, OSError)


class NotRun(Exception):
    """Raised by a scenario that this run cannot or does not run (the reason names how to run
    it); reported as SKIP, neither passed nor failed. machine=True: this machine cannot run it
    (hardware, kernel); otherwise, under CI=true, where everything a scenario needs is
    provided, it is a FAIL."""

    def __init__(self, reason: str, machine: bool = False) -> None:
        super().__init__(reason)
        self.machine = machine


class Suite:
    def __init__(self, only_env: str, wall_time_figure: bool = False,
                 full_env: str | None = None) -> None:
        """only_env: the variable holding the KOORD_*_ONLY regex. wall_time_figure: print the
        suite's wall time as a `figure` line on stdout (else as `suite time` on stderr).
        full_env: the variable (=1) that also runs the scenarios registered with `full=`."""
        self.only_env = only_env
        self.wall_time_figure = wall_time_figure
        self.full_env = full_env
        self.scenarios: list[tuple[str, Callable, str | None, bool]] = []

    def scenario(self, name: str, full: str | None = None, base: bool = False):
        """Registers the decorated function as a scenario; they run in definition order.
        full: what the scenario costs ("3 more minutes"); it then runs only with full_env=1,
        and is a SKIP naming that variable otherwise. base: what every other scenario stands
        on (the node, the images, the install); it runs whatever the ONLY filter selects.
        Anything else a scenario needs it builds through `Harness.need`, so each one can run
        alone."""
        if full is not None and not self.full_env:
            raise ValueError(f"{name}: full= needs Suite(full_env=...)")
        if full is not None and base:
            raise ValueError(f"{name}: a base scenario cannot be full=")

        def deco(fn):
            self.scenarios.append((name, fn, full, base))
            return fn
        return deco

    def run_scenarios(self, h, passed: list[str], failed: list[str],
                      skipped: list[str] | None = None) -> None:
        # ONLY_ENV=REGEX runs only the scenarios whose name matches (skipped ones are neither
        # passed nor failed, and counted).
        skipped = [] if skipped is None else skipped
        ci = os.environ.get("CI") == "true"
        only = os.environ.get(self.only_env)
        pattern = re.compile(only) if only else None
        run_full = bool(self.full_env) and os.environ.get(self.full_env) == "1"
        dead: str | None = None
        for name, fn, full, base in self.scenarios:
            if dead:
                # A node that died fails what is left at once, with the cause, instead of each
                # scenario timing out against it.
                failed.append(name)
                print(f"FAIL {name}: not run, the node died: {dead}", flush=True)
                continue
            if pattern and not pattern.search(name) and not base:
                print(f"SKIP {name} ({self.only_env})", flush=True)
                skipped.append(name)
                continue
            if full is not None and not run_full:
                print(f"SKIP {name} ({self.full_env}=1 runs it: {full})", flush=True)
                skipped.append(name)
                continue
            t0 = time.monotonic()
            log(f"--- {name}")
            try:
                fn(h)
            except NotRun as e:
                if ci and not e.machine:
                    failed.append(name)
                    print(f"FAIL {name}: not run under CI=true, which provides what it needs: {e}",
                          flush=True)
                else:
                    skipped.append(name)
                    print(f"SKIP {name} ({e})", flush=True)
                continue
            except Exception as e:  # noqa: BLE001 - a broken scenario must not stop the others
                failed.append(name)
                print(f"FAIL {name}: {e}", flush=True)
                if not isinstance(e, (Check, Fatal)):
                    traceback.print_exc(file=sys.stderr)
                diagnose = getattr(h, "after_failure", None)
                if diagnose:
                    try:
                        diagnose(name)
                    except Exception as d:  # noqa: BLE001 - a diagnosis is best effort
                        print(f"(the diagnosis after {name} failed too: {d})", file=sys.stderr)
                node_dead = getattr(h, "node_dead", None)
                dead = node_dead() if node_dead else None
                continue
            passed.append(name)
            print(f"PASS {name} ({time.monotonic() - t0:.1f}s)", flush=True)

    def main(self, h, setup: Callable, teardown: Callable) -> int:
        """setup(h), the scenarios, then always teardown(h, passed, failed, interrupted),
        which may add its own PASS/FAIL (a leak check) and print figures; then the count."""
        t_start = time.monotonic()
        passed: list[str] = []
        failed: list[str] = []
        skipped: list[str] = []

        def on_signal(signum, _frame):
            raise KeyboardInterrupt(f"signal {signum}")

        # Installed explicitly: a runner that started us with SIGINT ignored (a background
        # job) must still be able to interrupt the suite and get everything stopped.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, on_signal)
        interrupted = False
        try:
            try:
                setup(h)
            except SETUP_ERRORS as e:
                print(f"FAIL setup: {e}", flush=True)
                failed.append("setup")
            else:
                self.run_scenarios(h, passed, failed, skipped)
        except KeyboardInterrupt as e:
            interrupted = True
            print(f"FAIL interrupted ({e or 'Ctrl-C'})", flush=True)
            failed.append("interrupted")
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # finish teardown on a second Ctrl-C
            teardown(h, passed, failed, interrupted)
            wall = time.monotonic() - t_start
            if self.wall_time_figure:
                print(f"figure suite wall time: {wall:.0f}s", flush=True)
            else:
                print(f"suite time {wall:.0f}s", file=sys.stderr)
            print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped", flush=True)
        return 130 if interrupted else (1 if failed else 0)
