#!/usr/bin/env python3
"""An executable stand-in for the prime-agent v0.8.0 CLI, run one-shot as `--mode json`.

It leaves on disk what a real one-shot fan-out run leaves (PRODUCT_CONTRACT.md §3-§9 and the
captured runs in shared/real-runs): a detached daemon supervisor on --daemon-socket, the root
transcript, one transcript and display file per RLM child, the spawn ledger, the --mode json
stdout stream and the agent's combined-index.md. `--model simulated/<behaviour>` picks how the
simulated model orchestrates (see BEHAVIOURS). The children really answer their shard's
question, from their own task prompt.

Stdlib only, and it imports nothing from the harness: it plays the product, so it carries its
own copy of the product's rules (for example the ledger key).
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

APP_VERSION = "0.8.0"
VERSION_LINE = f"prime-agent {APP_VERSION} (simulated)"
PROVIDER = "simulated"
API = "openai-completions"
BEHAVIOURS = {
    "oracle": "one child per shard, every child replies, the index is written from the replies",
    "nop": "answers with one text message; no children, no index",
    "no-spawn": "the parent answers every shard itself in one cell; no children",
    "double-spawn": "every worker name is spawned twice, without a delete in between",
    "fabricate": "as oracle, but the index has a wrong answer for the first shard",
    "silent-drop": "the last child never replies and no notice arrives; the parent fills in",
    "hang": "spawns the children, starts a SIGTERM-ignoring grandchild, never exits",
    "escape": "as oracle, then leaves a detached SIGTERM-ignoring process with an empty env",
}

# Daemon protocol 7, schema revision 22 (contract §8.1; serverCapabilities as in the capture).
PROTOCOL = {"name": "prime-agent.daemon", "version": 7}
SCHEMA_ID = "protocol-7-schema-22-4d515169dc6b"
SCHEMA_REVISION = 22
SERVER_CAPABILITIES = [
    "attach_snapshot",
    "event_sequence",
    "extension_ui",
    "slim_attach",
    "chunked_snapshot",
    "client_owned_sessions",
    "delete_rlm_subagent",
    "heartbeat_catalog",
    "heartbeat_management",
    "model_catalog",
    "side_question_transcript",
    "transient_bash",
    "session_input_admission",
    "prompt_admission_cancellation",
    "owned_prompt_cancellation",
    "queue_message_mutation",
    "authoritative_child_roster",
    "owned_session_recovery_context",
    "rlm_quiescence_barrier",
    "session_input_pause",
    "acp_mcp_servers",
]
PARSE_ERROR = {
    "type": "response",
    "command": "parse",
    "success": False,
    "error": "Daemon commands require protocol 7 or newer",
}
# A safety net only: the real supervisor never idles out, the harness must shut it down.
SUPERVISOR_LIFETIME_S = 600
ESCAPED_LIFETIME_S = 600

RLM_MAX_DEPTH = 1  # the product's default max depth: only the root spawns (contract §9)
GIT = {"branch": "master"}  # the captured runs' repos were on master
ROOT_CONTEXT_TOKENS = 4900  # stands for the root's system prompt and tool schema
CHILD_CONTEXT_TOKENS = 3900  # a child's system prompt is shorter
INDEX_FILE = "combined-index.md"
POLL_S = 0.01  # the root's poll cells really sleep, briefly
POLL_CELL = f"import asyncio\nawait asyncio.sleep({POLL_S})\nprint('waited')\n"

# One task line per shard, as fixtures' task.txt writes them:
#   - `shards/events-01.jsonl` | worker `worker-events-01` | How many records ...?
SHARD_LINE = re.compile(
    r"^[ \t]*-[ \t]+`shards/(?P<file>[^`]+)`[ \t]*\|[ \t]*worker[ \t]+`(?P<worker>[^`]+)`"
    r"[ \t]*\|[ \t]*(?P<question>.+?)[ \t\r]*$",
    re.MULTILINE,
)
# The prompt the spawning cell gives each child: the shard's task line is all it needs.
CHILD_TASK = (
    "Answer the question below about one data shard, then send `<file>: <answer>` to your "
    "parent with agent_message.send(..., receiver_role='parent').\n"
    "- `shards/{file}` | worker `{worker}` | {question}"
)

_FIELD = r"`(?P<{}>[^`]+)`"
_VALUE = r'"(?P<v>[^"]*)"'
_WHERE = f"over records whose {_FIELD.format('g')} is {_VALUE}"
# The question grammar, each with the Python expression a child's cell evaluates over `records`
# (fields compare as strings; sums and maxima are over ints). The simulation evaluates the very
# expression it writes into the cell, so the cell shown and the answer sent cannot disagree.
QUESTIONS = [
    (r"How many records does this shard contain\?", "len(records)"),
    (
        f"How many records have {_FIELD.format('g')} equal to {_VALUE}\\?",
        "sum(1 for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"What is the sum of {_FIELD.format('f')} over all records\\?",
        "sum(int(r[{f}]) for r in records)",
    ),
    (
        f"What is the maximum value of {_FIELD.format('f')} over all records\\?",
        "max(int(r[{f}]) for r in records)",
    ),
    (
        f"How many distinct values of {_FIELD.format('g')} occur\\?",
        "len({{str(r[{g}]) for r in records}})",
    ),
    (
        f"What is the sum of {_FIELD.format('f')} {_WHERE}\\?",
        "sum(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"What is the maximum value of {_FIELD.format('f')} {_WHERE}\\?",
        "max(int(r[{f}]) for r in records if str(r[{g}]) == {v})",
    ),
    (
        f"How many distinct values of {_FIELD.format('h')} occur among records whose "
        f"{_FIELD.format('g')} is {_VALUE}\\?",
        "len({{str(r[{h}]) for r in records if str(r[{g}]) == {v}}})",
    ),
]
UNKNOWN = "unknown"
CELL_ERRORS = "(OSError, KeyError, TypeError, ValueError)"
CELL_IMPORTS = "import csv, io, json\nfrom pathlib import Path\n"


class UsageError(Exception):
    """A bad command line: the product exits 1 (contract §2)."""


@dataclass(frozen=True)
class Shard:
    file: str
    worker: str
    question: str


@dataclass
class Options:
    version: bool = False
    mode: str | None = None
    daemon_socket: str | None = None
    cwd: str | None = None
    session_dir: str | None = None
    model: str | None = None
    prompts: list[str] = field(default_factory=list)


# --- ids, clock and JSON, in the product's shapes ------------------------------------------


def hex_id(digits: int) -> str:
    return os.urandom(digits // 2).hex()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def uuid7(ms: int) -> str:
    """A uuidv7 like the product's session ids: 48 bits of epoch ms, then random bits."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & (1 << 48) - 1) << 80 | 7 << 76 | (rand >> 62 & 0xFFF) << 64
    return str(uuid.UUID(int=value | 2 << 62 | rand & (1 << 62) - 1))


