"""Read one session transcript (docs/product-contract.md §5, §6) in one streaming pass into
a small frozen `Transcript`: its header, model calls and usage, cells, replies, notices,
receipts, and the provenance of the numbers the answer file holds. evidence/artifacts.py finds the
transcripts of a run and calls `read_transcript` on each.
"""

from __future__ import annotations

import hashlib
import operator
from typing import NamedTuple

from swarm_fanout import ledger
from swarm_fanout.evidence.cells import Cell, Session
from swarm_fanout.evidence.jsonl import (
    Finding,
    dict_field,
    int_field,
    iso_to_ms,
    iter_objects,
    text_field,
)
from swarm_fanout.evidence.number_tokens import FirstShowings, numbers_among

MAX_REPLY_CHARS = 16_384  # the product's own cap on agent_message (§9)
# Records of each kind kept per transcript (replies, notices, model calls, usage
# entries, ipython calls, receipts); a real run has a few dozen of each.
MAX_KEPT_PER_TRANSCRIPT = 10_000
NOTICE_TYPES = ("rlm_child_terminal_notice", "rlm_child_failure")
HEARTBEAT = "agent_status"  # appended to idle sessions, about every 25 s (§5)


class Usage(NamedTuple):
    """Token usage as the product records it on an assistant message (§5)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total: int = 0

    def plus(self, other: Usage) -> Usage:
        return Usage(*map(operator.add, self, other))


def usage_from(raw: dict) -> Usage:
    """A `usage` object as the product writes it (§5); a count that is no
    non-negative integer (a bool, a float, a string, below 0) reads as 0."""
    counts = (raw.get(key) for key in ("input", "output", "cacheRead", "cacheWrite", "totalTokens"))
    return Usage(*(count if count.__class__ is int and count > 0 else 0 for count in counts))


class Reply(NamedTuple):
    """A child's `agent_message` as it landed in the parent transcript (§6)."""

    reply_id: str | None
    from_session_id: str | None
    message: str
    at_ms: int | None
    line: int


class Notice(NamedTuple):
    """`rlm_child_terminal_notice` (kind from details) or `rlm_child_failure` (§6)."""

    kind: str
    child_id: str | None
    at_ms: int | None
    line: int


class AssistantCall(NamedTuple):
    """One persisted assistant message, as the integrity checks compare it (§5)."""

    line: int
    stop_reason: str | None
    response_id: str | None
    usage: Usage


class UsageAttribution(NamedTuple):
    """A `child_usage_attributed` entry: the `childUsage` it repeats (§5)."""

    line: int
    usage: Usage


class IpythonCall(NamedTuple):
    """An `ipython` tool call: its code's digest and when the cell ran, from its assistant
    message's entry timestamp to its toolResult's (None: it never returned, a run ended
    mid-cell)."""

    line: int
    code_sha256: str
    started_ms: int | None
    ended_ms: int | None
    call_id: str = ""

    def contains(self, at_ms: int) -> bool:
        return (
            self.started_ms is not None
            and self.started_ms <= at_ms
            and (self.ended_ms is None or at_ms <= self.ended_ms)
        )


class SentMessage(NamedTuple):
    """An `agent_message.send` receipt in the sender's toolResult (§5 "Child transcripts")."""

    message_id: str
    message_sha256: str
    line: int


class ToolCallFacts(NamedTuple):
    """What one tool call named and showed, for provenance (docs/rubric.md "Provenance"):
    the files its arguments name and write (evidence/cells.py), and the numbers of
    interest its result showed that its arguments did not hold: what it printed, and the
    messages it sent (the product records them in the result's details, §5)."""

    line: int  # the assistant message that made the call
    result_line: int | None  # its toolResult; None while it had none
    shown: frozenset[int]
    named: frozenset[str]
    written: frozenset[str]
    sources: frozenset[str]  # what its result may have been worked out from


class Heard(NamedTuple):
    """An `agent_message` this session received that holds numbers of interest (§5, §6)."""

    line: int
    message_id: str | None
    from_session_id: str | None
    relationship: str | None  # parent | child | sibling
    numbers: frozenset[int]


