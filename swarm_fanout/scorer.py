"""Score a run: pure functions from collected artifacts to a verdict.

How to read it: `view_of` computes, once, what every criterion needs (the
combined answer's lines, the parent's depth-1 children with their transcripts
and receipts, the integrity checks). Each criterion is one small function over
that view returning a `Criterion(passed, reasons, rows)`; `CRITERIA` lists them
and `score` only assembles them (`resolved` is all of them). The rubric
(docs/rubric.md):
- coverage: every shard's line in the combined answer holds its expected integer;
- delegation evidence: every shard's worker has a depth-1 ledger edge from the
  parent whose child transcript exists, not deleted before its receipt; the
  shard's answer came back in a reply from that child; and the records of every
  child agree with each other (rules/integrity.py);
- dedup: no worker name spawned while an earlier child of that name was live, and
  at most SPAWNS_PER_SHARD depth-1 spawns per shard;
- receipts: every depth-1 child has a reply or a terminal notice in the parent;
- efficiency (informational): turns and tokens from raw assistant usage.

No clock, no environment, no file access in `score`: the same artifacts always
give the same verdict bytes. Run as a program (`scorer.py RUN_DIR`), it hands on to the
regrade shell, shell/regrade.py.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts, relative
from swarm_fanout.evidence.fixture import Fixture, Shard, undistinctive_answers
from swarm_fanout.evidence.number_tokens import INTEGER
from swarm_fanout.evidence.transcripts import Usage
from swarm_fanout.rules.integrity import INTEGRITY_MESSAGES
from swarm_fanout.rules.knowledge import Knowledge
from swarm_fanout.rules.provenance import PROVENANCE_RULES, ShardTrace
from swarm_fanout.rules.runview import Child, RunView, view_of
from swarm_fanout.rules.witness_checks import WITNESS_MESSAGES

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
    "answer_known_before_spawn": "the parent put the shard's answer, which it knew, in its "
    "child's task: it derived or received it before it delegated, or the spawning cell "
    "computed it",
    "answer_not_derived": "the child that replied with the shard's answer did not work it out "
    "from its shard: the call that first showed it did not read the shard, or it was typed "
    "into its code, read from another session's file, or received from a session that knew "
    "it first",
    "answer_written_before_reply": "the answer file's final content was written before the "
    "reply that sources the shard reached the parent",
    **INTEGRITY_MESSAGES,
    **WITNESS_MESSAGES,
}
WARNINGS = {
    "extra_lines": "the combined answer has lines for files that are not shards",
    "ledger_findings": "the ledger has lines the product would reject or skip",
    "ambiguous_parent": "several root transcripts exist and the stream announced none of them; "
    "the one with the earliest header timestamp was used",
    "unwitnessed": "the runner did not witness this run (no witness.jsonl): every file scored "
    "was writable by the agent while it ran",
    "not_replayed": "the children's cells were not run again (no replay.jsonl): where each "
    "child's answer came from was judged by reading its code alone",
    "answers_not_distinctive": "these shards' expected answers are numbers an honest prompt or "
    "cell may hold by chance, so a number found in a task or a cell says little about who knew "
    "it: their provenance could only be judged by the flow rules",
}


class Reason(NamedTuple):
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


# --- the criteria -------------------------------------------------------------


class Criterion(NamedTuple):
    """One criterion's finding: whether it holds, why not, and its per-shard rows."""

    passed: bool
    reasons: tuple[Reason, ...]
    rows: tuple[dict, ...] = ()


def coverage(view: RunView) -> Criterion:
    """Every shard's line in the combined answer holds its expected integer."""
    fixture = view.fixture
    if view.run.artifact_text is None:
        reasons = [reason("artifact_missing", extra=fixture.artifact)]
    else:
        reasons = []
        for shard in fixture.shards:
            answer = view.answers[shard.file]
            if answer.status != "correct":
                code = {"missing": "missing_answer", "wrong": "wrong_answer"}.get(
                    answer.status, "conflicting_answers"
                )
                found = ", ".join(repr(item) for item in answer.found)
                detail = f"expected {shard.expected}" + (f", found {found}" if found else "")
                reasons.append(reason(code, shard.file, extra=detail))
    rows = tuple(
        {
            "file": shard.file,
            "worker": shard.worker,
            "expected": shard.expected,
            "answered": list(view.answers[shard.file].found) or None,
            "coverage": view.answers[shard.file].status,
        }
        for shard in fixture.shards
    )
    passed = view.run.artifact_text is not None and all(
        answer.status == "correct" for answer in view.answers.values()
    )
    return Criterion(passed, tuple(reasons), rows)


