"""Collect what a run left on disk into small frozen records for the scorer.

The layout is the product's (docs/product-contract.md §3): the root transcript in
`<run>/sessions/`, children under `<run>/session-artifacts/<root header id>/sub-*/`,
the ledger under the agent home, the `--mode json` stream in `stdout.jsonl`, and
the combined answer in the repo. Every reader streams, caps what it keeps, and
turns bad bytes into findings.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

from swarm_fanout import ledger
from swarm_fanout.evidence.acp_stream import AcpStream, read_acp_stream
from swarm_fanout.evidence.jsonl import (
    Finding,
    dict_field,
    iso_to_ms,
    iter_objects,
    read_json_object,
    read_text,
    text_field,
)
from swarm_fanout.evidence.kernel_records import SessionRecord, read_kernel_records
from swarm_fanout.evidence.number_tokens import numbers_among, numbers_in
from swarm_fanout.evidence.replays import Replay, read_replay
from swarm_fanout.evidence.runpaths import DISPLAY_FILE, RunPaths
from swarm_fanout.evidence.transcripts import (
    MAX_KEPT_PER_TRANSCRIPT,
    Transcript,
    Usage,
    digest,
    read_transcript,
    usage_from,
)
from swarm_fanout.evidence.witness import Witness, file_digest, line_digests, read_witness

MAX_ARTIFACT_BYTES = 16 * 1024 * 1024
SAFE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_-]{0,127}\Z")
CHILD_DIR = re.compile(r"^sub-[0-9a-f]{8}\Z")


class Display(NamedTuple):
    """`sub-*/rlm-subagent.json` (§6), with `sessionFile` canonicalised (§4 "Path")."""

    child_id: str | None
    session_name: str | None
    session_file: str | None
    spawn_code_sha256: str | None
    spawn_code_numbers: frozenset[int] = frozenset()  # of interest, as Transcript's


class ChildDir(NamedTuple):
    """One `sub-<8hex>/` dir: its transcript(s) and its display record (§6)."""

    child_id: str
    path: str
    transcripts: tuple[Transcript, ...]
    display: Display | None


class Stream(NamedTuple):
    """The `--mode json` stdout stream: root events only (§7)."""

    header_id: str | None
    turns: int
    usage: Usage
    first_error: str | None
    findings: tuple[Finding, ...]
    # What the stream showed, to hold against the root transcript (rules/witness_checks.py):
    # the response ids of its assistant message_end events and the toolCallIds of its
    # tool_execution_start events, in order, and every child id of its rlm_child_update.
    response_ids: tuple[str, ...] = ()
    tool_call_ids: tuple[str, ...] = ()
    child_ids: frozenset[str] = frozenset()


class RunArtifacts(NamedTuple):
    run_dir: str
    parent: Transcript | None
    root_transcripts: tuple[str, ...]
    children_root: str | None
    children: tuple[ChildDir, ...]
    ledgers: tuple[ledger.LedgerFile, ...]
    replay: ledger.Replay
    stream: Stream | None
    artifact_text: str | None
    findings: tuple[Finding, ...]
    # Each ledger file's lines' sha256 by file name, to hold against what the runner saw
    # appear ({} but for a witnessed run).
    ledger_line_digests: dict[str, tuple[str, ...]]
    # `started_at` of the runner's run-meta.json; None for a run dir without one.
    run_started_ms: int | None = None
    # What a harness-controlled model endpoint served: response id -> the canonical
    # `Conversation log:` path of the request (§10 "Endpoint cross-check"): the runner's
    # proxy record in witness.jsonl when there is one, else the scripted model's own
    # model-log.jsonl; None when the run has neither.
    served: dict[str, str | None] | None = None
    # The runner's witness (evidence/witness.py) as it is now, and the sha256 the runner recorded
    # for it in result.json (None: the run was not witnessed, or its result says nothing).
    witness: Witness | None = None
    witness_expected: str | None = None
    # The ACP drive's stream (evidence/acp_stream.py); None for the other drives.
    acp_stream: AcpStream | None = None
    # The answer file's bytes' sha256 (only read for a witnessed run).
    artifact_sha256: str | None = None
    # What each replying child's cells did when run again (evidence/replays.py); None: the
    # run was not replayed.
    cell_replay: Replay | None = None
    # What each session's kernel recorded of itself (evidence/kernel_records.py), by session.
    kernel_records: dict[str, SessionRecord] | None = None


def relative(root: str, path: str) -> str:
    """`path` relative to the run dir when it lies inside it, else as it is."""
    inside = path == root or path.startswith(root.rstrip(os.sep) + os.sep)
    return os.path.relpath(path, root) if inside else path


def transcripts_by_path(children: tuple[ChildDir, ...]) -> dict[str, tuple[str, Transcript]]:
    """Canonical transcript path -> (containing sub-* dir name, transcript)."""
    return {
        transcript.path: (child.child_id, transcript)
        for child in children
        for transcript in child.transcripts
    }


def collect(
    run_dir: str, artifact: str | None, witness_expected: str | None = None
) -> RunArtifacts:
    """Read a run dir laid out as the runner (and the captured runs) lay it out;
    `artifact` is the combined answer's name in the repo (None: not read);
    `witness_expected` is the sha256 the runner recorded for the run's witness.jsonl."""
    paths = RunPaths.of(os.path.realpath(run_dir))
    findings: list[Finding] = []
    canon = ledger.Canon()
    # The answer file first: the numbers it holds are the ones whose provenance the
    # transcripts are read for (its findings keep their place in the list below).
    artifact_findings: list[Finding] = []
    text = (
        read_text(paths.artifact(artifact), artifact_findings, max_bytes=MAX_ARTIFACT_BYTES)
        if artifact
        else None
    )
    interest = frozenset(numbers_in(text)) if text else frozenset()
    stream = read_stream(paths.stdout)
    roots = root_transcript_files(paths.sessions, findings)
    chosen = pick_parent(roots, stream.header_id if stream else None, findings)
    parent = read_transcript(chosen, canon, interest, artifact) if chosen else None
    children_root = None
    children: tuple[ChildDir, ...] = ()
    if parent is not None and parent.header_id and SAFE_ID.match(parent.header_id):
        # Children join on the root's header id, never its file name, beside the dir
        # that holds the root file as resolved (§1 facts 2, 3).
        beside = RunPaths.of(os.path.dirname(canon.dir(paths.sessions)))
        children_root = beside.children_root(parent.header_id)
        sent = sent_by(parent, (), interest)
        children = read_children(children_root, findings, canon, interest, sent)
        children = _searched_for_all_they_sent(parent, children, canon, interest)
    elif parent is not None:
        detail = f"header id {parent.header_id!r} unusable"
        findings.append(Finding(parent.path, 1, "bad_header_id", detail))
    # The runner sets PRIME_AGENT_SESSION_DIR to the run's sessions dir (§1 fact 1).
    ledgers = tuple(
        ledger.read_ledger(path)
        for path in ledger.ledger_candidates(paths.agent_home, paths.sessions, paths.root, canon)
    )
    findings.extend(artifact_findings)
    witness = read_witness(paths.witness)
    served = served_by(witness, paths.model_log, findings, canon)
    meta = read_json_object(paths.run_meta, findings) if os.path.lexists(paths.run_meta) else None
    return RunArtifacts(
        run_dir=paths.root,
        parent=parent,
        root_transcripts=tuple(path for path, _ in roots),
        children_root=children_root,
        children=children,
        ledgers=ledgers,
        replay=ledger.replay(list(ledgers), canon),
        stream=stream,
        artifact_text=text,
        findings=tuple(findings),
        run_started_ms=iso_to_ms((meta or {}).get("started_at")),
        served=served,
        witness=witness,
        witness_expected=witness_expected,
        acp_stream=read_acp_stream(paths.acp_stream),
        cell_replay=read_replay(paths.replay),
        kernel_records=read_kernel_records(paths.kernel_record),
        artifact_sha256=file_digest(paths.artifact(artifact)) if witness and artifact else None,
        ledger_line_digests=(
            {os.path.basename(item.path): line_digests(item.path) for item in ledgers}
            if witness
            else {}
        ),
    )


