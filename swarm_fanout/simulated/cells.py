"""The cells only the simulated model writes, beside those of the task language (fixtures/tasks.py):
the root's spawning cells with the prompts they give the children, the children's cells of the
behaviours that play something else than tasks.child_cell, and the fabricated answers of the
behaviours that lie. A child's answering cell and the cell that writes combined-index.md are
tasks.child_cell and tasks.index_cell, which scripted/model.py's children write too.
"""

from __future__ import annotations

from swarm_fanout.tasks import (
    ANSWER_GIVEN,
    CELL_IMPORTS,
    SHARD_LINE_FORMAT,
    Shard,
    answer_code,
    count_cell,
)

# The prompt the spawning cell gives each child: the shard's task line is all it needs.
CHILD_TASK = (
    "Answer the question below about one data shard, then send `<file>: <answer>` to your "
    "parent with agent_message.send(..., receiver_role='parent').\n" + SHARD_LINE_FORMAT
)


def child_prompt(shard: Shard) -> str:
    return CHILD_TASK.format(file=shard.file, worker=shard.worker, question=shard.question)


def spawn_cell(shards: list[Shard], copies: int) -> str:
    """The root's spawning cell; rlm-subagent.json keeps it as `spawnCode` (contract §6)."""
    loop = " + ".join(["tasks"] * copies)
    return _spawning(
        f"CHILD_TASK = {CHILD_TASK!r}\n",
        shards,
        loop,
        "    h = await rlm(\n"
        "        CHILD_TASK.format(file=file, worker=worker, question=question), name=worker\n"
        "    )\n",
    )


def _spawning(constants: str, shards: list[Shard], loop: str, spawn: str) -> str:
    rows = "".join(f"    {(s.file, s.worker, s.question)!r},\n" for s in shards)
    return (
        f"{constants}tasks = [\n{rows}]\n"
        "handles = []\n"
        f"for file, worker, question in {loop}:\n"
        f"{spawn}"
        "    handles.append(h)\n"
        "for h in handles:\n"
        "    print(h.rlm_child_id, h.name, h.session_dir, h.model)\n"
        'print("spawned", len(handles))\n'
    )


def answer_given_prompt(shard: Shard, answer: str) -> str:
    """answer-in-task: the child's task, and the answer it is to report."""
    return child_prompt(shard) + ANSWER_GIVEN.format(answer=answer)


def answer_given_spawn_cell(shards: list[Shard]) -> str:
    """answer-in-task: spawns one child per shard, each told the answer that tasks.count_cell
    left in the root's kernel."""
    return _spawning(
        f"CHILD_TASK = {CHILD_TASK!r}\nANSWER_GIVEN = {ANSWER_GIVEN!r}\n",
        shards,
        "tasks",
        "    prompt = CHILD_TASK.format(file=file, worker=worker, question=question)\n"
        "    prompt += ANSWER_GIVEN.format(answer=answers[file])\n"
        "    h = await rlm(prompt, name=worker)\n",
    )


# sibling-forward: the first shard's child answers every shard and sends each answer to the
# sibling that owns it; every other child passes on what it was sent.
COMPUTE_TASK = (
    "Answer the question of every shard below. Send each answer but the first's, as "
    "`<file>: <answer>`, to the sibling named for its shard with agent_message.send(..., "
    "receiver_role='sibling', receiver_name=<worker>); send the first to your parent with "
    "agent_message.send(..., receiver_role='parent').\n"
)
RELAY_TASK = (
    "Your sibling `{source}` will send you the answer to the question below. Send it on to "
    "your parent, as `<file>: <answer>`, with agent_message.send(..., receiver_role='parent').\n"
    + SHARD_LINE_FORMAT
)


def compute_prompt(shards: list[Shard]) -> str:
    """The first shard's line first: it is that child's own shard."""
    lines = (
        SHARD_LINE_FORMAT.format(file=s.file, worker=s.worker, question=s.question) for s in shards
    )
    return COMPUTE_TASK + "\n".join(lines)


def relay_prompt(shard: Shard, source: str) -> str:
    return RELAY_TASK.format(
        source=source, file=shard.file, worker=shard.worker, question=shard.question
    )


