"""The runner's own channels: evidence the agent cannot write (docs/witness.md).

Everything the scorer reads from a run dir was writable by the agent while it ran: its
cells run as the same user in that dir. So the runner keeps channels of its own, in its
own memory or in a private dir outside the run dir, and writes them into the run dir only
once the agent's whole process tree is gone:

- `Channel`: a stream the runner receives (the one-shot CLI's stdout through a pipe, the
  daemon's socket messages), hashed as it arrives and published as `stdout.jsonl` or
  `daemon-wire.jsonl` afterwards, with its digest;
- `Observer`: a thread that polls the run dir while the agent runs and notes when it first
  saw each ledger record, each child dir and transcript, each reply entry in a root
  transcript and each distinct content of the answer file; every sighting carries the
  previous poll's time too, so the moment the thing appeared lies in (`before`, `seen`];
- the recording model proxy (shell/proxy.py), whose records of every model call join them.

`write_witness` writes `witness.jsonl` from these; its sha256 goes into result.json. The
reader of that file, the scorer's side, is evidence/witness.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Iterable

from swarm_fanout import ledger
from swarm_fanout.evidence.jsonl import text_field
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.evidence.witness import WITNESS_VERSION, file_digest

# How often the observer looks. Small things only (a ledger's new bytes, two dir listings,
# a stat of the answer file and the root transcripts' new bytes), so a poll costs well
# under a millisecond for a few children (docs/benchmark.md measures 1,000); 0.1 s orders an
# answer file's writes against replies, which come a model turn (seconds) apart.
POLL_S = 0.1
MAX_READ_PER_POLL = 8 * 1024 * 1024  # new bytes of one file read per poll
REPLY_NEEDLE = b'"fromRelationship":"child"'
# --- a channel the runner receives --------------------------------------------


class Channel:
    """Bytes the runner receives, kept in a private dir outside the run dir and hashed
    as they arrive; `publish` copies them into the run dir once the agent is gone."""

    def __init__(self, private_dir: str, name: str):
        self.path = os.path.join(private_dir, name)
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._hash = hashlib.sha256()
        self.bytes = 0
        self.lines = 0
        self.writers: dict[int, int] = {}  # bytes by the pid that wrote them, when known
        self._lock = threading.Lock()

    def write(self, data: bytes, writer: int | None = None) -> None:
        with self._lock:
            self._file.write(data)
            self._file.flush()
            self._hash.update(data)
            self.bytes += len(data)
            self.lines += data.count(b"\n")
            if writer is not None:
                self.writers[writer] = self.writers.get(writer, 0) + len(data)

    def write_text(self, text: str) -> None:
        self.write(text.encode("utf-8", errors="surrogatepass"))

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def digest(self) -> str:
        with self._lock:
            return self._hash.hexdigest()

    def publish(self, target: str) -> dict:
        """Copy into the run dir (replacing whatever the agent left there) and say what was
        published: its digest as received, and whether the private copy still matched."""
        self.close()
        shutil.copyfile(self.path, target)
        published = file_digest(target)
        record = {
            "file": os.path.basename(target),
            "sha256": self.digest(),
            "bytes": self.bytes,
            "lines": self.lines,
            "intact": published == self.digest(),
        }
        if self.writers:
            record["writers"] = [
                {"pid": pid, "bytes": count} for pid, count in sorted(self.writers.items())
            ]
        return record


def stream_socket() -> tuple[socket.socket, socket.socket]:
    """The one-shot CLI's stdout (and the agent's other output): a socket pair instead of a
    pipe. The kernel tells the runner's end which process wrote each piece (SO_PASSCRED),
    and no other process can open it through /proc/<pid>/fd/1, as it could a pipe. Returns
    (the runner's end, the agent's)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    ours.shutdown(socket.SHUT_WR)
    return ours, theirs


def drain_socket(sock: socket.socket, channel) -> threading.Thread:
    """`drain` for a `stream_socket`, into a `Channel` (or anything with its `write` and
    `close`): each piece is noted with the pid that wrote it (the kernel never joins two
    writers' bytes in one read)."""
    space = socket.CMSG_SPACE(struct.calcsize("iII"))

    def run() -> None:
        with contextlib.suppress(OSError, ValueError):
            while True:
                data, ancillary, _, _ = sock.recvmsg(65536, space)
                if not data:
                    break
                writer = None
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        writer = struct.unpack("iII", payload[: struct.calcsize("iII")])[0]
                channel.write(data, writer)
        sock.close()
        channel.close()

    thread = threading.Thread(target=run, name="stdout-drain", daemon=True)
    thread.start()
    return thread


def private_dir() -> str:
    """A dir of the runner's own, outside every run dir (mode 0700)."""
    return tempfile.mkdtemp(prefix="swarm-fanout-witness-")


# --- live observation ----------------------------------------------------------


