"""Self-test of the import graph checker on fake crates: python3 tests/lib/test_module_graph.py."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import module_graph  # noqa: E402

CARGO = '[package]\nname = "fake-crate"\nversion = "0.1.0"\n'


def plant(tree: Path, crate: str, files: dict[str, str]) -> None:
    """A crate directory `tree/crate` with these files under src/."""
    (tree / crate).mkdir(parents=True, exist_ok=True)
    (tree / crate / "Cargo.toml").write_text(CARGO)
    for name, text in files.items():
        path = tree / crate / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def run(tree: Path, *crates: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(HERE / "module_graph.py"), str(tree), *crates],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )


CLEAN = {
    "lib.rs": """
        pub mod high;
        pub mod low;
        pub mod util;
    """,
    "high/mod.rs": """
        mod inner;
        pub use inner::Inner;
        use crate::low::Low;
        pub fn f(_: Low) -> Inner { inner::make() }
    """,
    "high/inner.rs": """
        use super::super::util::helper;
        pub struct Inner;
        pub fn make() -> Inner { helper(); Inner }
    """,
    "low.rs": """
        pub struct Low;
        pub fn g() { crate::util::helper(); }
        #[cfg(test)]
        mod tests {
            use crate::high::f;
        }
        #[cfg(test)]
        fn only_in_tests() { crate::high::f(crate::low::Low); }
    """,
    "util.rs": """
        // crate::high::f in a comment is no import, nor is "crate::high::f" in a string.
        pub fn helper() { let _ = "crate::high::f"; let _c = '"'; }
        #[cfg(test)]
        #[path = "util_tests.rs"]
        mod tests;
    """,
    "util_tests.rs": """
        use crate::high::f;
    """,
}


class CycleTest(unittest.TestCase):
    def test_a_clean_crate_passes(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            plant(tree, "fake", CLEAN)
            got = run(tree, "fake")
            self.assertEqual(got.returncode, 0, got.stdout + got.stderr)
            self.assertIn("no import cycle", got.stdout)

    def test_a_planted_cycle_fails_with_its_path(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            files = dict(CLEAN)
            files["util.rs"] = """
                use crate::high::Inner;
                pub fn helper() {}
            """
            plant(tree, "fake", files)
            got = run(tree, "fake")
            self.assertEqual(got.returncode, 1, got.stdout + got.stderr)
            self.assertIn("fake: import cycle: high::inner -> util -> high::inner", got.stderr)
            self.assertIn("high::inner -> util  fake/src/high/inner.rs:1", got.stderr)
            # Through the re-export `high::Inner` to the module that defines it.
            self.assertIn("util -> high::inner  fake/src/util.rs:1", got.stderr)

    def test_a_path_in_code_counts_like_a_use(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            files = dict(CLEAN)
            files["util.rs"] = """
                pub fn helper() {}

                fn later() -> usize {
                    std::mem::size_of::<crate::high::Inner>()
                }
            """
            plant(tree, "fake", files)
            got = run(tree, "fake")
            self.assertEqual(got.returncode, 1, got.stdout + got.stderr)
            self.assertIn("util -> high::inner  fake/src/util.rs:4", got.stderr)

    def test_a_mod_rs_and_its_child_in_a_cycle(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            plant(
                tree,
                "fake",
                {
                    "lib.rs": "pub mod room;\n",
                    "room/mod.rs": """
                        mod checks;
                        pub struct Args;
                        pub fn run(a: &Args) { checks::run(a) }
                    """,
                    "room/checks.rs": """
                        use super::Args;
                        pub fn run(_: &Args) {}
                    """,
                },
            )
            got = run(tree, "fake")
            self.assertEqual(got.returncode, 1, got.stdout + got.stderr)
            self.assertIn("import cycle: room -> room::checks -> room", got.stderr)


class RuleTest(unittest.TestCase):
    """check_crate with layers and an allowlist, as the webhook and the applier use them."""

    def crate(self, tree: Path, files: dict[str, str]) -> module_graph.Crate:
        plant(tree, "fake", files)
        self.tree = tree
        return module_graph.load_crate(tree / "fake", "fake")

    def check(self, crate: module_graph.Crate, layers, allowed) -> list[str]:
        """check_crate's failures, files shown from the fake tree."""
        failures = module_graph.check_crate(crate, layers, allowed)
        return [f.replace(f"{self.tree}/", "") for f in failures]

    def test_an_upward_import_fails(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            crate = self.crate(Path(tmp), CLEAN)
            layers = [{"high"}, {"low", "util"}]
            self.assertEqual(self.check(crate, layers, {}), [])
            files = dict(CLEAN)
            files["low.rs"] = "pub struct Low;\npub fn g() -> crate::high::Inner { todo!() }\n"
            crate = self.crate(Path(tmp), files)
            failures = self.check(crate, layers, {})
            # Also a cycle between the rooms high and low, printed on its own.
            upward = [f for f in failures if "upward import" in f]
            self.assertEqual(len(upward), 1, failures)
            self.assertIn("upward import (layer 2 imports layer 1): low -> high::inner", upward[0])
            self.assertIn("    low -> high::inner  fake/src/low.rs:2", upward[0])

    def test_a_module_in_no_layer_fails(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            crate = self.crate(Path(tmp), CLEAN)
            failures = self.check(crate, [{"high"}, {"low"}], {})
            self.assertEqual(len(failures), 1, failures)
            self.assertIn("module util is in no layer", failures[0])

    def test_a_cycle_between_rooms_fails_with_layers(self) -> None:
        # No cycle at two levels (a::x -> b -> a::y), one between the rooms a and b.
        files = {
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a/mod.rs": "pub mod x;\npub mod y;\n",
            "a/x.rs": "use crate::b::B;\n",
            "a/y.rs": "pub struct Y;\n",
            "b.rs": "pub struct B(crate::a::y::Y);\n",
        }
        with tempfile.TemporaryDirectory() as tmp:
            crate = self.crate(Path(tmp), files)
            self.assertEqual(self.check(crate, None, {}), [])
            failures = self.check(crate, [{"a", "b"}], {})
            self.assertEqual(len(failures), 1, failures)
            self.assertIn("import cycle between rooms: a -> b -> a", failures[0])
            self.assertIn("a::x -> b  fake/src/a/x.rs:1", failures[0])
            self.assertIn("b -> a::y  fake/src/b.rs:1", failures[0])

    def test_the_allowlist_passes_its_edge_and_fails_when_stale(self) -> None:
        files = dict(CLEAN)
        files["util.rs"] = "use crate::high::Inner;\npub fn helper() {}\n"
        with tempfile.TemporaryDirectory() as tmp:
            crate = self.crate(Path(tmp), files)
            allowed = {("fake", "util", "high::inner"): "to be removed"}
            self.assertEqual(self.check(crate, None, allowed), [])
            crate = self.crate(Path(tmp), CLEAN)
            failures = self.check(crate, None, allowed)
            self.assertEqual(len(failures), 1, failures)
            self.assertIn("allowed import util -> high::inner no longer exists", failures[0])


# A crate with two node features (b in two modules), the shared module, a writer and a command
# layer that calls the features: clean as it is.
FEATURES = {
    "lib.rs": """
        pub mod cmd;
        pub mod node;
        pub mod writer;
    """,
    "cmd.rs": """
        use crate::node::a::A;
        use crate::node::b::B;
        pub fn run(_: A, _: B) {}
    """,
    "writer.rs": "pub fn write() {}\n",
    "node/mod.rs": """
        pub mod a;
        pub mod b;
        pub mod b_io;
        pub mod shared;
    """,
    "node/a/mod.rs": "pub mod worker;\npub struct A;\n",
    "node/a/worker.rs": "use crate::node::shared::helper;\npub fn f() { helper() }\n",
    "node/b/mod.rs": "use crate::node::b_io::Io;\npub struct B(pub Io);\n",
    "node/b_io.rs": "pub struct Io;\n",
    "node/shared/mod.rs": "pub fn helper() { crate::writer::write() }\n",
}

FAKE_RULE = module_graph.FeatureRule(
    crate="fake",
    lib="fake_crate",
    parent="node",
    features={"a": "a", "b": "b", "b_io": "b"},
    shared={"shared"},
    writers={("fake", "writer"), ("fake", "node::writer"), ("other", "writer")},
)

ACROSS = "rule: a module inside one node feature imports no module inside another"


class FeatureRuleTest(unittest.TestCase):
    """check_crate with the node features' rule, on FEATURES with one file changed."""

    def failures(self, changed: dict[str, str], allowed: dict | None = None) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            plant(tree, "fake", {**FEATURES, **changed})
            crate = module_graph.load_crate(tree / "fake", "fake")
            failures = module_graph.check_crate(crate, None, allowed or {}, FAKE_RULE)
            return [f.replace(f"{tree}/", "") for f in failures]

    def test_the_rule_table(self) -> None:
        # (what, files changed, what each failure says; [] = passes)
        cases: list[tuple[str, dict[str, str], list[list[str]]]] = [
            ("clean: features call shared, a feature its own parts, cmd every feature", {}, []),
            (
                "a feature imports another",
                {"node/a/worker.rs": "use crate::node::b::B;\n"},
                [
                    [
                        "fake: node feature a imports node feature b:",
                        "fake/src/node/a/worker.rs:1 (node::a -> node::b)",
                        ACROSS,
                    ]
                ],
            ),
            (
                "through super::super, into the feature's second module",
                {"node/a/worker.rs": "use super::super::b_io::Io;\n"},
                [["node feature a imports node feature b:", "node/a/worker.rs:1", ACROSS]],
            ),
            (
                "a path in code",
                {"node/a/mod.rs": "pub mod worker;\npub struct A(crate::node::b::B);\n"},
                [["node feature a imports node feature b:", "node/a/mod.rs:2", ACROSS]],
            ),
            (
                "the shared module imports a feature",
                {"node/shared/mod.rs": "pub fn helper() {}\npub fn g(_: crate::node::b::B) {}\n"},
                [
                    [
                        "shared module node::shared imports node feature b:",
                        "node/shared/mod.rs:2",
                        "rule: node::shared imports no node feature",
                    ]
                ],
            ),
            (
                "the writer imports a feature",
                {"writer.rs": "use crate::node::b::B;\npub fn write() {}\n"},
                [
                    [
                        "the writer writer imports node feature b:",
                        "fake/src/writer.rs:1 (writer -> node::b)",
                        "rule: the writer imports no node feature",
                    ]
                ],
            ),
            (
                "a writer under node/ is placed; it imports shared, never a feature",
                {
                    "node/mod.rs": FEATURES["node/mod.rs"] + "pub mod writer;\n",
                    "node/writer.rs": "use crate::node::shared::helper;\nuse crate::node::a::A;\n",
                },
                [
                    [
                        "the writer node::writer imports node feature a:",
                        "fake/src/node/writer.rs:2 (node::writer -> node::a)",
                    ]
                ],
            ),
            (
                "a new folder under node/ in no list",
                {
                    "node/mod.rs": FEATURES["node/mod.rs"] + "pub mod c;\n",
                    "node/c/mod.rs": "pub struct C;\n",
                },
                [["node::c is neither a node feature nor shared", "NODE_FEATURES or NODE_SHARED"]],
            ),
        ]
        for what, changed, want in cases:
            with self.subTest(what):
                got = self.failures(changed)
                self.assertEqual(len(got), len(want), got)
                for failure, parts in zip(got, want):
                    for part in parts:
                        self.assertIn(part, failure)

    def test_an_allowed_import_between_features_passes(self) -> None:
        changed = {"node/a/worker.rs": "use crate::node::b::B;\n"}
        allowed = {("fake", "node::a", "node::b"): "until the larger redesign"}
        self.assertEqual(self.failures(changed, allowed), [])

    def test_a_writer_of_another_crate_names_a_feature_through_the_library(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            plant(
                tree,
                "other",
                {
                    "lib.rs": "pub mod writer;\n",
                    "writer.rs": "use fake_crate::node::a::worker::f;\npub fn write() { f() }\n",
                },
            )
            crate = module_graph.load_crate(tree / "other", "other")
            failures = module_graph.check_crate(crate, None, {}, FAKE_RULE)
            self.assertEqual(len(failures), 1, failures)
            self.assertIn("other: the writer writer imports node feature a:", failures[0])
            self.assertIn("(writer -> fake_crate::node::a)", failures[0])

    def test_a_planted_import_between_applier_features_fails_the_script(self) -> None:
        # The real feature list, on a small applier: BE swap reads the BE label through shared
        # (passes), then from colocation (fails, naming the file, the feature and the rule).
        files = {
            "lib.rs": "pub mod node;\n",
            "node/mod.rs": "pub mod be_swap;\npub mod colocation;\npub mod shared;\n",
            "node/shared/mod.rs": "pub fn label_is_be() -> bool { true }\n",
            "node/colocation/mod.rs": "pub mod pod_facts;\n",
            "node/colocation/pod_facts.rs": "pub fn label_is_be() -> bool { true }\n",
            "node/be_swap/mod.rs": "pub mod worker;\n",
            "node/be_swap/worker.rs": "use crate::node::shared::label_is_be;\n",
        }
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            plant(tree, "applier", files)
            got = run(tree, "applier")
            self.assertEqual(got.returncode, 0, got.stdout + got.stderr)
            plant(
                tree,
                "applier",
                {"node/be_swap/worker.rs": "use crate::node::colocation::pod_facts::*;\n"},
            )
            got = run(tree, "applier")
            self.assertEqual(got.returncode, 1, got.stdout + got.stderr)
            self.assertIn(
                "applier: node feature be_swap imports node feature colocation:"
                " applier/src/node/be_swap/worker.rs:1 (node::be_swap -> node::colocation)",
                got.stderr,
            )
            self.assertIn(ACROSS, got.stderr)


if __name__ == "__main__":
    unittest.main()
