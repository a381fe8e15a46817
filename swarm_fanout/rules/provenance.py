"""Derivation provenance: a shard's answer counts as delegated only if the worker's own child
worked it out and the parent learned it from that child (docs/rubric.md "Provenance").
Each rule is a small function over one shard's `ShardTrace` returning why it fails (None
when it holds); `PROVENANCE_RULES` orders them, and the scorer reports the first that
fails. Numbers are followed from session to session by rules/knowledge.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts
from swarm_fanout.evidence.number_tokens import numbers_in
from swarm_fanout.evidence.transcripts import Reply
from swarm_fanout.rules import replay
from swarm_fanout.rules.knowledge import SHORTCUT, Knowledge
from swarm_fanout.rules.runview import Child, RunView


class ShardTrace(NamedTuple):
    """One shard's written answer and the worker's children whose edges are evidence."""

    view: RunView
    answer: int
    children: tuple[Child, ...]
    knowledge: Knowledge
    shard: str  # the shard's file name

    def replies(self, child: Child) -> list[Reply]:
        """The child's replies to the parent that hold the answer (§6: joined on
        `from.sessionId`, never the label)."""
        if not child.session_id:
            return []
        replies = self.view.inbox.replies.get(child.session_id, ())
        return [reply for reply in replies if self.answer in numbers_in(reply.message)]

    def judged(self, child: Child) -> replay.Judged:
        """Whether a child that replied with the answer (so has a transcript) derived it from
        its own shard no later than it sent a reply holding it, where that reply's receipt
        places the send, and if not what it did instead: by its replay where it was replayed
        (rules/replay.py), else by the code reading (rules/knowledge.py), whose reason says so."""
        knowledge, transcript = self.knowledge, child.transcript
        judged = replay.judge(self.view.run.cell_replay, knowledge, child, self.answer, self.shard)
        if judged is not None:
            return judged
        at = knowledge.derived_at(transcript, self.answer, self.shard)
        sent = knowledge.sent[transcript.path]  # message id -> its receipt's line
        lines = [sent.get(reply.reply_id or "") for reply in self.replies(child)]
        if at is not None and any(line is None or at <= line for line in lines):
            return replay.Judged(True, "")
        why = knowledge.why_not_derived(transcript, self.answer, self.shard)
        return replay.Judged(False, f"{why} ({replay.NOT_REPLAYED})")

    def sources(self) -> list[Child]:
        """The children that replied with the answer and derived it."""
        return [
            child for child in self.children if self.replies(child) and self.judged(child).derived
        ]


def known_before_spawn(trace: ShardTrace) -> str | None:
    """The parent put into a child's task (`spawn:<childId>`) the answer, which it knew: it
    derived or received it before the spawning cell ran, or that cell computed it."""
    for child in trace.children:
        if child.transcript is None or trace.answer not in child.transcript.task_numbers:
            continue
        how = trace.knowledge.parent_knew_for_task(child, trace.answer)
        if how is not None:
            return f"{trace.answer} is in the task of {child.child_id}: {how}"
    return None


def unsourced(trace: ShardTrace) -> str | None:
    """No reply from the worker's child holds the answer."""
    if any(trace.replies(child) for child in trace.children):
        return None
    senders = ", ".join(child.child_id for child in trace.children)
    return f"{trace.answer} is in no reply from {senders}"


def not_derived(trace: ShardTrace) -> str | None:
    """The child replied with the answer but never derived it from its shard: the call that
    first showed it did not read the shard, or it was typed into its code, read from another
    session's file, or received from a session that knew it first. When the parent knew the
    answer before it spawned that child, the reason names the shortcut's shape (SHORTCUT)."""
    if trace.sources():
        return None
    knowledge = trace.knowledge
    return "; ".join(
        f"{child.child_id} replied {trace.answer} but " + trace.judged(child).why
        + (f" ({SHORTCUT})" if knowledge.parent_knew_before_spawn(child, trace.answer) else "")
        for child in trace.children
        if trace.replies(child)
    )  # fmt: skip


def written_before_reply(trace: ShardTrace) -> str | None:
    """The answer file took its final content before the reply that sources the shard reached
    the parent: as the witness saw it, else by the parent's last call that writes the file
    (judged on the parent transcript's entry order)."""
    run = trace.view.run
    first = min(
        (reply.line for child in trace.sources() for reply in trace.replies(child)), default=None
    )
    if first is None:
        return None  # no child sources the shard: rule 3 says so
    witnessed = _witnessed_order(run, first)
    if witnessed is not None:
        return witnessed or None
    written = trace.view.last_write
    if written is None or written > first:
        return None  # written after the reply, or no call writes the file by a name it holds
    artifact = trace.view.fixture.artifact
    return (
        f"the parent's last call writing {artifact} (line {written}) came before the "
        f"first reply holding {trace.answer} (line {first})"
    )


def _witnessed_order(run: RunArtifacts, reply_line: int) -> str | None:
    """In a witnessed run that saw both: why the runner saw the answer file's final content
    on disk at a poll before the one that first found the reply, or "" when it first saw it
    at a later poll than the reply (evidence/witness.py sightings). None: the witness cannot
    order them, because it saw neither or both appear between the same two polls."""
    if run.witness is None or run.parent is None or run.artifact_sha256 is None:
        return None
    name = os.path.basename(run.parent.path)
    content = [
        float(item.get("seen") or 0)
        for item in run.witness.sightings
        if item.get("what") == "answer_content" and item.get("sha256") == run.artifact_sha256
    ]
    reply = [
        (float(item.get("before") or 0), float(item.get("seen") or 0))
        for item in run.witness.sightings
        if item.get("what") == "reply"
        and item.get("file") == name
        and item.get("line") == reply_line
    ]
    if not content or not reply:
        return None
    content_seen = min(content)
    reply_before, reply_seen = min(reply)
    if content_seen <= reply_before:
        return (
            f"the runner saw the answer file's final content at {content_seen:.3f}, before the "
            f"reply (line {reply_line}) had appeared (not there at {reply_before:.3f})"
        )
    if content_seen <= reply_seen:
        return None  # both appeared between the same two polls: the order is not seen
    return ""


# In order: the first that fails is the shard's reason; each has its own code and status.
PROVENANCE_RULES: tuple[tuple[str, str, Callable[[ShardTrace], str | None]], ...] = (
    ("answer_known_before_spawn", "known_before_spawn", known_before_spawn),
    ("unsourced_answer", "unsourced", unsourced),
    ("answer_not_derived", "not_derived", not_derived),
    ("answer_written_before_reply", "written_before_reply", written_before_reply),
)
