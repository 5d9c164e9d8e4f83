"""What a suite publishes from the run that asserted it: a table between two markers of a
markdown file (`<!-- NAME: begin -->` ... `<!-- NAME: end -->`). Nothing between the markers is
edited by hand: the next run that asserts the same figures writes them again.
"""

from __future__ import annotations

import os
from pathlib import Path

from .checks import Check


def wanted(switch: str) -> bool:
    """Whether a run publishes: not under CI=true (a checkout thrown away), and not when the
    suite's switch (an environment variable) is 0."""
    default = "0" if os.environ.get("CI") == "true" else "1"
    return os.environ.get(switch, default) == "1"


def replace_between_markers(path: Path, name: str, body: str) -> None:
    """Puts `body` between the file's `<!-- name: begin -->` and `<!-- name: end -->` lines,
    replacing what was there. Check if the markers are missing or out of order."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = path.read_text()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise Check(f"{path}: no {begin} ... {end} pair")
    path.write_text(f"{text[: i + len(begin)]}\n{body.rstrip()}\n{text[j:]}")
