"""Fixtures: a set of data shards, one question and answer per shard, and the prompt.

A fixture dir holds `fixture.json` (never shown to the agent), `task.txt` (the
orchestration prompt) and `shards/`. A captured run holds only `fixture.json`,
which is all that scoring needs (`load_manifest`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Shard:
    file: str
    worker: str
    question: str
    expected: int


@dataclass(frozen=True)
class Fixture:
    name: str
    artifact: str
    shards: tuple[Shard, ...]
    root: str
    task: str | None = None


def manifest_path(path: str) -> str:
    return path if os.path.basename(path) == MANIFEST else os.path.join(path, MANIFEST)


def load_manifest(path: str) -> Fixture:
    """Read and validate `fixture.json` (a path to it, or to the dir holding it)."""
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
    return Fixture(name, artifact, parsed, os.path.dirname(os.path.abspath(manifest)))


def load_fixture(path: str) -> Fixture:
    """A fixture the runner can launch: manifest, prompt and every shard file."""
    fixture = load_manifest(path)
    task_file = os.path.join(fixture.root, TASK)
    try:
        with open(task_file, encoding="utf-8") as handle:
            task = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise FixtureError("fixture_task_missing", f"cannot read {task_file}: {error}") from None
    if not task.strip():
        raise FixtureError("fixture_task_missing", f"{task_file} is empty")
    for shard in fixture.shards:
        shard_file = os.path.join(fixture.root, SHARDS_DIR, shard.file)
        if not os.path.isfile(shard_file) or os.path.islink(shard_file):
            raise FixtureError("fixture_shard_missing", f"shard file {shard_file} is missing")
    return Fixture(fixture.name, fixture.artifact, fixture.shards, fixture.root, task)


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
    """A plain file name: no directory part, no traversal, nothing hidden."""
    if (
        "/" in value
        or "\\" in value
        or "\0" in value
        or value in (".", "..")
        or value.startswith(".")
        or value != value.strip()
    ):
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
