"""The kernel's own record of what it did (docs/witness.md "What each kernel did"): a PEP 578
audit hook that each of the run's kernels installs before its first cell, and that appends
to `<record dir>/<session>-<pid>.jsonl` every file it opens (path, read or write), every
rename, every connection (address) and every program it starts (argv), once each.

Standard library only: it runs in the product's kernel Python. The runner puts it in the
run's HOME and a two-line IPython startup file that runs it (rundir.RunDir.install_record),
so every IPython kernel the product starts, forked from its template or started on its own,
runs it at start-up (the product applies the session's environment before, contract §11).
The simulated agent runs the same startup file.

A kernel tells which session it serves by `RLM_SESSION_DIR` in its environment: the root's
artifact dir, named by its header id, or a child's `sub-<8 hex>` dir (contract §11 "The
kernel's session"); `<session>` is that dir's name. The hook reads it at each event, so a
process with none (the product's kernel template, a process the cell cleared it in) records
nothing, and the process id at each event, so a process a cell forks writes a record of its
own. The Python install's own files and the directories on its `sys.path` at start-up
(imports, the product's skills) are left out, as are /proc, /sys and /dev.
"""

import json
import os
import sys

OPEN, CONNECT, EXEC, RENAME = "open", "connect", "exec", "rename"
LIMIT = 20_000  # entries per record: a cell that opens files in a loop cannot fill the disk


class KernelRecord:
    def __init__(self, directory: str):
        self.directory = os.path.abspath(directory)
        # The Python install and what its path holds (the product's skills), but for a
        # place that holds the working dir (the repo, whose modules a cell may import).
        cwd = os.getcwd().rstrip("/") + "/"
        installs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        installs |= {entry for entry in sys.path if os.path.isabs(entry)}
        self.skipped = tuple(
            place.rstrip("/") + "/"
            for place in (*sorted(installs), "/proc", "/sys", "/dev", self.directory)
            if place not in ("", "/") and not cwd.startswith(place.rstrip("/") + "/")
        )
        self.key = None  # (session dir, pid) the open record is for
        self.fd = -1
        self.seen = set()

    def __call__(self, event: str, args: tuple) -> None:
        if event not in EVENTS:
            return
        session = os.environ.get("RLM_SESSION_DIR")
        if not session:
            return
        try:
            entry = EVENTS[event](self, args)
            if entry is not None:
                self._write(session, entry)
        except Exception:
            pass

    def _path(self, path) -> str | None:
        if isinstance(path, int) or path is None:
            return None
        path = os.fsdecode(path)
        if not os.path.isabs(path):
            path = os.path.join(os.getcwd(), path)
        path = os.path.normpath(path)
        return None if path.startswith(self.skipped) else path

    def _open(self, args):
        path, mode, flags = args
        path = self._path(path)
        if path is None:
            return None
        if isinstance(mode, str):
            writes = any(letter in mode for letter in "wax+")
        else:
            writes = bool((flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        return {"what": OPEN, "path": path, "mode": "w" if writes else "r"}

    def _rename(self, args):
        source, target = self._path(args[0]), self._path(args[1])
        if target is None:
            return None
        return {"what": RENAME, "path": target, "from": source}

    def _connect(self, args):
        address = args[1]
        if isinstance(address, bytes):
            address = os.fsdecode(address)
        return {"what": CONNECT, "address": address if isinstance(address, str) else list(address)}

    def _exec(self, argv):
        if isinstance(argv, (str, bytes)):
            argv = [argv]
        argv = [os.fsdecode(item) if isinstance(item, bytes) else str(item) for item in argv]
        return {"what": EXEC, "argv": argv[:64], "cwd": os.getcwd()}

    def _write(self, session: str, entry: dict) -> None:
        key = (session, os.getpid())
        if key != self.key:
            self._start(key)
        identity = json.dumps(entry, sort_keys=True)
        if identity in self.seen or len(self.seen) >= LIMIT:
            return
        self.seen.add(identity)
        os.write(self.fd, (identity + "\n").encode("utf-8", "replace"))

    def _start(self, key) -> None:
        session, pid = key
        name = f"{os.path.basename(session.rstrip('/'))}-{pid}.jsonl"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if self.fd >= 0:
            os.close(self.fd)  # the previous session's, or the parent process's copy
            self.fd = -1
        self.fd = os.open(os.path.join(self.directory, name), flags, 0o600)
        self.key, self.seen = key, set()
        head = {
            "what": "kernel",
            "pid": pid,
            "ppid": os.getppid(),
            "session_dir": session,
            "cwd": os.getcwd(),
            "tmpdir": os.environ.get("TMPDIR", ""),
        }
        os.write(self.fd, (json.dumps(head) + "\n").encode())


EVENTS = {
    "open": KernelRecord._open,
    "os.rename": KernelRecord._rename,
    "socket.connect": KernelRecord._connect,
    "subprocess.Popen": lambda record, args: record._exec(args[1]),
    "os.system": lambda record, args: record._exec(["/bin/sh", "-c", args[0]]),
    "os.exec": lambda record, args: record._exec(args[1]),
    "os.posix_spawn": lambda record, args: record._exec(args[1]),
    "os.spawn": lambda record, args: record._exec(args[2]),
}


STARTUP = "00-kernel-record.py"


def startup_file(hook: str, directory: str) -> str:
    """An IPython startup file that runs `hook` (a copy of this file) recording into
    `directory`, leaving no name in the kernel's namespace."""
    return (
        "import runpy as _kernel_record_runpy\n"
        f"_kernel_record_runpy.run_path({hook!r}, {{'RECORD_DIR': {directory!r}}}, "
        "'kernel_record')\n"
        "del _kernel_record_runpy\n"
    )


def install(directory: str) -> None:
    """Starts recording this process (a hook cannot be removed: it records until exit)."""
    os.makedirs(directory, exist_ok=True)
    sys.addaudithook(KernelRecord(directory))


if __name__ == "kernel_record":  # run by the startup file: RECORD_DIR given
    install(RECORD_DIR)  # noqa: F821
