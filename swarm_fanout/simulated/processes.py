"""The process tricks of the simulated agent: the double fork and setsid of the product's
detached supervisor, and what the hang, hold-files and escape behaviours leave behind
(SIGTERM-ignoring grandchildren, a detached process with an empty environment) for the
harness to find and end.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import NoReturn

from swarm_fanout.simulated.product import log

# A safety net only: the harness must end what these leave behind.
ESCAPED_LIFETIME_S = 600


def detach(body) -> int:
    """Double fork + setsid, like the product's detached supervisor; returns the pid.

    body(ready) runs in the detached process with its std fds on /dev/null. The pid is
    returned once the process calls ready() or execs (the pipe is close-on-exec).
    """
    sys.stdout.flush()
    read_end, write_end = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        os.close(read_end)
        os.setsid()
        pid = os.fork()
        if pid:
            os.write(write_end, str(pid).encode())
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        try:
            body(lambda: os.close(write_end))
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(intermediate, 0)
    data = b""
    while select.select([read_end], [], [], 10)[0]:
        chunk = os.read(read_end, 64)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    if not data:
        raise RuntimeError("the detached process did not start")
    return int(data)


def ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def hang(env: Mapping[str, str]) -> NoReturn:
    """Never returns: a grandchild in the worker's process group that ignores SIGTERM (the
    ignored disposition survives exec) and has the worker's env, and the worker sleeping
    with default SIGTERM handling."""
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(3600)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=ignore_sigterm,
    )
    log(f"grandchild pid={grandchild.pid}")
    while True:
        time.sleep(3600)


def hold_files() -> None:
    """Leaves a grandchild that ignores SIGTERM and keeps this process's stdout and stderr
    (the run's output files) open after the CLI has exited."""
    grandchild = subprocess.Popen(
        [sys.executable, "-c", f"import time\ntime.sleep({ESCAPED_LIFETIME_S})"],
        stdin=subprocess.DEVNULL,
        preexec_fn=ignore_sigterm,
    )
    log(f"holding pid={grandchild.pid}")


def escape() -> None:
    """Leaves a detached process that ignores SIGTERM and has an empty environment, so it
    cannot be found by the agent dir in /proc/<pid>/environ."""

    def body(_ready) -> None:  # exec closes the ready pipe: the pid is reported after exec
        ignore_sigterm()
        code = f"import time\ntime.sleep({ESCAPED_LIFETIME_S})"
        os.execve(sys.executable, [sys.executable, "-c", code], {})

    log(f"escaped pid={detach(body)}")


BREAKOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "breakout.py")


def breakout(model_url: str, report: str, env: Mapping[str, str], cwd: str) -> None:
    """Runs the breakout cell (simulated/breakout.py) as a real cell runs: in a process below
    the kernel, which the product starts and which is another program than the product
    (the kernel Python); a shell plays it here (`; exit` keeps it from exec-ing the cell)."""
    target = {"cli_pid": os.getpid(), "model": model_url, "report": report}
    subprocess.run(
        ["/bin/sh", "-c", '"$0" "$@"; exit $?', sys.executable, BREAKOUT, json.dumps(target)],
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