def dumps(record: object) -> str:
    """Compact JSON, as the product (JSON.stringify) writes it."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def log(message: str) -> None:
    print(f"simulated-agent: {message}", file=sys.stderr, flush=True)


def usage(input_tokens: int, output_tokens: int) -> dict:
    return {
        "input": input_tokens,
        "output": output_tokens,
        "cacheRead": 0,
        "cacheWrite": 0,
        "totalTokens": input_tokens + output_tokens,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
    }


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


# --- the task and the question grammar -------------------------------------------------------


def parse_shards(prompt: str) -> list[Shard]:
    return [Shard(**match.groupdict()) for match in SHARD_LINE.finditer(prompt)]


def child_prompt(shard: Shard) -> str:
    return CHILD_TASK.format(file=shard.file, worker=shard.worker, question=shard.question)


def answer_expression(question: str) -> str | None:
    for pattern, template in QUESTIONS:
        match = re.fullmatch(pattern, question.strip())
        if match:
            return template.format(**{k: repr(v) for k, v in match.groupdict().items()})
    return None


def records_expression(path: str) -> str:
    """Records are JSONL objects one per line, or CSV data rows under a header row."""
    if path.endswith(".csv"):
        return "list(csv.DictReader(io.StringIO(raw)))"
    return "[json.loads(line) for line in raw.splitlines() if line.strip()]"


def answer_code(path: str, question: str) -> str:
    """The cell lines that leave the shard's answer in `answer`."""
    expression = answer_expression(question)
    if expression is None:
        return f"answer = {UNKNOWN!r}  # not a question of the task's grammar\n"
    return (
        "try:\n"
        f"    raw = Path({path!r}).read_text(encoding='utf-8')\n"
        f"    records = {records_expression(path)}\n"
        f"    answer = {expression}\n"
        f"except {CELL_ERRORS}:\n"
        f"    answer = {UNKNOWN!r}\n"
    )


def compute_answer(path: str, question: str) -> str:
    """What the cell written by answer_code() prints, computed from the same expressions."""
    expression = answer_expression(question)
    if expression is None:
        return UNKNOWN
    try:
        raw = Path(path).read_text(encoding="utf-8")
        records = eval(records_expression(path), {"csv": csv, "io": io, "json": json, "raw": raw})
        return str(eval(expression, {"records": records}))
    except (OSError, KeyError, TypeError, ValueError):
        return UNKNOWN


def shard_path(cwd: str, shard: Shard) -> str:
    return os.path.join(cwd, "shards", shard.file)


def child_cell(path: str, shard: Shard, sends_reply: bool) -> str:
    head = CELL_IMPORTS + answer_code(path, shard.question)
    if not sends_reply:
        return head + "print(answer)\n"
    return (
        head + f"receipt = await agent_message.send({shard.file + ': '!r} + str(answer), "
        "receiver_role='parent')\nprint(answer, receipt)\n"
    )


