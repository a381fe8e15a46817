"""Score a run: pure functions from collected artifacts to a verdict.

The rubric (README "What the verdict checks"):
- coverage: every shard's line in the combined answer holds its expected integer;
- delegation evidence: every shard's worker has a depth-1 ledger edge from the
  parent whose child transcript exists, not deleted before its receipt; the
  shard's answer came back in a reply from that child; and the records of every
  child agree with each other (integrity.py);
- dedup: no worker name spawned while an earlier child of that name was live, and
  at most two depth-1 spawns per shard;
- receipts: every depth-1 child has a reply or a terminal notice in the parent;
- efficiency (informational): turns and tokens from raw assistant usage.

No clock, no environment, no file access in `score`: the same artifacts always
give the same verdict bytes. The CLI at the bottom is the thin shell that
regrades a stored run dir.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass

import integrity
from artifacts import RunArtifacts, Transcript, Usage, collect, relative, transcripts_by_path
from cli import print_json, print_note
from fixture import Fixture, FixtureError, Shard, load_manifest
from ledger import Edge

SPAWNS_PER_SHARD = 2
MAX_FINDINGS_LISTED = 20

MESSAGES = {
    "artifact_missing": "the combined answer file was not written",
    "missing_answer": "the combined answer has no line for this shard",
    "wrong_answer": "the shard's line does not hold the expected answer",
    "conflicting_answers": "the shard has lines with different answers",
    "parent_transcript_missing": "no root transcript was found in sessions/",
    "no_spawn": "the parent spawned no depth-1 child at all",
    "kernel_unavailable": "the agent could not start its IPython kernel, so no cell ran "
    "(set PRIME_AGENT_KERNEL_PYTHON)",
    "missing_worker_edge": "no ledger spawn edge from the parent carries this worker's name",
    "missing_child_transcript": "the worker's edge has no child transcript under "
    "session-artifacts/<parent header id>/<childId>/",
    "deleted_before_receipt": "the worker's child was deleted before it replied or was noticed",
    "duplicate_spawn": "a worker name was spawned while an earlier child of that name was live",
    "spawn_budget_exceeded": "more depth-1 spawns than twice the number of shards",
    "missing_receipt": "a child has neither a reply nor a terminal notice in the parent",
    "unsourced_answer": "the shard's answer is in no reply from its worker's child",
    **integrity.MESSAGES,
}
WARNINGS = {
    "extra_lines": "the combined answer has lines for files that are not shards",
    "ledger_findings": "the ledger has lines the product would reject or skip",
    "ambiguous_parent": "several root transcripts exist; the one the stream announced was used",
}


@dataclass(frozen=True)
class Reason:
    code: str
    message: str
    shard: str | None = None
    child_id: str | None = None

    def to_json(self) -> dict:
        out = {"code": self.code, "message": self.message}
        if self.shard is not None:
            out["shard"] = self.shard
        if self.child_id is not None:
            out["child_id"] = self.child_id
        return out


def reason(code: str, shard: str | None = None, child_id: str | None = None, extra: str = ""):
    text = MESSAGES.get(code) or WARNINGS[code]
    return Reason(code, text + (f": {extra}" if extra else ""), shard, child_id)


# --- coverage ---------------------------------------------------------------

BULLET = re.compile(r"^\s*[-*+]\s+(?P<body>\S.*?)\s*$")
ENTRY = re.compile(r"^(?P<file>[^\s:]+)\s*:\s*(?P<answer>.*?)\s*$")
INTEGER = re.compile(r"^[+-]?(?:\d+|\d{1,3}(?:,\d{3})+)$")


@dataclass(frozen=True)
class AnswerLine:
    file: str
    answer: str
    value: int | None
    line: int


def parse_answer_lines(text: str) -> list[AnswerLine]:
    """Bullets `- <file>: <answer>` in the forms a model naturally writes.

    Accepted around the same line: a `shards/` or `./` prefix, backticks or bold
    around the file or the answer, `*` or `+` bullets, surrounding whitespace,
    thousands separators in the number.
    """
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        bullet = BULLET.match(raw)
        if not bullet:
            continue
        body = bullet.group("body").replace("**", "").replace("__", "").replace("`", "")
        entry = ENTRY.match(body)
        if not entry:
            continue
        file = entry.group("file")
        for prefix in ("./", "shards/"):
            if file.startswith(prefix):
                file = file[len(prefix) :]
        answer = entry.group("answer")
        value = int(answer.replace(",", "")) if INTEGER.match(answer) else None
        lines.append(AnswerLine(file, answer, value, number))
    return lines


@dataclass(frozen=True)
class ShardAnswer:
    status: str  # correct | missing | wrong | conflicting
    found: tuple[str, ...]
    value: int | None = None  # the one integer the index gives the shard, if it gives one


def judge_answers(shard: Shard, lines: list[AnswerLine]) -> ShardAnswer:
    """The verdict on one shard from the index lines that name its file (others ignored)."""
    mine = [line for line in lines if line.file == shard.file]
    if not mine:
        return ShardAnswer("missing", ())
    found = tuple(dict.fromkeys(line.answer for line in mine))
    values = {line.value if line.value is not None else line.answer for line in mine}
    if len(values) > 1:
        return ShardAnswer("conflicting", found)
    (value,) = values
    written = value if isinstance(value, int) else None
    return ShardAnswer("correct" if value == shard.expected else "wrong", found, written)


def judge_all(shards, lines: list[AnswerLine]) -> dict[str, ShardAnswer]:
    """`judge_answers` for every shard, with the lines grouped by file once."""
    by_file: dict[str, list[AnswerLine]] = {}
    for line in lines:
        by_file.setdefault(line.file, []).append(line)
    return {shard.file: judge_answers(shard, by_file.get(shard.file, [])) for shard in shards}


# --- delegation and receipts --------------------------------------------------


@dataclass(frozen=True)
class Receipt:
    kind: str  # reply | notice:<kind>
    at_ms: int | None


class Inbox:
    """The parent's replies by sender session and notices by childId, indexed once:
    a run can have a thousand children, each looked up several times."""

    def __init__(self, parent: Transcript | None):
        self.replies: dict[str | None, list] = {}
        self.notices: dict[str | None, list] = {}
        for reply in parent.replies if parent else ():
            self.replies.setdefault(reply.from_session_id, []).append(reply)
        for notice in parent.notices if parent else ():
            self.notices.setdefault(notice.child_id, []).append(notice)


def receipt_of(edge: Edge, transcript: Transcript | None, inbox: Inbox) -> Receipt | None:
    """The earliest reply from the child's session, or notice naming its childId (§6)."""
    session_id = transcript.header_id if transcript and transcript.header_id else _stem(edge.child)
    replies = [Receipt("reply", reply.at_ms) for reply in inbox.replies.get(session_id, ())]
    pool = replies or [
        Receipt("notice:" + notice.kind, notice.at_ms)
        for notice in inbox.notices.get(edge.child_id, ())
    ]
    if not pool:
        return None
    return min(pool, key=lambda receipt: receipt.at_ms if receipt.at_ms is not None else 2**63)


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def counts(edge: Edge, receipt: Receipt | None) -> bool:
    """Live, or deleted after its receipt: deleting a child after it replied is cleanup."""
    return not edge.deleted or (
        receipt is not None
        and receipt.at_ms is not None
        and edge.deleted_at_ms is not None
        and receipt.at_ms <= edge.deleted_at_ms
    )


