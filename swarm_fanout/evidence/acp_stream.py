"""The ACP drive's stream read back: `acp-stream.jsonl`, every JSON-RPC message the agent
wrote on its stdout under `--mode acp` (docs/product-contract.md §13), kept by the runner,
for the witness's stream check (rules/witness_checks.py). ACP carries no model call's
response id, so the stream shows no calls of the model. Never raises: a bad line is a finding.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from swarm_fanout.evidence.jsonl import Finding, dict_field, iter_objects, text_field
from swarm_fanout.evidence.transcripts import MAX_KEPT_PER_TRANSCRIPT

PRIME_META = "ai.primeintellect.prime-agent"  # the product's `_meta` namespace (§13)
# The product's bash runs are tool calls of its own making, in no transcript (source
# `modes/acp/acp-events.ts`).
BASH_CALL_PREFIX = "prime-agent-bash"


class AcpStream(NamedTuple):
    """What the ACP stream showed: the root's cells (toolCallIds of `tool_call` updates), in
    order, and every child id of a subagent update."""

    tool_call_ids: tuple[str, ...]
    child_ids: frozenset[str]
    findings: tuple[Finding, ...]


def read_acp_stream(path: str) -> AcpStream | None:
    if not os.path.lexists(path):
        return None
    findings: list[Finding] = []
    tool_call_ids: list[str] = []
    child_ids: set[str] = set()
    for line in iter_objects(path, findings):
        record = line.record
        params = dict_field(record, "params")
        update = dict_field(params, "update")
        if record.get("method") != "session/update" or not update:
            continue
        kind = update.get("sessionUpdate")
        if kind == "tool_call":
            call_id = text_field(update, "toolCallId")
            root_cell = call_id and not call_id.startswith(BASH_CALL_PREFIX)
            if root_cell and len(tool_call_ids) < MAX_KEPT_PER_TRANSCRIPT:
                tool_call_ids.append(call_id)
        elif kind == "session_info_update":
            meta = dict_field(dict_field(update, "_meta"), PRIME_META)
            subagents = meta.get("subagents")
            for subagent in subagents if isinstance(subagents, list) else ():
                child_id = text_field(subagent, "id") if isinstance(subagent, dict) else None
                if child_id and len(child_ids) < MAX_KEPT_PER_TRANSCRIPT:
                    child_ids.add(child_id)
    return AcpStream(tuple(tool_call_ids), frozenset(child_ids), tuple(findings))
