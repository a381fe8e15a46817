"""The simulated agent's daemon (contract §8): protocol 7 over a Unix socket in
newline-delimited JSON, the server speaking first. It answers the hello, the enveloped
commands the resident drive uses and shutdown, and hosts resident sessions whose root events
go to attached clients. The one-shot CLI's detached supervisor and `--mode daemon` both serve
it (simulated/agent.py).

Why one module of this size: the daemon's whole protocol-7 surface (hello, envelopes,
commands, events, the quiescence barrier, shutdown) as the resident drive meets it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from swarm_fanout.simulated import APP_VERSION
from swarm_fanout.simulated.product import (
    API,
    PROVIDER,
    Child,
    Ledger,
    Stream,
    bind_worker_socket,
    dumps,
    hex_id,
    iso,
    model_endpoint,
    now_ms,
    session_header,
    worker_sessions_dir,
)
from swarm_fanout.simulated.run import Run, UsageError, behaviour_of

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

    def __init__(
        self,
        cwd: str,
        agent_dir: str,
        session_dir: str,
        behaviour: str,
        env: dict,
        session_path: str | None = None,
    ):
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
            # Without a sessionPath the file stem is the header id (§8.2, captured resident);
            # a client that names one (the one-shot and ACP CLIs) gets its own stem.
            root_file=session_path or os.path.join(session_dir, header["id"] + ".jsonl"),
            header=header,
            behaviour=behaviour,
            # Keyed on the worker's sessions dir, resolved against the daemon's cwd (§4).
            ledger=Ledger(agent_dir, worker_sessions_dir(agent_dir, env), os.getcwd()),
            stream=Stream(self.publish),
            env=env,
            resident=True,
            # The worker reads the models of the create's agent dir.
            model_endpoint=model_endpoint(agent_dir),
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

    def __init__(self, socket_path: str, entrypoint: str):
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
                "entrypointPath": entrypoint,
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
        refused = bind_worker_socket(self.socket_path, env)
        if refused:
            raise CommandError(refused)
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
