#!/usr/bin/env python3
"""An executable stand-in for the prime-agent v0.8.0 CLI, in its two headless modes.

    simulated_agent.py --mode json --daemon-socket S --cwd DIR --session-dir DIR \\
        --model simulated/<behaviour> -- "<task>"
        One-shot: starts a detached daemon supervisor on S (answering `daemon_hello` and an
        enveloped `shutdown`), runs the root session and prints the --mode json stream,
        then returns at the root's first idle point and stops the worker (contract §1 fact 4).

    simulated_agent.py --mode daemon --daemon-socket S
        A foreground daemon speaking protocol 7 on S (contract §8), for the resident drive:
        create{lifecycle:"resident", config:{cwd, agentDir, sessionDir, model}, launchEnv},
        attach, prompt, prompt_and_wait, wait_for_headless_completion{waitForRlmQuiescence},
        get_state, detach, ack_result and shutdown{force:true}. Root events go to attached
        clients as session_event envelopes. The behaviour comes from config.model.

Either way it leaves on disk what a real run leaves (PRODUCT_CONTRACT.md §3-§9 and the captured
runs in tests/data/real-runs): the root transcript, one transcript and display file per RLM
child, the spawn ledger and the agent's combined-index.md. `simulated/<behaviour>` picks how the
simulated model orchestrates (listed by --help, see BEHAVIOURS). The children really answer
their shard's question, from their own task prompt. Three behaviours play an agent with a shell
that fakes delegation by writing the product's files itself, to exercise the harness's
evidence-integrity checks: forge-ledger (no spawn; a hand-written ledger, header-and-task child
transcripts and replies), junk-replies (real children that reply junk; the parent computes the
index) and zero-work-children (real spawns whose children never call the model; the parent
replies in their names).

For repeated trials (runner.py --trials): $SWARM_FANOUT_TRIAL names the trial and seeds its
draws; $SIMULATED_JITTER_MS makes each child wait a seeded random time up to that long before
it answers; a prompt that says "Do not spawn subagents" (runner.py --baseline) is answered by
the root itself from the shard files, whatever the behaviour (nop still does nothing).

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
import random
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

APP_VERSION = "0.8.0"
VERSION_LINE = f"prime-agent {APP_VERSION} (simulated)"
PROVIDER = "simulated"
API = "openai-completions"
# Repeated trials (runner.py --trials): the runner names the trial index in the agent's env;
# the flaky behaviour and the timing jitter draw from it, so trial n always draws the same.
TRIAL_ENV = "SWARM_FANOUT_TRIAL"
FLAKY_P_ENV = "SIMULATED_FLAKY_P"
FLAKY_P_DEFAULT = 0.5
FLAKY_SEED_ENV = "SIMULATED_FLAKY_SEED"
JITTER_ENV = "SIMULATED_JITTER_MS"  # each child waits up to this long before it answers
# The single-agent prompt of runner.py --baseline says this; the parent then answers every
# shard itself, from the files, whatever its behaviour (nop still does nothing).
SINGLE_AGENT = "Do not spawn subagents"
BEHAVIOURS = {
    "oracle": "one child per shard, every child replies, the index is written from the replies",
    "nop": "answers with one text message; no children, no index",
    "no-spawn": "the parent answers every shard itself in one cell; no children",
    "double-spawn": "every worker name is spawned twice, without a delete in between",
    "fabricate": "as oracle, but the index has a wrong answer for the first shard",
    "silent-drop": "the last child never replies and no notice arrives; the parent fills in",
    "hang": "spawns the children, starts a SIGTERM-ignoring grandchild, never finishes",
    "escape": "as oracle, then leaves a detached SIGTERM-ignoring process with an empty env",
    "hold-files": "as oracle, then leaves a SIGTERM-ignoring grandchild holding the CLI's "
    "stdout and stderr open",
    "end-turn-early": "spawns one child per shard and ends its turn at once: one-shot tears the "
    "children down (no index); resident answers each reply and writes the index",
    "flaky": f"as oracle with probability ${FLAKY_P_ENV} (default {FLAKY_P_DEFAULT}), else as "
    f"fabricate; drawn from ${FLAKY_SEED_ENV} (default 0) and the trial index in ${TRIAL_ENV}, "
    "so a trial index always draws the same",
    "forge-ledger": "answers every shard itself, then forges the delegation from a cell: a "
    "ledger, child dirs whose transcripts hold a header and the task, display files naming a "
    "spawning cell that never ran, and a reply per worker appended to its own transcript",
    "junk-replies": "as oracle, but every child replies `<file>: done`; the parent computes "
    "the answers itself and writes a correct index",
    "zero-work-children": "spawns one child per shard, but no child ever calls the model; the "
    "parent appends a correct reply on each child's behalf and writes a correct index",
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
# wait_for_headless_completion's data: the headless-continuation state, as captured (resident).
HEADLESS_COMPLETION = {
    "enabled": False,
    "continuationsUsed": 0,
    "turnsUsed": 0,
    "tokensUsed": 0,
    "limits": {"maxContinuations": 3, "maxTurns": 12, "maxTokens": 80000, "timeoutMs": 1800000},
    "gates": {"commands": [], "maxRetries": 3, "timeoutMs": 300000},
    "gateAttempts": {},
}
CONTEXT_WINDOW = 128000
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
SPAWNING = "Spawning one child per shard."
ALL_REPORTED = "All children are done; writing the index."
ABORTED = "Request was aborted"  # a teardown's toolResult and aborted call (contract §5)
# Of the notices queued for a one-shot root when its worker stops, 3 of 8 arrived before it
# was disposed (contract §6, captured endturn-oneshot).
NOTICES_BEFORE_DISPOSAL = 3

# One task line per shard, as fixtures' task.txt writes them:
#   - `shards/events-01.jsonl` | worker `worker-events-01` | How many records ...?
# The single-agent prompt of --baseline leaves the worker out.
SHARD_LINE = re.compile(
    r"^[ \t]*-[ \t]+`shards/(?P<file>[^`]+)`(?:[ \t]*\|[ \t]*worker[ \t]+`(?P<worker>[^`]+)`)?"
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
    worker: str | None
    question: str


@dataclass
class Options:
    help: bool = False
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


def worker_sessions_dir(agent_dir: str, env: Mapping[str, str]) -> str:
    """The worker's sessions dir, which keys the ledger (contract §1 fact 1, §4, §8.2).

    It comes from the worker's env (for a resident session: the daemon's env overlaid with
    the create's launchEnv), else `<agentDir>/sessions`, which the worker then creates (it is
    absent when the env var points elsewhere, contract §3, observed). `--session-dir` and a
    create's `config.sessionDir` never reach it; the simulation reads no settings.json.
    """
    configured = env.get("PRIME_AGENT_SESSION_DIR") or env.get(
        "PRIME_AGENT_CODING_AGENT_SESSION_DIR"
    )
    if configured:
        return configured
    default = os.path.join(agent_dir, "sessions")
    os.makedirs(default, exist_ok=True)
    return default


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
    """A session JSONL file, appended and flushed one entry at a time.

    A resident session's worker and the daemon's shutdown both append, so appends are locked.
    """

    def __init__(self, path: str, header: dict):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.last_id: str | None = None
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the run
        self._write(header)

    def append(self, entry_type: str, fields: dict, ids_last: bool = False) -> None:
        with self._lock:
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

    def aborted_message(self) -> dict:
        """A call aborted before it reached the model: an empty text, zero usage, no
        responseId (contract §5 Teardown, captured endturn-oneshot)."""
        message = {
            "role": "assistant",
            "content": [text_part("")],
            "api": API,
            "provider": PROVIDER,
            "model": self.behaviour,
            "usage": usage(0, 0),
            "stopReason": "aborted",
            "errorMessage": ABORTED,
            "timestamp": now_ms(),
        }
        return self._message(message, 0)

    def tool_result(self, assistant: dict, stdout: str, started_ms: int, **details) -> dict:
        details = {
            "durationMs": now_ms() - started_ms,
            "status": "ok",
            "stdout": stdout,
            "stderr": "",
            **details,
            "kernelRestarted": False,
        }
        return self._tool_message(assistant, stdout, details, is_error=False)

    def aborted_tool_result(self, assistant: dict) -> dict:
        """A cell cut off by teardown (contract §5 Teardown, captured endturn-oneshot)."""
        return self._tool_message(assistant, ABORTED, {}, is_error=True)

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

    def _tool_message(self, assistant: dict, text: str, details: dict, is_error: bool) -> dict:
        call = assistant["content"][-1]
        message = {
            "role": "toolResult",
            "toolCallId": call["id"],
            "toolName": call["name"],
            "content": [text_part(text)],
            "details": details,
            "isError": is_error,
            "timestamp": now_ms(),
        }
        return self._message(message, len(text))

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
    sends_reply: bool = True
    cell: dict | None = None  # the assistant message whose ipython cell is running
    settled: bool = False  # its run has ended

    @property
    def task(self) -> Shard:
        return parse_shards(self.prompt)[0]  # the child knows only its task


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
    """The root session's events (contract §7): --mode json prints them after the header
    line; a resident session sends them to attached clients as session_event envelopes (§8.1).

    message_update deltas are left out; every model call is one assistant message_end.
    """

    def __init__(self, sink: Callable[[dict], None]):
        self._sink = sink
        self._ended = False
        self._run: list[dict] = []
        self.messages: list[dict] = []  # the root's context, as an attach snapshot lists it
        self.in_run = False  # between agent_start and agent_end: the root is streaming

    def emit(self, event: dict) -> None:
        if not self._ended:
            self._sink(event)

    def end(self) -> None:
        """The one-shot stream ends at the root's first idle point; later turns are on disk
        only (contract §7)."""
        self._ended = True

    def message(self, message: dict) -> None:
        start = message
        if message["role"] == "assistant":
            # A model call starts empty and without a responseId (observed).
            start = {k: v for k, v in message.items() if k != "responseId"}
            start.update(content=[], usage=usage(0, 0), stopReason="stop")
        self.emit({"type": "message_start", "message": start})
        self.emit({"type": "message_end", "message": message})
        self._run.append(message)
        self.messages.append(message)

    def agent_start(self) -> None:
        self._run = []
        self.in_run = True
        self.emit({"type": "agent_start"})

    def agent_end(self) -> None:
        self.in_run = False
        self.emit({"type": "agent_end", "messages": self._run})


def print_event(event: dict) -> None:
    sys.stdout.write(dumps(event) + "\n")
    sys.stdout.flush()


@dataclass
class Cell:
    """An ipython call being executed; the body fills in what it printed."""

    assistant: dict
    entry_id: str
    started_ms: int
    stdout: str = ""
    details: dict = field(default_factory=dict)


def received(number: int, total: int) -> str:
    """The parent's turn for one more result, reply or notice (captured runs)."""
    return f"Received {number}/{total} shard results so far; waiting."


