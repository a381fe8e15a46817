"""The resident drive: the parent as a resident session, waited on with the RLM
quiescence barrier (docs/product-contract.md §1 facts 4-5, §8).

The runner starts the daemon in the run's process group; this module holds the
conversation with it and records what it says, so scoring reads a resident run
exactly like a one-shot one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from swarm_fanout.evidence.jsonl import open_regular
from swarm_fanout.shell import daemon
from swarm_fanout.shell.observer import Channel
from swarm_fanout.shell.rundir import RunDir
from swarm_fanout.shell.watch import Watch

DAEMON_START_S = 30.0  # the product's own CLI gives a daemon 30 s to start (§2 exit codes)
COMMAND_TIMEOUT_S = 120.0
HELLO_FIELDS = ("appVersion", "protocol", "schemaRevision", "supervisorPid")
SESSION_FIELDS = (
    "activeSessionId",
    "sessionId",
    "sessionFile",
    "workerPid",
    "hasRunningRlmChildren",
    "messageCount",
)


def drive_resident(
    run: RunDir,
    daemon_runs: Callable[[], bool],
    model: str,
    task: str,
    env: dict,
    watch: Watch,
    wire: Channel,
    stream: Channel,
) -> dict:
    """Drive the parent as a resident session and wait on the RLM quiescence barrier.

    One-shot `--mode json` stops the worker at the parent's first idle point and
    aborts every running child (§1 fact 4); a resident session survives that,
    and `wait_for_headless_completion{waitForRlmQuiescence}` returns only when
    every admitted descendant has settled and the parent turns they triggered
    have drained (§1 fact 5, §8.3).
    """
    record: dict = {"hello": None, "session": None, "commands": [], "admitted": False}
    recorder = EventRecorder(run, wire, stream)
    try:
        start_deadline = min(watch.deadline, time.monotonic() + DAEMON_START_S)
        client = daemon.connect_when_ready(
            run.socket, start_deadline, daemon_runs, watch.stop_reason
        )
    except daemon.DaemonError as error:
        record["error"] = {"code": error.code, "message": str(error)}
        recorder.close()
        return record
    with client:
        hello = client.hello
        recorder.message(hello)
        record["hello"] = {key: hello.get(key) for key in HELLO_FIELDS}

        def command_timeout() -> float:
            # A second past the run's deadline, so that when the deadline is what
            # ends a wait the run is reported as timed out, not the daemon as mute.
            return min(watch.remaining() + 1.0, COMMAND_TIMEOUT_S)

        def step(command: dict, timeout: float) -> dict:
            began = time.monotonic()
            response = client.request(
                command, timeout, on_event=recorder.message, should_stop=watch.stop_reason
            )
            recorder.message(response)
            record["commands"].append(
                {
                    "command": command["type"],
                    "success": response.get("success") is True,
                    "elapsed_s": round(time.monotonic() - began, 3),
                }
            )
            if response.get("success") is not True:
                raise daemon.DaemonError(
                    "daemon_command_failed", f"{command['type']}: {response.get('error')!r}"
                )
            data = response.get("data")
            return data if isinstance(data, dict) else {}

        try:
            daemon.check_hello(hello)
            summary = step(
                {
                    "type": "create",
                    "lifecycle": "resident",
                    "config": {
                        "cwd": run.paths.repo,
                        "agentDir": run.paths.agent_home,
                        "sessionDir": run.paths.sessions,
                        "model": model,
                    },
                    # Overlaid on the supervisor env for the new worker: the whole
                    # run env, so the ledger is keyed on the run's sessions dir (§8.2).
                    "launchEnv": env,
                },
                command_timeout(),
            )
            session_id = summary.get("activeSessionId")
            if not isinstance(session_id, str):
                raise daemon.DaemonError("daemon_bad_message", "create returned no session id")
            record["session"] = {key: summary.get(key) for key in SESSION_FIELDS}
            recorder.start_stream(session_id, summary)
            step(
                {
                    "type": "attach",
                    "activeSessionId": session_id,
                    "clientId": client.client_id,
                    "capabilities": ["event_sequence"],
                },
                command_timeout(),
            )
            step(
                {"type": "prompt", "activeSessionId": session_id, "message": task},
                command_timeout(),
            )
            record["admitted"] = True
            step(
                {
                    "type": "wait_for_headless_completion",
                    "activeSessionId": session_id,
                    "waitForRlmQuiescence": True,
                },
                watch.remaining() + 1.0,  # the barrier has no server timeout (§8.2)
            )
            state = step(
                {"type": "get_state", "activeSessionId": session_id},
                command_timeout(),
            )
            record["final_state"] = {key: state.get(key) for key in SESSION_FIELDS}
        except daemon.DaemonError as error:
            if error.code != "daemon_wait_stopped":
                record["error"] = {"code": error.code, "message": str(error)}
        finally:
            recorder.close()
    return record


class EventRecorder:
    """Write the daemon's messages to daemon-wire.jsonl and the session's events to
    stdout.jsonl, in the shape the one-shot `--mode json` stream has (§7), so the
    scorer reads both drives alike."""

    def __init__(self, run: RunDir, wire: Channel, stream: Channel):
        # The runner's own channels (shell/observer.py), published into the run dir once the
        # agent's tree is gone: the agent cannot rewrite what the daemon sent.
        self.wire = wire
        self.stream_channel = stream
        self.stream: Channel | None = None
        self.run = run
        self.session_id: str | None = None

    def message(self, message: dict) -> None:
        self.wire.write_text(json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n")
        if (
            self.stream is not None
            and message.get("type") == "session_event"
            and message.get("activeSessionId") == self.session_id
            and isinstance(message.get("event"), dict)
        ):
            event = json.dumps(message["event"], separators=(",", ":"), ensure_ascii=False)
            self.stream.write_text(event + "\n")

    def start_stream(self, session_id: str, summary: dict) -> None:
        """Line 1 is the root header, read from the session file the daemon named."""
        self.session_id = session_id
        self.stream = self.stream_channel
        self.stream.write_text(self._header_line(summary) + "\n")

    def _header_line(self, summary: dict) -> str:
        path = summary.get("sessionFile")
        if isinstance(path, str):
            handle = open_regular(path, [])
            if handle is not None:
                with handle:
                    first = handle.readline(1024 * 1024).decode("utf-8", "replace").strip()
                if first.startswith("{"):
                    return first
        header = {
            "type": "session",
            "version": 3,
            "id": summary.get("sessionId"),
            "timestamp": summary.get("created"),
            "cwd": summary.get("cwd"),
            "rlmDepth": 0,
        }
        return json.dumps(header, separators=(",", ":"))

    def close(self) -> None:
        self.wire.close()
        self.stream_channel.close()
