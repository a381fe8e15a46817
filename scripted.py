"""What a run against the scripted model (scripted_model.py) must show.

contract_check(script, drive, result) compares a runner result JSON with the outcome the
script carries for that drive. endpoint_evidence(log, transcripts) is the model-endpoint
cross-check of contract §10: every response a child transcript records is one the scripted
model served, for a request made on behalf of that very transcript.

Running a trial against the scripted model is a few lines in the runner:

    with scripted_model.ScriptedModelServer(log_path) as server:   # a thread of this process
        scripted_model.write_models_json(run_agent_home, server.base_url)
        ...launch `--model scripted/<script>`, collect, score...
    check = scripted.contract_check(script, drive, result)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

from scripted_model import SCRIPTS, Outcome

# Failed attempts and turns aborted before they reached the model carry no responseId
# (contract §5, the `response_ids` integrity check).
NO_RESPONSE = frozenset({"error", "aborted"})


def expected_outcome(script: str, drive: str) -> Outcome:
    return getattr(SCRIPTS[script], drive)


def contract_check(script: str, drive: str, result: Mapping) -> dict:
    """{"contract_check": "pass"|"fail", "differences": [...]} for one runner result."""
    expected = expected_outcome(script, drive)
    verdict = result.get("verdict") or {}
    codes = {reason.get("code") for reason in result.get("reasons") or []}
    differences = []
    if result.get("status") != "scored":
        differences.append(f"status is {result.get('status')!r}, not 'scored'")
    if result.get("resolved") is not expected.resolved:
        differences.append(f"resolved is {result.get('resolved')!r}, expected {expected.resolved}")
    differences += [
        f"reason {code} expected, not reported" for code in sorted(expected.reasons - codes)
    ]
    unexpected = codes - expected.reasons - expected.allowed
    differences += [f"reason {code} reported, not expected" for code in sorted(unexpected)]
    shards = verdict.get("shards") or []
    spawns = (verdict.get("details") or {}).get("depth1_spawns")
    if spawns != expected.spawns_per_shard * len(shards):
        want = expected.spawns_per_shard * len(shards)
        differences.append(f"{spawns!r} depth-1 spawns, expected {want}")
    if expected.last_shard_missing:
        differences += missing_line_differences(shards)
    return {"contract_check": "fail" if differences else "pass", "differences": differences}


def missing_line_differences(shards: list) -> list[str]:
    """The failing (last) shard is written `MISSING (…)`; every other one is correct."""
    differences = []
    for number, shard in enumerate(shards, 1):
        answered = shard.get("answered") or []
        if number < len(shards):
            if shard.get("coverage") != "correct":
                differences.append(f"{shard.get('file')} is {shard.get('coverage')}, not correct")
        elif not answered or not all(str(a).startswith("MISSING") for a in answered):
            differences.append(f"{shard.get('file')} answered {answered!r}, not MISSING (…)")
    return differences


# --- the endpoint cross-check (contract §10) ---------------------------------------------------


def endpoint_evidence(log_records: Iterable[Mapping], transcripts: Mapping[str, list]) -> dict:
    """Every assistant message of every child transcript that reached the model carries a
    responseId the endpoint logged for a request whose `Conversation log:` is that transcript.

    `transcripts` maps each child transcript's path, as the product states it in the child's
    system prompt, to its parsed entries. Returns {passed, checked, failures}.
    """
    served: dict[str, str | None] = {}
    for record in log_records:
        if record.get("response_id"):
            served[record["response_id"]] = record.get("conversation_log")
    failures, checked = [], 0
    for path, entries in transcripts.items():
        for line, entry in enumerate(entries, 1):
            message = entry.get("message") if isinstance(entry, dict) else None
            if not isinstance(message, dict) or entry.get("type") != "message":
                continue
            if message.get("role") != "assistant" or message.get("stopReason") in NO_RESPONSE:
                continue
            checked += 1
            detail = response_finding(message.get("responseId"), path, served)
            if detail:
                failures.append({"transcript": path, "line": line, "detail": detail})
    return {"passed": not failures, "checked": checked, "failures": failures}


def response_finding(rid: object, path: str, served: Mapping[str, str | None]) -> str | None:
    if not rid:
        return "assistant message without responseId"
    if rid not in served:
        return f"responseId {rid} was never served by the endpoint"
    if os.path.normpath(served[rid] or "") != os.path.normpath(path):
        return f"responseId {rid} was served for {served[rid]}"
    return None


def endpoint_evidence_files(log_path: str, transcript_paths: Iterable[str]) -> dict:
    """endpoint_evidence() over the server's log file and child transcripts on disk; paths
    are compared canonically, as the product writes them (contract §4)."""
    with open(log_path, encoding="utf-8") as handle:
        records = [canonical_log(json.loads(line)) for line in handle if line.strip()]
    return endpoint_evidence(
        records, {os.path.realpath(path): read_entries(path) for path in transcript_paths}
    )


def canonical_log(record: dict) -> dict:
    if record.get("conversation_log"):
        record["conversation_log"] = os.path.realpath(record["conversation_log"])
    return record


def read_entries(path: str) -> list:
    entries = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                entry = {}
            entries.append(entry if isinstance(entry, dict) else {})
    return entries
