"""Bounded, total readers for the JSON files an agent run leaves behind.

Every file the harness reads was written by the agent's process tree, so any byte
sequence must yield records plus named findings, never an exception: invalid
UTF-8, NUL bytes, lines of several megabytes, records of the wrong JSON type, a
torn final line, a file that vanished or is a symlink loop.
"""

from __future__ import annotations

import functools
import json
import json.scanner
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, NamedTuple

# A child's reply is capped at 16 384 chars (contract §9), but tool results can
# carry megabytes of output. Lines longer than this are skipped, not loaded.
MAX_LINE_BYTES = 32 * 1024 * 1024
# Blocks of about this size are read, decoded and parsed in turn. A block and its
# decoded text stay in the CPU's cache while they are parsed: on the project's 2-core VM,
# 256 KiB scored 3% faster than 1 MiB at 100 children and 6% faster at 1,000 (64 KiB
# was as good at 100 and slower at 1,000, where a line often outgrows the block).
_CHUNK = 256 * 1024


@dataclass(frozen=True)
class Finding:
    """Something wrong with a file the agent wrote: where, a stable code, a sentence."""

    file: str
    line: int
    code: str
    detail: str

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "code": self.code, "detail": self.detail}


# (text, start, end, line number) -> a record for text[start:end], or None.
Shortcut = Callable[[str, int, int, int], Any]
# (text, start, number of the line before) -> (records, end, count): the records of the
# `count` whole lines from `start` on, each ending in its newline, that it vouches for.
Batch = Callable[[str, int, int], tuple[list, int, int]]

# Groups of byte strings: a line is wanted when it holds every one of some group.
Wanted = tuple[tuple[bytes, ...], ...]


class Layout(NamedTuple):
    """What a caller of `iter_objects(wanted=...)` knows of its file's own layout, to skip
    most lines on their first bytes alone (see `_wanted_lines`).

    `skip`: line starts, each the object's first key and its whole value with the byte
    after it (`{"type":"message_update",`), of lines the caller never needs. `heads`: line
    starts, each ending in a key's colon (`{"type":"turn_end","message":`), of lines of
    which the caller needs only that key's value: the value is parsed, the rest not.
    """

    skip: tuple[bytes, ...] = ()
    heads: tuple[bytes, ...] = ()


NO_LAYOUT = Layout()


def layout_of(
    skip_types: tuple[str, ...], skip_starts: tuple[str, ...] = (), heads: tuple[str, ...] = ()
) -> Layout:
    """A `Layout` for objects whose first key is `type` (the product's own order, §7):
    `skip_types` are type values never needed; `skip_starts` and `heads` are line starts
    as `Layout.skip` and `Layout.heads`."""
    starts = [start.encode() for start in skip_starts]
    for kind in skip_types:
        first = json.dumps({"type": kind}, separators=(",", ":"))[:-1].encode()
        starts += [first + b",", first + b"}"]
    return Layout(tuple(starts), tuple(head.encode() for head in heads))


# The record of a line skipped unread (see `iter_objects`): it has no fields.
UNREAD: Any = MappingProxyType({})
# Set only by tests/test_prefilter.py, to hold the reading that skips lines to the plain one.
PARSE_EVERY_LINE = False


class Line(NamedTuple):
    """One decoded JSON object; `torn` marks a final line with no newline.

    A named tuple: a ledger yields 100 000 of them, and a tuple is built several
    times faster than a frozen dataclass.
    """

    number: int
    record: Any  # the object's dict, or what the caller's shortcut made of the line
    torn: bool


