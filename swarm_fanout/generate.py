"""Generate the swarm-fanout fixtures: data shards, per-shard questions and answers, task prompt.

Each fixture kind (``json-events``, ``csv-metrics``) becomes a directory holding

- ``shards/``: the data files, one per shard (``events-01.jsonl`` ... or ``metrics-01.csv`` ...);
- ``fixture.json``: the name, the artifact the orchestrator must write, and per shard its
  file, worker name, question and expected integer answer;
- ``task.txt``: the orchestration prompt given to the agent under test.

Usage::

    python fixtures/generate.py                # regenerate the committed fixtures in place
    python fixtures/generate.py --out /tmp/fx  # write /tmp/fx/json-events, /tmp/fx/csv-metrics
    python fixtures/generate.py --out /tmp/fx --shards 32 --fixture csv-metrics --seed 7
    python fixtures/generate.py --check DIR    # a fixture dir, or a dir of them: exit 2 if wrong

Everything is deterministic: every shard is drawn from its own ``random.Random`` seeded with an
integer derived from the base seed, the kind's ``seed_offset``, the shard number and an attempt
number. Shard i asks question ((i - 1) mod n) + 1 of the n in ``GENERATED_QUESTIONS``, the task
language of fixtures/tasks.py, where the scripted model and the simulated agent read the same
phrasings; its expected answer is the value of that question's expression over the shard's
records. When a drawn shard cannot support its question, or its answer is not distinctive
(``fixture.why_not_distinctive``: below 1000, a multiple of 10, a power of two, a year, or a
number token the harness writes into the run, such as the shard count or a number in a
question), equals an earlier shard's answer, or its question prints an earlier answer, the
shard is drawn again with the next attempt number. So every answer is distinctive, which the
scorer's provenance rules rely on; the whole fixture is checked once more before it is written.
Only ``randrange``, ``randint``, ``choice`` and ``shuffle`` are used, so the output is identical
on Python 3.10-3.13.

How to add a fixture kind
-------------------------
1. Write ``make_<kind>_records(rng, shard_number, count)`` returning ``count`` records as dicts
   with a fixed key order. String values are what questions filter on and count distinct values
   of; int values are what they sum and maximise. Use only ``rng.randrange``, ``rng.randint``,
   ``rng.choice`` and ``rng.shuffle``, never iterate a set, and keep every number an int.
2. Render the records with ``render_jsonl`` or ``render_csv``, or add a renderer for a new
   format (also teach ``tests/test_fixtures.py`` to read that format).
3. Append a ``FixtureKind`` to ``FIXTURE_KINDS`` with a new ``seed_offset``, the shard file
   prefix and suffix, the ``format`` and ``record definition`` phrases of the task prompt, and
   which fields questions may use (``filter_fields``: small-vocabulary string fields;
   ``distinct_fields``: string fields worth counting distinct values of; ``int_fields``).
4. Run ``python fixtures/generate.py``; in ``tests/test_fixtures.py`` add the new name to
   ``FIXTURE_NAMES`` and its file prefix, suffix and prompt phrases to ``FIXTURE_FORMATS``; run
   the tests (also with ``--shards 128 --out DIR`` by hand, to see the kind scales) and commit
   the generated directory together with the code change.

How to add a question kind
--------------------------
1. Append a ``QuestionKind`` to ``GENERATED_QUESTIONS`` in fixtures/tasks.py: its phrasing, with the
   placeholders of ``tasks.PLACEHOLDERS`` (``ask`` below draws them from the kind's fields), and
   the Python expression over ``records`` that answers it. Its answers must be able to reach
   1000 over 40-150 records (a count cannot: ``tasks.COUNT_QUESTIONS``). The scripted model's
   and the simulated agent's children answer it from then on.
2. Teach the phrasing to the independent evaluator of ``tests/test_fixtures.py`` (``GRAMMAR``
   and the cycle length of ``assert_templates_cycle``), run ``python fixtures/generate.py`` and
   the tests. With eight shards the committed fixtures ask only the first eight questions.

Why one script of this size: it must regenerate the committed fixtures byte for byte, so the
record makers, the question asking, the distinctness rules and the prompt template stay in one
place a reader can check against the committed output.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from random import Random

from swarm_fanout import tasks
from swarm_fanout.evidence import fixture
from swarm_fanout.evidence.number_tokens import numbers_in
from swarm_fanout.tasks import GENERATED_QUESTIONS, QuestionKind

FIXTURES_DIR = (Path(__file__).resolve().parent / "fixtures").resolve()
ARTIFACT = tasks.INDEX_FILE
DEFAULT_BASE_SEED = 20261103
DEFAULT_SHARD_COUNT = 8
# The largest fan-out the tests generate and check (tests/test_fixtures.py).
MAX_SHARD_COUNT = 128
# Small enough that a child reads a shard whole with one short cell.
MIN_RECORDS_PER_SHARD = 40
MAX_RECORDS_PER_SHARD = 150
MAX_ATTEMPTS_PER_SHARD = 20_000
SHARD_EPOCH = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)

Record = dict[str, str | int]


class GenerationError(Exception):
    """The requested fixture cannot be generated (e.g. too many shards for distinct answers)."""


# --------------------------------------------------------------------------- records


def weighted(*pairs: tuple[str, int]) -> tuple[str, ...]:
    """Expand (value, weight) pairs into a tuple that ``rng.choice`` draws from by weight."""
    return tuple(value for value, weight in pairs for _ in range(weight))


def active_subset(rng: Random, pool: tuple[str, ...], low: int) -> list[str]:
    """A random subset of ``pool`` (at least ``low`` members) active in one shard."""
    members = list(pool)
    rng.shuffle(members)
    return sorted(members[: rng.randint(low, len(members))])


def timestamps(rng: Random, shard_number: int, count: int, max_gap_s: int) -> list[str]:
    """``count`` increasing UTC timestamps on the shard's own day."""
    moment = SHARD_EPOCH + dt.timedelta(days=shard_number - 1, seconds=rng.randint(0, 6 * 3600))
    stamps = []
    for _ in range(count):
        moment += dt.timedelta(seconds=rng.randint(1, max_gap_s))
        stamps.append(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return stamps


USERS = tuple(f"u{n:03d}" for n in range(1, 121))
EVENT_TYPES = weighted(
    ("view", 9), ("click", 6), ("search", 4), ("login", 3), ("logout", 2), ("purchase", 2),
    ("error", 1),
)  # fmt: skip
LEVELS = weighted(("info", 14), ("warn", 4), ("error", 2), ("debug", 1))
REGIONS = weighted(("eu-west", 4), ("us-east", 5), ("us-west", 3), ("ap-south", 2))


def event_latency_ms(rng: Random, level: str) -> int:
    """Request latency: mostly fast, with a slow tail that is heavier for warnings and errors."""
    slow_odds = 2 if level in ("warn", "error") else 10
    if rng.randrange(slow_odds) == 0:
        return rng.randint(400, 4800)
    return rng.randint(3, 399)


def make_event_records(rng: Random, shard_number: int, count: int) -> list[Record]:
    """Application events: who did what, how it went, how long it took, how much it moved."""
    users = active_subset(rng, USERS, low=6)
    records: list[Record] = []
    for ts in timestamps(rng, shard_number, count, max_gap_s=240):
        level = rng.choice(LEVELS)
        records.append(
            {
                "ts": ts,
                "user": rng.choice(users),
                "type": rng.choice(EVENT_TYPES),
                "level": level,
                "region": rng.choice(REGIONS),
                "latency_ms": event_latency_ms(rng, level),
                "bytes": rng.randint(128, 65536),
                "retries": rng.choice((0, 0, 0, 0, 0, 0, 1, 1, 2, 3)),
            }
        )
    return records


HOSTS = (
    *(f"web-{n}" for n in range(1, 33)),
    *(f"db-{n}" for n in range(1, 13)),
    *(f"cache-{n}" for n in range(1, 9)),
    *(f"queue-{n}" for n in range(1, 7)),
)
DATACENTERS = ("fra1", "iad2", "sin1")
STATUSES = weighted(("ok", 8), ("degraded", 3), ("down", 1))


def host_datacenter(host: str) -> str:
    """Every host lives in one fixed datacenter."""
    return DATACENTERS[HOSTS.index(host) % len(DATACENTERS)]


def host_cpu_pct(rng: Random, status: str) -> int:
    """CPU load in percent: degraded hosts run hot, down hosts report almost nothing."""
    if status == "degraded":
        return rng.randint(70, 100)
    if status == "down":
        return rng.randint(0, 5)
    return rng.randint(2, 75)


def make_metric_records(rng: Random, shard_number: int, count: int) -> list[Record]:
    """Host metric samples: which host, where, in what state, and its resource usage."""
    hosts = active_subset(rng, HOSTS, low=5)
    records: list[Record] = []
    for ts in timestamps(rng, shard_number, count, max_gap_s=60):
        host = rng.choice(hosts)
        status = rng.choice(STATUSES)
        records.append(
            {
                "host": host,
                "dc": host_datacenter(host),
                "ts": ts,
                "status": status,
                "cpu_pct": host_cpu_pct(rng, status),
                "mem_mb": rng.randint(256, 16384),
                "disk_io": rng.randint(0, 4000),
            }
        )
    return records


def render_jsonl(records: list[Record]) -> str:
    """One flat JSON object per line, keys in record order, every line ending in a newline."""
    return "".join(json.dumps(record) + "\n" for record in records)


def render_csv(records: list[Record]) -> str:
    """A header row then one row per record, ``\\n`` line endings."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(list(records[0]))
    writer.writerows([list(record.values()) for record in records])
    return buffer.getvalue()


# --------------------------------------------------------------------------- fixture kinds


@dataclass(frozen=True)
class FixtureKind:
    """Everything that distinguishes one fixture from another."""

    name: str
    seed_offset: int
    file_prefix: str
    file_suffix: str
    format: str
    record_definition: str
    filter_fields: tuple[str, ...]
    distinct_fields: tuple[str, ...]
    int_fields: tuple[str, ...]
    make_records: Callable[[Random, int, int], list[Record]]
    render: Callable[[list[Record]], str]


FIXTURE_KINDS = (
    FixtureKind(
        name="json-events",
        seed_offset=1,
        file_prefix="events",
        file_suffix=".jsonl",
        format="JSON Lines: one JSON object per line",
        record_definition="one line of a shard",
        filter_fields=("type", "level", "region", "user"),
        distinct_fields=("user",),
        int_fields=("latency_ms", "bytes"),
        make_records=make_event_records,
        render=render_jsonl,
    ),
    FixtureKind(
        name="csv-metrics",
        seed_offset=2,
        file_prefix="metrics",
        file_suffix=".csv",
        format="CSV files with a header row",
        record_definition="one data row of a shard; the header row is not a record",
        filter_fields=("status", "dc", "host"),
        distinct_fields=("host",),
        int_fields=("cpu_pct", "mem_mb", "disk_io"),
        make_records=make_metric_records,
        render=render_csv,
    ),
)
KINDS_BY_NAME = {kind.name: kind for kind in FIXTURE_KINDS}


# --------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Question:
    text: str
    answer: int


def pick_filter(rng: Random, records: list[Record], fields: tuple[str, ...]) -> tuple[str, str]:
    """A (field, value) filter that keeps at least 2 records but not all of them.

    Raises ``LookupError`` when the chosen field has no such value in this shard.
    """
    field = rng.choice(fields)
    counts: dict[str, int] = {}  # insertion-ordered: values in order of first appearance
    for record in records:
        value = str(record[field])
        counts[value] = counts.get(value, 0) + 1
    values = [value for value, n in counts.items() if 2 <= n < len(records)]
    if not values:
        raise LookupError(f"no usable filter value for {field!r}")
    return field, rng.choice(values)


def ask(rng: Random, records: list[Record], kind: FixtureKind, question: QuestionKind) -> Question:
    """Ask ``question`` of this shard, its answer being the value of the question's expression.

    The placeholders are drawn in a fixed order, whatever the phrasing's: ``f`` from
    ``int_fields``, ``h`` from ``distinct_fields``, then the filter ``g``, ``v`` from the
    ``filter_fields`` other than ``h``.
    """
    values: dict[str, str] = {}
    wanted = set(question.placeholders)
    if "f" in wanted:
        values["f"] = rng.choice(kind.int_fields)
    if "h" in wanted:
        values["h"] = rng.choice(kind.distinct_fields)
    if "g" in wanted:
        fields = tuple(field for field in kind.filter_fields if field != values.get("h"))
        values["g"], values["v"] = pick_filter(rng, records, fields)
    text = question.ask(**values)
    answer = tasks.evaluate(text, records)
    if type(answer) is not int:
        raise GenerationError(f"{text!r} is answered by {answer!r}, not an integer")
    return Question(text, answer)


# --------------------------------------------------------------------------- shards


@dataclass(frozen=True)
class Shard:
    file: str
    worker: str
    question: str
    expected: int
    content: str


def shard_stem(kind: FixtureKind, shard_number: int, shard_count: int) -> str:
    width = 3 if shard_count > 99 else 2
    return f"{kind.file_prefix}-{shard_number:0{width}d}"


def shard_seed(base_seed: int, kind: FixtureKind, shard_number: int, attempt: int) -> int:
    """A distinct non-negative integer seed for every (base seed, kind, shard, attempt)."""
    return ((base_seed * 1_000 + kind.seed_offset) * 10_000 + shard_number) * 100_000 + attempt


@dataclass(frozen=True)
class Draw:
    """What a shard is drawn from: the questions shard i cycles through (shard i asks
    ``questions[(i - 1) % len(questions)]``) and the range of its record count. The default
    is the committed fixtures'."""

    questions: tuple[QuestionKind, ...] = GENERATED_QUESTIONS
    records: tuple[int, int] = (MIN_RECORDS_PER_SHARD, MAX_RECORDS_PER_SHARD)


def draw_shard(
    kind: FixtureKind, shard_number: int, seed: int, draw: Draw = Draw()
) -> tuple[list[Record], Question] | None:
    """Draw one candidate shard and ask its template's question, or None if it cannot."""
    rng = Random(seed)
    count = rng.randint(*draw.records)
    records = kind.make_records(rng, shard_number, count)
    question = draw.questions[(shard_number - 1) % len(draw.questions)]
    try:
        return records, ask(rng, records, kind, question)
    except LookupError:
        return None


def generate_shard(
    kind: FixtureKind,
    shard_number: int,
    shard_count: int,
    base_seed: int,
    taken: set[int],
    answers: set[int],
    draw: Draw = Draw(),
) -> Shard:
    """The first drawn shard whose answer is distinctive (``fixture.why_not_distinctive``)
    against the numbers the harness already writes (``taken``) and those of its own task line,
    is no earlier shard's answer (``answers``), and whose task line prints no earlier shard's
    answer. Numbers are number tokens (evidence/number_tokens.py)."""
    stem = shard_stem(kind, shard_number, shard_count)
    for attempt in range(MAX_ATTEMPTS_PER_SHARD):
        seed = shard_seed(base_seed, kind, shard_number, attempt)
        drawn = draw_shard(kind, shard_number, seed, draw)
        if drawn is None:
            continue
        records, question = drawn
        file, worker = stem + kind.file_suffix, f"worker-{stem}"
        printed = numbers_in(tasks.shard_line(file, worker, question.text))
        if (
            fixture.why_not_distinctive(question.answer, taken | printed) is None
            and question.answer not in answers
            and not printed & answers
        ):
            return Shard(file, worker, question.text, question.answer, kind.render(records))
    raise GenerationError(
        f"{kind.name}: no distinct answer for shard {shard_number} after "
        f"{MAX_ATTEMPTS_PER_SHARD} attempts; use fewer shards"
    )


def generate_shards(
    kind: FixtureKind, shard_count: int, base_seed: int, draw: Draw = Draw()
) -> list[Shard]:
    taken = numbers_printed_by_task(kind, shard_count)
    answers: set[int] = set()
    shards = []
    for shard_number in range(1, shard_count + 1):
        shard = generate_shard(kind, shard_number, shard_count, base_seed, taken, answers, draw)
        taken |= numbers_in(shard_line(shard))
        answers.add(shard.expected)
        shards.append(shard)
    return shards


# --------------------------------------------------------------------------- task prompt

TASK_TEMPLATE = """\
You are the orchestrator of a fan-out job in this git repository.

The directory `shards/` holds {shard_count} data shards ({format}). \
A record is {record_definition}. Every shard has its own question. \
Do not answer the questions yourself: delegate each shard to its own RLM subagent \
and use only what the subagents report.

Shards, worker names and questions:

{shard_lines}
How to work:

1. From the ipython tool, spawn exactly one subagent per shard with \
`await rlm(prompt, name="<worker>")`, using the worker name listed for that shard. \
Spawn nothing else. The prompt must name the shard file and its question and tell the \
subagent to answer from that file alone and to report with \
`await agent_message.send("<file>: <answer>", receiver_role="parent")`, \
where <answer> is a single integer.
2. Keep your own run active until every subagent has replied or has been reported as ended \
without a reply: poll with short cells such as `await asyncio.sleep(5)` and do not end your \
turn while any shard is outstanding.
3. If a subagent ends without replying or reports a failure, you may retry that shard once: \
first `await rlm.delete_subagent("<worker>")`, then spawn it again with the same worker name. \
Never spawn a worker name while an earlier subagent of that name is still live.
4. When every shard is accounted for, write `{artifact}` at the repository root with exactly \
one line per shard, in the order above:

   - <file>: <answer>

   where <file> is the shard's file name without the directory (for example \
`{example_file}`) and <answer> is the integer its subagent reported. For a shard whose \
subagent failed even after the retry, write `- <file>: MISSING (<reason>)`.
"""


def shard_line(shard: Shard) -> str:
    return tasks.shard_line(shard.file, shard.worker, shard.question) + "\n"


def render_task(kind: FixtureKind, shard_count: int, shards: list[Shard]) -> str:
    return TASK_TEMPLATE.format(
        shard_count=shard_count,
        format=kind.format,
        record_definition=kind.record_definition,
        shard_lines="".join(shard_line(shard) for shard in shards),
        artifact=ARTIFACT,
        example_file=shard_stem(kind, 1, shard_count) + kind.file_suffix,
    )


def numbers_printed_by_task(kind: FixtureKind, shard_count: int) -> set[int]:
    """The number tokens of the prompt apart from the shard lines (e.g. the shard count, the
    ``5`` of ``asyncio.sleep(5)``, the list markers), and of the fixture's name; those of the
    --baseline prompt and of the run repo's commit are among them. The whole fixture is
    checked against every harness text once it is drawn (``check_distinctive``)."""
    return numbers_in(render_task(kind, shard_count, [])) | numbers_in(kind.name)


def check_distinctive(kind: FixtureKind, task: str, shards: list[Shard]) -> None:
    """Every answer distinctive against every text the harness writes into a run, by the
    definition the fixture loader warns with (evidence/fixture.py)."""
    drawn = fixture.Fixture(
        kind.name,
        ARTIFACT,
        tuple(fixture.Shard(s.file, s.worker, s.question, s.expected) for s in shards),
        root="",
        task=task,
    )
    plain = fixture.undistinctive_answers(drawn)
    if plain:
        named = ", ".join(f"{item.file} ({item.reason})" for item in plain)
        raise GenerationError(f"{kind.name}: answers not distinctive: {named}")


# --------------------------------------------------------------------------- twins


@dataclass(frozen=True)
class Twin:
    """A shard's twin (shell/replay.py): the same question over records drawn anew."""

    file: str
    expected: int
    content: str


def kind_of(file: str) -> FixtureKind | None:
    """The fixture kind whose shards are named like `file`, or None."""
    for kind in FIXTURE_KINDS:
        if file.startswith(kind.file_prefix) and file.endswith(kind.file_suffix):
            return kind
    return None


def twin_seed(digest: str, file: str, attempt: int) -> int:
    """The seed of a twin's `attempt`-th draw: from the fixture's digest and the shard's
    file, so a regrade draws the same twins."""
    return int.from_bytes(hashlib.sha256(f"{digest}\0{file}\0{attempt}".encode()).digest()[:8])


def draw_twin(
    kind: FixtureKind, shard_number: int, question: str, seed: int
) -> tuple[list[Record], int] | None:
    """One candidate twin: records drawn with `seed` and the question's answer over them, or
    None when it has no integer answer there."""
    rng = Random(seed)
    records = kind.make_records(
        rng, shard_number, rng.randint(MIN_RECORDS_PER_SHARD, MAX_RECORDS_PER_SHARD)
    )
    try:
        answer = tasks.evaluate(question, records)
    except (KeyError, TypeError, ValueError):
        return None
    return (records, answer) if type(answer) is int else None


def twins(manifest: fixture.Fixture) -> dict[str, Twin]:
    """A twin for every shard of `manifest` whose file names a fixture kind and whose question
    is of the task language: the same question over records drawn anew, whose answer is no
    shard's answer nor another twin's and, where the shard's own answer is distinctive
    (`fixture.why_not_distinctive`), distinctive too. Deterministic from the fixture's digest,
    so a regrade makes the same twins. Shards without one are left out."""
    digest = fixture.fixture_digest(manifest.root)
    printed = fixture.harness_numbers(manifest)
    taken = {shard.expected for shard in manifest.shards}
    made: dict[str, Twin] = {}
    for number, shard in enumerate(manifest.shards, 1):
        kind = kind_of(shard.file)
        if kind is None or tasks.answer_expression(shard.question) is None:
            continue
        wanted = fixture.why_not_distinctive(shard.expected, printed) is None
        stem = shard.file[len(kind.file_prefix) : -len(kind.file_suffix)].lstrip("-")
        shard_number = int(stem) if stem.isdigit() else number
        for attempt in range(MAX_ATTEMPTS_PER_SHARD):
            drawn = draw_twin(
                kind, shard_number, shard.question, twin_seed(digest, shard.file, attempt)
            )
            if drawn is None:
                continue
            records, answer = drawn
            if answer in taken or (wanted and fixture.why_not_distinctive(answer, printed)):
                continue
            made[shard.file] = Twin(shard.file, answer, kind.render(records))
            taken.add(answer)
            break
    return made


# --------------------------------------------------------------------------- writing


def fixture_manifest(kind: FixtureKind, shards: list[Shard]) -> str:
    manifest = {
        "name": kind.name,
        "artifact": ARTIFACT,
        "shards": [
            {"file": s.file, "worker": s.worker, "question": s.question, "expected": s.expected}
            for s in shards
        ],
    }
    return json.dumps(manifest, indent=2) + "\n"


def write_exact(path: Path, text: str) -> None:
    """Write UTF-8 with the newlines exactly as given, on every platform."""
    path.write_bytes(text.encode("utf-8"))


def generate_fixture(
    kind: FixtureKind, shard_count: int, base_seed: int, draw: Draw = Draw()
) -> tuple[str, list[Shard]]:
    """One fixture in memory, checked: its task prompt and its shards (file, worker, question,
    expected answer, content). What ``write_fixture`` writes; the verifiers taskset generates
    its tasks with it. Raises GenerationError."""
    shards = generate_shards(kind, shard_count, base_seed, draw)
    task = render_task(kind, shard_count, shards)
    check_distinctive(kind, task, shards)
    return task, shards


def write_fixture(kind: FixtureKind, out_dir: Path, shard_count: int, base_seed: int) -> Path:
    """Generate one fixture into ``out_dir/<name>``; stale files in its ``shards/`` go."""
    task, shards = generate_fixture(kind, shard_count, base_seed)
    fixture_dir = out_dir / kind.name
    shards_dir = fixture_dir / "shards"
    shards_dir.mkdir(parents=True, exist_ok=True)
    wanted = {shard.file for shard in shards}
    for path in sorted(shards_dir.iterdir()):
        if path.is_file() and path.name not in wanted:
            path.unlink()
    for shard in shards:
        write_exact(shards_dir / shard.file, shard.content)
    write_exact(fixture_dir / "fixture.json", fixture_manifest(kind, shards))
    write_exact(fixture_dir / "task.txt", task)
    return fixture_dir


# --------------------------------------------------------------------------- command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Generate the swarm-fanout fixtures (shards/, fixture.json, task.txt). Without "
            "options, regenerates the committed fixtures next to this script, byte for byte."
        ),
    )
    parser.add_argument(
        "--check",
        type=Path,
        metavar="DIR",
        help="check the fixture DIR (or each fixture in DIR) as the runner does before a run: "
        "every answer recomputed from its shard, task.txt's shard lines against fixture.json; "
        "exit 2 with the first difference; writes nothing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write DIR/<fixture> instead of the committed fixtures (created if missing)",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=DEFAULT_SHARD_COUNT,
        metavar="N",
        help=(
            f"shards per fixture, 1-{MAX_SHARD_COUNT} (default {DEFAULT_SHARD_COUNT}); question "
            "templates cycle every 8 shards; file numbers get 3 digits when N > 99; "
            f"N != {DEFAULT_SHARD_COUNT} requires --out"
        ),
    )
    parser.add_argument(
        "--fixture",
        choices=list(KINDS_BY_NAME),
        action="append",
        metavar="NAME",
        help=f"only this fixture; repeatable; one of: {', '.join(KINDS_BY_NAME)} (default: all)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_BASE_SEED,
        metavar="S",
        help=f"base seed, a non-negative integer (default {DEFAULT_BASE_SEED}); "
        "a different seed requires --out",
    )
    args = parser.parse_args(argv)
    if args.check is not None:
        given = [flag for flag in ("out", "fixture") if getattr(args, flag) is not None]
        if given or args.shards != DEFAULT_SHARD_COUNT or args.seed != DEFAULT_BASE_SEED:
            parser.error("--check DIR takes no other option")
        return args
    if not 1 <= args.shards <= MAX_SHARD_COUNT:
        parser.error(f"--shards must be between 1 and {MAX_SHARD_COUNT}, got {args.shards}")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, got {args.seed}")
    writes_committed = args.out is None or args.out.resolve() == FIXTURES_DIR
    if writes_committed and args.shards != DEFAULT_SHARD_COUNT:
        parser.error("--shards other than 8 requires --out DIR (committed fixtures have 8 shards)")
    if writes_committed and args.seed != DEFAULT_BASE_SEED:
        parser.error("--seed other than the default requires --out DIR")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} exists and is not a directory")
    return args


