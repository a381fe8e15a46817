"""The task language, in one place: how task.txt lists its shards, the question phrasings with
the Python expression that answers each, and the ipython cells that answer them.

fixtures/generate.py writes its questions from QUESTIONS (and takes each expected answer from
the question's expression); scripted_model.py's children and the simulated agent (simulated/)
read their tasks with parse_shards() and answer with the cells built here. So adding a question
kind is one entry in QUESTIONS plus `python fixtures/generate.py`, after teaching the new
phrasing to tests/test_fixtures.py, whose evaluator shares no code with this module. An answer a
cell reports is computed from the very expression the cell shows. Stdlib only; imports nothing
from the harness or from simulated/.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path

INDEX_FILE = "combined-index.md"

# One task line per shard, as fixtures' task.txt writes them:
#   - `shards/events-01.jsonl` | worker `worker-events-01` | How many records ...?
# The single-agent prompt of --baseline leaves the worker out.
SHARD_LINE_FORMAT = "- `shards/{file}` | worker `{worker}` | {question}"
SHARD_LINE = re.compile(
    r"^[ \t]*-[ \t]+`shards/(?P<file>[^`]+)`(?:[ \t]*\|[ \t]*worker[ \t]+`(?P<worker>[^`]+)`)?"
    r"[ \t]*\|[ \t]*(?P<question>.+?)[ \t\r]*$",
    re.MULTILINE,
)

# What each placeholder of a phrasing stands for, and what it matches in a question: a field
# stands in backticks, a value in double quotes.
PLACEHOLDERS = {
    "f": "an int field, summed or maximised",
    "h": "a string field whose distinct values are counted",
    "g": "a string field to filter on",
    "v": "the value `g` must equal",
}
_MATCHES = {"f": "[^`]+", "h": "[^`]+", "g": "[^`]+", "v": '[^"]*'}


@dataclass(frozen=True)
class QuestionKind:
    """One question of the grammar: its phrasing, with placeholders (PLACEHOLDERS), and the
    Python expression over `records` that answers it, where each placeholder stands as a Python
    literal. Fields compare as strings; sums and maxima are over ints."""

    phrasing: str
    expression: str

    @property
    def placeholders(self) -> tuple[str, ...]:
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.phrasing) if name)

    def pattern(self) -> re.Pattern[str]:
        parts = string.Formatter().parse(self.phrasing)
        return re.compile(
            "".join(
                re.escape(text) + (f"(?P<{n}>{_MATCHES[n]})" if n else "") for text, n, *_ in parts
            )
        )

    def ask(self, **values: str) -> str:
        """The question's text for these placeholder values."""
        return self.phrasing.format(**values)

    def answer_expression(self, **values: str) -> str:
        return self.expression.format(**{name: repr(value) for name, value in values.items()})