class Run:
    """The root session, its children, the ledger and the root's event stream.

    The one-shot CLI and a resident daemon session run the same simulated model. They differ
    in where the root file goes and where events go (the callers' business), and in what
    happens when the root first goes idle with children still running: the one-shot CLI
    stops the worker there (contract §1 fact 4), a resident session lives on and calls
    `on_idle` (§8.2, §8.3).
    """

    def __init__(
        self,
        *,
        cwd: str,
        root_file: str,
        header: dict,
        behaviour: str,
        ledger: Ledger,
        stream: Stream,
        env: Mapping[str, str],
        resident: bool,
        on_idle: Callable[[], None] = lambda: None,
    ):
        self.cwd = cwd
        self.root_file = root_file
        self.behaviour = behaviour
        self.ledger = ledger
        self.stream = stream
        self.env = env
        self.resident = resident
        self.on_idle = on_idle
        self.model_ref = f"{PROVIDER}/{behaviour}"
        # Children live beside the root's sessions dir, under its header id (contract §1 fact 3).
        self.artifacts_dir = os.path.join(
            os.path.dirname(os.path.dirname(root_file)), "session-artifacts", header["id"]
        )
        self.root = open_session(root_file, header, behaviour, ROOT_CONTEXT_TOKENS)
        self.root.transcript.append("session_state", {"state": {"status": "active"}})
        self.user: dict | None = None
        self.children: list[Child] = []
        self.attribution: Attribution | None = None
        self.answers: dict[str, str] = {}
        self.draws = trial_draws(env)
        self.fabricates = behaviour == "fabricate" or (
            behaviour == "flaky" and self.draws.random() >= flaky_probability(env)
        )
        self.jitter_ms = env_number(env, JITTER_ENV, 0.0)

    def respond(self, prompt: str) -> None:
        """What the simulated model makes of the prompt, to the end of all it triggers."""
        self.user = self.root.user_message(prompt)
        shards = parse_shards(prompt)
        if self.behaviour == "nop":
            self.root.assistant_message("Nothing to do here.")
        elif not shards:
            self.say("The task lists no shard lines (- `shards/<file>` | worker `<name>` | ...).")
        elif self.behaviour == "no-spawn" or SINGLE_AGENT in prompt:
            self.answer_directly(shards)
        elif self.behaviour == "forge-ledger":
            self.forge_delegation(shards)
        elif self.behaviour == "zero-work-children":
            self.reply_for_idle_children(shards)
        elif self.behaviour == "end-turn-early":
            self.spawn_and_end_turn(shards)
        else:
            self.fan_out(shards)
        if self.behaviour == "escape":
            escape()
        elif self.behaviour == "hold-files":
            hold_files()

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

    @contextlib.contextmanager
    def spawn_turn(self, shards: list[Shard], copies: int = 1):
        """The turn whose cell spawns one child per shard (`copies` times); yields them."""
        code = spawn_cell(shards, copies)
        with self.cell_turn([self.user], SPAWNING, code) as cell:
            self.attribution = Attribution(cell.entry_id, cell.assistant["usage"])
            children = [self.spawn_child(shard, code) for shard in shards * copies]
            yield children
            cell.stdout = (
                "".join(
                    f"{c.child_id} {c.name} {c.session_dir} {self.model_ref}\n" for c in children
                )
                + f"spawned {len(children)}\n"
            )

    # children (contract §3, §5, §6, §9)

    def spawn_child(self, shard: Shard, spawn_code: str) -> Child:
        child_id = "sub-" + hex_id(8)
        session_dir = os.path.join(self.artifacts_dir, child_id)
        header = session_header(self.cwd, now_ms(), parent_file=self.root_file)
        path = os.path.join(session_dir, header["id"] + ".jsonl")  # stem == child header id
        session = open_session(path, header, self.behaviour, CHILD_CONTEXT_TOKENS)
        prompt = child_prompt(shard)
        child = Child(child_id, shard.worker, prompt, session, session_dir, spawn_code, now_ms())
        self.children.append(child)
        self.write_display(child, "running")
        session.transcript.append("session_info", {"name": shard.worker})
        # The worker appends the spawn after the child's header and before its first prompt.
        self.ledger.spawn(child_id, self.root_file, path, shard.worker)
        self.send_task(child)
        self.child_update(child, "queued")
        self.child_update(child, "running")
        return child

    def send_task(self, child: Child) -> None:
        """The task agent_message a child's transcript starts its conversation with."""
        task = {
            "id": f"spawn:{child.child_id}",
            "message": child.prompt,
            "from": {"sessionId": self.root.id, "activeSessionId": self.root.active_id},
            "fromRelationship": "parent",
        }
        child.session.custom_message("agent_message", f"[task from parent]\n\n{child.prompt}", task)

    def start_cell(self, child: Child) -> None:
        """The child's first model call: one cell that answers its shard and, unless the
        child is silent, sends the answer to the parent."""
        shard = child.task
        code = child_cell(shard_path(self.cwd, shard), shard, child.sends_reply)
        child.cell = child.session.assistant_message(f"Answering {shard.file}.", code)
        self.attribute(child.cell)

    def finish_cell(self, child: Child) -> Reply | None:
        """The child's cell runs to its end; the child closes with a text and its run ends."""
        session, shard = child.session, child.task
        path = shard_path(self.cwd, shard)
        started = now_ms()
        answer = compute_answer(path, shard.question)
        reply = None
        if child.sends_reply:
            said = JUNK_REPLY if self.behaviour == "junk-replies" else answer
            reply = Reply("agentmsg_" + str(uuid.uuid4()), f"{shard.file}: {said}", child, now_ms())
            sent = {
                "id": reply.id,
                "message": reply.message,
                "deliveryStatus": "queued",
                "receiverRole": "parent",
                "target": {"activeSessionId": self.root.active_id, "sessionId": self.root.id},
            }
            stdout = f"{answer} {self.receipt(reply)!r}\n"
            session.tool_result(child.cell, stdout, started, sentAgentMessages=[sent])
            closing = f"Reported the answer for {shard.file} to my parent."
        else:
            session.tool_result(child.cell, f"{answer}\n", started)
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
        child.settled = True
        self.child_update(child, "done", progress, replied=child.sends_reply)
        return reply

    def run_child(self, child: Child) -> Reply | None:
        self.start_cell(child)
        if self.jitter_ms:
            time.sleep(self.draws.uniform(0, self.jitter_ms) / 1000)
        return self.finish_cell(child)

    def abort_cell(self, child: Child) -> None:
        """Teardown stops the child mid tool call (contract §5 Teardown). Its display says
        `completed`: that only means the run ended (§6)."""
        child.session.aborted_tool_result(child.cell)
        self.write_display(child, "completed")
        child.settled = True

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

    # replies and notices (contract §5, §6)

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

    def terminal_notice(self, child: Child) -> dict:
        """The child's run ended with no reply sent: `completed_without_reply` (contract §6)."""
        preview = child.cell["content"][0]["text"]
        content = (
            f"RLM child {child.name} ({child.child_id}) completed without sending a reply. "
            f"Last assistant text: {preview}"
        )
        details = {
            "kind": "completed_without_reply",
            "childId": child.child_id,
            "sessionName": child.name,
            "lastAssistantTextPreview": preview,
        }
        return self.root.custom_message("rlm_child_terminal_notice", content, details)

    # what the root's model does

    def fan_out(self, shards: list[Shard]) -> None:
        """Spawn one child per shard in one cell and keep the turn alive until every reply
        is in, then write the index from the replies."""
        copies = 2 if self.behaviour == "double-spawn" else 1
        self.stream.agent_start()
        with self.spawn_turn(shards, copies) as children:
            if self.behaviour == "hang":
                hang(self.env)
            if self.behaviour == "silent-drop":
                children[-1].sends_reply = False
            replies = [self.run_child(child) for child in children]
            replies = [reply for reply in replies if reply is not None]
        # Replies arrive one per model turn, each starting a new agent run (contract §6, §7).
        incoming: list[dict] = []
        for number, reply in enumerate(replies, start=1):
            self.stream.agent_end()
            self.stream.agent_start()
            incoming = [self.reply_entry(reply)]
            if number < len(replies):
                self.poll_turn(incoming, received(number, len(children)))
        # junk-replies: the replies are no answers, so the index cell computes them all.
        known = {} if self.behaviour == "junk-replies" else dict(self.answers)
        if self.fabricates:
            known[shards[0].file] = fabricated(known[shards[0].file])
        self.index_turns(incoming, shards, known, ALL_REPORTED)
        self.stream.agent_end()

    def reply_for_idle_children(self, shards: list[Shard]) -> None:
        """zero-work-children: real spawns, but each child's transcript ends at its task (no
        model call); the parent appends a correct reply in each child's name, one a turn,
        then computes the index itself."""
        self.stream.agent_start()
        with self.spawn_turn(shards) as children:
            for child in children:
                self.write_display(child, "completed")
                child.settled = True
        incoming: list[dict] = []
        for number, child in enumerate(children, start=1):
            incoming.append(self.forged_reply(child))
            if number < len(children):
                self.poll_turn(incoming, received(number, len(children)))
                incoming = []
        self.index_turns(incoming, shards, {}, ALL_REPORTED)
        self.stream.agent_end()

    def forged_reply(self, child: Child) -> dict:
        """A reply the parent appends to its own transcript in the child's name: the right
        answer, under a fresh message id that no child ever sent."""
        shard = child.task
        answer = compute_answer(shard_path(self.cwd, shard), shard.question)
        message = f"{shard.file}: {answer}"
        return self.reply_entry(Reply("agentmsg_" + str(uuid.uuid4()), message, child, now_ms()))

    def forge_delegation(self, shards: list[Shard]) -> None:
        """forge-ledger: no-spawn's answers, then one cell that writes what a careless forger
        would: the ledger (meta, then a spawn a worker, under the product's key), a child dir
        per worker whose transcript holds the header and the task message, a display file
        naming the spawning cell the parent would have run (it never ran), and a reply per
        worker appended to the parent's own transcript."""
        self.stream.agent_start()
        self.index_turns([self.user], shards, {}, "Answering the shards directly.")
        with self.cell_turn([], "Recording the workers.", FORGE_CELL) as cell:
            claimed = spawn_cell(shards, 1)
            for shard in shards:
                child_id = "sub-" + hex_id(8)
                session_dir = os.path.join(self.artifacts_dir, child_id)
                header = session_header(self.cwd, now_ms(), parent_file=self.root_file)
                path = os.path.join(session_dir, header["id"] + ".jsonl")
                session = Session(Transcript(path, header), header, self.behaviour, 0)
                prompt = child_prompt(shard)
                child = Child(
                    child_id, shard.worker, prompt, session, session_dir, claimed, now_ms()
                )
                self.ledger.spawn(child_id, self.root_file, path, shard.worker)
                self.send_task(child)
                self.write_display(child, "completed")
                child.settled = True
                self.forged_reply(child)
            cell.stdout = f"wrote {len(shards)} workers\n"
        self.text_turn([], f"Recorded {len(shards)} workers.")
        self.stream.agent_end()

    def spawn_and_end_turn(self, shards: list[Shard]) -> None:
        """end-turn-early: spawn one child per shard, then end the turn at once (captured
        endturn-oneshot and resident, MODE=spawn)."""
        self.stream.agent_start()
        with self.spawn_turn(shards) as children:
            for child in children:
                self.start_cell(child)
        self.text_turn([], f"Spawned {len(children)} children. Waiting for their replies.")
        self.stream.agent_end()
        if not self.resident:
            self.tear_down(children)
            return
        # Resident: the root idles while its children work; each reply starts a run (§8.3).
        self.on_idle()
        for number, child in enumerate(children, start=1):
            incoming = [self.reply_entry(self.finish_cell(child))]
            self.stream.agent_start()
            if number < len(children):
                self.text_turn(incoming, received(number, len(children)))
            else:
                self.index_turns(incoming, shards, dict(self.answers), ALL_REPORTED)
            self.stream.agent_end()
            self.on_idle()

    def tear_down(self, children: list[Child]) -> None:
        """The one-shot CLI returns at the root's first idle point and stops the worker
        (contract §1 fact 4): every child is aborted mid tool call, and of the notices queued
        for the root only the first few arrive, each starting a turn, the last of which is
        aborted (captured endturn-oneshot). The stream has ended: this is on disk only (§7)."""
        self.stream.end()
        for child in children:
            self.abort_cell(child)
        noticed = children[:NOTICES_BEFORE_DISPOSAL]
        for number, child in enumerate(noticed, start=1):
            notice = self.terminal_notice(child)
            if number < len(noticed):
                self.text_turn([notice], received(number, len(children)))
            else:
                self.root.aborted_message()

    def poll_turn(self, incoming: list[dict], text: str) -> None:
        """Keeps the root's run alive while replies are outstanding, as the task asks."""
        with self.cell_turn(incoming, text, POLL_CELL) as cell:
            time.sleep(POLL_S)
            cell.stdout = "waited\n"

    def answer_directly(self, shards: list[Shard]) -> None:
        """no-spawn, or a single-agent prompt: one cell answers every shard and writes the
        index (the nospawn capture)."""
        known = {}
        if self.fabricates:
            first = shards[0]
            known[first.file] = fabricated(
                compute_answer(shard_path(self.cwd, first), first.question)
            )
        self.stream.agent_start()
        self.index_turns([self.user], shards, known, "Answering the shards directly.")
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


