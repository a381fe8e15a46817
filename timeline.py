"""When each depth-1 child of a run was spawned, started, answered, replied and ended.

`read_timeline` reads the run dir with the bounded readers (ledger.py for the spawn
ledger, jsonl.py for transcripts); `build_timeline` is pure. Per child: its spawn
(the ledger's `at`), start (its header's `timestamp`), first model response (its
first assistant message's entry timestamp), reply (the parent-side entry of its
first reply) or notice, and end (its last entry, `agent_status` heartbeats aside:
the product keeps writing them to an idle session). Over the run: the most children
alive at once, the makespan from the first spawn to the last end, and the
parallelism Σ child durations / makespan, which is 1.0 or less for children that
ran one after another and up to the child count for children that all overlapped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import ledger
from jsonl import Finding, dict_field, iso_to_ms, iter_objects, text_field

NOTICE_TYPES = ("rlm_child_terminal_notice", "rlm_child_failure")
HEARTBEAT = "agent_status"
MAX_TRANSCRIPT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ChildTrace:
    """What a child's own transcript says of its times (epoch ms; None when unknown)."""

    header_id: str | None
    start_ms: int | None
    first_response_ms: int | None
    end_ms: int | None


@dataclass(frozen=True)
class ChildSpan:
    child_id: str
    name: str
    transcript: str
    deleted: bool
    spawn_ms: int | None
    start_ms: int | None
    first_response_ms: int | None
    reply_ms: int | None
    notice_ms: int | None
    end_ms: int | None

    @property
    def status(self) -> str:
        """`replied`; `failed` (a notice, no reply); `dropped` (neither reached the parent)."""
        if self.reply_ms is not None:
            return "replied"
        return "failed" if self.notice_ms is not None else "dropped"

    @property
    def duration_ms(self) -> int | None:
        if self.spawn_ms is None or self.end_ms is None:
            return None
        return max(0, self.end_ms - self.spawn_ms)


@dataclass(frozen=True)
class Timeline:
    children: tuple[ChildSpan, ...]
    max_concurrent: int
    makespan_ms: int | None
    child_time_ms: int
    parallelism: float | None


def build_timeline(
    edges: list[ledger.Edge],
    traces: dict[str, ChildTrace],
    replies: dict[str, int],
    notices: dict[str, int],
    run_dir: str,
) -> Timeline:
    """One span per depth-1 edge, in spawn order; `traces` is keyed by the edge's child
    file, `replies` by the replying child's header id, `notices` by childId."""
    spans = []
    for edge in sorted(edges, key=lambda e: (e.spawned_at_ms or 0, e.spawn_line)):
        trace = traces.get(edge.child, ChildTrace(None, None, None, None))
        spans.append(
            ChildSpan(
                child_id=edge.child_id,
                name=edge.name,
                transcript=os.path.relpath(edge.child, run_dir),
                deleted=edge.deleted,
                spawn_ms=edge.spawned_at_ms,
                start_ms=trace.start_ms,
                first_response_ms=trace.first_response_ms,
                reply_ms=replies.get(trace.header_id) if trace.header_id else None,
                notice_ms=notices.get(edge.child_id),
                end_ms=trace.end_ms,
            )
        )
    timed = [span for span in spans if span.duration_ms is not None]
    child_time = sum(span.duration_ms for span in timed)
    makespan = (
        max(span.end_ms for span in timed) - min(span.spawn_ms for span in timed) if timed else None
    )
    return Timeline(
        children=tuple(spans),
        max_concurrent=max_concurrent([(span.spawn_ms, span.end_ms) for span in timed]),
        makespan_ms=makespan,
        child_time_ms=child_time,
        parallelism=round(child_time / makespan, 3) if makespan else None,
    )


def max_concurrent(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one instant; one that ends as another begins does not
    overlap it."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = most = 0
    for _, step in events:
        open_now += step
        most = max(most, open_now)
    return most


# --- reading a run dir ------------------------------------------------------------------------


def read_timeline(run_dir: str) -> Timeline:
    """The timeline of a run dir: a runner's, or a materialized captured run."""
    agent_home = os.path.join(run_dir, "agent-home")
    sessions = os.path.join(run_dir, "sessions")
    files = [
        ledger.read_ledger(path) for path in ledger.ledger_candidates(agent_home, sessions, run_dir)
    ]
    edges = [edge for edge in ledger.replay(files).edges if edge.depth == 1]
    traces = {edge.child: read_child_trace(edge.child) for edge in edges}
    replies: dict[str, int] = {}
    notices: dict[str, int] = {}
    for parent in sorted({edge.parent for edge in edges}):
        read_receipts(parent, replies, notices)
    return build_timeline(edges, traces, replies, notices, run_dir)


def read_child_trace(path: str) -> ChildTrace:
    findings: list[Finding] = []
    header_id = start = first_response = end = None
    for line in iter_objects(path, findings, max_bytes=MAX_TRANSCRIPT_BYTES):
        record = line.record
        entry_type = text_field(record, "type")
        at = iso_to_ms(record.get("timestamp"))
        if line.number == 1 and entry_type == "session":
            header_id, start = text_field(record, "id"), at
        is_assistant = entry_type == "message" and (
            dict_field(record, "message").get("role") == "assistant"
        )
        if is_assistant and first_response is None:
            first_response = at
        if entry_type != HEARTBEAT and at is not None:
            end = at
    return ChildTrace(header_id, start, first_response, end)


def read_receipts(parent: str, replies: dict[str, int], notices: dict[str, int]) -> None:
    """The first reply per child header id and the first notice per childId in a parent."""
    findings: list[Finding] = []
    for line in iter_objects(parent, findings, max_bytes=MAX_TRANSCRIPT_BYTES):
        record = line.record
        if record.get("type") != "custom_message":
            continue
        at = iso_to_ms(record.get("timestamp"))
        details = dict_field(record, "details")
        custom_type = record.get("customType")
        if custom_type == "agent_message" and details.get("fromRelationship") == "child":
            sender = text_field(dict_field(details, "from"), "sessionId")
            if sender and at is not None:
                replies.setdefault(sender, at)
        elif custom_type in NOTICE_TYPES:
            child_id = text_field(details, "childId")
            if child_id and at is not None:
                notices.setdefault(child_id, at)