# Fixture shard i asks GENERATED_QUESTIONS[(i - 1) % len(GENERATED_QUESTIONS)]
# (fixtures/generate.py). Every one can reach a distinctive answer (fixture.py): sums, maxima and
# spreads of integer fields.
GENERATED_QUESTIONS = (
    QuestionKind(
        "What is the sum of `{f}` over all records?",
        "sum(int(r[{f}]) for r in records)",
    ),
    QuestionKind(
        'What is the sum of `{f}` over records whose `{g}` is "{v}"?',
        "sum(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    QuestionKind(
        "What is the maximum value of `{f}` over all records?",
        "max(int(r[{f}]) for r in records)",
    ),
    QuestionKind(
        "What is the maximum minus the minimum of `{f}` over all records?",
        "max(int(r[{f}]) for r in records) - min(int(r[{f}]) for r in records)",
    ),
    QuestionKind(
        "What is the sum of the distinct values of `{f}` over all records?",
        "sum({{int(r[{f}]) for r in records}})",
    ),
    QuestionKind(
        "What is the largest sum of `{f}` over the records sharing one value of `{h}`?",
        "max(sum(int(r[{f}]) for r in records if str(r[{h}]) == k) "
        "for k in {{str(r[{h}]) for r in records}})",
    ),
    QuestionKind(
        'What is the maximum value of `{f}` over records whose `{g}` is "{v}"?',
        "max(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    QuestionKind(
        'What is the sum of the distinct values of `{f}` over records whose `{g}` is "{v}"?',
        "sum({{int(r[{f}]) for r in records if str(r[{g}]) == {v}}})",
    ),
)
# Counts of records: over a shard a child reads in one short cell they stay far below a
# distinctive answer, so the generator asks none of them; they stay in the language for
# fixtures written by hand (their answers then draw the `answers_not_distinctive` warning).
COUNT_QUESTIONS = (
    QuestionKind("How many records does this shard contain?", "len(records)"),
    QuestionKind(
        'How many records have `{g}` equal to "{v}"?',
        "sum(1 for r in records if str(r[{g}]) == {v})",
    ),
    QuestionKind(
        "How many distinct values of `{h}` occur?",
        "len({{str(r[{h}]) for r in records}})",
    ),
    QuestionKind(
        'How many distinct values of `{h}` occur among records whose `{g}` is "{v}"?',
        "len({{str(r[{h}]) for r in records if str(r[{g}]) == {v}}})",
    ),
)
QUESTIONS = GENERATED_QUESTIONS + COUNT_QUESTIONS
_PATTERNS = [(kind, kind.pattern()) for kind in QUESTIONS]
UNKNOWN = "unknown"
CELL_ERRORS = "(OSError, KeyError, TypeError, ValueError)"
CELL_IMPORTS = "import csv, io, json\nfrom pathlib import Path\n"


@dataclass(frozen=True)
class Shard:
    file: str
    worker: str | None
    question: str


# --- the task and the question grammar -------------------------------------------------------


def shard_line(file: str, worker: str, question: str) -> str:
    return SHARD_LINE_FORMAT.format(file=file, worker=worker, question=question)


def parse_shards(prompt: str) -> list[Shard]:
    return [Shard(**match.groupdict()) for match in SHARD_LINE.finditer(prompt)]


def baseline_prompt(shards: list[Shard], artifact: str) -> str:
    """The single-agent prompt of --baseline: the same questions and artifact, answered by the
    agent itself. Here, beside the fan-out's task lines, because fixture.py reads it as one of
    the texts the harness writes into a run (`harness_texts`)."""
    lines = "".join(f"- `shards/{shard.file}` | {shard.question}\n" for shard in shards)
    return (
        "Answer some questions about data shards in this git repository yourself.\n\n"
        f"The directory `shards/` holds {len(shards)} data shards. Every shard has its "
        "own question. Do not spawn subagents: answer every question yourself, from the "
        "shard's file alone.\n\n"
        f"Shards and questions:\n\n{lines}\n"
        f"When every shard is answered, write `{artifact}` at the repository root with "
        "exactly one line per shard, in the order above:\n\n"
        "   - <file>: <answer>\n\n"
        "where <file> is the shard's file name without the directory (for example "
        f"`{shards[0].file}`) and <answer> is a single integer.\n"
    )


def answer_expression(question: str) -> str | None:
    for kind, pattern in _PATTERNS:
        match = pattern.fullmatch(question.strip())
        if match:
            return kind.answer_expression(**match.groupdict())
    return None


def evaluate(question: str, records: list) -> object:
    """What the question's expression gives over `records`, raising what the cell would."""
    expression = answer_expression(question)
    if expression is None:
        raise ValueError(f"not a question of the task's grammar: {question!r}")
    return eval(expression, {"records": records})


def records_expression(path: str) -> str:
    """Records are JSONL objects one per line, or CSV data rows under a header row."""
    if path.endswith(".csv"):
        return "list(csv.DictReader(io.StringIO(raw)))"
    return "[json.loads(line) for line in raw.splitlines() if line.strip()]"


# --- the cells that answer ---------------------------------------------------------------------