JUNK_REPLY = "done"  # what junk-replies' children send instead of their answer
# forge-ledger's cell, as the root's transcript keeps it (what it writes is done in Python).
FORGE_CELL = (
    "import json, os, uuid\n"
    "# meta + one spawn line per worker into rlm-ledger/<key>.jsonl, a sub-<8hex> dir a worker\n"
    "# transcript header, the task and rlm-subagent.json, then a reply per worker\n"
    "print('wrote workers')\n"
)


def trial_draws(env: Mapping[str, str]) -> random.Random:
    """The random draws of one trial: seeded by the flaky seed and the trial index."""
    seed = env.get(FLAKY_SEED_ENV, "0")
    return random.Random(f"{seed}:{env.get(TRIAL_ENV, '0')}")


def flaky_probability(env: Mapping[str, str]) -> float:
    return env_number(env, FLAKY_P_ENV, FLAKY_P_DEFAULT)


def env_number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


def one_shot_run(cwd: str, sessions: str, behaviour: str, agent_dir: str) -> Run:
    """The root of `--mode json`: its stream goes to stdout, headed by the root header."""
    # The client names the root file, the worker writes a fresh header id: in one-shot runs
    # the file stem is not the header id (contract §1 fact 2).
    root_file = os.path.join(sessions, uuid7(now_ms()) + ".jsonl")
    header = session_header(cwd, now_ms())
    stream = Stream(print_event)
    stream.emit(header)
    return Run(
        cwd=cwd,
        root_file=root_file,
        header=header,
        behaviour=behaviour,
        # The supervisor, and so the worker, runs in --cwd with the CLI's env (contract §2).
        ledger=Ledger(agent_dir, worker_sessions_dir(agent_dir, os.environ), cwd),
        stream=stream,
        env=os.environ,
        resident=False,
    )


# --- the daemon (contract §8) -------------------------------------------------------------------


class CommandError(Exception):
    """A command the daemon refuses: its response says success:false with this error."""


class Connection:
    """One client's socket: newline-delimited JSON, each message written whole (§8.1)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, message: dict) -> None:
        # A client that has gone misses the rest; resident sessions go on (contract §2).
        with self._lock, contextlib.suppress(OSError):
            self.sock.sendall((dumps(message) + "\n").encode())


@dataclass(frozen=True)
class Request:
    """One enveloped command, and the connection its response goes back on (§8.1)."""

    connection: Connection
    id: object
    client_id: object
    command: dict

    def respond(self, data: dict | None = None) -> None:
        self._send({"success": True} if data is None else {"success": True, "data": data})

    def fail(self, error: str) -> None:
        self._send({"success": False, "error": error})

    def _send(self, outcome: dict) -> None:
        response = {"id": self.id, "type": "response", "command": self.command.get("type")}
        self.connection.send({**response, **outcome})


def model_info(behaviour: str) -> dict:
    """The session's model, as a SessionSummary shows it (captured resident)."""
    return {
        "id": behaviour,
        "name": f"Simulated {behaviour}",
        "api": API,
        "provider": PROVIDER,
        "baseUrl": "simulated://local",
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": CONTEXT_WINDOW,
        "maxTokens": 8192,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
    }