def delegation_status(edge: Edge, located: tuple | None, receipt: Receipt | None) -> str:
    if located is None or located[0] != edge.child_id:
        return "missing_child_transcript"
    if not counts(edge, receipt):
        return "deleted_before_receipt"
    return "ok"


# --- answer provenance --------------------------------------------------------

TOKEN = re.compile(r"[\w.,+-]+")


def numbers_in(text: str) -> set[int]:
    """The standalone integers of a reply: `23`, `1,234`, `**23**`, `23.`, `count=23`;
    not the `02` of `events-02.jsonl`, nor `3.5`."""
    numbers = set()
    for match in TOKEN.finditer(text):
        token = match.group().rstrip(".,")
        if INTEGER.match(token):
            numbers.add(int(token.replace(",", "")))
    return numbers


def answer_sourced(answer: int, sessions: set[str], inbox: Inbox) -> bool:
    """`answer` is a number in a reply whose sender is one of `sessions` (§6: match
    on `from.sessionId`, never the label)."""
    return any(
        answer in numbers_in(reply.message)
        for session in sessions
        for reply in inbox.replies.get(session, ())
    )


# --- the verdict --------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    resolved: bool
    coverage: bool
    delegation_evidence: bool
    dedup: bool
    receipts: bool
    reasons: tuple[Reason, ...]
    warnings: tuple[Reason, ...]
    shards: tuple[dict, ...]
    children: tuple[dict, ...]
    integrity: dict
    details: dict
    efficiency: dict
    findings: dict
    evidence: dict

    def to_json(self) -> dict:
        return {
            "resolved": self.resolved,
            "coverage": self.coverage,
            "delegation_evidence": self.delegation_evidence,
            "dedup": self.dedup,
            "receipts": self.receipts,
            "reasons": [item.to_json() for item in self.reasons],
            "warnings": [item.to_json() for item in self.warnings],
            "shards": list(self.shards),
            "children": list(self.children),
            "integrity": self.integrity,
            "details": self.details,
            "efficiency": self.efficiency,
            "findings": self.findings,
            "evidence": self.evidence,
        }


