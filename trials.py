"""Repeated trials of one fixture: the run set's dir, its config, its trials and its summary.

A run set is `runs/<run-id>/` holding `run-set.json` (what every trial must share),
one run dir per trial attempt (`trial-<n>`, and `trial-<n>-retry<m>` when an
earlier attempt was killed before it wrote `result.json`) and `summary.json`. A
trial is exactly one runner.py run with its run dir given; the run set launches
each as its own `runner.py --run-set DIR --trial-index N` process, so trials of one
set can as well be spread over machines by a batch scheduler.

The summary is a pure function of the config and the trials' results.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

import stats
import tasks
import timeline
from cli import print_note
from fixture import Fixture
from jsonl import read_json_object
from runpaths import RunPaths

MAX_RESULT_BYTES = 64 * 1024 * 1024  # result and summary files (verdict lists are capped)

RUN_SET_FILE = "run-set.json"
SUMMARY_FILE = "summary.json"
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
# The agent's env names the trial, so a simulated agent can draw per trial (simulated/run.py).
TRIAL_ENV = "SWARM_FANOUT_TRIAL"
# What must agree between a stored run set and a trial or resume of it.
MATCHED_KEYS = ("fixture_digest", "harness_version", "model", "drive", "baseline")
ATTEMPT = re.compile(r"trial-(?P<n>[1-9][0-9]*)(?:-retry(?P<m>[1-9][0-9]*))?")
POLL_S = 0.02  # how soon a finished trial frees its slot for the next
EXIT_RESOLVED, EXIT_UNRESOLVED, EXIT_AGENT = 0, 1, 3
# A trial whose agent failed on its own (triage.py) or could not be run at all: an error of
# its environment, kept apart from the scores and run again by a resume.
ERRORED = ("agent_error", "agent_not_run")


class RunSetError(Exception):
    """A run set that cannot be used as asked: exit 2 with this sentence."""


def baseline_task(fixture: Fixture) -> str:
    """The single-agent prompt: the same questions and artifact, answered by the agent itself."""
    shards = [tasks.Shard(shard.file, None, shard.question) for shard in fixture.shards]
    return tasks.baseline_prompt(shards, fixture.artifact)


def fixture_digest(root: str) -> str:
    """sha256 over every file of the fixture dir, in sorted relative-path order: for each
    file its relative path, a NUL, its size in decimal, a NUL and its bytes."""
    files = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name != ".git"]
        files.extend(os.path.relpath(os.path.join(directory, name), root) for name in names)
    digest = hashlib.sha256()
    for relative in sorted(files):
        with open(os.path.join(root, relative), "rb") as handle:
            data = handle.read()
        digest.update(f"{relative}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


# --- the run set on disk ----------------------------------------------------------------------


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


def load_config(set_dir: str) -> dict | None:
    try:
        with open(os.path.join(set_dir, RUN_SET_FILE), encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise RunSetError(f"cannot read {RUN_SET_FILE} in {set_dir}: {error}") from None
    if not isinstance(config, dict) or not all(key in config for key in MATCHED_KEYS):
        raise RunSetError(f"{os.path.join(set_dir, RUN_SET_FILE)} is not a run-set config")
    return config


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


def mismatches(stored: dict, wanted: dict) -> list[str]:
    """Every matched key whose value differs, as `key: stored X, now Y`."""
    return [
        f"{key}: stored {stored.get(key)!r}, now {wanted.get(key)!r}"
        for key in MATCHED_KEYS
        if stored.get(key) != wanted.get(key)
    ]


@dataclass(frozen=True)
class Attempt:
    index: int
    retry: int
    dir: str
    result: dict | None


def attempts(set_dir: str) -> list[Attempt]:
    """Every trial dir of the set, by trial index then retry."""
    found = []
    for name in sorted(os.listdir(set_dir)):
        match = ATTEMPT.fullmatch(name)
        path = os.path.join(set_dir, name)
        if match and os.path.isdir(path):
            found.append(Attempt(int(match["n"]), int(match["m"] or 0), path, _read_result(path)))
    return sorted(found, key=lambda item: (item.index, item.retry))


def _read_result(run_dir: str) -> dict | None:
    return _read_object(RunPaths.of(run_dir).result)


def _read_object(path: str) -> dict | None:
    """A JSON object file the runner wrote, or None when it is missing or unreadable."""
    if not os.path.lexists(path):
        return None
    return read_json_object(path, [], max_bytes=MAX_RESULT_BYTES)


def is_done(attempt: Attempt) -> bool:
    """A trial is done once an attempt wrote a result that was not interrupted and not an
    error of the agent's own. A dir with no result is a killed attempt; an interrupted or
    errored one is run again too."""
    result = attempt.result
    return result is not None and not result.get("interrupted") and not errored(result)


def errored(result: dict | None) -> bool:
    """The agent failed on its own or could not be run, and no signal stopped it."""
    return bool(result) and result.get("status") in ERRORED and not result.get("interrupted")


def latest_by_trial(found: list[Attempt]) -> dict[int, Attempt]:
    """Per trial index, its done attempt if any, else its latest attempt with a result."""
    chosen: dict[int, Attempt] = {}
    for attempt in found:
        current = chosen.get(attempt.index)
        if attempt.result is None or (current is not None and is_done(current)):
            continue
        chosen[attempt.index] = attempt
    return chosen


def next_trial_dir(set_dir: str, index: int, found: list[Attempt]) -> str:
    """`trial-<n>`, or `trial-<n>-retry<m>` beside the attempts already there: a killed
    attempt's dir is left as it is, for the record, and never reused."""
    retries = [attempt.retry for attempt in found if attempt.index == index]
    if not retries:
        return os.path.join(set_dir, f"trial-{index}")
    return os.path.join(set_dir, f"trial-{index}-retry{max(retries) + 1}")