def delegation_evidence(view: RunView) -> Criterion:
    """Every shard's worker has an edge that is evidence of delegation, the shard's
    answer came back in a reply from that child, the children's records agree with each
    other (rules/integrity.py), and the disk agrees with the runner's own channels
    (rules/witness_checks.py)."""
    parent = view.run.parent
    reasons = []
    if parent is None:
        reasons.append(reason("parent_transcript_missing"))
    elif not view.children:
        reasons.append(reason("no_spawn"))
    rows = []
    knowledge = Knowledge(view)
    for shard in view.fixture.shards:
        row, problem = _shard_delegation(view, shard, knowledge)
        rows.append(row)
        if problem is not None:
            reasons.append(problem)
    for result in view.integrity.checks + view.witness.checks:
        for failure in result.failures:
            reasons.append(reason(result.code, child_id=failure.child_id, extra=failure.detail))
    passed = (
        parent is not None
        and all(row["delegation"] == "ok" for row in rows)
        and view.integrity.passed
        and view.witness.passed
    )
    return Criterion(passed, tuple(reasons), tuple(rows))


def _shard_delegation(
    view: RunView, shard: Shard, knowledge: Knowledge
) -> tuple[dict, Reason | None]:
    """The shard's delegation row, and the reason it is not evidence (None when it is)."""
    mine = view.workers(shard)
    ok = view.delegated(shard)
    chosen = _best_child(ok) if ok else (mine[-1] if mine else None)
    status = "ok" if ok else (chosen.delegation if chosen else "no_edge")
    problem = None
    # Whatever integer the index gives the shard must have been worked out by the
    # worker's child and learned from it; a line that gives none (missing, `MISSING
    # (…)`, conflicting) already fails coverage and has nothing to trace.
    written = view.answers[shard.file].value
    if ok and written is not None:
        for code, failed_status, rule in PROVENANCE_RULES:
            extra = rule(ShardTrace(view, written, tuple(ok), knowledge, shard.file))
            if extra is not None:
                status = failed_status
                problem = reason(code, shard.file, chosen.child_id, extra)
                break
    elif not ok and view.run.parent is not None and view.children:
        # Without a parent or any edge, that one reason already says it all.
        code = "missing_worker_edge" if status == "no_edge" else status
        problem = reason(code, shard.file, chosen.child_id if chosen else None)
    row = {
        "child_id": chosen.child_id if chosen else None,
        "delegation": status,
        "receipt": chosen.receipt.kind if chosen and chosen.receipt else None,
    }
    return row, problem


def _kernel_record(run) -> dict:
    """How many sessions' kernels recorded what they did (rules/kernels.py), for a run
    whose kernels did; nothing for one from before there was such a record."""
    records = run.kernel_records
    return {} if records is None else {"kernel_record": {"sessions": len(records)}}


def _best_child(ok: list[Child]) -> Child:
    """Among qualifying children, the latest one that replied, else the latest."""
    replied = [child for child in ok if child.receipt and child.receipt.kind == "reply"]
    return (replied or ok)[-1]


def dedup(view: RunView) -> Criterion:
    """No worker name spawned while an earlier child of that name was live, and at
    most SPAWNS_PER_SHARD depth-1 spawns per shard."""
    duplicates = [spawn for spawn in view.spawns if spawn.name_held_by]
    reasons = [
        reason(
            "duplicate_spawn",
            child_id=spawn.child_id,
            extra=f"{spawn.name!r} was held by {', '.join(spawn.name_held_by)}",
        )
        for spawn in duplicates
    ]
    budget = SPAWNS_PER_SHARD * len(view.fixture.shards)
    if len(view.spawns) > budget:
        reasons.append(reason("spawn_budget_exceeded", extra=f"{len(view.spawns)} > {budget}"))
    return Criterion(not reasons, tuple(reasons))


def receipts(view: RunView) -> Criterion:
    """Every depth-1 child, worker-named or not, has a reply or a terminal notice."""
    reasons = tuple(
        reason("missing_receipt", child_id=child.child_id, extra=child.edge.name)
        for child in view.children
        if child.receipt is None
    )
    return Criterion(view.run.parent is not None and not reasons, reasons)


# The verdict's criteria by name, in the order they are reported; `resolved` is all of them.
CRITERIA = {
    criterion.__name__: criterion for criterion in (coverage, delegation_evidence, dedup, receipts)
}
CRITERION_NAMES = tuple(CRITERIA)
COVERAGE = coverage.__name__  # all a single-agent baseline is judged on


# --- the verdict --------------------------------------------------------------


