"""A small client for the Agent Client Protocol as prime-agent v0.8.0 speaks it under
`--mode acp` (contract §13): JSON-RPC 2.0, one message per line, requests on the agent's
stdin, responses and `session/update` notifications on its stdout.

The agent's stdout reaches the runner through a socket pair a thread drains
(shell/observer.py `drain_socket`) into `AcpSink`, which keeps every byte in the runner's
own channel and hands each complete line on, parsed, to the drive. Nothing here raises
on what the agent wrote: a line that is not a JSON-RPC 2.0 message becomes an `AcpError`
with a named code when the drive reads it.
"""

from __future__ import annotations

import json
import queue
import socket
import time
from collections.abc import Callable

from swarm_fanout.shell.observer import Channel

MAX_LINE_BYTES = 64 * 1024 * 1024
POLL_S = 0.05  # how soon a wait for the agent notices a timeout, an interrupt or its end
PROTOCOL_VERSION = 1
PRIME_META = "ai.primeintellect.prime-agent"  # the product's `_meta` namespace (§13)
METHOD_NOT_FOUND = -32601
EXIT_DRAIN_S = 1.0  # after the agent's exit, how long what it wrote last gets to arrive
_ENDED = object()  # the agent's stdout closed


class AcpError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class AcpSink:
    """Where the drained stdout goes: every byte into the runner's channel, every complete
    line, parsed, into a queue the drive reads."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.lines: queue.Queue = queue.Queue()
        self._buffer = b""

    def write(self, data: bytes, writer: int | None = None) -> None:
        self.channel.write(data, writer)
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for line in complete:
            if line.strip():
                self.lines.put(parse_message(line))
        if len(self._buffer) > MAX_LINE_BYTES:
            self._buffer = b""
            self.lines.put(AcpError("acp_bad_message", "a message line is too long"))

    def close(self) -> None:
        self.channel.close()
        self.lines.put(_ENDED)


def parse_message(line: bytes) -> dict | AcpError:
    """One line as a JSON-RPC 2.0 message (a request, a notification or a response), or
    why it is not one."""
    try:
        message = json.loads(line)
    except ValueError as error:
        return AcpError("acp_bad_message", f"a line that is not JSON: {error}")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return AcpError("acp_bad_message", "a line that is not a JSON-RPC 2.0 object")
    if "method" in message:
        if not isinstance(message["method"], str):
            return AcpError("acp_bad_message", "a request whose method is not a string")
        return message
    if "id" not in message or ("result" in message) == ("error" in message):
        return AcpError(
            "acp_bad_message",
            "a response without an id, or with both or neither of result and error",
        )
    return message


class AcpClient:
    """Requests out on the agent's stdin; responses matched by id while notifications go
    to `on_notification`."""

    def __init__(self, stdin: socket.socket, sink: AcpSink, agent_runs: Callable[[], bool]):
        self.stdin = stdin
        self.sink = sink
        self.agent_runs = agent_runs
        self.ended = False
        self._next_id = 0

    def send(self, message: dict) -> None:
        try:
            self.stdin.sendall((json.dumps(message, separators=(",", ":")) + "\n").encode())
        except OSError as error:
            raise AcpError("acp_agent_exited", f"its stdin is closed: {error}") from None

    def request(
        self,
        method: str,
        params: dict,
        timeout: float,
        on_notification: Callable[[dict], None],
        should_stop: Callable[[], str | None],
    ) -> dict:
        """Send one request and return its response (result or error)."""
        self._next_id += 1
        request_id = self._next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            message = self.next_message(deadline, should_stop)
            if message is None:
                raise AcpError("acp_timeout", f"no response to {method} before the deadline")
            if "method" in message:
                self.notified(message, on_notification)
            elif message.get("id") == request_id:
                return message
            else:
                raise AcpError(
                    "acp_bad_message",
                    f"a response to id {message.get('id')!r}, which the runner never sent",
                )

    def notified(self, message: dict, on_notification: Callable[[dict], None]) -> None:
        """A request from the agent is refused (the runner offers no client methods); a
        notification goes on."""
        if "id" in message:
            error = {"code": METHOD_NOT_FOUND, "message": f"{message['method']} not offered"}
            self.send({"jsonrpc": "2.0", "id": message["id"], "error": error})
        else:
            on_notification(message)

    def next_message(self, deadline: float, should_stop: Callable[[], str | None]) -> dict | None:
        """The agent's next message; None at the deadline. Raises `AcpError` for a bad line
        or the agent's end, `AcpStopped` when `should_stop` names a reason."""
        gone_at = None
        while True:
            reason = should_stop()
            if reason:
                raise AcpStopped(reason)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                item = self.sink.lines.get(timeout=min(remaining, POLL_S))
            except queue.Empty:
                item = None
            if item is None:
                # What the agent wrote last may still be on its way through the drain, and
                # its stdout stays open while a process it left holds it: its exit counts
                # once nothing more has come for a while after it.
                if self.agent_runs():
                    continue
                gone_at = gone_at or time.monotonic()
                if time.monotonic() - gone_at >= EXIT_DRAIN_S:
                    self.ended = True
                    raise AcpError("acp_agent_exited", "the agent exited mid-conversation")
                continue
            if item is _ENDED:
                self.ended = True
                raise AcpError("acp_agent_exited", "the agent closed its stdout mid-conversation")
            if isinstance(item, AcpError):
                raise item
            return item


class AcpStopped(Exception):
    """The run's timeout or an interrupt ended a wait."""


def prime_meta(update: dict) -> dict:
    """The product's namespaced `_meta` of a session update, or {}."""
    meta = update.get("_meta")
    inner = meta.get(PRIME_META) if isinstance(meta, dict) else None
    return inner if isinstance(inner, dict) else {}


def stdin_socket() -> tuple[socket.socket, socket.socket]:
    """The agent's stdin: a socket pair, as its stdout is (shell/observer.py
    `stream_socket`), so that no process can open it through /proc/<pid>/fd/0 and speak to
    the agent in the runner's name. Returns (the runner's end, the agent's)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.shutdown(socket.SHUT_RD)
    theirs.shutdown(socket.SHUT_WR)
    return ours, theirs
