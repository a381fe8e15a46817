#!/usr/bin/env python3
"""An executable stand-in for the prime-agent v0.8.0 CLI, in its two headless modes.

    simulated/agent.py --mode json --daemon-socket S --cwd DIR --session-dir DIR \\
        --model simulated/<behaviour> -- "<task>"
        One-shot: starts a detached daemon supervisor on S (answering `daemon_hello` and an
        enveloped `shutdown`), runs the root session and prints the --mode json stream,
        then returns at the root's first idle point and stops the worker (contract §1 fact 4).

    simulated/agent.py --mode acp --daemon-socket S --cwd DIR --session-dir DIR \\
        --model simulated/<behaviour>
        The Agent Client Protocol on stdio (contract §13, simulated/acp.py): starts the detached
        supervisor as one-shot does, then initialize, session/new, session/prompt (answered at
        the root's first idle point, the terminal-quiescence update following once every child
        has settled) and session/close; EOF on stdin ends it.

    simulated/agent.py --mode daemon --daemon-socket S
        A foreground daemon speaking protocol 7 on S (contract §8), for the resident drive:
        create{lifecycle:"resident", config:{cwd, agentDir, sessionDir, model}, launchEnv},
        attach, prompt, prompt_and_wait, wait_for_headless_completion{waitForRlmQuiescence},
        get_state, detach, ack_result and shutdown{force:true}. Root events go to attached
        clients as session_event envelopes. The behaviour comes from config.model.

Either way it leaves on disk what a real run leaves (docs/product-contract.md §3-§9 and captured
runs in tests/data/real-runs): the root transcript, one transcript and display file per RLM
child, the spawn ledger and the agent's combined-index.md. `simulated/<behaviour>` picks how the
simulated model orchestrates (listed by --help, see BEHAVIOURS in simulated/run.py). The children
really answer their shard's question, from their own task prompt. Three behaviours play an agent
with a shell that fakes delegation by writing the product's files itself, to exercise the harness's
evidence-integrity checks: forge-ledger (no spawn; a hand-written ledger, header-and-task child
transcripts and replies), junk-replies (real children that reply junk; the parent computes the
index) and zero-work-children (real spawns whose children never call the model; the parent
replies in their names).

For repeated trials (runner.py --trials): $SWARM_FANOUT_TRIAL names the trial and seeds its
draws; $SIMULATED_JITTER_MS makes each child wait a seeded random time up to that long before
it answers; a prompt that says "Do not spawn subagents" (runner.py --baseline) is answered by
the root itself from the shard files, whatever the behaviour (nop still does nothing).

This file is the command line and the supervisor; the rest lives beside it in the simulated
package: cells.py (the root's spawning cell), product.py (the product's formats), run.py (the
simulated model), processes.py (the process tricks) and daemon.py (the daemon), none of which
imports this file. The task and the cells that answer it are the task language of fixtures/tasks.py,
shared with the fixture generator and the scripted model. Stdlib only, and none of them
imports anything else from the harness: it plays the product, so it carries its own copy of
the product's rules (for example the ledger key).
"""

from __future__ import annotations

import sys

from swarm_fanout.simulated import VERSION_LINE

if __name__ == "__main__" and sys.argv[1:] == ["--version"]:
    print(VERSION_LINE)  # before the imports below: the runner asks before every run
    sys.exit(0)

import os
import socket
from dataclasses import dataclass, field
from typing import NoReturn

from swarm_fanout.simulated.acp import AcpAgent
from swarm_fanout.simulated.daemon import Daemon
from swarm_fanout.simulated.kernel import run_startup_files
from swarm_fanout.simulated.processes import detach
from swarm_fanout.simulated.product import bind_worker_socket, log, worker_sessions_dir
from swarm_fanout.simulated.run import BEHAVIOURS, UsageError, behaviour_of, one_shot_run


@dataclass
class Options:
    help: bool = False
    version: bool = False
    mode: str | None = None
    daemon_socket: str | None = None
    cwd: str | None = None
    session_dir: str | None = None
    model: str | None = None
    prompts: list[str] = field(default_factory=list)


# --- processes: the supervisor -------------------------------------------------------------


def default_socket() -> str:
    """`$TMPDIR/prime-agent-<uid>/daemon.sock` (contract §2)."""
    tmp = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(tmp, f"prime-agent-{os.getuid()}", "daemon.sock")


def daemon_socket_path(options: Options) -> str:
    socket_path = os.path.abspath(options.daemon_socket or default_socket())
    os.makedirs(os.path.dirname(socket_path), mode=0o700, exist_ok=True)
    return socket_path


def listen(socket_path: str) -> socket.socket:
    """The daemon socket, mode 0600 (contract §8.1)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        listener.bind(socket_path)
    except OSError as error:
        raise UsageError(f"cannot listen on daemon socket {socket_path}: {error}") from error
    finally:
        os.umask(umask)
    listener.listen()
    return listener


def start_supervisor(socket_path: str, cwd: str) -> int:
    """Listens on the socket before detaching, so the CLI goes on only once the supervisor
    accepts connections. It keeps the CLI's env and runs in --cwd (contract §2)."""
    listener = listen(socket_path)
    pid = detach(lambda ready: supervise(listener, socket_path, cwd, ready))
    listener.close()
    return pid


