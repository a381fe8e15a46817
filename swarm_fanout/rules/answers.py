"""The combined answer file's grammar: its `- <file>: <answer>` bullets, and what they say
of each shard (correct, missing, wrong or conflicting). Coverage judges these; provenance
traces the integer a shard's line gives.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from swarm_fanout.evidence.fixture import Shard
from swarm_fanout.evidence.number_tokens import INTEGER

BULLET = re.compile(r"^\s*[-*+]\s+(?P<body>\S.*?)\s*$")
ENTRY = re.compile(r"^(?P<file>[^\s:]+)\s*:\s*(?P<answer>.*?)\s*$")


class AnswerLine(NamedTuple):
    file: str
    answer: str
    value: int | None
    line: int


def parse_answer_lines(text: str) -> list[AnswerLine]:
    """Bullets `- <file>: <answer>` in the forms a model naturally writes.

    Accepted around the same line: a `shards/` or `./` prefix, backticks or bold
    around the file or the answer, `*` or `+` bullets, surrounding whitespace,
    thousands separators in the number.
    """
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        bullet = BULLET.match(raw)
        if not bullet:
            continue
        body = bullet.group("body").replace("**", "").replace("__", "").replace("`", "")
        entry = ENTRY.match(body)
        if not entry:
            continue
        file = entry.group("file").removeprefix("./").removeprefix("shards/")
        answer = entry.group("answer")
        value = int(answer.replace(",", "")) if INTEGER.match(answer) else None
        lines.append(AnswerLine(file, answer, value, number))
    return lines


class ShardAnswer(NamedTuple):
    status: str  # correct | missing | wrong | conflicting
    found: tuple[str, ...]
    value: int | None = None  # the one integer the index gives the shard, if it gives one


def judge_answers(shard: Shard, mine: list[AnswerLine]) -> ShardAnswer:
    """The verdict on one shard from the index lines that name its file (`judge_all`)."""
    if not mine:
        return ShardAnswer("missing", ())
    found = tuple(dict.fromkeys(line.answer for line in mine))
    values = {line.value if line.value is not None else line.answer for line in mine}
    if len(values) > 1:
        return ShardAnswer("conflicting", found)
    (value,) = values
    written = value if isinstance(value, int) else None
    return ShardAnswer("correct" if value == shard.expected else "wrong", found, written)


def judge_all(shards, lines: list[AnswerLine]) -> dict[str, ShardAnswer]:
    """`judge_answers` for every shard, with the lines grouped by file once."""
    by_file: dict[str, list[AnswerLine]] = {}
    for line in lines:
        by_file.setdefault(line.file, []).append(line)
    return {shard.file: judge_answers(shard, by_file.get(shard.file, [])) for shard in shards}
