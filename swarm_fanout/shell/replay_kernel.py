"""Replays one child's recorded cells in a kernel of its own (shell/replay.py starts it in a
fresh sandbox, with the product's kernel Python). Standard library only, and IPython where
the kernel Python has it: it runs on whatever Python the product's kernel is.

Started as `python -s -E -B -c BOOTSTRAP`, so that its `sys.path` starts with the working dir
as ipykernel's does (a module the parent wrote imports). It reads
`{"cells": [{"code": ..., "failed_in_run": bool}, ...]}` on stdin and writes one JSON object,
what the cells sent and how each ended, on the stdout it was given; the cells' own output goes
to a file in the sandbox's /tmp, unread.

The product's kernel API is a stand-in (docs/product-contract.md §9): `agent_message.send`
records what was sent and returns a receipt of the product's shape; `rlm.list_subagents()`
answers as for a child with no children; spawning, deleting, model calls and every other
call raise `NeedsProduct`. Sleeps return at once. With IPython the cells run as the kernel
runs them (`InteractiveShell.run_cell`: `!`, `%`, `%%`, top-level await); without it, as
Python with top-level await, `!cmd` lines and `%%bash` cells run by the shell, `%cd`.

Without IPython, asyncio (three quarters of this kernel's start-up) is not imported unless the
spec asks for it (`"asyncio": true`): a cell's top-level await that finishes without ever
suspending runs to its end as the loop would run it, and nothing can tell a loop was not there
without importing asyncio. The first import of asyncio, or an await that suspends, ends the
kernel at once with `{"needs_asyncio": true}`; shell/replay.py then replays the child again
from the start, in a fresh sandbox, with asyncio.
"""

import contextlib
import datetime
import json
import os
import re
import resource
import sys
import time
import types
from _ast import PyCF_ALLOW_TOP_LEVEL_AWAIT  # ast's, without the rest of ast

# subprocess and traceback are imported where they are first used (a `!` line, a cell's
# error), and neither ast nor uuid (which brings platform) is: a plain kernel's start-up is
# most of a replay's CPU, and they were a quarter of it.

NEEDS_PRODUCT = "needs the product"
OUTPUT_BYTES = 256 * 1024  # of each cell's output, what the replay reads


class NeedsProduct(RuntimeError):
    """A call of the product's kernel API the stand-in cannot answer: spawning, model calls."""


class Receipt(dict):
    """What `agent_message.send` returns: a dict, awaitable as the product's call is."""

    def __await__(self):
        return self._itself().__await__()

    async def _itself(self):
        return self


class Listing(list):
    """`rlm.list_subagents()`: no children, awaitable."""

    def __await__(self):
        return self._itself().__await__()

    async def _itself(self):
        return self


def _uuid4() -> str:
    """`str(uuid.uuid4())`: 16 random bytes, version 4, the RFC 4122 variant."""
    raw = bytearray(os.urandom(16))
    raw[6], raw[8] = raw[6] & 0x0F | 0x40, raw[8] & 0x3F | 0x80
    digits = raw.hex()
    return "-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:]))


class AgentMessage:
    """The stand-in `agent_message` skill: `send` is recorded, nothing is delivered."""

    def __init__(self, sent: list):
        self._sent = sent

    def send(self, message, receiver_role="parent", receiver_name=None, **_):
        text = str(message)
        self._sent.append(
            {"message": text, "receiver_role": receiver_role, "receiver_name": receiver_name}
        )
        now = datetime.datetime.now(datetime.timezone.utc)
        return Receipt(
            {
                "id": f"agentmsg_{_uuid4()}",
                "source": "agent_message",
                "target": {"runtimeKind": "top-level" if receiver_role == "parent" else "subagent"},
                "from": {"sessionName": "replay", "runtimeKind": "subagent", "clientId": "agent"},
                "message": text,
                "deliveryStatus": "queued",
                "queuedAt": now.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "deliveryMode": "steer",
            }
        )

    def __getattr__(self, name):
        raise NeedsProduct(f"agent_message.{name}() {NEEDS_PRODUCT}")


class Rlm:
    """The stand-in `rlm`: a child with no children, which cannot spawn without the product."""

    def __call__(self, *_, **__):
        raise NeedsProduct(f"rlm() {NEEDS_PRODUCT}")

    def list_subagents(self, *_, **__):
        return Listing()

    def __getattr__(self, name):
        raise NeedsProduct(f"rlm.{name}() {NEEDS_PRODUCT}")


