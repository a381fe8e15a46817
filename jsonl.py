"""Bounded, total readers for the JSON files an agent run leaves behind.

Every file the harness reads was written by the agent's process tree, so any byte
sequence must yield records plus named findings, never an exception: invalid
UTF-8, NUL bytes, lines of several megabytes, records of the wrong JSON type, a
torn final line, a file that vanished or is a symlink loop.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

# A child's reply is capped at 16 384 chars (contract §9), but tool results can
# carry megabytes of output. Lines longer than this are skipped, not loaded.
MAX_LINE_BYTES = 32 * 1024 * 1024
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    """Something wrong with a file the agent wrote: where, a stable code, a sentence."""

    file: str
    line: int
    code: str
    detail: str

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "code": self.code, "detail": self.detail}


@dataclass(frozen=True)
class Line:
    """One decoded JSON object; `torn` marks a final line with no newline."""

    number: int
    record: dict
    torn: bool


def iter_objects(
    path: str,
    findings: list[Finding],
    *,
    max_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    label: str | None = None,
) -> Iterator[Line]:
    """Yield every line of a JSONL file that decodes to a JSON object.

    Everything else is appended to `findings` with a code: `unreadable`,
    `line_too_long`, `invalid_utf8`, `malformed_json`, `not_an_object`,
    `torn_tail` (a final line with no newline that does not parse: a torn
    append, which the product itself tolerates), `byte_cap` (stopped reading
    after `max_bytes`).
    """
    name = label or path
    handle = open_regular(path, name, findings)
    if handle is None:
        return
    try:
        consumed = 0
        number = 0
        while True:
            if max_bytes is not None and consumed >= max_bytes:
                if handle.read(1):
                    findings.append(
                        Finding(name, number, "byte_cap", f"stopped after {max_bytes} bytes")
                    )
                return
            try:
                raw = handle.readline(max_line_bytes + 1)
            except OSError as error:
                findings.append(Finding(name, number, "unreadable", f"read failed: {error}"))
                return
            if not raw:
                return
            number += 1
            consumed += len(raw)
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                consumed += _skip_rest_of_line(handle)
                findings.append(
                    Finding(name, number, "line_too_long", f"longer than {max_line_bytes} bytes")
                )
                continue
            torn = not raw.endswith(b"\n")
            line = _decode(raw, name, number, torn, findings)
            if line is not None:
                yield line
    finally:
        handle.close()


def open_regular(path: str, name: str, findings: list[Finding]):
    """Open a regular file for reading without following a final symlink.

    An agent can leave a FIFO (open would block forever), a device or a symlink
    pointing outside the run where a transcript should be; those are findings.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        code = "symlink" if os.path.islink(path) else "unreadable"
        findings.append(Finding(name, 0, code, f"cannot open: {error.strerror}"))
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            findings.append(Finding(name, 0, "not_a_regular_file", "not a regular file"))
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")
    except OSError as error:
        os.close(fd)
        findings.append(Finding(name, 0, "unreadable", f"cannot stat: {error.strerror}"))
        return None


def _skip_rest_of_line(handle) -> int:
    skipped = 0
    while True:
        chunk = handle.readline(_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def _decode(raw: bytes, name: str, number: int, torn: bool, findings: list[Finding]):
    text_bytes = raw.rstrip(b"\r\n")
    if not text_bytes.strip():
        return None
    try:
        text = text_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        findings.append(
            Finding(name, number, "invalid_utf8", f"byte {error.start}: {error.reason}")
        )
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:
        code = "torn_tail" if torn else "malformed_json"
        findings.append(Finding(name, number, code, _short(str(error))))
        return None
    if not isinstance(value, dict):
        findings.append(
            Finding(name, number, "not_an_object", f"a JSON {type(value).__name__}, not an object")
        )
        return None
    return Line(number, value, torn)


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
    handle = open_regular(path, path, findings)
    if handle is None:
        return None
    with handle:
        return handle.read(max_bytes + 1)


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
    if not isinstance(value, str) or not value:
        return None
    if len(value) == 24 and value[10] == "T" and value[19] == "." and value[23] == "Z":
        # The product's own shape, `2026-12-02T11:14:10.194Z`, parsed by slicing:
        # a ledger can hold 100 000 of them.
        clock = value[11:13] + value[14:16] + value[17:19] + value[20:23]
        day = _day_ms(value[:10])
        if day is not None and clock.isdigit() and value[13] == value[16] == ":":
            hours, minutes, seconds = int(clock[0:2]), int(clock[2:4]), int(clock[4:6])
            if hours < 24 and minutes < 60 and seconds < 60:
                return day + ((hours * 60 + minutes) * 60 + seconds) * 1000 + int(clock[6:])
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return round(moment.timestamp() * 1000)


@functools.lru_cache(maxsize=1024)
def _day_ms(day: str) -> int | None:
    if not (day[:4].isdigit() and day[5:7].isdigit() and day[8:10].isdigit()):
        return None
    try:
        midnight = datetime.fromisoformat(day + "T00:00:00+00:00")
    except ValueError:
        return None
    return round(midnight.timestamp() * 1000)


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