def iter_objects(
    path: str,
    findings: list[Finding],
    *,
    max_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    label: str | None = None,
    shortcut: Shortcut | None = None,
    batch: Batch | None = None,
    wanted: Wanted | None = None,
    layout: Layout = NO_LAYOUT,
) -> Iterator[Line]:
    """Yield every line of a JSONL file that decodes to a JSON object.

    Everything else is appended to `findings` with a code: `unreadable`,
    `line_too_long`, `invalid_utf8`, `malformed_json`, `not_an_object`,
    `torn_tail` (a final line with no newline that does not parse: a torn
    append, which the product itself tolerates), `byte_cap` (stopped reading
    after `max_bytes`; the line that crosses the cap is still read whole).

    The file is read in blocks of whole lines, each decoded once and parsed line
    by line in place; a line the fast path refuses is parsed again on its own to
    name what is wrong with it.

    `shortcut(text, start, end, number)`, when given, sees each line first (as
    `text[start:end]`, newline excluded) and may return what to yield as the
    line's record instead of parsing it; it must return None for any line it
    cannot vouch is a JSON object.

    `batch(text, start, number)`, when given, is offered the lines from `start` on
    before each line the shortcut and the parser see; the records of the run of whole
    lines it vouches for are yielded together, as one `Line` whose record is their list
    and whose number is the last one's (one call and one yield for hundreds of lines).

    `wanted`, when given, lets a caller that needs only some records skip the rest
    unread (see `_wanted_lines`): such a line yields `UNREAD` as its record, and is
    neither decoded nor parsed, so nothing about it is a finding. `layout` (with `wanted`)
    skips or half-reads lines by their first bytes.
    """
    name = label or path
    if PARSE_EVERY_LINE:
        wanted = shortcut = batch = None
    handle = open_regular(path, name, findings)
    if handle is None:
        return
    block_size = max(1, min(_CHUNK, max_line_bytes))
    # The first block is sized from fstat (most files an agent leaves are small,
    # and asking for a whole block allocates it); later blocks are full size.
    first = min(block_size, _size(handle) + 1)
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
            size = first or block_size
            first = 0
            if max_bytes is not None:
                size = min(size, max_bytes - consumed)
            try:
                block = handle.read(size)
                # A short read of a regular file is its end (peek confirms it
                # without asking for, and allocating, another whole block).
                ended = len(block) < size and not handle.peek(1)
                if block and block[-1:] != b"\n":
                    # Finish the block's last line, reading no more than the line cap.
                    partial = len(block) - block.rfind(b"\n") - 1
                    block += handle.readline(max_line_bytes + 1 - partial)
            except OSError as error:
                findings.append(Finding(name, number, "unreadable", f"read failed: {error}"))
                return
            if not block:
                return
            consumed += len(block)
            too_long = False
            if block[-1:] != b"\n":
                tail_start = block.rfind(b"\n") + 1
                # Without a newline the last line either ends the file (a torn
                # append) or was cut at the line cap.
                too_long = len(block) - tail_start > max_line_bytes
                if too_long:
                    block = block[:tail_start]
            if wanted is None:
                number = yield from _block_lines(block, number, name, findings, shortcut, batch)
            else:
                number = yield from _wanted_lines(block, number, name, findings, wanted, layout)
            if ended and not too_long:
                return
            if too_long:
                number += 1
                consumed += _skip_rest_of_line(handle)
                findings.append(
                    Finding(name, number, "line_too_long", f"longer than {max_line_bytes} bytes")
                )
    finally:
        handle.close()


def _block_lines(
    block: bytes,
    number: int,
    name: str,
    findings: list[Finding],
    shortcut: Shortcut | None,
    batch: Batch | None = None,
):
    """Yield the objects of a block of whole lines (the last may lack its newline),
    numbered on from `number`; return the number of the block's last line."""
    if not block:
        return number
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        # Somewhere in the block is a bad byte: take its lines one at a time.
        lines = block.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        last = len(lines) - 1
        for index, raw in enumerate(lines):
            torn = index == last and block[-1:] != b"\n"
            line = _decode(raw, name, number + index + 1, torn, findings)
            if line is not None:
                yield line
        return number + len(lines)
    scan = _SCAN
    # tuple.__new__ skips the named tuple's Python-level constructor (a frame a line).
    new = tuple.__new__
    length = len(text)
    # In an ASCII block a character's index is its byte's, and bytes.find finds a newline
    # by memchr, many times faster than str.find on the decoded text (CPython 3.11).
    find = block.find if length == len(block) else text.find
    end_of_line = b"\n" if length == len(block) else "\n"
    pos = 0
    while pos < length:
        if batch is not None:
            records, end, count = batch(text, pos, number)
            if count:
                number += count
                yield new(Line, (number, records, False))
                pos = end
                if pos >= length:
                    break
        newline = find(end_of_line, pos)
        torn = newline < 0
        if torn:
            newline = length
        number += 1
        if shortcut is not None:
            value = shortcut(text, pos, newline, number)
            if value is not None:
                yield new(Line, (number, value, torn))
                pos = newline + 1
                continue
        try:
            value, end = scan(text, pos)
        except (StopIteration, ValueError, RecursionError):
            value = end = None
        if value.__class__ is dict and (
            end == newline or (end < newline and not text[end:newline].strip(" \t\r"))
        ):
            yield new(Line, (number, value, torn))
        else:
            # Leading blanks, a blank line, bad JSON, a value that runs on past its
            # line, a non-object: the slow path says which.
            raw = text[pos:newline].encode("utf-8", "surrogatepass")
            line = _decode(raw, name, number, torn, findings)
            if line is not None:
                yield line
        pos = newline + 1
    return number