def _no_sleep(*_, **__):
    return None


def _with_asyncio() -> None:
    """asyncio imported, its sleeps returning at once (after a turn of the loop)."""
    import asyncio

    real_sleep = asyncio.sleep

    async def no_async_sleep(_delay=0, result=None):
        await real_sleep(0)
        return result

    asyncio.sleep = no_async_sleep


class NeedsAsyncio:
    """On sys.meta_path in a kernel started without asyncio: the first import of it ends the
    kernel (`restart`), whatever the cell that imports it would catch."""

    def __init__(self, restart):
        self.restart = restart

    def find_spec(self, name, path=None, target=None):
        if name == "asyncio":
            self.restart()


class Reaching:
    """What the cells reached for that the replay withholds (PEP 578 audit hooks): a network
    connection, or a file to read, missing here, in the run's dir outside its repo or in
    /tmp (the run's tmp and the machine's /tmp are not in the sandbox). Recorded while a cell
    runs, so that the kernel's own start-up counts for nothing."""

    LIMIT = 20

    def __init__(self, run_root: str, repo: str, home: str):
        self.places = tuple(place for place in (run_root, "/tmp") if place and place != "/")
        # The repo copy, the sandbox's home, and the kernel Python's own install (it may lie
        # under /tmp; its imports look for bytecode that is not there).
        installs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        self.spared = (repo, home, *sorted(place for place in installs if place != "/"))
        self.found: list = []
        self.on = False

    def __call__(self, event: str, args: tuple) -> None:
        if not self.on or len(self.found) >= self.LIMIT:
            return
        if event == "socket.connect":
            self.found.append(f"a network connection to {args[1]!r}"[:200])
        elif event == "open" and isinstance(args[0], (str, bytes)):
            path, mode, flags = args
            reading = "r" in mode if isinstance(mode, str) else (flags or 0) & 3 == os.O_RDONLY
            path = os.fsdecode(path)
            if reading and self._withheld(os.path.abspath(path)) and not os.path.exists(path):
                self.found.append(path[:300])

    def _withheld(self, path: str) -> bool:
        def within(place: str) -> bool:
            return path == place or path.startswith(place.rstrip("/") + "/")

        return any(within(place) for place in self.places) and not any(
            within(place) for place in self.spared
        )


def _error(error: BaseException) -> dict:
    return {
        "type": type(error).__name__,
        "message": str(error)[:500],
        "needs_product": isinstance(error, NeedsProduct),
    }


# --- plain Python, where the kernel Python has no IPython ----------------------------------

SHELL_LINE = re.compile(r"^(?P<indent>\s*)(?:(?P<target>[A-Za-z_]\w*)\s*=\s*)?!(?P<command>.*)$")
MAGIC_LINE = re.compile(r"^(?P<indent>\s*)%(?P<name>\w+)\s*(?P<rest>.*)$")


class Expand(dict):
    """Expands `{name}` in a shell line from the cell's namespace, leaving the rest."""

    def __missing__(self, key):
        return "{" + key + "}"


def _shell(namespace: dict, command: str, capture: bool = False):
    import subprocess

    with contextlib.suppress(ValueError, IndexError, AttributeError):
        command = command.format_map(Expand(namespace))
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=capture, text=True)
    if capture:
        return done.stdout.splitlines()
    return None


def _translate(code: str) -> str:
    """A cell's `!` lines, `%cd` and `%time` lines and a `%%bash` cell as Python."""
    lines = code.splitlines()
    if lines and lines[0].strip() in ("%%bash", "%%sh", "%%script bash"):
        return f"__replay_shell__({chr(10).join(lines[1:])!r})\n"
    if lines and lines[0].startswith(("%%time", "%%capture")):
        lines = lines[1:]
    out = []
    for line in lines:
        shell = SHELL_LINE.match(line)
        magic = MAGIC_LINE.match(line)
        if shell and not shell.group("command").startswith("="):
            call = f"__replay_shell__({shell.group('command')!r}, {bool(shell.group('target'))})"
            target = f"{shell.group('target')} = " if shell.group("target") else ""
            out.append(f"{shell.group('indent')}{target}{call}")
        elif magic and magic.group("name") == "cd":
            out.append(f"{magic.group('indent')}__import__('os').chdir({magic.group('rest')!r})")
        elif magic and magic.group("name") in ("time", "timeit"):
            out.append(magic.group("indent") + magic.group("rest"))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _cannot_suspend() -> None:
    raise RuntimeError("a cell's await suspended where no asyncio loop runs")