def served_by(
    witness: Witness | None, model_log: str, findings: list[Finding], canon: ledger.Canon
) -> dict[str, str | None] | None:
    """Response ids a harness-controlled model endpoint served, with the transcript each request
    named in its system prompt (`Conversation log:`, §9 "Children"): those the runner's proxy
    relayed with status 200, else those the scripted model's endpoint logged; None: neither."""
    if witness is not None and witness.header.get("proxy") is True:
        # The runner's proxy relayed the model (no proxy: a stand-in that calls none).
        calls = [
            (call.get("response_id"), call.get("session"))
            for call in witness.model_calls
            if call.get("status") == 200
        ]
    elif os.path.lexists(model_log):
        calls = [
            (line.record.get("response_id"), line.record.get("conversation_log"))
            for line in iter_objects(model_log, findings)
        ]
    else:
        return None
    return {
        response_id: canon.file(log) if isinstance(log, str) and log else None
        for response_id, log in calls
        if isinstance(response_id, str) and response_id
    }


def root_transcript_files(sessions_dir: str, findings: list[Finding]) -> list[tuple[str, dict]]:
    """(canonical path, header) of every root transcript directly in the sessions dir."""
    found = []
    for entry in _scan(sessions_dir, findings):
        if not entry.name.endswith(".jsonl"):
            continue
        if entry.is_symlink() or not entry.is_file(follow_symlinks=False):
            findings.append(Finding(entry.path, 0, "not_a_regular_file", "skipped"))
            continue
        header = _header(entry.path, findings)
        if header is not None:
            found.append((os.path.realpath(entry.path), header))
    return found


