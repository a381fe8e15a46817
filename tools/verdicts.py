"""Verdict bytes before and after a scorer change (not a test): issue 22's "done means".

    uv run --locked python -m tools.verdicts dump OUT.json [--runs DIR ...]
    uv run --locked python -m tools.verdicts compare A.json B.json

`dump` scores every case with the scorer of the tree it runs from and writes, per case,
what `scorer.py` prints for it (its stdout, made by shell/regrade.py's `main`, called here
in process), its sha256 and exit code. The cases, named by relative paths so that two trees
name them alike:
- `real-runs/<run>`: every captured run, with the fixture it holds, as
  tests/test_real_runs.py scores it;
- `forged/<case>`: every forged case, materialized as tests/test_integrity.py does;
- `bad/<file>@<place>`: every run-dir file of tests/data/bad put into the captured `main`
  run where tests/test_bad_inputs.py puts it (the broken manifests of bad/fixtures/ yield
  no verdict, only a refusal, and are left out);
- `runs/<DIR's name>/<path>`: every run dir under each `--runs DIR`, regraded as
  `scorer.py RUN_DIR` regrades it, with the fixture it carries; a copy kept by
  `SWARM_FANOUT_KEEP_RUNS` (tests/keep_runs.py) is put back where it ran first.

Runs are scored where the verdict can name nothing of this machine's choosing: the product
keys the ledger's file name on the run's absolute path, and the verdict names that file. So
the captures are materialized under one fixed dir, STAGE, and a kept run at the path it ran
at; a lock lets one dump at a time use them.

`compare` prints each case whose bytes (or exit code) differ, with a unified diff of the
two, each case only one file has, and a count line. Exit 0: every case identical; 1: not;
2: a file it cannot read as a dump.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fcntl
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

from swarm_fanout.evidence.fixture import MANIFEST
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.shell import regrade
from tests import keep_runs, test_integrity, test_real_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD = os.path.join(ROOT, "tests", "data", "bad")
STAGE = os.path.join(tempfile.gettempdir(), "swarm-fanout-verdicts")
# Where tests/test_bad_inputs.py puts each kind of bad file: the prefix of its name, and
# each place, with whether the file replaces what is there or is appended to it.
BAD_PLACES = {
    "ledger-": (("ledger", "wb"),),
    "stdout-": (("stdout", "wb"),),
    "replay-": (("replay", "wb"),),
    "transcript-": (("parent", "ab"), ("child", "ab")),
}
DIFF_LINES = 40


def scored(run_dir: str, fixture: str | None) -> dict:
    """What `scorer.py [--fixture F] RUN_DIR` prints on stdout, its exit code, and its line
    for a person (stderr). A crash is a case's result too, never a stopped dump."""
    out, err = io.StringIO(), io.StringIO()
    argv = [*(["--fixture", fixture] if fixture else []), run_dir]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = regrade.main(argv)
        except Exception as error:
            code = None
            print("".join(traceback.format_exception_only(type(error), error)), end="")
    text = out.getvalue()
    return {
        "exit_code": code,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "verdict": text,
        "note": err.getvalue(),
    }


def staged_cases(kind: str, names, make):
    """Each run `make(name, dir)` writes under the stage's `kind/` dir, scored, then removed:
    the captured runs (`real-runs`) and the forged corpus (`forged`)."""
    parent = os.path.join(STAGE, kind)
    for name in names:
        root = make(name, parent)
        yield f"{kind}/{name}", scored(root, root)
        shutil.rmtree(root)


def bad_places(run_dir: str) -> dict[str, str]:
    children = sorted(glob.glob(os.path.join(run_dir, "session-artifacts", "*", "sub-*")))
    return {
        "ledger": glob.glob(os.path.join(run_dir, "agent-home", "rlm-ledger", "*"))[0],
        "stdout": RunPaths.of(run_dir).stdout,
        "replay": RunPaths.of(run_dir).replay,
        "parent": glob.glob(os.path.join(run_dir, "sessions", "*.jsonl"))[0],
        "child": glob.glob(os.path.join(children[0], "*.jsonl"))[0],
    }