# --- running the set --------------------------------------------------------------------------


def run_trials(
    set_dir: str, config: dict, overrides: list[str], jobs: int, interrupt
) -> int | None:
    """Run every trial of the set not done yet, `jobs` at a time, each as its own runner.py.

    Returns the signal number when interrupted (running trials get the signal, end their
    trees and write their results; no new trial starts), else None.
    """
    found = attempts(set_dir)
    pending = [
        index
        for index in range(1, config["trials"] + 1)
        if not any(is_done(attempt) for attempt in found if attempt.index == index)
    ]
    total = config["trials"]
    running: dict[int, subprocess.Popen] = {}
    forwarded = 0
    while pending or running:
        while pending and len(running) < jobs and not interrupt.signum:
            index = pending.pop(0)
            argv = [sys.executable, RUNNER, "--run-set", set_dir, "--trial-index", str(index)]
            running[index] = subprocess.Popen(
                [*argv, *overrides], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
            _say(f"trial {index}/{total} started")
        if interrupt.signum and interrupt.signum != forwarded:
            forwarded = interrupt.signum
            pending.clear()
            for process in running.values():
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(forwarded)
        for index, process in list(running.items()):
            if process.poll() is not None:
                del running[index]
                _say(f"trial {index}/{total} finished: {_outcome(process.returncode)}")
        if running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                next(iter(running.values())).wait(timeout=POLL_S)
    return interrupt.signum or None


def _outcome(exit_code: int) -> str:
    words = {0: "resolved", 1: "not resolved", 2: "invalid", 3: "agent error"}
    return f"{words.get(exit_code, 'interrupted')} (exit {exit_code})"


def _say(message: str) -> None:
    print_note(f"runner.py: {message}")


# --- the summary (pure) -----------------------------------------------------------------------


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the summary sees it: its chosen attempt's result and its timeline."""

    index: int
    dir: str | None
    attempts: int
    result: dict | None
    max_concurrent: int | None = None
    parallelism: float | None = None


def _scored(record: TrialRecord) -> bool:
    result = record.result
    return bool(result) and result.get("status") == "scored" and not result.get("interrupted")


def _efficiency(result: dict | None, key: str):
    verdict = (result or {}).get("verdict") or {}
    return (verdict.get("efficiency") or {}).get(key)


def _wall(result: dict | None):
    return ((result or {}).get("agent") or {}).get("wall_time_s")


def summarize(config: dict, records: list[TrialRecord], interrupted: int = 0) -> dict:
    """The run set's evidence: resolve rate and its interval, pass@k and pass^k for every
    k up to the n scored trials, failures by reason code, distributions, and the exit code.
    Errored trials (the agent failed on its own) are counted apart, in none of the
    estimates: an environment failure says nothing about the model."""
    scored = [record for record in records if _scored(record)]
    n = len(scored)
    c = sum(1 for record in scored if record.result.get("resolved"))
    low, high = stats.wilson_interval(c, n)
    failures: Counter = Counter()
    errors: Counter = Counter()
    for record in records:
        codes = {item.get("code") for item in (record.result or {}).get("reasons") or []}
        if record.result is None:
            failures["not_run"] += 1
        elif errored(record.result):
            errors.update(codes)
        elif not record.result.get("resolved"):
            failures.update(codes)
    summary = {
        "run_set": config,
        "trials_planned": config["trials"],
        "trials_scored": n,
        "trials_errored": sum(1 for record in records if errored(record.result)),
        "resolved": c,
        "resolve_rate": c / n if n else None,
        "resolve_rate_ci95": [low, high],
        "pass_at_k": {str(k): stats.pass_at_k(n, c, k) for k in range(1, n + 1)},
        "pass_hat_k": {str(k): stats.pass_hat_k(n, c, k) for k in range(1, n + 1)},
        "failures": dict(sorted(failures.items())),
        "errors": dict(sorted(errors.items())),
        "tokens": stats.distribution(
            _efficiency(r.result, "total_tokens") for r in scored
        ).to_json(),
        "turns": stats.distribution(_efficiency(r.result, "total_turns") for r in scored).to_json(),
        "wall_time_s": stats.distribution(_wall(r.result) for r in scored).to_json(),
        "max_concurrent_children": stats.distribution(r.max_concurrent for r in scored).to_json(),
        "parallelism": stats.distribution(r.parallelism for r in scored).to_json(),
        "agent_versions": sorted(
            {str(((r.result or {}).get("agent") or {}).get("version")) for r in records if r.result}
        ),
        "trials": [
            {
                "index": record.index,
                "dir": record.dir,
                "attempts": record.attempts,
                "status": (record.result or {}).get("status", "not_run"),
                "resolved": bool((record.result or {}).get("resolved")),
                "exit_code": (record.result or {}).get("exit_code"),
                "reasons": sorted(
                    {item.get("code") for item in (record.result or {}).get("reasons") or []}
                ),
                "tokens": _efficiency(record.result, "total_tokens"),
                "turns": _efficiency(record.result, "total_turns"),
                "wall_time_s": _wall(record.result),
                "max_concurrent_children": record.max_concurrent,
                "parallelism": record.parallelism,
            }
            for record in records
        ],
        "overhead": None,
    }
    summary["exit_code"] = set_exit_code(records, interrupted)
    return summary


def set_exit_code(records: list[TrialRecord], interrupted: int) -> int:
    """The signal's code when interrupted; 0 only when every trial resolved; 3 when every
    trial that did not resolve is errored (the agent failed on its own or could not be run);
    else 1: some trial was scored and not resolved, or never ran."""
    if interrupted:
        return 128 + interrupted
    results = [record.result for record in records]
    unresolved = [result for result in results if not (result and result.get("resolved"))]
    if not unresolved:
        return EXIT_RESOLVED if results else EXIT_UNRESOLVED
    return EXIT_AGENT if all(errored(result) for result in unresolved) else EXIT_UNRESOLVED


def overhead(fanout: dict, baseline: dict, fanout_dir: str, baseline_dir: str) -> dict:
    """Fan-out over single-agent baseline, medians of the same fixture digest and model."""
    return {
        "fanout_run_set": fanout_dir,
        "baseline_run_set": baseline_dir,
        **{
            key: stats.ratio(fanout[key]["median"], baseline[key]["median"])
            for key in ("tokens", "turns", "wall_time_s")
        },
    }


# --- the summary of a run set on disk ---------------------------------------------------------


def trial_records(set_dir: str, config: dict, timelines: dict[str, tuple]) -> list[TrialRecord]:
    """Every trial index of the config with its chosen attempt; `timelines` maps a run dir to
    its (max concurrent children, parallelism)."""
    found = attempts(set_dir)
    chosen = latest_by_trial(found)
    records = []
    for index in range(1, config["trials"] + 1):
        attempt = chosen.get(index)
        shape = timelines.get(attempt.dir, (None, None)) if attempt else (None, None)
        records.append(
            TrialRecord(
                index=index,
                dir=os.path.relpath(attempt.dir, set_dir) if attempt else None,
                attempts=sum(1 for item in found if item.index == index),
                result=attempt.result if attempt else None,
                max_concurrent=shape[0],
                parallelism=shape[1],
            )
        )
    return records


def find_counterpart(set_dir: str, config: dict) -> tuple[str, dict] | None:
    """The newest summarized run set beside this one with the same fixture digest and model
    and the other baseline flag."""
    parent = os.path.dirname(os.path.abspath(set_dir))
    candidates = []
    for name in sorted(os.listdir(parent)):
        other = os.path.join(parent, name)
        if other == os.path.abspath(set_dir) or not os.path.isdir(other):
            continue
        try:
            other_config = load_config(other)
        except RunSetError:
            continue
        summary = read_summary(other)
        if (
            other_config
            and summary
            and other_config["fixture_digest"] == config["fixture_digest"]
            and other_config["model"] == config["model"]
            and other_config["baseline"] != config["baseline"]
        ):
            candidates.append((other_config.get("created_at", ""), other, summary))
    if not candidates:
        return None
    _, other, summary = max(candidates)
    return other, summary


def read_summary(set_dir: str) -> dict | None:
    return _read_object(os.path.join(set_dir, SUMMARY_FILE))


def with_overhead(set_dir: str, config: dict, summary: dict) -> dict:
    counterpart = find_counterpart(set_dir, config)
    if counterpart is None:
        return summary
    other_dir, other = counterpart
    if config["baseline"]:
        ratios = overhead(other, summary, other_dir, os.path.abspath(set_dir))
    else:
        ratios = overhead(summary, other, os.path.abspath(set_dir), other_dir)
    return dict(summary, overhead=ratios)


def summarize_run_set(set_dir: str, config: dict, interrupted: int = 0) -> dict:
    """The summary of the trials on disk, with the overhead over a baseline beside it."""
    shapes = {}
    for attempt in attempts(set_dir):
        if attempt.result is not None:
            shape = timeline.read_timeline(attempt.dir)
            shapes[attempt.dir] = (shape.max_concurrent, shape.parallelism)
    records = trial_records(set_dir, config, shapes)
    summary = summarize(config, records, interrupted)
    return with_overhead(set_dir, config, summary)
