"""Launching the agent headless, watching it, and ending every process a run started.

The agent runs in its own session and process group, with the runner as its
child subreaper (shell/procs.py), started, watched and ended through the run's plan
whatever its kind (shell/sandbox.py's seam: plain, or in bubblewrap); a timeout or a
SIGINT/SIGTERM to the runner ends the run's whole tree, and the product's daemon is shut
down over its own socket (contract §2) before anything left is signalled.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from swarm_fanout.rules.triage import AgentEnd
from swarm_fanout.shell import procs
from swarm_fanout.shell.acp import AcpClient, AcpSink, stdin_socket
from swarm_fanout.shell.acp_drive import drive_acp
from swarm_fanout.shell.observer import Channel, Observer, drain_socket, private_dir, stream_socket
from swarm_fanout.shell.resident import drive_resident
from swarm_fanout.shell.rundir import RunDir
from swarm_fanout.shell.sandbox import Plan, Started
from swarm_fanout.shell.watch import ENDING, ENDING_NOW, Interrupt, Watch

# How long the agent's processes get to act on their own when a run ends, before the
# runner goes on: the daemon to answer shutdown{force}, what is left to exit after it, and
# each process to exit between SIGTERM and SIGKILL. --grace S replaces all three, except
# that the daemon keeps at least MIN_ANSWER_S: a shorter wait would signal a daemon that
# was about to exit cleanly.
SHUTDOWN_ANSWER_S = 5.0
MIN_ANSWER_S = 0.5
SETTLE_S = 3.0
TERM_GRACE_S = 3.0


def agent_version(agent_bin: str, env: dict, cwd: str) -> str | None:
    try:
        process = subprocess.Popen(
            [agent_bin, "--version"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, err = process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        process.communicate()
        return None
    _kill_group(process.pid)
    # prime-agent prints its version on stderr when stdin is not a terminal (it
    # keeps stdout for the json stream), so read whichever stream has it.
    lines = (out or err).decode("utf-8", "replace").strip().splitlines()
    return lines[0].strip()[:200] if lines and process.returncode == 0 else None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class Launch:
    """What to launch and how long to let it run; `label` ("trial 3/10") heads the progress
    lines."""

    agent_bin: str
    model: str
    task: str
    env: dict
    drive: str
    timeout: float
    grace: float | None = None
    artifact: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Launched:
    """How a launched agent ended, and what the runner's own channels saw of it."""

    channels: list  # the channels published into the run dir (swarm_fanout/shell/observer.py)
    sightings: list  # the observer's
    observer: dict  # {poll_s, polls}
    processes: dict  # the run's process tree, as swarm_fanout/shell/callers.py judged it
    exit_code: int | None  # the agent's own (negative: ended by that signal)
    timed_out: bool
    interrupted: int | None  # the signal that interrupted the runner
    wall_time_s: float
    cleanup: dict  # end_run's record
    resident: dict | None  # the resident drive's record
    acp: dict | None  # the ACP drive's record (swarm_fanout/shell/acp_drive.py)
    # Only an agent that failed on its own has its last words quoted; one the runner ended
    # (timeout, interrupt) exits by the runner's signal.
    stderr_tail: str | None


@dataclass(frozen=True)
class Talk:
    """The runner's ends of the agent's channels a drive waits on: the daemon's wire, the
    json stream, and, under ACP, the agent's stdin and what its stdout said."""

    wire: Channel
    stream: Channel
    stdin: object = None  # the ACP drive's end of the agent's stdin (swarm_fanout/shell/acp.py)
    acp: AcpSink | None = None


def _wait_oneshot(run, launch, agent, watch, talk) -> None:
    """The CLI's `--mode json` run ends when the parent first goes idle."""
    while agent.runs() and not watch.stop_reason():
        agent.wait(0.05)


def _wait_resident(run, launch, agent, watch, talk) -> dict:
    """The daemon runs the parent as a resident session, until the RLM quiescence barrier."""
    model, task, env = launch.model, launch.task, launch.env
    return drive_resident(run, agent.runs, model, task, env, watch, talk.wire, talk.stream)


def _wait_acp(run, launch, agent, watch, talk) -> dict:
    """`--mode acp`: the task as `session/prompt` on stdin, waited on until the terminal-
    quiescence update (shell/acp_drive.py)."""
    client = AcpClient(talk.stdin, talk.acp, agent.runs)
    close_s, _, _ = _waits(launch.grace)
    return drive_acp(run, client, launch.task, watch, close_s)


@dataclass(frozen=True)
class Drive:
    """How a drive launches the agent and waits for the run to end."""

    argv: Callable[[RunDir, Launch], list[str]]
    # Waits for the run to end (run, launch, agent: Started, watch, talk); returns the
    # drive's record for the result, if it keeps one.
    wait: Callable[..., dict | None]
    stdout: str  # what the agent's stdout is: "stream" (json), "daemon" (to a file), "acp"