def bad_cases():
    for file in sorted(os.listdir(BAD)):
        if not os.path.isfile(os.path.join(BAD, file)):
            continue  # bad/fixtures/: broken manifests, refused before any verdict
        places = next((v for k, v in BAD_PLACES.items() if file.startswith(k)), None)
        if places is None:
            raise SystemExit(f"tests/data/bad/{file}: no place known for it in tools/verdicts.py")
        for place, mode in places:
            parent = os.path.join(STAGE, "bad", f"{file}@{place}")
            run_dir = test_real_runs.materialize("main", parent)
            with open(os.path.join(BAD, file), "rb") as handle:
                data = handle.read().replace(b"@RUN@", run_dir.encode())
            with open(bad_places(run_dir)[place], mode) as handle:
                handle.write(data)
            yield f"bad/{file}@{place}", scored(run_dir, run_dir)
            shutil.rmtree(parent)


def run_cases(runs: str):
    """Every run dir under `runs`, and every copy kept there by SWARM_FANOUT_KEEP_RUNS."""
    top = os.path.abspath(runs)
    label = os.path.basename(os.path.normpath(top))
    not_kept = os.path.join(top, keep_runs.NOT_KEPT)
    if os.path.isfile(not_kept):
        with open(not_kept, encoding="utf-8") as handle:
            missed = len(handle.readlines())
        print(
            f"{runs}: {missed} run dirs the suite made were not kept ({not_kept})", file=sys.stderr
        )
    for directory, dirs, files in os.walk(top):
        dirs.sort()
        name = f"runs/{label}/{os.path.relpath(directory, top)}"
        if keep_runs.KEPT in files:
            dirs.clear()
            yield name, kept_case(directory)
        elif keep_runs.is_run_dir(directory):
            dirs.clear()
            own = os.path.isfile(os.path.join(directory, MANIFEST))
            yield name, scored(directory, directory if own else None)


def kept_case(entry: str) -> dict:
    """A kept copy, scored at the path it ran at (put back there, then removed)."""
    with open(os.path.join(entry, keep_runs.KEPT), encoding="utf-8") as handle:
        run_dir = json.load(handle)["run_dir"]
    if os.path.lexists(run_dir):
        text = f"not scored: {run_dir}, where it ran, exists\n"
        return {"exit_code": None, "sha256": None, "verdict": text, "note": text}
    created = run_dir
    while not os.path.lexists(os.path.dirname(created)):
        created = os.path.dirname(created)
    try:
        keep_runs.copy_run(os.path.join(entry, keep_runs.RUN), run_dir)
        kept_fixture = os.path.join(entry, keep_runs.FIXTURE)
        if os.path.isdir(kept_fixture):
            return scored(run_dir, kept_fixture)
        own = os.path.isfile(os.path.join(run_dir, MANIFEST))
        return scored(run_dir, run_dir if own else None)
    finally:
        shutil.rmtree(created)


def commit() -> str | None:
    """The tree's commit, `+` when it has changes not committed: which scorer made a dump."""
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def dump(out: str, runs: list[str]) -> int:
    os.makedirs(os.path.dirname(STAGE), exist_ok=True)
    with open(STAGE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(STAGE, ignore_errors=True)
        try:
            cases = {}
            sources = [
                staged_cases("real-runs", test_real_runs.RUNS, test_real_runs.materialize),
                staged_cases("forged", test_integrity.CASES, test_integrity.forge),
                bad_cases(),
            ]
            for source in [*sources, *(run_cases(path) for path in runs)]:
                for name, case in source:
                    if name in cases:
                        raise SystemExit(f"two cases named {name}: give --runs dirs other names")
                    cases[name] = case
        finally:
            shutil.rmtree(STAGE, ignore_errors=True)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"commit": commit(), "cases": cases}, handle, indent=1, sort_keys=True)
        handle.write("\n")
    for line in summary(cases):
        print(line, file=sys.stderr)
    return 0


