"""Generated tasks: a fixture per (split, seed, index), made on the fly by fixtures/generate.py.

Task `index` of a split under a seed is one fixture: its kind and shard count drawn from its
own base seed, its shards generated from that same base seed by `generate.generate_fixture`.
Base seeds are laid out so that the splits never share one:

    base_seed = BASE + (2 * seed + SPLIT_BIT[split]) * MAX_TASKS + index

with `index < MAX_TASKS`, so (split, seed, index) -> base seed is one-to-one, and a base
seed's split is the parity of `(base_seed - BASE) // MAX_TASKS`: no train seed is an eval
seed, whatever seeds the two splits run under. BASE lies above every seed the generator's
command line uses by default, so no generated task is a committed fixture. The generator
draws each shard from `shard_seed(base seed, kind, shard, attempt)`, one-to-one in the base
seed, so two splits never draw the same shard either.

A fixture is generated once per process (`generated`, an LRU cache): the taskset's `load`
and the task's `setup` and `finalize` in one process share it; another process regenerates
it, byte for byte, and `finalize` refuses to score when the digest differs (the generator
changed under a running taskset).
"""

from __future__ import annotations

import functools
import hashlib
import json
from random import Random
from typing import NamedTuple

from swarm_fanout import generate
from swarm_fanout.evidence.fixture import Fixture, Shard
from swarm_fanout.tasks import GENERATED_QUESTIONS

SPLITS = ("train", "eval")
SPLIT_BIT = {"train": 0, "eval": 1}
MAX_TASKS = 1_000_000
BASE = 1_000_000_000
MIN_SHARDS, MAX_SHARDS = 2, 64
MAX_RECORDS = 1000
# A shard's file is about 9 KiB (measured, swarm_fanout/bench.py): 512 cached fixtures of
# 2-16 shards hold about 45 MiB, of 64 shards about 300 MiB.
CACHE_SIZE = 512


class Knobs(NamedTuple):
    """What a split's tasks are drawn from: shard counts (inclusive range), fixture kinds,
    question kinds (numbers into GENERATED_QUESTIONS, 1-based, as docs/fixtures.md lists
    them) and records per shard (inclusive range)."""

    shards: tuple[int, int] = (2, 16)
    kinds: tuple[str, ...] = tuple(generate.KINDS_BY_NAME)
    questions: tuple[int, ...] = tuple(range(1, len(GENERATED_QUESTIONS) + 1))
    records: tuple[int, int] = (generate.MIN_RECORDS_PER_SHARD, generate.MAX_RECORDS_PER_SHARD)


class Spec(NamedTuple):
    """One generated task, as its data records it: enough to regenerate it anywhere."""

    kind: str
    shard_count: int
    base_seed: int
    questions: tuple[int, ...]
    records: tuple[int, int]


class Generated(NamedTuple):
    """A generated fixture on this host: the scorer's Fixture (answers included), the files
    the runtime's repo gets, and their digest."""

    fixture: Fixture
    files: dict[str, bytes]
    digest: str


def check_knobs(knobs: Knobs) -> Knobs:
    """The knobs, or ValueError naming the one out of range."""
    low, high = knobs.shards
    if not MIN_SHARDS <= low <= high <= MAX_SHARDS:
        raise ValueError(
            f"shards must be a range within {MIN_SHARDS}..{MAX_SHARDS}, got {low}..{high}"
        )
    unknown = sorted(set(knobs.kinds) - set(generate.KINDS_BY_NAME))
    if not knobs.kinds or unknown:
        raise ValueError(f"fixture kinds must be some of {sorted(generate.KINDS_BY_NAME)}")
    if not knobs.questions or not all(1 <= n <= len(GENERATED_QUESTIONS) for n in knobs.questions):
        raise ValueError(f"question kinds must be some of 1..{len(GENERATED_QUESTIONS)}")
    low, high = knobs.records
    if not generate.MIN_RECORDS_PER_SHARD <= low <= high <= MAX_RECORDS:
        raise ValueError(
            f"records per shard must be a range within {generate.MIN_RECORDS_PER_SHARD}.."
            f"{MAX_RECORDS}, got {low}..{high}"
        )
    return knobs


def base_seed(split: str, seed: int, index: int) -> int:
    """The base seed of task `index` of `split` under `seed` (module docstring)."""
    if split not in SPLIT_BIT:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if seed < 0 or not 0 <= index < MAX_TASKS:
        raise ValueError(f"seed must be >= 0 and index in 0..{MAX_TASKS - 1}")
    return BASE + (2 * seed + SPLIT_BIT[split]) * MAX_TASKS + index


def split_of(seed: int) -> str:
    """The split a base seed belongs to."""
    return SPLITS[(seed - BASE) // MAX_TASKS % 2]


def spec(split: str, seed: int, index: int, knobs: Knobs) -> Spec:
    """Task `index` of `split`: its kind and shard count drawn from its own base seed."""
    base = base_seed(split, seed, index)
    rng = Random(base)
    kind = rng.choice(sorted(knobs.kinds))
    shard_count = rng.randint(*knobs.shards)
    return Spec(kind, shard_count, base, tuple(knobs.questions), tuple(knobs.records))


@functools.lru_cache(maxsize=CACHE_SIZE)
def generated(task: Spec) -> Generated:
    """The fixture of `task`, generated (raises generate.GenerationError)."""
    kind = generate.KINDS_BY_NAME[task.kind]
    draw = generate.Draw(
        tuple(GENERATED_QUESTIONS[n - 1] for n in task.questions), tuple(task.records)
    )
    prompt, shards = generate.generate_fixture(kind, task.shard_count, task.base_seed, draw)
    fixture = Fixture(
        kind.name,
        generate.ARTIFACT,
        tuple(Shard(s.file, s.worker, s.question, s.expected) for s in shards),
        root="",
        task=prompt,
    )
    files = {f"shards/{s.file}": s.content.encode() for s in shards}
    digest = hashlib.sha256(json.dumps(fixture._asdict(), sort_keys=True).encode())
    for path in sorted(files):
        digest.update(f"{path}\0{len(files[path])}\0".encode())
        digest.update(files[path])
    return Generated(fixture, files, digest.hexdigest())