# Each --drive, the one place a drive is chosen.
DRIVES = {
    "oneshot": Drive(
        lambda run, go: run.argv(go.agent_bin, go.model, go.task), _wait_oneshot, "stream"
    ),
    "resident": Drive(lambda run, go: run.daemon_argv(go.agent_bin), _wait_resident, "daemon"),
    "acp": Drive(lambda run, go: run.acp_argv(go.agent_bin, go.model), _wait_acp, "acp"),
}


def launch_and_wait(
    run: RunDir, launch: Launch, interrupt: Interrupt, proxy, plan: Plan
) -> Launched:
    """Launch the agent as `plan` starts it, wait for it to end or be ended, end every process
    it left. `proxy` (the recording proxy) serves the agent where it runs, and judges each
    connection's caller (shell/callers.py)."""
    procs.become_subreaper()
    watch = Watch(run, launch.timeout, interrupt, launch.label, plan.sandboxed)
    drive = DRIVES[launch.drive]
    argv = drive.argv(run, launch)
    # The runner's own channels (shell/observer.py): the one-shot stream comes through a socket
    # pair that a thread drains (so it never fills and stalls the agent), the resident
    # daemon's messages over the socket; both are kept outside the run dir until the
    # agent's tree is gone.
    private = private_dir()
    stream = Channel(private, "stdout.jsonl")
    wire = Channel(private, "daemon-wire.jsonl")
    acp_stream = Channel(private, "acp-stream.jsonl")
    observer = Observer(run.paths, launch.artifact).start()
    # The agent's stdout (one-shot: the stream; resident: the daemon's, to a file) and its
    # stderr are socket pairs the runner drains (observer.stream_socket): a socket cannot be
    # opened through /proc/<pid>/fd, as a pipe or a file of the run dir could.
    (out, out_end), (err, err_end) = stream_socket(), stream_socket()
    # The ACP drive speaks to the agent on its stdin (shell/acp.py); the others close it.
    acp = drive.stdout == "acp"
    stdin, stdin_end = stdin_socket() if acp else (None, subprocess.DEVNULL)
    try:
        # Closed stdin, or the CLI waits for EOF and prepends it to the prompt (§2).
        agent = plan.start(
            argv,
            cwd=run.paths.repo,
            env=launch.env,
            agent_home=run.paths.agent_home,
            stdin=stdin_end,
            stdout=out_end,
            stderr=err_end,
            proxy=proxy,
        )
    except BaseException:
        observer.stop()
        shutil.rmtree(private, ignore_errors=True)
        out_end.close()
        err_end.close()
        out.close()
        if stdin is not None:
            stdin.close()
        # What the start (bwrap) said before it gave up is the only word on why.
        drain_socket(err, FileSink(run.paths.stderr)).join(timeout=5)
        raise
    finally:
        out_end.close()
        err_end.close()
        if stdin is not None:
            stdin_end.close()
    interrupt.ending = _ending(launch.label, launch.grace)
    interrupt.ending_now = _ending_now(launch.label)
    interrupt.now = agent.kill_now
    processes = agent.tree().start()
    proxy.attribute(processes)
    talk = Talk(wire, stream, stdin, AcpSink(acp_stream) if acp else None)
    sink = {"stream": stream, "acp": talk.acp}.get(drive.stdout)
    drains = [
        drain_socket(out, sink or FileSink(run.paths.daemon_stdout)),
        drain_socket(err, FileSink(run.paths.stderr)),
    ]
    record: dict | None = None
    try:
        record = drive.wait(run, launch, agent, watch, talk)
    finally:
        wall = round(time.monotonic() - watch.started, 3)
        still_running = agent.runs()
        cleanup = end_run(agent, run.socket, launch.grace)
        run.cleanup_tmp()
        interrupt.ending, interrupt.ending_now, interrupt.now = ENDING, ENDING_NOW, None
        if stdin is not None:
            stdin.close()
        # The tree is gone: whatever held the sockets' other ends is gone with it.
        for drained in drains:
            drained.join(timeout=10.0)
        observer.stop()
        processes.stop()
        exit_code = agent.exit_code()
        streams = drive.stdout == "stream"
        channels = [stream.publish(run.paths.stdout)] if streams or stream.bytes else []
        if acp:
            channels.append(acp_stream.publish(run.paths.acp_stream))
        elif not streams:
            channels.append(wire.publish(run.paths.wire))
        shutil.rmtree(private, ignore_errors=True)
    ended = "interrupted" if interrupt.signum else "timed out" if watch.timed_out else "finished"
    watch.progress.report(wall, ended=ended)
    return Launched(
        channels=channels,
        sightings=observer.sightings(),
        observer={"poll_s": observer.interval, "polls": observer.polls},
        processes=processes.summary(),
        exit_code=exit_code,
        timed_out=watch.timed_out,
        interrupted=interrupt.signum,
        wall_time_s=wall,
        cleanup=cleanup,
        resident=record if launch.drive == "resident" else None,
        acp=record if acp else None,
        stderr_tail=stderr_tail(run.paths.stderr) if exit_code and not still_running else None,
    )


