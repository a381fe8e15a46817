"""The simulated CLI's `--mode acp` (contract §13): the Agent Client Protocol, JSON-RPC 2.0
in one line per message, requests on stdin, responses and `session/update` notifications on
stdout, as prime-agent v0.8.0's `modes/acp/` speaks it.

`initialize`; `session/new` (one session per process, its cwd fixed at start: a different
one asked for is reported in `_meta`); `session/prompt`, answered at the root's first idle
point with the children still running, after a response-boundary update and an update
counting them; then, once every child has settled and the turns their replies started have
drained, the terminal-quiescence update; `session/close`; EOF on stdin ends the process.
The session is a resident one (simulated/daemon.py's `ResidentSession`) run in this
process, beside the detached supervisor the CLI starts as the one-shot CLI does.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid

from swarm_fanout.simulated.daemon import ResidentSession
from swarm_fanout.simulated.product import dumps, now_ms, uuid7

PRIME_META = "ai.primeintellect.prime-agent"
PROTOCOL_VERSION = 1
PARSE_ERROR, METHOD_NOT_FOUND, INTERNAL_ERROR = -32700, -32601, -32603
TOOL_TITLES = {"ipython": "IPython cell"}


class AcpAgent:
    """One ACP connection over this process's stdio, hosting at most one session."""

    def __init__(self, cwd: str, agent_dir: str, session_dir: str, behaviour: str):
        self.cwd = cwd
        self.agent_dir = agent_dir
        self.session_dir = session_dir
        self.behaviour = behaviour
        self.session: ResidentSession | None = None
        self.session_id: str | None = None
        self.lock = threading.Lock()
        self.sequence = 0
        # The prompt turn an update is stamped with (source `modes/acp/acp-mode.ts`): the
        # root's own while its prompt runs, 0 after the response; a child's, its prompt's
        # until the terminal update seals the turn, 0 after.
        self.turns = self.prompt_turn = self.child_turn = 0
        self.updates = Updates(self)

    def serve(self) -> None:
        """Until EOF on stdin."""
        for line in sys.stdin.buffer:
            if line.strip():
                self.handle(line)

    def send(self, message: dict) -> None:
        with self.lock:
            sys.stdout.write(dumps({"jsonrpc": "2.0", **message}) + "\n")
            sys.stdout.flush()

    def handle(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            self.send({"id": None, "error": {"code": PARSE_ERROR, "message": "Parse error"}})
            return
        method, request_id = message["method"], message.get("id")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        handler = METHODS.get(method)
        if "id" not in message:
            return  # a notification: session/cancel finds nothing to cancel here
        if handler is None:
            error = {"code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"}
            self.send({"id": request_id, "error": error})
            return
        try:
            result = handler(self, request_id, params)
        except AcpRefusal as refusal:
            self.send(
                {"id": request_id, "error": {"code": INTERNAL_ERROR, "message": str(refusal)}}
            )
            return
        if result is not None:
            self.send({"id": request_id, "result": result})

    def update(self, update: dict, turn: int, phase: str = "event", **extra) -> None:
        """A session/update, stamped as the product's producer stamps each (§13)."""
        with self.lock:
            self.sequence += 1
            stamp = {"promptTurnId": turn, "eventSequence": self.sequence, "phase": phase}
        meta = dict(update.get("_meta", {}).get(PRIME_META, {}))
        meta.update(stamp, **extra)
        body = {**update, "_meta": {PRIME_META: meta}}
        self.send(
            {"method": "session/update", "params": {"sessionId": self.session_id, "update": body}}
        )

    # methods

    def initialize(self, _id, _params: dict) -> dict:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {"image": True, "embeddedContext": True},
                "mcpCapabilities": {"http": True},
                "sessionCapabilities": {"close": {}},
            },
            "agentInfo": {"name": "prime-agent", "title": "Prime Agent", "version": "0.8.0"},
            "_meta": {PRIME_META: {}},
        }

    def new_session(self, _id, params: dict) -> dict:
        if self.session is not None:
            raise AcpRefusal(
                "prime-agent ACP mode hosts one session per connection; "
                "start another prime-agent process for a second session"
            )
        # The CLI names the root file, the worker writes a fresh header id: its stem is not
        # the header id, as in one-shot runs (contract §1 fact 2, captured ACP run).
        path = os.path.join(self.session_dir, uuid7(now_ms()) + ".jsonl")
        self.session = ResidentSession(
            self.cwd, self.agent_dir, self.session_dir, self.behaviour, dict(os.environ), path
        )
        # The ACP session id is the connection's own, not the product session's (§13).
        self.session_id = str(uuid.uuid4())
        self.session.attach(self.updates, {"id": "acp", "capabilities": []})
        requested = params.get("cwd")
        response: dict = {"sessionId": self.session_id}
        if isinstance(requested, str) and os.path.realpath(requested) != os.path.realpath(self.cwd):
            cwd = {"requested": requested, "actual": self.cwd}
            response["_meta"] = {PRIME_META: {"cwd": cwd}}
        return response

    def prompt(self, request_id, params: dict) -> None:
        if self.session is None or params.get("sessionId") != self.session_id:
            raise AcpRefusal(f"Unknown ACP session: {params.get('sessionId')}")
        blocks = params.get("prompt") if isinstance(params.get("prompt"), list) else []
        text = "\n".join(
            block["text"]
            for block in blocks
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
        self.turns += 1
        turn = self.prompt_turn = self.child_turn = self.turns
        answered = threading.Event()

        def at_idle() -> None:
            # The first idle point only: later ones are turns the children's replies start.
            if answered.is_set():
                return
            answered.set()
            self.respond_to_prompt(request_id, turn)

        self.session.prompt(text, on_idle=at_idle)
        return None  # answered at the root's first idle point

    def respond_to_prompt(self, request_id, turn: int) -> None:
        """The response boundary, the update counting the children still running, the
        response; the terminal-quiescence update once they have all settled (§13)."""
        session = self.session
        outstanding = sum(1 for child in session.run.children if not child.settled)
        failure = turn_failure(session)
        outcome = "error" if failure else "result"
        info = "session_info_update"
        boundary = {PRIME_META: {"terminalQuiescenceExpected": True}}
        self.update(
            {"sessionUpdate": info, "_meta": boundary}, turn, "responseBoundary", outcome=outcome
        )
        counted = {PRIME_META: {"quiescence": quiescence(outstanding)}}
        self.update({"sessionUpdate": info, "_meta": counted}, turn)
        if failure:
            error = {"code": INTERNAL_ERROR, "message": f"prime-agent turn failed: {failure}"}
            self.send({"id": request_id, "error": error})
        else:
            self.send({"id": request_id, "result": {"stopReason": "end_turn"}})
        self.prompt_turn = 0

        def terminal() -> None:
            self.child_turn = 0
            settled = {PRIME_META: {"quiescence": quiescence(0)}}
            self.update(
                {"sessionUpdate": info, "_meta": settled},
                turn,
                "terminalQuiescence",
                outcome=outcome,
            )

        session.wait_for_quiescence(terminal)

    def close_session(self, _id, params: dict) -> dict:
        if self.session is None or params.get("sessionId") != self.session_id:
            raise AcpRefusal(f"Unknown ACP session: {params.get('sessionId')}")
        self.session.detach(self.updates)
        self.session = None
        return {}


class AcpRefusal(Exception):
    """A request the agent answers with a JSON-RPC error."""


class Updates:
    """Attached to the session as a client is: each root event it is sent becomes the ACP
    updates the product maps it to (source `modes/acp/acp-events.ts`)."""

    def __init__(self, agent: AcpAgent):
        self.agent = agent

    def send(self, envelope: dict) -> None:
        event = envelope.get("event") if envelope.get("type") == "session_event" else None
        child = (event or {}).get("type") == "rlm_child_update"
        turn = self.agent.child_turn if child else self.agent.prompt_turn
        for update in acp_updates(event or {}):
            self.agent.update(update, turn)


def acp_updates(event: dict) -> list[dict]:
    kind = event.get("type")
    if kind == "message_update" and event["message"].get("role") == "assistant":
        delta = event.get("assistantMessageEvent", {})
        chunk = {"text_delta": "agent_message_chunk", "thinking_delta": "agent_thought_chunk"}
        if delta.get("type") in chunk and delta.get("delta"):
            text = {"type": "text", "text": delta["delta"]}
            return [{"sessionUpdate": chunk[delta["type"]], "content": text}]
    elif kind == "tool_execution_start":
        name, args = event["toolName"], event.get("args") or {}
        raw = {"code": args["code"]} if name == "ipython" and "code" in args else args
        return [
            {
                "sessionUpdate": "tool_call",
                "toolCallId": event["toolCallId"],
                "title": TOOL_TITLES.get(name, name),
                "kind": "execute" if name in ("ipython", "bash") else "other",
                "status": "in_progress",
                "rawInput": raw,
            }
        ]
    elif kind == "tool_execution_end":
        result = event.get("result") or {}
        texts = [part["text"] for part in result.get("content") or () if part.get("type") == "text"]
        update = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": event["toolCallId"],
            "status": "failed" if event.get("isError") else "completed",
        }
        if texts:
            update["content"] = [
                {"type": "content", "content": {"type": "text", "text": "\n".join(texts)}}
            ]
        return [update]
    elif kind == "rlm_child_update":
        child = event["child"]
        keys = ("id", "sessionName", "status", "model", "tokenCount", "error")
        subagent = {key: child[key] for key in keys if key in child}
        return [
            {
                "sessionUpdate": "session_info_update",
                "_meta": {PRIME_META: {"subagents": [subagent]}},
            }
        ]
    return []


def quiescence(outstanding: int) -> dict:
    return {"outstandingSubagents": outstanding, "remainingAutonomousContinuations": 0}


def turn_failure(session: ResidentSession) -> str | None:
    """The error of the turn's last assistant message, when its model call failed."""
    for message in reversed(session.run.stream.messages):
        if message.get("role") == "assistant":
            if message.get("stopReason") != "error":
                return None
            return message.get("errorMessage") or "the model request failed"
    return None


METHODS = {
    "initialize": AcpAgent.initialize,
    "session/new": AcpAgent.new_session,
    "session/prompt": AcpAgent.prompt,
    "session/close": AcpAgent.close_session,
}
