"""The disk held against the runner's own channels (evidence/witness.py; docs/rubric.md
"Witness"): one small function per check, listed in `_CHECKS` with its reason code as in
rules/integrity.py. All but `stream` need a witness and pass vacuously without one (the
verdict then warns `unwitnessed`).

Times: a record appeared between the poll before (`before`) and the poll that found it
(`seen`); `TOLERANCE_S` covers the product stamping a record just before it writes it and a
busy machine's lag, and is small beside what backdating would buy.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator

from swarm_fanout.rules.integrity import Failure, Family

TOLERANCE_S = 1.0
ACP_STREAM = "acp-stream.jsonl"


def _sightings(f: Family, what: str) -> Iterator[dict]:
    for sighting in f.run.witness.sightings if f.run.witness else ():
        if sighting.get("what") == what:
            yield sighting


def _witness_present(f: Family) -> Iterator[Failure]:
    """The runner says it witnessed the run (result.json): its witness must be there."""
    if f.run.witness_expected and f.run.witness is None:
        yield Failure("result.json names a witness.jsonl that is not in the run dir")


def _witness_digest(f: Family) -> Iterator[Failure]:
    """The witness is the very file the runner wrote."""
    expected, witness = f.run.witness_expected, f.run.witness
    if expected and witness is not None and witness.sha256 != expected:
        detail = f"witness.jsonl has sha256 {witness.sha256}, result.json recorded {expected}"
        yield Failure(detail, file="witness.jsonl")


def _in_order(shown: tuple[str, ...], held: tuple[str, ...] | list[str]) -> bool:
    """Every one of `shown` is in `held`, in the same order (gaps allowed)."""
    rest = iter(held)
    return all(item in rest for item in shown)


def _shown(f: Family) -> tuple[str, tuple[str, ...], tuple[str, ...], frozenset[str]] | None:
    """What the root's stream showed, as (its file, model calls, cells, children): the
    one-shot or resident stream whose header is the parent's, else the ACP drive's, which
    names no model call (§13)."""
    stream, acp, parent = f.run.stream, f.run.acp_stream, f.parent
    if stream is not None and stream.header_id == parent.header_id:
        return "stdout.jsonl", stream.response_ids, stream.tool_call_ids, stream.child_ids
    if stream is None and acp is not None:
        return ACP_STREAM, (), acp.tool_call_ids, acp.child_ids
    return None


def _stream(f: Family) -> Iterator[Failure]:
    """The root's event stream (one-shot: up to its first idle, §7; ACP: its session
    updates, §13) shows only model calls and cells of the root transcript, in its order, and
    a child update for every child spawned in a cell it shows; it may skip whole turns (§7
    "A turn's events can be missing")."""
    parent = f.parent
    shown = _shown(f) if parent is not None else None
    if shown is None:
        return
    file, response_ids, cells, child_ids = shown
    ids = [call.response_id for call in parent.assistant_calls if call.response_id]
    for what, seen, held in (
        ("model calls", response_ids, ids),
        ("tool calls", cells, parent.tool_call_ids),
    ):
        if not _in_order(seen, held):
            detail = f"{len(seen)} {what} that are not, in order, among the root transcript's"
            yield Failure(f"the stream shows {detail} {len(held)}", file=file)
    streamed = set(cells)
    # A session's cells run one after another: the cell that ran at a moment is the last
    # one started by then (found by bisection: a run can have a thousand of each).
    calls = sorted(
        (call for call in parent.ipython_calls if call.started_ms is not None),
        key=lambda call: call.started_ms,
    )
    starts = [call.started_ms for call in calls]
    for edge in f.family:
        at = edge.spawned_at_ms
        index = bisect.bisect_right(starts, at) - 1 if at is not None else -1
        spawning = calls[index] if index >= 0 and calls[index].contains(at) else None
        if spawning is not None and spawning.call_id in streamed and edge.child_id not in child_ids:
            update = "subagent update" if file == ACP_STREAM else "rlm_child_update"
            detail = f"the stream shows the cell that spawned this child but no {update} for it"
            yield Failure(detail, edge.child_id, file)


def _ledger_lines(f: Family) -> Iterator[Failure]:
    """Every ledger line is the one the runner saw appear, and it saw every one."""
    if f.run.witness is None:
        return
    seen = {
        (str(sighting.get("file")), int(sighting.get("line") or 0)): str(sighting.get("sha256"))
        for sighting in _sightings(f, "ledger_line")
    }
    for name, digests in f.run.ledger_line_digests.items():
        for number, digest in enumerate(digests, start=1):
            was = seen.get((name, number))
            if was is None:
                yield Failure("the runner never saw this line appear", file=name, line=number)
            elif was != digest:
                yield Failure("the line was rewritten after it appeared", file=name, line=number)


def _timed_records(f: Family) -> Iterator[tuple[str, str | None, str, int, int, dict]]:
    """(what, child id, file, line, its own time in ms, the sighting) for every record the
    runner saw appear and whose time the record states."""
    if f.run.witness is None:
        return
    records = {
        (os.path.basename(record.ledger), record.line): record
        for item in f.run.ledgers
        for record in item.records
    }
    for sighting in _sightings(f, "ledger_line"):
        record = records.get((sighting.get("file"), sighting.get("line")))
        if record is not None and record.at_ms is not None:
            what = f"ledger {record.op}"
            yield what, record.child_id, record.ledger, record.line, record.at_ms, sighting
    transcripts = {
        (child.child_id, os.path.basename(transcript.path)): transcript
        for child in f.run.children
        for transcript in child.transcripts
    }
    for sighting in _sightings(f, "transcript"):
        transcript = transcripts.get((sighting.get("child_id"), sighting.get("file")))
        if transcript is not None and transcript.header_at_ms is not None:
            child_id = sighting.get("child_id")
            yield "child header", child_id, transcript.path, 1, transcript.header_at_ms, sighting
    parent = f.parent
    if parent is not None:
        name = os.path.basename(parent.path)
        replies = {reply.line: reply for reply in parent.replies}
        for sighting in _sightings(f, "reply"):
            reply = replies.get(sighting.get("line"))
            if sighting.get("file") == name and reply is not None and reply.at_ms is not None:
                yield "reply", None, parent.path, reply.line, reply.at_ms, sighting


def _backdated(f: Family) -> Iterator[Failure]:
    """No record claims a time before the runner last looked and did not find it."""
    for what, child_id, path, line, at_ms, sighting in _timed_records(f):
        before = float(sighting.get("before") or 0)
        if at_ms / 1000 < before - TOLERANCE_S:
            early = before - at_ms / 1000
            detail = f"the {what} says {early:.1f} s before the runner looked and it was not there"
            yield Failure(detail, child_id, f.path(path), line)


def _future_dated(f: Family) -> Iterator[Failure]:
    """No record claims a time after the runner had already seen it on disk."""
    for what, child_id, path, line, at_ms, sighting in _timed_records(f):
        seen = float(sighting.get("seen") or 0)
        if at_ms / 1000 > seen + TOLERANCE_S:
            late = at_ms / 1000 - seen
            detail = f"the {what} says {late:.1f} s after the runner had seen it on disk"
            yield Failure(detail, child_id, f.path(path), line)


def _callers(f: Family) -> Iterator[Failure]:
    """Every model call came from a process of the product's own, as the runner judged the
    caller of each connection to its proxy (shell/callers.py): not a kernel, nor anything a cell
    started."""
    for call in f.run.witness.model_calls if f.run.witness else ():
        caller = call.get("caller")
        if isinstance(caller, dict) and caller.get("product") is False:
            yield Failure(
                f"model call {call.get('seq')} came from pid {caller.get('pid')} "
                f"({caller.get('exe')}): {caller.get('reason')}",
                file="witness.jsonl",
            )


STREAM_FILES = ("stdout.jsonl", ACP_STREAM)  # the CLI's stdout, one-shot or ACP


def _stream_writers(f: Family) -> Iterator[Failure]:
    """Every byte of the one-shot or ACP stream was written by the CLI the runner started:
    the kernel names the writer of each piece that reaches the runner's end of its socket."""
    if f.run.witness is None:
        return
    processes = f.run.witness.header.get("processes")
    cli = processes.get("initial_pid") if isinstance(processes, dict) else None
    for channel in f.run.witness.channels:
        if channel.get("file") not in STREAM_FILES or not isinstance(channel.get("writers"), list):
            continue
        for writer in channel["writers"]:
            if isinstance(writer, dict) and writer.get("pid") != cli:
                yield Failure(
                    f"pid {writer.get('pid')} wrote {writer.get('bytes')} bytes of the stream; "
                    f"the CLI is pid {cli}",
                    file="stdout.jsonl",
                )


