"""When each depth-1 child of a run was spawned, started, answered, replied and ended.

`read_timeline` reads the run dir with the scorer's collector (evidence/artifacts.py), and
`timeline_of` takes a run already collected; `build_timeline` is pure. Per child: its spawn
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

from swarm_fanout import ledger
from swarm_fanout.evidence import artifacts


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
    return timeline_of(artifacts.collect(run_dir, None))


def timeline_of(run: artifacts.RunArtifacts) -> Timeline:
    """The timeline of collected artifacts: only transcripts where the product puts them
    count (an edge whose child file lies elsewhere has no trace)."""
    edges = [edge for edge in run.replay.edges if edge.depth == 1]
    located = artifacts.transcripts_by_path(run.children)
    traces = {}
    for edge in edges:
        if edge.child in located:
            child = located[edge.child][1]
            traces[edge.child] = ChildTrace(
                child.header_id, child.header_at_ms, child.first_response_ms, child.end_ms
            )
    replies: dict[str, int] = {}
    notices: dict[str, int] = {}
    for reply in run.parent.replies if run.parent else ():
        if reply.from_session_id and reply.at_ms is not None:
            replies.setdefault(reply.from_session_id, reply.at_ms)
    for notice in run.parent.notices if run.parent else ():
        if notice.child_id and notice.at_ms is not None:
            notices.setdefault(notice.child_id, notice.at_ms)
    return build_timeline(edges, traces, replies, notices, run.run_dir)


def flagged_children(verdict: dict | None) -> dict[str, tuple[str, ...]]:
    """Per child id, the reason codes of the verdict that name it (a reason's own child, or
    its shard's child): a child that replied may still be one the verdict failed
    (`child_did_no_work`, `unsent_reply`, a wrong answer from its shard)."""
    verdict = verdict if isinstance(verdict, dict) else {}
    by_shard = {
        row.get("file"): row.get("child_id")
        for row in verdict.get("shards") or []
        if isinstance(row, dict)
    }
    found: dict[str, list[str]] = {}
    for reason in verdict.get("reasons") or []:
        if not isinstance(reason, dict):
            continue
        child = reason.get("child_id") or by_shard.get(reason.get("shard"))
        code = reason.get("code")
        if isinstance(child, str) and isinstance(code, str) and code not in found.get(child, []):
            found.setdefault(child, []).append(code)
    return {child: tuple(codes) for child, codes in found.items()}
