"""The task and the ipython cells the simulated model writes: the task's shard lines, the
eight question phrasings with the Python expression that answers each, and the cells built
from them (a child's answering cell, the root's spawning cell, the cell that writes
combined-index.md). An answer the simulation reports is computed from the very expression its
cell shows. The simulated model (simulated_run.py) and scripted_model.py's children both
write these cells, so the question phrasings live here and only here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

INDEX_FILE = "combined-index.md"

# One task line per shard, as fixtures' task.txt writes them:
#   - `shards/events-01.jsonl` | worker `worker-events-01` | How many records ...?
# The single-agent prompt of --baseline leaves the worker out.
SHARD_LINE = re.compile(
    r"^[ \t]*-[ \t]+`shards/(?P<file>[^`]+)`(?:[ \t]*\|[ \t]*worker[ \t]+`(?P<worker>[^`]+)`)?"
    r"[ \t]*\|[ \t]*(?P<question>.+?)[ \t\r]*$",
    re.MULTILINE,
)
# The prompt the spawning cell gives each child: the shard's task line is all it needs.
CHILD_TASK = (
    "Answer the question below about one data shard, then send `<file>: <answer>` to your "
    "parent with agent_message.send(..., receiver_role='parent').\n"
    "- `shards/{file}` | worker `{worker}` | {question}"
)

_FIELD = r"`(?P<{}>[^`]+)`"
_VALUE = r'"(?P<v>[^"]*)"'
_WHERE = f"over records whose {_FIELD.format('g')} is {_VALUE}"
# The question grammar, each with the Python expression a child's cell evaluates over `records`
# (fields compare as strings; sums and maxima are over ints). The simulation evaluates the very
# expression it writes into the cell, so the cell shown and the answer sent cannot disagree.
QUESTIONS = [
    (r"How many records does this shard contain\?", "len(records)"),
    (
        f"How many records have {_FIELD.format('g')} equal to {_VALUE}\\?",
        "sum(1 for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"What is the sum of {_FIELD.format('f')} over all records\\?",
        "sum(int(r[{f}]) for r in records)",
    ),
    (
        f"What is the maximum value of {_FIELD.format('f')} over all records\\?",
        "max(int(r[{f}]) for r in records)",
    ),
    (
        f"How many distinct values of {_FIELD.format('g')} occur\\?",
        "len({{str(r[{g}]) for r in records}})",
    ),
    (
        f"What is the sum of {_FIELD.format('f')} {_WHERE}\\?",
        "sum(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"What is the maximum value of {_FIELD.format('f')} {_WHERE}\\?",
        "max(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"How many distinct values of {_FIELD.format('h')} occur among records whose "
        f"{_FIELD.format('g')} is {_VALUE}\\?",
        "len({{str(r[{h}]) for r in records if str(r[{g}]) == {v}}})",
    ),
]
UNKNOWN = "unknown"
CELL_ERRORS = "(OSError, KeyError, TypeError, ValueError)"
CELL_IMPORTS = "import csv, io, json\nfrom pathlib import Path\n"


@dataclass(frozen=True)
class Shard:
    file: str
    worker: str | None
    question: str


# --- the task and the question grammar -------------------------------------------------------


def parse_shards(prompt: str) -> list[Shard]:
    return [Shard(**match.groupdict()) for match in SHARD_LINE.finditer(prompt)]


def child_prompt(shard: Shard) -> str:
    return CHILD_TASK.format(file=shard.file, worker=shard.worker, question=shard.question)


def answer_expression(question: str) -> str | None:
    for pattern, template in QUESTIONS:
        match = re.fullmatch(pattern, question.strip())
        if match:
            return template.format(**{k: repr(v) for k, v in match.groupdict().items()})
    return None


def records_expression(path: str) -> str:
    """Records are JSONL objects one per line, or CSV data rows under a header row."""
    if path.endswith(".csv"):
        return "list(csv.DictReader(io.StringIO(raw)))"
    return "[json.loads(line) for line in raw.splitlines() if line.strip()]"


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
    expression = answer_expression(question)
    if expression is None:
        return UNKNOWN
    try:
        raw = Path(path).read_text(encoding="utf-8")
        records = eval(records_expression(path), {"csv": csv, "io": io, "json": json, "raw": raw})
        return str(eval(expression, {"records": records}))
    except (OSError, KeyError, TypeError, ValueError):
        return UNKNOWN


def shard_path(cwd: str, shard: Shard) -> str:
    return os.path.join(cwd, "shards", shard.file)


def child_cell(path: str, shard: Shard, sends_reply: bool) -> str:
    head = CELL_IMPORTS + answer_code(path, shard.question)
    if not sends_reply:
        return head + "print(answer)\n"
    return (
        head + f"receipt = await agent_message.send({shard.file + ': '!r} + str(answer), "
        "receiver_role='parent')\nprint(answer, receipt)\n"
    )


def spawn_cell(shards: list[Shard], copies: int) -> str:
    """The root's spawning cell; rlm-subagent.json keeps it as `spawnCode` (contract §6)."""
    rows = "".join(f"    {(s.file, s.worker, s.question)!r},\n" for s in shards)
    loop = " + ".join(["tasks"] * copies)
    return (
        f"CHILD_TASK = {CHILD_TASK!r}\n"
        f"tasks = [\n{rows}]\n"
        "handles = []\n"
        f"for file, worker, question in {loop}:\n"
        "    h = await rlm(\n"
        "        CHILD_TASK.format(file=file, worker=worker, question=question), name=worker\n"
        "    )\n"
        "    handles.append(h)\n"
        "for h in handles:\n"
        "    print(h.rlm_child_id, h.name, h.session_dir, h.model)\n"
        'print("spawned", len(handles))\n'
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


def fabricated(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "0"
