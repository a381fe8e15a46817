"""Who calls the model: the process behind each connection to the recording proxy, and
whether it is one of the product's own (docs/witness.md#who-calls-the-model).

Every model call must come from the product: the process the runner started (the one-shot
CLI or the resident daemon) or a process of the product's below it (its supervisor and
workers: prime-agent 0.8.0 keeps them below the CLI while it runs) — never a kernel, nor
anything a cell started. A cell that calls the proxy itself would get real response ids
for a conversation it forges.

The proxy's socket is on 127.0.0.1, in the sandbox's network or the runner's. When it
accepts a connection, `RunProcesses.identify` finds the connection's other end in that
network's TCP table (/proc/<pid>/net/tcp: the client's port, its socket's inode) and the
processes of the run that hold that socket (/proc/<pid>/fd), then judges each by where it
sits in the run's process tree:

- walking up from it, the first process below the top of the run's tree (the runner, or in
  a sandbox its init and the shim) must be the process the runner started. A cell's process
  that double-forks to leave its kernel lands at the top itself;
- every process on the way must run the product's executable (the one the process the
  runner started runs at the first call; a wrapper script must `exec` the product) and
  never have been seen running another: a kernel is another
  program (the kernel Python), so a cell's process below it, or the kernel itself after an
  `exec` of the product's interpreter, is not the product. The run's processes are looked
  at every `POLL_S` (`start`) to see what each ran.

What a process holds, its parent and its executable are the kernel's to say, not the
process's. What this does not see: a product process a cell has taken over (ptrace, its
memory): the sandbox's seccomp filter and read-only /proc refuse that (shell/sandbox.py), an
unsandboxed run does not.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from dataclasses import asdict, dataclass

from shell import procs

POLL_S = 0.1


@dataclass(frozen=True)
class Caller:
    """The process behind one connection to the proxy, and the verdict on it."""

    pid: int | None  # in the runner's PID namespace; None: no process of the run holds it
    ns_pid: int | None  # the same process's pid inside the sandbox, when sandboxed
    exe: str | None
    product: bool
    reason: str | None  # why it is not the product's

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Seen:
    ppid: int
    started: int  # clock ticks after boot: with the pid, one process for good
    exe: str | None


def _look(pid: int) -> _Seen | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("utf-8", "replace")
        fields = raw[raw.rfind(")") + 2 :].split()
        state, ppid, started = fields[0], int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
    if state in ("Z", "X"):  # exited: holds nothing, runs nothing
        return None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    return _Seen(ppid, started, exe)


class RunProcesses:
    """The run's process tree, watched, and the product rule over it.

    `top`: the processes the run's tree hangs from (the runner; sandboxed, the sandbox's
    init and the shim). `initial`: the process the runner started (the CLI or the daemon).
    `network_of`: a process in the network the proxy's socket is in (None: the runner's)."""

    def __init__(self, top: tuple[int, ...], initial: int, network_of: int | None = None):
        self.top = top
        self.initial = initial
        self.network_of = network_of
        self.product_exe: str | None = None
        self._exes: dict[tuple[int, int], set[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="run-processes", daemon=True)

    def start(self) -> RunProcesses:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        self.poll()
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self) -> dict[int, _Seen]:
        """Note what each process of the run runs now; returns them."""
        table = procs.process_table()
        pids = set()
        for root in self.top:
            pids |= procs.descendants(root, table)
        seen = {pid: look for pid in pids if (look := _look(pid)) is not None}
        with self._lock:
            for pid, look in seen.items():
                if look.exe is not None:
                    self._exes.setdefault((pid, look.started), set()).add(look.exe)
        return seen

    def summary(self) -> dict:
        """For the witness header: what the rule took as the product."""
        return {"initial_pid": self.initial, "product_exe": self.product_exe}

    # --- one connection ---------------------------------------------------------------

    def identify(self, connection: socket.socket) -> Caller:
        """The caller of an accepted connection to the proxy."""
        try:
            peer_host, peer_port = connection.getpeername()[:2]
            _, own_port = connection.getsockname()[:2]
        except OSError:
            return Caller(None, None, None, False, "the connection was gone before it was read")
        inode = self._client_inode(peer_host, peer_port, own_port)
        seen = self.poll()
        with self._lock:
            if self.product_exe is None and self.initial in seen:
                # At the first call, not at the start: a wrapper script (the product's
                # `#!/bin/sh … exec node …`) has long since become the product.
                self.product_exe = seen[self.initial].exe
        holders = _holders(inode, seen) if inode is not None else []
        if not holders:
            return Caller(None, None, None, False, "no process of the run holds the connection")
        verdicts = [self._judge(pid, seen) for pid in holders]
        return next((caller for caller in verdicts if not caller.product), verdicts[0])

    def _client_inode(self, host: str, port: int, server_port: int) -> int | None:
        where = f"/proc/{self.network_of}/net/tcp" if self.network_of else "/proc/self/net/tcp"
        local = f"{_hex_address(host)}:{port:04X}"
        try:
            with open(where, encoding="ascii", errors="replace") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if (
                        len(fields) > 9
                        and fields[1] == local
                        and int(fields[2].rpartition(":")[2], 16) == server_port
                    ):
                        return int(fields[9])
        except (OSError, ValueError):
            return None
        return None

    def _judge(self, pid: int, seen: dict[int, _Seen]) -> Caller:
        look = seen.get(pid)
        ns_pid = procs.namespace_pid(pid)
        exe = look.exe if look else None

        def verdict(reason: str | None) -> Caller:
            return Caller(pid, ns_pid, exe, reason is None, reason)

        chain = []
        here = pid
        while here not in self.top:
            if here not in seen:
                return verdict("it is not a process of this run")
            chain.append(here)
            here = seen[here].ppid
        if not chain:
            return verdict("it is the sandbox's own plumbing, not the product")
        if chain[-1] != self.initial:
            return verdict("it does not descend from the process the runner started")
        with self._lock:
            product_exe = self.product_exe
            for step in chain:
                if step == self.initial:
                    break
                exes = self._exes.get((step, seen[step].started), set())
                if exes - {product_exe} or seen[step].exe != product_exe:
                    ran = ", ".join(sorted(exes | {seen[step].exe or "?"}))
                    return verdict(
                        f"process {step} on its way up ran {ran}, not the product's {product_exe}"
                    )
        return verdict(None)


def _hex_address(host: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the in-memory bytes, in hex."""
    packed = socket.inet_aton(host)
    return (packed[::-1] if sys.byteorder == "little" else packed).hex().upper()


def _holders(inode: int, seen: dict[int, _Seen]) -> list[int]:
    target = f"socket:[{inode}]"
    holders = []
    for pid in sorted(seen):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(f"/proc/{pid}/fd/{name}") == target:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders
