"""What a suite publishes from the run that asserted it: a table between two markers of a
markdown file (`<!-- NAME: begin -->` ... `<!-- NAME: end -->`). Nothing between the markers is
edited by hand: the next run that asserts the same figures writes them again.

Every block ends with a stamp: the commit the run was made from and a hash of the scenario files
whose assertions the block reports (SCENARIOS). `stale_blocks` (run by `make check` through
tests/lib/stamps.py) refuses a block without its stamp and a block whose scenario files changed
since the stamp: a figure in the docs is one the current code asserted.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

from .checks import Check

REPO = Path(__file__).resolve().parents[3]

# Each published block, the files whose assertions it reports (relative to the repository) and
# the command that writes it again. A changed file makes the block stale until that command runs.
SYSTEMD_NODE = "KOORD_V2_KUBELET_CGROUP_ROOT=/ KOORD_NODE_V2_PART=systemd"
SCENARIOS: dict[str, tuple[tuple[str, ...], str]] = {
    "protection": (("tests/node-v2/protection.py", "tests/node-v2/systemd.py", "tests/lib/sample.c"),
                   f"{SYSTEMD_NODE} KOORD_V2_SLOT=1 "
                   "KOORD_NODE_V2_ONLY='^(node:|install:|protection)' tests/node-v2/run"),
    "colocation": (("tests/node/colocation.py",),
                   "KOORD_NODE_FULL=1 KOORD_NODE_ONLY='^colocation' tests/node/run"),
    "proactive-reclaim": (("tests/node-v2/proactive.py",),
                          f"{SYSTEMD_NODE} KOORD_V2_SLOT=2 "
                          "KOORD_NODE_V2_ONLY='^(node:|install:|proactive)' tests/node-v2/run"),
    "proactive-reclaim-defaults": (("tests/node-v2/proactive.py",),
                                   f"{SYSTEMD_NODE} KOORD_V2_SLOT=2 KOORD_V2_PROACTIVE_FORM=defaults "
                                   "KOORD_NODE_V2_ONLY='^(node:|install:|proactive reclaim \\()' "
                                   "tests/node-v2/run"),
    # C0 with and without swap is the protection proof's run_config (protection.py).
    "proactive-reclaim-swap": (("tests/node-v2/proactive_swap.py", "tests/node-v2/protection.py"),
                               f"{SYSTEMD_NODE} KOORD_V2_SLOT=2 "
                               "KOORD_NODE_V2_ONLY='^(node:|install:|proactive)' tests/node-v2/run"),
    "async-reclaim": (("tests/node-v2/reclaim.py",),
                      "KOORD_NODE_V2_ONLY='^(node:|images:|install:|async reclaim)' tests/node-v2/run"),
}
# Marked blocks that hold no measured figure (so no stamp), and why.
NOT_MEASURED = {"certificates": "README's certificate step, kept equal to docs/install.md by hand"}
# The markdown files a block may sit in.
DOCS = ("README.md", "docs/*.md")

STAMP = re.compile(r"^<sub>Stamp: commit `(?P<commit>[0-9a-f]+(?:-dirty)?)`, scenario "
                   r"`(?P<hash>[0-9a-f]{12})` \((?P<files>[^)]*)\)\.</sub>$", re.M)


def wanted(switch: str) -> bool:
    """Whether a run publishes: not under CI=true (a checkout thrown away), and not when the
    suite's switch (an environment variable) is 0."""
    default = "0" if os.environ.get("CI") == "true" else "1"
    return os.environ.get(switch, default) == "1"


def scenario_hash(files: tuple[str, ...], root: Path = REPO) -> str:
    """A hash of the files' names and contents (a missing file hashes as missing)."""
    h = hashlib.sha256()
    for name in files:
        h.update(name.encode() + b"\0")
        p = root / name
        h.update(p.read_bytes() if p.is_file() else b"(missing)")
        h.update(b"\0")
    return h.hexdigest()[:12]


def run_commit(root: Path = REPO) -> str:
    """The commit the run was made from, `-dirty` when tracked files outside docs/ differ from it
    (what the runs write, the tables and plots, is under docs/: a run that publishes several
    blocks would otherwise call its own earlier tables a change of code)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    head = git("rev-parse", "--short=12", "HEAD").stdout.strip() or "0" * 12
    changed = git("diff", "--quiet", "HEAD", "--", ".", ":(exclude)docs").returncode
    return head + ("-dirty" if changed else "")


def stamp(name: str, root: Path = REPO, scenarios=None) -> str:
    files = (scenarios or SCENARIOS)[name][0]
    return (f"<sub>Stamp: commit `{run_commit(root)}`, scenario `{scenario_hash(files, root)}` "
            f"({', '.join(files)}).</sub>")


def replace_between_markers(path: Path, name: str, body: str, root: Path = REPO,
                            scenarios=None) -> None:
    """Puts `body` between the file's `<!-- name: begin -->` and `<!-- name: end -->` lines,
    replacing what was there, with the block's stamp last when `name` is a registered scenario.
    Check if the markers are missing or out of order."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = path.read_text()
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < 0 or j < i:
        raise Check(f"{path}: no {begin} ... {end} pair")
    if name in (scenarios or SCENARIOS):
        body = f"{body.rstrip()}\n\n{stamp(name, root, scenarios)}"
    path.write_text(f"{text[: i + len(begin)]}\n{body.rstrip()}\n{text[j:]}")


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every marked block of a markdown text."""
    return [(m.group(1), m.group(2)) for m in
            re.finditer(r"<!-- ([\w-]+): begin -->\n(.*?)<!-- \1: end -->", text, re.S)]


def stale_blocks(root: Path = REPO, scenarios=None) -> list[str]:
    """Why each marked block of the docs cannot be trusted as published: unknown to SCENARIOS,
    without its stamp, stamped for other files, or stamped before its scenario files changed."""
    scenarios = scenarios or SCENARIOS
    problems = []
    paths = sorted({p for pattern in DOCS for p in root.glob(pattern)})
    for path in paths:
        rel = path.relative_to(root)
        for name, body in blocks(path.read_text()):
            if name in NOT_MEASURED:
                continue
            if name not in scenarios:
                problems.append(f"{rel}: block {name!r} is not in published.SCENARIOS: name the "
                                f"scenario files that assert it, or list it in NOT_MEASURED")
                continue
            files, command = scenarios[name]
            found = STAMP.findall(body)
            if len(found) != 1:
                problems.append(f"{rel}: block {name!r} has {len(found)} stamps, wants one; "
                                f"rerun to publish: {command}")
                continue
            commit, hashed, named = found[0]
            now = scenario_hash(files, root)
            if named.split(", ") != list(files):
                problems.append(f"{rel}: block {name!r} is stamped for {named}, its scenario is "
                                f"{', '.join(files)}; rerun to publish: {command}")
            elif hashed != now:
                problems.append(f"{rel}: block {name!r} was written at {commit} by scenario files "
                                f"since changed ({hashed} -> {now}: {', '.join(files)}); rerun to "
                                f"publish: {command}")
    return problems
