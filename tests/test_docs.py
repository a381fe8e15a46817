"""The docs hold together: every contract citation in the code names a heading of
docs/product-contract.md, no code points at a contract file outside the repo, the
relative links of README.md and docs/*.md lead to files that exist, and the README stays
a guide: short, with CI's own test command, and a module map that matches the tree."""

from __future__ import annotations

import os
import re
import unittest

from tests.test_layout import REPO, tracked_modules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT = os.path.join(ROOT, "docs", "product-contract.md")
# The shared contract outside the repo, spelt so that this file does not name it itself.
OUTSIDE_CONTRACT = "PRODUCT_CONTRACT" + ".md"

# `§4`, `§8.2`, `§10.5` (and `§ 4`, normalised to `§4`). A trailing dot is punctuation.
CITATION = re.compile(r"§ ?([0-9]+(?:\.[0-9]+)?)")
HEADING = re.compile(r"^#{1,6}\s")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")
# `[text](target)` or `![alt](target "title")`: the target up to a space or `)`.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[^)]*)?\)")

README = "README.md"
CI_SCRIPT = os.path.join(".ci", "run")
# The README is a guide; the reference lives in docs/ (issue 14).
README_MAX_LINES = 220
MODULE_MAP = "## Layout"
# A layout row: `| layer | `path.py` | what it owns |`.
MAP_ROW = re.compile(r"^\|[^|]*\|\s*`([^`]+\.py)`\s*\|")
# The optional verifiers taskset keeps its module map in docs/verifiers.md (its own tests check it).
OPTIONAL_PACKAGE = "swarm_fanout/vf/"


def tracked_python_files() -> list[str]:
    """Repo-relative paths of the tracked `*.py` files, test data left out."""
    paths = (path.relative_to(REPO).as_posix() for path in tracked_modules() if path.is_file())
    return sorted(paths)


def read(relative: str) -> str:
    with open(os.path.join(ROOT, relative), encoding="utf-8", errors="replace") as handle:
        return handle.read()