def pick_parent(
    roots: list[tuple[str, dict]], header_id: str | None, findings: list[Finding]
) -> str | None:
    """The parent's transcript file: the root whose header id the stream announced; else the
    only root; else the earliest, a finding."""
    depth0 = {path: header for path, header in roots if not header.get("parentSession")}
    announced = [path for path, header in depth0.items() if header.get("id") == header_id]
    chosen = announced[0] if header_id and announced else None
    if chosen is None and depth0:
        chosen = min(depth0, key=lambda path: (str(depth0[path].get("timestamp")), path))
        if len(depth0) > 1:
            detail = f"{len(depth0)} root transcripts; took the first"
            findings.append(Finding(chosen, 1, "ambiguous_parent", detail))
    return chosen


def sent_by(
    parent: Transcript, children: tuple[ChildDir, ...], interest: frozenset[int]
) -> dict[str, set[int]]:
    """The numbers of interest each session was heard to send, by its session id: in the
    messages the parent and the children received (`heard`), and in the parent's replies,
    which the rules join on the sender's id."""
    received = [*parent.heard, *(h for c in children for t in c.transcripts for h in t.heard)]
    pairs = [(heard.from_session_id, heard.numbers) for heard in received]
    pairs += [(r.from_session_id, numbers_in(r.message) & interest) for r in parent.replies]
    sent: dict[str, set[int]] = {}
    for sender, numbers in pairs:
        if sender:
            sent.setdefault(sender, set()).update(numbers)
    return sent


def _searched_for_all_they_sent(
    parent: Transcript,
    children: tuple[ChildDir, ...],
    canon: ledger.Canon,
    interest: frozenset[int],
) -> tuple[ChildDir, ...]:
    """Each child's transcript was searched for what the parent heard from it; one that
    another child heard more from (a message between children) is read again for all."""
    sent = sent_by(parent, children, interest)

    def searched(transcript: Transcript) -> Transcript:
        wanted = sent.get(transcript.header_id or "", set())
        if transcript.searched_for is None or wanted <= transcript.searched_for:
            return transcript
        return read_transcript(transcript.path, canon, interest, sent=sent)

    return tuple(
        child._replace(transcripts=tuple(map(searched, child.transcripts))) for child in children
    )


def read_children(
    children_root: str,
    findings: list[Finding],
    canon: ledger.Canon,
    interest: frozenset[int],
    sent: dict[str, set[int]],
) -> tuple[ChildDir, ...]:
    children = []
    for entry in _scan(children_root, findings):
        if not CHILD_DIR.match(entry.name):
            continue
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            findings.append(Finding(entry.path, 0, "not_a_directory", "child dir skipped"))
            continue
        # Neither the dir nor its transcripts are links (checked on the entries).
        child_dir = os.path.join(canon.dir(children_root), entry.name)
        transcripts = []
        display = None
        for item in _scan(entry.path, findings):
            if item.name == DISPLAY_FILE:
                # Whatever it is, the reader says what is wrong with it (a link, a FIFO).
                display = read_json_object(item.path, findings)
                continue
            if not item.name.endswith(".jsonl"):
                continue
            if item.is_symlink() or not item.is_file(follow_symlinks=False):
                findings.append(Finding(item.path, 0, "not_a_regular_file", "skipped"))
                continue
            path = os.path.join(child_dir, item.name)
            transcripts.append(read_transcript(path, canon, interest, sent=sent))
        children.append(
            ChildDir(
                child_id=entry.name,
                path=child_dir,
                transcripts=tuple(transcripts),
                display=read_display(display, canon, interest) if display is not None else None,
            )
        )
    return tuple(children)


