"""Who calls the model: the process behind each connection to the recording proxy, and
whether it is one of the product's own (docs/witness.md#who-calls-the-model).

Every model call must come from the product: the process the runner started (the one-shot
CLI or the resident daemon) or a process of the product's below it (its supervisor and
workers: prime-agent 0.8.0 keeps them below the CLI while it runs) — never a kernel, nor
anything a cell started. A cell that calls the proxy itself would get real response ids
for a conversation it forges.

The proxy's socket is on 127.0.0.1, in the sandbox's network or the runner's. When it
accepts a connection, `RunProcesses.identify` asks that network's kernel for the
connection's other end (sock_diag over netlink: the socket at the client's port, its
inode; where there is no such socket, the TCP table /proc/<pid>/net/tcp, which costs
milliseconds a call as the kernel walks its whole connection hash) and finds the
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
import struct
import sys
import threading
from dataclasses import asdict, dataclass

from swarm_fanout.shell import procs

POLL_S = 0.1
# sock_diag (linux/sock_diag.h, linux/inet_diag.h): one socket looked up by its addresses.
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
# inet_diag_msg: family, state, timer, retrans; the sockid (48 bytes, the ports first); four
# u32s; the inode.
_SOCKID_AT = _NLMSG_HEADER.size + 4
_INODE_AT = _SOCKID_AT + 48 + 16


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
    `network_of`: a process in the network the proxy's socket is in (None: the runner's).
    `diag`: a sock_diag socket of that network (the sandbox's shim opens one inside and
    hands it over; None there: the TCP table is read instead), closed by `stop`; the
    runner's own network's is opened here."""

    def __init__(
        self,
        top: tuple[int, ...],
        initial: int,
        network_of: int | None = None,
        diag: socket.socket | None = None,
    ):
        self.top = top
        self.initial = initial
        self.network_of = network_of
        self.diag = diag if diag is not None or network_of is not None else socket_diag()
        self._diag_lock = threading.Lock()
        self._sequence = 0
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
        if self.diag is not None:
            self.diag.close()

    def _loop(self) -> None:
        self.poll()
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self) -> dict[int, _Seen]:
        """Note what each process of the run runs now; returns them."""
        pids = procs.descendants_of(self.top)
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
            own_host, own_port = connection.getsockname()[:2]
        except OSError:
            return Caller(None, None, None, False, "the connection was gone before it was read")
        inode = self._diag_inode(peer_host, peer_port, own_host, own_port) or self._client_inode(
            peer_host, peer_port, own_port
        )
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

    def _diag_inode(self, host: str, port: int, server_host: str, server_port: int) -> int | None:
        """The client socket's inode as sock_diag tells it; None when there is no diag
        socket, or no answer (the TCP table then has the last word)."""
        if self.diag is None:
            return None
        with self._diag_lock:
            self._sequence += 1
            try:
                return diag_inode(
                    self.diag, self._sequence, (host, port), (server_host, server_port)
                )
            except (OSError, ValueError, struct.error):
                return None

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


def socket_diag() -> socket.socket | None:
    """A sock_diag socket of this process's network, or None where the kernel has none."""
    try:
        diag = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    diag.settimeout(1.0)
    return diag


def diag_inode(
    diag: socket.socket, sequence: int, local: tuple[str, int], remote: tuple[str, int]
) -> int | None:
    """The inode of the TCP socket (IPv4) whose own address is `local` and whose peer's is
    `remote`, in the network `diag` was opened in; None when there is none. A reply to an
    earlier request that timed out is skipped by its sequence number."""
    sockid = struct.pack(
        "!HH16s16s", local[1], remote[1], socket.inet_aton(local[0]), socket.inet_aton(remote[0])
    )
    sockid += struct.pack("=III", 0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)
    request = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
    request += sockid
    header = _NLMSG_HEADER.pack(
        _NLMSG_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, sequence, 0
    )
    diag.send(header + request)
    while True:
        reply = diag.recv(8192)
        _, kind, _, answered, _ = _NLMSG_HEADER.unpack_from(reply)
        if answered != sequence:
            continue
        if kind != SOCK_DIAG_BY_FAMILY:  # NLMSG_ERROR: no such socket
            return None
        # With no connection of those ports the kernel answers a socket listening on the
        # local one, which is no client's.
        if struct.unpack_from("!HH", reply, _SOCKID_AT) != (local[1], remote[1]):
            return None
        return struct.unpack_from("=I", reply, _INODE_AT)[0]


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