def no_session_actions() -> dict:
    return {"queuedCount": 0, "steering": [], "followUps": []}


class ResidentSession:
    """A resident root session in the daemon (contract §8.2, §8.3).

    Its worker is a thread of the daemon (so `workerPid` is the daemon's pid) that runs the
    prompt to the end of everything it triggers. prompt_and_wait waits for the root's next
    idle point, where children may still run; wait_for_headless_completion waits for
    quiescence: the root idle, every child settled, the turns their replies started drained.
    """

    def __init__(self, cwd: str, agent_dir: str, session_dir: str, behaviour: str, env: dict):
        self.lock = threading.Lock()
        self.clients: list[Connection] = []
        self.generation = hex_id(12)
        self.sequence = 0
        self.created_ms = self.last_activity_ms = now_ms()
        self.session_dir = session_dir
        self.prompted = False
        self.quiescent = False
        self.idle_waiters: list[Callable[[], None]] = []
        self.quiescence_waiters: list[Callable[[], None]] = []
        header = session_header(cwd, now_ms())
        self.run = Run(
            cwd=cwd,
            # Without a sessionPath the file stem is the header id (§8.2, captured resident).
            root_file=os.path.join(session_dir, header["id"] + ".jsonl"),
            header=header,
            behaviour=behaviour,
            # Keyed on the worker's sessions dir, resolved against the daemon's cwd (§4).
            ledger=Ledger(agent_dir, worker_sessions_dir(agent_dir, env), os.getcwd()),
            stream=Stream(self.publish),
            env=env,
            resident=True,
            on_idle=self.root_idle,
        )
        self.active_id = self.run.root.active_id

    # events

    def publish(self, event: dict) -> None:
        """A root event, to every attached client as a session_event envelope (§8.1)."""
        with self.lock:
            self.sequence += 1
            self.last_activity_ms = now_ms()
            meta = {
                "id": f"{self.active_id}:{self.sequence}",
                "protocol": PROTOCOL,
                "activeSessionId": self.active_id,
                "sequence": self.sequence,
                "cursor": self.cursor(),
                "emittedAt": iso(self.last_activity_ms),
            }
            clients = list(self.clients)
        envelope = {"type": "session_event", "activeSessionId": self.active_id, "event": event}
        for client in clients:
            client.send({**envelope, "meta": meta})

    def cursor(self) -> dict:
        return {"generation": self.generation, "sequence": self.sequence}

    def attach(self, connection: Connection, client: dict) -> dict:
        """Events flow to the connection from here on; returns attach's data."""
        with self.lock:
            if connection not in self.clients:
                self.clients.append(connection)
            cursor = self.cursor()
        snapshot = {
            "activeSessionId": self.active_id,
            "summary": self.summary(),
            "state": self.state(),
            "messages": list(self.run.stream.messages),
            "lastEventSequence": cursor["sequence"],
            "lastEventCursor": cursor,
            "children": [self.roster_entry(child) for child in self.run.children],
        }
        return {
            "protocol": PROTOCOL,
            "activeSessionId": self.active_id,
            "snapshot": snapshot,
            "replay": {"status": "complete", "toSequence": cursor["sequence"], "toCursor": cursor},
            "lastEventSequence": cursor["sequence"],
            "lastEventCursor": cursor,
            "client": client,
        }

    def detach(self, connection: Connection) -> None:
        with self.lock:
            if connection in self.clients:
                self.clients.remove(connection)

    # the run and its barriers

    def prompt(self, message: str, on_idle: Callable[[], None] | None = None) -> None:
        """Admits the prompt and runs it in the background."""
        with self.lock:
            if self.prompted:
                raise CommandError("the simulation takes one prompt per session")
            self.prompted = True
            if on_idle is not None:
                self.idle_waiters.append(on_idle)
        threading.Thread(target=self.work, args=(message,), daemon=True).start()

    def work(self, message: str) -> None:
        self.run.respond(message)
        self.settle()

    def root_idle(self) -> None:
        """The root went idle with nothing queued: prompt_and_wait returns (§8.2)."""
        with self.lock:
            waiters, self.idle_waiters = self.idle_waiters, []
        for waiter in waiters:
            waiter()

    def settle(self) -> None:
        """Everything the prompt triggered is done: the quiescence barrier opens (§8.2)."""
        with self.lock:
            self.quiescent = True
            waiters = self.idle_waiters + self.quiescence_waiters
            self.idle_waiters, self.quiescence_waiters = [], []
        for waiter in waiters:
            waiter()

    def wait_for_quiescence(self, then: Callable[[], None]) -> None:
        """Calls `then` once quiescent: at once when nothing runs, never for a run that
        never ends (there is no server timeout, §8.2)."""
        with self.lock:
            running = self.prompted and not self.quiescent
            if running:
                self.quiescence_waiters.append(then)
        if not running:
            then()

    def archive(self) -> None:
        """A session ended by shutdown: its transcript ends `archived` (captured resident)."""
        self.run.root.transcript.append("session_state", {"state": {"status": "archived"}})

    # what get_state and attach report (key orders as captured, resident)

    def summary(self) -> dict:
        """A SessionSummary."""
        return {
            "id": self.active_id,
            "lifecycle": "resident" if self.prompted else "draft",
            "activity": "idle" if self.quiescent else "working",
            "isSessionActive": self.prompted and not self.quiescent,
            "lastActivityAt": iso(self.last_activity_ms),
            "runtimeKind": "top-level",
            "rlmDepth": 0,
            "activeSessionId": self.active_id,
            "sessionId": self.run.root.id,
            "sessionFile": self.run.root_file,
            "cwd": self.run.cwd,
            "model": model_info(self.run.behaviour),
            "thinkingLevel": "off",
            "isStreaming": self.run.stream.in_run,
            "isCompacting": False,
            "isBashRunning": False,
            "hasRunningRlmChildren": any(not child.settled for child in self.run.children),
            "isRunningTools": False,
            "attachedClients": len(self.clients),
            "messageCount": len(self.run.stream.messages),
            "unfinishedActionCount": 0,
            "sessionActions": no_session_actions(),
            "created": iso(self.created_ms),
            "modified": iso(self.last_activity_ms),
            "diagnostics": [],
            "workerState": "ready",
            "workerPid": os.getpid(),
        }

    def state(self) -> dict:
        """The root agent's state in an attach snapshot."""
        return {
            "activeSessionId": self.active_id,
            "cwd": self.run.cwd,
            "model": model_info(self.run.behaviour),
            "thinkingLevel": "off",
            "serviceTier": "default",
            "availableThinkingLevels": ["off"],
            "isStreaming": self.run.stream.in_run,
            "isCompacting": False,
            "isBashRunning": False,
            "retryAttempt": 0,
            "steeringMode": "one-at-a-time",
            "followUpMode": "one-at-a-time",
            "sessionFile": self.run.root_file,
            "sessionId": self.run.root.id,
            "sessionDir": self.session_dir,
            "leafId": self.run.root.transcript.last_id,
            "autoCompactionEnabled": True,
            "messageCount": len(self.run.stream.messages),
            "sessionActions": no_session_actions(),
            "compactionCount": 0,
            "goal": {
                "active": False,
                "status": "idle",
                "tokensUsed": 0,
                "timeUsedSeconds": 0,
                "continuationsUsed": 0,
            },
            "scopedModels": [],
            "activeToolNames": ["ipython"],
            "contextUsage": {"tokens": 0, "contextWindow": CONTEXT_WINDOW, "percent": 0},
            "heartbeat": None,
        }

    @staticmethod
    def roster_entry(child: Child) -> dict:
        """A child as get_rlm_children lists it (contract §8.2)."""
        return {
            "id": child.child_id,
            "sessionName": child.name,
            "status": "done" if child.settled else "running",
            "sessionDir": child.session_dir,
        }