class PlainKernel:
    """Cells as Python with top-level await: in an asyncio loop of its own where asyncio is
    imported already, else (see the module docstring) to their end without one, or not at all:
    `suspended` is called where a cell's await suspends."""

    def __init__(self, namespace: dict, suspended=None):
        self.namespace = namespace
        namespace["__replay_shell__"] = lambda command, capture=False: _shell(
            namespace, command, capture
        )
        self.loop = None
        self.suspended = suspended or _cannot_suspend
        if "asyncio" in sys.modules:
            self.loop = sys.modules["asyncio"].new_event_loop()
            sys.modules["asyncio"].set_event_loop(self.loop)

    def run(self, code: str) -> BaseException | None:
        try:
            compiled = compile(_translate(code), "<cell>", "exec", flags=PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, self.namespace)
            if isinstance(result, types.CoroutineType) and self.loop is not None:
                self.loop.run_until_complete(result)
            elif isinstance(result, types.CoroutineType):
                try:
                    result.send(None)
                except StopIteration:
                    pass
                else:
                    self.suspended()
        except BaseException as error:  # a cell's SystemExit is its failure, not ours
            import traceback

            traceback.print_exc()
            return error
        return None


class IPythonKernel:
    def __init__(self, namespace: dict):
        from IPython.core.interactiveshell import InteractiveShell

        self.shell = InteractiveShell.instance()
        self.shell.user_ns.update(namespace)

    def run(self, code: str) -> BaseException | None:
        result = self.shell.run_cell(code, store_history=True)
        return result.error_before_exec or result.error_in_exec


def main() -> int:
    spec = json.loads(sys.stdin.read())
    answer = os.fdopen(os.dup(1), "w")
    output = os.open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "replay-output.txt"),
                     os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)  # fmt: skip
    os.dup2(output, 1)
    os.dup2(output, 2)
    time.sleep = _no_sleep
    if spec.get("asyncio") or _findable("IPython"):
        _with_asyncio()

    def restart() -> None:
        _answer(answer, {"needs_asyncio": True})
        os._exit(0)

    sent: list = []
    namespace = {"__name__": "__main__", "agent_message": AgentMessage(sent), "rlm": Rlm()}
    try:
        kernel = IPythonKernel(namespace)
        ipython = True
    except ImportError:
        kernel = PlainKernel(namespace, suspended=restart)
        ipython = False
    if "asyncio" not in sys.modules:
        sys.meta_path.insert(0, NeedsAsyncio(restart))
    reaching = Reaching(str(spec.get("run_root") or ""), os.getcwd(), os.environ.get("HOME", ""))
    sys.addaudithook(reaching)
    cells = []
    for index, cell in enumerate(spec.get("cells", [])):
        before, start = len(sent), os.fstat(output).st_size
        reaching.on = True
        try:
            error = kernel.run(str(cell.get("code", "")))
        finally:
            reaching.on = False
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        end = os.fstat(output).st_size
        printed = os.pread(output, min(end - start, OUTPUT_BYTES), start)
        cells.append(
            {
                "index": index,
                "failed_in_run": bool(cell.get("failed_in_run")),
                "error": _error(error) if error is not None else None,
                "sent": sent[before:],
                "output": printed.decode("utf-8", "replace"),
            }
        )
    _answer(
        answer,
        {
            "ipython": ipython,
            "python": sys.version.split()[0],
            "reached": reaching.found,
            "cells": cells,
        },
    )
    return 0


def _findable(module: str) -> bool:
    """The module can be imported (it is not imported here)."""
    return any(
        finder.find_spec(module, None) is not None
        for finder in sys.meta_path
        if hasattr(finder, "find_spec")
    )


def _answer(answer, record: dict) -> None:
    """The kernel's one answer on the stdout it was given, with its CPU and PID namespace."""
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(usage.ru_utime + usage.ru_stime for usage in used)
    namespace = os.readlink("/proc/self/ns/pid")
    answer.write(json.dumps({**record, "cpu_s": cpu, "pid_namespace": namespace}))
    answer.flush()


if __name__ == "__main__":
    sys.exit(main())
