"""The cells only the simulated model writes, beside those of the task language (tasks.py):
the root's spawning cell with the prompt it gives each child, and the fabricated answers of the
behaviours that lie. A child's answering cell and the cell that writes combined-index.md are
tasks.child_cell and tasks.index_cell, which scripted_model.py's children write too.
"""

from __future__ import annotations

from tasks import SHARD_LINE_FORMAT, Shard

# The prompt the spawning cell gives each child: the shard's task line is all it needs.
CHILD_TASK = (
    "Answer the question below about one data shard, then send `<file>: <answer>` to your "
    "parent with agent_message.send(..., receiver_role='parent').\n" + SHARD_LINE_FORMAT
)


def child_prompt(shard: Shard) -> str:
    return CHILD_TASK.format(file=shard.file, worker=shard.worker, question=shard.question)


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


def fabricated(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "0"