class Verdict(NamedTuple):
    resolved: bool
    criteria: dict[str, bool]  # by name, in CRITERIA's order: whether each passed
    reasons: tuple[Reason, ...]
    warnings: tuple[Reason, ...]
    shards: tuple[dict, ...]
    children: tuple[dict, ...]
    integrity: dict
    witness: dict
    details: dict
    efficiency: dict
    findings: dict
    evidence: dict

    def to_json(self) -> dict:
        return {
            "resolved": self.resolved,
            **self.criteria,
            "reasons": [item.to_json() for item in self.reasons],
            "warnings": [item.to_json() for item in self.warnings],
            "shards": list(self.shards),
            "children": list(self.children),
            "integrity": self.integrity,
            "witness": self.witness,
            "details": self.details,
            "efficiency": self.efficiency,
            "findings": self.findings,
            "evidence": self.evidence,
        }


def score(fixture: Fixture, run: RunArtifacts, wall_time_s: float | None = None) -> Verdict:
    """The verdict on one run: each criterion judged over one shared view of the run,
    then assembled. Pure: the same artifacts always give the same verdict bytes."""
    view = view_of(fixture, run)
    judged = {name: criterion(view) for name, criterion in CRITERIA.items()}
    reasons = list(_environment(view))
    for finding in judged.values():
        reasons.extend(finding.reasons)
    shard_rows = tuple(
        {**covered, **delegated}
        for covered, delegated in zip(
            judged[COVERAGE].rows, judged[delegation_evidence.__name__].rows, strict=True
        )
    )
    return Verdict(
        resolved=all(finding.passed for finding in judged.values()),
        criteria={name: finding.passed for name, finding in judged.items()},
        reasons=tuple(reasons),
        warnings=_warnings(view),
        shards=shard_rows,
        children=_children_table(view),
        integrity=view.integrity.to_json(),
        witness={
            "witnessed": run.witness is not None,
            **_kernel_record(run),
            **view.witness.to_json(),
        },
        details=_details(view),
        efficiency=_efficiency(view, wall_time_s),
        findings=_findings_summary(run),
        evidence=_evidence(run),
    )


def _environment(view: RunView) -> tuple[Reason, ...]:
    """Failures of the environment, not the model: said before what follows from them."""
    parent = view.run.parent
    if parent is not None and parent.kernel_error:
        return (reason("kernel_unavailable", extra=parent.kernel_error),)
    return ()


def _warnings(view: RunView) -> tuple[Reason, ...]:
    run = view.run
    warnings = []
    known = {shard.file for shard in view.fixture.shards}
    extras = sorted({line.file for line in view.lines if line.file not in known})
    if extras:
        warnings.append(reason("extra_lines", extra=", ".join(extras)))
    ledger_findings = [finding for item in run.ledgers for finding in item.findings]
    if ledger_findings:
        codes = sorted({finding.code for finding in ledger_findings})
        warnings.append(reason("ledger_findings", extra=", ".join(codes)))
    if any(finding.code == "ambiguous_parent" for finding in run.findings):
        warnings.append(reason("ambiguous_parent"))
    if run.witness is None and not run.witness_expected:
        warnings.append(reason("unwitnessed"))
    if run.cell_replay is None and view.children:
        warnings.append(reason("not_replayed"))
    plain = undistinctive_answers(view.fixture)
    if plain:
        named = ", ".join(f"{item.file} ({item.reason})" for item in plain)
        warnings.append(reason("answers_not_distinctive", extra=named))
    return tuple(warnings)


def _details(view: RunView) -> dict:
    """The counts behind the verdict, in the captured runs' expected.json terms."""
    answers = view.answers
    duplicates = [spawn for spawn in view.spawns if spawn.name_held_by]
    return {
        "artifact_present": view.run.artifact_text is not None,
        "missing_shards": [name for name, answer in answers.items() if answer.status == "missing"],
        "wrong_answers": {
            shard.file: {"expected": str(shard.expected), "found": list(answers[shard.file].found)}
            for shard in view.fixture.shards
            if answers[shard.file].status in ("wrong", "conflicting")
        },
        "depth1_spawns": len(view.spawns),
        "shard_workers_with_edge_and_child_transcript": sum(
            1 for shard in view.fixture.shards if view.delegated(shard)
        ),
        "duplicate_spawns": len(duplicates),
        "child_replies": sum(
            1 for child in view.children if child.receipt and child.receipt.kind == "reply"
        ),
        "terminal_notices": sum(
            1 for child in view.children if view.inbox.notices.get(child.child_id)
        ),
        "children_without_receipt": [
            {"childId": child.child_id, "name": child.edge.name}
            for child in view.children
            if child.receipt is None
        ],
    }


