"""Process hygiene: no process the runner started may outlive the run.

The agent runs in its own session and process group. The product's supervisor
detaches itself (contract §2 "Processes"), and an agent with a shell can
double-fork, call setsid or clear its environment. So the runner looks three
ways for what is left: the agent's process group, its own descendants (it is a
child subreaper, so orphans are re-parented to it instead of to init), and any
process whose environment names this run's agent home.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import time
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux prctl)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    state: str


def process_table() -> dict[int, ProcessInfo]:
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        info = _stat(int(name))
        if info is not None:
            table[info.pid] = info
    return table


def _stat(pid: int) -> ProcessInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name may hold spaces or parentheses; fields start after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcessInfo(pid, int(fields[1]), int(fields[2]), fields[0])
    except (IndexError, ValueError):
        return None


def namespace_pid(pid: int) -> int | None:
    """The pid a process has inside the PID namespace it lives in (a sandbox's), or None
    when that is this one's (`NSpid` of /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"NSpid:"):
                    pids = line.split()[1:]
                    return int(pids[-1]) if len(pids) > 1 else None
    except (OSError, ValueError):
        return None
    return None


def alive(pid: int) -> bool:
    """Running or stopped; a zombie has already exited."""
    info = _stat(pid)
    if info is not None:
        return info.state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not os.path.isdir("/proc")


def descendants(root: int, table: dict[int, ProcessInfo]) -> set[int]:
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for pid in children.get(stack.pop(), []):
            if pid not in found:
                found.add(pid)
                stack.append(pid)
    return found


def descendants_of(roots) -> set[int]:
    """Every descendant of `roots`, read down from them through each thread's
    `/proc/<pid>/task/<tid>/children`: the cost is the run's processes, not every process
    on the machine, which matters to what looks at the run's tree ten times a second and
    at every model call (shell/callers.py). A kernel without those files
    (CONFIG_PROC_CHILDREN) gets `descendants` over the whole process table."""
    if not _children_files():
        table = process_table()
        return set().union(*(descendants(root, table) for root in roots))
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for pid in _children(stack.pop()):
            if pid not in found:
                found.add(pid)
                stack.append(pid)
    return found


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`: a child is listed under the thread that forked
    it, so every thread's file is read."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            continue
    return found


@functools.cache
def _children_files() -> bool:
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def with_environment(key: str, value: str, table: dict[int, ProcessInfo]) -> set[int]:
    """Processes whose environment has exactly `key=value` (the run's own marker)."""
    needle = f"{key}={value}".encode()
    found = set()
    for pid in table:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                entries = handle.read().split(b"\0")
        except OSError:
            continue
        if needle in entries:
            found.add(pid)
    return found


def run_processes(pgid: int, env_key: str, env_value: str) -> set[int]:
    """Every live process that belongs to this run, never this process itself."""
    table = process_table()
    me = os.getpid()
    found = descendants(me, table) | with_environment(env_key, env_value, table)
    found |= {info.pid for info in table.values() if info.pgid == pgid}
    found.discard(me)
    return {pid for pid in found if table.get(pid) and table[pid].state not in ("Z", "X")}


def reap(pids, owned: dict | None = None) -> None:
    """Collect exit statuses of any of `pids` that are our own children.

    `owned` maps pids to the `subprocess.Popen` that started them: those are
    reaped through it, so that it keeps their exit status (a bare waitpid would
    take it, and Popen would then report 0 for an agent ended by a signal).
    """
    for pid in pids:
        if owned and pid in owned:
            owned[pid].poll()
            continue
        with contextlib.suppress(OSError):  # not our child (ChildProcessError), or gone
            os.waitpid(pid, os.WNOHANG)


def reap_children(timeout: float) -> None:
    """Collect every exited child, those re-parented to us included, for up to `timeout`.

    As a subreaper we inherit the detached supervisor and whatever it forked;
    one that exits just as the run ends must not be left for init to collect.
    Call only once the agent's own Popen child has been reaped by Popen.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def wait_gone(pids, timeout: float, owned: dict | None = None) -> set[int]:
    deadline = time.monotonic() + timeout
    remaining = set(pids)
    while remaining:
        reap(remaining, owned)
        gone = {pid for pid in remaining if not alive(pid)}
        # A process can turn zombie between the reap and the alive check (a zombie
        # is gone): reap it once more, or its Popen never learns how it ended.
        reap(gone, owned)
        remaining -= gone
        if not remaining or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return remaining


def end_processes(pids, grace: float, owned: dict | None = None) -> dict:
    """SIGTERM, wait `grace`, SIGKILL what is left; returns what was done.

    `owned`: as for `reap`."""
    pids = sorted(pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    stubborn = sorted(wait_gone(pids, grace, owned))
    for pid in stubborn:
        _signal(pid, signal.SIGKILL)
    survivors = sorted(wait_gone(stubborn, 5.0, owned))
    return {"terminated": pids, "killed": stubborn, "survivors": survivors}


def kill_now(pids) -> None:
    """SIGKILL, no grace: what a second Ctrl-C asks for."""
    for pid in pids:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)
