"""The ACP drive: the parent driven as an editor or PrimeIntellect's `verifiers` drives it,
`--mode acp` over stdio (docs/product-contract.md §13), and waited on until the
terminal-quiescence update, not just the prompt's response.

`session/prompt` answers once the parent's turn is over, without waiting for its RLM
children; a later `session_info_update` whose quiescence counts no outstanding subagent
says every child has finished. A client that stops at the response and closes the session
cancels the children still running: `outstanding_at_response` records how many that
would have been.
"""

from __future__ import annotations

import contextlib
import socket
import time

from swarm_fanout.shell.acp import PROTOCOL_VERSION, AcpClient, AcpError, AcpStopped, prime_meta
from swarm_fanout.shell.rundir import RunDir
from swarm_fanout.shell.watch import Watch

COMMAND_TIMEOUT_S = 120.0  # initialize and session/new
CLIENT_INFO = {"name": "swarm-fanout", "title": "swarm-fanout runner", "version": "1"}


class Turn:
    """What the session's updates said of the prompt's turn (§13 "Correlation")."""

    def __init__(self, session_id: str | None = None):
        self.session_id = session_id
        self.turn_id: int | None = None
        self.boundary: dict | None = None  # the response boundary's prime-agent _meta
        self.responded = False
        self.outstanding_at_response: int | None = None
        self.terminal: dict | None = None  # the terminal-quiescence update's _meta
        self.updates: dict[str, int] = {}

    def update(self, message: dict) -> None:
        params = message.get("params")
        if message.get("method") != "session/update" or not isinstance(params, dict):
            return
        update = params.get("update")
        if params.get("sessionId") != self.session_id or not isinstance(update, dict):
            return
        kind = str(update.get("sessionUpdate"))
        self.updates[kind] = self.updates.get(kind, 0) + 1
        meta = prime_meta(update)
        phase, turn = meta.get("phase"), meta.get("promptTurnId")
        quiescence = meta.get("quiescence")
        outstanding = (
            quiescence.get("outstandingSubagents") if isinstance(quiescence, dict) else None
        )
        if phase == "responseBoundary" and self.boundary is None:
            self.boundary, self.turn_id = meta, turn
        elif (
            phase == "event"
            and self.boundary is not None
            and not self.responded
            and turn == self.turn_id
            and isinstance(outstanding, int)
        ):
            # The completion update published right after the boundary: the children
            # still queued or running when the turn's response was cut.
            self.outstanding_at_response = outstanding
        elif phase == "terminalQuiescence" and turn == self.turn_id and outstanding == 0:
            self.terminal = meta

    def promises_terminal(self) -> bool:
        return bool(self.boundary and self.boundary.get("terminalQuiescenceExpected") is True)


def drive_acp(run: RunDir, client: AcpClient, task: str, watch: Watch, close_s: float) -> dict:
    """initialize, session/new with the run's repo as cwd, session/prompt with the task; then
    the terminal-quiescence update, the timeout or an interrupt; then session/close and the
    agent's stdin closed, which ends the CLI (§13 "Lifecycle")."""
    record: dict = {
        "agent_info": None,
        "session_id": None,
        "requests": [],
        "admitted": False,
        "stop_reason": None,
        "outstanding_at_response": None,
        "terminal_update": False,
    }
    turn = Turn()

    def step(method: str, params: dict, timeout: float, failed: str) -> dict:
        began = time.monotonic()
        response = client.request(method, params, timeout, turn.update, watch.stop_reason)
        ok = "result" in response
        elapsed = round(time.monotonic() - began, 3)
        record["requests"].append({"method": method, "ok": ok, "elapsed_s": elapsed})
        if not ok:
            error = response.get("error")
            said = error.get("message") if isinstance(error, dict) else error
            raise AcpError(failed, f"{method}: {said!r}")
        result = response["result"]
        if not isinstance(result, dict):
            raise AcpError("acp_bad_message", f"{method} returned {type(result).__name__}")
        return result

    def command_timeout() -> float:
        # A second past the run's deadline: a deadline that ends a wait is the run's timeout.
        return min(watch.remaining() + 1.0, COMMAND_TIMEOUT_S)

    try:
        hello = step(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": CLIENT_INFO,
            },
            command_timeout(),
            "acp_request_failed",
        )
        info = hello.get("agentInfo")
        record["agent_info"] = info if isinstance(info, dict) else None
        session = step(
            "session/new",
            {"cwd": run.paths.repo, "mcpServers": []},
            command_timeout(),
            "acp_request_failed",
        )
        session_id = session.get("sessionId")
        if not isinstance(session_id, str):
            raise AcpError("acp_bad_message", "session/new returned no sessionId")
        record["session_id"] = turn.session_id = session_id
        mismatch = prime_meta(session).get("cwd")
        if mismatch:
            record["cwd_mismatch"] = mismatch
        record["admitted"] = True
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": task}]}
        try:
            answer = step("session/prompt", prompt, watch.remaining() + 1.0, "acp_prompt_failed")
            record["stop_reason"] = answer.get("stopReason")
        except AcpError as error:
            if error.code != "acp_prompt_failed" or not turn.promises_terminal():
                raise
            # A failed turn's response still promises its terminal update: the children it
            # spawned are waited for all the same, and the failure is reported.
            record["error"] = {"code": error.code, "message": str(error)}
        finally:
            turn.responded = True
            record["outstanding_at_response"] = turn.outstanding_at_response
        if turn.boundary is None or turn.promises_terminal():
            # A boundary that promises none (a turn that never ran, §13) gets none.
            _wait_for_terminal(client, turn, watch)
    except AcpError as error:
        record.setdefault("error", {"code": error.code, "message": str(error)})
    except AcpStopped:
        pass
    finally:
        record["terminal_update"] = turn.terminal is not None
        record["updates"] = dict(sorted(turn.updates.items()))
        record["close"] = _close(client, turn, close_s)
    return record


def _wait_for_terminal(client: AcpClient, turn: Turn, watch: Watch) -> None:
    """Until the terminal-quiescence update of the prompt's turn (it follows the response,
    §13), or the run's deadline (then AcpStopped, by the watch)."""
    while turn.terminal is None:
        message = client.next_message(watch.deadline + 1.0, watch.stop_reason)
        if message is None:
            return
        if "method" not in message:
            raise AcpError(
                "acp_bad_message",
                f"a response to id {message.get('id')!r}, which the runner never sent",
            )
        client.notified(message, turn.update)


def _close(client: AcpClient, turn: Turn, close_s: float) -> dict:
    """session/close (it cancels the children still running, §13), then EOF on the agent's
    stdin, on which the CLI exits; each within `close_s`."""
    closed: dict = {"session_close": None}
    if turn.session_id is not None and not client.ended and client.agent_runs():
        began = time.monotonic()
        try:
            response = client.request(
                "session/close", {"sessionId": turn.session_id}, close_s, turn.update, lambda: None
            )
            closed["session_close"] = "result" in response
        except (AcpError, AcpStopped) as error:
            closed["error"] = str(error)
        closed["elapsed_s"] = round(time.monotonic() - began, 3)
    with contextlib.suppress(OSError):
        client.stdin.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + close_s
    while client.agent_runs() and time.monotonic() < deadline:
        time.sleep(0.05)
    closed["exited"] = not client.agent_runs()
    return closed
