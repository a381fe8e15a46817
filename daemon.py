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

PROTOCOL = {"name": "prime-agent.daemon", "version": 7}
MAX_LINE_BYTES = 64 * 1024 * 1024


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

    def request(self, command: dict, timeout: float) -> dict:
        """Send one enveloped command and return its response, skipping events."""
        self._counter += 1
        command_id = f"{self.client_id}-{self._counter}"
        payload = json.dumps(envelope(command_id, self.client_id, command)) + "\n"
        deadline = time.monotonic() + timeout
        try:
            self._sock.sendall(payload.encode("utf-8"))
            while True:
                message = self._read_message(deadline)
                if message.get("type") != "response":
                    continue
                if message.get("id") == command_id or message.get("command") == "parse":
                    return message
        except OSError as error:
            raise DaemonError("daemon_io", str(error)) from None

    def _read_message(self, deadline: float) -> dict:
        # Split on b"\n" only: str.splitlines would also break on U+2028 (§8.1).
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DaemonError("daemon_timeout", "no complete message before the deadline")
            if len(self._buffer) > MAX_LINE_BYTES:
                raise DaemonError("daemon_bad_message", "a message line is too long")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise DaemonError("daemon_timeout", "no answer before the deadline") from None
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


def shutdown_daemon(socket_path: str, timeout: float = 10.0) -> dict:
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