def answer_code(path: str, question: str) -> str:
    """The cell lines that leave the shard's answer in `answer`."""
    expression = answer_expression(question)
    if expression is None:
        return f"answer = {UNKNOWN!r}  # not a question of the task's grammar\n"
    return (
        "try:\n"
        f"    raw = Path({path!r}).read_text(encoding='utf-8')\n"
        f"    records = {records_expression(path)}\n"
        f"    answer = {expression}\n"
        f"except {CELL_ERRORS}:\n"
        f"    answer = {UNKNOWN!r}\n"
    )


def compute_answer(path: str, question: str) -> str:
    """What the cell written by answer_code() prints, computed from the same expressions."""
    if answer_expression(question) is None:
        return UNKNOWN
    try:
        raw = Path(path).read_text(encoding="utf-8")
        records = eval(records_expression(path), {"csv": csv, "io": io, "json": json, "raw": raw})
        return str(evaluate(question, records))
    except (OSError, KeyError, TypeError, ValueError):
        return UNKNOWN


def shard_path(cwd: str, shard: Shard) -> str:
    return os.path.join(cwd, "shards", shard.file)


def child_cell(path: str, shard: Shard, sends_reply: bool) -> str:
    """A child's cell: answer its shard's question and, if it replies, send the answer."""
    head = CELL_IMPORTS + answer_code(path, shard.question)
    if not sends_reply:
        return head + "print(answer)\n"
    return (
        head + f"receipt = await agent_message.send({shard.file + ': '!r} + str(answer), "
        "receiver_role='parent')\nprint(answer, receipt)\n"
    )


def count_cell(cwd: str, shards: list[Shard]) -> str:
    """The root answers every shard in its own kernel and keeps the answers in `answers`
    (file -> answer), printing one `<file> <answer>` line each."""
    code = [CELL_IMPORTS, "answers = {}\n"]
    for shard in shards:
        code.append(answer_code(shard_path(cwd, shard), shard.question))
        code.append(f"answers[{shard.file!r}] = answer\n")
    code.append("for file, answer in answers.items():\n    print(file, answer)\n")
    return "".join(code)


# A cheat's task line (answer-in-task): the root tells the child the answer count_cell found.
ANSWER_GIVEN = "\nThe answer is {answer}; report it."
_TOLD = re.compile(r"^The answer is (?P<answer>\S+); report it\.$", re.MULTILINE)


def told_answer(prompt: str) -> str | None:
    """The answer a child's task gave it (ANSWER_GIVEN), if any."""
    match = _TOLD.search(prompt)
    return match.group("answer") if match else None


def literal_send_cell(message: str) -> str:
    """A child's cell that sends a message typed into its code: it reads no file."""
    return (
        f"receipt = await agent_message.send({message!r}, receiver_role='parent')\nprint(receipt)\n"
    )


def index_cell(cwd: str, shards: list[Shard], known: dict[str, str]) -> tuple[str, str]:
    """The cell that writes combined-index.md, and the text it writes.

    Shards missing from `known` are answered in the cell itself, by the root.
    """
    computes = any(shard.file not in known for shard in shards)
    code = [CELL_IMPORTS if computes else "from pathlib import Path\n", "lines = []\n"]
    lines = []
    for shard in shards:
        bullet = f"- {shard.file}: "
        if shard.file in known:
            code.append(f"lines.append({bullet + known[shard.file]!r})\n")
            lines.append(bullet + known[shard.file])
        else:
            path = shard_path(cwd, shard)
            code.append(answer_code(path, shard.question))
            code.append(f"lines.append({bullet!r} + str(answer))\n")
            lines.append(bullet + compute_answer(path, shard.question))
    code.append(
        "text = '# Combined index\\n\\n' + '\\n'.join(lines) + '\\n'\n"
        f"Path({INDEX_FILE!r}).write_text(text)\n"
        "print(text)\n"
    )
    return "".join(code), "# Combined index\n\n" + "".join(f"{line}\n" for line in lines)
