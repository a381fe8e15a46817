"""A small client for the product's daemon protocol v7 (contract §8).

Newline-delimited JSON over a Unix socket. The server speaks first
(`daemon_hello`); every command travels in the protocol-7 envelope; responses
are matched to commands by id while events stream past. The runner uses it to
shut down the supervisor it caused to exist, on its own socket only (never
`prime-agent shutdown --force`, which stops every daemon in the HOME registry).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Callable

PROTOCOL = {"name": "prime-agent.daemon", "version": 7}
MAX_LINE_BYTES = 64 * 1024 * 1024
MIN_SCHEMA = 18
QUIESCENCE = "rlm_quiescence_barrier"
POLL_S = 0.1  # how soon a wait for the daemon notices a timeout or an interrupt


class DaemonError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def envelope(command_id: str, client_id: str, command: dict) -> dict:
    """Bare commands are rejected by a v7 daemon (§8.1 "Envelope")."""
    return {
        "type": "command",
        "id": command_id,
        "protocol": dict(PROTOCOL),
        "clientId": client_id,
        "command": command,
    }


class DaemonClient:
    def __init__(self, socket_path: str, timeout: float = 5.0):
        self.client_id = "swarm-fanout-" + secrets.token_hex(4)
        self._counter = 0
        self._buffer = b""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            self._sock.connect(socket_path)
            self.hello = self._read_message(time.monotonic() + timeout)
        except (OSError, ValueError) as error:
            self._sock.close()
            raise DaemonError("daemon_unreachable", f"{socket_path}: {error}") from None
        except DaemonError:
            self._sock.close()
            raise
        if self.hello.get("type") != "daemon_hello":
            self._sock.close()
            raise DaemonError("daemon_no_hello", f"first message was {self.hello.get('type')!r}")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(
        self,
        command: dict,
        timeout: float,
        *,
        on_event: Callable[[dict], None] | None = None,
        should_stop: Callable[[], str | None] | None = None,
    ) -> dict:
        """Send one enveloped command and return its response.

        Everything else that arrives meanwhile (session events, status, other
        responses) goes to `on_event`: events start after `attach` and may come
        before the response they belong to (§8.1 "Events"). `should_stop` is
        polled ten times a second; a reason it returns aborts the wait.
        """
        self._counter += 1
        command_id = f"{self.client_id}-{self._counter}"
        payload = json.dumps(envelope(command_id, self.client_id, command)) + "\n"
        deadline = time.monotonic() + timeout
        try:
            self._sock.sendall(payload.encode("utf-8"))
            while True:
                message = self._read_message(deadline, should_stop)
                is_response = message.get("type") == "response"
                if is_response and (
                    message.get("id") == command_id or message.get("command") == "parse"
                ):
                    return message
                if on_event is not None:
                    on_event(message)
        except OSError as error:
            raise DaemonError("daemon_io", str(error)) from None

    def _read_message(
        self, deadline: float, should_stop: Callable[[], str | None] | None = None
    ) -> dict:
        # Split on b"\n" only: str.splitlines would also break on U+2028 (§8.1).
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DaemonError("daemon_timeout", "no complete message before the deadline")
            if should_stop is not None:
                reason = should_stop()
                if reason:
                    raise DaemonError("daemon_wait_stopped", reason)
            if len(self._buffer) > MAX_LINE_BYTES:
                raise DaemonError("daemon_bad_message", "a message line is too long")
            self._sock.settimeout(min(remaining, POLL_S))
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                raise DaemonError("daemon_closed", "the daemon closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise DaemonError("daemon_bad_message", "a message is not JSON") from None
        if not isinstance(message, dict):
            raise DaemonError("daemon_bad_message", "a message is not a JSON object")
        return message


def check_hello(hello: dict) -> None:
    """Refuse a daemon too old for the resident drive, naming what is missing (§8.1)."""
    protocol = hello.get("protocol") if isinstance(hello.get("protocol"), dict) else {}
    problems = []
    if protocol.get("name") != PROTOCOL["name"] or protocol.get("version") != PROTOCOL["version"]:
        problems.append(f"protocol {protocol or None!r}, need {PROTOCOL}")
    revision = hello.get("schemaRevision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < MIN_SCHEMA:
        problems.append(f"schemaRevision {revision!r}, need >= {MIN_SCHEMA}")
    capabilities = hello.get("serverCapabilities")
    if not isinstance(capabilities, list) or QUIESCENCE not in capabilities:
        problems.append(f"no {QUIESCENCE!r} capability")
    if problems:
        version = hello.get("appVersion")
        raise DaemonError("daemon_incompatible", f"daemon {version!r}: " + "; ".join(problems))


def connect_when_ready(
    socket_path: str,
    deadline: float,
    daemon_alive: Callable[[], bool],
    should_stop: Callable[[], str | None],
) -> DaemonClient:
    """Poll the socket of a daemon we just started until it says hello (§8.2 last line)."""
    last = "no socket yet"
    while time.monotonic() < deadline:
        reason = should_stop()
        if reason:
            raise DaemonError("daemon_wait_stopped", reason)
        if os.path.exists(socket_path):
            try:
                return DaemonClient(socket_path, timeout=min(5.0, deadline - time.monotonic()))
            except DaemonError as error:
                last = str(error)
        if not daemon_alive():
            raise DaemonError("daemon_start_failed", "the daemon exited before it said hello")
        time.sleep(0.02)
    raise DaemonError("daemon_start_failed", f"no hello before the deadline ({last})")


def shutdown_daemon(socket_path: str, timeout: float = 5.0) -> dict:
    """`shutdown{force:true}` on the run's own socket, then wait for the supervisor.

    A forced shutdown ends the workers and the supervisor; a non-forced one was
    seen to leave the supervisor alive (§2 "Processes").
    """
    report: dict = {"socket": socket_path, "attempted": False}
    if not os.path.exists(socket_path):
        report["error"] = "no socket"
        return report
    report["attempted"] = True
    try:
        with DaemonClient(socket_path, timeout=min(timeout, 5.0)) as client:
            pid = client.hello.get("supervisorPid")
            report["supervisor_pid"] = pid if isinstance(pid, int) else None
            response = client.request({"type": "shutdown", "force": True}, timeout=timeout)
            report["success"] = response.get("success") is True
            if not report["success"]:
                report["error"] = str(response.get("error") or "refused")
    except DaemonError as error:
        report["success"] = False
        report["error"] = f"{error.code}: {error}"
    return report
