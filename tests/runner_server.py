"""runner.py for the end-to-end tests, forked from an interpreter that has imported it already.
Not a test module: tests/runner_case.py runs its runs through it.

A test runs runner.py as a user does: a process of its own, with its argv, cwd, environment,
stdin, stdout and stderr, its exit code, its signals and its children. Started as
`python runner.py`, each run first pays for a new interpreter importing the whole harness
(about 0.1 s of CPU, a fifth of a simulated run's), and the suite starts a few hundred. So
`run` hands the run to a server, one per test process, started on first use: it has
imported runner.py once, and forks a child per run that takes the run's fds, cwd, argv and
environment and ends as runner.py's `__main__` does, `sys.exit(runner.main(argv))`, through
the interpreter's own exit (threads joined, stdio flushed). The runner's own children (the
agent, a run set's trials, the sandbox) start as they always do.

The server has one thread, so a fork copies the whole of it; it reaps its children and
tells each run's caller how the run ended. It ends when its control socket closes: at the
end of the test module (`stop`), or with the test process.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "runner.py")

_lock = threading.Lock()
_server: subprocess.Popen | None = None
_control: socket.socket | None = None
_server_env: dict[str, str] = {}


def run(argv: list[str], *, cwd: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, RUNNER, *argv], cwd=cwd, env=env,
    stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)`, forked from the
    server: as there, stdout and stderr are pipes read to their end (a process left holding
    one keeps the run from ending), and a run past its timeout is killed."""
    with Started(argv, cwd=cwd, env=env) as run:
        stdout, stderr = run.communicate(timeout)
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


class Started:
    """runner.py forked from the server and running, as `subprocess.Popen([sys.executable,
    RUNNER, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=PIPE, stderr=PIPE)`
    starts it, stdout and stderr pipes unless given an fd: its pid, pipes, send_signal,
    kill and communicate (its exit status is the server's word: it is the server's child)."""

    def __init__(self, argv: list[str], *, cwd: str, env: dict, **fds: int):
        control = _started()
        # Python reads these only as it starts: a run that sets one otherwise than the server
        # was started with would not get what `python runner.py` gets.
        python = {name for name in {*env, *_server_env} if name.startswith("PYTHON")}
        if any(env.get(name) != _server_env.get(name) for name in python):
            raise ValueError("a PYTHON* variable differs from the server's: run runner.py itself")
        self.args, self.returncode, self.pipes = [RUNNER, *argv], None, {}
        self.ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for name in ("stdout", "stderr"):
            if name not in fds:
                read_end, fds[name] = os.pipe()
                self.pipes[name] = os.fdopen(read_end, "rb", buffering=0)
        self.stdout, self.stderr = self.pipes.get("stdout"), self.pipes.get("stderr")
        try:
            with theirs, open(os.devnull, "rb") as null, _lock:
                request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
                sent = [theirs.fileno(), null.fileno(), fds["stdout"], fds["stderr"]]
                socket.send_fds(control, [request], sent)
            self.pid = int(_said(self.ours, "pid", time.monotonic() + 60))
        except BaseException:
            self.close()
            raise
        finally:
            for name in self.pipes:
                os.close(fds[name])

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float) -> tuple[bytes, bytes]:
        """What is left on its stdout and stderr pipes (b"" for an fd given), once both have
        ended and it has exited; past `timeout` it is killed."""
        deadline = time.monotonic() + timeout
        chunks = {pipe.fileno(): [] for pipe in self.pipes.values()}
        reading = set(chunks)
        while reading or self.returncode is None:
            waiting = [*reading, *([self.ours] if self.returncode is None else [])]
            ready = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready:
                self.kill()
                raise subprocess.TimeoutExpired(self.args, timeout)
            for fd in ready:
                if fd is self.ours:
                    status = int(_said(self.ours, "exit", deadline))
                    self.returncode = os.waitstatus_to_exitcode(status)
                elif data := os.read(fd, 65536):
                    chunks[fd].append(data)
                else:
                    reading.discard(fd)
        out, err = (b"".join(chunks[p.fileno()]) if p else b"" for p in (self.stdout, self.stderr))
        return out, err

    def close(self) -> None:
        for held in (self.ours, *self.pipes.values()):
            held.close()

    def __enter__(self) -> Started:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def _said(reply: socket.socket, word: str, deadline: float) -> str:
    """The server's next word on a run: `pid N` once it has forked it, `exit STATUS`."""
    reply.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        said = reply.recv(64).decode().split()
    except TimeoutError:
        said = []
    if len(said) != 2 or said[0] != word:
        raise RuntimeError(f"the runner server said {said!r}, not {word}")
    return said[1]


def _started() -> socket.socket:
    global _server, _control
    with _lock:
        if _server is None:
            _server_env.clear()
            _server_env.update(os.environ)
            _control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            with theirs:
                # Run as a module from the repo: the repo first on the path, as it is for
                # `python runner.py`.
                _server = subprocess.Popen(
                    [sys.executable, "-m", "tests.runner_server", str(theirs.fileno())],
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    pass_fds=[theirs.fileno()],
                )
            unittest.addModuleCleanup(stop)
        return _control


def stop() -> None:
    """End the server (and any run it still has)."""
    global _server, _control
    with _lock:
        if _server is not None:
            _control.close()
            _server.wait()
            _server = _control = None


# --- the server's side ------------------------------------------------------------------


def serve(control_fd: int) -> None:
    from swarm_fanout import runner  # the point of the server: once, here

    control = socket.socket(fileno=control_fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    runs: dict[int, socket.socket] = {}
    while True:
        ready = select.select([control, wake_read], [], [])[0]
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_read, 4096):
                    pass
            _report_ended(runs)
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
        if not message:
            break
        reply, *stdio = fds
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_read, wake_write, reply):
                os.close(fd)
            for held in (control, *runs.values()):
                held.close()
            _become_the_run(runner, json.loads(message), stdio)
        for fd in stdio:
            os.close(fd)
        runs[pid] = socket.socket(fileno=reply)
        with contextlib.suppress(OSError):
            runs[pid].send(f"pid {pid}".encode())
    for pid in runs:
        os.kill(pid, signal.SIGKILL)
    while runs:
        _report_ended(runs, block=True)


def _report_ended(runs: dict[int, socket.socket], block: bool = False) -> None:
    while runs:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        reply = runs.pop(pid, None)
        if reply is not None:
            # A caller past its timeout has gone already.
            with reply, contextlib.suppress(OSError):
                reply.send(f"exit {status}".encode())


def _become_the_run(runner, request: dict, stdio: list[int]) -> None:
    """In the forked child: take the run's fds, cwd, environment and argv, and end as
    `python runner.py` ends."""
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from this environment's TMPDIR
    sys.argv = [RUNNER, *request["argv"]]
    sys.exit(runner.main(request["argv"]))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
