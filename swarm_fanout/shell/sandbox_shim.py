"""The shim: the sandbox's first process, the harness's own code (shell/sandbox.py starts it).

    python -I -S shell/sandbox_shim.py PORT HANDOFF_FD STATUS_FD -- ARGV

It hands the runner the proxy's listening socket on the sandbox's own loopback (and a
sock_diag socket of the sandbox's network, with which the runner finds each caller's
socket: shell/callers.py), then runs the agent and reports how it ended. Stdlib only: it
runs on the runner's interpreter with nothing of the harness on its path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
NETLINK_SOCK_DIAG = 4
IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    """Bind 127.0.0.1:PORT here, send the listening socket (and a sock_diag socket, where
    the kernel has one) over HANDOFF_FD (SCM_RIGHTS), fork the agent (ARGV) and write
    `started <pid>`, then `exit <code>` or `signal <n>`, on STATUS_FD.

    It makes itself undumpable first, so no process of the agent's can open its fds (the
    status pipe) or read its memory; it ignores SIGTERM, SIGINT and SIGHUP, so that when the
    runner ends the run it outlives the agent long enough to report the agent's own exit
    status (bwrap reports a signal as 128 + n, which an exit code could also be). It is the
    subreaper of the agent's processes, and exits only when the last of them has."""
    port, handoff, status = int(argv[0]), int(argv[1]), int(argv[2])
    command = argv[4:]
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(1024)
    handed = [listener]
    with contextlib.suppress(OSError):
        handed.append(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG))
    with socket.socket(fileno=handoff) as channel:
        socket.send_fds(channel, [b"L"], [sock.fileno() for sock in handed])
    for sock in handed:
        sock.close()
    os.set_inheritable(status, False)
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        for signum in IGNORED:
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as error:
            os.write(2, f"sandbox: cannot run {command[0]}: {error}\n".encode())
            os._exit(127)
    os.write(status, f"started {pid}\n".encode())
    wait_status = _wait(pid)
    if os.WIFSIGNALED(wait_status):
        os.write(status, f"signal {os.WTERMSIG(wait_status)}\n".encode())
        code = 128 + os.WTERMSIG(wait_status)
    else:
        code = os.waitstatus_to_exitcode(wait_status)
        os.write(status, f"exit {code}\n".encode())
    # What the agent left running is reparented here (a subreaper): the sandbox lasts until
    # the runner has ended it too, for bwrap ends the sandbox with the shim (and the shim
    # with the runner: --die-with-parent).
    with contextlib.suppress(ChildProcessError):
        while True:
            _wait(-1)
    return code


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
