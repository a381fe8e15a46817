"""Work spread over forked processes, given back in order: how a run set's trials regrade
side by side (docs/results.md "Regrading"), each trial's scoring a process of its own.

A fork copies this process as it stands, imports and all, so a worker starts in about a
millisecond. It is taken only in a process that runs no other thread: a fork copies the
calling thread alone, and a lock another thread held would stay held in the copy. Else,
and at one job, the work runs here, item after item, as it would without this module.

Each item's result (or the exception its work raised) comes back pickled through a pipe
of its own, with what the work wrote to stderr meanwhile, which is written here in the
items' order: the output is the same bytes at any number of jobs. No worker outlives the
call: when the caller stops reading (an early stop, an exception, Ctrl-C) the workers
still running are killed and reaped, and a worker whose parent died (SIGTERM, SIGKILL)
gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import selectors
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from shell.cli import print_note

Item = TypeVar("Item")
Result = TypeVar("Result")

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, which a container narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def in_order(work: Callable[[Item], Result], items: Sequence[Item], jobs: int) -> Iterator[Result]:
    """`work(item)` for each item, in the items' order, up to `jobs` of them at once in
    forked workers; an exception `work` raised is raised here, in its item's place."""
    if jobs <= 1 or len(items) <= 1 or threading.active_count() > 1:
        for item in items:
            yield work(item)
        return
    yield from _forked(work, items, jobs)


class WorkerLost(RuntimeError):
    """A worker ended without giving its result (killed, out of memory)."""


def _forked(work: Callable, items: Sequence, jobs: int) -> Iterator:
    selector = selectors.DefaultSelector()
    running: dict[int, tuple[int, int, list[bytes]]] = {}  # read fd -> (index, pid, chunks)
    done: dict[int, tuple[bytes, int]] = {}  # index -> (pickled outcome, wait status)
    started = given = 0
    try:
        while given < len(items):
            while started < len(items) and len(running) < jobs:
                read_fd, pid = _start(work, items[started], running)
                running[read_fd] = (started, pid, [])
                selector.register(read_fd, selectors.EVENT_READ)
                started += 1
            if given in done:
                yield _outcome(*done.pop(given))
                given += 1
                continue
            for key, _ in selector.select():
                index, pid, chunks = running[key.fd]
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    chunks.append(chunk)
                    continue
                selector.unregister(key.fd)
                os.close(key.fd)
                del running[key.fd]
                done[index] = (b"".join(chunks), os.waitpid(pid, 0)[1])
    finally:
        for read_fd, (_, pid, _) in running.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
        selector.close()


def _start(work: Callable, item: object, running: dict) -> tuple[int, int]:
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            for fd in running:  # the other workers' pipes, so that each ends at its writer
                os.close(fd)
            _worker(work, item, write_fd, parent)
        finally:
            os._exit(1)  # only reached when the worker itself failed
    os.close(write_fd)
    return read_fd, pid


def _worker(work: Callable, item: object, write_fd: int, parent: int) -> None:
    """Never returns: runs `work(item)`, writes its pickled outcome, exits."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)
    # Ctrl-C reaches the whole foreground process group: it is the caller's to act on (it
    # kills the workers on its way out), not each worker's to end its item with.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        try:
            outcome = ("returned", work(item))
        except Exception as error:
            outcome = ("raised", error)
    try:
        data = pickle.dumps((*outcome, captured.getvalue()))
        pickle.loads(data)  # an exception whose class cannot be rebuilt fails here, not there
    except Exception as error:
        failure = WorkerLost(f"the worker's outcome cannot be passed on: {error!r}")
        data = pickle.dumps(("raised", failure, captured.getvalue()))
    with open(write_fd, "wb") as pipe:
        pipe.write(data)
    os._exit(0)


def _outcome(data: bytes, status: int):
    if status != 0 or not data:
        raise WorkerLost(f"a worker ended without its result ({_status(status)})")
    kind, value, stderr = pickle.loads(data)
    for line in stderr.splitlines():
        print_note(line)
    if kind == "raised":
        raise value
    return value


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit {os.waitstatus_to_exitcode(status)}"