def score(fixture: Fixture, run: RunArtifacts, wall_time_s: float | None = None) -> Verdict:
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    parent = run.parent

    # Coverage.
    lines = parse_answer_lines(run.artifact_text) if run.artifact_text is not None else []
    answers = judge_all(fixture.shards, lines)
    if run.artifact_text is None:
        reasons.append(reason("artifact_missing", extra=fixture.artifact))
    else:
        for shard in fixture.shards:
            status = answers[shard.file].status
            if status != "correct":
                code = {"missing": "missing_answer", "wrong": "wrong_answer"}.get(
                    status, "conflicting_answers"
                )
                found = ", ".join(repr(item) for item in answers[shard.file].found)
                detail = f"expected {shard.expected}" + (f", found {found}" if found else "")
                reasons.append(reason(code, shard.file, extra=detail))
    known = {shard.file for shard in fixture.shards}
    extras = sorted({line.file for line in lines if line.file not in known})
    if extras:
        warnings.append(reason("extra_lines", extra=", ".join(extras)))
    coverage = all(answer.status == "correct" for answer in answers.values())
    coverage = coverage and run.artifact_text is not None

    # The parent's depth-1 family, from the ledger.
    parent_path = parent.path if parent else None
    edges = [
        edge
        for edge in run.replay.edges
        if edge.depth == 1 and (parent_path is None or edge.parent == parent_path)
    ]
    spawns = [
        spawn
        for spawn in run.replay.spawns
        if spawn.depth == 1 and (parent_path is None or spawn.parent == parent_path)
    ]
    located = transcripts_by_path(run.children)
    inbox = Inbox(parent)
    receipts_by_edge: dict[int, Receipt | None] = {}
    status_by_edge: dict[int, str] = {}
    sessions_by_edge: dict[int, str] = {}
    for index, edge in enumerate(edges):
        where = located.get(edge.child)
        receipt = receipt_of(edge, where[1] if where else None, inbox) if parent else None
        receipts_by_edge[index] = receipt
        status_by_edge[index] = delegation_status(edge, where, receipt)
        if where and where[1].header_id:
            sessions_by_edge[index] = where[1].header_id
    checked = tuple(
        edge for index, edge in enumerate(edges) if counts(edge, receipts_by_edge[index])
    )
    report = integrity.check(run, tuple(edges), checked)

    # Delegation evidence, per shard.
    if parent is not None and parent.kernel_error:
        # The environment, not the model, failed: said first, before what follows from it.
        reasons.insert(0, reason("kernel_unavailable", extra=parent.kernel_error))
    if parent is None:
        reasons.append(reason("parent_transcript_missing"))
    elif not edges:
        reasons.append(reason("no_spawn"))
    shard_rows = []
    delegated = unsourced = 0
    by_name: dict[str, list[int]] = {}
    for index, edge in enumerate(edges):
        by_name.setdefault(edge.name, []).append(index)
    for shard in fixture.shards:
        mine = by_name.get(shard.worker, [])
        ok = [index for index in mine if status_by_edge[index] == "ok"]
        chosen = _best_edge(ok, receipts_by_edge) if ok else (mine[-1] if mine else None)
        status = "ok" if ok else (status_by_edge[chosen] if chosen is not None else "no_edge")
        if ok:
            delegated += 1
            # Whatever integer the index gives the shard must be one its worker's
            # child reported; a line that gives none (missing, `MISSING (…)`,
            # conflicting) already fails coverage and has nothing to trace.
            sessions = {sessions_by_edge[i] for i in ok if i in sessions_by_edge}
            written = answers[shard.file].value
            if written is not None and not answer_sourced(written, sessions, inbox):
                status = "unsourced"
                unsourced += 1
                senders = ", ".join(edges[i].child_id for i in ok)
                extra = f"{written} is in no reply from {senders}"
                reasons.append(
                    reason("unsourced_answer", shard.file, edges[chosen].child_id, extra)
                )
        elif parent is not None and edges:
            code = "missing_worker_edge" if status == "no_edge" else status
            reasons.append(reason(code, shard.file, edges[chosen].child_id if mine else None))
        receipt = receipts_by_edge.get(chosen) if chosen is not None else None
        shard_rows.append(
            {
                "file": shard.file,
                "worker": shard.worker,
                "expected": shard.expected,
                "answered": list(answers[shard.file].found) or None,
                "coverage": answers[shard.file].status,
                "child_id": edges[chosen].child_id if chosen is not None else None,
                "delegation": status,
                "receipt": receipt.kind if receipt else None,
            }
        )
    for result in report.checks:
        for failure in result.failures:
            reasons.append(reason(result.code, child_id=failure.child_id, extra=failure.detail))
    delegation = (
        parent is not None and delegated == len(fixture.shards) and not unsourced and report.passed
    )

    # Dedup.
    duplicates = [spawn for spawn in spawns if spawn.name_held_by]
    for spawn in duplicates:
        reasons.append(
            reason(
                "duplicate_spawn",
                child_id=spawn.child_id,
                extra=f"{spawn.name!r} was held by {', '.join(spawn.name_held_by)}",
            )
        )
    budget = SPAWNS_PER_SHARD * len(fixture.shards)
    if len(spawns) > budget:
        reasons.append(reason("spawn_budget_exceeded", extra=f"{len(spawns)} > {budget}"))
    dedup = not duplicates and len(spawns) <= budget

    # Receipts, for every depth-1 child, worker-named or not.
    unreceipted = [edge for index, edge in enumerate(edges) if receipts_by_edge[index] is None]
    for edge in unreceipted:
        reasons.append(reason("missing_receipt", child_id=edge.child_id, extra=edge.name))
    receipts = parent is not None and not unreceipted

    child_rows = _children_table(edges, run, located, receipts_by_edge)
    ledger_findings = [f for ledger_file in run.ledgers for f in ledger_file.findings]
    if ledger_findings:
        codes = sorted({finding.code for finding in ledger_findings})
        warnings.append(reason("ledger_findings", extra=", ".join(codes)))
    if any(f.code == "ambiguous_parent" for f in run.findings):
        warnings.append(reason("ambiguous_parent"))

    details = {
        "artifact_present": run.artifact_text is not None,
        "missing_shards": [f for f, answer in answers.items() if answer.status == "missing"],
        "wrong_answers": {
            f: {"expected": str(shard.expected), "found": list(answers[f].found)}
            for shard in fixture.shards
            for f in [shard.file]
            if answers[f].status in ("wrong", "conflicting")
        },
        "depth1_spawns": len(spawns),
        "shard_workers_with_edge_and_child_transcript": delegated,
        "duplicate_spawns": len(duplicates),
        "child_replies": sum(1 for r in receipts_by_edge.values() if r and r.kind == "reply"),
        "terminal_notices": sum(1 for edge in edges if inbox.notices.get(edge.child_id)),
        "children_without_receipt": [
            {"childId": edge.child_id, "name": edge.name} for edge in unreceipted
        ],
    }
    resolved = coverage and delegation and dedup and receipts
    return Verdict(
        resolved=resolved,
        coverage=coverage,
        delegation_evidence=delegation,
        dedup=dedup,
        receipts=receipts,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        shards=tuple(shard_rows),
        children=tuple(child_rows),
        integrity=report.to_json(),
        details=details,
        efficiency=_efficiency(run, edges, located, wall_time_s),
        findings=_findings_summary(run),
        evidence=_evidence(run),
    )


