"""Provenance by replay: each child that sent its parent a reply has its recorded `ipython`
cells run again, in order, in a fresh sandbox, twice (docs/rubric.md "Provenance"):

- *faithful*: on a copy of the run's repo as the run left it, its git history included;
- *twin*: on the same copy with every shard replaced by its twin (fixtures/generate.py
  `twins`: the same question over records drawn anew, whose answer differs); not where
  the fixture has no twin.

Each replay is a bubblewrap sandbox (shell/sandbox.py's namespaces, seccomp filter and
system view) holding the system, the kernel Python's install, the kernel script
(shell/replay_kernel.py) and the repo copy, bound at the run's repo path (cells use absolute
paths) and its working dir: no sessions dir, ledger, agent home or other run file, no
network (a network namespace of its own), a /tmp of its own, no view of the user's home, an
environment of a few fixed variables. A time limit ends a child's replay; children replay
in parallel up to the cores; when a replay ends its sandbox's every process ends with it
(its PID namespace dies with its first process).

What each replay sent its parent is written to the run dir's `replay.jsonl`
(evidence/replays.py reads it back; rules/replay.py judges it). Without a sandbox nothing
is replayed: the replay runs code a model wrote.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from swarm_fanout.evidence.fixture import SHARDS_DIR, Fixture
from swarm_fanout.evidence.jsonl import Finding, iter_objects
from swarm_fanout.evidence.number_tokens import numbers_in
from swarm_fanout.evidence.replays import REPLAY_VERSION
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.evidence.witness import file_digest
from swarm_fanout.shell import sandbox

KERNEL_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_kernel.py")
# Run with -c, the kernel's sys.path starts with the working dir ('') as ipykernel's does;
# the script runs as `runpy.run_path(script, run_name='__main__')` would run it, without
# importing runpy (with the pkgutil and typing it brings, a tenth of the kernel's start-up).
BOOTSTRAP = (
    "import sys; sys.argv[0] = __file__ = sys.argv[1]; "
    "exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))"
)
REPLAY_TIMEOUT_S = 120.0
KERNEL_PYTHON_ENV = "PRIME_AGENT_KERNEL_PYTHON"
# The environment inside: nothing of the user's or the run's.
REPLAY_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp/home",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
}
TAIL_CHARS = 300


class Twin(NamedTuple):
    """A shard's twin as the replay uses it (made by fixtures/generate.py `twins`)."""

    expected: int
    content: str


class RecordedChild(NamedTuple):
    """A child that sent its parent a reply, and the cells it ran."""

    child_id: str
    session_id: str
    transcript: str
    cells: tuple[tuple[str, bool], ...]  # (code, it raised in the run)
    sent_in_run: tuple[str, ...]
    cwd: str | None  # its header's: the repo path its cells saw
    # Each number of its replies -> the index of its first cell whose result showed it
    # (printed it, or sent it) in the run.
    first_shown: dict[int, int]


MAX_REPO_FILES = 10_000
END_WAIT_S = 5.0  # how long a replay waits for the processes it killed to exit
MAX_REPO_FILE_BYTES = 4 << 20
# Where the repo's copies go when $TMPDIR names no place: memory, where it has room for
# every copy at once many times over (each replay makes one and deletes it; on a disk file
# system a copy of a run's repo cost ten times the CPU).
IN_MEMORY = "/dev/shm"
IN_MEMORY_ROOM = 8


class ReplayRefused(Exception):
    """No replay can run: no sandbox, or no kernel Python."""


# What makes a fixture's twins (fixtures/generate.py `twins`, handed in by the entry points:
# the shell does not import the generator): shard file -> a twin with `expected`, `content`.
MakeTwins = Callable[[Fixture], Mapping[str, Any]]