def summary(cases: dict) -> list[str]:
    """Per kind of case: how many, by exit code; and how many kept runs that have a
    result.json got its verdict back."""
    kinds: dict[str, dict] = {}
    for name, case in cases.items():
        kind = name.split("/")[0]
        codes = kinds.setdefault(kind, {})
        codes[case["exit_code"]] = codes.get(case["exit_code"], 0) + 1
    lines = []
    for kind, codes in kinds.items():
        counted = ", ".join(
            f"exit {code}: {n}" for code, n in sorted(codes.items(), key=lambda item: str(item[0]))
        )
        lines.append(f"{kind}: {sum(codes.values())} cases ({counted})")
    same = sum("the same verdict as result.json's" in case["note"] for case in cases.values())
    other = sum("NOT result.json's verdict" in case["note"] for case in cases.values())
    if same or other:
        lines.append(f"runs with a result.json: {same} gave its verdict, {other} did not")
    return lines


def differences(before: dict, after: dict) -> tuple[list[str], list[str], list[str]]:
    """The cases whose bytes or exit code differ, those only `before` has, those only
    `after` has: each sorted by name."""
    changed = sorted(
        name
        for name in before.keys() & after.keys()
        if (before[name]["verdict"], before[name]["exit_code"])
        != (after[name]["verdict"], after[name]["exit_code"])
    )
    return changed, sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys())


def compare(first: str, second: str) -> int:
    dumps = []
    for path in (first, second):
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
            cases = dict(loaded["cases"])
            if not all({"verdict", "exit_code"} <= set(case) for case in cases.values()):
                raise ValueError("a case without its verdict or exit code")
            dumps.append((loaded.get("commit"), cases))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            print(f"{path}: not a dump of tools.verdicts: {error}", file=sys.stderr)
            return 2
    (commit_a, before), (commit_b, after) = dumps
    print(f"A: {first} (commit {commit_a})\nB: {second} (commit {commit_b})")
    changed, only_a, only_b = differences(before, after)
    for name in changed:
        old, new = before[name], after[name]
        print(f"DIFFERS {name} (exit {old['exit_code']} -> {new['exit_code']})")
        diff = list(
            difflib.unified_diff(
                old["verdict"].splitlines(),
                new["verdict"].splitlines(),
                "A/" + name,
                "B/" + name,
                n=2,
                lineterm="",
            )
        )
        shown = diff[:DIFF_LINES]
        if len(diff) > DIFF_LINES:
            shown.append(f"... {len(diff) - DIFF_LINES} more diff lines")
        print("\n".join("    " + line for line in shown))
    for name in only_a:
        print(f"ONLY IN A {name}")
    for name in only_b:
        print(f"ONLY IN B {name}")
    same = len(before.keys() & after.keys()) - len(changed)
    print(
        f"{same} identical, {len(changed)} differ, {len(only_a)} only in A, "
        f"{len(only_b)} only in B ({len(before)} cases in A, {len(after)} in B)"
    )
    return 0 if not (changed or only_a or only_b) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.verdicts",
        description="Dump every case's verdict bytes as this tree's scorer prints them, or "
        "compare two dumps (exit 0 identical, 1 not, 2 unreadable dump).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump", help="score every case, write OUT.json")
    dumping.add_argument("out", help="the dump to write")
    dumping.add_argument(
        "--runs",
        action="append",
        default=[],
        metavar="DIR",
        help="also every run dir under DIR, and every copy SWARM_FANOUT_KEEP_RUNS kept there "
        "(repeatable)",
    )
    comparing = commands.add_parser("compare", help="print what differs between two dumps")
    comparing.add_argument("first", help="dump A (before)")
    comparing.add_argument("second", help="dump B (after)")
    args = parser.parse_args(argv)
    if args.command == "dump":
        return dump(args.out, args.runs)
    return compare(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