def drive_records(launched: Launched) -> dict:
    """What the drive kept of its conversation, as the result names it: the resident drive's
    record, or the ACP drive's with the children a client that stops at the prompt's response
    would have lost (contract §13)."""
    if launched.acp is not None:
        return {
            "acp": launched.acp,
            "outstanding_at_response": launched.acp["outstanding_at_response"],
        }
    return {"resident": launched.resident} if launched.resident else {}


def agent_end(launched: Launched) -> AgentEnd:
    """How the runner saw the agent end, for the result rule (rules/result.py)."""
    daemon_error = (launched.resident or {}).get("error")
    return AgentEnd(
        launched.exit_code,
        timed_out=launched.timed_out,
        interrupted=bool(launched.interrupted),
        stderr_tail=launched.stderr_tail,
        daemon_error=daemon_error["message"] if daemon_error else None,
        acp_error=(launched.acp or {}).get("error"),
    )


class FileSink:
    """A file of the run dir the runner writes what a drained socket brings (stderr, the
    daemon's stdout)."""

    def __init__(self, path: str):
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115 - closed at the end

    def write(self, data: bytes, writer: int | None = None) -> None:
        self._file.write(data)

    def close(self) -> None:
        self._file.close()


def _waits(grace: float | None) -> tuple[float, float, float]:
    """How long the daemon gets to answer its shutdown, what is left to exit after it, and
    each process between SIGTERM and SIGKILL."""
    if grace is None:
        return SHUTDOWN_ANSWER_S, SETTLE_S, TERM_GRACE_S
    return max(grace, MIN_ANSWER_S), grace, grace


def _ending(label: str, grace: float | None) -> str:
    """What a Ctrl-C ends while the agent runs, as the line it prints says it."""
    of = f" of {label}" if label else ""
    _, _, term = _waits(grace)
    return (
        f"the agent's processes{of} (the daemon shut down, then SIGTERM, and SIGKILL to what "
        f"is left after {term:g}s); what exists is still scored"
    )


def _ending_now(label: str) -> str:
    """What a second Ctrl-C ends, and how: at once, with no grace."""
    of = f" of {label}" if label else ""
    return f"the agent's processes{of} now, by SIGKILL; what exists is still scored"


def end_run(agent: Started, socket: str, grace: float | None = None) -> dict:
    """Shut the daemon down over the run's own socket, give what that ends time to exit, then
    SIGTERM, and SIGKILL after a grace, to every process of the run still running. What
    outlived it all is in `leaked_pids`.

    `grace`, when given, replaces SHUTDOWN_ANSWER_S (down to MIN_ANSWER_S), SETTLE_S and
    TERM_GRACE_S."""
    answer, settle, term = _waits(grace)
    shutdown, supervisor = agent.shutdown_daemon(socket, answer)
    if shutdown.get("success"):
        if supervisor:
            shutdown["exited"] = not procs.wait_gone([supervisor], 10.0, agent.owned)
        # A forced shutdown ends every worker and kernel (§2 "Processes"); give them a
        # moment to finish exiting before anything is signalled.
        procs.wait_gone(agent.members(), settle, agent.owned)
    rounds = []
    for _ in range(3):
        remaining = agent.to_signal(agent.members())
        if not remaining:
            break
        rounds.append(procs.end_processes(remaining, term, agent.owned))
    agent.reap(settle)
    leaked = sorted(agent.members())
    return {
        "daemon_shutdown": shutdown,
        "terminated": sorted({pid for item in rounds for pid in item["terminated"]}),
        "killed": sorted({pid for item in rounds for pid in item["killed"]}),
        "leaked_processes": len(leaked),
        "leaked_pids": leaked,
        **agent.record(),
    }


STDERR_TAIL_CHARS = 500  # what a result keeps of the agent's last words


def stderr_tail(path: str) -> str | None:
    """What a crashed agent said last: its stderr's last non-empty line, after its first
    when they differ. The product states the cause first and then where to read more
    ("No API key found for anthropic." ... ".../docs/models.md", seen with v0.8.0); a
    Python traceback states it last."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(65536).decode("utf-8", "replace")
            handle.seek(max(0, os.path.getsize(path) - 65536))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    first = next((line.strip() for line in head.splitlines() if line.strip()), None)
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return None
    said = lines[-1] if first in (None, lines[-1]) else f"{first} … {lines[-1]}"
    if len(said) <= STDERR_TAIL_CHARS:
        return said
    # Cut at a word, and say so: a list cut mid-word reads as a name that does not exist.
    return said[:STDERR_TAIL_CHARS].rsplit(" ", 1)[0] + " … (cut; the whole of it in stderr.txt)"
