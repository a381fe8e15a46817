"""Evidence integrity: the records a real delegation leaves must agree with each other
(docs/rubric.md "Evidence integrity"; contract §10). The parent can write every file the
scorer reads, but a forger who writes some of a child's traces by hand rarely writes all of
them consistently: a ledger line, a child dir with its transcript and display file, usage
entries and replies in the parent transcript. One small pure function per check, with one
stable reason code; `_CHECKS` lists them in verdict order.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from typing import NamedTuple

from swarm_fanout.evidence.artifacts import ChildDir, RunArtifacts, relative, transcripts_by_path
from swarm_fanout.evidence.runpaths import display_file
from swarm_fanout.evidence.transcripts import Transcript, Usage, digest
from swarm_fanout.ledger import FATAL_CODES, Edge

# The worker writes the child's header, then its display file, then the ledger
# spawn (§4 "Writers"). Measured on the captures: 26-192 ms, and 1 187 ms for the
# first spawn of session-dir-env (the append that created the ledger file). Four
# times the largest gap seen still catches a header made for another spawn.
HEADER_BEFORE_SPAWN_MS = 5_000
# The meta line is stamped while the first spawn is appended, after that spawn's
# `at` (§4 "Records"): 0-1 ms later in the captures, 2-3 ms from the simulated
# agent, which stamps it the same way. The meta's `at` proves nothing, so the
# slack is wide enough for a slow first mkdir and open of the ledger.
META_AFTER_SPAWN_MS = 1_000
MAX_FAILURES_LISTED = 20
# Ledger findings that fail the ledger check: what makes the product reject the
# file (§4 "Strictness"), and a meta line that is missing or names another dir.
LEDGER_FAILURES = FATAL_CODES | {"meta_not_first", "meta_hash_mismatch"}


class Failure(NamedTuple):
    """One inconsistency: the record it is about, and a sentence with the values compared."""

    detail: str
    child_id: str | None = None
    file: str | None = None
    line: int | None = None

    def to_json(self) -> dict:
        where = {"child_id": self.child_id, "file": self.file, "line": self.line}
        out = {key: value for key, value in where.items() if value is not None}
        return {**out, "detail": self.detail}


class CheckResult(NamedTuple):
    name: str
    code: str
    count: int
    failures: tuple[Failure, ...]  # the first MAX_FAILURES_LISTED of `count`

    @property
    def passed(self) -> bool:
        return self.count == 0

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "count": self.count,
            "failures": [failure.to_json() for failure in self.failures],
        }


class Integrity(NamedTuple):
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.checks)

    def to_json(self) -> dict:
        return {result.name: result.to_json() for result in self.checks}


class Family(NamedTuple):
    """What every check looks at (rules/witness_checks.py's too): the parent, its depth-1
    edges and their child dirs."""

    run: RunArtifacts
    parent: Transcript | None
    family: tuple[Edge, ...]  # every depth-1 edge of the parent, deleted ones too
    checked: tuple[Edge, ...]  # the ones that count: live, or deleted after their receipt
    dirs: dict[str, ChildDir]
    located: dict[str, tuple[str, Transcript]]  # canonical transcript path -> (dir, transcript)

    def path(self, path: str) -> str:
        return relative(self.run.run_dir, path)

    def transcript(self, edge: Edge) -> Transcript | None:
        child_id, transcript = self.located.get(edge.child, (None, None))
        return transcript if child_id == edge.child_id else None


# --- the checks -------------------------------------------------------------


def _ledger(f: Family) -> Iterator[Failure]:
    """§4, §10.1: meta first and keyed right; `at` never decreases; unique childIds;
    depth 1 under the root; nothing the product would reject."""
    for ledger_file in f.run.ledgers:
        name = f.path(ledger_file.path)
        for finding in ledger_file.findings:
            if finding.code in LEDGER_FAILURES:
                yield Failure(f"{finding.code}: {finding.detail}", file=name, line=finding.line)
        previous = floor = None  # floor: the time no later record may be before
        for record in ledger_file.records:
            child_id, line, at_ms = record.child_id, record.line, record.at_ms
            if record.after_fatal and record.op == "spawn":
                detail = "spawn after a line the product rejects: the product never wrote it"
                yield Failure(detail, child_id, name, line)
            if at_ms is None:
                yield Failure(f"at {record.at!r} is no ISO-8601 time", child_id, name, line)
                continue
            if floor is not None and at_ms < floor:
                detail = f"at {record.at} is before line {previous.line}'s {previous.at}"
                yield Failure(detail, child_id, name, line)
            slack = META_AFTER_SPAWN_MS if record.op == "meta" and line == 1 else 0
            previous, floor = record, at_ms - slack
    seen: dict[str, tuple[str, int]] = {}
    for spawn in f.run.replay.spawns:
        if spawn.child_id in seen:
            first_file, first_line = seen[spawn.child_id]
            detail = f"childId spawned again (first at {f.path(first_file)} line {first_line})"
            yield Failure(detail, spawn.child_id, f.path(spawn.ledger), spawn.line)
        else:
            seen[spawn.child_id] = (spawn.ledger, spawn.line)
        if f.parent is not None and spawn.parent == f.parent.path and spawn.depth != 1:
            detail = f"depth {spawn.depth} under the root, whose children are depth 1"
            yield Failure(detail, spawn.child_id, f.path(spawn.ledger), spawn.line)


def _child_path(f: Family) -> Iterator[Failure]:
    """§3, §10.2: `<run>/session-artifacts/<root id>/<childId>/<child header id>.jsonl`,
    one transcript per dir, every child its own session."""
    root = f.run.children_root
    sessions: dict[str, str] = {}
    for edge in f.checked:
        if root is None:
            yield Failure("the parent's header id names no children dir", edge.child_id)
            continue
        expected_dir = os.path.join(root, edge.child_id)
        if os.path.dirname(edge.child) != expected_dir:
            detail = f"{f.path(edge.child)} is not in {f.path(expected_dir)}/"
            yield Failure(detail, edge.child_id, f.path(edge.child))
            continue
        transcript = f.transcript(edge)
        if transcript is None:
            detail = "no transcript at the edge's child path"
            yield Failure(detail, edge.child_id, f.path(edge.child))
            continue
        stem = os.path.splitext(os.path.basename(edge.child))[0]
        if stem != transcript.header_id:
            detail = f"file stem {stem} is not the header id {transcript.header_id}"
            yield Failure(detail, edge.child_id, f.path(edge.child), 1)
        elif stem in sessions:
            detail = f"shares its session id with {sessions[stem]}'s transcript: one is a copy"
            yield Failure(detail, edge.child_id, f.path(edge.child), 1)
        sessions.setdefault(stem, edge.child_id)
        child_dir = f.dirs.get(edge.child_id)
        if child_dir is not None and len(child_dir.transcripts) > 1:
            detail = f"{len(child_dir.transcripts)} transcripts in the dir; the product writes one"
            yield Failure(detail, edge.child_id, f.path(child_dir.path))


def _child_header(f: Family) -> Iterator[Failure]:
    """§5, §10.3: parentSession, rlmDepth and cwd are the edge's; the header was
    written shortly before the spawn line."""
    for edge, transcript in _with_transcripts(f):
        where = f.path(transcript.path)
        if transcript.parent_session_file != edge.parent:
            detail = f"parentSession {transcript.parent_session!r} is not {f.path(edge.parent)}"
            yield Failure(detail, edge.child_id, where, 1)
        if transcript.rlm_depth != edge.depth:
            detail = f"rlmDepth {transcript.rlm_depth!r} is not the edge's depth {edge.depth}"
            yield Failure(detail, edge.child_id, where, 1)
        if transcript.cwd != f.parent.cwd:
            detail = f"cwd {transcript.cwd!r} is not the parent's {f.parent.cwd!r}"
            yield Failure(detail, edge.child_id, where, 1)
        written, spawned = transcript.header_at_ms, edge.spawned_at_ms
        if written is None or spawned is None:
            yield Failure("header or spawn has no readable timestamp", edge.child_id, where, 1)
        elif not 0 <= spawned - written <= HEADER_BEFORE_SPAWN_MS:
            detail = (
                f"header written {spawned - written} ms before the spawn line "
                f"(the product: 0 to {HEADER_BEFORE_SPAWN_MS} ms)"
            )
            yield Failure(detail, edge.child_id, where, 1)


def _child_task(f: Family) -> Iterator[Failure]:
    """§5 "Child transcripts": the task is `spawn:<childId>` from the parent's session."""
    for edge, transcript in _with_transcripts(f):
        where = f.path(transcript.path)
        if transcript.task_id is None:
            # A child torn down before its task arrived has nothing at all (seen with
            # v0.8.0 in a one-shot teardown); `child_work` reports that, once.
            if transcript.assistant_calls:
                yield Failure("no task agent_message from the parent", edge.child_id, where)
            continue
        if transcript.task_id != "spawn:" + edge.child_id:
            detail = f"task id {transcript.task_id!r} is not 'spawn:{edge.child_id}'"
            yield Failure(detail, edge.child_id, where)
        if transcript.task_from_session_id != f.parent.header_id:
            detail = (
                f"task from session {transcript.task_from_session_id!r}, "
                f"not the parent {f.parent.header_id}"
            )
            yield Failure(detail, edge.child_id, where)


def _response_ids(f: Family) -> Iterator[Failure]:
    """§5, §10.4: every assistant message that reached the model carries its responseId (a
    failed attempt has none, §5 "Retries", nor has a turn aborted before it reached it)."""
    for edge, transcript in _with_transcripts(f):
        for call in transcript.assistant_calls:
            if call.stop_reason not in ("error", "aborted") and not call.response_id:
                detail = f"assistant message ({call.stop_reason}) without a responseId"
                yield Failure(detail, edge.child_id, f.path(transcript.path), call.line)


def _child_work(f: Family) -> Iterator[Failure]:
    """A child the product ran attempted at least one model call (§5): failed attempts
    and torn-down turns are persisted too (captured runs child-fail, endturn-oneshot)."""
    for edge, transcript in _with_transcripts(f):
        if not transcript.assistant_calls:
            detail = "no assistant message: the child never attempted a model call"
            yield Failure(detail, edge.child_id, f.path(transcript.path))


def _display(f: Family) -> Iterator[Failure]:
    """§6 `rlm-subagent.json`: the edge's childId, a name the ledger gave it, its file."""
    names = f.run.replay.names
    for edge in f.checked:
        child_dir = f.dirs.get(edge.child_id)
        if child_dir is None:
            continue  # edge_dirs reports it
        where = f.path(display_file(child_dir.path))
        display = child_dir.display
        if display is None:
            yield Failure("no readable rlm-subagent.json", edge.child_id, where)
            continue
        if display.child_id != edge.child_id:
            yield Failure(f"childId {display.child_id!r} is not the edge's", edge.child_id, where)
        if display.session_name not in names.get(edge.child_id, ()):
            detail = f"sessionName {display.session_name!r} is no name the ledger gave this child"
            yield Failure(detail, edge.child_id, where)
        if display.session_file != edge.child:
            yield Failure(f"sessionFile is not {f.path(edge.child)}", edge.child_id, where)


def _spawn_code(f: Family) -> Iterator[Failure]:
    """§6, §10.5-6: `spawnCode` is the code of a parent ipython cell that was running
    when the ledger recorded the spawn."""
    calls: dict[str, list] = {}
    for call in f.parent.ipython_calls if f.parent else ():
        calls.setdefault(call.code_sha256, []).append(call)
    for edge in f.checked:
        child_dir = f.dirs.get(edge.child_id)
        if child_dir is None or child_dir.display is None:
            continue  # edge_dirs and display report these
        where = f.path(display_file(child_dir.path))
        code = child_dir.display.spawn_code_sha256
        if code is None:
            yield Failure("no spawnCode", edge.child_id, where)
        elif code not in calls:
            yield Failure("spawnCode is the code of no parent ipython call", edge.child_id, where)
        elif edge.spawned_at_ms is None or not any(
            call.contains(edge.spawned_at_ms) for call in calls[code]
        ):
            lines = ", ".join(str(call.line) for call in calls[code][:5])
            detail = (
                f"the spawn's `at` is outside every run of that cell "
                f"(parent transcript lines {lines})"
            )
            yield Failure(detail, edge.child_id, f.path(edge.ledger), edge.spawn_line)


def _usage_attribution(f: Family) -> Iterator[Failure]:
    """§5 `child_usage_attributed`: the parent holds one entry per child model call that
    completed (an aborted one may have one, a failed one has none), with an equal
    `childUsage`, and no other; matched as multisets of usage, since an entry names the
    parent's spawning message, never the child."""
    if f.parent is None:
        return
    needed: Counter[Usage] = Counter()
    allowed: Counter[Usage] = Counter()
    first: dict[Usage, tuple[str, str, int]] = {}
    seen: set[str] = set()
    for edge, transcript in _with_transcripts(f, f.family):
        if transcript.path in seen:
            continue  # two edges that name one file
        seen.add(transcript.path)
        for call in transcript.assistant_calls:
            if call.stop_reason == "error":
                continue
            allowed[call.usage] += 1
            if call.stop_reason != "aborted":
                needed[call.usage] += 1
                first.setdefault(call.usage, (edge.child_id, transcript.path, call.line))
    attributed: Counter[Usage] = Counter()
    surplus_line: dict[Usage, int] = {}
    for entry in f.parent.usage_attributions:
        attributed[entry.usage] += 1
        if attributed[entry.usage] > allowed[entry.usage]:
            surplus_line.setdefault(entry.usage, entry.line)
    for usage, count in needed.items():
        if attributed[usage] < count:
            child_id, path, line = first[usage]
            detail = (
                f"{count} child calls with usage {_usage_text(usage)}, "
                f"{attributed[usage]} child_usage_attributed entries"
            )
            yield Failure(detail, child_id, f.path(path), line)
    for usage, line in surplus_line.items():
        detail = (
            f"{attributed[usage]} child_usage_attributed entries with usage "
            f"{_usage_text(usage)}, {allowed[usage]} child calls"
        )
        yield Failure(detail, None, f.path(f.parent.path), line)


def _reply_receipts(f: Family) -> Iterator[Failure]:
    """§5, §10.6: a reply from a child is a message that child's transcript says it
    sent: its toolResult's receipt has the reply's id and text."""
    if f.parent is None:
        return
    senders: dict[str, tuple[str, dict[str, set[str]]]] = {}  # session -> (childId, id -> texts)
    for edge, transcript in _with_transcripts(f, f.family):
        if transcript.header_id and transcript.header_id not in senders:
            sent: dict[str, set[str]] = {}
            for item in transcript.sent_messages:
                sent.setdefault(item.message_id, set()).add(item.message_sha256)
            senders[transcript.header_id] = (edge.child_id, sent)
    for reply in f.parent.replies:
        if reply.from_session_id not in senders:
            continue  # from no child of this parent: it receipts and sources nothing
        child_id, sent = senders[reply.from_session_id]
        texts = sent.get(reply.reply_id)
        if texts is None:
            detail = f"reply {reply.reply_id!r}: no receipt with this id in the child's transcript"
        elif digest(reply.message) not in texts:
            detail = f"reply {reply.reply_id!r}: the child sent other text under this id"
        else:
            continue
        yield Failure(detail, child_id, f.path(f.parent.path), reply.line)


def _orphan_dirs(f: Family) -> Iterator[Failure]:
    """§10.8: every `sub-*` dir under the parent's artifacts belongs to a ledger edge."""
    spawned = {edge.child_id for edge in f.family}
    for child_dir in f.run.children:
        if child_dir.child_id not in spawned:
            detail = "no ledger spawn from the parent has this childId"
            yield Failure(detail, child_dir.child_id, f.path(child_dir.path))


def _edge_dirs(f: Family) -> Iterator[Failure]:
    """§3: every admitted child has its `sub-<childId>` dir under the parent's artifacts."""
    for edge in f.checked:
        if edge.child_id not in f.dirs:
            detail = "no sub-* dir of this childId under the parent's artifacts"
            yield Failure(detail, edge.child_id, f.path(edge.ledger), edge.spawn_line)


def _stale_dirs(f: Family) -> Iterator[Failure]:
    """A child dir the run made is younger than the run: its header is not older
    than run-meta.json's `started_at` (skipped for a run dir without one)."""
    started = f.run.run_started_ms
    if started is None:
        return
    for child_dir in f.run.children:
        for transcript in child_dir.transcripts:
            if transcript.header_at_ms is not None and transcript.header_at_ms < started:
                detail = f"header {started - transcript.header_at_ms} ms older than the run"
                yield Failure(detail, child_dir.child_id, f.path(transcript.path), 1)


def _endpoint(f: Family) -> Iterator[Failure]:
    """§10 "Endpoint cross-check": where a harness endpoint served the model, every child
    message (and a witnessed parent's) that reached it carries a response id served for its
    own conversation log: a forger can write any file, not the endpoint's record."""
    served = f.run.served
    if served is None:
        return
    sessions = [(edge.child_id, transcript) for edge, transcript in _with_transcripts(f)]
    if f.run.witness is not None and f.parent is not None:
        # The runner's proxy saw the parent's calls too (evidence/witness.py).
        sessions.insert(0, (None, f.parent))
    for child_id, transcript in sessions:
        for call in transcript.assistant_calls:
            if call.stop_reason in ("error", "aborted") or not call.response_id:
                continue
            if call.response_id not in served:
                detail = f"responseId {call.response_id} was never served by the endpoint"
            elif served[call.response_id] != transcript.path:
                detail = f"responseId {call.response_id} was served for another conversation"
            else:
                continue
            yield Failure(detail, child_id, f.path(transcript.path), call.line)


# (check, reason code, sentence), in verdict order; the verdict names a check as its function,
# less the underscore.
_CHECKS: tuple[tuple[Callable[[Family], Iterator[Failure]], str, str], ...] = (
    (_ledger, "ledger_inconsistent", "the ledger is not one the product wrote"),
    (
        _child_path,
        "child_path_mismatch",
        "the child's transcript is not at session-artifacts/<parent header id>/<childId>/"
        "<child header id>.jsonl",
    ),
    (
        _child_header,
        "child_header_mismatch",
        "the child's header does not name the edge's parent, depth and cwd, or was not "
        "written just before the spawn",
    ),
    (
        _child_task,
        "child_task_mismatch",
        "the child's task is not spawn:<childId> from the parent's session",
    ),
    (
        _response_ids,
        "missing_response_id",
        "a child assistant message that reached the model has no responseId",
    ),
    (_child_work, "child_did_no_work", "the child's transcript has no assistant message at all"),
    (_display, "display_mismatch", "the child's rlm-subagent.json does not describe the edge"),
    (
        _spawn_code,
        "spawn_code_unmatched",
        "the spawnCode is not a parent ipython cell that ran when the spawn was recorded",
    ),
    (
        _usage_attribution,
        "usage_attribution_mismatch",
        "the parent's child_usage_attributed entries do not match the children's model calls",
    ),
    (
        _reply_receipts,
        "unsent_reply",
        "a reply in the parent is not a message its child's transcript says it sent",
    ),
    (
        _orphan_dirs,
        "orphan_child_dir",
        "a sub-* dir under the parent's artifacts has no ledger edge",
    ),
    (_edge_dirs, "edge_without_dir", "a ledger edge has no sub-* dir under the parent's artifacts"),
    (_stale_dirs, "stale_child_dir", "a child transcript is older than the run"),
    (
        _endpoint,
        "unserved_response_id",
        "a child message (or, in a witnessed run, a parent message) carries a response id the "
        "harness's model endpoint did not serve for that session",
    ),
)
INTEGRITY_CHECKS = tuple((check.__name__[1:], *rest, check) for check, *rest in _CHECKS)
INTEGRITY_MESSAGES = {code: sentence for _, code, sentence, _ in INTEGRITY_CHECKS}


def family_of(run: RunArtifacts, family: tuple[Edge, ...], checked: tuple[Edge, ...]) -> Family:
    """What the checks look at: the parent's depth-1 `family`; per-edge checks look at
    `checked`."""
    if run.parent is None:
        # Nothing to compare a child against (parent_transcript_missing fails the run).
        family = checked = ()
    dirs = {child.child_id: child for child in run.children}
    return Family(run, run.parent, family, checked, dirs, transcripts_by_path(run.children))


def run_checks(table: tuple, f: Family) -> Integrity:
    """Every check of a (name, code, sentence, function) table (INTEGRITY_CHECKS,
    rules/witness_checks.py's WITNESS_CHECKS), the first MAX_FAILURES_LISTED failures of each
    kept."""
    results = []
    for name, code, _, function in table:
        failures = function(f)
        listed = tuple(itertools.islice(failures, MAX_FAILURES_LISTED))
        results.append(CheckResult(name, code, len(listed) + sum(1 for _ in failures), listed))
    return Integrity(tuple(results))


def _with_transcripts(f: Family, edges: tuple[Edge, ...] | None = None) -> Iterator[tuple]:
    """The checked `edges` (or others) whose transcript is where the product puts it (else
    child_path fails), with it; none without a parent (`family_of`)."""
    for edge in f.checked if edges is None else edges:
        transcript = f.transcript(edge)
        if transcript is not None:
            yield edge, transcript


def _usage_text(usage: Usage) -> str:
    return (
        f"input {usage.input}, output {usage.output}, cacheRead {usage.cache_read}, "
        f"cacheWrite {usage.cache_write}, totalTokens {usage.total}"
    )
