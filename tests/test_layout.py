"""The repository's layout: the tree reads as the architecture, and the real import graph keeps it.

Layers, lowest first (README "Layout"): the task language (swarm_fanout/tasks.py), which every
layer may read; evidence/ and ledger.py, readers that never raise; rules/, pure judgements, and
scorer.py, the rubric over them; reporting/; shell/; and the entry points at the top (runner.py,
scorer.py and report.py run as programs, the fixture generator). A module imports only its own
layer and those below it. The maintainer's tools (tools/: the benchmark, the verdict dump) stand
beside the tests: they may import any layer, the scripted model (the benchmark serves it) and
the tests' modules; only tests import them. The test doubles (scripted/, simulated/) import
only the task language and themselves, and no layer imports them: only runner.py and trial.py,
the composition root, start the scripted model in its own process and name the simulated
behaviours. The optional verifiers taskset (swarm_fanout/vf/) sits above the entry points and
below nothing: it may import any layer but the doubles and the tests; its tests are tests.
"""

from __future__ import annotations

import ast
import contextlib
import graphlib
import io
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from tests import __main__ as suite
from tests import runner_server

REPO = Path(__file__).resolve().parents[1]
AGENT = REPO / "swarm_fanout" / "simulated" / "agent.py"

ENTRY_POINTS = {"runner.py", "scorer.py", "report.py", "ledger.py"}
# Which layers each layer may import, besides the standard library.
MAY_IMPORT = {
    "task": {"task"},
    "evidence": {"task", "evidence"},
    "rules": {"task", "evidence", "rules"},
    "rubric": {"task", "evidence", "rules", "rubric"},
    "reporting": {"task", "evidence", "rules", "rubric", "reporting"},
    "shell": {"task", "evidence", "rules", "rubric", "reporting", "shell"},
    "entry": {"task", "evidence", "rules", "rubric", "reporting", "shell", "entry"},
    "scripted": {"task", "scripted"},
    "simulated": {"task", "simulated"},
    "tests": {"task", "evidence", "rules", "rubric", "reporting", "shell", "entry", "scripted",
              "simulated", "tests", "taskset", "tools"},
    "tools": {"task", "evidence", "rules", "rubric", "reporting", "shell", "entry", "scripted",
              "tests", "tools"},
    "taskset": {"task", "evidence", "rules", "rubric", "reporting", "shell", "entry", "taskset"},
}  # fmt: skip
# The imports of a double by the harness: a trial serves the scripted model from a thread of
# its own (docs/scripted-model.md); it and the runner name the simulated behaviours.
WIRED_DOUBLES = {
    ("runner", "scripted.model"),
    ("runner", "simulated.behaviours"),
    ("trial", "scripted.check"),
    ("trial", "scripted.model"),
    ("trial", "simulated.behaviours"),
}


# A module of the package is named without the package's name (`shell.launch`, `scorer`); the
# package itself, named by every `from swarm_fanout import ...`, is the taskset's export and in
# no layer's way. A name is in the layer of its longest dotted prefix here.
PACKAGE = "swarm_fanout"
LAYERS = {
    "tasks": "task",
    "fixtures": "task",
    "evidence": "evidence",
    "ledger": "evidence",
    "rules": "rules",
    "scorer": "rubric",
    "reporting": "reporting",
    "shell": "shell",
    "scripted": "scripted",
    "simulated": "simulated",
    "runner": "entry",
    "trial": "entry",
    "report": "entry",
    "generate": "entry",
    "fixtures.generate": "entry",
    "vf": "taskset",
    "vf.tests": "tests",
    PACKAGE: "taskset",
    "tests": "tests",
    "tools": "tools",
}
LAYER_DIRS = {
    "evidence": "swarm_fanout/evidence",
    "reporting": "swarm_fanout/reporting",
    "rules": "swarm_fanout/rules",
    "scripted": "swarm_fanout/scripted",
    "shell": "swarm_fanout/shell",
    "simulated": "swarm_fanout/simulated",
}


