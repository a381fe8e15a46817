"""Derivation provenance: a shard's answer counts as delegated only if the worker's own child
worked it out and the parent learned it from that child (docs/rubric.md "Provenance").
Each rule is a small function over one shard's `ShardTrace` returning why it fails (None
when it holds); `PROVENANCE_RULES` orders them, and the scorer reports the first that
fails. Numbers are number tokens (evidence/number_tokens.py); the fixtures keep every answer out of
their own prompts, so an answer in a child's task was put there by the parent.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from evidence.artifacts import RunArtifacts
from evidence.number_tokens import numbers_in
from evidence.transcripts import Reply
from rules.runview import Child, RunView


@dataclass(frozen=True)
class ShardTrace:
    """One shard's written answer and the worker's children whose edges are evidence."""

    view: RunView
    answer: int
    children: tuple[Child, ...]

    def replies(self, child: Child) -> list[Reply]:
        """The child's replies to the parent that hold the answer (§6: joined on
        `from.sessionId`, never the label)."""
        if not child.session_id:
            return []
        replies = self.view.inbox.replies.get(child.session_id, ())
        return [reply for reply in replies if self.answer in numbers_in(reply.message)]

    def derived(self, child: Child) -> bool:
        """The answer first showed up in the result of one of the child's own tool calls
        whose code did not hold it, before any message the child received held it."""
        return child.transcript is not None and self.answer in child.transcript.derived_numbers

    def sources(self) -> list[Child]:
        """The children that derived the answer and replied with it."""
        return [child for child in self.children if self.derived(child) and self.replies(child)]


def known_before_spawn(trace: ShardTrace) -> str | None:
    """The parent put the answer in the child's task (`spawn:<childId>`) or in the code of
    the cell that spawned it (its display record's spawnCode, §6)."""
    for child in trace.children:
        places = [
            place
            for place, numbers in (
                ("task", child.transcript.task_numbers if child.transcript else ()),
                ("spawning cell", child.display.spawn_code_numbers if child.display else ()),
            )
            if trace.answer in numbers
        ]
        if places:
            return f"{trace.answer} is in the {' and the '.join(places)} of {child.child_id}"
    return None


def unsourced(trace: ShardTrace) -> str | None:
    """No reply from the worker's child holds the answer."""
    if any(trace.replies(child) for child in trace.children):
        return None
    senders = ", ".join(child.child_id for child in trace.children)
    return f"{trace.answer} is in no reply from {senders}"


def not_derived(trace: ShardTrace) -> str | None:
    """The child replied with the answer but never worked it out: it was typed into its
    code, or it received the number (from its task or another session) first."""
    if trace.sources():
        return None
    repliers = ", ".join(child.child_id for child in trace.children if trace.replies(child))
    return (
        f"{repliers} replied {trace.answer}, which came out of none of its own tool calls "
        "before it was received or typed into code"
    )


def written_before_reply(trace: ShardTrace) -> str | None:
    """The parent's last call that writes the answer file started before the reply that
    sources the shard reached it (judged on the parent transcript's entry order)."""
    run = trace.view.run
    parent = run.parent
    first = min(reply.line for child in trace.sources() for reply in trace.replies(child))
    witnessed = _seen_before_reply(run, first)
    if witnessed is not None:
        return witnessed
    written = parent.last_artifact_write_line if parent else None
    if written is None:
        return None  # no call names the file: nothing to order (docs/rubric.md)
    if written > first:
        return None
    return (
        f"the last call naming {trace.view.fixture.artifact} (line {written}) came before the "
        f"first reply holding {trace.answer} (line {first})"
    )


def _seen_before_reply(run: RunArtifacts, reply_line: int) -> str | None:
    """In a witnessed run: the runner saw the answer file's final content on disk at a
    poll before the one that first found the reply (evidence/witness.py sightings)."""
    if run.witness is None or run.parent is None or run.artifact_sha256 is None:
        return None
    name = os.path.basename(run.parent.path)
    content = [
        float(item.get("seen") or 0)
        for item in run.witness.sightings
        if item.get("what") == "answer_content" and item.get("sha256") == run.artifact_sha256
    ]
    reply = [
        float(item.get("before") or 0)
        for item in run.witness.sightings
        if item.get("what") == "reply"
        and item.get("file") == name
        and item.get("line") == reply_line
    ]
    if content and reply and min(content) <= min(reply):
        return (
            f"the runner saw the answer file's final content at {min(content):.3f}, before the "
            f"reply (line {reply_line}) had appeared (not there at {min(reply):.3f})"
        )
    return None


# In order: the first that fails is the shard's reason; each has its own code and status.
PROVENANCE_RULES: tuple[tuple[str, str, Callable[[ShardTrace], str | None]], ...] = (
    ("answer_known_before_spawn", "known_before_spawn", known_before_spawn),
    ("unsourced_answer", "unsourced", unsourced),
    ("answer_not_derived", "not_derived", not_derived),
    ("answer_written_before_reply", "written_before_reply", written_before_reply),
)
