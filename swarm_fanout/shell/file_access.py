"""The runner's witness of file access: which process of the run opened or wrote which file
under the run dir, seen through fanotify while the agent runs (docs/witness.md "File
access"). Written into witness.jsonl with the rest of what the runner saw; the scorer
attributes each process to the session whose kernel it is (rules/file_access.py).

fanotify in the mode that names the opening process and hands over the file needs
CAP_SYS_ADMIN: where `fanotify_init` refuses, the witness says why and records nothing, and
provenance rests on the code's evidence alone. The mark covers the run dir's whole
filesystem (a mount or filesystem mark cannot be narrower), so every open on that
filesystem is read and all but the run dir's are dropped; `events` and `cpu_s` say what that
cost. The sandbox's own /tmp is a tmpfs of its mount namespace that the mark does not reach
(the run's TMPDIR is in the run dir, and is).
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
import time

FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_NOTIF, FAN_UNLIMITED_QUEUE = 0x1, 0x2, 0x0, 0x10
FAN_MARK_ADD, FAN_MARK_FILESYSTEM = 0x1, 0x100
FAN_OPEN, FAN_CLOSE_WRITE, FAN_Q_OVERFLOW = 0x20, 0x8, 0x4000
AT_FDCWD = -100
# struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid.
EVENT = struct.Struct("=IBBHQii")
MAX_RECORDS = 100_000
MAX_ANCESTORS = 16
READ_BYTES = 256 * 1024
WAIT_S = 0.2


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestors(pid: int) -> list[int]:
    """The process's parents, nearest first, up to init (or while /proc still has them)."""
    chain: list[int] = []
    while len(chain) < MAX_ANCESTORS:
        pid = _parent(pid) or 0
        if pid <= 1:
            break
        chain.append(pid)
    return chain


class FileAccessWitness:
    """Reads fanotify events on a thread from `start()` to `stop()`; `records()` are the
    first open and the first write of each (process, file) under `root`, or under `tmp`
    (the run's TMPDIR, which a run dir too long for the product's sockets keeps under /tmp:
    recorded as `tmp/…`, where the run dir's layout has it); `status()` says whether it ran,
    why not, and what it cost."""

    def __init__(self, root: str, tmp: str | None = None):
        self.root = os.path.realpath(root)
        self.prefixes = [(self.root + os.sep, "")]
        if tmp is not None and not os.path.realpath(tmp).startswith(self.root + os.sep):
            self.prefixes.append((os.path.realpath(tmp) + os.sep, "tmp/"))
        self.fd = -1
        self.why: str | None = None
        self.events = 0
        self.overflows = 0
        self.cpu_s = 0.0
        self._records: list[dict] = []
        self._seen: set[tuple[int, str, str]] = set()
        self._pids: set[int] = set()  # the processes whose ancestors are recorded
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> FileAccessWitness:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.fanotify_mark.argtypes = [
                ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p,
            ]  # fmt: skip
            flags = os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC
            # An unlimited queue: a lost event would read as a file never opened.
            init = FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE
            fd = libc.fanotify_init(init, flags)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "fanotify_init")
            mark = FAN_MARK_ADD | FAN_MARK_FILESYSTEM
            for prefix, _ in self.prefixes:
                where = prefix.rstrip(os.sep).encode()
                if libc.fanotify_mark(fd, mark, FAN_OPEN | FAN_CLOSE_WRITE, AT_FDCWD, where):
                    error = ctypes.get_errno()
                    os.close(fd)
                    raise OSError(error, "fanotify_mark")
        except (OSError, AttributeError) as error:
            errno = getattr(error, "errno", None)
            self.why = (
                f"{error.strerror if isinstance(error, OSError) else error}: fanotify needs "
                "CAP_SYS_ADMIN"
                if errno == 1
                else f"fanotify unavailable: {error}"
            )
            return self
        self.fd = fd
        self._thread = threading.Thread(target=self._loop, name="file-access", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join(timeout=10)
            self._thread = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def records(self) -> list[dict]:
        return list(self._records)

    def status(self) -> dict:
        if self.why is not None:
            return {"witnessed": False, "why": self.why}
        if self.overflows:
            return {"witnessed": False, "why": "fanotify's queue overflowed: opens were lost"}
        return {
            "witnessed": True,
            "mechanism": "fanotify",
            "events": self.events,
            "kept": len(self._records),
            "cpu_s": round(self.cpu_s, 3),
        }

    def _loop(self) -> None:
        own = os.getpid()
        while not self._stopping.is_set():
            select.select([self.fd], [], [], WAIT_S)
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                continue
            except OSError:
                break
            now = time.time()
            at = 0
            while at + EVENT.size <= len(data):
                length, _, _, _, mask, event_fd, pid = EVENT.unpack_from(data, at)
                at += max(length, EVENT.size)
                self.events += 1
                self.overflows += bool(mask & FAN_Q_OVERFLOW)
                if event_fd < 0:
                    continue
                try:
                    path = os.readlink(f"/proc/self/fd/{event_fd}")
                except OSError:
                    path = ""
                finally:
                    os.close(event_fd)
                if pid == own or len(self._records) >= MAX_RECORDS:
                    continue
                what = "write" if mask & FAN_CLOSE_WRITE else "open"
                for prefix, named in self.prefixes:
                    if path.startswith(prefix):
                        self._note(pid, named + path[len(prefix) :], what, now)
                        break
        self.cpu_s = time.thread_time()

    def _note(self, pid: int, path: str, what: str, now: float) -> None:
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        key = (pid, path, what)
        if key in self._seen:
            return
        self._seen.add(key)
        record = {"pid": pid, "what": what, "path": path, "seen": round(now, 3)}
        if pid not in self._pids:
            self._pids.add(pid)
            record["ancestors"] = ancestors(pid)
        self._records.append(record)