def in_package(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def layer_of(module: str) -> str | None:
    """The layer of a module named as it is imported (`shell.launch`, `scorer`)."""
    if module in ENTRY_POINTS:
        return "entry"
    parts = module.split(".")
    prefixes = (".".join(parts[:end]) for end in range(len(parts), 0, -1))
    return next((LAYERS[prefix] for prefix in prefixes if prefix in LAYERS), None)


def module_name(path: Path) -> str:
    """A module's name as it is imported; a top-level program's is its file's (`scorer.py`):
    nothing imports it, and it is not the package's module of the same stem."""
    parts = path.relative_to(REPO).with_suffix("").parts
    if len(parts) == 1:
        return path.name
    return in_package(".".join(parts[:-1] if parts[-1] == "__init__" else parts))


def tracked_modules() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    return [REPO / name for name in listed if not name.startswith("tests/data/")]


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def imported_modules(source: str) -> set[str]:
    """Every module an import statement anywhere in `source` names: lazy ones inside functions,
    `if TYPE_CHECKING:` ones and the `if __name__ == "__main__":` block's count too."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    found.discard(PACKAGE)
    return {in_package(module) for module in found}


def import_graph() -> dict[str, set[str]]:
    """Each tracked module's imports of the project's own modules."""
    paths = tracked_modules()
    ours = {module_name(path) for path in paths}
    graph = {}
    for path in paths:
        name = module_name(path)
        source = path.read_text(encoding="utf-8")
        named = imported_modules(source)
        named = {module for module in named if module in ours and module != name}
        # `from shell import launch` names the package too; its __init__ holds only a docstring.
        graph[name] = graph.get(name, set()) | {
            m for m in named if not any(o.startswith(m + ".") for o in named)
        }
    return graph


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that goes up a layer or into a double, and every module in no layer."""
    found = []
    for module, imports in sorted(graph.items()):
        layer = layer_of(module)
        if layer is None:
            found.append(f"{module} is in no layer")
            continue
        for target in sorted(imports):
            target_layer = layer_of(target)
            if target_layer is None or target_layer in MAY_IMPORT[layer]:
                continue
            if (module, target) in WIRED_DOUBLES:
                continue
            found.append(f"{module} ({layer}) imports {target} ({target_layer})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """An import cycle, its modules sorted, if there is one (graphlib finds one at a time)."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return [sorted(set(error.args[1]))]
    return []


class LayerTest(unittest.TestCase):
    def test_no_module_imports_a_higher_layer_or_a_double(self):
        self.assertEqual(layer_violations(import_graph()), [])

    def test_there_is_no_import_cycle(self):
        self.assertEqual(cycles(import_graph()), [])

    def test_the_top_level_holds_only_the_entry_points(self):
        top = {path.name for path in tracked_modules() if path.parent == REPO}
        self.assertEqual(top, ENTRY_POINTS)

    def test_every_layer_folder_says_what_it_is_for(self):
        for folder in ("evidence", "rules", "reporting", "shell", "scripted", "simulated",
                       "fixtures", "tests", "tools"):  # fmt: skip
            with self.subTest(folder=folder):
                docstring = ast.get_docstring(
                    ast.parse(
                        (REPO / LAYER_DIRS.get(folder, folder) / "__init__.py").read_text(
                            encoding="utf-8"
                        )
                    )
                )
                self.assertTrue(docstring)

    def test_no_module_patches_sys_path(self):
        patched = [
            path.relative_to(REPO).as_posix()
            for path in tracked_modules()
            if path != Path(__file__).resolve()
            and re.search(r"sys\.path\.(insert|append)|sys\.path\s*\[.*\]\s*=", path.read_text())
        ]
        self.assertEqual(patched, [])

    def test_no_regular_expression_reads_code(self):
        """Code is read as code (evidence/cells.py, `ast`): a module of evidence/ or rules/
        may use `re` only for what is no code, each named here with what its patterns read."""
        no_code = {
            "swarm_fanout/evidence/artifacts.py": "ids and child dir names",
            "swarm_fanout/evidence/number_tokens.py": "number tokens in text",
            "swarm_fanout/evidence/runsets.py": "trial dir names",
            "swarm_fanout/rules/answers.py": "the answer file's lines",
            "swarm_fanout/evidence/kernel_records.py": "a shell redirection before a path",
            "swarm_fanout/rules/kernels.py": "paths a kernel recorded, socket addresses",
            "swarm_fanout/rules/knowledge.py": "glob patterns and f-string holes of a path",
        }
        using = set()
        for path in tracked_modules():
            relative = path.relative_to(REPO).as_posix()
            if not relative.startswith(("swarm_fanout/evidence/", "swarm_fanout/rules/")):
                continue
            imported = {
                alias.name
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in (
                    node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
                )
            }
            if "re" in imported:
                using.add(relative)
        self.assertEqual(using, set(no_code))
        self.assertTrue((REPO / "swarm_fanout" / "evidence" / "cells.py").exists())

    def test_the_scorer_does_not_import_dataclasses(self):
        """Scoring is a process per run, so its records are named tuples: `dataclasses` imports
        inspect, ast and tokenize, and its decorator compiles code for every class."""
        code = (
            "import sys, swarm_fanout.scorer, swarm_fanout.shell.regrade; "
            "print('dataclasses' in sys.modules)"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        self.assertEqual(done.stdout, "False\n", done.stderr)


class LayerCheckTest(unittest.TestCase):
    """The checks above can fail: each on a graph with the fault it looks for."""

    def test_each_fault_of_layering_is_reported(self):
        for graph, faults in (
            (
                {"evidence.jsonl": {"rules.answers"}, "rules.answers": set()},
                ["evidence.jsonl (evidence) imports rules.answers (rules)"],
            ),
            (
                {"scorer": {"shell.regrade"}, "shell.launch": {"simulated.product"}},
                [
                    "scorer (rubric) imports shell.regrade (shell)",
                    "shell.launch (shell) imports simulated.product (simulated)",
                ],
            ),
            (
                {"rules.result": {"scorer"}, "scorer": {"rules.answers"}},
                ["rules.result (rules) imports scorer (rubric)"],
            ),
            (
                {"scripted.model": {"shell.agent_config", "tasks"}},
                ["scripted.model (scripted) imports shell.agent_config (shell)"],
            ),
            ({"helpers": set()}, ["helpers is in no layer"]),
        ):
            with self.subTest(graph=graph):
                self.assertEqual(layer_violations(graph), faults)

    def test_a_cycle_is_found_however_long(self):
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        self.assertEqual(cycles(graph), [["a", "b", "c"]])

    def test_every_form_of_import_counts_lazy_and_type_only_ones_too(self):
        for source in (
            "import shell.launch",
            "from shell import launch",
            "from shell.launch import Watch",
            "def f():\n    from shell.launch import Watch\n",
            "if TYPE_CHECKING:\n    from shell.launch import Watch\n",
        ):
            with self.subTest(source=source):
                self.assertTrue({"shell.launch"} & imported_modules(source))

    def test_a_main_blocks_imports_are_the_modules_own(self):
        source = 'if __name__ == "__main__":\n    from shell import regrade\n'
        self.assertIn("shell.regrade", imported_modules(source))


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

    def test_no_test_stands_below_the_main_block(self):
        late = []
        for path in sorted((REPO / "tests").glob("*.py")):
            body = ast.parse(path.read_text(encoding="utf-8")).body
            guard = next((i for i, node in enumerate(body) if _is_main_guard(node)), len(body))
            late += [
                f"{path.name}: {node.name}"
                for node in body[guard + 1 :]
                if isinstance(node, (ast.ClassDef, ast.FunctionDef))
            ]
        self.assertEqual(late, [])

    def test_a_module_run_as_a_script_runs_every_test(self):
        # The same count as `python -m unittest tests.test_difference`, from another directory.
        counts = []
        with tempfile.TemporaryDirectory() as cwd:
            for argv in (
                [sys.executable, str(REPO / "tests" / "test_difference.py")],
                [sys.executable, "-m", "unittest", "tests.test_difference"],
            ):
                done = subprocess.run(
                    argv, cwd=cwd if argv[1] != "-m" else REPO, capture_output=True, text=True,
                    timeout=120,
                )  # fmt: skip
                self.assertEqual(done.returncode, 0, done.stderr)
                counts.append(re.search(r"^Ran (\d+) tests", done.stderr, re.M).group(1))
        self.assertEqual(counts[0], counts[1])


def _untimed(output: bytes) -> bytes:
    """A result's JSON with its times left out: two runs never start at the same moment."""
    return re.sub(rb'"\d{4}-\d\d-\d\dT[\d:.]+Z"', b'"<time>"', output)


class RunnerServerTest(unittest.TestCase):
    """tests/runner_server.py: a run forked from the server ends as `python runner.py` ends."""

    def test_a_forked_run_gives_what_an_interpreter_of_its_own_gives(self):
        # COLUMNS (argparse wraps --help to it) and a fixture named relative to the cwd (one
        # whose manifest is no JSON, told apart from none) show the run's own environment
        # and cwd at work.
        env = {**os.environ, "COLUMNS": "61"}
        with tempfile.TemporaryDirectory() as cwd:
            os.mkdir(os.path.join(cwd, "broken"))
            with open(os.path.join(cwd, "broken", "fixture.json"), "w") as handle:
                handle.write("{")
            for argv in (
                ["--help"],
                ["--model", "x/y"],
                ["--fixture", "broken", "--model", "simulated/oracle"],
            ):
                with self.subTest(argv=argv):
                    own = subprocess.run(
                        [sys.executable, str(REPO / "runner.py"), *argv],
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=120,
                    )
                    forked = runner_server.run(argv, cwd=cwd, env=env, timeout=120)
                    said = [
                        (done.returncode, _untimed(done.stdout), done.stderr)
                        for done in (own, forked)
                    ]
                    self.assertEqual(said[1], said[0])
                    self.assertNotEqual(own.stdout + own.stderr, b"")


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
        done = self.run_tests("test_difference", "test_jsonl")
        self.assertEqual(done.returncode, 0, done.stdout[-2000:])
        # Each module's result line with its count and time, then the total of them last.
        each = re.findall(r"^tests\.(test_\w+): OK, (\d+) tests, [0-9.]+ s$", done.stdout, re.M)
        self.assertEqual(sorted(name for name, _ in each), ["test_difference", "test_jsonl"])
        (ran,) = (int(n) for n in re.findall(r"^Ran (\d+) tests", done.stdout, re.M))
        self.assertEqual(ran, sum(int(n) for _, n in each))
        self.assertTrue(done.stdout.rstrip().endswith(f"{ran} passed, 0 failed"))

    def test_modules_keep_temp_files_in_memory_and_a_file_left_there_fails_the_suite(self):
        given: dict[str, str | None] = {}

        def run(module: str, verbose: bool, env: dict) -> tuple[str, int, str, float]:
            given[module] = env.get("TMPDIR")
            if module == "test_stats" and given[module]:
                with open(os.path.join(given[module], "left-behind"), "w"):
                    pass
            return module, 0, "Ran 1 test in 0.001s\n\nOK\n", 0.0

        unset = {key: value for key, value in os.environ.items() if key != "TMPDIR"}
        terminal = io.StringIO()
        with (
            mock.patch.object(suite, "run", run),
            mock.patch.dict(os.environ, unset, clear=True),
            contextlib.redirect_stdout(terminal),
        ):
            code = suite.main(["test_stats", "test_jsonl"])
        scratch = given["test_stats"]
        if scratch is None:
            self.skipTest("no /dev/shm with room here")
        self.assertEqual(given["test_jsonl"], scratch)
        self.assertEqual(os.path.dirname(scratch), "/dev/shm")
        self.assertFalse(os.path.exists(scratch))
        self.assertEqual(code, 1)
        self.assertIn(f"left in the temp dir {scratch}: left-behind", terminal.getvalue())
        self.assertIn("FAILED (modules=0, temp files left)", terminal.getvalue())


if __name__ == "__main__":
    unittest.main()
