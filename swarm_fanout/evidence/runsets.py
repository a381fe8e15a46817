"""A run set on disk, read: its config (`run-set.json`), its trials' attempts and their
results, and its summary. Never raises but for `RunSetError`, a config that cannot be used.

A run set is `runs/<run-id>/` holding `run-set.json` (what every trial must share),
one run dir per trial attempt (`trial-<n>`, and `trial-<n>-retry<m>` when an
earlier attempt was killed before it wrote `result.json`) and `summary.json`.
shell/trials.py writes and schedules it; reporting/summary.py summarises it.
"""

from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

from swarm_fanout.evidence.jsonl import read_json_object
from swarm_fanout.evidence.runpaths import RunPaths

MAX_RESULT_BYTES = 64 * 1024 * 1024  # result and summary files (verdict lists are capped)

RUN_SET_FILE = "run-set.json"
SUMMARY_FILE = "summary.json"
# What must agree between a stored run set and a trial or resume of it.
MATCHED_KEYS = ("fixture_digest", "harness_version", "model", "drive", "baseline")
ATTEMPT = re.compile(r"trial-(?P<n>[1-9][0-9]*)(?:-retry(?P<m>[1-9][0-9]*))?")
# A trial whose agent failed on its own (rules/triage.py) or could not be run at all: an error of
# its environment, kept apart from the scores and run again by a resume.
ERRORED = ("agent_error", "agent_not_run")


class RunSetError(Exception):
    """A run set that cannot be used as asked: exit 2 with this sentence."""


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


def mismatches(stored: dict, wanted: dict) -> list[str]:
    """Every matched key whose value differs, as `key: stored X, now Y`."""
    return [
        f"{key}: stored {stored.get(key)!r}, now {wanted.get(key)!r}"
        for key in MATCHED_KEYS
        if stored.get(key) != wanted.get(key)
    ]


class Attempt(NamedTuple):
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
            result = read_json_object(RunPaths.of(path).result, [], max_bytes=MAX_RESULT_BYTES)
            found.append(Attempt(int(match["n"]), int(match["m"] or 0), path, result))
    return sorted(found, key=lambda item: (item.index, item.retry))


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


def read_summary(set_dir: str) -> dict | None:
    """The set's summary, or None where it is missing or unreadable."""
    return read_json_object(os.path.join(set_dir, SUMMARY_FILE), [], max_bytes=MAX_RESULT_BYTES)


def injected(record: dict | None) -> tuple[tuple[str, int], ...]:
    """The failures --inject-failure asked for, as (worker, calls): a run set's config keeps
    them as `inject_failure`, a run's result as `injected_failures.asked` (each a list of
    `{"worker", "calls"}`); () when none, or when what is there is not that shape."""
    record = record if isinstance(record, dict) else {}
    asked = record.get("inject_failure")
    if asked is None:
        asked = (record.get("injected_failures") or {}).get("asked")
    if not isinstance(asked, list):
        return ()
    return tuple(
        (item["worker"], item["calls"])
        for item in asked
        if isinstance(item, dict)
        and isinstance(item.get("worker"), str)
        and isinstance(item.get("calls"), int)
    )