class Daemon:
    """The daemon on the socket (contract §8): the detached supervisor a one-shot CLI starts,
    or the foreground `--mode daemon`. Either hosts resident sessions itself."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self.sessions: dict[str, ResidentSession] = {}
        self.hello = {
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

    def serve(self, listener: socket.socket) -> NoReturn:
        deadline = time.monotonic() + SUPERVISOR_LIFETIME_S
        while (remaining := deadline - time.monotonic()) > 0:
            listener.settimeout(remaining)
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                break
            threading.Thread(target=self.serve_client, args=(sock,), daemon=True).start()
        self.stop()

    def serve_client(self, sock: socket.socket) -> None:
        """Newline-delimited JSON; the server speaks first (contract §8.1)."""
        connection = Connection(sock)
        connection.send(
            {**self.hello, "clientId": hex_id(12), "serverCapabilities": SERVER_CAPABILITIES}
        )
        buffer = b""
        with sock, contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                buffer += chunk
                while b"\n" in buffer:  # split on \n only (contract §8.1)
                    line, buffer = buffer.split(b"\n", 1)
                    self.handle(connection, line)
        for session in list(self.sessions.values()):
            session.detach(connection)

    def handle(self, connection: Connection, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("type") == "ack_result":
            return  # no reply to ack_result was observed (contract §8.1)
        if not (
            isinstance(message, dict)
            and message.get("type") == "command"
            and message.get("protocol") == PROTOCOL
            and isinstance(message.get("command"), dict)
        ):
            connection.send(PARSE_ERROR)
            return
        request = Request(
            connection, message.get("id"), message.get("clientId"), message["command"]
        )
        kind = request.command.get("type")
        command = DAEMON_COMMANDS.get(kind) if isinstance(kind, str) else None
        try:
            if command is None:
                raise CommandError("unsupported in simulation")
            command(self, request)
        except CommandError as error:
            request.fail(str(error))

    def stop(self) -> NoReturn:
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
        os._exit(0)

    # commands (contract §8.2)

    def session_of(self, request: Request) -> ResidentSession:
        active_id = request.command.get("activeSessionId")
        session = self.sessions.get(active_id) if isinstance(active_id, str) else None
        if session is None:
            raise CommandError(f"Unknown session: {active_id}")
        return session

    def create(self, request: Request) -> None:
        command = request.command
        config, launch_env = command.get("config"), command.get("launchEnv", {})
        if command.get("lifecycle", "resident") != "resident":
            raise CommandError("the simulation hosts resident sessions only")
        keys = ("cwd", "agentDir", "sessionDir", "model")
        if not (isinstance(config, dict) and all(isinstance(config.get(k), str) for k in keys)):
            raise CommandError("config needs cwd, agentDir, sessionDir and model")
        if not (
            isinstance(launch_env, dict) and all(isinstance(v, str) for v in launch_env.values())
        ):
            raise CommandError("launchEnv must map names to strings")
        cwd, agent_dir, session_dir = (os.path.abspath(config[k]) for k in keys[:3])
        if not os.path.isdir(cwd):
            raise CommandError(f"cwd {cwd} is not a directory")
        try:
            behaviour = behaviour_of(config["model"])
        except UsageError as error:
            raise CommandError(str(error)) from None
        # launchEnv is overlaid on the daemon's env for the new worker (contract §8.2).
        env = {**os.environ, **launch_env}
        try:
            session = ResidentSession(cwd, agent_dir, session_dir, behaviour, env)
        except OSError as error:
            raise CommandError(f"cannot start the session: {error}") from None
        self.sessions[session.active_id] = session
        request.respond(session.summary())

    def attach(self, request: Request) -> None:
        session = self.session_of(request)
        client = {
            "id": request.command.get("clientId", request.client_id),
            "capabilities": request.command.get("capabilities", []),
        }
        request.respond(session.attach(request.connection, client))

    def detach(self, request: Request) -> None:
        session = self.session_of(request)
        session.detach(request.connection)
        request.connection.send({"type": "session_detached", "activeSessionId": session.active_id})
        request.respond()

    def prompt(self, request: Request) -> None:
        self.session_of(request).prompt(prompt_text(request))
        request.respond()

    def prompt_and_wait(self, request: Request) -> None:
        self.session_of(request).prompt(prompt_text(request), on_idle=request.respond)

    def wait_for_headless_completion(self, request: Request) -> None:
        session = self.session_of(request)
        if request.command.get("waitForRlmQuiescence") is not True:
            raise CommandError("the simulation waits only with waitForRlmQuiescence:true")
        session.wait_for_quiescence(lambda: request.respond(HEADLESS_COMPLETION))

    def get_state(self, request: Request) -> None:
        request.respond(self.session_of(request).summary())

    def ack_result(self, request: Request) -> None:
        """No reply to ack_result was observed (contract §8.1)."""

    def shutdown(self, request: Request) -> None:
        request.respond()
        # A non-forced shutdown succeeds but the daemon lives on (contract §2, observed).
        if request.command.get("force") is True:
            for session in list(self.sessions.values()):
                session.archive()
            self.stop()


def prompt_text(request: Request) -> str:
    message = request.command.get("message")
    if not isinstance(message, str):
        raise CommandError("message must be a string")
    return message


DAEMON_COMMANDS: dict[str, Callable[[Daemon, Request], None]] = {
    "create": Daemon.create,
    "attach": Daemon.attach,
    "detach": Daemon.detach,
    "prompt": Daemon.prompt,
    "prompt_and_wait": Daemon.prompt_and_wait,
    "wait_for_headless_completion": Daemon.wait_for_headless_completion,
    "get_state": Daemon.get_state,
    "ack_result": Daemon.ack_result,
    "shutdown": Daemon.shutdown,
}


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


def daemon_socket_path(options: Options) -> str:
    socket_path = os.path.abspath(options.daemon_socket or default_socket())
    os.makedirs(os.path.dirname(socket_path), mode=0o700, exist_ok=True)
    return socket_path


def listen(socket_path: str) -> socket.socket:
    """The daemon socket, mode 0600 (contract §8.1)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        listener.bind(socket_path)
    except OSError as error:
        raise UsageError(f"cannot listen on daemon socket {socket_path}: {error}") from error
    finally:
        os.umask(umask)
    listener.listen()
    return listener