class Transcript(NamedTuple):
    """What the scorer needs from one session transcript, read in one pass."""

    path: str
    header_id: str | None = None
    cwd: str | None = None
    rlm_depth: int | None = None
    parent_session: str | None = None
    # parentSession canonicalised as the ledger's paths are (§4 "Path").
    parent_session_file: str | None = None
    header_at_ms: int | None = None
    # For timelines: the first assistant message's entry timestamp, and the last
    # entry's (heartbeats aside: the product keeps writing them to an idle session).
    first_response_ms: int | None = None
    end_ms: int | None = None
    task_id: str | None = None
    task_from_session_id: str | None = None
    turns: int = 0
    failed_calls: int = 0
    # Aborted by a teardown with no response id and no usage: whether the request reached
    # the model the transcript cannot tell (§5), so it is counted apart.
    aborted_calls: int = 0
    usage: Usage = Usage()
    # Dollars over its assistant messages (`usage.cost.total`); None when none said a cost.
    cost_usd: float | None = None
    first_error: str | None = None
    # The product's own failure to start the IPython kernel, as an ipython call's error
    # result: the environment failed, not the model (first line, capped).
    kernel_error: str | None = None
    replies: tuple[Reply, ...] = ()
    notices: tuple[Notice, ...] = ()
    assistant_calls: tuple[AssistantCall, ...] = ()
    usage_attributions: tuple[UsageAttribution, ...] = ()
    ipython_calls: tuple[IpythonCall, ...] = ()
    sent_messages: tuple[SentMessage, ...] = ()
    # Provenance (read for the numbers of interest only: those the combined answer holds).
    # The numbers of the task the parent sent (`spawn:<childId>`, §5 "Child transcripts").
    task_numbers: frozenset[int] = frozenset()
    # Every tool call that named a file or showed a number of interest, in order, and every
    # agent message received that held one (rules/knowledge.py follows the numbers).
    call_facts: tuple[ToolCallFacts, ...] = ()
    heard: tuple[Heard, ...] = ()
    # The numbers its tool results were searched for, where not all of interest: those some
    # session was heard to receive from it (`read_transcript`'s `sent`).
    searched_for: frozenset[int] | None = None
    # Its calls' `shown` hold only the numbers no call before showed (the parent's).
    first_showings: bool = False
    # Every tool call's id, in order (held against the root's event stream).
    tool_call_ids: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def read_transcript(
    path: str,
    canon: ledger.Canon,
    interest: frozenset[int],
    artifact: str | None = None,
    sent: dict[str, set[int]] | None = None,
) -> Transcript:
    """Summarize a transcript in one streaming pass (§5, §6). `interest`: the numbers whose
    provenance to trace; `artifact`: given for the parent, whose every call's files are noted
    (the answer file's writers among them) and whose results are searched for each number's
    first showing (`FirstShowings`). `sent`: the numbers of interest each session was
    heard to send, by its session id; given, the tool results of a session with a header id
    are searched only for those it sent, the only ones the rules ask whether it knew."""
    acc = _TranscriptAccumulator(path, canon, interest, artifact, sent)
    for line in iter_objects(path, acc.findings):
        acc.add(line.number, line.record)
    return acc.result()


# How prime-agent v0.8.0 words an ipython call's result when it could not set up the
# kernel's Python (source `core/kernel/bootstrap.ts`, seen in a run without
# PRIME_AGENT_KERNEL_PYTHON and without internet: every call failed with it).
KERNEL_FAILURE = "Failed to set up the Python kernel runtime."
MAX_KERNEL_ERROR_CHARS = 500
# How IPython names code it could not compile.
SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def kernel_error(message: dict) -> str | None:
    """The first line of an error result that is the product's kernel-setup failure.

    Only the ipython tool itself fails with `isError: true` (here with empty `details`);
    a cell's own exception gives `isError: false` and `details.status: "error"` (seen in
    v0.8.0 runs), so a model cannot word such a result.
    """
    content = message.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = text_field(first, "text") if isinstance(first, dict) else None
    if text is None or not text.startswith(KERNEL_FAILURE):
        return None
    return text.split("\n", 1)[0][:MAX_KERNEL_ERROR_CHARS]