# What a line that may be skipped unread looks like: one JSON object on its line, as
# the product writes them, with nothing before its first key or after its last brace.
_OBJECT_START = b'{"'
_CLOSE = 0x7D  # }
# A `\u` escape that spells an ASCII character: a line with one could hold a wanted
# marker escaped, and is read.
_ASCII_ESCAPE = b"\\u00"
# A line's first backslashes are looked at one by one (most lines have none or a few,
# and memchr finds them at memory speed); past these the line is searched for the escape.
_BACKSLASHES_LOOKED_AT = 8


def _ascii_escape_in(block: bytes, start: int, end: int) -> bool:
    """Whether `block[start:end]` holds a `\\u00XX` escape: its first backslashes are
    found by memchr and looked at, and past a few the rest is searched for the escape."""
    find = block.find
    escape = find(b"\\", start, end)
    for _ in range(_BACKSLASHES_LOOKED_AT):
        if escape < 0:
            return False
        if block.startswith(_ASCII_ESCAPE, escape):
            return True
        # `\\` is one escape: the next backslash is no escape's start.
        escape = find(b"\\", escape + 2, end)
    return escape >= 0 and find(_ASCII_ESCAPE, escape, end) >= 0


def _wanted_lines(
    block: bytes,
    number: int,
    name: str,
    findings: list[Finding],
    wanted: Wanted,
    layout: Layout = NO_LAYOUT,
):
    """`_block_lines` for a caller that needs only the records whose line holds every
    byte string of one group of `wanted`: every other line is skipped unread.

    Markers are ASCII letters, digits and `_`, and the caller asks for the values it
    needs (`message_end`, `assistant`), not for keys. Why a skipped line can hold no
    wanted record: a JSON string's decoded characters are its raw bytes but for
    escapes, and of the escapes only `\\u00XX` decodes to a letter, digit or `_`; so a
    line with no such escape holds a value such as `message_end` only if it holds its
    bytes. The test is conclusive whatever the order, spacing or repetition of keys.

    Most lines of the product's own files are decided sooner, by `layout`: a line that
    starts with one of its `skip` starts is skipped, and one that starts with one of its
    `heads` yields an object of the head's keys with only the last key's value parsed
    (`_head_record`). These rest on the line's first key: a JSON object's later duplicate
    of that key (which `json.loads` would take instead) is not looked for. The product
    writes no duplicate keys; the markers above, for every other line, do not care.

    What is still read and reported as today: the file's first line, its torn last
    line, a line that does not start with `{"` and end with `}` (blank lines, garbage,
    NUL bytes, a value that is no object), and every line of a block that is not valid
    UTF-8 (the block goes the plain way). What is no longer checked: that a skipped
    line, which looks like an object and is valid UTF-8, is well-formed JSON, nor the
    rest of a half-read line after its value.
    """
    if not block.isascii():
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return (yield from _block_lines(block, number, name, findings, None))
    find = block.find
    startswith = block.startswith
    skip, heads = layout
    scan = _SCAN
    new = tuple.__new__
    length = len(block)
    pos = 0
    while pos < length:
        newline = find(b"\n", pos)
        end = length if newline < 0 else newline
        read = (
            number == 0
            or newline < 0
            or not startswith(_OBJECT_START, pos)
            or block[end - 1] != _CLOSE
        )
        if not read:
            if skip and startswith(skip, pos):
                number += 1
                yield new(Line, (number, UNREAD, False))
                pos = end + 1
                continue
            if heads and startswith(heads, pos):
                record = _head_record(block, pos, end, heads)
                if record is not None:
                    number += 1
                    yield new(Line, (number, record, False))
                    pos = end + 1
                    continue
            read = _ascii_escape_in(block, pos, end)
        if not read:
            for group in wanted:
                for marker in group:
                    if find(marker, pos, end) < 0:
                        break
                else:
                    read = True
                    break
        if read:
            # Most read lines are one object: parsed here, without a generator a line; the
            # rest (the first line, a torn tail, anything else) go the plain way.
            record = None
            if number and newline >= 0:
                text = block[pos:end].decode("utf-8")
                try:
                    record, stop = scan(text, 0)
                except (StopIteration, ValueError, RecursionError):
                    record = None
                if record.__class__ is not dict or stop != len(text):
                    record = None
            if record is None:
                number = yield from _block_lines(block[pos : end + 1], number, name, findings, None)
            else:
                number += 1
                yield new(Line, (number, record, False))
        else:
            number += 1
            yield new(Line, (number, UNREAD, False))
        pos = end + 1
    return number