def start_supervisor(socket_path: str, cwd: str) -> int:
    """Listens on the socket before detaching, so the CLI goes on only once the supervisor
    accepts connections. It keeps the CLI's env and runs in --cwd (contract §2)."""
    listener = listen(socket_path)
    pid = detach(lambda ready: supervise(listener, socket_path, cwd, ready))
    listener.close()
    return pid


def supervise(listener: socket.socket, socket_path: str, cwd: str, ready) -> NoReturn:
    os.chdir(cwd)
    ready()
    Daemon(socket_path).serve(listener)


def run_daemon(options: Options) -> NoReturn:
    """--mode daemon: the daemon in the foreground, in the caller's process group, until
    shutdown{force:true} (contract §8.2 "To own the supervisor")."""
    if options.prompts:
        raise UsageError("--mode daemon takes no prompt")
    socket_path = daemon_socket_path(options)
    listener = listen(socket_path)
    log(f"daemon pid={os.getpid()}")
    Daemon(socket_path).serve(listener)


def ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def hang(env: Mapping[str, str]) -> NoReturn:
    """Never returns: a grandchild in the worker's process group that ignores SIGTERM (the
    ignored disposition survives exec) and has the worker's env, and the worker sleeping
    with default SIGTERM handling."""
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(3600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=ignore_sigterm,
    )
    log(f"grandchild pid={grandchild.pid}")
    while True:
        time.sleep(3600)


