"""Running a run set: its dir, its stored config (held against the flags of a trial or a
resume: `open_set`), and its trials, each launched as its own
`runner.py --run-set DIR --trial-index N` process, so trials of one set can as well be spread
over machines by a batch scheduler. The layout is read by evidence/runsets.py; the summary is
reporting/summary.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from datetime import datetime, timezone

from swarm_fanout import tasks
from swarm_fanout.evidence.fixture import Fixture, FixtureError, load_fixture
from swarm_fanout.evidence.runsets import (
    RUN_SET_FILE,
    Attempt,
    RunSetError,
    attempts,
    is_done,
    load_config,
)
from swarm_fanout.reporting.terminal import exit_in_words
from swarm_fanout.shell.cli import RunRefused, print_note
from swarm_fanout.shell.launch import agent_version
from swarm_fanout.shell.run_config import RunConfig
from swarm_fanout.shell.rundir import STRIPPED_ENV_PREFIXES, find_agent, utc_now

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runner.py")
# The agent's env names the trial, so a simulated agent can draw per trial (simulated/run.py).
TRIAL_ENV = "SWARM_FANOUT_TRIAL"
POLL_S = 0.02  # how soon a finished trial frees its slot for the next


def baseline_task(fixture: Fixture) -> str:
    """The single-agent prompt: the same questions and artifact, answered by the agent itself."""
    shards = [tasks.Shard(shard.file, None, shard.question) for shard in fixture.shards]
    return tasks.baseline_prompt(shards, fixture.artifact)


def new_run_set_dir(out: str, fixture_name: str, baseline: bool) -> str:
    os.makedirs(out, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    kind = "-baseline" if baseline else ""
    while True:
        root = os.path.join(
            os.path.realpath(out), f"{fixture_name}{kind}-{stamp}-{secrets.token_hex(3)}"
        )
        try:
            os.mkdir(root)
            return root
        except FileExistsError:
            continue


def store_config(set_dir: str, config: dict) -> dict:
    """Write run-set.json unless it exists; return the config that is stored.

    Trials of one set started at once on several machines all try: the first wins
    (a hard link never replaces a file) and the others are checked against it.
    """
    os.makedirs(set_dir, exist_ok=True)
    path = os.path.join(set_dir, RUN_SET_FILE)
    fd, temporary = tempfile.mkstemp(prefix=".run-set-", dir=set_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(config, indent=2) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temporary)
    return load_config(set_dir) or config


def next_trial_dir(set_dir: str, index: int, found: list[Attempt]) -> str:
    """`trial-<n>`, or `trial-<n>-retry<m>` beside the attempts already there: a killed
    attempt's dir is left as it is, for the record, and never reused."""
    retries = [attempt.retry for attempt in found if attempt.index == index]
    if not retries:
        return os.path.join(set_dir, f"trial-{index}")
    return os.path.join(set_dir, f"trial-{index}-retry{max(retries) + 1}")


