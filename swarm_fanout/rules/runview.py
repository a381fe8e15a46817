"""The run as every criterion of the scorer sees it, computed once (`view_of`): the combined
answer's lines, the parent's depth-1 children (ledger edges) with their transcripts, display
records and receipts, and the integrity checks. Pure, like the scorer.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from swarm_fanout.evidence.artifacts import Display, RunArtifacts, transcripts_by_path
from swarm_fanout.evidence.fixture import Fixture, Shard
from swarm_fanout.evidence.transcripts import Transcript
from swarm_fanout.ledger import Edge, Spawn
from swarm_fanout.rules import integrity, witness_checks
from swarm_fanout.rules.answers import AnswerLine, ShardAnswer, judge_all, parse_answer_lines

# --- receipts: how the parent heard back from a child (§6) -------------------


class Receipt(NamedTuple):
    kind: str  # reply | notice:<kind>
    at_ms: int | None


class Inbox:
    """The parent's replies by sender session and notices by childId, indexed once:
    a run can have a thousand children, each looked up several times."""

    def __init__(self, parent: Transcript | None):
        self.replies: dict[str | None, list] = {}
        self.notices: dict[str | None, list] = {}
        for reply in parent.replies if parent else ():
            self.replies.setdefault(reply.from_session_id, []).append(reply)
        for notice in parent.notices if parent else ():
            self.notices.setdefault(notice.child_id, []).append(notice)


def receipt_of(edge: Edge, transcript: Transcript | None, inbox: Inbox) -> Receipt | None:
    """The earliest reply from the child's session (its header id, else its file's stem), or
    notice naming its childId (§6)."""
    stem = os.path.splitext(os.path.basename(edge.child))[0]
    session_id = transcript.header_id if transcript and transcript.header_id else stem
    replies = [Receipt("reply", reply.at_ms) for reply in inbox.replies.get(session_id, ())]
    pool = replies or [
        Receipt("notice:" + notice.kind, notice.at_ms)
        for notice in inbox.notices.get(edge.child_id, ())
    ]
    return min(pool, key=lambda r: 2**63 if r.at_ms is None else r.at_ms, default=None)


def live_or_cleaned_up(edge: Edge, receipt: Receipt | None) -> bool:
    """Live, or deleted after its receipt: deleting a child after it replied is cleanup."""
    return not edge.deleted or (
        receipt is not None
        and receipt.at_ms is not None
        and edge.deleted_at_ms is not None
        and receipt.at_ms <= edge.deleted_at_ms
    )


# --- the run, seen once by every criterion ------------------------------------


class Child(NamedTuple):
    """One depth-1 ledger edge of the parent, with what the run holds for it."""

    edge: Edge
    transcript: Transcript | None  # the transcript at the edge's child path, if any
    in_its_dir: bool  # that transcript sits in the sub-* dir named by the edge's childId
    receipt: Receipt | None
    display: Display | None = None  # the rlm-subagent.json of the edge's sub-* dir

    @property
    def child_id(self) -> str:
        return self.edge.child_id

    @property
    def session_id(self) -> str | None:
        return self.transcript.header_id if self.transcript else None

    @property
    def delegation(self) -> str:
        """`ok`, or why this edge is no evidence that its worker's shard was delegated."""
        if not self.in_its_dir:
            return "missing_child_transcript"
        if not live_or_cleaned_up(self.edge, self.receipt):
            return "deleted_before_receipt"
        return "ok"


class RunView(NamedTuple):
    """What every criterion reads, computed once from the fixture and the artifacts."""

    fixture: Fixture
    run: RunArtifacts
    lines: tuple[AnswerLine, ...]  # the combined answer's `- <file>: <answer>` bullets
    answers: dict[str, ShardAnswer]  # shard file -> what the combined answer says of it
    children: tuple[Child, ...]  # the parent's depth-1 edges, in ledger order
    spawns: tuple[Spawn, ...]  # the parent's depth-1 spawn records, in ledger order
    inbox: Inbox
    integrity: integrity.Integrity
    witness: integrity.Integrity  # the disk against the runner's channels (witness_checks)
    by_name: dict[str, tuple[Child, ...]]  # spawn name -> its children, in ledger order
    # The line of the parent's last call that writes the answer file (`last_write_of`),
    # found once: every shard's provenance asks it.
    last_write: int | None = None

    def workers(self, shard: Shard) -> tuple[Child, ...]:
        """The children spawned under this shard's worker name, in ledger order."""
        return self.by_name.get(shard.worker, ())

    def delegated(self, shard: Shard) -> list[Child]:
        """Those of `workers` whose edge is evidence of delegation (`Child.delegation`)."""
        return [child for child in self.workers(shard) if child.delegation == "ok"]


def view_of(fixture: Fixture, run: RunArtifacts) -> RunView:
    parent = run.parent
    parent_path = parent.path if parent else None

    def of_parent(record: Edge | Spawn) -> bool:
        return record.depth == 1 and (parent_path is None or record.parent == parent_path)

    edges = list(filter(of_parent, run.replay.edges))
    spawns = tuple(filter(of_parent, run.replay.spawns))
    located = transcripts_by_path(run.children)
    displays = {child_dir.child_id: child_dir.display for child_dir in run.children}
    inbox = Inbox(parent)
    children = []
    by_name: dict[str, list[Child]] = {}
    for edge in edges:
        child_id, transcript = located.get(edge.child, (None, None))
        receipt = receipt_of(edge, transcript, inbox) if parent else None
        in_its_dir = child_id == edge.child_id
        child = Child(edge, transcript, in_its_dir, receipt, displays.get(edge.child_id))
        children.append(child)
        by_name.setdefault(edge.name, []).append(child)
    checked = tuple(
        child.edge for child in children if live_or_cleaned_up(child.edge, child.receipt)
    )
    family = integrity.family_of(run, tuple(edges), checked)
    lines = parse_answer_lines(run.artifact_text) if run.artifact_text is not None else []
    return RunView(
        fixture=fixture,
        run=run,
        lines=tuple(lines),
        answers=judge_all(fixture.shards, lines),
        children=tuple(children),
        spawns=spawns,
        inbox=inbox,
        integrity=integrity.run_checks(integrity.INTEGRITY_CHECKS, family),
        witness=integrity.run_checks(witness_checks.WITNESS_CHECKS, family),
        by_name={name: tuple(mine) for name, mine in by_name.items()},
        last_write=last_write_of(parent, fixture.artifact) if parent and fixture.artifact else None,
    )


def last_write_of(parent: Transcript, artifact: str) -> int | None:
    """The line of the parent's last call that writes the answer file, by a literal or a
    variable that holds its name (evidence/cells.py); a call that only reads it or
    names it is no write."""
    name = os.path.basename(artifact)
    lines = [
        call.line
        for call in parent.call_facts
        if any(os.path.basename(path) == name for path in call.written)
    ]
    return max(lines, default=None)