def hold_files() -> None:
    """Leaves a grandchild that ignores SIGTERM and keeps this process's stdout and stderr
    (the run's output files) open after the CLI has exited."""
    grandchild = subprocess.Popen(
        [sys.executable, "-c", f"import time\ntime.sleep({ESCAPED_LIFETIME_S})"],
        stdin=subprocess.DEVNULL,
        preexec_fn=ignore_sigterm,
    )
    log(f"holding pid={grandchild.pid}")


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


def help_text() -> str:
    width = max(map(len, BEHAVIOURS))
    behaviours = "".join(f"    {name:<{width}}  {what}\n" for name, what in BEHAVIOURS.items())
    title = "Behaviours (--model simulated/<behaviour>, or a create's config.model):"
    return f"{__doc__}\n{title}\n{behaviours}"


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
        if arg in ("--help", "-h"):
            options.help = True
        elif arg == "--version":
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
        raise UsageError("the simulation runs as --mode json or --mode daemon")
    if len(options.prompts) != 1:
        raise UsageError("pass exactly one prompt after --")
    if options.cwd is not None and not os.path.isdir(options.cwd):
        raise UsageError(f"--cwd {options.cwd} is not a directory")
    return behaviour


def main(argv: list[str]) -> int:
    try:
        options = parse_args(argv)
        if options.help:
            print(help_text())
            return 0
        if options.version:
            print(VERSION_LINE)
            return 0
        if options.mode == "daemon":
            run_daemon(options)
        behaviour = validate(options)
        cwd = os.path.abspath(options.cwd or ".")
        log(f"supervisor pid={start_supervisor(daemon_socket_path(options), cwd)}")
    except UsageError as error:
        log(str(error))
        return 1
    agent_dir = os.environ.get("PRIME_AGENT_CODING_AGENT_DIR") or os.path.expanduser(
        "~/.prime/agent"
    )
    # --session-dir > env > <agentDir>/sessions places the root transcript (contract §2).
    sessions_dir = os.path.abspath(
        options.session_dir or worker_sessions_dir(agent_dir, os.environ)
    )
    one_shot_run(cwd, sessions_dir, behaviour, agent_dir).respond(options.prompts[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