# The reasons that belong to coverage: all a single-agent baseline is scored on.
COVERAGE_CODES = ("artifact_missing", "missing_answer", "wrong_answer", "conflicting_answers")


def outcome(verdict: Verdict, *, baseline: bool = False) -> tuple[bool, tuple[Reason, ...]]:
    """Whether the run passed, and why not. A baseline was told not to delegate, so it
    is judged on coverage alone."""
    if not baseline:
        return verdict.resolved, verdict.reasons
    kept = tuple(item for item in verdict.reasons if item.code in COVERAGE_CODES)
    return verdict.coverage, kept


def _best_edge(ok: list[int], receipts: dict[int, Receipt | None]) -> int:
    """Among qualifying edges, the latest one that replied, else the latest."""
    replied = [index for index in ok if receipts[index] and receipts[index].kind == "reply"]
    return (replied or ok)[-1]


def _children_table(edges, run: RunArtifacts, located, receipts_by_edge):
    rows = []
    for index, edge in enumerate(edges):
        where = located.get(edge.child)
        transcript = where[1] if where else None
        receipt = receipts_by_edge[index]
        rows.append(
            {
                "child_id": edge.child_id,
                "name": edge.name,
                "transcript": relative(run.run_dir, edge.child) if transcript else None,
                "deleted": edge.deleted,
                "delete_reason": edge.delete_reason,
                "receipt": receipt.kind if receipt else None,
                "turns": transcript.turns if transcript else 0,
                "failed_calls": transcript.failed_calls if transcript else 0,
                "tokens": transcript.usage.total if transcript else 0,
            }
        )
    return rows


