"""Bounded, total readers for the JSON files an agent run leaves behind.

Every file the harness reads was written by the agent's process tree, so any byte
sequence must yield records plus named findings, never an exception: invalid
UTF-8, NUL bytes, lines of several megabytes, records of the wrong JSON type, a
torn final line, a file that vanished or is a symlink loop.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple

# A child's reply is capped at 16 384 chars (contract §9), but tool results can
# carry megabytes of output. Lines longer than this are skipped, not loaded.
MAX_LINE_BYTES = 32 * 1024 * 1024
# Read in pieces this large: a line of a tool result's output, hundreds of kilobytes, is then
# a read or two rather than dozens of 8 KiB ones.
READ_BUFFER_BYTES = 1024 * 1024


class Finding(NamedTuple):
    """Something wrong with a file the agent wrote: where, a stable code, a sentence."""

    file: str
    line: int
    code: str
    detail: str


class Line(NamedTuple):
    """One decoded JSON object and the number of its line."""

    number: int
    record: Any


def iter_objects(
    path: str,
    findings: list[Finding],
    *,
    max_bytes: int | None = None,
    skip: tuple[bytes, ...] = (),
) -> Iterator[Line]:
    """Yield every line of a JSONL file that decodes to a JSON object; everything else is a
    finding (docs/rubric.md "Findings"). A whole line (it ends in a newline) that starts with
    one of `skip` is passed over unread. Reading stops after `max_bytes` (`byte_cap`), but
    the line that crosses the cap is still read whole."""
    handle = open_regular(path, findings)
    if handle is None:
        return
    with handle:
        consumed = number = 0
        while True:
            try:
                if max_bytes is not None and consumed >= max_bytes:
                    if handle.read(1):
                        detail = f"stopped after {max_bytes} bytes"
                        findings.append(Finding(path, number, "byte_cap", detail))
                    return
                raw = handle.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    return
                number += 1
                consumed += len(raw)
                ended = raw.endswith(b"\n")
                if not ended and len(raw) > MAX_LINE_BYTES:
                    consumed += skip_rest_of_line(handle)
                    detail = f"longer than {MAX_LINE_BYTES} bytes"
                    findings.append(Finding(path, number, "line_too_long", detail))
                    continue
                if ended and raw.startswith(skip):
                    continue
            except OSError as error:
                findings.append(Finding(path, number, "unreadable", f"read failed: {error}"))
                return
            line = _decode(raw, path, number, not ended, findings)
            if line is not None:
                yield line


def _decode(raw: bytes, name: str, number: int, torn: bool, findings: list[Finding]):
    """The object of one line, or None with what is wrong with it (a blank line: nothing)."""
    text_bytes = raw.rstrip(b"\r\n")
    if not text_bytes.strip():
        return None
    try:
        text = text_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        detail = f"byte {error.start}: {error.reason}"
        findings.append(Finding(name, number, "invalid_utf8", detail))
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        code = "torn_tail" if torn else "malformed_json"
        findings.append(Finding(name, number, code, _short(str(error))))
        return None
    if value.__class__ is not dict:
        detail = f"a JSON {type(value).__name__}, not an object"
        findings.append(Finding(name, number, "not_an_object", detail))
        return None
    return Line(number, value)


def skip_rest_of_line(handle) -> int:
    """Reads on past the next newline; the bytes it read."""
    skipped = 0
    while True:
        chunk = handle.readline(1024 * 1024)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def open_regular(path: str, findings: list[Finding]):
    """Open a regular file for reading without following a final symlink.

    An agent can leave a FIFO (open would block forever), a device or a symlink
    pointing outside the run where a transcript should be; those are findings.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        code = "symlink" if os.path.islink(path) else "unreadable"
        findings.append(Finding(path, 0, code, f"cannot open: {error.strerror}"))
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            findings.append(Finding(path, 0, "not_a_regular_file", "not a regular file"))
            os.close(fd)
            return None
        return os.fdopen(fd, "rb", buffering=READ_BUFFER_BYTES)
    except OSError as error:
        os.close(fd)
        findings.append(Finding(path, 0, "unreadable", f"cannot stat: {error.strerror}"))
        return None


def read_json_object(path: str, findings: list[Finding], *, max_bytes: int = 1024 * 1024):
    """Read one small JSON object file (a display record, a manifest) or return None."""
    raw = _read_capped(path, findings, max_bytes)
    if raw is None:
        return None
    if len(raw) > max_bytes:
        findings.append(Finding(path, 0, "byte_cap", f"larger than {max_bytes} bytes"))
        return None
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        findings.append(Finding(path, 0, "invalid_utf8", f"byte {error.start}: {error.reason}"))
        return None
    except (ValueError, RecursionError) as error:
        findings.append(Finding(path, 0, "malformed_json", _short(str(error))))
        return None
    if not isinstance(value, dict):
        findings.append(Finding(path, 0, "not_an_object", f"a JSON {type(value).__name__}"))
        return None
    return value


def _read_capped(path: str, findings: list[Finding], max_bytes: int) -> bytes | None:
    """Up to `max_bytes + 1` bytes of a regular file, so the caller can tell it was longer."""
    handle = open_regular(path, findings)
    if handle is None:
        return None
    with handle:
        # Sized from fstat (asking for `max_bytes` allocates that much); a file that grew
        # since is read on to the cap.
        try:
            size = os.fstat(handle.fileno()).st_size
        except OSError:
            size = 0
        raw = handle.read(min(max_bytes, size) + 1)
        if size < len(raw) <= max_bytes:  # it grew since fstat
            raw += handle.read(max_bytes + 1 - len(raw))
        return raw


def read_text(path: str, findings: list[Finding], *, max_bytes: int) -> str | None:
    """Read an agent-written text file up to `max_bytes`, replacing undecodable bytes."""
    if not os.path.lexists(path):
        return None
    raw = _read_capped(path, findings, max_bytes)
    if raw is None:
        return None
    if len(raw) > max_bytes:
        findings.append(Finding(path, 0, "byte_cap", f"only the first {max_bytes} bytes read"))
        raw = raw[:max_bytes]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        findings.append(Finding(path, 0, "invalid_utf8", f"byte {error.start}: {error.reason}"))
        return raw.decode("utf-8", errors="replace")


def iso_to_ms(value: object) -> int | None:
    """Epoch milliseconds of an ISO-8601 string such as `2026-12-02T11:14:10.194Z`."""
    if value.__class__ is not str or not value:
        return None
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return round(moment.timestamp() * 1000)


def text_field(record: dict, key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) else None


def int_field(record: dict, key: str) -> int | None:
    value = record.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def dict_field(record: dict, key: str) -> dict:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
