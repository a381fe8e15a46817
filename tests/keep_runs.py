"""Keeping the run dirs the suite makes, for tools/verdicts.py (not a test module).

With `SWARM_FANOUT_KEEP_RUNS=DIR`, tests/__init__.py calls `install`, and every run dir a
test made (runner runs, simulated agent runs, builder-made and materialized ones) is copied
into DIR before its temp dir is removed, so that two trees can score the same files: the
suite's runs differ from one suite run to the next (the builders and the simulated agent
draw random ids). Without the variable nothing here is installed.

Each copy is `DIR/<test id>-<n>/`: `run/` the run dir as the test left it, `kept.json` the
path it had, and `fixture/` the fixture it is scored against when the run dir does not hold
one itself (a captured run's fixture.json): the one its result.json or run-meta.json
records, else the one a test scored it against. A run dir is scored where it ran, because
the product keys the ledger's file name on the run's absolute path (a hash of its sessions
dir): moved, it has no ledger, and every run scores `no_spawn`. tools/verdicts.py puts the
copy back at that path to score it.

Three hooks, all in the test's own process; the harness's code is not touched:
- `shutil.rmtree`: every temp dir a test removes goes through it (TemporaryDirectory's
  cleanup calls it too); the run dirs under it are copied first;
- `unittest.TestCase.run`: the test being run names the copies (a module's cleanups, run
  after its last test, take the module's name);
- `scorer.score`: the fixture a test scored a run dir against, for the run dirs that record
  none (the builders'; their tests hold the fixture in memory).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import sys
import unittest

from swarm_fanout.evidence.fixture import MANIFEST, Fixture, manifest_path
from swarm_fanout.evidence.runpaths import RunPaths

KEPT = "kept.json"
NOT_KEPT = "not-kept.txt"  # in DIR: a line for each run dir that could not be copied
RUN = "run"
FIXTURE = "fixture"
TASK = "task.txt"


def is_run_dir(path: str) -> bool:
    """What the runner, the product or a builder leaves: sessions/, or the runner's records."""
    paths = RunPaths.of(path)
    return os.path.isdir(paths.sessions) or any(
        os.path.isfile(record) for record in (paths.result, paths.run_meta)
    )


def run_dirs(top: str):
    """Every run dir at or under `top`, outermost first; none is looked inside."""
    for directory, dirs, _ in os.walk(top):
        if is_run_dir(directory):
            dirs.clear()
            yield directory
        else:
            dirs.sort()


def copy_run(source: str, target: str) -> None:
    """A run dir's copy: links as links (tests plant loops and links out of the run), a FIFO
    as a FIFO; a socket is no evidence and is left out."""

    def copy_file(src: str, dst: str) -> str:
        mode = os.lstat(src).st_mode
        if stat.S_ISFIFO(mode):
            os.mkfifo(dst)
        elif stat.S_ISREG(mode):
            shutil.copy2(src, dst)
        return dst

    shutil.copytree(source, target, symlinks=True, copy_function=copy_file)


def recorded_fixture(run_dir: str) -> str | None:
    """The fixture dir the runner recorded for the run (result.json, else run-meta.json),
    when it is still there."""
    paths = RunPaths.of(run_dir)
    for record in (paths.result, paths.run_meta):
        try:
            with open(record, encoding="utf-8") as handle:
                stored = json.load(handle)
        except (OSError, ValueError):
            continue
        fixture = stored.get("fixture") if isinstance(stored, dict) else None
        path = fixture.get("path") if isinstance(fixture, dict) else None
        if isinstance(path, str) and os.path.isfile(manifest_path(path)):
            return os.path.dirname(os.path.abspath(manifest_path(path)))
    return None


def write_fixture(fixture: Fixture, target: str) -> None:
    """A fixture a test built in memory, as the manifest (and task.txt) it would load from."""
    os.makedirs(target)
    shards = [
        {"file": s.file, "worker": s.worker, "question": s.question, "expected": s.expected}
        for s in fixture.shards
    ]
    manifest = {"name": fixture.name, "artifact": fixture.artifact, "shards": shards}
    with open(os.path.join(target, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
    if fixture.task is not None:
        with open(os.path.join(target, TASK), "w", encoding="utf-8") as handle:
            handle.write(fixture.task)


class Keeper:
    """Copies run dirs into `dest`, each named for the test that made it."""

    def __init__(self, dest: str):
        self.dest = os.path.abspath(dest)
        self.test: str | None = None
        self.module: str | None = None
        self.kept: set[str] = set()
        self.scored: dict[str, Fixture] = {}

    def saw_scored(self, run_dir: str, fixture: Fixture) -> None:
        self.scored[os.path.realpath(run_dir)] = fixture

    def keep(self, top: str) -> None:
        """Copy every run dir under `top` not yet kept; a failure is said on stderr, never
        raised: keeping runs must not change a test's outcome."""
        if self.test is None and self.module is None:
            return  # no test has run in this process (tools/verdicts.py itself, the bench)
        top = os.path.realpath(top)
        if top == self.dest or top.startswith(self.dest + os.sep) or not os.path.isdir(top):
            return
        for run_dir in run_dirs(top):
            if run_dir in self.kept:
                continue
            self.kept.add(run_dir)
            try:
                self._keep(run_dir)
            except Exception as error:  # whatever it is, the test's outcome stays its own
                line = f"{self.test or self.module}: {run_dir} not kept: {error}"
                print(f"SWARM_FANOUT_KEEP_RUNS: {line}", file=sys.stderr)
                with open(os.path.join(self.dest, NOT_KEPT), "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")

    def _keep(self, run_dir: str) -> None:
        name = self.test or f"{self.module}.after-tests"
        index = 1
        while os.path.lexists(os.path.join(self.dest, f"{name}-{index}")):
            index += 1
        entry = os.path.join(self.dest, f"{name}-{index}")
        os.makedirs(entry)
        try:
            copy_run(run_dir, os.path.join(entry, RUN))
            recorded = recorded_fixture(run_dir)
            if recorded is not None:
                ignore = shutil.ignore_patterns(".git")
                shutil.copytree(recorded, os.path.join(entry, FIXTURE), ignore=ignore)
            elif not os.path.isfile(os.path.join(run_dir, MANIFEST)) and run_dir in self.scored:
                write_fixture(self.scored[run_dir], os.path.join(entry, FIXTURE))
            with open(os.path.join(entry, KEPT), "w", encoding="utf-8") as handle:
                json.dump({"run_dir": run_dir, "test": name}, handle, indent=2)
        except BaseException:
            _rmtree(entry, ignore_errors=True)
            raise


_rmtree = shutil.rmtree


def install(dest: str) -> Keeper:
    """Hook the suite's process so that every run dir a test removes is kept in `dest`."""
    from swarm_fanout import scorer

    keeper = Keeper(dest)
    os.makedirs(keeper.dest, exist_ok=True)

    @functools.wraps(_rmtree)
    def rmtree(path, *args, **kwargs):
        keeper.keep(os.fspath(path))
        return _rmtree(path, *args, **kwargs)

    run = unittest.TestCase.run

    @functools.wraps(run)
    def run_naming_copies(self, result=None):
        keeper.test, keeper.module = self.id(), type(self).__module__
        try:
            return run(self, result)
        finally:
            keeper.test = None

    score = scorer.score

    @functools.wraps(score)
    def score_noting_fixture(fixture, run, *args, **kwargs):
        keeper.saw_scored(run.run_dir, fixture)
        return score(fixture, run, *args, **kwargs)

    shutil.rmtree = rmtree
    unittest.TestCase.run = run_naming_copies
    scorer.score = score_noting_fixture
    return keeper