def heading_has(line: str, token: str) -> bool:
    """`line` carries `token` not followed by a digit or a dot: `§1` is not in `§10`."""
    return re.search(re.escape(token) + r"(?![0-9.])", line) is not None


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code blanked."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def markdown_files() -> list[str]:
    docs = sorted(name for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
    return [README, *(f"docs/{name}" for name in docs)]


def fenced_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks, stripped."""
    fenced, lines = False, []
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            lines.append(line.strip())
    return lines


def ci_commands() -> list[str]:
    """The commands `.ci/run` runs after installing uv: its `uv run` lines."""
    return [
        line.strip() for line in read(CI_SCRIPT).splitlines() if line.strip().startswith("uv run ")
    ]


def section(text: str, heading: str) -> list[str]:
    """The lines under `heading`, up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    level = len(heading.split(" ", 1)[0])
    for end in range(start, len(lines)):
        if HEADING.match(lines[end]) and len(lines[end].split(" ", 1)[0]) <= level:
            return lines[start:end]
    return lines[start:]


class ContractCitations(unittest.TestCase):
    def test_every_citation_resolves_to_a_heading(self):
        with open(CONTRACT, encoding="utf-8") as handle:
            headings = [line for line in handle.read().splitlines() if HEADING.match(line)]
        cited: dict[str, set[str]] = {}
        for path in tracked_python_files():
            for number, line in enumerate(read(path).splitlines(), 1):
                for match in CITATION.finditer(line):
                    cited.setdefault("§" + match.group(1), set()).add(f"{path}:{number}")
        self.assertTrue(cited, "no § citation found in the code: is the file list empty?")
        unresolved = {
            token: sorted(places)
            for token, places in cited.items()
            if not any(heading_has(heading, token) for heading in headings)
        }
        self.assertEqual(unresolved, {}, "citations with no heading in docs/product-contract.md")

    def test_heading_match_is_exact(self):
        self.assertTrue(heading_has("## §1 Facts", "§1"))
        self.assertTrue(heading_has("### §8.2", "§8.2"))
        self.assertFalse(heading_has("## §10 Integrity", "§1"))
        self.assertFalse(heading_has("### §8.1 Wire", "§8"))
        self.assertFalse(heading_has("### §10.1 Ledger", "§10"))

    def test_no_code_names_the_outside_contract(self):
        offenders = [
            f"{path}:{number}"
            for path in tracked_python_files()
            for number, line in enumerate(read(path).splitlines(), 1)
            if OUTSIDE_CONTRACT in line
        ]
        self.assertEqual(offenders, [], f"cite docs/product-contract.md, not {OUTSIDE_CONTRACT}")


class MarkdownLinks(unittest.TestCase):
    def test_relative_links_point_at_existing_files(self):
        broken = []
        for relative in markdown_files():
            base = os.path.dirname(os.path.join(ROOT, relative))
            for number, line in prose_lines(read(relative)):
                for match in LINK.finditer(line):
                    target = match.group(1)
                    if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
                        continue  # http(s), mailto and the like, or an anchor on this page
                    path = target.split("#", 1)[0].split("?", 1)[0]
                    if path.startswith("/"):
                        full = os.path.join(ROOT, path.lstrip("/"))
                    else:
                        full = os.path.join(base, path)
                    full = os.path.normpath(full)
                    inside = os.path.commonpath([full, ROOT]) == ROOT
                    if not inside or not os.path.exists(full):
                        broken.append(f"{relative}:{number}: {target}")
        self.assertEqual(broken, [], "relative links to missing files")


class ReadmeIsAGuide(unittest.TestCase):
    def test_a_first_real_run_is_documented_from_install_to_its_cost(self):
        page = read(os.path.join("docs", "first-real-run.md"))
        self.assertIn("](docs/first-real-run.md)", read(README))
        for needed in (
            *("v0.8.0", "PRIME_AGENT_KERNEL_PYTHON", "--model scripted/fanout", "auth.json"),
            *("models.json", "bubblewrap", "--sandbox", "## What a run costs"),
        ):
            self.assertIn(needed, page)
        # The live scripted check's numbers, and the captured real runs' own times
        # (cli-exit.txt, rounded to the second) and calls (model-log.jsonl).
        self.assertRegex(page, r"\| `fanout` \| oneshot \| \d+ s \| [^|]+ s \| [^|]+ \| [^|]+ \|")
        runs = os.path.join("tests", "data", "real-runs")
        rows = re.findall(r"^\| `([a-z-]+)`[^|]*\| (\d+) s \| (\d+) \(", page, re.M)
        self.assertGreaterEqual(len(rows), 3, rows)
        for name, seconds, calls in rows:
            elapsed = float(read(os.path.join(runs, name, "cli-exit.txt")).split("elapsed=")[1])
            log = read(os.path.join(runs, name, "model-log.jsonl"))
            logged = sum(1 for line in log.splitlines() if line.strip())
            self.assertEqual((int(seconds), int(calls)), (round(elapsed), logged), name)

    def test_readme_is_at_most_220_lines(self):
        count = len(read(README).splitlines())
        self.assertLessEqual(count, README_MAX_LINES, "move reference text into docs/")

    def test_readme_test_command_is_the_one_ci_runs(self):
        def tests(lines: list[str]) -> list[str]:
            return [line for line in lines if " -m tests" in line or " -m unittest " in line]

        ci = tests(ci_commands())
        self.assertEqual(len(ci), 1, ".ci/run should run one test command")
        self.assertEqual(tests(fenced_lines(read(README))), ci)

    def test_readme_gives_the_lint_commands_ci_runs(self):
        ruff = [line for line in ci_commands() if " ruff " in line]
        self.assertEqual(len(ruff), 2, ".ci/run should run ruff check and ruff format --check")
        readme = fenced_lines(read(README))
        for command in ruff:
            with self.subTest(command=command):
                self.assertIn(command, readme)

    def test_readme_says_how_a_bare_uv_run_ruff_finds_the_pinned_ruff(self):
        pinned = re.search(r'required-version = "==([0-9.]+)"', read("pyproject.toml")).group(1)
        readme = read(README)
        install = readme.index(f"uv tool install ruff=={pinned}")
        self.assertLess(install, readme.index("uv run --locked ruff check ."))
        # CI keeps the form that needs nothing installed beforehand.
        for command in ci_commands():
            if " ruff " in command:
                self.assertIn(f"--with ruff=={pinned} ", command)

    def test_the_layout_names_every_module_but_the_packages_and_tests(self):
        mapped = {
            match.group(1)
            for line in section(read(README), MODULE_MAP)
            if (match := MAP_ROW.match(line))
        }
        tree = {
            path
            for path in tracked_python_files()
            if not path.endswith("__init__.py")
            and not path.startswith(OPTIONAL_PACKAGE)
            and (not path.startswith("tests/") or path == "tests/builders.py")
        }
        self.assertEqual(sorted(tree - mapped), [], "modules missing from the README's layout")
        gone = sorted(path for path in mapped if not os.path.isfile(os.path.join(ROOT, path)))
        self.assertEqual(gone, [], "the README's layout names modules that do not exist")


class DriftTest(unittest.TestCase):
    """What the docs say of the code, held to the code."""

    def test_the_docs_start_bwrap_with_die_with_parent_as_the_code_does(self):
        from swarm_fanout.shell import sandbox

        self.assertIn("--die-with-parent", sandbox.PROBED)
        for name in ("drives.md", "witness.md"):
            text = " ".join(read(os.path.join("docs", name)).split())
            with self.subTest(doc=name):
                self.assertIn("started with `--die-with-parent`", text)
                self.assertNotRegex(text, r"not started with `--die-with-parent`")

    def test_the_scripted_pairs_a_check_names_are_the_scripts_it_ran(self):
        from swarm_fanout.scripted.model import SCRIPTS

        text = " ".join(read(os.path.join("docs", "scripted-model.md")).split())
        # The loop may go on over lines (a backslash before each break).
        loop = re.search(r"for s in ([a-z \\-]+); do", text).group(1).replace("\\", " ").split()
        self.assertEqual(loop, list(SCRIPTS), "the developer's loop runs every script")
        drives = re.search(r"for d in ([a-z ]+); do", text).group(1).split()
        self.assertEqual(drives, ["oneshot", "resident", "acp"], "the loop runs every drive")
        # "all N pairs agree", said of no script in particular, is every script's every drive.
        for count in re.findall(r"all (\w+) script \u00d7 drive pairs agree", text):
            self.assertEqual(count, str(len(SCRIPTS) * len(drives)), count)

    def test_the_readme_says_how_to_run_a_source_build_of_the_agent(self):
        # A source checkout has no `prime-agent` on PATH: its script, or the package's `pi`.
        text = " ".join(read(README).split())
        self.assertIn("--agent-bin /path/to/prime-agent/prime-agent.sh", text)
        self.assertIn("--agent-bin pi", text)


class TestingPageTest(unittest.TestCase):
    def test_the_testing_page_names_every_test_module(self):
        page = section(read(os.path.join("docs", "testing.md")), "## What each module covers")
        named = set(re.findall(r"`(test_\w+)`", "\n".join(page)))
        modules = {
            name[:-3]
            for name in os.listdir(os.path.join(ROOT, "tests"))
            if name.startswith("test_") and name.endswith(".py")
        }
        self.assertEqual(sorted(modules - named), [], "test modules docs/testing.md leaves out")
        self.assertEqual(sorted(named - modules), [], "docs/testing.md names no such module")


class ReasonCodesAreDocumented(unittest.TestCase):
    """Reason codes are API: every code the scorer can give, and every warning, is in
    docs/rubric.md."""

    def test_every_reason_code_and_warning_is_in_the_rubric(self):
        from swarm_fanout import scorer

        rubric = read(os.path.join("docs", "rubric.md"))
        missing = [
            code for code in (*scorer.MESSAGES, *scorer.WARNINGS) if f"`{code}`" not in rubric
        ]
        self.assertEqual(missing, [])


if __name__ == "__main__":
    unittest.main()
