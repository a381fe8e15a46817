"""What the reasons of a verdict rest on, for the evidence page: the transcript line each
reason points at, what the child said to the parent, and the answer file's own line.

The scorer's reasons name a shard and a child; the integrity and witness checks carry a
file and line of their own, the rubric's criteria do not. `grounds_of` reads, once, from
a run the scorer's collector already read (and the conversations the page shows), where
each criterion looks: the replies in the parent's transcript, the child's task, the
parent's last call that names the answer file, the ledger's spawn record. `place_of`
picks the one a reason rests on; `quoted` marks the numbers of interest in a text. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm_fanout.evidence.artifacts import RunArtifacts, relative, transcripts_by_path
from swarm_fanout.evidence.number_tokens import INTEGER, TOKEN
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.reporting.conversations import Conversation, shown
from swarm_fanout.reporting.render import Cell
from swarm_fanout.rules.answers import parse_answer_lines
from swarm_fanout.rules.runview import last_write_of

QUOTE_CHARS = 320  # of a reply quoted in a table: enough to read the number in its sentence
TASK_TITLE = (
    "task from the parent"  # how swarm_fanout/reporting/conversations.py titles a child's task
)


@dataclass(frozen=True)
class Said:
    """One reply of a child, where it landed in the parent's transcript (§6)."""

    child_id: str
    line: int
    text: str


@dataclass(frozen=True)
class Grounds:
    """Where a verdict's reasons can point, read from one run."""

    parent: str | None  # the parent's transcript, relative to the run dir
    parent_end: int | None  # its last line shown
    replies: tuple[Said, ...]  # every child's reply, in the parent's order
    notices: dict[str, int]  # child id -> the parent's line of its first notice
    tasks: dict[str, tuple[str, int]]  # child id -> (its transcript, the line of its task)
    ends: dict[str, tuple[str, int]]  # child id -> (its transcript, its last line shown)
    spawns: dict[str, tuple[str, int]]  # child id -> (ledger file, the line of its spawn)
    answer_file: str | None  # relative to the run dir; None when it was not read
    answer_lines: dict[str, tuple[int, str]]  # shard file -> (line, text) of its bullets
    last_write: int | None  # the parent's line of its last call naming the answer file
    kernel_error: int | None  # the parent's line of a failed tool call's output

    def said_by(self, child_id: str | None) -> list[Said]:
        return [said for said in self.replies if said.child_id == child_id]


NO_GROUNDS = Grounds(None, None, (), {}, {}, {}, {}, None, {}, None, None)


def grounds_of(
    run: RunArtifacts,
    conversations: tuple[Conversation, ...],
    child_ids: dict[str, str],
    artifact: str | None,
) -> Grounds:
    """`child_ids`: a conversation's anchor -> its child's id; `artifact`: the answer file's
    name in the repo, when known."""
    root = run.run_dir
    parent = run.parent
    sessions = {
        transcript.header_id: child_id
        for child_id, transcript in transcripts_by_path(run.children).values()
        if transcript.header_id
    }
    replies = tuple(
        Said(sessions[reply.from_session_id], reply.line, shown(reply.message, root))
        for reply in (parent.replies if parent else ())
        if reply.from_session_id in sessions
    )
    notices: dict[str, int] = {}
    for notice in parent.notices if parent else ():
        if notice.child_id:
            notices.setdefault(notice.child_id, notice.line)
    tasks, ends = {}, {}
    parent_end = kernel_error = None
    for conversation in conversations:
        if not conversation.entries:
            continue
        child_id = child_ids.get(conversation.anchor)
        last = (conversation.path, conversation.entries[-1].line)
        if conversation.anchor == "parent":
            parent_end = last[1]
            kernel_error = next(
                (entry.line for entry in conversation.entries if entry.title.endswith("(error)")),
                None,
            )
        elif child_id:
            ends[child_id] = last
            task = next((e.line for e in conversation.entries if e.title == TASK_TITLE), None)
            if task is not None:
                tasks[child_id] = (conversation.path, task)
    spawns = {
        edge.child_id: (relative(root, edge.ledger), edge.spawn_line) for edge in run.replay.edges
    }
    answer_lines: dict[str, tuple[int, str]] = {}
    if run.artifact_text is not None:
        texts = run.artifact_text.splitlines()
        for bullet in parse_answer_lines(run.artifact_text):
            if bullet.file not in answer_lines and 0 < bullet.line <= len(texts):
                answer_lines[bullet.file] = (bullet.line, texts[bullet.line - 1].strip())
    return Grounds(
        parent=relative(root, parent.path) if parent else None,
        parent_end=parent_end,
        replies=replies,
        notices=notices,
        tasks=tasks,
        ends=ends,
        spawns=spawns,
        answer_file=(
            relative(root, RunPaths.of(root).artifact(artifact))
            if artifact and run.artifact_text is not None
            else None
        ),
        answer_lines=answer_lines,
        last_write=last_write_of(parent, artifact) if parent and artifact else None,
        kernel_error=kernel_error,
    )