def replay_step(
    run_dir: str, fixture: Fixture, make_twins: MakeTwins, python: str, **options
) -> dict:
    """The run's replay (`replay_run`) with the fixture's twins, or, where none can run, the
    result's record of why not; there is then no replay.jsonl (one already there is not the
    harness's: an unsandboxed agent could have written it)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(RunPaths.of(run_dir).replay)
    try:
        # Twins only where there is a child to replay on them: where none replied (an agent
        # error, a hang) drawing them was most of the run's scoring, for nothing.
        made = make_twins(fixture) if recorded_children(run_dir) else {}
        twins = {file: Twin(twin.expected, twin.content) for file, twin in made.items()}
        return replay_run(run_dir, fixture, twins, python, **options)
    except ReplayRefused as refusal:
        return {"replayed": False, "why_not": str(refusal)}
    except OSError as error:
        return {"replayed": False, "why_not": f"the fixture's twins could not be made: {error}"}


def recorded_children(run_dir: str) -> list[RecordedChild]:
    """Every child transcript under session-artifacts/<root id>/sub-*/ that sent its parent a
    message, with its ipython cells in the order it made them."""
    paths = RunPaths.of(run_dir)
    found = []
    with contextlib.suppress(OSError):
        for root_id in sorted(os.listdir(paths.session_artifacts)):
            root = os.path.join(paths.session_artifacts, root_id)
            if not os.path.isdir(root):
                continue
            for child_id in sorted(os.listdir(root)):
                child_dir = os.path.join(root, child_id)
                if not child_id.startswith("sub-") or not os.path.isdir(child_dir):
                    continue
                for name in sorted(os.listdir(child_dir)):
                    if name.endswith(".jsonl"):
                        child = _read_child(child_id, os.path.join(child_dir, name))
                        if child is not None and child.sent_in_run:
                            found.append(child)
    return found


def _read_child(child_id: str, path: str) -> RecordedChild | None:
    findings: list[Finding] = []
    session_id = cwd = None
    calls: dict[str, str] = {}  # toolCallId -> code, in the order they were made
    failed: set[str] = set()
    sent: list[str] = []
    results: dict[str, str] = {}  # toolCallId -> what its result showed
    for line in iter_objects(path, findings):
        record = line.record
        if record.get("type") == "session":
            session_id = record.get("id") if isinstance(record.get("id"), str) else None
            cwd = record.get("cwd") if isinstance(record.get("cwd"), str) else None
            continue
        message = record.get("message") if record.get("type") == "message" else None
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant" and isinstance(message.get("content"), list):
            for part in message["content"]:
                if not isinstance(part, dict) or part.get("type") != "toolCall":
                    continue
                arguments = part.get("arguments")
                code = arguments.get("code") if isinstance(arguments, dict) else None
                if part.get("name") == "ipython" and isinstance(code, str):
                    calls[str(part.get("id"))] = code
        elif message.get("role") == "toolResult":
            call_id = str(message.get("toolCallId"))
            details = message.get("details") if isinstance(message.get("details"), dict) else {}
            if message.get("isError") is True or details.get("status") == "error":
                failed.add(call_id)
            shown = [
                str(part.get("text"))
                for part in message.get("content") or ()
                if isinstance(part, dict) and part.get("type") == "text"
            ]
            for item in details.get("sentAgentMessages") or ():
                if isinstance(item, dict):
                    shown.append(str(item.get("message")))
                if isinstance(item, dict) and item.get("receiverRole") == "parent":
                    sent.append(str(item.get("message")))
            results[call_id] = "\n".join(shown)
    if session_id is None:
        return None
    cells = tuple((code, call_id in failed) for call_id, code in calls.items())
    replied = {number for message in sent for number in numbers_in(message)}
    first: dict[int, int] = {}
    for index, call_id in enumerate(calls):
        for number in numbers_in(results.get(call_id, "")) & replied:
            first.setdefault(number, index)
    return RecordedChild(child_id, session_id, path, cells, tuple(sent), cwd, first)


def kernel_python(explicit: str | None, env: Mapping[str, str], run_dir: str) -> str:
    """The kernel Python a replay runs: `explicit` (--kernel-python), else the environment's
    PRIME_AGENT_KERNEL_PYTHON, else the one the run recorded in its result.json, else the
    Python this harness runs on (the simulated agent's cells need no more)."""
    for candidate in (explicit, env.get(KERNEL_PYTHON_ENV), _recorded_kernel(run_dir)):
        if candidate:
            return candidate
    return sys.executable


def _recorded_kernel(run_dir: str) -> str | None:
    """The `agent.kernel_python` result.json recorded, where it is still there."""
    with contextlib.suppress(OSError, ValueError):
        with open(RunPaths.of(run_dir).result, encoding="utf-8") as handle:
            result = json.load(handle)
        agent = result.get("agent") if isinstance(result, dict) else None
        recorded = agent.get("kernel_python") if isinstance(agent, dict) else None
        if isinstance(recorded, str) and os.path.exists(recorded):
            return recorded
    return None


def _repo_files(repo: str, children: list[RecordedChild]) -> list[str]:
    """The files of the run's repo (its git dir aside) that every replay's copy holds and
    that hold no number the children replied with (a loader the parent wrote for every
    child; Python's bytecode of one, judged by its source beside it), as paths in the run
    dir (`repo/…`, as the kernel record names them), capped."""
    replied = {
        n for child in children for message in child.sent_in_run for n in numbers_in(message)
    }

    def clean(path: str) -> bool:
        with contextlib.suppress(OSError):
            with open(path, "rb") as handle:
                text = handle.read(MAX_REPO_FILE_BYTES + 1).decode("utf-8", errors="replace")
            return len(text) <= MAX_REPO_FILE_BYTES and not numbers_in(text) & replied
        return False

    found: list[str] = []
    for where, dirs, files in os.walk(repo):
        dirs[:] = sorted(name for name in dirs if not (where == repo and name == ".git"))
        for name in sorted(files):
            path = os.path.join(where, name)
            if os.path.basename(where) == "__pycache__" and name.endswith(".pyc"):
                source = os.path.join(os.path.dirname(where), name.split(".")[0] + ".py")
                held = os.path.exists(source) and clean(source)
            else:
                held = clean(path)
            if held:
                found.append(os.path.join("repo", os.path.relpath(path, repo)))
            if len(found) >= MAX_REPO_FILES:
                return found
    return found


def replay_run(
    run_dir: str,
    fixture: Fixture,
    twins: Mapping[str, Twin],
    python: str,
    *,
    timeout_s: float = REPLAY_TIMEOUT_S,
    workers: int | None = None,
    available: sandbox.Availability | None = None,
) -> dict:
    """Replay every child of the run that sent its parent a reply, write replay.jsonl, and
    return the result's `replay` record. Raises ReplayRefused where no sandbox can run or
    the kernel Python is not there; nothing is written then. `available`: what the run
    found of the sandbox, where it looked (else it is looked for here)."""
    available = available or sandbox.availability()
    if not available.usable:
        raise ReplayRefused(f"no sandbox: {available.problem}")
    if not os.path.exists(python):
        raise ReplayRefused(f"the kernel Python {python} does not exist")
    paths = RunPaths.of(run_dir)
    children = recorded_children(run_dir)
    started, cpu = time.monotonic(), _children_cpu()
    # Without twins (no shard's question is of the task language) there is no twin replay.
    jobs = [(child, twin) for child in children for twin in ((False, True) if twins else (False,))]
    passes: dict[tuple[str, bool], dict] = {}
    size = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    scratch = _scratch_dir(paths.repo, size)
    with concurrent.futures.ThreadPoolExecutor(size) as pool:
        futures = {
            pool.submit(
                _replay_once, available.bwrap, python, paths.repo, fixture, child,
                twins if twin else None, timeout_s, scratch,
            ): (child.session_id, twin)
            for child, twin in jobs
        }  # fmt: skip
        for future in concurrent.futures.as_completed(futures):
            passes[futures[future]] = future.result()
    # The kernels' own CPU (each reports it: bwrap's init does not hand its children's on),
    # and the sandboxes' besides.
    kernels = sum(item.get("cpu_s", 0.0) for item in passes.values())
    wall, used = time.monotonic() - started, _children_cpu() - cpu + kernels
    ipython = any(item.get("ipython") for item in passes.values())
    head = {
        "type": "replay",
        "version": REPLAY_VERSION,
        "kernel_python": python,
        "ipython": ipython,
        "sandbox": True,
        "twins": {file: twin.expected for file, twin in twins.items()},
        "repo_files": _repo_files(paths.repo, children),
        "children": len(children),
        "wall_s": round(wall, 3),
        "cpu_s": round(used, 3),
    }
    lines = [head]
    for child in children:
        lines.append(
            {
                "type": "child",
                "child_id": child.child_id,
                "session_id": child.session_id,
                "transcript": os.path.relpath(child.transcript, run_dir),
                "cells": len(child.cells),
                "sent_in_run": list(child.sent_in_run),
                "first_shown": {str(n): index for n, index in sorted(child.first_shown.items())},
                "faithful": passes[(child.session_id, False)],
                "twin": passes[(child.session_id, True)] if twins else None,
            }
        )
    with open(paths.replay, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    return {
        "replayed": True,
        "sha256": file_digest(paths.replay),
        "children": len(children),
        "kernel_python": python,
        "ipython": ipython,
        "wall_s": head["wall_s"],
        "cpu_s": head["cpu_s"],
    }


def _scratch_dir(repo: str, copies: int) -> str | None:
    """Where the replays' copies of the repo go: in memory (IN_MEMORY) where $TMPDIR names
    no place and there is room for IN_MEMORY_ROOM times `copies` copies, else the temp dir."""
    if os.environ.get("TMPDIR") or not os.path.isdir(IN_MEMORY):
        return None
    size = 0
    for where, _, files in os.walk(repo):
        for name in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(where, name)).st_size
    try:
        room = os.statvfs(IN_MEMORY)
    except OSError:
        return None
    return IN_MEMORY if room.f_bavail * room.f_frsize > IN_MEMORY_ROOM * copies * size else None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _replay_once(
    bwrap: str,
    python: str,
    repo: str,
    fixture: Fixture,
    child: RecordedChild,
    twins: Mapping[str, Twin] | None,
    timeout_s: float,
    scratch_dir: str | None = None,
) -> dict:
    """One replay of the child's cells in a sandbox of its own: what it sent its parent. A
    plain kernel starts without asyncio; where the cells need it, the child is replayed again
    from the start with it (shell/replay_kernel.py), the first pass's CPU counted too."""
    started = time.monotonic()
    cells = [{"code": code, "failed_in_run": failed} for code, failed in child.cells]
    # Where the cells saw the repo: the child's header's cwd (a run copied out of where it
    # ran, as a verifiers rollout's is, has it elsewhere), else the run's repo path.
    where = child.cwd if _bindable(child.cwd) else repo
    cpu = 0.0
    for with_asyncio in (False, True):
        spec = {"cells": cells, "run_root": os.path.dirname(where), "asyncio": with_asyncio}
        scratch = tempfile.mkdtemp(prefix="swarm-fanout-replay-", dir=scratch_dir)
        try:
            copy = os.path.join(scratch, "repo")
            shutil.copytree(repo, copy, symlinks=True)
            if twins is not None:
                _put_twins(copy, fixture, twins)
            outcome = _run_sandboxed(bwrap, python, copy, where, json.dumps(spec), timeout_s)
        except OSError as error:
            outcome = {"failure": f"the replay could not start: {error}"}
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        cpu += float(outcome.get("cpu_s") or 0.0)
        if not outcome.get("needs_asyncio"):
            break
    cells = outcome.get("cells") or []
    # The numbers each cell showed (printed or sent) that the judgement asks about: the
    # child's replies' and the twins' answers.
    interest = set(child.first_shown) | {twin.expected for twin in (twins or {}).values()}
    shown = [
        sorted(
            (
                numbers_in(str(cell.get("output") or ""))
                | {n for item in cell.get("sent", ()) for n in numbers_in(str(item.get("message")))}
            )
            & interest
        )
        for cell in cells
    ]
    return {
        "sent": [
            item["message"]
            for cell in cells
            for item in cell.get("sent", ())
            if item.get("receiver_role") == "parent"
        ],
        "errors": [
            {"cell": cell["index"], **cell["error"], "failed_in_run": cell["failed_in_run"]}
            for cell in cells
            if cell.get("error")
        ],
        "shown": shown,
        "reached": [str(item) for item in outcome.get("reached") or ()],
        "timed_out": bool(outcome.get("timed_out")),
        "failure": outcome.get("failure"),
        "ipython": bool(outcome.get("ipython")),
        "seconds": round(time.monotonic() - started, 3),
        "cpu_s": round(cpu, 3),
    }


def _bindable(path: str | None) -> bool:
    """A path the repo copy may be bound at: absolute, and neither / nor in the system."""
    system = (*sandbox.SYSTEM_DIRS, *sandbox.USR_LINKS, "/proc", "/dev")
    return (
        bool(path)
        and os.path.isabs(path)
        and os.path.normpath(path) != "/"
        and not any(sandbox.is_within(path, where) for where in system)
    )


def _put_twins(copy: str, fixture: Fixture, twins: Mapping[str, Twin]) -> None:
    """Every shard of the copy, in shards/ or at the repo's root, replaced by its twin."""
    for shard in fixture.shards:
        twin = twins.get(shard.file)
        if twin is None:
            continue
        for where in (os.path.join(copy, SHARDS_DIR, shard.file), os.path.join(copy, shard.file)):
            if os.path.isfile(where):
                with open(where, "w", encoding="utf-8", newline="") as handle:
                    handle.write(twin.content)


def sandbox_argv(bwrap: str, python: str, copy: str, repo: str, seccomp: int | None) -> list[str]:
    """bwrap's argv for one replay: the system, the kernel Python's install and the kernel
    script read-only, a fresh /tmp, the repo copy at the run's repo path, nothing else."""
    argv = [bwrap, *sandbox.NAMESPACES, *sandbox.PROBED]
    for path in sandbox.SYSTEM_DIRS:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in sandbox.USR_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += sandbox.FRESH_MOUNTS
    home = os.path.expanduser("~")
    shown: list[str] = []
    for path in sorted(set(sandbox.install_dirs(python, home, REPLAY_ENV["PATH"]))):
        covered = any(
            sandbox.is_within(path, done)
            for done in (*sandbox.SYSTEM_DIRS, *sandbox.USR_LINKS, *shown)
        )
        too_wide = os.path.isdir(path) and (sandbox.is_within(home, path) or path == "/")
        if os.path.exists(path) and not covered and not too_wide:
            shown.append(path)
            argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", KERNEL_SCRIPT, KERNEL_SCRIPT, "--dir", REPLAY_ENV["HOME"]]
    argv += ["--bind", copy, repo, "--clearenv"]
    for key, value in REPLAY_ENV.items():
        argv += ["--setenv", key, value]
    if seccomp is not None:
        argv += ["--seccomp", str(seccomp)]
    return [*argv, "--chdir", repo, "--", python, "-s", "-E", "-B", "-c", BOOTSTRAP, KERNEL_SCRIPT]


def _run_sandboxed(
    bwrap: str, python: str, copy: str, repo: str, spec: str, timeout_s: float
) -> dict:
    program = sandbox.seccomp_filter()
    seccomp = os.memfd_create("seccomp", 0) if program is not None else None
    if seccomp is not None:
        os.write(seccomp, program)
        os.lseek(seccomp, 0, os.SEEK_SET)
    try:
        process = subprocess.Popen(
            sandbox_argv(bwrap, python, copy, repo, seccomp),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=[seccomp] if seccomp is not None else [],
            start_new_session=True,
        )
    finally:
        if seccomp is not None:
            os.close(seccomp)
    try:
        out, err = process.communicate(spec.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        return {**_parsed(out), "timed_out": True}
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    parsed = _parsed(out)
    _end_namespace(parsed.get("pid_namespace"))
    if "cells" not in parsed:
        tail = err.decode("utf-8", "replace").strip()[-TAIL_CHARS:]
        parsed["failure"] = f"the replay kernel wrote no result (exit {process.returncode}): {tail}"
    return parsed


def _end_namespace(namespace: object) -> None:
    """SIGKILL whatever is left in the sandbox's PID namespace (`pid:[inode]`, as its kernel
    read it). The kernel ends every process in it when its first process exits; this makes
    sure none is still on its way out when the replay returns."""
    if not isinstance(namespace, str) or not namespace.startswith("pid:["):
        return
    killed = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{name}/ns/pid") == namespace:
                os.kill(int(name), signal.SIGKILL)
                killed.append(name)
    # A killed process is gone only once it has exited (a zombie, or no more): wait for that,
    # within a bound, so that none is still running when the replay returns.
    deadline = time.monotonic() + END_WAIT_S
    while killed and time.monotonic() < deadline:
        killed = [name for name in killed if _running(name)]
        if killed:
            time.sleep(0.005)


def _running(pid: str) -> bool:
    """The process exists and has not exited (its state is no zombie nor dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state not in ([b"Z"], [b"X"], [])


def _parsed(out: bytes) -> dict:
    try:
        value = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
