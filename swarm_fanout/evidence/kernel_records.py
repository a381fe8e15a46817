"""What each kernel recorded of itself (shell/kernel_record.py writes it; docs/witness.md
"What each kernel did"), read back per session. Never raises: no record dir is None, a line
that is not a well-formed entry is left out.

Paths are made the run's: a path in the run dir as the kernel saw it (the part of its
session dir before `session-artifacts/`) becomes `repo/…`, `sessions/…`; one in the
kernel's TMPDIR becomes `tmp/…`, where the run dir's layout has it; anything else (the
sandbox's own /tmp) stays absolute.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import NamedTuple

from swarm_fanout.evidence.jsonl import Finding, iter_objects

MAX_RECORD_BYTES = 16 * 1024 * 1024
MARKER = os.sep + "session-artifacts" + os.sep
REDIRECT = re.compile(r"^\d*[<>]+&?")


class SessionRecord(NamedTuple):
    """What one session's kernels (and the processes they forked) did."""

    read: set[str]
    written: set[str]  # opened to write, or renamed to
    connected: list[str]  # each address, as text
    named: set[str]  # the paths the programs it started name in their argv
    ran: list[str]  # each program's argv, as one line


def read_kernel_records(directory: str) -> dict[str, SessionRecord] | None:
    """Each session's record, by its session dir's name (the root's header id, a child's
    `sub-<8 hex>`: contract §11 "The kernel's session"); None when the run has no record."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".jsonl"))
    except OSError:
        return None
    found: dict[str, SessionRecord] = {}
    for name in names:
        findings: list[Finding] = []
        lines = iter_objects(os.path.join(directory, name), findings, max_bytes=MAX_RECORD_BYTES)
        head = next(lines, None)
        session_dir = head.record.get("session_dir") if head else None
        if head is None or head.record.get("what") != "kernel" or not isinstance(session_dir, str):
            continue
        root = session_dir.split(MARKER, 1)[0] if MARKER in session_dir else ""
        places = [(root, ""), (str(head.record.get("tmpdir") or ""), "tmp")]
        key = os.path.basename(session_dir.rstrip(os.sep))
        into = found.setdefault(key, SessionRecord(set(), set(), [], set(), []))
        for line in lines:
            _add(line.record, into, [(place, as_) for place, as_ in places if place])
    return found


def _ours(path: str, places: list[tuple[str, str]]) -> str:
    for place, as_ in places:
        if path.startswith(place.rstrip(os.sep) + os.sep):
            return os.path.join(as_, path[len(place.rstrip(os.sep)) + 1 :])
    return path


def _add(entry: dict, into: SessionRecord, places: list[tuple[str, str]]) -> None:
    what, address = entry.get("what"), entry.get("address")
    if what in ("open", "rename") and isinstance(entry.get("path"), str):
        reading = what == "open" and entry.get("mode") == "r"
        (into.read if reading else into.written).add(_ours(entry["path"], places))
    elif what == "connect" and isinstance(address, (str, list)):
        text = address if isinstance(address, str) else ":".join(str(part) for part in address)
        into.connected.append(_ours(text, places))
    elif what == "exec" and isinstance(entry.get("argv"), list):
        argv = [str(item) for item in entry["argv"]]
        into.ran.append(shlex.join(argv)[:300])
        for word in _words(argv):
            if "/" in word or "." in word:
                where = os.path.join(str(entry.get("cwd") or "/"), word)
                into.named.add(_ours(os.path.normpath(where), places))


def _words(argv: list[str]) -> list[str]:
    """The words of a command line, a shell's `-c` script split as the shell would."""
    words = []
    for index, item in enumerate(argv):
        if index > 0 and argv[index - 1] == "-c":
            try:
                words += shlex.split(item, comments=True)
            except ValueError:
                words += item.split()
        else:
            words.append(item)
    return [REDIRECT.sub("", word) for word in words[1:] if not word.startswith("-")]