def _head_record(block: bytes, pos: int, end: int, heads: tuple[bytes, ...]) -> dict | None:
    """The object of a line that starts with one of `heads`: the head's keys, the last one's
    value parsed from the line and nothing after it; None when that value is no JSON value
    followed by `,` or `}` (the line is then read whole)."""
    for head in heads:
        if block.startswith(head, pos):
            break
    template = _head_template(head)
    if template is None:
        return None
    text = block[pos:end].decode("utf-8")
    try:
        value, stop = _SCAN(text, len(head))
    except (StopIteration, ValueError, RecursionError):
        return None
    if text[stop : stop + 1] not in (",", "}"):
        return None
    record = dict(template)
    record[next(reversed(template))] = value
    return record


@functools.lru_cache(maxsize=16)
def _head_template(head: bytes) -> dict | None:
    """The keys a head holds, the last one's value None: `{"type":"turn_end","message":`
    gives {"type": "turn_end", "message": None}."""
    try:
        template = json.loads(head + b"null}")
    except ValueError:
        return None
    return template if isinstance(template, dict) and template else None


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


_DECODER = json.JSONDecoder()
# The decoder's own scanner, called on a block's text at each line start: one C
# call per line, the same grammar and values as `json.loads`.
_SCAN = json.scanner.make_scanner(_DECODER)


def _decode(raw: bytes, name: str, number: int, torn: bool, findings: list[Finding]):
    """The slow path for a line the fast path refused: say exactly what is wrong."""
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
    if value.__class__ is not dict:
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
        # Sized from fstat: asking a small file for `max_bytes` costs an allocation
        # of that size; a file that grew since is read on to the cap.
        size = _size(handle)
        raw = handle.read(min(max_bytes, size) + 1)
        if size < len(raw) <= max_bytes:  # it grew since fstat
            raw += handle.read(max_bytes + 1 - len(raw))
        return raw


def _size(handle) -> int:
    try:
        return os.fstat(handle.fileno()).st_size
    except OSError:
        return 0


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
    if len(value) == 24 and value[19] == "." and value[23] == "Z":
        # The product's own shape, parsed by slicing with the second cached: a
        # ledger can hold 100 000 of them, most sharing their second with another.
        second = second_ms(value[:19])
        millis = value[20:23]
        if second is not None and millis.isascii() and millis.isdigit():
            return second + int(millis)
    text = value[:-1] + "+00:00" if value.endswith("Z") else value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return round(moment.timestamp() * 1000)


@functools.lru_cache(maxsize=4096)
def second_ms(text: str) -> int | None:
    """`YYYY-MM-DDTHH:MM:SS` in UTC as epoch ms, or None for anything else."""
    digits = text[:4] + text[5:7] + text[8:10] + text[11:13] + text[14:16] + text[17:19]
    shape = text[4] + text[7] + text[10] + text[13] + text[16]
    if shape != "--T::" or not (digits.isascii() and digits.isdigit()):
        return None
    try:
        moment = datetime.fromisoformat(text + "+00:00")
    except ValueError:  # month 13, hour 24, second 60 and the like
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
