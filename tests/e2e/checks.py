"""Moved to tests/lib/koordtest/checks.py. This module re-exports it for a suite that still puts
tests/e2e on sys.path (tests/node-v2/suite.py); import koordtest.checks instead."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from koordtest.checks import *  # noqa: E402,F401,F403
