"""Fixtures: a set of data shards, one question and answer per shard, and the prompt.

A fixture dir holds `fixture.json` (never shown to the agent), `task.txt` (the
orchestration prompt) and `shards/`. A captured run holds only `fixture.json`,
which is all that scoring needs (`load_manifest`). It also says what a distinctive answer
is (`why_not_distinctive`; docs/fixtures.md "Distinctive answers"): one that an honest
prompt, cell or reply is unlikely to hold by chance.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections import Counter
from collections.abc import Set
from typing import NamedTuple

from swarm_fanout import tasks
from swarm_fanout.evidence.number_tokens import numbers_in

MANIFEST = "fixture.json"
TASK = "task.txt"
SHARDS_DIR = "shards"
MAX_MANIFEST_BYTES = 1024 * 1024
# Names the product refuses for a subagent (contract §9 "Names").
RESERVED_WORKER_NAMES = ("*", "all", "broadcast")


class FixtureError(Exception):
    """A fixture that cannot be used, with a stable code and a human sentence."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class Shard(NamedTuple):
    file: str
    worker: str
    question: str
    expected: int


class Fixture(NamedTuple):
    name: str
    artifact: str
    shards: tuple[Shard, ...]
    root: str
    task: str | None = None


# What makes an answer distinctive, in the order `why_not_distinctive` says it. Below the
# floor lie the numbers any task or cell is full of (counts, indices, ports, timeouts); round
# numbers, powers of two and years are what people write without computing anything.
DISTINCTIVE_FLOOR = 1000
ROUND_TO = 10
YEARS = range(1900, 2101)


class UndistinctiveAnswer(NamedTuple):
    """A shard whose expected answer is not distinctive, and why."""

    file: str
    reason: str


def why_not_distinctive(answer: int, harness_numbers: Set[int]) -> str | None:
    """Why `answer` is a number an honest prompt, cell or reply may hold by chance, or None
    when it is distinctive. `harness_numbers`: the number tokens of `harness_texts`."""
    if answer < DISTINCTIVE_FLOOR:
        return f"below {DISTINCTIVE_FLOOR}"
    if answer % ROUND_TO == 0:
        return f"a multiple of {ROUND_TO}"
    if answer & (answer - 1) == 0:
        return "a power of two"
    if answer in YEARS:
        return f"a year ({YEARS.start}-{YEARS.stop - 1})"
    if answer in harness_numbers:
        return "a number the harness itself writes into the run"
    return None


def harness_texts(fixture: Fixture) -> tuple[str, ...]:
    """Every text the harness itself writes into a run for the agent to see: the task prompt
    (task.txt, when the fixture has one), the single-agent prompt of --baseline (fixtures/tasks.py),
    each shard's file, worker and question, and the fixture's name (the run repo's commit
    message, shell/rundir.py). What else the runner's processes show the agent holds no number of
    DISTINCTIVE_FLOOR or more: the proxy's HTTP statuses (shell/proxy.py), and the test doubles'
    shard positions and sleep seconds (scripted/model.py, simulated/)."""
    shards = [tasks.Shard(shard.file, None, shard.question) for shard in fixture.shards]
    return (
        *((fixture.task,) if fixture.task is not None else ()),
        tasks.baseline_prompt(shards, fixture.artifact),
        f"fixture {fixture.name}",
        *(text for shard in fixture.shards for text in (shard.file, shard.worker, shard.question)),
    )


def harness_numbers(fixture: Fixture) -> frozenset[int]:
    """The number tokens (evidence/number_tokens.py) of every text the harness writes into a run."""
    return frozenset(numbers_in("\n".join(harness_texts(fixture))))


def undistinctive_answers(fixture: Fixture) -> tuple[UndistinctiveAnswer, ...]:
    """The shards whose expected answers are not distinctive, in fixture order. An answer
    another shard shares is not distinctive either: found in a reply, it names no shard."""
    printed = harness_numbers(fixture)
    shared = Counter(shard.expected for shard in fixture.shards)
    found = []
    for shard in fixture.shards:
        why = why_not_distinctive(shard.expected, printed)
        if why is None and shared[shard.expected] > 1:
            why = "another shard's answer too"
        if why is not None:
            found.append(UndistinctiveAnswer(shard.file, why))
    return tuple(found)


def manifest_path(path: str) -> str:
    return path if os.path.basename(path) == MANIFEST else os.path.join(path, MANIFEST)


