"""Watching a running agent: the timeout, an interrupt, and the progress lines on stderr."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from swarm_fanout import ledger
from swarm_fanout.evidence.jsonl import open_regular
from swarm_fanout.shell.cli import print_note
from swarm_fanout.shell.rundir import RunDir

PROGRESS_EVERY_S = 10.0


# What a Ctrl-C ends when no agent runs, and what a second one ends at once.
ENDING = "the run; what exists is still scored"
ENDING_NOW = "the run now"
# A second signal this soon after the first is the same interrupt: under `uv run` without a
# terminal, uv passes a SIGINT on to its child, which has it from the process group already.
SAME_INTERRUPT_S = 1.0


class Interrupt:
    """Remember SIGINT/SIGTERM/SIGHUP so the run can end its tree and still be scored (a
    closed terminal's hang-up too: a run set's trials run in sessions of their own and hear
    it only from the run set).

    The first signal says at once, on stderr, what is being ended (`ending`, kept current by
    whoever runs processes); a second one says what it ends at once (`ending_now`) and calls
    `now` (set while processes run: it ends them at once, by SIGKILL), after which the usual
    sweep still reaps every process. The same signal again within SAME_INTERRUPT_S of the
    last one counted is the same press, delivered twice, and is not counted.
    """

    def __init__(self):
        self.signum = 0
        self.count = 0  # signals counted
        self.ending = ENDING
        self.ending_now = ENDING_NOW
        self.now = None
        self.last_at: tuple[int, float] | None = None  # the last counted signal, and when
        self._previous = {}

    def __enter__(self) -> Interrupt:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        at = time.monotonic()
        last = self.last_at
        if last is not None and last[0] == signum and at - last[1] < SAME_INTERRUPT_S:
            return
        self.last_at = (signum, at)
        self.signum = self.signum or signum
        self.count += 1
        name = signal.Signals(signum).name
        if self.count == 1:
            _say(f"runner.py: {name}: ending {self.ending}; a second Ctrl-C ends it now")
            return
        _say(f"runner.py: {name} again: ending {self.ending_now}")
        if self.now is not None:
            self.now()

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _say(text: str) -> None:
    """A line on stderr from a signal handler: one write(2), which cannot re-enter a print
    the handler interrupted."""
    with contextlib.suppress(OSError):
        os.write(2, (text + "\n").encode())


class Watch:
    """Timeout, interrupt and progress, checked while the agent runs."""

    def __init__(
        self,
        run: RunDir,
        timeout: float,
        interrupt: Interrupt,
        label: str = "",
        sandboxed: bool = False,
    ):
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.interrupt = interrupt
        self.progress = Progress(run, timeout, label, sandboxed)
        self.timed_out = False
        self._last_report = self.started

    def stop_reason(self) -> str | None:
        now = time.monotonic()
        if self.interrupt.signum:
            return "interrupted"
        if now >= self.deadline:
            self.timed_out = True
            return "timeout"
        if now - self._last_report >= PROGRESS_EVERY_S:
            self._last_report = now
            self.progress.report(now - self.started)
        return None

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class Progress:
    """Spawns and replies seen so far, read incrementally, printed to stderr with the time
    elapsed of the run's timeout (and in a run set, headed by the trial: its label)."""

    def __init__(self, run: RunDir, timeout: float, label: str = "", sandboxed: bool = False):
        self.run = run
        self.timeout = timeout
        self.head = f"{label}: " if label else ""
        self.where = "sandboxed" if sandboxed else "not sandboxed"
        self.offsets: dict[str, int] = {}
        self.spawns = 0
        self.replies = 0

    def report(self, elapsed: float, ended: str | None = None) -> None:
        """`ended`: how the run ended ("finished", "timed out", "interrupted"), else None
        while it runs."""
        home = self.run.paths.agent_home
        for path in ledger.ledger_candidates(home, self.run.paths.sessions, self.run.root):
            self.spawns += self._count_new(path, b'"op":"spawn"')
        try:
            names = sorted(os.listdir(self.run.paths.sessions))
        except OSError:
            names = []
        for name in names:
            path = os.path.join(self.run.paths.sessions, name)
            self.replies += self._count_new(path, b'"fromRelationship":"child"')
        word = f"{ended} after" if ended else "running"
        print_note(
            f"runner.py: {self.head}{word} {elapsed:.0f}s of {self.timeout:g}s: "
            f"{self.spawns} spawns, {self.replies} replies ({self.where})"
        )

    def _count_new(self, path: str, needle: bytes) -> int:
        offset = self.offsets.get(path, 0)
        handle = open_regular(path, [])
        if handle is None:
            return 0
        with handle:
            handle.seek(offset)
            data = handle.read(64 * 1024 * 1024)
        complete = data.rfind(b"\n") + 1
        self.offsets[path] = offset + complete
        return data[:complete].count(needle)
