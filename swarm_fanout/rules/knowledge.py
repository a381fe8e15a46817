"""Who knew a number, and from when: the flow of knowledge between the sessions of a run,
pure over the transcripts' records of each tool call and each message received. The rules
(what a session *derived* and *received*, and when a child worked from its shard,
`why_not_from_shard`) are docs/rubric.md's "Knowledge" and "Positive evidence".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from swarm_fanout.evidence.cells import channel
from swarm_fanout.evidence.fixture import SHARDS_DIR
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.evidence.transcripts import Heard, ToolCallFacts, Transcript
from swarm_fanout.rules.kernels import KernelAccess
from swarm_fanout.rules.runview import Child, RunView

# Where an honest cell may name a file outside the run without reading anyone's answers.
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib", "/etc/", "/dev/", "/proc/", "/sys/", "/opt/")
# Names of the product's own records wherever they are (§3, §4, §6).
RECORD_MARKERS = ("/sessions/", "session-artifacts", "rlm-ledger", "rlm-subagent.json")
WILDCARD = re.compile(r"[*?\[]")
# A pattern's pieces: `**`, `*`, `?`, and an f-string's `{name}`, where any name may stand.
PATTERN_PIECE = re.compile(r"(\*\*|\*|\?|\{[^{}]*\})")
# What a call drew on besides files, in words (evidence/cells.py).
CHANNEL_WORDS = {
    "network": "took data over a network connection",
    "listing": "read files found by a listing or a glob pattern",
    "environment": "read the environment",
    "joined_path": "built a path from parts at run time",
    "code_from_text": "ran code held in a string",
    "unreadable": "its code does not parse as Python, yet the kernel ran it",
}
# Said where the verdict rests on the code alone.
UNWITNESSED = "judged on its code: its kernel kept no record of what it opened"
# The shape every shortcut so far has, named in a reason and on the evidence page.
SHORTCUT = "the parent knew it before the spawn and the child did not work it out from its shard"


class Call(NamedTuple):
    """A session's noted call, its files resolved against the session's cwd."""

    facts: ToolCallFacts
    named: set[str]
    written: set[str]
    sources: dict[str, str]  # resolved -> as typed (a channel as it is)


class Knowledge:
    """The run's sessions (the parent and every child transcript), indexed once; `knew` and
    `derived_at` answer per session and number, memoised."""

    def __init__(self, view: RunView):
        run = view.run
        self.paths = RunPaths.of(run.run_dir)
        self.access = KernelAccess(run.kernel_records)
        self.shards = {shard.file for shard in view.fixture.shards}
        self.parent = run.parent
        self.children = {child.child_id: child for child in view.children}
        sessions = [run.parent] if run.parent else []
        sessions += [transcript for child in run.children for transcript in child.transcripts]
        self.by_id = {t.header_id: t for t in sessions if t.header_id}
        self.calls: dict[str, list[Call]] = {}  # session (path) -> its calls, in order
        self.writers: dict[str, set[str]] = {}  # file -> the sessions (paths) that wrote it
        for transcript in sessions:
            resolved = []
            for call in transcript.call_facts:
                named = {self._resolve(transcript, path) for path in call.named}
                written = {self._resolve(transcript, path) for path in call.written}
                sources = {
                    path if channel(path) else self._resolve(transcript, path): path
                    for path in call.sources
                }
                resolved.append(Call(call, named, written, sources))
                for path in written:
                    self.writers.setdefault(path, set()).add(transcript.path)
            self.calls[transcript.path] = resolved
        self.sent = {
            transcript.path: {sent.message_id: sent.line for sent in transcript.sent_messages}
            for transcript in sessions
        }
        self.cells: dict[str, list] = {}  # code sha256 -> the parent's cells of that code
        for cell in run.parent.ipython_calls if run.parent else ():
            self.cells.setdefault(cell.code_sha256, []).append(cell)
        self._knew: dict[tuple[str, int, int], bool] = {}
        self._asking: set[tuple[str, int]] = set()

    # --- files ------------------------------------------------------------------------

    def _resolve(self, transcript: Transcript, path: str) -> str:
        if path.startswith("{"):
            return path  # a place a run-time value holds
        if path.startswith("~") or os.path.isabs(path):
            return os.path.normpath(path)
        return os.path.normpath(os.path.join(transcript.cwd or self.paths.repo, path))

    def foreign_file(self, transcript: Transcript, index: int) -> str | None:
        """The file that makes the session's `index`-th noted call a read of someone else's
        knowledge, or None."""
        return self._foreign_among(transcript, index, self.calls[transcript.path][index].named)

    def _foreign_among(self, transcript: Transcript, index: int, paths: set[str]) -> str | None:
        calls = self.calls[transcript.path]
        for path in sorted(paths):
            if channel(path) or path.startswith("{") or os.path.basename(path) in self.shards:
                continue  # a shard, or a path whose place a variable holds
            if any(path in call.written for call in calls[: index + 1]):
                continue  # its own scratch file, or its own copy of a shard
            if self._record(path):
                return path
            if self.writers.get(path, set()) - {transcript.path}:
                return path
            if self._outside(path):
                return path
        return None

    def _record(self, path: str) -> bool:
        """A record of the product, or a pattern that reaches them (`../**/*.jsonl`)."""
        product = (self.paths.sessions, self.paths.session_artifacts, self.paths.agent_home)
        if path.startswith(tuple(where + os.sep for where in product)) or any(
            marker in path for marker in RECORD_MARKERS
        ):
            return True
        wild = WILDCARD.search(path)
        if wild is None:
            return False
        fixed = os.path.dirname(path[: wild.start()])
        return any(
            where == fixed or where.startswith(fixed.rstrip(os.sep) + os.sep) for where in product
        )

    # --- a child's own shard ----------------------------------------------------------

    def _names_shard(
        self, transcript: Transcript, path: str, typed: str, shard: str, sources
    ) -> bool:
        """`path` (resolved; `typed` as the code has it) is the shard `shard`, or a pattern
        that matches it, in the repo: typed with its dir (`shards/a.jsonl`, an absolute path)
        or beside the shards' dir named on its own (`Path('shards') / 'a.jsonl'`), since a bare
        name may be a key searched for in a text; and no other session wrote it."""
        if channel(path) or self.writers.get(path, set()) - {transcript.path}:
            return False
        if "/" not in typed and f"<{SHARDS_DIR}_dir>" not in sources:
            return False
        repos = {where for where in (transcript.cwd, self.paths.repo) if where}
        inside = path.startswith("{") or any(path.startswith(repo + os.sep) for repo in repos)
        return inside and _matches(os.path.basename(path), shard)

    def why_not_from_shard(self, transcript: Transcript, index: int, shard: str) -> str | None:
        """None when the session's `index`-th noted call worked from its shard `shard`: it
        drew on that file and on nothing foreign nor the network and, where the session's
        kernel recorded what it did, it opened (or had a program name) the shard and
        touched nothing that is not its own (rules/kernels.py); else what it did instead."""
        sources = self.calls[transcript.path][index].sources
        foreign = self._foreign_among(transcript, index, set(sources))
        if foreign is not None:
            return f"it drew on {foreign}, which is not its own"
        if "<network>" in sources:
            return f"it {CHANNEL_WORDS['network']}"
        watched = self.access.watched(transcript)
        if watched:
            against = self.access.against(transcript)
            if against is not None:
                return against
            if not self.access.opened_shard(transcript, shard):
                return f"in the run its kernel opened no file {shard}"
        if any(
            self._names_shard(transcript, path, typed, shard, sources)
            for path, typed in sources.items()
        ):
            return None
        files = sorted(path for path in sources if not channel(path))
        words = [CHANNEL_WORDS[name] for name in CHANNEL_WORDS if f"<{name}>" in sources]
        if files:
            words.insert(0, "it named only " + ", ".join(files))
        elif not words:
            words = [
                "it drew on no file at all: the number came from its code alone (an "
                "expression, such as one handed in its task)"
            ]
        if not watched:
            words.append(UNWITNESSED)
        return "; ".join(words)

    def _outside(self, path: str) -> bool:
        if path.startswith("~"):
            return True
        inside = path == self.paths.root or path.startswith(self.paths.root + os.sep)
        return not inside and not path.startswith(SYSTEM_DIRS)

    # --- when a session had a number ---------------------------------------------------

    def _showing_calls(self, transcript: Transcript, number: int) -> Iterable[tuple[int, int]]:
        """(line, index) of each call whose result showed `number`, in order."""
        for index, call in enumerate(self.calls[transcript.path]):
            facts = call.facts
            if number in facts.shown:
                yield facts.result_line if facts.result_line is not None else facts.line, index

    def received_at(self, transcript: Transcript, number: int) -> int | None:
        """The first line at which the session received `number` from a session that knew it
        (a message, or a foreign file it read)."""
        lines = [
            line
            for line, index in self._showing_calls(transcript, number)
            if self.foreign_file(transcript, index) is not None
        ]
        lines += [
            heard.line
            for heard in transcript.heard
            if number in heard.numbers and self._sender_knew(heard, number)
        ]
        return min(lines, default=None)

    def derived_at(self, transcript: Transcript, number: int, shard: str) -> int | None:
        """The line at which the session derived `number` from its shard `shard`, or None if
        it never did: only on positive evidence, the call that first showed it worked from
        that shard (`why_not_from_shard`)."""
        own, index = next(iter(self._showing_calls(transcript, number)), (None, 0))
        if own is None or self.why_not_from_shard(transcript, index, shard) is not None:
            return None
        received = self.received_at(transcript, number)
        return own if received is None or own < received else None

    def why_not_derived(self, transcript: Transcript, number: int, shard: str) -> str:
        """What the session did instead of deriving `number` from its shard `shard` (for
        the reason's detail)."""
        showing = [index for _, index in self._showing_calls(transcript, number)]
        calls = self.calls[transcript.path]
        for index in showing:
            path = self.foreign_file(transcript, index)
            if path is not None:
                return f"read it from {path} (line {calls[index].facts.line})"
        received = self.received_at(transcript, number)
        if received is not None:
            return f"received it from a session that knew it (line {received})"
        if not showing:
            return "no tool call of its own showed it: it was typed into code"
        index = showing[0]
        line = calls[index].facts.line
        how = self.why_not_from_shard(transcript, index, shard)
        return f"its call that first showed it (line {line}) did not read its shard {shard}: {how}"

    def knew(self, transcript: Transcript, number: int, line: int) -> bool:
        """The session had `number` (derived or received) by `line` of its transcript."""
        key = (transcript.path, number, line)
        if key not in self._knew:
            asking = (transcript.path, number)
            if asking in self._asking:
                return False  # a cycle of messages proves no knowledge
            self._asking.add(asking)
            try:
                self._knew[key] = any(
                    at <= line for at, _ in self._showing_calls(transcript, number)
                ) or any(
                    heard.line < line and self._sender_knew(heard, number)
                    for heard in transcript.heard
                    if number in heard.numbers
                )
            finally:
                self._asking.discard(asking)
        return self._knew[key]

    def _sender_knew(self, heard: Heard, number: int) -> bool:
        if heard.relationship == "parent" and (heard.message_id or "").startswith("spawn:"):
            child = self.children.get((heard.message_id or "")[len("spawn:") :])
            return child is None or self.parent_knew_for_task(child, number) is not None
        sender = self.by_id.get(heard.from_session_id or "")
        if sender is None:
            return True
        sent_line = self.sent[sender.path].get(heard.message_id or "")
        return sent_line is None or self.knew(sender, number, sent_line)

    def parent_knew_for_task(self, child: Child, number: int) -> str | None:
        """How the parent knew `number`, which the child's task holds, when it spawned the
        child; None when it did not: a literal typed into the spawning cell that the parent
        had not derived or received before that cell ran."""
        display = child.display
        if display is None or display.spawn_code_sha256 is None:
            return "the task holds it and no spawning cell shows it was typed"
        if number not in display.spawn_code_numbers:
            return "the spawning cell computed it (it is no literal of the cell's code)"
        cell = self._spawning_cell(child)
        if cell is None:
            return "the spawning cell cannot be placed in the parent transcript"
        if self.knew(self.parent, number, cell.line):
            return f"the parent had it before the spawning cell (line {cell.line})"
        return None

    def _spawning_cell(self, child: Child):
        """The parent's cell that spawned the child: the run of the display record's
        `spawnCode` whose window holds the spawn (§6), else its first run; None unknown (no
        spawnCode, or no parent cell of that code: none without a parent)."""
        cells = self.cells.get(child.display.spawn_code_sha256 if child.display else None, [])
        at = child.edge.spawned_at_ms
        running = (cell for cell in cells if at is not None and cell.contains(at))
        return next(running, cells[0] if cells else None)

    def parent_knew_before_spawn(self, child: Child, number: int) -> bool:
        """The parent had `number` (a cell of its own showed it, or it received it) before
        the cell that spawned the child ran."""
        cell = self._spawning_cell(child)
        return cell is not None and self.knew(self.parent, number, cell.line)


def _matches(pattern: str, path: str) -> bool:
    """`path` is `pattern`, or matches it as a glob (`*` and `?` within one name, `**` across
    names) whose f-string `{name}`s stand for any name (a leading one for any dirs). A pattern
    with no letter or digit of its own matches nothing."""
    if not any(ch.isalnum() for ch in PATTERN_PIECE.sub("", pattern)):
        return False
    regex = []
    for index, piece in enumerate(PATTERN_PIECE.split(pattern)):
        if piece == "**" or (piece.startswith("{") and index == 1 and not regex[0]):
            regex.append(".*")
        elif piece in ("*", "?") or piece.startswith("{"):
            regex.append("[^/]*" if piece != "?" else "[^/]")
        else:
            regex.append(re.escape(piece))
    return re.fullmatch("".join(regex), path) is not None
