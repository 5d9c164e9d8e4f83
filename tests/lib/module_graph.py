"""No import cycle in any crate, the webhook's layers point one way, and no node feature of the
applier imports another (run by `make check`).

    python3 tests/lib/module_graph.py [-v] [TREE [CRATE ...]]

(-v lists every edge; TREE, default this repository, holds the crate directories; CRATE defaults
to api, runtime, translator, webhook, applier.) For each crate the script reads the source (no rustc; Python
3.11 stdlib only) and builds the graph of module-level imports:

- the module tree comes from the `mod` declarations, from `src/lib.rs` (the crate root, shown as
  `crate`) and `src/main.rs` (the binary, shown as `main`; its `koord_<crate>::` paths reach the
  library);
- an edge goes from the importing module to the imported one, for every `use` and every path in
  code that names a module of the crate: `crate::a::b`, `super::` / `self::` (resolved), a child
  module's name, or a name a `use` bound to a module. A path through a re-export (`pub use`) is
  followed to the module that defines the item: a facade is not an edge of its own;
- `#[cfg(test)]` items, `mod tests` and files named `*_tests.rs` are left out: tests may reach
  anywhere.

Granularity: a node is a module path cut to its first two levels (`reresolve::controller`,
`server::tls`, `policy`; `reresolve/controller/pass.rs` counts as `reresolve::controller`), so a
`mod.rs` and its children are nodes of their own (`doctor` -> `doctor::checks` -> `doctor` is a
cycle). Every crate is checked for cycles on that graph. The webhook, whose top-level modules are
the rooms its layer rule names, is also checked on the graph cut to one level (a cycle between
rooms, e.g. `certs::self_managed -> server::tls` while `server -> certs`) and against the layer
rule of docs/architecture.md (WEBHOOK_LAYERS below): an import from a lower layer to a higher one
fails. The translator's top-level folders (cgroup/, pod/) and the applier's (pod/, node/,
cmd/) group features, not layers: their check is the two-level one.

The applier's node features (NODE_FEATURES: every child of `node`, a folder under
applier/src/node/ or a file there, names the feature it belongs to) may not import each other:
an edge from a module inside one feature to a module inside another fails, and so does one
from the shared module (NODE_SHARED, what several features read) or from a writer (WRITERS,
what every feature writes through: the applier's `node::writer`) into a feature. A child of
`node` in neither list, and no writer, fails until it is classified. `cmd`, `pod` and the
other top-level modules are no feature: they may call any. The translator's writer could only
name a feature through `koord_applier::`, which the compiler refuses as well (another crate);
the script checks that path anyway.

Every failure prints the path, `a -> b -> a` (or the one edge, with the rule it breaks), with the
file and line of each edge (the first one; "+N more" counts the others), and the exit code is 1.
ALLOWED lists the imports known and tolerated for now, each with its reason; an entry that no
longer matches an import fails too, so the list only shrinks.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRATES = ["api", "runtime", "translator", "webhook", "applier"]

# docs/architecture.md, "Dependencies point one way": the webhook's layers, top first. A module
# may import from its own layer and the layers below it, never from a layer above. Every
# top-level module of the crate must be placed (a new one fails until it is).
WEBHOOK_LAYERS: list[set[str]] = [
    {"main"},
    {"cli"},
    {"server", "resolve_cmd", "certs", "doctor"},
    {"reresolve"},
    {"live"},
    {"metrics"},
    {"admission", "triggers"},
    {"pod_patch"},
    {"mutation"},
    {"resolve"},
    {"policy"},
    {"manifest", "duration", "tls_config"},
]
LAYERS: dict[str, list[set[str]]] = {"webhook": WEBHOOK_LAYERS}

# docs/architecture.md, "Node features do not import each other": each child of the applier's
# `node` module (a folder under applier/src/node/, or a file there) and the feature it belongs
# to. A module inside one feature may not import a module inside another. A new child fails
# until it is placed here or in NODE_SHARED.
NODE_FEATURES: dict[str, str] = {
    "ancestors": "ancestors",
    "be_swap": "be_swap",
    "collectors": "collectors",
    "colocation": "colocation",
    "nri": "nri",
    "numa": "numa",
    "proactive": "proactive",
    "qos_parents": "qos_parents",
    "reclaim": "reclaim",
    # resctrl/ is the IO of the `Resctrl` feature, which qos_parents.rs declares and whose
    # class groups the QoS-class parents' pass reconciles: one feature in two places.
    "resctrl": "qos_parents",
}
# Children of `node` that are no feature: what several features read; they import no feature.
NODE_SHARED = {"shared"}
# The writers every feature writes through, as (crate, two-level node): they import no feature.
# The applier's node writer (what the features want in cgroup files, and what was there
# before) writes through the translator's.
WRITERS = {("translator", "cgroup::writer"), ("applier", "node::writer")}


@dataclass(frozen=True)
class FeatureRule:
    """Which modules of which crate are node features, shared or writers."""

    crate: str  # the crate holding the features
    lib: str  # its library's name in the paths of another crate
    parent: str  # the module whose children are the features
    features: dict[str, str]  # child of parent -> the feature it belongs to
    shared: set[str]
    writers: set[tuple[str, str]]


FEATURE_RULE = FeatureRule("applier", "koord_applier", "node", NODE_FEATURES, NODE_SHARED, WRITERS)

# Imports tolerated for now, as (crate, importing node, imported node): reason. The edge is left
# out of the graph (both granularities, the layer rule and the node features' rule).
ALLOWED: dict[tuple[str, str, str], str] = {}

DEPTH = 2

TEST_ONLY_FILE = re.compile(r"_tests\.rs$")


@dataclass
class Tok:
    kind: str  # ident, str, punct, other
    text: str
    line: int


RAW_STR = re.compile(r'[bc]?r(#*)"')
STR = re.compile(r'[bc]?"((?:[^"\\]|\\.)*)"', re.S)
CHAR = re.compile(r"b?'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]{1,6}\}|[^\n]))'")
LIFETIME = re.compile(r"'[A-Za-z_][A-Za-z0-9_]*")
IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
NUMBER = re.compile(r"[0-9][0-9A-Za-z_]*")


def tokenize(src: str) -> list[Tok]:
    """Rust tokens, enough for paths: comments dropped, literals kept as one token each."""
    toks: list[Tok] = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += src.count("\n", i, j)
            i = j
            continue
        m = RAW_STR.match(src, i)
        if m:
            close = '"' + m.group(1)
            end = src.find(close, m.end())
            end = n if end < 0 else end
            toks.append(Tok("str", src[m.end() : end], line))
            line += src.count("\n", i, end)
            i = end + len(close)
            continue
        m = STR.match(src, i)
        if m:
            toks.append(Tok("str", m.group(1), line))
            line += src.count("\n", i, m.end())
            i = m.end()
            continue
        m = CHAR.match(src, i) or LIFETIME.match(src, i)
        if m:
            toks.append(Tok("other", m.group(0), line))
            i = m.end()
            continue
        m = IDENT.match(src, i)
        if m:
            toks.append(Tok("ident", m.group(0).removeprefix("r#"), line))
            i = m.end()
            continue
        m = NUMBER.match(src, i)
        if m:
            toks.append(Tok("other", m.group(0), line))
            i = m.end()
            continue
        if src.startswith("::", i):
            toks.append(Tok("punct", "::", line))
            i += 2
            continue
        toks.append(Tok("punct", c, line))
        i += 1
    return toks


@dataclass
class Module:
    path: tuple[str, ...]
    file: Path
    children: set[str] = field(default_factory=set)
    defs: set[str] = field(default_factory=set)  # items defined here
    uses: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> raw use path
    globs: list[tuple[str, ...]] = field(default_factory=list)  # raw paths of `use x::*`


@dataclass
class Ref:
    module: tuple[str, ...]
    segs: tuple[str, ...]
    file: Path
    line: int


ITEM_KEYWORDS = {"fn", "struct", "enum", "const", "static", "type", "trait", "union"}


def is_cfg_test(attr: list[Tok]) -> bool:
    words = [t.text for t in attr if t.kind == "ident"]
    return bool(words) and words[0] == "cfg" and "test" in words and not {"not", "any"} & set(words)


class Crate:
    def __init__(self, name: str, src: Path, lib_name: str) -> None:
        self.name = name
        self.src = src
        self.lib_name = lib_name
        self.modules: dict[tuple[str, ...], Module] = {}
        self.refs: list[Ref] = []

    # Parsing -----------------------------------------------------------------------------

    def load(self) -> None:
        if (self.src / "lib.rs").exists():
            self.parse_file(self.src / "lib.rs", (), mod_rs=True)
        if (self.src / "main.rs").exists():
            self.parse_file(self.src / "main.rs", ("main",), mod_rs=True)

    def parse_file(self, file: Path, path: tuple[str, ...], mod_rs: bool) -> None:
        if TEST_ONLY_FILE.search(file.name):
            return
        toks = tokenize(file.read_text(encoding="utf-8"))
        # A file's own `mod x;` children live in its directory (lib.rs, main.rs, mod.rs) or in
        # the directory named after it.
        base_dir = file.parent if mod_rs else file.parent / file.stem
        self.modules.setdefault(path, Module(path, file))
        stack: list[tuple[str, int]] = []  # inline modules: (name, brace depth at opening)
        depth = 0
        path_attr: str | None = None
        i, n = 0, len(toks)

        def tok(k: int) -> Tok:
            return toks[k] if k < n else Tok("eof", "", toks[-1].line if toks else 0)

        def current() -> tuple[str, ...]:
            return path + tuple(name for name, _ in stack)

        def skip_attr(k: int) -> tuple[int, list[Tok], bool]:
            inner = tok(k + 1).text == "!"
            k += 2 if inner else 1
            start, level = k, 0
            while k < n:
                if toks[k].text == "[":
                    level += 1
                elif toks[k].text == "]":
                    level -= 1
                    if level == 0:
                        return k + 1, toks[start + 1 : k], inner
                k += 1
            return n, toks[start + 1 :], inner

        def skip_item(k: int) -> int:
            while tok(k).text == "#":
                k = skip_attr(k)[0]
            level = 0
            while k < n:
                t = toks[k].text
                if t in "([":
                    level += 1
                elif t in ")]":
                    level -= 1
                elif t == ";" and level == 0:
                    return k + 1
                elif t == "{" and level == 0:
                    braces = 0
                    while k < n:
                        if toks[k].text == "{":
                            braces += 1
                        elif toks[k].text == "}":
                            braces -= 1
                            if braces == 0:
                                return k + 1
                        k += 1
                k += 1
            return n

        while i < n:
            t = toks[i]
            if t.text == "#" and t.kind == "punct":
                j, attr, inner = skip_attr(i)
                if is_cfg_test(attr):
                    if inner and not stack:
                        return  # #![cfg(test)]: the whole file is a test
                    i = skip_item(j) if not inner else j
                    continue
                words = [a.text for a in attr]
                if words[:2] == ["path", "="] and len(attr) > 2 and attr[2].kind == "str":
                    path_attr = attr[2].text
                i = j
                continue
            if t.kind == "ident" and t.text == "mod" and tok(i + 1).kind == "ident":
                name = tok(i + 1).text
                if name == "tests":
                    i = skip_item(i)
                    path_attr = None
                    continue
                here = current()
                self.modules[here].children.add(name)
                child = here + (name,)
                if tok(i + 2).text == ";":
                    sub_dir = base_dir.joinpath(*[s for s, _ in stack])
                    if path_attr is not None:
                        target, child_mod_rs = file.parent / path_attr, True
                    elif (sub_dir / f"{name}.rs").exists():
                        target, child_mod_rs = sub_dir / f"{name}.rs", False
                    else:
                        target, child_mod_rs = sub_dir / name / "mod.rs", True
                    path_attr = None
                    if TEST_ONLY_FILE.search(target.name):
                        self.modules[here].children.discard(name)
                    else:
                        self.parse_file(target, child, child_mod_rs)
                    i += 3
                    continue
                if tok(i + 2).text == "{":
                    self.modules.setdefault(child, Module(child, file))
                    stack.append((name, depth))
                    depth += 1
                    i += 3
                    path_attr = None
                    continue
            path_attr = None if t.text not in ("pub", "(", ")", "crate") else path_attr
            if t.kind == "ident" and t.text == "use":
                trees, j = self.parse_use(toks, i + 1, ())
                for segs, alias, line in trees:
                    mod = self.modules[current()]
                    if alias == "*":
                        mod.globs.append(segs)
                    elif alias != "_":
                        mod.uses[alias] = segs
                    self.refs.append(Ref(current(), segs, file, line))
                i = j
                continue
            if t.kind == "ident" and t.text in ITEM_KEYWORDS and tok(i + 1).kind == "ident":
                if depth == len(stack):  # at the module's own level, not in a block
                    self.modules[current()].defs.add(tok(i + 1).text)
            if t.kind == "ident" and t.text == "macro_rules" and tok(i + 1).text == "!":
                self.modules[current()].defs.add(tok(i + 2).text)
            if t.text == "{":
                depth += 1
            elif t.text == "}":
                depth -= 1
                if stack and stack[-1][1] == depth:
                    stack.pop()
            elif (
                t.kind == "ident"
                and tok(i + 1).text == "::"
                and tok(i + 2).kind == "ident"
                and (i == 0 or toks[i - 1].text not in ("::", "$"))
            ):
                segs = [t.text]
                j = i
                while tok(j + 1).text == "::" and tok(j + 2).kind == "ident":
                    segs.append(tok(j + 2).text)
                    j += 2
                self.refs.append(Ref(current(), tuple(segs), file, t.line))
                i = j + 1
                continue
            i += 1

    def parse_use(
        self, toks: list[Tok], k: int, prefix: tuple[str, ...]
    ) -> tuple[list[tuple[tuple[str, ...], str, int]], int]:
        """A use tree from toks[k]: [(path, bound name or '*', line)], index after it (and ';')."""
        out: list[tuple[tuple[str, ...], str, int]] = []
        segs = prefix
        if toks[k].text == "::":
            k += 1
        while k < len(toks):
            t = toks[k]
            if t.text == "{":
                k += 1
                while toks[k].text != "}":
                    sub, k = self.parse_use(toks, k, segs)
                    out += sub
                    if toks[k].text == ",":
                        k += 1
                k += 1
                break
            if t.text == "*":
                out.append((segs, "*", t.line))
                k += 1
                break
            if t.kind == "ident":
                segs = segs + (t.text,)
                k += 1
                if toks[k].text == "::":
                    k += 1
                    continue
                alias = segs[-1]
                if toks[k].text == "as":
                    alias = toks[k + 1].text
                    k += 2
                if segs[-1] == "self" and len(segs) > 1:
                    segs = segs[:-1]
                    alias = segs[-1] if alias == "self" else alias
                out.append((segs, alias, t.line))
                break
            k += 1
        if k < len(toks) and toks[k].text == ";":
            k += 1
        return out, k

    # Resolution ----------------------------------------------------------------------------

    def absolute(
        self, segs: tuple[str, ...], module: tuple[str, ...], seen: frozenset = frozenset()
    ) -> tuple[str, ...] | None:
        """The path from the crate root, or None when it leaves the crate (std, other crates,
        a type's associated item)."""
        if not segs:
            return None
        first = segs[0]
        root = ("main",) if module[:1] == ("main",) else ()
        if first == "crate":
            return root + segs[1:]
        if first == self.lib_name:
            return segs[1:]
        if first in ("self", "super"):
            base = module
            rest = segs
            if rest[0] == "self":
                rest = rest[1:]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            return base + rest
        mod = self.modules.get(module)
        if mod is None:
            return None
        if first in mod.children:
            return module + segs
        key = (module, first)
        if first in mod.uses and key not in seen:
            target = self.absolute(mod.uses[first], module, seen | {key})
            if target is not None and target in self.modules:
                return target + segs[1:]
        return None

    def locate(
        self, abs_path: tuple[str, ...], seen: frozenset = frozenset()
    ) -> tuple[str, ...]:
        """The module an absolute path names or defines its item in, following re-exports."""
        k = len(abs_path)
        while k and abs_path[:k] not in self.modules:
            k -= 1
        mod_path = abs_path[:k]
        if k == len(abs_path):
            return mod_path
        mod = self.modules[mod_path]
        name = abs_path[k]
        if name in mod.defs:
            return mod_path
        key = (mod_path, name)
        if key in seen:
            return mod_path
        if name in mod.uses:
            target = self.absolute(mod.uses[name], mod_path)
            if target is not None:
                return self.locate(target + abs_path[k + 1 :], seen | {key})
            return mod_path
        for glob in mod.globs:
            source = self.absolute(glob, mod_path)
            if source is None or source not in self.modules:
                continue
            there = self.modules[source]
            if name in there.defs or name in there.uses or name in there.children:
                return self.locate(source + abs_path[k:], seen | {key})
        return mod_path

    def edges(self) -> dict[tuple[str, str], list[tuple[Path, int]]]:
        """(from node, to node) -> where, at DEPTH levels."""
        out: dict[tuple[str, str], list[tuple[Path, int]]] = defaultdict(list)
        for ref in self.refs:
            target = self.absolute(ref.segs, ref.module)
            if target is None:
                continue
            target = self.locate(target)
            a, b = node(ref.module), node(target)
            if a != b:
                out[(a, b)].append((ref.file, ref.line))
        return out


def node(path: tuple[str, ...], depth: int = DEPTH) -> str:
    return "::".join(path[:depth]) if path else "crate"


def top(name: str) -> str:
    return name.split("::", 1)[0]


# Graph checks -------------------------------------------------------------------------------


def sccs(nodes: set[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def shortest_cycle(start: str, comp: set[str], succ: dict[str, set[str]]) -> list[str]:
    """start -> ... -> start inside comp, fewest edges."""
    prev: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        v = queue.popleft()
        for w in sorted(succ.get(v, ())):
            if w not in comp:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return [start, start]


def cycles(edges: dict[tuple[str, str], list]) -> list[tuple[list[str], list[str]]]:
    """One cycle per set of modules that reach each other (the shortest, `a -> b -> a`), and
    the other modules of that set."""
    succ: dict[str, set[str]] = defaultdict(set)
    nodes: set[str] = set()
    for a, b in edges:
        succ[a].add(b)
        nodes |= {a, b}
    found: list[tuple[list[str], list[str]]] = []
    for comp in sccs(nodes, succ):
        best = min(
            (shortest_cycle(start, set(comp), succ) for start in comp),
            key=lambda c: (len(c), c),
        )
        found.append((best, sorted(set(comp) - set(best))))
    return found


def cycle_text(title: str, cyc: list[str], edge_lines: list[str], others: list[str]) -> str:
    lines = [f"{title}: {' -> '.join(cyc)}", *edge_lines]
    if others:
        lines.append(f"    (these reach each other through it too: {', '.join(others)})")
    return "\n".join(lines)


def where(places: list[tuple[Path, int]]) -> str:
    file, line = places[0]
    more = f" (+{len(places) - 1} more)" if len(places) > 1 else ""
    return f"{shown(file)}:{line}{more}"


def shown(file: Path) -> str:
    """The file relative to the tree checked."""
    for base in (ROOT, Path.cwd()):
        if file.is_relative_to(base):
            return str(file.relative_to(base))
    return str(file)


def collapse(edges: dict[tuple[str, str], list]) -> dict[tuple[str, str], list]:
    """The same graph at one level: (room, room) -> [(from node, to node, where)]."""
    out: dict[tuple[str, str], list] = defaultdict(list)
    for (a, b), places in sorted(edges.items()):
        if top(a) != top(b):
            out[(top(a), top(b))].append((a, b, places))
    return out


def feature_of(name: str, rule: FeatureRule) -> str | None:
    """The node feature a two-level node belongs to, if any."""
    parts = name.split("::")
    if len(parts) < 2 or parts[0] != rule.parent:
        return None
    return rule.features.get(parts[1])


def check_features(crate: Crate, edges: dict, rule: FeatureRule) -> list[str]:
    """The node features' rule: no import from one feature, the shared module or a writer into
    a feature; every child of the features' parent classified."""
    failures: list[str] = []
    script = shown(Path(__file__).resolve())
    shared = {f"{rule.parent}::{s}" for s in rule.shared}
    writers = {w for c, w in rule.writers if c == crate.name}
    if crate.name == rule.crate:
        parent = crate.modules.get((rule.parent,))
        for child in sorted(parent.children if parent else ()):
            placed = child in rule.features or child in rule.shared
            if not placed and f"{rule.parent}::{child}" not in writers:
                failures.append(
                    f"{crate.name}: {rule.parent}::{child} is neither a node feature nor shared:"
                    f" classify it in NODE_FEATURES or NODE_SHARED ({script}) and in"
                    " docs/architecture.md"
                )
        for (a, b), places in sorted(edges.items()):
            fa, fb = feature_of(a, rule), feature_of(b, rule)
            if fb is None or fa == fb:
                continue
            if fa is not None:
                what = f"node feature {fa} imports node feature {fb}"
                why = (
                    "a module inside one node feature imports no module inside another"
                    f" (what several read goes to {', '.join(sorted(shared))})"
                )
            elif a in shared:
                what = f"shared module {a} imports node feature {fb}"
                why = f"{a} imports no node feature (every feature may import it)"
            elif a in writers:
                what = f"the writer {a} imports node feature {fb}"
                why = "the writer imports no node feature (every feature writes through it)"
            else:
                continue
            failures.append(f"{crate.name}: {what}: {where(places)} ({a} -> {b})\n    rule: {why}")
        return failures
    # A writer of another crate names a feature only through the features' library.
    found: dict[tuple[str, str], list[tuple[Path, int]]] = defaultdict(list)
    for ref in crate.refs:
        a = node(ref.module)
        if a in writers and ref.segs[0] == rule.lib:
            b = node(ref.segs[1:])
            if feature_of(b, rule) is not None:
                found[(a, b)].append((ref.file, ref.line))
    for (a, b), places in sorted(found.items()):
        failures.append(
            f"{crate.name}: the writer {a} imports node feature {feature_of(b, rule)}:"
            f" {where(places)} ({a} -> {rule.lib}::{b})\n    rule: the writer imports no node"
            " feature (every feature writes through it)"
        )
    return failures


def check_crate(
    crate: Crate,
    layers: list[set[str]] | None,
    allowed: dict,
    features: FeatureRule | None = None,
) -> list[str]:
    """The failures of one crate, each a printable block."""
    failures: list[str] = []
    edges = crate.edges()
    for (c, a, b), reason in sorted(allowed.items()):
        if c != crate.name:
            continue
        if (a, b) in edges:
            del edges[(a, b)]
        else:
            failures.append(
                f"{crate.name}: allowed import {a} -> {b} no longer exists: remove it from"
                f" ALLOWED in {shown(Path(__file__).resolve())} ({reason})"
            )

    printed = set()
    for cyc, others in cycles(edges):
        edge_lines = [f"    {a} -> {b}  {where(edges[(a, b)])}" for a, b in zip(cyc, cyc[1:])]
        failures.append(cycle_text(f"{crate.name}: import cycle", cyc, edge_lines, others))
        tops = [top(n) for n in cyc[:-1]]
        tops = [t for i, t in enumerate(tops) if t != tops[i - 1]] or tops[:1]
        printed.add(frozenset(zip(tops, tops[1:] + tops[:1])))
    rooms = collapse(edges) if layers is not None else {}
    for cyc, others in cycles(rooms):
        if frozenset(zip(cyc, cyc[1:])) in printed:
            continue  # the same cycle as one printed above, seen room by room
        edge_lines = []
        for a, b in zip(cyc, cyc[1:]):
            na, nb, places = rooms[(a, b)][0]
            edge_lines.append(f"    {na} -> {nb}  {where(places)}")
        title = f"{crate.name}: import cycle between rooms"
        failures.append(cycle_text(title, cyc, edge_lines, others))

    if layers is not None:
        rank = {name: i for i, layer in enumerate(layers) for name in layer}
        tops = {top(node(p)) for p in crate.modules if p}
        for name in sorted(tops - rank.keys()):
            failures.append(
                f"{crate.name}: module {name} is in no layer: place it in"
                f" {crate.name.upper()}_LAYERS ({shown(Path(__file__).resolve())}) and in"
                " docs/architecture.md"
            )
        chain = " -> ".join(
            "{" + ", ".join(sorted(layer)) + "}" if len(layer) > 1 else next(iter(layer))
            for layer in layers
        )
        for (a, b), places in sorted(edges.items()):
            ra, rb = rank.get(top(a)), rank.get(top(b))
            if ra is not None and rb is not None and ra > rb:
                failures.append(
                    f"{crate.name}: upward import (layer {ra + 1} imports layer {rb + 1}):"
                    f" {a} -> {b}\n    {a} -> {b}  {where(places)}\n    layers: {chain}"
                )
    if features is not None:
        failures += check_features(crate, edges, features)
    return failures


def lib_name(crate_dir: Path) -> str:
    text = (crate_dir / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', text, re.M | re.S)
    return (m.group(1) if m else crate_dir.name).replace("-", "_")


def load_crate(crate_dir: Path, name: str | None = None) -> Crate:
    crate = Crate(name or crate_dir.name, crate_dir / "src", lib_name(crate_dir))
    crate.load()
    return crate


def main(argv: list[str]) -> int:
    root = ROOT
    names = CRATES
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    if args:
        root = Path(args[0]).resolve()
        names = args[1:] or CRATES
    failures: list[str] = []
    for name in names:
        crate = load_crate(root / name, name)
        edges = crate.edges()
        if verbose:
            for (a, b), places in sorted(edges.items()):
                print(f"  {name}: {a} -> {b}  {where(places)}")
        nodes = {a for e in edges for a in e}
        print(f"{name}: {len(crate.modules)} modules, {len(nodes)} nodes, {len(edges)} imports")
        failures += check_crate(crate, LAYERS.get(name), ALLOWED, FEATURE_RULE)
    for f in failures:
        print(f, file=sys.stderr)
    if failures:
        print(f"module_graph: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("module_graph: no import cycle, no upward import, no node feature imports another")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
