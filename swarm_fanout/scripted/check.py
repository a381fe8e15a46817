"""What a run against the scripted model (scripted/model.py) must show.

contract_check(script, drive, result) compares a runner result JSON with the outcome the
script carries for that drive. The model-endpoint cross-check of contract §10 (every
response a child transcript records is one the scripted model served, for a request made
on behalf of that very transcript) is the `endpoint` integrity check, which runs whenever
the run dir holds the endpoint's `model-log.jsonl`.

Running a trial against the scripted model is a few lines in the runner:

    with scripted_model.ScriptedModelServer(log_path) as server:   # a thread of this process
        set_provider(run_agent_home, PROVIDER, provider_entry(server.base_url))
        ...launch `--model scripted/<script>`, collect, score...
    check = scripted.contract_check(script, drive, result)
"""

from __future__ import annotations

from collections.abc import Mapping

from swarm_fanout.scripted.model import SCRIPTS, Outcome

# prime-agent v0.8.0 refuses an agent message to a session that already has 20 unfinished
# actions (DEFAULT_AGENT_MESSAGE_MAX_PENDING_PER_SESSION, source `core/agent-messages.ts`),
# and a parent busy in its polling turn takes none of its children's replies until the
# turn ends. Measured with the `fanout` script under both drives: 19 shards resolve; with
# 20 one child's send fails ("Target session has too many pending messages"), with 24
# five do. The scripts' expected outcomes hold up to this many shards.
MAX_SHARDS = 19


def too_many_shards(shards: int) -> str | None:
    """Why a fixture of this many shards cannot be checked with the scripts, else None."""
    if shards <= MAX_SHARDS:
        return None
    return (
        f"the scripted model checks fixtures of at most {MAX_SHARDS} shards, not {shards}: "
        "prime-agent v0.8.0 holds at most 20 unfinished messages per session, so a parent "
        f"busy in one turn receives at most {MAX_SHARDS} replies"
    )


def expected_outcome(script: str, drive: str) -> Outcome:
    return getattr(SCRIPTS[script], drive)


def contract_check(script: str, drive: str, result: Mapping) -> dict:
    """{"contract_check": "pass"|"fail"|"inconclusive", "differences": [...]} for one result.

    An interrupted run is inconclusive: the person who stopped it, not the product,
    decided how it ended. A timed-out run is judged (a product that hangs disagrees),
    and the timeout is named first among the differences.
    """
    if result.get("interrupted"):
        return {
            "contract_check": "inconclusive",
            "differences": ["the runner was interrupted before the agent finished"],
        }
    expected = expected_outcome(script, drive)
    verdict = result.get("verdict") or {}
    codes = {reason.get("code") for reason in result.get("reasons") or []}
    differences = []
    if (result.get("agent") or {}).get("timed_out"):
        differences.append("the agent timed out")
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