def supervise(listener: socket.socket, socket_path: str, cwd: str, ready) -> NoReturn:
    os.chdir(cwd)
    ready()
    Daemon(socket_path, os.path.abspath(__file__)).serve(listener)


def run_daemon(options: Options) -> NoReturn:
    """--mode daemon: the daemon in the foreground, in the caller's process group, until
    shutdown{force:true} (contract §8.2 "To own the supervisor")."""
    if options.prompts:
        raise UsageError("--mode daemon takes no prompt")
    socket_path = daemon_socket_path(options)
    listener = listen(socket_path)
    log(f"daemon pid={os.getpid()}")
    Daemon(socket_path, os.path.abspath(__file__)).serve(listener)


# --- the command line (contract §2) -----------------------------------------------------------

VALUE_OPTIONS = {
    "--mode": "mode",
    "--daemon-socket": "daemon_socket",
    "--cwd": "cwd",
    "--session-dir": "session_dir",
    "--model": "model",
}


def help_text() -> str:
    width = max(map(len, BEHAVIOURS))
    behaviours = "".join(f"    {name:<{width}}  {what}\n" for name, what in BEHAVIOURS.items())
    title = "Behaviours (--model simulated/<behaviour>, or a create's config.model):"
    return f"{__doc__}\n{title}\n{behaviours}"


def say(text: str) -> None:
    """Print to stdout; a reader that closed it early (`--help | head`) loses only the rest:
    stdout then points at devnull, so the interpreter's own flush at exit cannot raise."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def parse_args(argv: list[str]) -> Options:
    """Options first, then `--`, then the prompt as one argument.

    An unknown --flag is an extension flag that eats the next argument unless that starts
    with `-` or `@`.
    """
    options = Options()
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            options.prompts.extend(rest)
            break
        if arg in ("--help", "-h"):
            options.help = True
        elif arg == "--version":
            options.version = True
        elif arg == "--offline":
            continue  # the simulation makes no network use anyway
        elif arg in VALUE_OPTIONS:
            if not rest:
                raise UsageError(f"{arg} needs a value")
            setattr(options, VALUE_OPTIONS[arg], rest.pop(0))
        elif arg.startswith("--"):
            if rest and rest[0][:1] not in ("-", "@"):
                rest.pop(0)
        else:
            options.prompts.append(arg)
    return options


def validate(options: Options) -> str:
    behaviour = behaviour_of(options.model)
    if options.mode not in ("json", "acp"):
        raise UsageError("the simulation runs as --mode json, --mode acp or --mode daemon")
    if options.mode == "json" and len(options.prompts) != 1:
        raise UsageError("pass exactly one prompt after --")
    if options.mode == "acp" and options.prompts:
        raise UsageError("--mode acp takes its prompts over ACP, not on the command line")
    if options.cwd is not None and not os.path.isdir(options.cwd):
        raise UsageError(f"--cwd {options.cwd} is not a directory")
    return behaviour


def main(argv: list[str]) -> int:
    try:
        options = parse_args(argv)
        if options.help:
            say(help_text())
            return 0
        if options.version:
            say(VERSION_LINE)
            return 0
        run_startup_files()  # as each of the product's kernels does at start-up
        if options.mode == "daemon":
            run_daemon(options)
        behaviour = validate(options)
        cwd = os.path.abspath(options.cwd or ".")
        socket_path = daemon_socket_path(options)
        log(f"supervisor pid={start_supervisor(socket_path, cwd)}")
    except UsageError as error:
        log(str(error))
        return 1
    # The root runs in a session worker, which must bind its socket (the product's CLI
    # then fails with this, after 30 s, and exits 1).
    refused = bind_worker_socket(socket_path, os.environ)
    if refused:
        log(f'Error: waiting for the daemon response to "create": {refused}')
        return 1
    agent_dir = os.environ.get("PRIME_AGENT_CODING_AGENT_DIR") or os.path.expanduser(
        "~/.prime/agent"
    )
    # --session-dir > env > <agentDir>/sessions places the root transcript (contract §2).
    sessions_dir = os.path.abspath(
        options.session_dir or worker_sessions_dir(agent_dir, os.environ)
    )
    if options.mode == "acp":
        # The worker runs in --cwd, as the supervisor does (contract §2).
        os.chdir(cwd)
        AcpAgent(cwd, agent_dir, sessions_dir, behaviour).serve()
        sys.stdout.flush()
        os._exit(0)  # at EOF, as the product does: the session's threads end with it
    one_shot_run(cwd, sessions_dir, behaviour, agent_dir).respond(options.prompts[0])
    return 0


def console() -> None:
    """The installed command `swarm-fanout-simulated-agent` (a wheel keeps no executable bit,
    so this file is no `--agent-bin` once installed)."""
    sys.exit(main(sys.argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