def run_trials(
    set_dir: str, config: dict, overrides: list[str], jobs: int, interrupt
) -> int | None:
    """Run every trial of the set not done yet, `jobs` at a time, each as its own runner.py.

    Returns the signal number when interrupted: each signal is passed on to the running
    trials (a first one ends their trees and scores them, a second ends them at once) and
    no new trial starts. Each trial runs in a session of its own, so that a Ctrl-C at the
    terminal reaches it once, passed on from here, not also from the terminal.
    """
    found = attempts(set_dir)
    pending = [
        index
        for index in range(1, config["trials"] + 1)
        if not any(is_done(attempt) for attempt in found if attempt.index == index)
    ]
    total = config["trials"]
    running: dict[int, subprocess.Popen] = {}
    forwarded = 0  # signals passed on
    while pending or running:
        while pending and len(running) < jobs and not interrupt.signum:
            index = pending.pop(0)
            argv = [sys.executable, RUNNER, "--run-set", set_dir, "--trial-index", str(index)]
            running[index] = subprocess.Popen(
                [*argv, *overrides],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
            _say(f"trial {index}/{total} started")
        interrupt.ending = f"the {_trials(len(running))} running; no new trial starts"
        interrupt.ending_now = f"the {_trials(len(running))} running now"
        while forwarded < interrupt.count:
            forwarded += 1
            pending.clear()
            for process in running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(interrupt.signum)
        for index, process in list(running.items()):
            if process.poll() is not None:
                del running[index]
                _say(f"trial {index}/{total} finished: {exit_in_words(process.returncode)}")
        if running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                next(iter(running.values())).wait(timeout=POLL_S)
    return interrupt.signum or None


def _trials(count: int) -> str:
    return "1 trial" if count == 1 else f"{count} trials"


def _say(message: str) -> None:
    print_note(f"runner.py: {message}")


def open_set(
    config: RunConfig, set_dir: str | None, why: str, index: int | None = None
) -> tuple[str, dict, RunConfig, Fixture]:
    """The run set's dir, its stored config (stored now from the flags when it has none),
    the flags settled against it, and its fixture. Refused, saying `why`, before anything
    is written when the set cannot be run as asked (for trial `index`, when given)."""
    try:
        stored = load_config(set_dir) if set_dir else None
        if config.resume and stored is None:
            raise RunSetError(f"{set_dir} has no {RUN_SET_FILE}")
        settled = config.settled(stored)
        try:
            fixture = load_fixture(settled.fixture)
        except FixtureError as error:
            raise RunSetError(f"invalid fixture: {error.message}") from None
        _hold(config, settled, stored, fixture, why)
        if index is not None:
            _hold_index(index, (stored or {}).get("trials") or settled.trials, config, why)
        if stored is None or index is None:
            _, missing = find_agent(settled.agent_bin)
            if missing:  # before the set's dir is made: no trial could run
                raise RunRefused(*missing, status="agent_not_run")
        if stored is None:
            set_dir = set_dir or new_run_set_dir(config.out, fixture.name, settled.baseline)
            stored = store_config(set_dir, _new_config(settled, fixture, set_dir))
            # Trials started at once on several machines: the first one's config won.
            settled = config.settled(stored)
            _hold(config, settled, stored, fixture, why)
    except (RunSetError, OSError) as error:
        raise RunRefused("run_set_unusable", f"{why}: {error}") from None
    return set_dir, stored, settled, fixture


def _hold(config: RunConfig, settled: RunConfig, stored, fixture: Fixture, why: str) -> None:
    """Refuse flags that differ from the stored run set's, or name no worker of the fixture."""
    settled.check_workers(fixture)
    differences = settled.differences(stored, fixture, config.trials) if stored else []
    if differences:
        said = "the run set was made with other settings: " + "; ".join(differences)
        raise RunRefused("run_set_settings_differ", f"{why}: {said}")


def _hold_index(index: int, trials: int, config: RunConfig, why: str) -> None:
    """Refuse a --trial-index that is not a trial of the set."""
    if 1 <= index <= trials:
        return
    refusal = f"--trial-index {index} is outside 1..{trials}"
    if index == 0:
        refusal += (
            ": trials count from 1; a zero-based array index (Slurm --array=0-N, Kubernetes' "
            "JOB_COMPLETION_INDEX) is passed as --trial-index $((INDEX + 1))"
        )
    elif config.trials is None:
        refusal += f" (the run set's --trials K; without --trials a new run set has {trials})"
    raise RunRefused("trial_index_out_of_range", f"{why}: {refusal}")


def _new_config(settled: RunConfig, fixture: Fixture, set_dir: str) -> dict:
    agent_bin, _ = find_agent(settled.agent_bin)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
    os.makedirs(set_dir, exist_ok=True)
    version = agent_version(agent_bin, environment, set_dir) if agent_bin else None
    return settled.stored(fixture, agent_bin, version, utc_now())
