"""A transcript as a conversation to read: its messages, cells with their code and output,
replies and notices, within a budget of page space.

`read_conversation` reads a session transcript (§5) line by line and turns each entry a
reader needs into an `Entry` of `Part`s, each text cut at MAX_TEXT_CHARS; bookkeeping
entries (usage attributions, heartbeats, model settings) are counted, not kept. A
transcript whose entries outgrow its budget keeps the first half of the budget from its
start and the second from its end (read from at most TAIL_WINDOW_BYTES before it), and
names the lines left out between them (`Cut`): a 200 MB transcript costs a page what
its budget allows. Like every reader of agent-written files it is total: any bytes give
entries or named problems. Paths inside the run dir are shown as `<run dir>/...`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from html import escape

from swarm_fanout.evidence.artifacts import relative
from swarm_fanout.evidence.jsonl import Finding, open_regular, skip_rest_of_line
from swarm_fanout.reporting.render import number as fmt

MAX_TEXT_CHARS = 4_000  # of one text, code or output of an entry
ENTRY_COST = 300  # the markup around one entry, in a budget's characters
MAX_LINE_BYTES = 8 * 1024 * 1024  # a longer line is named, not parsed
TAIL_WINDOW_BYTES = 8 * 1024 * 1024  # how far from its end a cut transcript's tail is read
RUN_DIR = "<run dir>"
# What a notice says of the child (§6), and how the page names it.
NOTICE_FIELDS = (
    ("lastAssistantTextPreview", "its last text"),
    ("reason", "reason"),
    ("error", "error"),
)
BOOKKEEPING = frozenset(
    {
        "model_change",
        "thinking_level_change",
        "service_tier_change",
        "session_state",
        "child_usage_attributed",
        "agent_status",
        "custom",
    }
)


@dataclass(frozen=True)
class Part:
    """One piece of an entry: `text`, `thinking`, `code`, `output`, `error` or `data`."""

    kind: str
    label: str
    text: str
    left_out: int = 0  # characters past MAX_TEXT_CHARS


@dataclass(frozen=True)
class Entry:
    line: int
    at: str | None  # the entry's own timestamp, as written
    title: str
    parts: tuple[Part, ...]
    tone: str | None = None
    session: str | None = None  # a header's own session id; a message's sender's

    @property
    def cost(self) -> int:
        return ENTRY_COST + sum(len(escape(part.text)) for part in self.parts)


@dataclass(frozen=True)
class Cut:
    """The lines of a transcript left out between its head and its tail."""

    first_line: int
    last_line: int
    bytes: int


@dataclass(frozen=True)
class Conversation:
    anchor: str
    title: str
    status: str | None  # a child's: replied, failed, dropped
    path: str  # relative to the run dir
    size: int
    entries: tuple[Entry, ...]
    skipped: int  # bookkeeping entries not shown
    cut: Cut | None
    problems: tuple[str, ...]  # lines that could not be shown, and why


def read_conversation(
    path: str, budget: int, root: str, anchor: str, title: str, status: str | None = None
) -> Conversation:
    """Entries of a transcript up to `budget` (escaped characters plus ENTRY_COST each): all
    of them when they fit, else the first half of the budget from the start and the second
    from the end, the lines between left out."""
    findings: list[Finding] = []
    handle = open_regular(path, findings)
    relative_path = relative(root, path)
    if handle is None:
        problems = tuple(finding.detail for finding in findings)
        return Conversation(anchor, title, status, relative_path, 0, (), 0, None, problems)
    problems: list[str] = []
    with handle:
        size = os.fstat(handle.fileno()).st_size
        head: list[Entry] = []
        spent = skipped = 0
        # Where the first half of the budget ran out: (entries kept, the first line left
        # out, its offset, bookkeeping entries before it).
        half = None
        number = start = 0
        for number, start, raw in _lines(handle, 0):
            if half is None and spent >= budget // 2:
                half = (len(head), number, start, skipped)
            entry = _entry(number, raw, root, problems)
            if entry is None:
                skipped += 1
            elif spent + entry.cost > budget:
                break
            else:
                head.append(entry)
                spent += entry.cost
        else:
            whole = tuple(head)
            return Conversation(
                anchor, title, status, relative_path, size, whole, skipped, None, tuple(problems)
            )
        kept, first_cut, cut_offset, skipped = half or (len(head), number, start, skipped)
        tail, tail_skipped, tail_offset, last_line = _tail(
            handle, cut_offset, first_cut, budget, root
        )
    last_cut = tail[0].line - 1 if tail else last_line
    cut = Cut(first_cut, last_cut, tail_offset - cut_offset)
    entries = tuple(head[:kept] + tail)
    return Conversation(
        anchor,
        title,
        status,
        relative_path,
        size,
        entries,
        skipped + tail_skipped,
        cut,
        tuple(problems),
    )


def _lines(handle, number: int):
    """(line number, offset, bytes) of each line from the handle's position on; a line
    over MAX_LINE_BYTES gives its first MAX_LINE_BYTES + 1 bytes and is skipped past."""
    offset = handle.tell()
    while True:
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        start = offset
        offset += len(raw)
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            offset += skip_rest_of_line(handle)
        yield number, start, raw


def _tail(handle, start: int, first_line: int, budget: int, root: str):
    """The last entries of a file that fit half the `budget`, read from at most
    TAIL_WINDOW_BYTES before its end and never before `start`, where line `first_line`
    begins: (entries, bookkeeping entries among them, the offset of the first line they
    cover, the file's last line number)."""
    size = os.fstat(handle.fileno()).st_size
    begin = max(start, size - TAIL_WINDOW_BYTES)
    handle.seek(start)
    number = first_line - 1 + _count_newlines(handle, begin - start)
    if begin > start:
        handle.seek(begin - 1)
        if handle.read(1) != b"\n":  # begin is inside a line: that line is left out
            skip_rest_of_line(handle)
            number += 1
    lines = list(_lines(handle, number))
    last_line = lines[-1][0] if lines else number
    kept: list[Entry] = []
    spent = skipped = pending = 0
    first_offset = size
    for number, offset, raw in reversed(lines):
        entry = _entry(number, raw, root, [])
        if entry is None:
            pending += 1
            continue
        if spent + entry.cost > budget // 2:
            break
        kept.append(entry)
        spent += entry.cost
        first_offset = offset
        skipped, pending = skipped + pending, 0
    kept.reverse()
    return kept, skipped, first_offset, last_line


def _count_newlines(handle, length: int) -> int:
    count = 0
    while length > 0:
        block = handle.read(min(length, 1024 * 1024))
        if not block:
            break
        count += block.count(b"\n")
        length -= len(block)
    return count


def _entry(number: int, raw: bytes, root: str, problems: list[str]) -> Entry | None:
    """An entry to show for one transcript line, None for bookkeeping."""
    if len(raw) > MAX_LINE_BYTES:
        return Entry(number, None, f"a line of over {fmt(MAX_LINE_BYTES)} bytes, not shown", ())
    try:
        record = json.loads(raw)
    except ValueError:
        problems.append(f"line {number} is not JSON")
        return Entry(number, None, "a line that is not JSON", (_part("data", "", raw, root),))
    if not isinstance(record, dict):
        return Entry(number, None, "a line that is not a JSON object", ())
    kind = record.get("type")
    at = record.get("timestamp") if isinstance(record.get("timestamp"), str) else None
    if kind in BOOKKEEPING:
        return None
    if kind == "session":
        fields = {key: record.get(key) for key in ("id", "parentSession", "rlmDepth", "cwd")}
        session = record.get("id") if isinstance(record.get("id"), str) else None
        parts = (_part("data", "", _json(fields), root),)
        return Entry(number, at, "session header", parts, session=session)
    if kind == "session_info":
        return Entry(number, at, f"session named {_str(record.get('name'))}", ())
    if kind == "message" and isinstance(record.get("message"), dict):
        return _message(number, at, record["message"], root)
    if kind == "custom_message":
        return _custom(number, at, record, root)
    return Entry(
        number, at, f"entry of type {_str(kind)}", (_part("data", "", _json(record), root),)
    )


def _message(number: int, at: str | None, message: dict, root: str) -> Entry:
    role = message.get("role")
    content = message.get("content")
    if role == "assistant":
        parts = []
        for item in content if isinstance(content, list) else [content]:
            if not isinstance(item, dict):
                parts.append(_part("text", "", item, root))
            elif item.get("type") == "text":
                parts.append(_part("text", "", item.get("text"), root))
            elif item.get("type") == "thinking":
                parts.append(_part("thinking", "thinking", item.get("thinking"), root))
            elif item.get("type") == "toolCall":
                arguments = item.get("arguments")
                code = arguments.get("code") if isinstance(arguments, dict) else None
                name = _str(item.get("name"))
                if isinstance(code, str):
                    parts.append(_part("code", f"{name} cell", code, root))
                else:
                    parts.append(_part("data", f"{name} call", _json(arguments), root))
        stop = message.get("stopReason")
        tone = None
        if stop in ("error", "aborted"):
            tone = "bad"
            parts.append(_part("error", str(stop), message.get("errorMessage") or stop, root))
        usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
        tokens = usage.get("totalTokens")
        title = "assistant" + (f" · {fmt(tokens)} tokens" if isinstance(tokens, int) else "")
        return Entry(number, at, title + (f" · {stop}" if tone else ""), tuple(parts), tone)
    if role == "toolResult":
        failed = message.get("isError") is True
        title = f"{_str(message.get('toolName'))} output" + (" (error)" if failed else "")
        parts = (_part("output", "", _content_text(content), root),)
        return Entry(number, at, title, parts, "bad" if failed else None)
    return Entry(number, at, _str(role), (_part("text", "", _content_text(content), root),))


def _custom(number: int, at: str | None, record: dict, root: str) -> Entry:
    custom = record.get("customType")
    details = record.get("details") if isinstance(record.get("details"), dict) else {}
    sender = details.get("from") if isinstance(details.get("from"), dict) else {}
    if custom == "agent_message":
        relationship = details.get("fromRelationship")
        parts = (_part("text", "", details.get("message", record.get("content")), root),)
        name = _str(sender.get("sessionName"))
        session = sender.get("sessionId") if isinstance(sender.get("sessionId"), str) else None
        if relationship == "parent":
            return Entry(number, at, "task from the parent", parts, session=session)
        if relationship == "child":
            return Entry(number, at, f"reply from {name}", parts, "good", session)
        title = f"message from {_str(relationship)} {name}"
        return Entry(number, at, title, parts, "warn", session)
    if custom in ("rlm_child_terminal_notice", "rlm_child_failure"):
        kind = details.get("kind") or "failure"
        parts = tuple(
            _part("text", "", f"{label}: {_str(details[key])}", root)
            for key, label in NOTICE_FIELDS
            if details.get(key)
        )
        title = (
            f"notice: {_str(kind)} from {_str(details.get('sessionName'))} "
            f"({_str(details.get('childId'))})"
        )
        return Entry(number, at, title, parts, "warn")
    return Entry(
        number, at, f"message: {_str(custom)}", (_part("text", "", record.get("content"), root),)
    )


def _part(kind: str, label: str, value, root: str) -> Part:
    text = value if isinstance(value, str) else _json(value)
    text = shown(text, root)
    if len(text) > MAX_TEXT_CHARS:
        return Part(kind, label, text[:MAX_TEXT_CHARS], len(text) - MAX_TEXT_CHARS)
    return Part(kind, label, text)


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            item.get("text") if isinstance(item, dict) and isinstance(item.get("text"), str)
            else _json(item)
            for item in content
        ]  # fmt: skip
        return "\n".join(texts)
    return _json(content)


def _json(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=False, default=str)


def _str(value) -> str:
    return value if isinstance(value, str) else _json(value)


def shown(text: str, root: str) -> str:
    """Paths inside the run dir, as `<run dir>/...`."""
    return text.replace(root, RUN_DIR) if root else text
