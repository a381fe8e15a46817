"""The repository's layout: the harness never imports the simulated agent, the simulated
executable runs from anywhere without shadowing harness modules, and every test module can be
run on its own as `python -m unittest tests.test_X`.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "simulated" / "agent.py"


def imported_modules(source: str) -> set[str]:
    """Every module an `import` or `from ... import` statement anywhere in `source` names."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def imports_simulated(source: str) -> bool:
    return any(name.split(".")[0] == "simulated" for name in imported_modules(source))


def harness_modules() -> list[Path]:
    """The harness: the top-level modules, and the fixture generator."""
    return sorted([*REPO.glob("*.py"), *(REPO / "fixtures").glob("*.py")])


class HarnessImportsTest(unittest.TestCase):
    def test_the_check_sees_every_form_of_import(self):
        for source in (
            "import simulated",
            "import simulated.product",
            "import simulated.product as p",
            "from simulated import product",
            "from simulated.product import message_updates",
            "def f():\n    from simulated.run import Run\n",
        ):
            with self.subTest(source=source):
                self.assertTrue(imports_simulated(source))
        for source in ("import simulation", "import tasks", "from . import simulated"):
            with self.subTest(source=source):
                self.assertFalse(imports_simulated(source))

    def test_the_harness_lists_the_known_modules(self):
        names = {path.name for path in harness_modules()}
        self.assertLessEqual({"runner.py", "scorer.py", "scripted_model.py", "tasks.py"}, names)
        self.assertIn("generate.py", names)

    def test_no_harness_module_imports_the_simulated_agent(self):
        for path in harness_modules():
            with self.subTest(module=path.relative_to(REPO).as_posix()):
                self.assertFalse(imports_simulated(path.read_text(encoding="utf-8")))

    def test_the_task_language_imports_only_the_standard_library(self):
        # Every module the fixture generator, the scripted model and the simulated agent share.
        stdlib = set(sys.stdlib_module_names) | {"__future__"}
        modules = imported_modules((REPO / "tasks.py").read_text(encoding="utf-8"))
        self.assertLessEqual({name.split(".")[0] for name in modules}, stdlib)


class SimulatedExecutableTest(unittest.TestCase):
    def test_runs_from_another_directory_both_ways(self):
        with tempfile.TemporaryDirectory() as cwd:
            for argv in ([str(AGENT)], [sys.executable, str(AGENT)]):
                with self.subTest(argv=argv):
                    done = subprocess.run(
                        [*argv, "--version"], cwd=cwd, capture_output=True, text=True, timeout=30
                    )
                    self.assertEqual(done.returncode, 0, done.stderr)
                    self.assertEqual(done.stdout, "prime-agent 0.8.0 (simulated)\n")

    def test_its_own_directory_does_not_shadow_the_harness(self):
        # Run as a script, simulated/ would come first on sys.path, and its daemon.py would be
        # found as `daemon` in place of the harness's.
        probe = (
            "import runpy, sys\n"
            f"sys.argv = [{str(AGENT)!r}, '--version']\n"
            f"sys.path.insert(0, {str(AGENT.parent)!r})\n"
            "try:\n"
            "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "import daemon\n"
            "print(daemon.__file__)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], cwd=tempfile.gettempdir(), capture_output=True,
            text=True, timeout=30,
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.splitlines()[-1], str(REPO / "daemon.py"))


class TestModulesRunAloneTest(unittest.TestCase):
    def test_every_test_module_imports_as_part_of_the_tests_package(self):
        names = sorted(path.stem for path in (REPO / "tests").glob("test_*.py"))
        code = "import importlib\n" + "".join(
            f"importlib.import_module('tests.{name}')\n" for name in names
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        self.assertEqual(done.returncode, 0, done.stderr)


if __name__ == "__main__":
    unittest.main()


class SuiteRunnerTest(unittest.TestCase):
    """`python -m tests` (tests/__main__.py), the command CI runs."""

    def run_tests(self, *names: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tests", *names],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def test_named_modules_run_and_are_totalled(self):
        done = self.run_tests("test_stats", "test_jsonl")
        self.assertEqual(done.returncode, 0, done.stdout[-2000:])
        self.assertIn("==== tests.test_jsonl", done.stdout)
        # Each module's own count, then the total of them last.
        *each, ran = (int(n) for n in re.findall(r"^Ran (\d+) tests", done.stdout, re.M))
        self.assertEqual(len(each), 2)
        self.assertEqual(ran, sum(each))
        self.assertTrue(done.stdout.rstrip().endswith(f"{ran} passed, 0 failed"))

    def test_an_unknown_module_is_refused(self):
        done = self.run_tests("test_no_such_module")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("test_no_such_module", done.stderr)


class ModuleSizeTest(unittest.TestCase):
    """A reader should hold the harness in their head: a module past ~550 lines says at its
    top why it is one module."""

    def test_every_long_module_says_why_it_is_one(self):
        unexplained = []
        for path in [*REPO.glob("*.py"), *REPO.glob("simulated/*.py"), *REPO.glob("fixtures/*.py")]:
            text = path.read_text(encoding="utf-8")
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if text.count("\n") > 550 and "Why one " not in docstring:
                unexplained.append(path.name)
        self.assertEqual(unexplained, [])