def spawn_cell(shards: list[Shard], copies: int) -> str:
    """The root's spawning cell; rlm-subagent.json keeps it as `spawnCode` (contract §6)."""
    rows = "".join(f"    {(s.file, s.worker, s.question)!r},\n" for s in shards)
    loop = " + ".join(["tasks"] * copies)
    return (
        f"CHILD_TASK = {CHILD_TASK!r}\n"
        f"tasks = [\n{rows}]\n"
        "handles = []\n"
        f"for file, worker, question in {loop}:\n"
        "    h = await rlm(\n"
        "        CHILD_TASK.format(file=file, worker=worker, question=question), name=worker\n"
        "    )\n"
        "    handles.append(h)\n"
        "for h in handles:\n"
        "    print(h.rlm_child_id, h.name, h.session_dir, h.model)\n"
        'print("spawned", len(handles))\n'
    )


def index_cell(cwd: str, shards: list[Shard], known: dict[str, str]) -> tuple[str, str]:
    """The cell that writes combined-index.md, and the text it writes.

    Shards missing from `known` are answered in the cell itself, by the root.
    """
    computes = any(shard.file not in known for shard in shards)
    code = [CELL_IMPORTS if computes else "from pathlib import Path\n", "lines = []\n"]
    lines = []
    for shard in shards:
        bullet = f"- {shard.file}: "
        if shard.file in known:
            code.append(f"lines.append({bullet + known[shard.file]!r})\n")
            lines.append(bullet + known[shard.file])
        else:
            path = shard_path(cwd, shard)
            code.append(answer_code(path, shard.question))
            code.append(f"lines.append({bullet!r} + str(answer))\n")
            lines.append(bullet + compute_answer(path, shard.question))
    code.append(
        "text = '# Combined index\\n\\n' + '\\n'.join(lines) + '\\n'\n"
        f"Path({INDEX_FILE!r}).write_text(text)\n"
        "print(text)\n"
    )
    return "".join(code), "# Combined index\n\n" + "".join(f"{line}\n" for line in lines)