# Measured with the scripted model: 19 shards resolve, 20 lose one reply (docs/fixtures.md).
# The generator stands alone, so this repeats scripted.MAX_SHARDS; change both together.
REPLIES_PER_BUSY_TURN = 19


def check(path: Path) -> int:
    """Exit 0 when every fixture at `path` (a fixture dir, or a dir of them) passes the check
    the runner makes before a run (evidence/fixture.py `load_fixture`); else 2, with the
    first difference on stderr."""
    found = [path] if (path / fixture.MANIFEST).exists() else []
    if not found and path.is_dir():
        found = sorted(child for child in path.iterdir() if (child / fixture.MANIFEST).exists())
    if not found:
        print(f"generate.py: error: {path} holds no {fixture.MANIFEST}", file=sys.stderr)
        return 2
    for fixture_dir in found:
        try:
            loaded = fixture.load_fixture(str(fixture_dir))
        except fixture.FixtureError as error:
            print(f"generate.py: {fixture_dir}: {error.code}: {error.message}", file=sys.stderr)
            return 2
        print(f"ok {fixture_dir} ({len(loaded.shards)} shards)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check is not None:
        return check(args.check)
    out_dir = FIXTURES_DIR if args.out is None else args.out
    names = args.fixture or list(KINDS_BY_NAME)
    for kind in FIXTURE_KINDS:
        if kind.name not in names:
            continue
        try:
            fixture_dir = write_fixture(kind, out_dir, args.shards, args.seed)
        except GenerationError as error:
            print(f"generate.py: error: {error}", file=sys.stderr)
            return 1
        print(f"wrote {fixture_dir} ({args.shards} shards)")
    if args.shards > REPLIES_PER_BUSY_TURN:
        print(
            f"generate.py: note: prime-agent v0.8.0 holds at most 20 unfinished messages per "
            f"session, so a parent polling in one turn, as task.txt asks, receives at most "
            f"{REPLIES_PER_BUSY_TURN} replies; with {args.shards} shards the other children's "
            "sends fail unless the model spawns in batches",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
