"""The product's formats as the simulated agent writes them: ids, clock and compact JSON in
the product's shapes, the spawn ledger (contract §4), and the sessions: their transcripts,
model calls and tool results, the child records, the usage attributed to the spawning
message and the root's event stream (contract §5, §7). The simulation imports nothing from
the harness but the task language (fixtures/tasks.py), so these are its own copy of the
product's rules (for example the ledger key).

Model calls go to the `simulated` provider's endpoint when `<agentDir>/models.json` names
one (`providers.simulated.baseUrl`, as the runner writes it to put its recording proxy in
front): each assistant message then carries the response id and usage the endpoint served,
and failed calls are retried and persisted as the product does (contract §5 "Retries").
Without that entry the ids and usage are made up locally.

Why one module of this size: it is the stand-in's own writer of every product format (ids,
transcripts, ledger, display records, the stream, the model endpoint calls), kept apart from the
harness's readers on purpose, so a mistake in one cannot hide in the other.
"""

from __future__ import annotations

import copy
import hashlib
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from swarm_fanout.tasks import Shard, parse_shards

PROVIDER = "simulated"
API = "openai-completions"
GIT = {"branch": "master"}  # the captured runs' repos were on master
KERNEL_FAILURE = (
    "Failed to set up the Python kernel runtime. uv python install 3.11 failed with exit code 1\n"
    "First-time setup needs internet to install uv, Python, ipykernel, prime-agent-runtime, and "
    "default Python packages; once set up, prime-agent runs offline. Set "
    "PRIME_AGENT_KERNEL_PYTHON to a Python with ipykernel, a current prime-agent-runtime, and "
    "default Python packages installed to skip auto-bootstrap."
)
ABORTED = "Request was aborted"  # a teardown's toolResult and aborted call (contract §5)
# A model call's tries (contract §5 "Retries"; captured child-fail: a child whose every
# request got HTTP 500 left 4 error messages from 12 requests). The SDK tries each request
# 3 times before the attempt fails; the agent persists each failed attempt and makes 4.
TRIES_PER_ATTEMPT = 3
ATTEMPTS = 4
MODEL_TIMEOUT_S = 600.0  # the OpenAI SDK's default request timeout
CONNECTION_ERROR = "Connection error."  # the OpenAI SDK's message when no answer came
SYSTEM_PROMPT_FIRST_LINE = "You are the model of a prime-agent session (simulated)."
IPYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "ipython",
        "description": "Run Python code in the session's IPython kernel.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}


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


# --- the session worker's socket (contract §2) --------------------------------------------