def load_manifest(path: str) -> Fixture:
    """Read and validate `fixture.json` (a path to it, or to the dir holding it), with the
    `task.txt` beside it when there is one: a regrade then judges the answers against the
    same harness texts as the run did (`undistinctive_answers`)."""
    manifest = manifest_path(path)
    try:
        with open(manifest, "rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise FixtureError("fixture_not_found", f"no {MANIFEST} at {manifest}") from None
    except OSError as error:
        raise FixtureError("fixture_not_found", f"cannot read {manifest}: {error}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise FixtureError("fixture_json_invalid", f"{manifest} is over {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise FixtureError("fixture_json_invalid", f"{manifest} is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise FixtureError("fixture_json_invalid", f"{manifest} is not a JSON object")
    for key in ("name", "artifact", "shards"):
        if key not in data:
            raise FixtureError("fixture_key_missing", f"{manifest} has no {key!r}")
    name = _text(data, "name", manifest)
    artifact = _safe_file_name(_text(data, "artifact", manifest), "artifact", manifest)
    shards = data["shards"]
    if not isinstance(shards, list) or not shards:
        raise FixtureError("fixture_bad_value", f"{manifest}: 'shards' must be a non-empty list")
    parsed = tuple(_shard(entry, index, manifest) for index, entry in enumerate(shards))
    _require_unique(parsed, manifest)
    root = os.path.dirname(os.path.abspath(manifest))
    return Fixture(name, artifact, parsed, root, _task_beside(root))


def load_fixture(path: str) -> Fixture:
    """A fixture the runner can launch: manifest, a task.txt with text, every shard file,
    and the two agreeing (`check_fixture`), so that a fixture edited wrong is refused, never
    scored as the model's failure."""
    fixture = load_manifest(path)
    if fixture.task is None or not fixture.task.strip():
        task_file = os.path.join(fixture.root, TASK)
        raise FixtureError("fixture_task_missing", f"{task_file} is missing, unreadable or empty")
    for shard in fixture.shards:
        shard_file = os.path.join(fixture.root, SHARDS_DIR, shard.file)
        if not os.path.isfile(shard_file) or os.path.islink(shard_file):
            raise FixtureError("fixture_shard_missing", f"shard file {shard_file} is missing")
    check_fixture(fixture)
    return fixture


def check_fixture(fixture: Fixture) -> None:
    """The prompt against the manifest, then every answer recomputed from its shard with the
    task language's own evaluation (fixtures/tasks.py); the first difference is raised. A
    shard line of task.txt must name the manifest's file, worker and question, in its order:
    the agent reads the one, the run is scored against the other."""
    listed = tasks.parse_shards(fixture.task or "")
    task_file = os.path.join(fixture.root, TASK)
    pairs = itertools.zip_longest(fixture.shards, listed)
    for number, (shard, line) in enumerate(pairs, start=1):
        if line is None:
            raise FixtureError(
                "fixture_prompt_mismatch",
                f"{task_file} has {len(listed)} shard lines; fixture.json has "
                f"{len(fixture.shards)} shards: shard {number}, {shard.file}, has no line",
            )
        if shard is None:
            raise FixtureError(
                "fixture_prompt_mismatch",
                f"{task_file} lists shard {line.file!r} (line {number}), which "
                "fixture.json does not have",
            )
        for field in ("file", "worker", "question"):
            said = getattr(line, field)
            if said != getattr(shard, field):
                raise FixtureError(
                    "fixture_prompt_mismatch",
                    f"{task_file}, shard line {number}: {field} {said!r}; fixture.json's shard "
                    f"{number} has {getattr(shard, field)!r}",
                )
    for shard in fixture.shards:
        path = os.path.join(fixture.root, SHARDS_DIR, shard.file)
        if tasks.answer_expression(shard.question) is None:
            raise FixtureError(
                "fixture_question_unknown",
                f"{shard.file}: {shard.question!r} is no question of the task language "
                "(QUESTIONS in swarm_fanout/tasks.py), so its answer cannot be checked",
            )
        answer = tasks.compute_answer(path, shard.question)
        if answer == tasks.UNKNOWN:
            raise FixtureError(
                "fixture_shard_unreadable",
                f"{shard.file}: its records do not answer {shard.question!r} (a field or "
                "value the shard lacks, or a line that is not a record)",
            )
        if answer != str(shard.expected):
            raise FixtureError(
                "fixture_answer_wrong",
                f"{shard.file}: fixture.json expects {shard.expected}, its records give "
                f"{answer} ({shard.question})",
            )


def _task_beside(root: str) -> str | None:
    """task.txt of the fixture dir, or None where it is missing (a captured run holds none),
    not a regular file (a FIFO is never opened) or not UTF-8."""
    path = os.path.join(root, TASK)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def _shard(entry: object, index: int, manifest: str) -> Shard:
    where = f"{manifest}: shards[{index}]"
    if not isinstance(entry, dict):
        raise FixtureError("fixture_bad_value", f"{where} is not an object")
    for key in ("file", "worker", "question", "expected"):
        if key not in entry:
            raise FixtureError("fixture_key_missing", f"{where} has no {key!r}")
    file = _safe_file_name(_text(entry, "file", where), "file", where)
    worker = _text(entry, "worker", where)
    if len(worker) > 64 or worker in RESERVED_WORKER_NAMES:
        raise FixtureError("fixture_bad_value", f"{where}: worker {worker!r} is not a valid name")
    question = _text(entry, "question", where)
    expected = entry["expected"]
    if not isinstance(expected, int) or isinstance(expected, bool):
        raise FixtureError("fixture_bad_value", f"{where}: expected {expected!r} is not an integer")
    return Shard(file, worker, question, expected)


def _text(data: dict, key: str, where: str) -> str:
    value = data[key]
    if not isinstance(value, str) or not value.strip():
        raise FixtureError("fixture_bad_value", f"{where}: {key!r} must be a non-empty string")
    return value


def _safe_file_name(value: str, key: str, where: str) -> str:
    """A plain file name: no directory part, no NUL, no `.` or `..`, nothing hidden, no space
    around it."""
    if any(char in value for char in "/\\\0") or value.startswith(".") or value != value.strip():
        raise FixtureError("fixture_unsafe_path", f"{where}: {key} {value!r} is not a plain name")
    return value


def _require_unique(shards: tuple[Shard, ...], manifest: str) -> None:
    for attribute in ("file", "worker"):
        seen: set[str] = set()
        for shard in shards:
            value = getattr(shard, attribute)
            if value in seen:
                raise FixtureError(
                    f"fixture_duplicate_{attribute}", f"{manifest}: {attribute} {value!r} repeats"
                )
            seen.add(value)


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
