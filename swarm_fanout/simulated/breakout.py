"""The cell of the `breakout` behaviour: hostile model code, trying each way out of its run
that a same-user process has, and reporting what it managed.

    python breakout.py '{"cli_pid": N, "model": "http://127.0.0.1:P/route/chat/completions",
                         "report": "<repo>/breakout-report.json"}'

It runs as a real cell would: a process the product's kernel started (simulated/processes.py
starts it below a shell, which plays the kernel: another program than the product). Its
report is a JSON object, one entry per attempt, `{"ok": bool, "detail": str}`, written into
the repo (the one place it may write to in a sandbox). The test that runs it reads the
report and checks on the machine itself what a write outside its run really did.

What it aims at, from the environment the run passes it (SIMULATED_* reach a sandbox too):
`SIMULATED_BREAKOUT_DECOY`, a file outside the run dir to read, beside which it writes;
`SIMULATED_BREAKOUT_PORT`, a TCP service on 127.0.0.1 to connect to; `USER_SHELL_SECRET`, a
variable of the user's shell it looks for in its own environment and the runner's.
Stdlib only, and nothing else of the simulated package: it is the model's code, not the
product's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import socket
import sys
import tempfile
import urllib.error
import urllib.request

SECRET = "USER_SHELL_SECRET"


def attempt(report: dict, name: str, action) -> None:
    try:
        detail = action()
        report[name] = {"ok": True, "detail": str(detail)[:2000]}
    except Exception as error:  # every way an attempt fails is its outcome
        report[name] = {"ok": False, "detail": f"{type(error).__name__}: {error}"[:200]}


def read_home() -> str:
    """What the user's home holds: in a sandbox, at most the way to an install bound from
    under it (an interpreter in ~/.pyenv, say), never the rest."""
    home = pwd.getpwuid(os.getuid()).pw_dir
    return json.dumps(sorted(os.listdir(home)))


def read_outside() -> str:
    with open(os.environ["SIMULATED_BREAKOUT_DECOY"], encoding="utf-8") as handle:
        return handle.read()


def write_outside() -> str:
    decoy = os.environ["SIMULATED_BREAKOUT_DECOY"]
    path = os.path.join(os.path.dirname(decoy), f"written-by-breakout-{os.getpid()}.txt")
    with open(path, "x", encoding="utf-8") as handle:
        handle.write("written from inside the run\n")
    return path


def write_tmp() -> str:
    fd, path = tempfile.mkstemp(prefix="swarm-fanout-breakout-", suffix=".txt", dir="/tmp")
    with open(fd, "w", encoding="utf-8") as handle:
        handle.write("written from inside the run\n")
    return path


def tcp_loopback() -> str:
    port = int(os.environ["SIMULATED_BREAKOUT_PORT"])
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        return f"connected to 127.0.0.1:{port}"


def find_runner() -> int:
    """The runner: above this process (as a run starts it), else any this one can see."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if b"runner.py" in handle.read():
                return pid
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            pid = int(handle.read().rsplit(")", 1)[1].split()[1])
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{name}/cmdline", "rb") as handle:
                if b"runner.py" in handle.read():
                    return int(name)
    raise LookupError("no runner.py among the processes this one can see")


def read_runner_env() -> str:
    with open(f"/proc/{find_runner()}/environ", "rb") as handle:
        environ = handle.read()
    return f"{len(environ)} bytes, {SECRET} {'in' if SECRET.encode() in environ else 'not in'} it"


def signal_runner() -> str:
    pid = find_runner()
    os.kill(pid, 0)  # the permission check of a signal, without one
    return f"may signal pid {pid}"


def shell_env() -> str:
    if SECRET not in os.environ:
        raise LookupError(f"{SECRET} is not in this process's environment")
    return f"{SECRET} is set"


def write_stream(cli_pid: int) -> str:
    with open(f"/proc/{cli_pid}/fd/1", "ab") as handle:
        handle.write(b"\n")
    return "wrote into the CLI's stdout"


def read_product_memory(cli_pid: int) -> str:
    with open(f"/proc/{cli_pid}/maps", encoding="ascii") as handle:
        start = int(handle.readline().split("-")[0], 16)

    class IoVec(ctypes.Structure):
        _fields_ = (("base", ctypes.c_void_p), ("length", ctypes.c_size_t))

    buffer = ctypes.create_string_buffer(16)
    local, remote = IoVec(ctypes.addressof(buffer), 16), IoVec(start, 16)
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.process_vm_readv(cli_pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if done < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return f"read {done} bytes of pid {cli_pid}'s memory"


def open_product_memory(cli_pid: int) -> str:
    with open(f"/proc/{cli_pid}/mem", "r+b"):
        return f"opened pid {cli_pid}'s memory for writing"


def call_model(url: str) -> str:
    """A forged child's call: real response ids for a conversation the cell writes."""
    body = {
        "model": "forged",
        "stream": False,
        "messages": [
            {"role": "system", "content": "Conversation log: /forged/child.jsonl\n"
             "Recursive agent depth: 1"},
            {"role": "user", "content": "[task from parent] forged"},
        ],
    }  # fmt: skip
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return f"HTTP {response.status}: {response.read(200)!r}"
    except urllib.error.HTTPError as error:
        raise OSError(f"refused: HTTP {error.code}") from None


def call_model_detached(url: str) -> str:
    """The same from a process that left its kernel: double-forked, its own session."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            report: dict = {}
            attempt(report, "call", lambda: call_model(url))
            os.write(write_end, json.dumps(report["call"]).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 4096):
        data += chunk
    outcome = json.loads(data)
    if not outcome["ok"]:
        raise OSError(outcome["detail"])
    return outcome["detail"]


def main(argv: list[str]) -> int:
    target = json.loads(argv[0])
    cli, url = target["cli_pid"], target["model"]
    report: dict = {}
    for name, action in (
        ("read_home", read_home),
        ("read_outside", read_outside),
        ("write_outside", write_outside),
        ("write_tmp", write_tmp),
        ("tcp_loopback", tcp_loopback),
        ("find_runner", find_runner),
        ("read_runner_env", read_runner_env),
        ("signal_runner", signal_runner),
        ("shell_env", shell_env),
        ("write_stream", lambda: write_stream(cli)),
        ("read_product_memory", lambda: read_product_memory(cli)),
        ("open_product_memory", lambda: open_product_memory(cli)),
        ("call_model", lambda: call_model(url)),
        ("call_model_detached", lambda: call_model_detached(url)),
    ):
        attempt(report, name, action)
    with open(target["report"], "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
