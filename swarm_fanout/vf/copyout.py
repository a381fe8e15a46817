"""What a rollout left in its runtime, copied out into a run dir the harness's collector reads.

The product writes absolute paths into what it leaves: the ledger's `parent` and `child`, its
meta's `sessionsDir`, transcript headers' `cwd`, display files' `sessionFile`, and the ledger's
file name is a hash of the sessions dir (docs/product-contract.md §4 "Path"). A copy made
elsewhere is therefore relocated the way the captured real runs are materialized
(tests/data/real-runs/README.md): every runtime path is replaced, byte for byte, by the copy's
own path, and each ledger renamed to the key of the sessions dir its meta now names. Nothing
else in the files changes, so evidence/artifacts.py and scorer.py read the copy exactly as
they read a runner's run dir.

    <copy>/                      laid out as evidence/runpaths.py's RunPaths
      repo/                      the runtime's repo as the rollout left it (its git history
                                 included): the combined answer, and what the replay of the
                                 children's cells runs on (shell/replay.py)
      sessions/                  the runtime's sessions dir
      session-artifacts/         beside it there: the children
      agent-home/rlm-ledger/     the runtime's agent dir's ledgers
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass

from swarm_fanout import ledger
from swarm_fanout.evidence.runpaths import RunPaths

# A copy is held in memory once, as the runtime's base64 output: a run whose files exceed
# this is refused (copy_too_large) rather than read.
MAX_COPY_BYTES = 256 * 1024 * 1024
# Kernel state is the product's pickled namespace: large, binary, and read by no rule.
EXCLUDED = "kernel-state.*"
TAR_DIR = (
    'set -e; [ -d "$1" ] || exit 0; '
    'tar -C "$1" --exclude=\'' + EXCLUDED + "' -cf - . | base64 | tr -d '\\n'"
)


class CopyError(Exception):
    """The runtime's files could not be copied out: a reason code and a sentence."""

    def __init__(self, code: str, detail: str):
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class RuntimeLayout:
    """Where one rollout's product wrote, as paths inside its runtime."""

    repo: str  # the agent's cwd: the shards and the combined answer
    sessions: str  # the root transcript's dir; `session-artifacts/` is its sibling (§3)
    agent_home: str  # PRIME_AGENT_CODING_AGENT_DIR: `rlm-ledger/` (§4)

    @property
    def session_artifacts(self) -> str:
        return os.path.join(os.path.dirname(self.sessions.rstrip("/")), "session-artifacts")

    def to_json(self) -> dict:
        return {"repo": self.repo, "sessions": self.sessions, "agent_home": self.agent_home}

    @classmethod
    def from_json(cls, record: object) -> RuntimeLayout | None:
        if not isinstance(record, dict):
            return None
        fields = [record.get(key) for key in ("repo", "sessions", "agent_home")]
        if not all(isinstance(value, str) and value.startswith("/") for value in fields):
            return None
        return cls(*fields)


@dataclass(frozen=True)
class Copied:
    """What the copy holds, for the trace: files per part, and the members refused."""

    files: dict[str, int]
    skipped: tuple[str, ...]

    def to_json(self) -> dict:
        return {"files": self.files, "skipped": list(self.skipped)}


async def copy_out(
    runtime, layout: RuntimeLayout, artifact: str, dest: str, limit: int | None = None
) -> Copied:
    """Copy the product's files and the combined answer from `runtime` into `dest` (a new,
    empty dir on this host), relocated; at most `limit` bytes (default MAX_COPY_BYTES) of
    them. Raises CopyError."""
    limit = MAX_COPY_BYTES if limit is None else limit
    paths = RunPaths.of(os.path.realpath(dest))
    real = await _realpaths(runtime, layout)
    parts = (
        ("sessions", real.sessions, paths.sessions),
        ("session-artifacts", real.session_artifacts, paths.session_artifacts),
        ("rlm-ledger", os.path.join(real.agent_home, ledger.LEDGER_DIR), paths.agent_home),
        ("repo", real.repo, paths.repo),
    )
    files: dict[str, int] = {}
    skipped: list[str] = []
    budget = limit
    for name, source, target in parts:
        encoded = await _run(runtime, ["sh", "-c", TAR_DIR, "sh", source], name)
        budget -= len(encoded)
        if budget < 0:
            raise CopyError("copy_too_large", f"the runtime's files exceed {limit} bytes")
        if name == "rlm-ledger":
            target = os.path.join(target, ledger.LEDGER_DIR)
        os.makedirs(target, exist_ok=True)
        files[name] = _extract(base64.b64decode(encoded), target, skipped) if encoded else 0
    os.makedirs(paths.repo, exist_ok=True)
    answer = await _read_file(runtime, os.path.join(real.repo, artifact))
    if answer is not None and len(answer) > budget:
        raise CopyError("copy_too_large", f"the runtime's files exceed {limit} bytes")
    if answer is not None:
        with open(paths.artifact(artifact), "wb") as handle:
            handle.write(answer)
    files["artifact"] = int(answer is not None)
    relocate(paths.root, _moves(layout, real, paths))
    return Copied(files, tuple(skipped))


