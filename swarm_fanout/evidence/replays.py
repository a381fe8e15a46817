"""`replay.jsonl` read back: what each child's recorded cells did when the harness ran them
again (shell/replay.py writes it; its lines: docs/results.md "The run dir"). Never raises: a
file that is missing is None, a line that is not a well-formed record is left out.
"""

from __future__ import annotations

from typing import NamedTuple

from swarm_fanout.evidence.jsonl import Finding, iter_objects

REPLAY_VERSION = 1
MAX_REPLAY_BYTES = 64 * 1024 * 1024


class CellError(NamedTuple):
    """A replayed cell that raised."""

    cell: int  # its index among the child's cells
    type: str
    message: str
    needs_product: bool  # it called what the stand-in cannot answer (rlm(), a model)
    failed_in_run: bool  # it raised in the run too (details.status "error")


class Pass(NamedTuple):
    """One replay of a child's cells."""

    sent: tuple[str, ...]  # the messages it sent its parent, in order
    errors: tuple[CellError, ...]
    # Per cell, the numbers of interest (its replies', the twins' answers) it printed or sent.
    shown: tuple[frozenset[int], ...]
    # What its cells reached for that the replay withholds: a network connection, a file to
    # read in the run's dir outside its repo or in /tmp, missing here.
    reached: tuple[str, ...]
    timed_out: bool
    failure: str | None  # why the replay itself did not run to the end (None: it did)


class ChildReplay(NamedTuple):
    child_id: str
    session_id: str
    cells: int
    sent_in_run: tuple[str, ...]  # the messages it sent its parent in the run
    # Each number of its replies -> its first cell whose result showed it in the run.
    first_shown: dict[int, int]
    faithful: Pass
    twin: Pass | None  # None: no shard of the fixture has a twin


class Replay(NamedTuple):
    kernel_python: str
    ipython: bool
    twins: dict[str, int]  # shard file -> its twin's expected answer
    children: dict[str, ChildReplay]  # by the child's session id (its header id)
    # The files of the run's repo every replay's copy held that hold no number the children
    # replied with (`repo/…`): a child that read one in the run read it under replay too, so
    # the replay itself judges what it drew from it.
    repo_files: frozenset[str] = frozenset()


def read_replay(path: str) -> Replay | None:
    """The replay record at `path`, or None when there is none or its head is unreadable."""
    findings: list[Finding] = []
    head = None
    children: dict[str, ChildReplay] = {}
    for line in iter_objects(path, findings, max_bytes=MAX_REPLAY_BYTES):
        record = line.record
        if head is None:
            if record.get("type") != "replay" or record.get("version") != REPLAY_VERSION:
                return None
            head = record
        elif record.get("type") == "child":
            try:
                child = _child(record)
            except (KeyError, TypeError, ValueError):
                continue  # not a well-formed child record
            children[child.session_id] = child
    if head is None:
        return None
    twins = head.get("twins") if isinstance(head.get("twins"), dict) else {}
    return Replay(
        kernel_python=str(head.get("kernel_python") or ""),
        ipython=head.get("ipython") is True,
        twins={str(k): v for k, v in twins.items() if type(v) is int},
        children=children,
        repo_files=frozenset(_texts(head.get("repo_files"), ())),
    )


def _of(value: object, kind: type):
    """`value` where it is of exactly `kind` (a bool is no int); else TypeError."""
    if type(value) is not kind:
        raise TypeError(kind.__name__)
    return value


def _texts(value: object, default: tuple[()] | None = None) -> tuple[str, ...]:
    """A list of strings as a tuple; else `default`, or TypeError where there is none."""
    if isinstance(value, list) and all(type(item) is str for item in value):
        return tuple(value)
    if default is None:
        raise TypeError("a list of strings")
    return default


def _pass(value: object) -> Pass:
    value = _of(value, dict)
    errors = [_of(item, dict) for item in _of(value["errors"], list)]
    failure = value.get("failure")
    return Pass(
        _texts(value["sent"]),
        tuple(
            CellError(
                _of(item["cell"], int),
                str(item.get("type") or ""),
                str(item.get("message") or ""),
                item.get("needs_product") is True,
                item.get("failed_in_run") is True,
            )
            for item in errors
        ),
        tuple(
            frozenset(n for n in _of(c, list) if type(n) is int) for c in _of(value["shown"], list)
        ),
        _texts(value.get("reached"), ()),
        value.get("timed_out") is True,
        failure if isinstance(failure, str) else None,
    )


def _child(record: dict) -> ChildReplay:
    cells, twin = record.get("cells"), record.get("twin")
    first = record.get("first_shown") if isinstance(record.get("first_shown"), dict) else {}
    return ChildReplay(
        _of(record["child_id"], str),
        _of(record["session_id"], str),
        cells if type(cells) is int else 0,
        _texts(record["sent_in_run"]),
        {int(n): index for n, index in first.items() if str(n).isdigit() and type(index) is int},
        _pass(record["faithful"]),
        None if twin is None else _pass(twin),
    )
