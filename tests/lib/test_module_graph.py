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


if __name__ == "__main__":
    unittest.main()
