"""Launching the agent headless, watching it, and ending every process a run started.

The agent runs in its own session and process group, with the runner as its
child subreaper (shell/procs.py); a timeout or a SIGINT/SIGTERM to the runner ends the
run's whole tree, and the product's daemon is shut down over its own socket
(contract §2) before anything left is signalled.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from swarm_fanout.rules.result import AgentEnd
from swarm_fanout.shell import callers, daemon, procs, sandbox
from swarm_fanout.shell.acp import AcpClient, AcpSink, stdin_socket
from swarm_fanout.shell.acp_drive import drive_acp
from swarm_fanout.shell.observer import Channel, Observer, drain_socket, private_dir, stream_socket
from swarm_fanout.shell.resident import drive_resident
from swarm_fanout.shell.rundir import RunDir
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


def _wait_oneshot(run, launch, process, started, watch, talk) -> None:
    """The CLI's `--mode json` run ends when the parent first goes idle."""
    while _agent_runs(process, started) and not watch.stop_reason():
        if started is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.05)
        else:
            started.status.read(0.05)


def _wait_resident(run, launch, process, started, watch, talk) -> dict:
    """The daemon runs the parent as a resident session, until the RLM quiescence barrier."""
    # Sandboxed, the daemon's own end (the shim's word), not bwrap's, says it died.
    daemon_runs = functools.partial(_agent_runs, process, started)
    model, task, env = launch.model, launch.task, launch.env
    return drive_resident(run, daemon_runs, model, task, env, watch, talk.wire, talk.stream)


def _wait_acp(run, launch, process, started, watch, talk) -> dict:
    """`--mode acp`: the task as `session/prompt` on stdin, waited on until the terminal-
    quiescence update (shell/acp_drive.py)."""
    client = AcpClient(talk.stdin, talk.acp, functools.partial(_agent_runs, process, started))
    close_s, _, _ = _waits(launch.grace)
    return drive_acp(run, client, launch.task, watch, close_s)


@dataclass(frozen=True)
class Drive:
    """How a drive launches the agent and waits for the run to end."""

    argv: Callable[[RunDir, Launch], list[str]]
    # Waits for the run to end (run, launch, process, started, watch, talk); returns the
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
    run: RunDir, launch: Launch, interrupt: Interrupt, proxy=None, plan: sandbox.Plan | None = None
) -> Launched:
    """Launch the agent, wait for it to end or be ended, end every process it left. With a
    sandbox `plan` the agent runs in it and `proxy` (the recording proxy) serves it there;
    with `proxy`, each connection's caller is judged (shell/callers.py)."""
    procs.become_subreaper()
    watch = Watch(run, launch.timeout, interrupt, launch.label, plan is not None)
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
    started = None
    env = launch.env
    try:
        if plan is None:
            # Closed stdin, or the CLI waits for EOF and prepends it to the prompt (§2).
            process = subprocess.Popen(
                argv,
                cwd=run.paths.repo,
                env=env,
                stdin=stdin_end,
                stdout=out_end,
                stderr=err_end,
                start_new_session=True,
            )
        else:
            started = sandbox.start(
                argv,
                plan,
                port=proxy.port,
                cwd=run.paths.repo,
                env=env,
                stdin=stdin_end,
                stdout=out_end,
                stderr=err_end,
            )
            process = started.process
            proxy.serve(started.listener)
    except BaseException:
        observer.stop()
        shutil.rmtree(private, ignore_errors=True)
        out_end.close()
        err_end.close()
        out.close()
        if stdin is not None:
            stdin.close()
        # What bwrap said before it gave up is the only word on why (the result names it).
        drain_socket(err, FileSink(run.paths.stderr)).join(timeout=5)
        raise
    finally:
        out_end.close()
        err_end.close()
        if stdin is not None:
            stdin_end.close()
    interrupt.ending = _ending(launch.label, launch.grace)
    interrupt.ending_now = _ending_now(launch.label)
    interrupt.now = functools.partial(_kill_run_now, run, process)
    processes = _run_processes(process, started)
    if proxy is not None:
        proxy.attribute(processes)
    talk = Talk(wire, stream, stdin, AcpSink(acp_stream) if acp else None)
    sink = {"stream": stream, "acp": talk.acp}.get(drive.stdout)
    drains = [
        drain_socket(out, sink or FileSink(run.paths.daemon_stdout)),
        drain_socket(err, FileSink(run.paths.stderr)),
    ]
    record: dict | None = None
    try:
        record = drive.wait(run, launch, process, started, watch, talk)
    finally:
        wall = round(time.monotonic() - watch.started, 3)
        stopped = _agent_runs(process, started)
        cleanup = end_run(run, process, launch.grace, in_sandbox=started is not None)
        interrupt.ending, interrupt.ending_now, interrupt.now = ENDING, ENDING_NOW, None
        if stdin is not None:
            stdin.close()
        # The tree is gone: whatever held the sockets' other ends is gone with it.
        for drained in drains:
            drained.join(timeout=10.0)
        observer.stop()
        processes.stop()
        exit_code = process.returncode
        if started is not None:
            # bwrap says 128 + n for a signal; the shim knows which it was.
            told = started.status.exit_status()
            started.status.close()
            exit_code = exit_code if told is None else told
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
        stderr_tail=stderr_tail(run.paths.stderr) if exit_code and not stopped else None,
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