def bind_worker_socket(supervisor_socket: str, env: Mapping[str, str]) -> str | None:
    """Bind the session worker's socket where the product puts it; the error if it cannot.

    The product names it `$TMPDIR/prime-agent-<uid>/worker-<key>-<worker id>.sock`, `key`
    the first 12 hex digits of the SHA-256 of the supervisor's socket path and the worker
    id cut to 12 (source `modes/daemon/daemon-supervisor.ts`). A Unix socket path holds at
    most 107 bytes: the real worker binds a longer one cut short, fails its own check of
    the path and never answers, and the supervisor gives up on `create` after 30 s (seen
    with v0.8.0). The simulation binds it too, so a TMPDIR the product could not use fails
    here as well, at once. The simulated worker serves nothing on it: it is closed and
    removed again.
    """
    key = hashlib.sha256(os.path.abspath(supervisor_socket).encode()).hexdigest()[:12]
    folder = os.path.join(env.get("TMPDIR") or "/tmp", f"prime-agent-{os.getuid()}")
    path = os.path.join(folder, f"worker-{key}-{hex_id(12)}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        listener.bind(path)
        os.unlink(path)
    except OSError as error:
        return f"Timed out connecting to daemon session worker: {path}: {error}"
    finally:
        listener.close()
    return None


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


# --- the model endpoint (contract §11) ---------------------------------------------------------


class ModelFailed(Exception):
    """Every attempt of a model call failed; the session's run ends there (contract §6)."""

    def __init__(self, attempts: list[dict]):
        super().__init__(attempts[-1]["errorMessage"])
        self.attempts = attempts  # the persisted error messages


@dataclass(frozen=True)
class Served:
    """A model call the endpoint answered: the SSE chunks' `id` and the final chunk's usage."""

    response_id: str
    usage: dict | None


@dataclass(frozen=True)
class CallError:
    """A try the endpoint did not answer; `retryable` as the OpenAI SDK decides it."""

    message: str
    retryable: bool


@dataclass(frozen=True)
class ModelEndpoint:
    """`providers.simulated` of `<agentDir>/models.json`: where chat completions are posted."""

    host: str
    port: int
    path: str  # the baseUrl's path with `/chat/completions` appended, as the SDK does
    api_key: str | None

    def complete(self, body: dict) -> Served | CallError:
        """One attempt: up to TRIES_PER_ATTEMPT tries of the request while they are
        retryable (the OpenAI SDK retries a connection error, 408, 409, 429 and 5xx)."""
        data = json.dumps(body).encode()
        for _ in range(TRIES_PER_ATTEMPT):
            outcome = self._try(data)
            if isinstance(outcome, Served) or not outcome.retryable:
                break
        return outcome

    def _try(self, data: bytes) -> Served | CallError:
        # A connection of its own per request: a daemon's resident sessions run in threads.
        connection = http.client.HTTPConnection(self.host, self.port, timeout=MODEL_TIMEOUT_S)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            connection.request("POST", self.path, data, headers)
            response = connection.getresponse()
            if response.status != 200:
                status = response.status
                retryable = status in (408, 409, 429) or status >= 500
                return CallError(error_message(status, response.read()), retryable)
            return read_stream(response)
        except (OSError, http.client.HTTPException):
            return CallError(CONNECTION_ERROR, True)
        finally:
            connection.close()


def model_endpoint(agent_dir: str) -> ModelEndpoint | None:
    """The `simulated` provider's endpoint in `<agentDir>/models.json`, if it names one; an
    unreadable file or entry is reported and ignored."""
    path = os.path.join(agent_dir, "models.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log(f"{path} ignored: {error}")
        return None
    providers = config.get("providers") if isinstance(config, dict) else None
    entry = providers.get(PROVIDER) if isinstance(providers, dict) else None
    if not isinstance(entry, dict) or "baseUrl" not in entry:
        return None
    base_url, api_key = entry["baseUrl"], entry.get("apiKey")
    parts = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme != "http" or not parts.hostname:
        log(f"{path}: providers.{PROVIDER}.baseUrl {base_url!r} ignored: not an http URL")
        return None
    return ModelEndpoint(
        parts.hostname,
        parts.port or 80,
        parts.path.rstrip("/") + "/chat/completions",
        api_key if isinstance(api_key, str) else None,
    )


def read_stream(response: http.client.HTTPResponse) -> Served | CallError:
    """The SSE lines `data: <chat.completion.chunk>`: the first chunk's `id` becomes the
    responseId, the usage chunk's counts the message's usage (contract §11)."""
    response_id, counts = None, None
    for line in response:
        if not line.startswith(b"data:"):
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:  # `[DONE]`
            continue
        if not isinstance(chunk, dict):
            continue
        if response_id is None and isinstance(chunk.get("id"), str) and chunk["id"]:
            response_id = chunk["id"]
        if isinstance(chunk.get("usage"), dict):
            counts = chunk["usage"]
    if response_id is None:
        return CallError("the stream ended without a chunk", True)
    return Served(response_id, counts)


def error_message(status: int, body: bytes) -> str:
    """`<status> <message>`, as the OpenAI SDK words an HTTP error (its APIError): the body's
    `error.message`, else its `error` as JSON, else the text of a body that is not JSON."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed, text = None, body.decode("utf-8", "replace").strip()
    else:
        text = ""
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        text = error["message"]
    elif error is not None:
        text = dumps(error)
    return f"{status} {text}" if text else f"{status} status code (no body)"


def served_usage(served: Served) -> dict | None:
    """The product's usage from the endpoint's: input is prompt_tokens, output
    completion_tokens (contract §5)."""
    counts = served.usage or {}
    prompt, completion = counts.get("prompt_tokens"), counts.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return usage(prompt, completion)
    return None


def chat_message(message: dict) -> dict | None:
    """A transcript message as the model sees it in the next request; a failed or aborted
    call is not sent again."""
    text = "\n".join(part["text"] for part in message["content"] if part["type"] == "text")
    if message["role"] == "user":
        return {"role": "user", "content": text}
    if message["role"] == "toolResult":
        return {"role": "tool", "tool_call_id": message["toolCallId"], "content": text}
    if message.get("stopReason") in ("error", "aborted"):
        return None
    calls = [
        {
            "id": part["id"],
            "type": "function",
            "function": {"name": part["name"], "arguments": json.dumps(part["arguments"])},
        }
        for part in message["content"]
        if part["type"] == "toolCall"
    ]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


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
    """One agent session: its transcript, the model context its usage numbers grow with, and
    the conversation its model calls send (contract §11)."""

    transcript: Transcript
    header: dict
    behaviour: str
    context_tokens: int
    endpoint: ModelEndpoint | None = None
    spawned_by: str | None = None  # a child's parent, by header id (contract §9)
    active_id: str = field(default_factory=lambda: hex_id(12))
    context_chars: int = 0
    conversation: list[dict] = field(default_factory=list)
    last_assistant: dict | None = None

    @property
    def id(self) -> str:
        return self.header["id"]

    def user_message(self, text: str) -> dict:
        message = {"role": "user", "content": [text_part(text)], "timestamp": now_ms()}
        return self._message(message, len(text))

    def assistant_message(self, text: str, code: str | None = None) -> dict:
        """One model call. Through the endpoint, when there is one, it carries the served
        response id and usage, after any failed attempts (ModelFailed when all fail); else a
        local id, and usage derived from text lengths, so it is deterministic."""
        served = self.call_model()
        content = [text_part(text)]
        if code is not None:
            call = {"type": "toolCall", "id": "call_" + hex_id(24), "name": "ipython"}
            content.append({**call, "arguments": {"code": code}})
        written = len(text) + len(code or "")
        local = usage(self.context_tokens + self.context_chars // 4, max(1, written // 4))
        message = {
            "role": "assistant",
            "content": content,
            "api": API,
            "provider": PROVIDER,
            "model": self.behaviour,
            "usage": (served_usage(served) if served else None) or local,
            "stopReason": "stop" if code is None else "toolUse",
            "timestamp": now_ms(),
            "responseId": served.response_id if served else "chatcmpl-" + uuid.uuid4().hex,
        }
        return self._message(message, written)

    def call_model(self) -> Served | None:
        """Posts the conversation to the endpoint (None without one). Each failed attempt is
        persisted as an error message; after ATTEMPTS of them, or one that is not worth
        retrying, ModelFailed (contract §5 "Retries")."""
        if self.endpoint is None:
            return None
        request = self.request_body()
        attempts: list[dict] = []
        while len(attempts) < ATTEMPTS:
            started = now_ms()
            outcome = self.endpoint.complete(request)
            if isinstance(outcome, Served):
                return outcome
            attempts.append(self.failed_attempt(outcome.message, started))
            if not outcome.retryable:
                break
        raise ModelFailed(attempts)

    def request_body(self) -> dict:
        """A chat-completions request as the product sends it (contract §9, §11): a system
        prompt naming the session's transcript and depth, then the conversation so far, whose
        first user message is a child's task."""
        lines = [
            SYSTEM_PROMPT_FIRST_LINE,
            "",
            f"Working directory: {self.header['cwd']}",
            f"Conversation log: {self.transcript.path}",
            f"Recursive agent depth: {self.header['rlmDepth']}",
        ]
        if self.spawned_by is not None:
            lines += ["", f"You are a child agent spawned by {self.spawned_by}."]
        return {
            "model": self.behaviour,
            "messages": [{"role": "system", "content": "\n".join(lines)}, *self.conversation],
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": [IPYTHON_TOOL],
        }

    def failed_attempt(self, error: str, started_ms: int) -> dict:
        """A failed model call: empty content, zero usage, no responseId, stopReason error
        and the error (contract §5 "Retries"; key order as captured, child-fail)."""
        message = {
            "role": "assistant",
            "content": [],
            "api": API,
            "provider": PROVIDER,
            "model": self.behaviour,
            "usage": usage(0, 0),
            "stopReason": "error",
            "timestamp": started_ms,
            "errorMessage": error,
        }
        return self._message(message, 0)

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

    def tool_result(
        self, assistant: dict, stdout: str, started_ms: int, result: str | None = None, **details
    ) -> dict:
        """`result`: what the kernel shows of the cell's last expression (execute_result); the
        product adds it to the text after the output and keeps it in details (source
        `core/tools/ipython.ts`)."""
        details = {
            "durationMs": now_ms() - started_ms,
            "status": "ok",
            "stdout": stdout,
            "stderr": "",
            **({} if result is None else {"result": result}),
            **details,
            "kernelRestarted": False,
        }
        text = "\n".join(part for part in (stdout, result) if part)
        return self._tool_message(assistant, text, details, is_error=False)

    def kernel_failure_result(self, assistant: dict) -> dict:
        """The ipython tool could not set up the kernel's Python: an error result with empty
        details (source `core/kernel/bootstrap.ts`; seen in a v0.8.0 run without
        PRIME_AGENT_KERNEL_PYTHON and without internet)."""
        return self._tool_message(assistant, KERNEL_FAILURE, {}, is_error=True)

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
        # The model sees a custom message as a user message.
        self.conversation.append({"role": "user", "content": content})
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
        if message["role"] == "assistant":
            self.last_assistant = message
        if (chat := chat_message(message)) is not None:
            self.conversation.append(chat)
        return message

    @property
    def last_text(self) -> str:
        """The text of the session's last model call; empty when it failed."""
        parts = self.last_assistant["content"] if self.last_assistant else []
        return "".join(part["text"] for part in parts if part["type"] == "text")


def open_session(
    path: str,
    header: dict,
    behaviour: str,
    context_tokens: int,
    endpoint: ModelEndpoint | None = None,
    spawned_by: str | None = None,
) -> Session:
    transcript = Transcript(path, header)
    transcript.append("model_change", {"provider": PROVIDER, "modelId": behaviour})
    transcript.append("thinking_level_change", {"thinkingLevel": "off"})
    transcript.append("service_tier_change", {"serviceTier": "default"})
    return Session(transcript, header, behaviour, context_tokens, endpoint, spawned_by)


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
    reply: Reply | None = None  # what it sent its parent
    model_failed: bool = False  # its run ended because a model call failed every attempt

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

    def entry(self, child_usage: dict, origin: str = "spawn_task") -> dict:
        """`origin`: what prompted the child's call, `spawn_task` for its task and
        `agent_message` for a message from another session (source `core/agent-session.ts`)."""
        for key in ("input", "output", "cacheRead", "cacheWrite"):
            self.aggregate[key] += child_usage[key]
        for key, cost in child_usage["cost"].items():
            self.aggregate["cost"][key] += cost
        return {
            "targetId": self.target_id,
            "childUsage": child_usage,
            "aggregateUsage": copy.deepcopy(self.aggregate),
            "origin": origin,
        }


def message_updates(start: dict, message: dict) -> Iterator[dict]:
    """The `message_update` events between an assistant message's message_start (`start`,
    empty) and its message_end (contract §7), as coarsely as the captured runs' scripted
    model streams: each content part's start and two deltas, then each part's end. Every
    event carries the message so far; a tool call's arguments grow with its raw JSON.
    """
    parts = message["content"]
    shown: list[dict] = []

    def update(event: dict) -> dict:
        snapshot = {**start, "content": list(shown)}
        return {"type": "message_update", "message": snapshot, "assistantMessageEvent": event}

    for index, part in enumerate(parts):
        if part["type"] == "text":
            text = part["text"]
            shown.append({"type": "text", "text": ""})
            yield update({"type": "text_start", "contentIndex": index})
            for cut in (len(text) // 2, len(text)):
                delta = text[len(shown[index]["text"]) : cut]
                shown[index] = {"type": "text", "text": text[:cut]}
                yield update({"type": "text_delta", "contentIndex": index, "delta": delta})
            continue
        raw = json.dumps(part["arguments"])
        half = {
            k: v[: len(v) // 2] if isinstance(v, str) else v for k, v in part["arguments"].items()
        }
        call = {key: part[key] for key in ("type", "id", "name")}
        shown.append({**call, "arguments": {}, "partialArgs": "", "streamIndex": 0})
        yield update({"type": "toolcall_start", "contentIndex": index})
        for cut, arguments in ((len(raw) // 2, half), (len(raw), part["arguments"])):
            delta = raw[len(shown[index]["partialArgs"]) : cut]
            shown[index] = {
                **call,
                "arguments": arguments,
                "partialArgs": raw[:cut],
                "streamIndex": 0,
            }
            yield update({"type": "toolcall_delta", "contentIndex": index, "delta": delta})
    for index, part in enumerate(parts):
        if part["type"] == "text":
            yield update({"type": "text_end", "contentIndex": index, "content": part["text"]})
        else:
            shown[index] = part
            yield update({"type": "toolcall_end", "contentIndex": index, "toolCall": part})


class Stream:
    """The root session's events (contract §7): --mode json prints them after the header
    line; a resident session sends them to attached clients as session_event envelopes (§8.1).

    Every model call is one assistant message_end, its content streamed before it in
    message_update events.
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
        if message["role"] == "assistant":
            for update in message_updates(start, message):
                self.emit(update)
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