def fabricated(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "0"


# --- the ledger (contract §4) -----------------------------------------------------------------


def default_sessions_dir(agent_dir: str) -> str:
    return os.path.join(agent_dir, "sessions")


def daemon_sessions_dir(agent_dir: str) -> str:
    """The worker's sessions dir, which keys the ledger (contract §1.1, §4).

    --session-dir never reaches the worker; the simulation reads no settings.json.
    """
    return (
        os.environ.get("PRIME_AGENT_SESSION_DIR")
        or os.environ.get("PRIME_AGENT_CODING_AGENT_SESSION_DIR")
        or default_sessions_dir(agent_dir)
    )


def canonical_dir(path: str, daemon_cwd: str) -> str:
    """path.resolve against the daemon's cwd, then realpath if the dir exists (contract §4)."""
    resolved = os.path.normpath(os.path.join(daemon_cwd, path))
    return os.path.realpath(resolved) if os.path.exists(resolved) else resolved


def ledger_path(agent_dir: str, sessions_dir: str) -> str:
    key = hashlib.sha256(sessions_dir.encode()).hexdigest()[:16]
    return os.path.join(agent_dir, "rlm-ledger", f"{key}.jsonl")


class Ledger:
    """`<agentDir>/rlm-ledger/<H>.jsonl`: mode 0600, one O_APPEND write plus fsync a record."""

    def __init__(self, agent_dir: str, sessions_dir: str, daemon_cwd: str):
        self.agent_dir = agent_dir
        self.sessions_dir = sessions_dir
        self.daemon_cwd = daemon_cwd

    def spawn(self, child_id: str, parent_file: str, child_file: str, name: str) -> None:
        # `parent` and `child` are canonical file paths; headers are not (contract §4).
        self._append(
            {
                "v": 1,
                "op": "spawn",
                "at": iso(now_ms()),
                "childId": child_id,
                "parent": os.path.realpath(parent_file),
                "child": os.path.realpath(child_file),
                "depth": 1,
                "name": name,
            }
        )

    def _append(self, record: dict) -> None:
        # Canonicalised at write time: realpath applies only if the dir exists by then.
        sessions_dir = canonical_dir(self.sessions_dir, self.daemon_cwd)
        path = ledger_path(self.agent_dir, sessions_dir)
        # No rlm-ledger dir at all until something is spawned (contract §4, observed).
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size == 0:
                # meta comes first, stamped after the first spawn's `at` (observed: equal or
                # up to 1 ms later).
                meta = {"v": 1, "op": "meta", "at": iso(now_ms()), "sessionsDir": sessions_dir}
                self._write(fd, meta)
            self._write(fd, record)
        finally:
            os.close(fd)

    @staticmethod
    def _write(fd: int, record: dict) -> None:
        os.write(fd, (dumps(record) + "\n").encode())
        os.fsync(fd)


# --- sessions and their transcripts (contract §5) --------------------------------------------


class Transcript:
    """A session JSONL file, appended and flushed one entry at a time."""

    def __init__(self, path: str, header: dict):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.last_id: str | None = None
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        self._write(header)

    def append(self, entry_type: str, fields: dict, ids_last: bool = False) -> None:
        ids = {"id": hex_id(8), "parentId": self.last_id, "timestamp": iso(now_ms())}
        # custom_message lines carry id/parentId/timestamp last (observed).
        record = (
            {"type": entry_type, **fields, **ids}
            if ids_last
            else {"type": entry_type, **ids, **fields}
        )
        self._write(record)
        self.last_id = ids["id"]

    def _write(self, record: dict) -> None:
        self._file.write(dumps(record) + "\n")
        self._file.flush()


@dataclass
class Session:
    """One agent session: its transcript and the model context its usage numbers grow with."""

    transcript: Transcript
    header: dict
    behaviour: str
    context_tokens: int
    active_id: str = field(default_factory=lambda: hex_id(12))
    context_chars: int = 0

    @property
    def id(self) -> str:
        return self.header["id"]

    def user_message(self, text: str) -> dict:
        message = {"role": "user", "content": [text_part(text)], "timestamp": now_ms()}
        return self._message(message, len(text))

    def assistant_message(self, text: str, code: str | None = None) -> dict:
        """One model call; usage is derived from text lengths, so it is deterministic."""
        content = [text_part(text)]
        if code is not None:
            call = {"type": "toolCall", "id": "call_" + hex_id(24), "name": "ipython"}
            content.append({**call, "arguments": {"code": code}})
        written = len(text) + len(code or "")
        message = {
            "role": "assistant",
            "content": content,
            "api": API,
            "provider": PROVIDER,
            "model": self.behaviour,
            "usage": usage(self.context_tokens + self.context_chars // 4, max(1, written // 4)),
            "stopReason": "stop" if code is None else "toolUse",
            "timestamp": now_ms(),
            "responseId": "chatcmpl-" + uuid.uuid4().hex,
        }
        return self._message(message, written)

    def tool_result(self, assistant: dict, stdout: str, started_ms: int, **details) -> dict:
        call = assistant["content"][-1]
        message = {
            "role": "toolResult",
            "toolCallId": call["id"],
            "toolName": call["name"],
            "content": [text_part(stdout)],
            "details": {
                "durationMs": now_ms() - started_ms,
                "status": "ok",
                "stdout": stdout,
                "stderr": "",
                **details,
                "kernelRestarted": False,
            },
            "isError": False,
            "timestamp": now_ms(),
        }
        return self._message(message, len(stdout))

    def custom_message(self, custom_type: str, content: str, details: dict) -> dict:
        """Persists a custom_message; returns it as the stream shows it (role `custom`)."""
        fields = {
            "customType": custom_type,
            "content": content,
            "display": True,
            "details": details,
        }
        self.transcript.append("custom_message", fields, ids_last=True)
        self.context_chars += len(content)
        return {"role": "custom", **fields, "timestamp": now_ms()}

    def _message(self, message: dict, chars: int) -> dict:
        self.transcript.append("message", {"message": message})
        self.context_chars += chars
        return message


def open_session(path: str, header: dict, behaviour: str, context_tokens: int) -> Session:
    transcript = Transcript(path, header)
    transcript.append("model_change", {"provider": PROVIDER, "modelId": behaviour})
    transcript.append("thinking_level_change", {"thinkingLevel": "off"})
    transcript.append("service_tier_change", {"serviceTier": "default"})
    return Session(transcript, header, behaviour, context_tokens)


def session_header(cwd: str, ms: int, parent_file: str | None = None) -> dict:
    header = {"type": "session", "version": 3, "id": uuid7(ms), "timestamp": iso(ms), "cwd": cwd}
    if parent_file is not None:
        header["parentSession"] = parent_file
    return {**header, "rlmDepth": 0 if parent_file is None else 1, "git": GIT}


@dataclass
class Child:
    child_id: str
    name: str
    prompt: str
    session: Session
    session_dir: str
    spawn_code: str
    created_ms: int


@dataclass(frozen=True)
class Reply:
    """An agent_message.send from a child to the root, queued for the root's next turn."""

    id: str
    message: str
    child: Child
    queued_ms: int


class Attribution:
    """child_usage_attributed for one spawning message (contract §5): aggregateUsage folds
    every child call into the target's usage and keeps the target's totalTokens."""

    def __init__(self, target_id: str, target_usage: dict):
        self.target_id = target_id
        self.aggregate = copy.deepcopy(target_usage)

    def entry(self, child_usage: dict) -> dict:
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            self.aggregate[key] += child_usage[key]
        for key, cost in child_usage["cost"].items():
            self.aggregate["cost"][key] += cost
        return {
            "targetId": self.target_id,
            "childUsage": child_usage,
            "aggregateUsage": copy.deepcopy(self.aggregate),
            "origin": "spawn_task",
        }


class Stream:
    """The --mode json stdout: the root header, then root-session events only (contract §7).

    message_update deltas are left out; every model call is one assistant message_end.
    """

    def __init__(self, header: dict):
        self._run: list[dict] = []
        self.emit(header)

    def emit(self, event: dict) -> None:
        sys.stdout.write(dumps(event) + "\n")
        sys.stdout.flush()

    def message(self, message: dict) -> None:
        start = message
        if message["role"] == "assistant":
            # A model call starts empty and without a responseId (observed).
            start = {k: v for k, v in message.items() if k != "responseId"}
            start.update(content=[], usage=usage(0, 0), stopReason="stop")
        self.emit({"type": "message_start", "message": start})
        self.emit({"type": "message_end", "message": message})
        self._run.append(message)

    def agent_start(self) -> None:
        self._run = []
        self.emit({"type": "agent_start"})

    def agent_end(self) -> None:
        self.emit({"type": "agent_end", "messages": self._run})


@dataclass
class Cell:
    """An ipython call being executed; the body fills in what it printed."""

    assistant: dict
    entry_id: str
    started_ms: int
    stdout: str = ""
    details: dict = field(default_factory=dict)


class OneShotRun:
    """The root session of a one-shot run, its children, the ledger and the stream."""

    def __init__(self, cwd: str, sessions: str, prompt: str, behaviour: str, agent_dir: str):
        self.cwd = cwd
        self.behaviour = behaviour
        self.prompt = prompt
        self.model_ref = f"{PROVIDER}/{behaviour}"
        # The client names the root file, the worker writes a fresh header id: in one-shot
        # runs the file stem is not the header id (contract §1.2).
        self.root_file = os.path.join(sessions, uuid7(now_ms()) + ".jsonl")
        header = session_header(self.cwd, now_ms())
        self.artifacts_dir = os.path.join(
            os.path.dirname(sessions), "session-artifacts", header["id"]
        )
        self.ledger = Ledger(agent_dir, daemon_sessions_dir(agent_dir), self.cwd)
        self.stream = Stream(header)
        self.root = open_session(self.root_file, header, behaviour, ROOT_CONTEXT_TOKENS)
        self.root.transcript.append("session_state", {"state": {"status": "active"}})
        self.user = self.root.user_message(self.prompt)
        self.attribution: Attribution | None = None
        self.answers: dict[str, str] = {}

    # root turns

    def text_turn(self, incoming: list[dict], text: str) -> None:
        self.stream.emit({"type": "turn_start"})
        for message in incoming:
            self.stream.message(message)
        assistant = self.root.assistant_message(text)
        self.stream.message(assistant)
        self.stream.emit({"type": "turn_end", "message": assistant, "toolResults": []})

    @contextlib.contextmanager
    def cell_turn(self, incoming: list[dict], text: str, code: str):
        """A turn whose assistant message runs one ipython cell; the with-body runs it."""
        self.stream.emit({"type": "turn_start"})
        for message in incoming:
            self.stream.message(message)
        assistant = self.root.assistant_message(text, code)
        self.stream.message(assistant)
        call = assistant["content"][-1]
        ids = {"toolCallId": call["id"], "toolName": call["name"]}
        self.stream.emit({"type": "tool_execution_start", **ids, "args": call["arguments"]})
        cell = Cell(assistant, self.root.transcript.last_id, now_ms())
        yield cell
        result = self.root.tool_result(assistant, cell.stdout, cell.started_ms, **cell.details)
        outcome = {"content": result["content"], "details": result["details"], "isError": False}
        self.stream.emit({"type": "tool_execution_end", **ids, "result": outcome, "isError": False})
        self.stream.message(result)
        self.stream.emit({"type": "turn_end", "message": assistant, "toolResults": [result]})

    # children (contract §3, §5, §6, §9)

    def spawn_child(self, shard: Shard, spawn_code: str) -> Child:
        child_id = "sub-" + hex_id(8)
        session_dir = os.path.join(self.artifacts_dir, child_id)
        header = session_header(self.cwd, now_ms(), parent_file=self.root_file)
        path = os.path.join(session_dir, header["id"] + ".jsonl")  # stem == child header id
        session = open_session(path, header, self.behaviour, CHILD_CONTEXT_TOKENS)
        prompt = child_prompt(shard)
        child = Child(child_id, shard.worker, prompt, session, session_dir, spawn_code, now_ms())
        self.write_display(child, "running")
        session.transcript.append("session_info", {"name": shard.worker})
        # The worker appends the spawn after the child's header and before its first prompt.
        self.ledger.spawn(child_id, self.root_file, path, shard.worker)
        task = {
            "id": f"spawn:{child_id}",
            "message": prompt,
            "from": {"sessionId": self.root.id, "activeSessionId": self.root.active_id},
            "fromRelationship": "parent",
        }
        session.custom_message("agent_message", f"[task from parent]\n\n{prompt}", task)
        self.child_update(child, "queued")
        self.child_update(child, "running")
        return child

    def run_child(self, child: Child, sends_reply: bool) -> Reply | None:
        """The child's model: read its task, answer it in one cell, close with a text."""
        session = child.session
        shard = parse_shards(child.prompt)[0]  # the child knows only its task
        path = shard_path(self.cwd, shard)
        first = session.assistant_message(
            f"Answering {shard.file}.", child_cell(path, shard, sends_reply)
        )
        self.attribute(first)
        started = now_ms()
        answer = compute_answer(path, shard.question)
        reply = None
        if sends_reply:
            reply = Reply(
                "agentmsg_" + str(uuid.uuid4()), f"{shard.file}: {answer}", child, now_ms()
            )
            sent = {
                "id": reply.id,
                "message": reply.message,
                "deliveryStatus": "queued",
                "receiverRole": "parent",
                "target": {"activeSessionId": self.root.active_id, "sessionId": self.root.id},
            }
            stdout = f"{answer} {self.receipt(reply)!r}\n"
            session.tool_result(first, stdout, started, sentAgentMessages=[sent])
            closing = f"Reported the answer for {shard.file} to my parent."
        else:
            session.tool_result(first, f"{answer}\n", started)
            closing = f"Worked out the answer for {shard.file}."
        last = session.assistant_message(closing)
        self.attribute(last)
        self.write_display(child, "completed")
        progress = {
            "durationMs": now_ms() - child.created_ms,
            "answerPreview": closing,
            "toolUseCount": 1,
            "tokenCount": last["usage"]["totalTokens"],
        }
        self.child_update(child, "done", progress, replied=sends_reply)
        return reply

    def attribute(self, child_message: dict) -> None:
        entry = self.attribution.entry(child_message["usage"])
        self.root.transcript.append("child_usage_attributed", entry)

    def write_display(self, child: Child, status: str) -> None:
        """sub-*/rlm-subagent.json, rewritten atomically at spawn and at run end (§6)."""
        display = {
            "type": "rlm_subagent",
            "childId": child.child_id,
            "sessionName": child.name,
            "sessionDir": child.session_dir,
            "sessionFile": child.session.transcript.path,
            "rlmMaxDepth": RLM_MAX_DEPTH,
            "rlmParentNodeId": child.child_id,
            "prompt": child.prompt[:4096],
            "spawnCode": child.spawn_code,
            "model": {"provider": PROVIDER, "modelId": self.behaviour},
            "status": status,
            "createdAt": child.created_ms,
            "updatedAt": iso(now_ms()),
        }
        path = os.path.join(child.session_dir, "rlm-subagent.json")
        Path(path + ".tmp").write_text(dumps(display) + "\n", encoding="utf-8")
        os.replace(path + ".tmp", path)

    def child_update(
        self, child: Child, status: str, progress: dict | None = None, replied: bool = False
    ) -> None:
        state = {
            "id": child.child_id,
            "sessionName": child.name,
            "model": self.model_ref,
            "label": " ".join(child.prompt.split()),
            "status": status,
            **(progress or {}),
            "sessionDir": child.session_dir,
        }
        if status != "queued":
            state.update(repliedSinceTask=replied, activeSessionId=child.session.active_id)
        self.stream.emit({"type": "rlm_child_update", "child": state})

    # replies (contract §5, §6)

    def sender(self, child: Child) -> dict:
        return {
            "activeSessionId": child.session.active_id,
            "sessionId": child.session.id,
            "sessionName": child.name,
            "runtimeKind": "subagent",
            "clientId": "agent",
        }

    def receiver(self) -> dict:
        return {
            "activeSessionId": self.root.active_id,
            "sessionId": self.root.id,
            "runtimeKind": "top-level",
        }

    def receipt(self, reply: Reply) -> dict:
        """What agent_message.send returns in the child's cell; its id is the reply's id."""
        return {
            "id": reply.id,
            "source": "agent_message",
            "target": self.receiver(),
            "from": self.sender(reply.child),
            "message": reply.message,
            "deliveryStatus": "queued",
            "queuedAt": iso(reply.queued_ms),
            "deliveryMode": "steer",
        }

    def reply_entry(self, reply: Reply) -> dict:
        """Delivers a queued reply to the root as an agent_message custom_message."""
        child = reply.child
        content = (
            f"[from child:{child.name}]\nAgent-to-agent message received.\n"
            "Source: agent_message\n"
            f"From: {child.name}, active {child.session.active_id}, "
            f"session {child.session.id}, client agent\n"
            f"To: active {self.root.active_id}, session {self.root.id}\n"
            f"Message id: {reply.id}\n\n{reply.message}"
        )
        details = {
            "id": reply.id,
            "message": reply.message,
            "from": self.sender(child),
            "fromRelationship": "child",
            "target": self.receiver(),
        }
        file, _, answer = reply.message.partition(": ")
        self.answers[file] = answer
        return self.root.custom_message("agent_message", content, details)

    # what the root's model does

    def fan_out(self, shards: list[Shard]) -> None:
        """Spawn one child per shard in one cell, then write the index from the replies."""
        copies = 2 if self.behaviour == "double-spawn" else 1
        code = spawn_cell(shards, copies)
        self.stream.agent_start()
        with self.cell_turn([self.user], "Spawning one child per shard.", code) as cell:
            self.attribution = Attribution(cell.entry_id, cell.assistant["usage"])
            children = [self.spawn_child(shard, code) for shard in shards * copies]
            if self.behaviour == "hang":
                hang()
            silent = children[-1] if self.behaviour == "silent-drop" else None
            replies = [self.run_child(child, sends_reply=child is not silent) for child in children]
            replies = [reply for reply in replies if reply is not None]
            cell.stdout = (
                "".join(
                    f"{c.child_id} {c.name} {c.session_dir} {self.model_ref}\n" for c in children
                )
                + f"spawned {len(children)}\n"
            )
        # Replies arrive one per model turn, each starting a new agent run (contract §6, §7).
        incoming: list[dict] = []
        for number, reply in enumerate(replies, start=1):
            self.stream.agent_end()
            self.stream.agent_start()
            incoming = [self.reply_entry(reply)]
            if number < len(replies):
                self.poll_turn(incoming, f"Received {number}/{len(children)} replies; waiting.")
        known = dict(self.answers)
        if self.behaviour == "fabricate":
            known[shards[0].file] = fabricated(known[shards[0].file])
        self.index_turns(incoming, shards, known, "All children are done; writing the index.")
        self.stream.agent_end()

    def poll_turn(self, incoming: list[dict], text: str) -> None:
        """Keeps the root's run alive while replies are outstanding, as the task asks."""
        with self.cell_turn(incoming, text, POLL_CELL) as cell:
            time.sleep(POLL_S)
            cell.stdout = "waited\n"

    def answer_directly(self, shards: list[Shard]) -> None:
        """no-spawn: one cell answers every shard and writes the index (the nospawn capture)."""
        self.stream.agent_start()
        self.index_turns([self.user], shards, {}, "Answering the shards directly.")
        self.stream.agent_end()

    def index_turns(
        self, incoming: list[dict], shards: list[Shard], known: dict, text: str
    ) -> None:
        code, index = index_cell(self.cwd, shards, known)
        with self.cell_turn(incoming, text, code) as cell:
            Path(self.cwd, INDEX_FILE).write_text(index, encoding="utf-8")
            cell.stdout = index + "\n"
        self.text_turn([], f"Wrote {INDEX_FILE}.")

    def say(self, text: str) -> None:
        self.stream.agent_start()
        self.text_turn([self.user], text)
        self.stream.agent_end()


# --- processes: the supervisor, hang and escape ----------------------------------------------


def detach(body) -> int:
    """Double fork + setsid, like the product's detached supervisor; returns the pid.

    body(ready) runs in the detached process with its std fds on /dev/null. The pid is
    returned once the process calls ready() or execs (the pipe is close-on-exec).
    """
    sys.stdout.flush()
    read_end, write_end = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        os.close(read_end)
        os.setsid()
        pid = os.fork()
        if pid:
            os.write(write_end, str(pid).encode())
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        try:
            body(lambda: os.close(write_end))
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(intermediate, 0)
    data = b""
    while select.select([read_end], [], [], 10)[0]:
        chunk = os.read(read_end, 64)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    if not data:
        raise RuntimeError("the detached process did not start")
    return int(data)


def default_socket() -> str:
    """`$TMPDIR/prime-agent-<uid>/daemon.sock` (contract §2)."""
    tmp = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(tmp, f"prime-agent-{os.getuid()}", "daemon.sock")


def start_supervisor(socket_path: str, cwd: str) -> int:
    """Listens on the socket (mode 0600) before detaching, so the CLI goes on only once the
    supervisor accepts connections. It keeps the CLI's env and runs in --cwd (contract §2)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        listener.bind(socket_path)
    except OSError as error:
        raise UsageError(f"cannot listen on daemon socket {socket_path}: {error}") from error
    finally:
        os.umask(umask)
    listener.listen()
    pid = detach(lambda ready: serve(listener, socket_path, cwd, ready))
    listener.close()
    return pid


def serve(listener: socket.socket, socket_path: str, cwd: str, ready) -> None:
    os.chdir(cwd)
    ready()
    hello = {
        "type": "daemon_hello",
        "socketPath": socket_path,
        "protocol": PROTOCOL,
        "schemaId": SCHEMA_ID,
        "schemaRevision": SCHEMA_REVISION,
        "appVersion": APP_VERSION,
        "runtime": {
            "buildId": "simulated",
            "executablePath": sys.executable,
            "entrypointPath": os.path.abspath(__file__),
        },
        "supervisorGeneration": str(uuid.uuid4()),
        "supervisorOwnerToken": str(uuid.uuid4()),
        "supervisorPid": os.getpid(),
        "supervisorProcessStartId": f"proc:{int(time.monotonic() * 100)}",
        "supervisorSocketPath": socket_path,
    }
    deadline = time.monotonic() + SUPERVISOR_LIFETIME_S
    while (remaining := deadline - time.monotonic()) > 0:
        listener.settimeout(remaining)
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            break
        client = {**hello, "clientId": hex_id(12), "serverCapabilities": SERVER_CAPABILITIES}
        threading.Thread(target=serve_client, args=(connection, client), daemon=True).start()
    stop_supervisor(socket_path)


def serve_client(connection: socket.socket, hello: dict) -> None:
    """Newline-delimited JSON; the server speaks first (contract §8.1)."""
    with connection:
        connection.sendall((dumps(hello) + "\n").encode())
        buffer = b""
        while chunk := connection.recv(65536):
            buffer += chunk
            while b"\n" in buffer:  # split on \n only (contract §8.1)
                line, buffer = buffer.split(b"\n", 1)
                response, stop = handle_command(line)
                if response is not None:
                    connection.sendall((dumps(response) + "\n").encode())
                if stop:
                    stop_supervisor(hello["socketPath"])


def handle_command(line: bytes) -> tuple[dict | None, bool]:
    """Returns the response (None for none) and whether the supervisor stops."""
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if isinstance(message, dict) and message.get("type") == "ack_result":
        return None, False  # no reply to ack_result was observed (contract §8.1)
    if not (
        isinstance(message, dict)
        and message.get("type") == "command"
        and message.get("protocol") == PROTOCOL
        and isinstance(message.get("command"), dict)
    ):
        return PARSE_ERROR, False
    command = message["command"]
    response = {"id": message.get("id"), "type": "response", "command": command.get("type")}
    if command.get("type") != "shutdown":
        return {**response, "success": False, "error": "unsupported in simulation"}, False
    # A non-forced shutdown succeeds but the supervisor lives on (contract §2, observed).
    return {**response, "success": True}, command.get("force") is True


def stop_supervisor(socket_path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(socket_path)
    os._exit(0)


def ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def hang() -> None:
    """Never returns: a grandchild in the CLI's process group that ignores SIGTERM (the
    ignored disposition survives exec), and the CLI sleeping with default SIGTERM handling."""
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(3600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=ignore_sigterm,
    )
    log(f"grandchild pid={grandchild.pid}")
    while True:
        time.sleep(3600)


def escape() -> None:
    """Leaves a detached process that ignores SIGTERM and has an empty environment, so it
    cannot be found by the agent dir in /proc/<pid>/environ."""

    def body(_ready) -> None:  # exec closes the ready pipe: the pid is reported after exec
        ignore_sigterm()
        code = f"import time\ntime.sleep({ESCAPED_LIFETIME_S})"
        os.execve(sys.executable, [sys.executable, "-c", code], {})

    log(f"escaped pid={detach(body)}")


# --- the command line (contract §2) -----------------------------------------------------------

VALUE_OPTIONS = {
    "--mode": "mode",
    "--daemon-socket": "daemon_socket",
    "--cwd": "cwd",
    "--session-dir": "session_dir",
    "--model": "model",
}


def parse_args(argv: list[str]) -> Options:
    """Options first, then `--`, then the prompt as one argument.

    An unknown --flag is an extension flag that eats the next argument unless that starts
    with `-` or `@`.
    """
    options = Options()
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            options.prompts.extend(rest)
            break
        if arg == "--version":
            options.version = True
        elif arg == "--offline":
            continue  # the simulation makes no network use anyway
        elif arg in VALUE_OPTIONS:
            if not rest:
                raise UsageError(f"{arg} needs a value")
            setattr(options, VALUE_OPTIONS[arg], rest.pop(0))
        elif arg.startswith("--"):
            if rest and rest[0][:1] not in ("-", "@"):
                rest.pop(0)
        else:
            options.prompts.append(arg)
    return options


def behaviour_of(model: str | None) -> str:
    if model is None:
        raise UsageError("no model: pass --model simulated/<behaviour>")
    provider, _, behaviour = model.partition("/")
    if provider != PROVIDER or behaviour not in BEHAVIOURS:
        names = ", ".join(f"{PROVIDER}/{name}" for name in BEHAVIOURS)
        raise UsageError(f'unknown model "{model}"; the simulation knows {names}')
    return behaviour


def validate(options: Options) -> str:
    behaviour = behaviour_of(options.model)
    if options.mode != "json":
        raise UsageError("the simulation runs only as --mode json")
    if len(options.prompts) != 1:
        raise UsageError("pass exactly one prompt after --")
    if options.cwd is not None and not os.path.isdir(options.cwd):
        raise UsageError(f"--cwd {options.cwd} is not a directory")
    return behaviour


def main(argv: list[str]) -> int:
    try:
        options = parse_args(argv)
        if options.version:
            print(VERSION_LINE)
            return 0
        behaviour = validate(options)
        cwd = os.path.abspath(options.cwd or ".")
        socket_path = os.path.abspath(options.daemon_socket or default_socket())
        os.makedirs(os.path.dirname(socket_path), mode=0o700, exist_ok=True)
        log(f"supervisor pid={start_supervisor(socket_path, cwd)}")
    except UsageError as error:
        log(str(error))
        return 1
    agent_dir = os.environ.get("PRIME_AGENT_CODING_AGENT_DIR") or os.path.expanduser(
        "~/.prime/agent"
    )
    if daemon_sessions_dir(agent_dir) == default_sessions_dir(agent_dir):
        # The worker creates its default sessions dir; it is absent when the env var points
        # elsewhere (contract §3, observed).
        os.makedirs(default_sessions_dir(agent_dir), exist_ok=True)
    # --session-dir > env > <agentDir>/sessions places the root transcript (contract §2).
    sessions_dir = os.path.abspath(options.session_dir or daemon_sessions_dir(agent_dir))
    run = OneShotRun(cwd, sessions_dir, options.prompts[0], behaviour, agent_dir)
    shards = parse_shards(run.prompt)
    if behaviour == "nop":
        run.root.assistant_message("Nothing to do here.")
    elif not shards:
        run.say("The task lists no shard lines (- `shards/<file>` | worker `<name>` | ...).")
    elif behaviour == "no-spawn":
        run.answer_directly(shards)
    else:
        run.fan_out(shards)
    if behaviour == "escape":
        escape()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