def _moves(layout: RuntimeLayout, real: RuntimeLayout, paths: RunPaths) -> dict[str, str]:
    """Runtime path -> the copy's, for the paths as given and as the runtime resolves them."""
    moves = {}
    for given in (layout, real):
        moves[given.sessions] = paths.sessions
        moves[given.session_artifacts] = paths.session_artifacts
        moves[given.agent_home] = paths.agent_home
        moves[given.repo] = paths.repo
    return {old.rstrip("/"): new for old, new in moves.items() if old.rstrip("/")}


def relocate(root: str, moves: dict[str, str]) -> None:
    """Replace each old path by its new one in every UTF-8 file under `root` (longest old
    path first, so a dir inside another moves by its own rule), then rename each ledger to
    the key of the sessions dir its meta names (§4 "Path")."""
    ordered = sorted(moves, key=len, reverse=True)
    pattern = re.compile(b"|".join(re.escape(old.encode()) for old in ordered))
    table = {old.encode(): new.encode() for old, new in moves.items()}
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            moved = pattern.sub(lambda match: table[match.group(0)], data)
            if moved != data:
                with open(path, "wb") as handle:
                    handle.write(moved)
    ledgers = os.path.join(RunPaths.of(root).agent_home, ledger.LEDGER_DIR)
    for name in sorted(os.listdir(ledgers)) if os.path.isdir(ledgers) else ():
        path = os.path.join(ledgers, name)
        sessions_dir = _meta_sessions_dir(path)
        if sessions_dir and name.endswith(".jsonl"):
            renamed = os.path.join(ledgers, ledger.ledger_key(sessions_dir) + ".jsonl")
            if not os.path.exists(renamed):
                os.rename(path, renamed)


def _meta_sessions_dir(path: str) -> str | None:
    """The `sessionsDir` of a ledger's first line, its meta record (§4)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        first = handle.readline(64 * 1024)
    try:
        record = json.loads(first)
    except ValueError:
        return None
    if isinstance(record, dict) and record.get("op") == "meta":
        value = record.get("sessionsDir")
        return value if isinstance(value, str) else None
    return None


async def _realpaths(runtime, layout: RuntimeLayout) -> RuntimeLayout:
    """The layout as the runtime resolves it: the product writes resolved paths (§4)."""
    script = 'for p; do realpath -m -- "$p"; done'
    given = (layout.repo, layout.sessions, layout.agent_home)
    out = await _run(runtime, ["sh", "-c", script, "sh", *given], "realpath")
    resolved = out.splitlines()
    if len(resolved) != 3 or not all(path.startswith("/") for path in resolved):
        raise CopyError("copy_failed", f"realpath in the runtime gave {out[:200]!r}")
    return RuntimeLayout(*resolved)


async def _run(runtime, argv: list[str], what: str) -> str:
    result = await runtime.run(argv, {})
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip()[-300:]
        raise CopyError("copy_failed", f"copying {what} out of the runtime: {detail}")
    return result.stdout.strip()


async def _read_file(runtime, path: str) -> bytes | None:
    """The combined answer's bytes, or None when the agent wrote none (or not a file)."""
    script = '[ -f "$1" ] && [ ! -L "$1" ] || exit 0; base64 < "$1" | tr -d \'\\n\'; echo'
    out = await _run(runtime, ["sh", "-c", script, "sh", path], "the combined answer")
    return base64.b64decode(out) if out else None


def _extract(data: bytes, target: str, skipped: list[str]) -> int:
    """Unpack a tar into `target`; a member that would leave it (an absolute or `..` path,
    a link out, a device) is skipped and named, as tarfile's `data` filter judges it."""
    count = 0

    def admit(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        nonlocal count
        try:
            kept = tarfile.data_filter(member, dest)
        except tarfile.FilterError as error:
            skipped.append(f"{member.name}: {error}")
            return None
        count += int(kept.isfile())
        return kept

    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            archive.extractall(target, filter=admit)
    except (tarfile.TarError, OSError) as error:
        raise CopyError("copy_failed", f"unpacking into {target}: {error}") from None
    return count
