"""What a suite publishes from the run that asserted it: a table between two markers of a
markdown file (`<!-- NAME: begin -->` ... `<!-- NAME: end -->`). Nothing between the markers is
edited by hand: the next run that asserts the same figures writes them again.
"""

from __future__ import annotations

from pathlib import Path

from .checks import Check


def replace_between_markers(path: Path, name: str, body: str) -> None:
    """Puts `body` between the file's `<!-- name: begin -->` and `<!-- name: end -->` lines,
    replacing what was there. Check if the markers are missing or out of order."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = path.read_text()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise Check(f"{path}: no {begin} ... {end} pair")
    path.write_text(f"{text[: i + len(begin)]}\n{body.rstrip()}\n{text[j:]}")