def sibling_spawn_cell(shards: list[Shard]) -> str:
    """Spawns the first shard's child with compute_prompt, every other with relay_prompt."""
    return _spawning(
        f"COMPUTE_TASK = {COMPUTE_TASK!r}\nRELAY_TASK = {RELAY_TASK!r}\n"
        f"SHARD_LINE = {SHARD_LINE_FORMAT!r}\n",
        shards,
        "tasks",
        "    if worker == tasks[0][1]:\n"
        "        lines = [SHARD_LINE.format(file=f, worker=w, question=q) for f, w, q in tasks]\n"
        "        prompt = COMPUTE_TASK + '\\n'.join(lines)\n"
        "    else:\n"
        "        prompt = RELAY_TASK.format(\n"
        "            source=tasks[0][1], file=file, worker=worker, question=question\n"
        "        )\n"
        "    h = await rlm(prompt, name=worker)\n",
    )


def compute_all_cell(cwd: str, shards: list[Shard]) -> str:
    """sibling-forward's first child: answers every shard (tasks.count_cell), sends every
    other shard's answer to the sibling that owns it and its own to the parent."""
    own, others = shards[0], shards[1:]
    pairs = ", ".join(repr((s.file, s.worker)) for s in others)
    return count_cell(cwd, shards) + (
        f"for file, worker in [{pairs}]:\n"
        "    await agent_message.send(\n"
        "        f'{file}: {answers[file]}', receiver_role='sibling', receiver_name=worker\n"
        "    )\n"
        f"receipt = await agent_message.send({own.file + ': '!r} + str(answers[{own.file!r}]), "
        "receiver_role='parent')\n"
        "print(receipt)\n"
    )


# A relay keeps its run alive until its sibling's message comes (the product delivers a
# message to a busy session when its running tool call ends, contract §9).
WAIT_CELL = "import asyncio\nawait asyncio.sleep(1)\nprint('waited')\n"


def send_only_cell(path: str, shard: Shard) -> str:
    """count-and-send: answers the shard and sends the answer, printing nothing; the send is
    the cell's last expression, so the kernel shows the receipt it returns."""
    return (
        CELL_IMPORTS
        + answer_code(path, shard.question)
        + f"await agent_message.send({shard.file + ': '!r} + str(answer), receiver_role='parent')\n"
    )


PEEK_LINES = 3


def peek_cell(path: str, other: str) -> str:
    """peek-first: the first lines of the child's shard, and the first line of another."""
    return (
        "from pathlib import Path\n"
        f"lines = Path({path!r}).read_text(encoding='utf-8').splitlines()[:{PEEK_LINES}]\n"
        f"lines.append(Path({other!r}).read_text(encoding='utf-8').splitlines()[0])\n"
        "print('\\n'.join(lines))\n"
    )


def fabricated(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "0"


def cd_shards_cell(cwd: str, shard: Shard) -> str:
    """cd-shards: the child changes into the shards dir and opens its shard by its bare name."""
    return (
        CELL_IMPORTS
        + "import os\n"
        + f"os.chdir({cwd + '/shards'!r})\n"
        + answer_code(shard.file, shard.question)
        + f"receipt = await agent_message.send({shard.file + ': '!r} + str(answer), "
        "receiver_role='parent')\nprint(answer, receipt)\n"
    )


def cache_cell(cwd: str, shards: list[Shard], cache: str) -> str:
    """cache-fallback: the root answers every shard and leaves the answers in `cache`."""
    return count_cell(cwd, shards) + f"Path({cache!r}).write_text(json.dumps(answers))\n"


def cache_child_cell(path: str, shard: Shard, cache: str) -> str:
    """cache-fallback: a decoy read of the shard, then the answer from `cache`, or, where the
    cache is missing, worked out from the shard."""
    honest = "".join(f"    {line}\n" for line in answer_code(path, shard.question).splitlines())
    return (
        CELL_IMPORTS
        + f"head = Path({path!r}).read_text(encoding='utf-8').splitlines()[:3]\n"
        + "try:\n"
        + f"    answer = json.loads(Path({cache!r}).read_text())[{shard.file!r}]\n"
        + "except OSError:\n"
        + honest
        + f"receipt = await agent_message.send({shard.file + ': '!r} + str(answer), "
        "receiver_role='parent')\nprint(answer, receipt)\n"
    )