def read_display(record: dict, canon: ledger.Canon, interest: frozenset[int]) -> Display:
    code = text_field(record, "spawnCode")
    session_file = text_field(record, "sessionFile")
    return Display(
        child_id=text_field(record, "childId"),
        session_name=text_field(record, "sessionName"),
        # Display files are not realpath'd, the ledger is: compare canonical forms (§4).
        session_file=canon.file(session_file) if session_file else None,
        spawn_code_sha256=digest(code) if code is not None else None,
        spawn_code_numbers=numbers_among(code, interest) if code is not None else frozenset(),
    )


def _scan(directory: str, findings: list[Finding]) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except OSError as error:
        findings.append(Finding(directory, 0, "unreadable", f"cannot list: {error.strerror}"))
        return []


def _header(path: str, findings: list[Finding]) -> dict | None:
    """Line 1's session header, reading that line alone: the root chosen as the
    parent is read whole afterwards, and the others are not needed."""
    found: list[Finding] = []
    header = seen = None
    # max_bytes=1 stops after the line that crosses it, which is still read whole.
    for seen in iter_objects(path, found, max_bytes=1):
        if seen.number == 1 and seen.record.get("type") == "session":
            header = seen.record
        break
    # Anything at all there (a line, a bad line, more past line 1) and no header on it.
    missing = header is None and (seen is not None or bool(found))
    # Stopping after line 1 is the point, not a finding.
    findings.extend(finding for finding in found if finding.code != "byte_cap")
    if missing:
        findings.append(Finding(path, 1, "no_header", "line 1 is not a session header"))
    return header


# How far back a turn_end's cells are looked for among those its tool_execution_start events
# showed: the cells of one assistant message.
MISSED_CALLS_LOOKBACK = 64
# The stream's lines that `read_stream` never reads, told by their `type` and, for a
# message_end, their message's `role`, which the product writes first (§7): passed over
# unparsed. Most of the stream's bytes are in them (every update repeats the message so far).
UNREAD_STREAM_LINES = tuple(
    b'{"type":"%s"' % kind
    for kind in b"agent_start agent_end turn_start message_start message_update "
    b"tool_execution_update tool_execution_end session_action_update".split()
) + tuple(
    b'{"type":"message_end","message":{"role":"%s"' % role
    for role in (b"user", b"toolResult", b"custom")
)


def read_stream(path: str) -> Stream | None:
    """Count LLM calls on stdout: one assistant `message_end` each (§7 "Counting")."""
    if not os.path.lexists(path):
        return None
    findings: list[Finding] = []
    header_id = None
    turns = 0
    usage = Usage()
    first_error = None
    response_ids: list[str] = []
    tool_call_ids: list[str] = []
    child_ids: set[str] = set()
    for line in iter_objects(path, findings, skip=UNREAD_STREAM_LINES):
        record = line.record
        kind = record.get("type")
        if line.number == 1 and kind == "session":
            header_id = text_field(record, "id")
        elif kind == "tool_execution_start":
            call_id = text_field(record, "toolCallId")
            if call_id and len(tool_call_ids) < MAX_KEPT_PER_TRANSCRIPT:
                tool_call_ids.append(call_id)
        elif kind == "rlm_child_update":
            child_id = text_field(dict_field(record, "child"), "id")
            if child_id and len(child_ids) < MAX_KEPT_PER_TRANSCRIPT:
                child_ids.add(child_id)
        message = record.get("message") if kind in ("turn_end", "message_end") else None
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        response_id = text_field(message, "responseId")
        if kind == "turn_end":
            # The turn's assistant message again (§7): the call and its cells are taken from
            # here when the stream left out its message_end and tool_execution_start.
            if not response_id or response_id in response_ids[-1:]:
                continue
            content = message.get("content")
            for part in content if isinstance(content, list) else ():
                call_id = text_field(part, "id") if isinstance(part, dict) else None
                if (
                    call_id
                    and part.get("type") == "toolCall"
                    and call_id not in tool_call_ids[-MISSED_CALLS_LOOKBACK:]
                    and len(tool_call_ids) < MAX_KEPT_PER_TRANSCRIPT
                ):
                    tool_call_ids.append(call_id)
        turns += 1
        usage = usage.plus(usage_from(dict_field(message, "usage")))
        if response_id and len(response_ids) < MAX_KEPT_PER_TRANSCRIPT:
            response_ids.append(response_id)
        if first_error is None and message.get("stopReason") == "error":
            first_error = text_field(message, "errorMessage") or "model call failed"
    ids = (tuple(response_ids), tuple(tool_call_ids), frozenset(child_ids))
    return Stream(header_id, turns, usage, first_error, tuple(findings), *ids)