# (check, reason code, sentence), in verdict order, named as in rules/integrity.py.
_CHECKS: tuple[tuple[Callable[[Family], Iterator[Failure]], str, str], ...] = (
    (
        _witness_present,
        "witness_missing",
        "the runner witnessed this run, but its witness.jsonl is missing",
    ),
    (
        _witness_digest,
        "witness_tampered",
        "witness.jsonl is not the file the runner wrote: its sha256 differs from result.json's",
    ),
    (
        _stream,
        "stream_mismatch",
        "the root's event stream and its transcript disagree (other model calls or cells, or "
        "a spawned child the stream never showed)",
    ),
    (
        _ledger_lines,
        "rewritten_record",
        "a ledger line is not the one the runner saw appear, or appeared unseen",
    ),
    (
        _backdated,
        "backdated_record",
        "a ledger record, child header or reply claims a time before the runner last looked "
        "and did not find it",
    ),
    (
        _future_dated,
        "future_dated_record",
        "a ledger record, child header or reply claims a time after the runner had seen it",
    ),
    (
        _callers,
        "foreign_model_call",
        "a model call came from a process that is not the product's own (a kernel, or a "
        "process a cell started)",
    ),
    (
        _stream_writers,
        "foreign_stream_writer",
        "a process other than the one-shot CLI wrote into its event stream",
    ),
)
WITNESS_CHECKS = tuple((check.__name__[1:], *rest, check) for check, *rest in _CHECKS)
WITNESS_MESSAGES = {code: sentence for _, code, sentence, _ in WITNESS_CHECKS}