def _efficiency(run: RunArtifacts, edges, located, wall_time_s) -> dict:
    # Tokens are the raw assistant usage of every transcript; the parent's
    # child_usage_attributed entries repeat child usage and are never added (§5).
    parent = run.parent
    children_usage = Usage()
    children_turns = children_aborted = 0
    seen: set[str] = set()
    for edge in edges:
        where = located.get(edge.child)
        if where and edge.child not in seen:
            seen.add(edge.child)
            children_usage = children_usage.plus(where[1].usage)
            children_turns += where[1].turns
            children_aborted += where[1].aborted_calls
    parent_usage = parent.usage if parent else Usage()
    stream = run.stream
    return {
        "parent": {
            "turns": parent.turns if parent else 0,
            "failed_calls": parent.failed_calls if parent else 0,
            "aborted_calls": parent.aborted_calls if parent else 0,
            "tokens": parent_usage.to_json(),
        },
        "children": {
            "count": len(seen),
            "turns": children_turns,
            "aborted_calls": children_aborted,
            "tokens": children_usage.to_json(),
        },
        "total_tokens": parent_usage.total + children_usage.total,
        "total_turns": (parent.turns if parent else 0) + children_turns,
        "stream": {"turns": stream.turns, "tokens": stream.usage.to_json()} if stream else None,
        "wall_time_s": wall_time_s,
    }


def _findings_summary(run: RunArtifacts) -> dict:
    everything = list(run.findings)
    for ledger_file in run.ledgers:
        everything.extend(ledger_file.findings)
    if run.stream:
        everything.extend(run.stream.findings)
    if run.parent:
        everything.extend(run.parent.findings)
    for child in run.children:
        for transcript in child.transcripts:
            everything.extend(transcript.findings)
    counts = Counter(finding.code for finding in everything)
    listed = []
    for finding in everything[:MAX_FINDINGS_LISTED]:
        item = finding.to_json()
        item["file"] = relative(run.run_dir, item["file"])
        listed.append(item)
    return {"counts": dict(sorted(counts.items())), "first": listed}


def _evidence(run: RunArtifacts) -> dict:
    return {
        "parent_transcript": relative(run.run_dir, run.parent.path) if run.parent else None,
        "parent_header_id": run.parent.header_id if run.parent else None,
        "root_transcripts": len(run.root_transcripts),
        "children_root": relative(run.run_dir, run.children_root) if run.children_root else None,
        "child_dirs": len(run.children),
        "ledgers": [
            {
                "path": relative(run.run_dir, item.path),
                "records": len(item.records),
                "rejected_by_product": item.fatal,
            }
            for item in run.ledgers
        ],
    }


# --- CLI: regrade a stored run dir --------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scorer.py",
        description="Re-score a stored run dir without running anything. Prints the verdict "
        "JSON on stdout. Exit 0 resolved, 1 not resolved, 2 bad fixture or run dir.",
    )
    parser.add_argument(
        "--fixture",
        required=True,
        help="fixture dir (or its fixture.json) whose answers and worker names to score against",
    )
    parser.add_argument("run_dir", help="a run dir written by runner.py, or a materialized capture")
    args = parser.parse_args(argv)
    try:
        fixture = load_manifest(args.fixture)
    except FixtureError as error:
        print_note(f"scorer.py: {error.message}")
        print_json(
            json.dumps({"error": "invalid_fixture", "code": error.code, "detail": error.message})
        )
        return 2
    if not os.path.isdir(args.run_dir):
        print_note(f"scorer.py: {args.run_dir} is not a directory")
        print_json(json.dumps({"error": "run_dir_missing", "detail": args.run_dir}))
        return 2
    run = collect(args.run_dir, fixture.artifact)
    verdict = score(fixture, run)
    print_json(json.dumps(verdict.to_json(), indent=2))
    return 0 if verdict.resolved else 1


if __name__ == "__main__":
    sys.exit(main())
