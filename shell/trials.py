"""Running a run set: its dir, its stored config, and its trials, each launched as its own
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

from evidence.fixture import Fixture
from evidence.runsets import RUN_SET_FILE, Attempt, attempts, is_done, load_config
from fixtures import tasks
from rules.exit_codes import meaning
from shell.cli import print_note

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
        while forwarded < interrupt.count:
            forwarded += 1
            pending.clear()
            for process in running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(interrupt.signum)
        for index, process in list(running.items()):
            if process.poll() is not None:
                del running[index]
                _say(f"trial {index}/{total} finished: {_outcome(process.returncode)}")
        if running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                next(iter(running.values())).wait(timeout=POLL_S)
    return interrupt.signum or None


def _trials(count: int) -> str:
    return "1 trial" if count == 1 else f"{count} trials"


def _outcome(exit_code: int) -> str:
    return f"{meaning(exit_code)} (exit {exit_code})"


def _say(message: str) -> None:
    print_note(f"runner.py: {message}")
