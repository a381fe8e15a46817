"""What the end-to-end tests of runner.py share: paths, the simulated agent, a runner in a temp dir
(`RunnerTestCase`), reading the pids a run logged, run sets (`RunSetCase`) and a few behaviours'
verdicts sandboxed and not (`SameVerdictsCase`). Not a test module: `tests/test_runner*.py`,
`tests/test_trials*.py` and `tests/test_sandbox*.py` import it.
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from dataclasses import dataclass
from pathlib import Path

from swarm_fanout import generate
from swarm_fanout.shell import procs, sandbox
from swarm_fanout.shell.watch import SAME_INTERRUPT_S
from tests import runner_server

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "runner.py")
SIMULATED = os.path.join(ROOT, "swarm_fanout", "simulated", "agent.py")
JSON_EVENTS = os.path.join(ROOT, "fixtures", "json-events")
CSV_METRICS = os.path.join(ROOT, "fixtures", "csv-metrics")
# What the simulated agent logs its daemon's pid as, per drive: the one-shot CLI's detached
# supervisor, or the resident drive's foreground daemon (the runner's own child).
DAEMON_LOGGED_AS = {"oneshot": "supervisor", "resident": "daemon"}
# --grace for the runs that leave a process behind which never exits on its own (it ignores
# SIGTERM, or a daemon never answers): the run waits out the whole grace, once after the
# daemon's shutdown and once between SIGTERM and SIGKILL, so the tests keep it short. A
# daemon still gets 0.5 s to answer shutdown: the one that never answers costs that.
GRACE = ("--grace", "0.1")
# --timeout for the runs that hang until it: long enough that the agent has spawned every
# child (or been admitted) before it, with two CPU-bound processes beside the suite.
HANG_TIMEOUT = ("--timeout", "5")


def past_the_same_interrupt(seen_at: float) -> None:
    """Return once a signal sent is a new press to a runner that said it counted the last
    one before `seen_at` (time.monotonic()): SAME_INTERRUPT_S later (shell/watch.py). The
    window is the runner's rule, on the machine's one monotonic clock; nothing to observe."""
    while (left := seen_at + SAME_INTERRUPT_S - time.monotonic()) > 0:
        time.sleep(left)


def process_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def documented_codes(behaviour: str) -> set[str]:
    """The reason codes docs/simulated-agent.md's table gives a behaviour's verdict."""
    with open(os.path.join(ROOT, "docs", "simulated-agent.md"), encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(f"| `{behaviour}` |"):
                verdict = line.rstrip().rstrip("|").rsplit("|", 1)[1]
                return set(re.findall(r"`([a-z_]+)`", verdict))
    raise AssertionError(f"no row for {behaviour} in docs/simulated-agent.md")


class StderrLines:
    """A running process's stderr, read line by line as it comes (from its file descriptor,
    so that nothing waits in a buffer that select cannot see)."""

    def __init__(self, process: runner_server.Started):
        self.fd = process.stderr.fileno()
        self.pending = b""

    def first_with(self, needle: bytes) -> str:
        """The next line holding `needle`."""
        deadline = time.monotonic() + 120  # a guard against a hang, not a measure
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                if needle in line:
                    return line.decode()
            if time.monotonic() > deadline:
                raise AssertionError(f"no line with {needle!r} on stderr")
            ready, _, _ = select.select([self.fd], [], [], 1)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise AssertionError(f"stderr ended with no line with {needle!r}")
                self.pending += chunk


def logged_pids(run_dir: str, what: str) -> list[int]:
    with open(os.path.join(run_dir, "stderr.txt"), encoding="utf-8", errors="replace") as handle:
        return [int(pid) for pid in re.findall(rf"{what} pid=(\d+)", handle.read())]


def host_pid(result: dict, logged: int) -> int:
    """A pid the agent logged, as the runner sees it: in a sandbox the agent logs its pid in
    there, and the cleanup record maps the run's processes' pids here to those."""
    inside = result["cleanup"].get("sandbox_pids")
    if inside is None:
        return logged
    (pid,) = [int(host) for host, ns in inside.items() if ns == logged]
    return pid


def live_host_pid(runner_pid: int, logged: int) -> int:
    """The same while the run runs: the runner's descendant that has the logged pid in its
    sandbox (unsandboxed, the logged pid itself)."""
    below = procs.descendants(runner_pid, procs.process_table())
    found = [pid for pid in below if procs.namespace_pid(pid) == logged]
    return found[0] if found else logged


def logged_host_pids(result: dict, what: str) -> list[int]:
    return [host_pid(result, pid) for pid in logged_pids(result["run_dir"], what)]


@dataclass(frozen=True)
class SharedRun:
    """A run several tests read (RunnerTestCase.shared_run): what run_runner returns, and the
    temp dir it ran in."""

    done: subprocess.CompletedProcess
    result: dict
    tmp: str


_SHARED_RUNS: dict[tuple, SharedRun] = {}


def _forget_shared_runs() -> None:
    for shared in _SHARED_RUNS.values():
        shutil.rmtree(shared.tmp, ignore_errors=True)
    _SHARED_RUNS.clear()


class RunnerTestCase(unittest.TestCase):
    # Runs are forked from tests/runner_server.py's interpreter, which has imported runner.py
    # already. A test that needs the runner's process to be `python runner.py` itself (its
    # command line, or /proc/<pid>/environ, which is what the process was started with) sets
    # this, and pays for a new interpreter per run.
    own_interpreter = False

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.out = os.path.join(self.tmp, "runs")
        # The user's real agent dir is never read: credentials come from here.
        self.agent_config = os.path.join(self.tmp, "agent-config")
        os.mkdir(self.agent_config)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_AGENT_")}

    def runner_argv(self, model: str, fixture: str | None = None, *extra: str) -> list[str]:
        """runner.py's argv for `model` on `fixture` (default: the two-shard json-events)."""
        return [
            sys.executable,
            RUNNER,
            "--fixture",
            fixture or two_shard_fixture(),
            "--agent-bin",
            SIMULATED,
            "--model",
            model,
            "--out",
            self.out,
            "--agent-config",
            self.agent_config,
            *extra,
        ]

    def run_runner(self, model: str, fixture: str | None = None, *extra: str):
        argv = self.runner_argv(model, fixture, *extra)
        if self.own_interpreter:
            done = subprocess.run(
                argv,
                cwd=self.tmp,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=120,
            )
        else:
            done = runner_server.run(argv[2:], cwd=self.tmp, env=self.env, timeout=120)
        result = json.loads(done.stdout)
        return done, result

    def run_argv(self, argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
        """`subprocess.run(argv, env=env, capture_output=True, timeout=60)` for an `argv`
        that runs runner.py (`runner_argv`'s, as a test edited it), in this process's cwd;
        forked from tests/runner_server.py, or run by its own interpreter as
        `own_interpreter` says."""
        if self.own_interpreter:
            return subprocess.run(argv, env=env, capture_output=True, timeout=60)
        return runner_server.run(
            argv[2:], cwd=os.getcwd(), env=os.environ.copy() if env is None else env, timeout=60
        )

    def shared_run(self, model: str, fixture: str | None = None, *extra: str):
        """run_runner's (done, result) for a run that tests only read, never change: each
        distinct invocation (and environment) runs once per test process, in a temp dir of its
        own (`SharedRun.tmp`: the run's cwd, in the place of self.tmp)
        kept until the module's tests end. A test that writes into its run, or its out dir or
        agent config, or needs a run of its own, uses run_runner."""
        key = (model, fixture, extra, tuple(sorted(self.env.items())))
        if key not in _SHARED_RUNS:
            if not _SHARED_RUNS:
                unittest.addModuleCleanup(_forget_shared_runs)
            tmp = tempfile.mkdtemp(prefix="shared-run-")
            mine = self.tmp, self.out, self.agent_config
            self.tmp, self.out = tmp, os.path.join(tmp, "runs")
            self.agent_config = os.path.join(tmp, "agent-config")
            os.mkdir(self.agent_config)
            try:
                done, result = self.run_runner(model, fixture, *extra)
            finally:
                self.tmp, self.out, self.agent_config = mine
            _SHARED_RUNS[key] = SharedRun(done, result, tmp)
        return _SHARED_RUNS[key]

    def started_hanging_run(
        self, *extra: str, env: dict | None = None, grace: tuple[str, str] = GRACE
    ) -> tuple[runner_server.Started, int]:
        """runner.py on simulated/hang over two shards (forked from the runner server), once
        the agent has spawned both children and logged its SIGTERM-ignoring grandchild;
        returns the runner and the grandchild's pid here."""
        argv = self.runner_argv("simulated/hang", two_shard_fixture(), *extra, *grace)
        runner = runner_server.Started(argv[2:], cwd=self.tmp, env=env or self.env)
        self.addCleanup(runner.close)
        self.addCleanup(runner.kill)
        deadline = time.monotonic() + 60
        while not glob.glob(os.path.join(self.out, "*", "stderr.txt")) or not logged_pids(
            glob.glob(os.path.join(self.out, "*"))[0], "grandchild"
        ):
            self.assertLess(time.monotonic(), deadline, "the agent never started")
            time.sleep(0.05)
        (grandchild,) = logged_pids(glob.glob(os.path.join(self.out, "*"))[0], "grandchild")
        return runner, live_host_pid(runner.pid, grandchild)

    def run_dir(self, result: dict) -> str:
        return result["run_dir"]

    def codes(self, result: dict) -> list[str]:
        return [item["code"] for item in result["reasons"]]


# The simulated agent's token counts follow the length of the text it writes, run dir paths
# included, so a retry dir's longer name shows in them: they are left out with the timings.
TIMING_KEYS = ("wall_time_s", "created_at", "parallelism", "tokens")


def without_timings(value):
    """The summary with wall times, creation times, timing-derived numbers and tokens left out."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timings(item) for item in value]
    return value


# What the end-to-end tests run on unless one names a fixture (run_runner, shared_run,
# runner_argv, RunSetCase.runner): a fixture of two shards, made in process as
# `fixtures/generate.py --shards 2` makes it, on first use, and removed when the module's
# tests end. What a rule, a run set or the runner with an agent's processes does seldom
# depends on the fixture's size, and every shard costs every run a child's processes, model
# calls and replays.
SMALL_FIXTURES = os.path.join(tempfile.gettempdir(), f"swarm-fanout-tests-{os.getpid()}-two-shards")
TWO_SHARDS = os.path.join(SMALL_FIXTURES, "json-events")


def two_shard_fixture(name: str = "json-events") -> str:
    """The generated fixture `name` (json-events or csv-metrics) of two shards."""
    fixture = os.path.join(SMALL_FIXTURES, name)
    if not os.path.exists(fixture):
        if not os.path.exists(SMALL_FIXTURES):
            unittest.addModuleCleanup(shutil.rmtree, SMALL_FIXTURES, ignore_errors=True)
        kind = generate.KINDS_BY_NAME[name]
        generate.write_fixture(kind, Path(SMALL_FIXTURES), 2, generate.DEFAULT_BASE_SEED)
    return fixture


class RunSetCase(RunnerTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.env.update(SIMULATED_FLAKY_SEED="11", SIMULATED_FLAKY_P="0.5")

    def runner(self, *args: str, model: str | None = "simulated/flaky", fixture=TWO_SHARDS):
        if fixture == TWO_SHARDS:
            two_shard_fixture()
        argv = ["--agent-bin", SIMULATED, "--out", self.out, "--agent-config", self.agent_config]
        if model:
            argv += ["--model", model]
        if fixture:
            argv += ["--fixture", fixture]
        done = runner_server.run([*argv, *args], cwd=self.tmp, env=self.env, timeout=120)
        return done, json.loads(done.stdout) if done.stdout.strip() else None

    def shared_set(self, *args: str) -> tuple[SharedRun, str]:
        """A run set of simulated/flaky on the two-shard fixture that tests only read
        (shared_run's), and its dir: the one set in its out dir that is not a baseline."""
        shared = self.shared_run("simulated/flaky", None, *args)
        out = os.path.join(shared.tmp, "runs")
        (name,) = [name for name in os.listdir(out) if "baseline" not in name]
        return shared, os.path.join(out, name)

    def copied_set(self, set_dir: str, *trials: str) -> str:
        """A stored run set copied into this test's temp dir with only the trial dirs named:
        what the set is after those trials ran and before any other did."""
        copy = os.path.join(self.tmp, "set")
        os.mkdir(copy)
        shutil.copy(os.path.join(set_dir, "run-set.json"), copy)
        for trial in trials:
            shutil.copytree(os.path.join(set_dir, trial), os.path.join(copy, trial), symlinks=True)
        return copy

    def trial_results(self, set_dir: str) -> dict[str, dict]:
        found = {}
        for name in sorted(os.listdir(set_dir)):
            path = os.path.join(set_dir, name, "result.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    found[name] = json.load(handle)
        return found


class SameVerdictsCase(RunnerTestCase):
    """Behaviours under one drive (a subclass's `drive`) run sandboxed and not get the same
    verdict: the sandbox changes where the agent runs, never what is scored. A subclass's
    tests take behaviours chosen for what the sandbox changes under them (the files they
    write, the processes they leave, what they reach over the network) and check on both
    runs what else the behaviour asks of a run (its documented verdict, a process it leaves
    ended); the verdict of every other behaviour is checked once per drive it matters for
    elsewhere (test_runner_cheats, test_runner_resident, test_runner_acp). One module per
    drive, so that the suite runs the two side by side. Where bwrap cannot run, only the
    unsandboxed run is made and the comparison is skipped."""

    drive = "oneshot"

    def sandboxed_and_not(self, behaviour: str) -> list[dict]:
        """The results of `behaviour` on two shards sandboxed (where bwrap runs) and not, run
        side by side; each left no process, and they have the same verdict."""
        flags = ["--sandbox", "--no-sandbox"]
        if not sandbox.availability().usable:
            flags.remove("--sandbox")
        model, fixture = f"simulated/{behaviour}", two_shard_fixture()
        extra = ["--drive", self.drive, *GRACE, *(HANG_TIMEOUT if behaviour == "hang" else ())]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            runs = {
                flag: pool.submit(self.run_runner, model, fixture, *extra, flag) for flag in flags
            }
        verdicts = {}
        for flag, run in runs.items():
            done, result = run.result()
            self.assertEqual(result["sandbox"]["enabled"], flag == "--sandbox")
            self.assertEqual(result["cleanup"]["leaked_processes"], 0, flag)
            verdicts[flag] = done.returncode, result["resolved"], self.codes(result)
        with self.subTest(behaviour=behaviour, drive=self.drive):
            if "--sandbox" not in verdicts:
                self.skipTest(f"no sandbox here: {sandbox.availability().problem}")
            self.assertEqual(verdicts["--sandbox"], verdicts["--no-sandbox"])
        return [run.result()[1] for run in runs.values()]