class _Tail:
    """New complete lines of one file since the last look."""

    def __init__(self) -> None:
        self.offset = 0
        self.lines = 0

    def read(self, path: str, limit: int = MAX_READ_PER_POLL) -> list[tuple[int, bytes]]:
        try:
            with open(path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(limit)
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1
        self.offset += complete
        out = []
        for raw in data[:complete].split(b"\n")[:-1]:
            self.lines += 1
            out.append((self.lines, raw))
        return out


class Observer:
    """Polls the run dir every `interval` seconds in its own thread; `sightings()` says
    what it saw first when. Each sighting: what, key fields, `seen` (the poll that found
    it) and `before` (the poll before, which did not), both epoch seconds."""

    def __init__(self, paths: RunPaths, artifact: str | None, interval: float = POLL_S):
        self.paths = paths
        self.artifact = paths.artifact(artifact) if artifact else None
        self.interval = interval
        self.polls = 0
        self.poll_seconds = 0.0  # CPU-free wall time spent inside polls, for the record
        self._sightings: list[dict] = []
        self._tails: dict[str, _Tail] = {}
        self._dirs: set[str] = set()
        self._files: set[str] = set()
        self._artifact_stat: tuple | None = None
        self._artifact_seen: set[str] = set()
        self._previous = time.time()
        self._limit = MAX_READ_PER_POLL
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="observer", daemon=True)

    def start(self) -> Observer:
        self._previous = time.time()
        self._thread.start()
        return self

    def stop(self) -> None:
        """One last poll after the agent is gone, then the thread ends."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._limit = -1  # the last look reads everything that is left
        self.poll()

    def sightings(self) -> list[dict]:
        return list(self._sightings)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        started = time.time()
        self._ledgers(started)
        self._children(started)
        self._roots(started)
        self._answer(started)
        self.polls += 1
        self.poll_seconds += time.time() - started
        self._previous = started

    def _note(self, what: str, seen: float, **keys) -> None:
        self._sightings.append(
            {"what": what, **keys, "before": round(self._previous, 3), "seen": round(seen, 3)}
        )

    def _ledgers(self, now: float) -> None:
        directory = os.path.join(self.paths.agent_home, ledger.LEDGER_DIR)
        for name in _listing(directory):
            if name.endswith(".jsonl"):
                path = os.path.join(directory, name)
                for number, raw in self._tail(path).read(path, self._limit):
                    digest = hashlib.sha256(raw).hexdigest()
                    self._note("ledger_line", now, file=name, line=number, sha256=digest)

    def _children(self, now: float) -> None:
        root = self.paths.session_artifacts
        for parent in _listing(root):
            parent_dir = os.path.join(root, parent)
            for child in _listing(parent_dir):
                if not child.startswith("sub-"):
                    continue
                child_dir = os.path.join(parent_dir, child)
                if child_dir not in self._dirs:
                    self._dirs.add(child_dir)
                    self._note("child_dir", now, child_id=child, parent=parent)
                for name in _listing(child_dir):
                    path = os.path.join(child_dir, name)
                    if name.endswith(".jsonl") and path not in self._files:
                        self._files.add(path)
                        self._note("transcript", now, child_id=child, file=name)

    def _roots(self, now: float) -> None:
        for name in _listing(self.paths.sessions):
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(self.paths.sessions, name)
            for number, raw in self._tail(path).read(path, self._limit):
                if REPLY_NEEDLE in raw:
                    reply_id = _reply_id(raw)
                    self._note("reply", now, file=name, line=number, id=reply_id)

    def _answer(self, now: float) -> None:
        if self.artifact is None:
            return
        try:
            stat = os.stat(self.artifact)
        except OSError:
            return
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if key == self._artifact_stat:
            return
        self._artifact_stat = key
        digest = file_digest(self.artifact)
        if digest and digest not in self._artifact_seen:
            self._artifact_seen.add(digest)
            self._note("answer_content", now, sha256=digest)

    def _tail(self, path: str) -> _Tail:
        tail = self._tails.get(path)
        if tail is None:
            tail = self._tails[path] = _Tail()
        return tail


def _listing(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _reply_id(raw: bytes) -> str | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    details = record.get("details") if isinstance(record, dict) else None
    return text_field(details, "id") if isinstance(details, dict) else None


# --- the witness file ----------------------------------------------------------


def write_witness(
    path: str,
    *,
    header: dict,
    model_calls: Iterable[dict],
    sightings: Iterable[dict],
    channels: Iterable[dict],
) -> str:
    """Write witness.jsonl (after the agent's tree is gone); returns its sha256."""
    lines = [{"kind": "witness", "version": WITNESS_VERSION, **header}]
    lines += [{"kind": "model_call", **call} for call in model_calls]
    lines += [{"kind": "sighting", **sighting} for sighting in sightings]
    lines += [{"kind": "channel", **channel} for channel in channels]
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def witness_record(
    path: str, *, header: dict, model_calls: list, sightings: list, channels: list
) -> dict:
    """Write witness.jsonl; returns the result's `witness`: the file, its digest, counts."""
    digest = write_witness(
        path,
        header=header,
        model_calls=model_calls,
        sightings=sightings,
        channels=channels,
    )
    return {
        "file": os.path.basename(path),
        "sha256": digest,
        "model_calls": len(model_calls),
        "sightings": len(sightings),
        "channels": channels,
    }


# A sighting's fields and their types, as `Observer._note` writes them: the scorer reads
# only well-formed ones, so a hand-edited witness cannot make a check raise.