# Per reason code, what it rests on: the parent's last write of the answer file, the child's
# reply (else its notice, else its last entry), its task, its spawn record, its last entry.
RESTS_ON = {
    "wrong_answer": "last_write",
    "missing_answer": "last_write",
    "conflicting_answers": "last_write",
    "answer_written_before_reply": "last_write",
    "artifact_missing": "parent_end",
    "no_spawn": "parent_end",
    "kernel_unavailable": "kernel_error",
    "unsourced_answer": "reply",
    "answer_not_derived": "reply",
    "answer_known_before_spawn": "task",
    "missing_receipt": "child_end",
    "duplicate_spawn": "spawn",
    "deleted_before_receipt": "spawn",
    "missing_child_transcript": "spawn",
}


# How the page names each of those lines.
WHAT = {
    "last_write": "its last write of the answer file",
    "parent_end": "its last entry",
    "kernel_error": "the failed call",
    "reply": "the reply",
    "notice": "the notice",
    "task": "the task",
    "child_end": "its last entry",
    "spawn": "the spawn",
}


def place_of(code: str, child_id: str | None, numbers: set[int], grounds: Grounds) -> dict | None:
    """The `{file, line, what}` a reason of `code` about `child_id` rests on; `numbers` the
    shard's answers, to pick the reply that holds one. None when the run holds no such line."""
    rests = RESTS_ON.get(code)
    parent = grounds.parent
    line = None
    if rests == "reply":
        said = reply_of(child_id, numbers, grounds)
        if said is not None:
            line = said.line
        elif child_id in grounds.notices:
            rests, line = "notice", grounds.notices[child_id]
        else:
            rests = "child_end"
    elif rests in ("last_write", "parent_end", "kernel_error"):
        line = {
            "last_write": grounds.last_write,
            "parent_end": grounds.parent_end,
            "kernel_error": grounds.kernel_error,
        }[rests]
    if line is not None:
        return {"file": parent, "line": line, "what": WHAT[rests]} if parent else None
    where = {"task": grounds.tasks, "child_end": grounds.ends, "spawn": grounds.spawns}.get(
        rests or "", {}
    )
    if child_id in where:
        file, line = where[child_id]
        return {"file": file, "line": line, "what": WHAT[rests]}
    return None


def reply_of(child_id: str | None, numbers: set[int], grounds: Grounds) -> Said | None:
    """The child's reply that holds one of `numbers`, else its last one."""
    said = grounds.said_by(child_id)
    holding = [item for item in said if marks(item.text, numbers)]
    return (holding or said or [None])[0 if holding else -1]


def marks(text: str, numbers: set[int]) -> list[tuple[int, int]]:
    """(start, end) of every number token of `text` that is one of `numbers`."""
    found = []
    for match in TOKEN.finditer(text):
        token = match.group().rstrip(".,")
        if INTEGER.match(token) and int(token.replace(",", "")) in numbers:
            found.append((match.start(), match.start() + len(token)))
    return found


def quoted(text: str, numbers: set[int], limit: int = QUOTE_CHARS) -> tuple[Cell, ...]:
    """`text` as cells, each of `numbers` in it marked; a long text is cut to `limit`
    characters around the first one."""
    spans = marks(text, numbers)
    start = 0
    if len(text) > limit:
        start = max(0, min(spans[0][0] - limit // 3, len(text) - limit)) if spans else 0
    end = min(len(text), start + limit)
    cells = [Cell("…")] if start else []
    at = start
    for first, last in spans:
        if first < start or last > end:
            continue
        cells += [Cell(text[at:first]), Cell(text[first:last], tone="mark")]
        at = last
    cells.append(Cell(text[at:end] + ("…" if end < len(text) else "")))
    return tuple(cell for cell in cells if cell.text)
