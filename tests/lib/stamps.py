#!/usr/bin/env python3
"""`make check`'s freshness check of the published tables: every block between
`<!-- NAME: begin -->` markers in README.md and docs/ carries the stamp of the run that wrote it,
and none of the scenario files it reports has changed since (tests/lib/koordtest/published.py).
Exits 1 with one line per stale block and the command that publishes it again."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from koordtest import published  # noqa: E402


def main() -> int:
    problems = published.stale_blocks()
    for p in problems:
        print(f"stamps: {p}", file=sys.stderr)
    if problems:
        print(f"stamps: {len(problems)} published block(s) not written by the current scenario "
              "code", file=sys.stderr)
        return 1
    print("stamps: every published block stamped by its current scenario files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