def _run_processes(
    process: subprocess.Popen, started: sandbox.Started | None
) -> callers.RunProcesses:
    """The run's process tree as shell/callers.py judges it. Unsandboxed, it hangs from the runner
    (a subreaper: what detaches lands here); sandboxed, from the sandbox's init (bwrap's
    child, where what detaches lands) and the shim, whose child is the agent."""
    if started is None:
        return callers.RunProcesses((os.getpid(),), process.pid).start()
    inside = started.status.agent_pid(sandbox.START_TIMEOUT_S)
    # Inside, bwrap's init is pid 1 and the shim, its first child, pid 2.
    by_inside = {procs.namespace_pid(pid): pid for pid in procs.descendants_of((process.pid,))}
    init, shim, initial = (by_inside.get(ns, -1) for ns in (1, 2, inside))
    return callers.RunProcesses((init, shim), initial, network_of=init, diag=started.diag).start()


def _agent_runs(process: subprocess.Popen, started: sandbox.Started | None) -> bool:
    """Whether the agent's own process still runs. Sandboxed, `process` is bwrap, which
    lasts as long as anything the agent left (the shim waits for it all): the shim says
    when the agent itself ended."""
    if started is None:
        return process.poll() is None
    return process.poll() is None and started.status.exit_status() is None


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


def _run_marker(run: RunDir) -> tuple[str, str]:
    """The environment entry every process of the run inherits (shell/procs.py)."""
    return _run_marker_of(run.paths.agent_home)


def _run_marker_of(agent_home: str) -> tuple[str, str]:
    return ("PRIME_AGENT_CODING_AGENT_DIR", agent_home)


def _kill_run_now(run: RunDir, process: subprocess.Popen) -> None:
    """SIGKILL to every process of the run at once (a second Ctrl-C): `end_run`'s waits then
    find them gone, and its sweep reaps them."""
    procs.kill_now(procs.run_processes(process.pid, *_run_marker(run)))