def _children_table(view: RunView) -> tuple[dict, ...]:
    return tuple(
        {
            "child_id": child.child_id,
            "name": child.edge.name,
            "transcript": relative(view.run.run_dir, child.edge.child)
            if child.transcript
            else None,
            "deleted": child.edge.deleted,
            "delete_reason": child.edge.delete_reason,
            "receipt": child.receipt.kind if child.receipt else None,
            "turns": child.transcript.turns if child.transcript else 0,
            "failed_calls": child.transcript.failed_calls if child.transcript else 0,
            "tokens": child.transcript.usage.total if child.transcript else 0,
        }
        for child in view.children
    )


def _efficiency(view: RunView, wall_time_s: float | None) -> dict:
    # Tokens are the raw assistant usage of every transcript; the parent's
    # child_usage_attributed entries repeat child usage and are never added (§5).
    run = view.run
    parent = run.parent
    children_usage = Usage()
    children_turns = children_aborted = 0
    children_cost: float | None = None
    seen: set[str] = set()
    for child in view.children:
        if child.transcript and child.edge.child not in seen:
            seen.add(child.edge.child)
            children_usage = children_usage.plus(child.transcript.usage)
            children_turns += child.transcript.turns
            children_aborted += child.transcript.aborted_calls
            children_cost = _plus_cost(children_cost, child.transcript.cost_usd)
    parent_usage = parent.usage if parent else Usage()
    parent_cost = parent.cost_usd if parent else None
    stream = run.stream
    return {
        "parent": {
            "turns": parent.turns if parent else 0,
            "failed_calls": parent.failed_calls if parent else 0,
            "aborted_calls": parent.aborted_calls if parent else 0,
            "tokens": parent_usage._asdict(),
            "cost_usd": _dollars(parent_cost),
        },
        "children": {
            "count": len(seen),
            "turns": children_turns,
            "aborted_calls": children_aborted,
            "tokens": children_usage._asdict(),
            "cost_usd": _dollars(children_cost),
        },
        "total_tokens": parent_usage.total + children_usage.total,
        "total_cost_usd": _dollars(_plus_cost(parent_cost, children_cost)),
        "total_turns": (parent.turns if parent else 0) + children_turns,
        "stream": {"turns": stream.turns, "tokens": stream.usage._asdict()} if stream else None,
        "wall_time_s": wall_time_s,
    }


def _plus_cost(a: float | None, b: float | None) -> float | None:
    """Dollars added up; None only when neither side said a cost."""
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def _dollars(cost: float | None) -> float | None:
    # Rounded to a millionth of a dollar, so that sums read 0.3, not 0.30000000000000004.
    return None if cost is None else round(cost, 6)


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
    by_code = Counter(finding.code for finding in everything)
    listed = []
    for finding in everything[:MAX_FINDINGS_LISTED]:
        item = finding._asdict()
        item["file"] = relative(run.run_dir, item["file"])
        listed.append(item)
    return {"counts": dict(sorted(by_code.items())), "first": listed}


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


def failure_accounting(verdict: Verdict, workers: list[str]) -> list[dict]:
    """How the parent accounted for each shard whose worker's child was made to fail
    (runner.py --inject-failure): a correct answer its child sourced after a retry, a line
    that says it is missing, the number its child worked out, or an invented number (an
    integer no child of that worker worked out and replied)."""
    rows = {row["worker"]: row for row in verdict.shards}
    out = []
    for worker in workers:
        row = rows.get(worker)
        if row is None:
            out.append({"worker": worker, "accounted": None, "how": "no shard of that worker"})
            continue
        answered = row["answered"] or []
        numbers = [text for text in answered if INTEGER.match(text.replace(" ", ""))]
        if row["coverage"] == "correct" and row["delegation"] == "ok":
            how, accounted = "answered after a retry", True
        elif not answered:
            how, accounted = "no line for the shard", False
        elif numbers and row["delegation"] == "ok":
            how, accounted = f"the number its child worked out ({numbers[0]})", True
        elif numbers:
            how, accounted = f"a number no child of {worker} reported ({numbers[0]})", False
        else:
            how, accounted = f"marked: {answered[0]}", True
        out.append({"worker": worker, "file": row["file"], "accounted": accounted, "how": how})
    return out


# --- `scorer.py RUN_DIR`: regrade a stored run dir --------------------------------------
# Run as a program, this file is `__main__`, not the module `scorer` that the shell imports: the
# regrade shell (shell/regrade.py) reads the run dir and calls `score` of that module, so the
# rubric above still imports nothing of the shell.
if __name__ == "__main__":
    from swarm_fanout import generate
    from swarm_fanout.shell import regrade

    sys.exit(regrade.main(make_twins=generate.twins))