def _syntax_error(message: dict) -> bool:
    """A cell's result that is the kernel refusing its code: it ran nothing."""
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    texts = [text_field(part, "text") or "" for part in parts if isinstance(part, dict)]
    status = dict_field(message, "details").get("status")
    failed = message.get("isError") is True or status == "error"
    return failed and any(name in text for text in texts for name in SYNTAX_ERRORS)


def _argument_text(arguments: object) -> str:
    """A tool call's arguments as the text a number or a file name could be typed in: the
    code of an ipython call, the command, path and contents of any other tool."""
    if isinstance(arguments, dict):
        return "\n".join(_argument_text(value) for value in arguments.values())
    if isinstance(arguments, list):
        return "\n".join(_argument_text(value) for value in arguments)
    return arguments if isinstance(arguments, str) else ""


class _TranscriptAccumulator:
    def __init__(
        self,
        path: str,
        canon: ledger.Canon,
        interest: frozenset[int],
        artifact: str | None,
        sent: dict[str, set[int]] | None,
    ):
        self.path = path
        self.findings: list[Finding] = []  # the reader's and its own, in line order
        self.canon = canon
        self.interest = interest
        self.sent_by = sent
        self.sought = interest  # what tool results are searched for
        # The parent's results: searched for each number's first showing alone.
        self.first = FirstShowings(interest) if artifact else None
        self.noting = bool(interest or artifact)  # what tool calls name and show is noted
        # Calls awaiting their result: toolCall id -> (its line, the numbers sought that its
        # arguments typed, its reading)
        self.awaiting: dict[str, tuple[int, frozenset[int], Cell]] = {}
        self.session = Session()  # what the kernel holds between cells
        self.call_facts: list[ToolCallFacts] = []
        self.heard: list[Heard] = []
        self.task_numbers: frozenset[int] = frozenset()
        self.tool_call_ids: list[str] = []
        self.header: dict = {}
        self.task_id = None
        self.task_from_session_id = None
        self.turns = self.failed_calls = self.aborted_calls = 0
        self.usage = Usage()
        self.cost_usd: float | None = None
        self.first_error = None
        self.kernel_error = None
        self.replies: list[Reply] = []
        self.notices: list[Notice] = []
        self.assistant_calls: list[AssistantCall] = []
        self.usage_attributions: list[UsageAttribution] = []
        self.ipython_calls: list[IpythonCall] = []
        self.running: dict[str, int] = {}  # toolCall id -> index in self.ipython_calls
        self.sent_messages: list[SentMessage] = []
        self.capped: set[str] = set()
        self.first_response_stamp = None
        self.last_stamp = None

    def add(self, number: int, record: dict) -> None:
        kind = record.get("type")
        if kind != HEARTBEAT:
            stamp = record.get("timestamp")
            if stamp.__class__ is str:
                self.last_stamp = stamp  # parsed once, in result()
        if number == 1:
            if kind == "session":
                self.header = record
                header_id = text_field(record, "id")
                if self.sent_by is not None and header_id:
                    self.sought = self.interest & self.sent_by.get(header_id, frozenset())
            else:
                self.findings.append(Finding(self.path, 1, "no_header", "line 1 is not a header"))
        elif kind == "message":
            self._message(number, record)
        elif kind == "custom_message":
            self._custom(number, record)
        elif kind == "child_usage_attributed":
            usage = usage_from(dict_field(record, "childUsage"))
            self._keep(self.usage_attributions, UsageAttribution(number, usage), number)

    def _keep(self, kept: list, item, number: int) -> bool:
        """Append within the per-transcript cap; the first item past it is a finding."""
        if len(kept) < MAX_KEPT_PER_TRANSCRIPT:
            kept.append(item)
            return True
        what = type(item).__name__
        if what not in self.capped:
            self.capped.add(what)
            detail = f"only the first {MAX_KEPT_PER_TRANSCRIPT} of {what} kept"
            self.findings.append(Finding(self.path, number, "kept_cap", detail))
        return False

    def _message(self, number: int, record: dict) -> None:
        message = record.get("message")
        if not isinstance(message, dict):
            detail = "message is not an object"
            self.findings.append(Finding(self.path, number, "wrong_type", detail))
            return
        role = message.get("role")
        if role == "toolResult":
            self._tool_result(number, record, message)
            return
        if role != "assistant":
            return
        if self.first_response_stamp is None:
            self.first_response_stamp = record.get("timestamp")
        usage = usage_from(dict_field(message, "usage"))
        stop = text_field(message, "stopReason")
        # A turn aborted by a teardown is persisted too, with no response id and
        # no usage; it is counted as aborted, not as a call.
        response_id = text_field(message, "responseId")
        if response_id or stop == "error" or usage.total:
            self.turns += 1
        elif stop == "aborted":
            self.aborted_calls += 1
        self.usage = self.usage.plus(usage)
        # The dollars it cost, as the product prices it from its own model catalog (§5).
        cost = dict_field(dict_field(message, "usage"), "cost").get("total")
        if cost.__class__ in (int, float) and 0 <= cost < float("inf"):
            self.cost_usd = (self.cost_usd or 0.0) + cost
        call = AssistantCall(number, stop, response_id or None, usage)
        self._keep(self.assistant_calls, call, number)
        if stop == "error":
            self.failed_calls += 1
            if self.first_error is None:
                self.first_error = text_field(message, "errorMessage") or "model call failed"
        content = message.get("content")
        if not isinstance(content, list):
            return
        started_ms = iso_to_ms(record.get("timestamp"))
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "toolCall":
                continue
            code = text_field(dict_field(part, "arguments"), "code")
            call_id = text_field(part, "id")
            if call_id and len(self.tool_call_ids) < MAX_KEPT_PER_TRANSCRIPT:
                self.tool_call_ids.append(call_id)
            self._note_arguments(number, call_id, part.get("arguments"))
            if part.get("name") == "ipython" and code is not None and call_id:
                call = IpythonCall(number, digest(code), started_ms, None, call_id)
                if self._keep(self.ipython_calls, call, number):
                    self.running[call_id] = len(self.ipython_calls) - 1

    def _note_arguments(self, number: int, call_id: str | None, arguments: object) -> None:
        if not self.noting:
            return
        text = _argument_text(arguments)
        cell = self.session.read(text)
        if call_id and len(self.awaiting) < MAX_KEPT_PER_TRANSCRIPT:
            self.awaiting[call_id] = (number, numbers_among(text, self.sought), cell)
        elif cell.named:
            self._note_call(number, None, frozenset(), cell)

    def _note_result(self, number: int, message: dict, sent: list) -> None:
        """Numbers a call's own result showed: what it printed, and the messages it sent
        (the product records them in the result's details), less what its arguments typed."""
        call = self.awaiting.pop(text_field(message, "toolCallId") or "", None)
        if call is None:
            return
        line, typed, cell = call
        if not cell.readable and not _syntax_error(message):
            cell = cell._replace(sources=frozenset({"<unreadable>"}))
        shown: frozenset[int] = frozenset()
        if self.sought:
            # Text by text: no token spans two texts.
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            texts = [text_field(item, "message") or "" for item in sent if isinstance(item, dict)]
            printed = [text_field(part, "text") or "" for part in parts if isinstance(part, dict)]
            if self.first is not None:
                shown = self.first.shown(texts + printed, typed)
            else:
                found = [numbers_among(text, self.sought) for text in texts + printed]
                shown = frozenset().union(*found) - typed
        if shown or cell.named:
            self._note_call(line, number, shown, cell)

    def _calls_in_order(self) -> tuple[ToolCallFacts, ...]:
        """Every noted call, with those that never returned (a run ended mid-cell) too: what
        they named they may still have written."""
        for line, _, cell in self.awaiting.values():
            if cell.named:
                self._note_call(line, None, frozenset(), cell)
        return tuple(sorted(self.call_facts, key=lambda call: call.line))

    def _note_call(self, line: int, result_line: int | None, shown: frozenset[int], cell: Cell):
        if len(self.call_facts) < MAX_KEPT_PER_TRANSCRIPT:
            facts = ToolCallFacts(line, result_line, shown, cell.named, cell.written, cell.sources)
            self.call_facts.append(facts)

    def _tool_result(self, number: int, record: dict, message: dict) -> None:
        """Closes the ipython call's window; keeps the receipts of messages it sent."""
        index = self.running.pop(text_field(message, "toolCallId") or "", None)
        if index is not None:
            ended = iso_to_ms(record.get("timestamp"))
            self.ipython_calls[index] = self.ipython_calls[index]._replace(ended_ms=ended)
        if message.get("isError") is True and self.kernel_error is None:
            self.kernel_error = kernel_error(message)
        sent = dict_field(message, "details").get("sentAgentMessages")
        if self.noting:
            self._note_result(number, message, sent if isinstance(sent, list) else [])
        for item in sent if isinstance(sent, list) else ():
            if not isinstance(item, dict):
                continue
            message_id, text = text_field(item, "id"), text_field(item, "message")
            if message_id and text is not None:
                # Normalised as the parent-side reply is: trimmed, capped (§6).
                kept = SentMessage(message_id, digest(text.strip()[:MAX_REPLY_CHARS]), number)
                self._keep(self.sent_messages, kept, number)

    def _custom(self, number: int, record: dict) -> None:
        custom_type = record.get("customType")
        details = record.get("details")
        if not isinstance(details, dict):
            if custom_type == "agent_message" or custom_type in NOTICE_TYPES:
                detail = "details is not an object"
                self.findings.append(Finding(self.path, number, "wrong_type", detail))
            return
        at_ms = iso_to_ms(record.get("timestamp"))
        if custom_type == "agent_message":
            relationship = details.get("fromRelationship")
            sender = dict_field(details, "from")
            message_id, from_id = text_field(details, "id"), text_field(sender, "sessionId")
            text = text_field(details, "message") or ""
            heard = numbers_among(text, self.interest)
            if heard and len(self.heard) < MAX_KEPT_PER_TRANSCRIPT:
                self.heard.append(Heard(number, message_id, from_id, relationship, heard))
            if relationship == "parent" and self.task_id is None:
                self.task_id, self.task_numbers = message_id, heard
                self.task_from_session_id = from_id
            elif relationship == "child":
                # Trimmed and capped as the product caps a message (§9).
                message = text.strip()[:MAX_REPLY_CHARS]
                reply = Reply(message_id, from_id, message, at_ms, number)
                self._keep(self.replies, reply, number)
        elif custom_type in NOTICE_TYPES:
            kind = text_field(details, "kind") or "unknown"
            kind = "failure" if custom_type == "rlm_child_failure" else kind
            notice = Notice(kind, text_field(details, "childId"), at_ms, number)
            self._keep(self.notices, notice, number)

    def result(self) -> Transcript:
        header = self.header
        parent_session = text_field(header, "parentSession")
        # The accumulator's attributes named as Transcript's fields are the result's.
        kept = {name: value for name, value in vars(self).items() if name in Transcript._fields}
        lists = {name: tuple(value) for name, value in kept.items() if isinstance(value, list)}
        return Transcript(**{**kept, **lists})._replace(
            header_id=text_field(header, "id"),
            cwd=text_field(header, "cwd"),
            rlm_depth=int_field(header, "rlmDepth"),
            parent_session=parent_session,
            parent_session_file=self.canon.file(parent_session) if parent_session else None,
            header_at_ms=iso_to_ms(header.get("timestamp")),
            first_response_ms=iso_to_ms(self.first_response_stamp),
            end_ms=iso_to_ms(self.last_stamp),
            call_facts=self._calls_in_order(),
            searched_for=None if self.sought is self.interest else self.sought,
            first_showings=self.first is not None,
        )