def end_run(
    run: RunDir, process: subprocess.Popen, grace: float | None = None, in_sandbox: bool = False
) -> dict:
    """Shut the daemon down over its own socket, then end everything still running.

    `grace`, when given, replaces SHUTDOWN_ANSWER_S (down to MIN_ANSWER_S), SETTLE_S and
    TERM_GRACE_S. `in_sandbox`: the daemon's pids are the sandbox's; `sandbox_pids` in the
    record maps the pids here to those, for every process of the run seen while ending it."""
    answer, settle, term = _waits(grace)
    marker = _run_marker(run)
    inside: dict[int, int] = {}
    if in_sandbox:
        _note_inside(procs.run_processes(process.pid, *marker), inside)
    shutdown = daemon.shutdown_daemon(run.socket, answer)
    supervisor = shutdown.get("supervisor_pid")
    if in_sandbox and supervisor:
        supervisor = next((pid for pid, ns in inside.items() if ns == supervisor), None)
        shutdown["supervisor_host_pid"] = supervisor
    if shutdown.get("success") and supervisor == process.pid:
        # The resident drive's daemon is our own child: let Popen reap it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10.0)
        shutdown["exited"] = process.poll() is not None
    elif shutdown.get("success") and supervisor:
        shutdown["exited"] = not procs.wait_gone([supervisor], 10.0)
    owned = {process.pid: process}  # reaped by Popen, which keeps its exit status
    if shutdown.get("success"):
        # A forced shutdown ends every worker and kernel (§2); give them a moment
        # to finish exiting before anything is signalled.
        procs.wait_gone(procs.run_processes(process.pid, *marker), settle, owned)
    rounds = []
    for _ in range(3):
        remaining = procs.run_processes(process.pid, *marker)
        if in_sandbox and remaining - {process.pid}:
            # `process` is bwrap, which takes the whole sandbox down with it at once
            # (--die-with-parent, shell/sandbox.py): it is ended only once nothing else
            # is left, so that what runs inside gets its SIGTERM and grace first.
            remaining.discard(process.pid)
        elif process.poll() is None:
            remaining.add(process.pid)
        if not remaining:
            break
        if in_sandbox:
            _note_inside(remaining, inside)
        rounds.append(procs.end_processes(remaining, term, owned))
    process.poll()
    if process.returncode is not None:
        procs.reap_children(settle)
    leaked = sorted(procs.run_processes(process.pid, *marker))
    run.cleanup_tmp()
    return {
        "daemon_shutdown": shutdown,
        "terminated": sorted({pid for item in rounds for pid in item["terminated"]}),
        "killed": sorted({pid for item in rounds for pid in item["killed"]}),
        "leaked_processes": len(leaked),
        "leaked_pids": leaked,
        **(
            {"sandbox_pids": {str(pid): ns for pid, ns in sorted(inside.items())}}
            if in_sandbox
            else {}
        ),
    }


def end_detached(socket: str, agent_home: str, grace: float | None = None) -> dict:
    """End a run none of whose processes is the caller's child (a verifiers rollout's: its
    ACP client started the agent): the daemon shut down over the run's own socket, time for
    what it ends to exit, then SIGTERM and SIGKILL to every process still carrying the run's
    agent dir (its marker, as `end_run` finds them). What outlived it is in `leaked_pids`."""
    answer, settle, term = _waits(grace)
    key, value = _run_marker_of(agent_home)

    def marked() -> set[int]:
        return procs.with_environment(key, value, procs.process_table())

    shutdown = daemon.shutdown_daemon(socket, answer)
    supervisor = shutdown.get("supervisor_pid")
    if shutdown.get("success") and supervisor:
        # A forced shutdown ends every worker and kernel (§2 "Processes"): let it finish.
        shutdown["exited"] = not procs.wait_gone([supervisor], 10.0)
        procs.wait_gone(marked(), settle)
    remaining = marked()
    ended = procs.end_processes(remaining, term) if remaining else {}
    return {
        "daemon_shutdown": shutdown,
        "terminated": ended.get("terminated", []),
        "killed": ended.get("killed", []),
        "leaked_pids": sorted(marked()),
    }


def _note_inside(pids, inside: dict[int, int]) -> None:
    for pid in pids:
        ns = procs.namespace_pid(pid)
        if ns is not None:
            inside.setdefault(pid, ns)


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
