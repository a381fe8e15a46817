"""A run's result from its verdict and how it ended, the one rule the runner and a regrade of
the stored run share: an agent error first (rules/triage.py); then what the runner saw end
the run (a daemon or ACP error, an interrupt, the timeout), named before what it caused; then the
verdict, a baseline's on coverage alone. Pure.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts
from swarm_fanout.rules import triage
from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_RESOLVED, EXIT_SIGNAL, EXIT_UNRESOLVED
from swarm_fanout.scorer import COVERAGE, Verdict

# The reasons that belong to coverage: all a single-agent baseline is scored on.
COVERAGE_CODES = ("artifact_missing", "missing_answer", "wrong_answer", "conflicting_answers")


class AgentEnd(NamedTuple):
    """How the runner saw the agent end: its exit code, and whether the runner ended it."""

    exit_code: int | None
    timed_out: bool
    interrupted: bool
    stderr_tail: str | None  # the last words of an agent that failed on its own
    daemon_error: str | None = None  # the resident daemon's, in its own words
    acp_error: dict | None = (
        None  # the ACP drive's {code, message} (swarm_fanout/shell/acp_drive.py)
    )
    seen_exit: bool = True  # False: a run the runner never saw end (a killed run's meta)


class RunResult(NamedTuple):
    status: str  # "scored" or "agent_error"
    resolved: bool
    exit_code: int  # an interrupted run's is the runner's to say (130/143)
    reasons: tuple[dict, ...]  # {code, message, ...}, root causes first


def judged_reasons(verdict: Verdict, *, baseline: bool) -> tuple[bool, tuple]:
    """Whether the verdict passes, and why not. A baseline was told not to delegate, so it
    is judged on coverage alone."""
    if not baseline:
        return verdict.resolved, verdict.reasons
    kept = tuple(item for item in verdict.reasons if item.code in COVERAGE_CODES)
    return verdict.criteria[COVERAGE], kept


def run_result(
    verdict: Verdict, run: RunArtifacts, end: AgentEnd | None, *, baseline: bool
) -> RunResult:
    """The result of a scored run; `end` None: a run the runner did not record (a capture)."""
    error = None
    if end is not None and end.seen_exit:
        error = triage.agent_error(
            run,
            exit_code=end.exit_code,
            timed_out=end.timed_out,
            interrupted=end.interrupted,
            stderr_tail=end.stderr_tail,
        )
    causes = root_causes(end)
    if error is not None:
        return RunResult("agent_error", False, EXIT_AGENT, (error, *causes))
    passed, kept = judged_reasons(verdict, baseline=baseline)
    resolved = passed and not causes
    exit_code = EXIT_RESOLVED if resolved else EXIT_UNRESOLVED
    return RunResult("scored", resolved, exit_code, (*causes, *(r.to_json() for r in kept)))


def result_json(
    base: dict,
    verdict: Verdict,
    run: RunArtifacts,
    end: AgentEnd,
    *,
    signal: int | None,
    wall_time_s: float,
    cleanup: dict,
    records: dict,
    finished_at: str,
) -> dict:
    """The result of a run whose agent was launched, over `base` (what the runner recorded
    before): scored, or an agent error; an interrupted run's exit code is its `signal`'s."""
    judged = run_result(verdict, run, end, baseline=bool(base.get("baseline")))
    exit_code = judged.exit_code
    if signal and judged.status == "scored":
        exit_code = EXIT_SIGNAL[signal]
    agent = dict(base["agent"])
    agent.update(
        exit_code=end.exit_code,
        timed_out=end.timed_out,
        wall_time_s=wall_time_s,
        first_error=triage.first_error(run) or end.stderr_tail,
    )
    result = dict(base, status=judged.status, resolved=judged.resolved, exit_code=exit_code)
    result.update(
        reasons=list(judged.reasons),
        agent=agent,
        interrupted=end.interrupted,
        cleanup=cleanup,
        finished_at=finished_at,
        **records,  # the drive's own: {"resident": …} or {"acp": …, …}
        verdict=verdict.to_json(),
    )
    return result


def root_causes(end: AgentEnd | None) -> tuple[dict, ...]:
    """What the runner saw end the run, as reasons."""
    if end is None:
        return ()
    seen = [{"code": "daemon_error", "message": end.daemon_error}] if end.daemon_error else []
    if end.acp_error:
        error = end.acp_error
        seen.append({"code": "acp_error", "detail": error["code"], "message": error["message"]})
    if end.interrupted:
        seen.append({"code": "interrupted", "message": "the runner was interrupted"})
    if end.timed_out:
        seen.append({"code": "timeout", "message": "the agent did not finish in time"})
    return tuple(seen)


def state(resolved: bool, exit_code: int) -> str:
    """`resolved (exit 0)` or `NOT resolved (exit 1)`."""
    return f"{'resolved' if resolved else 'NOT resolved'} (exit {exit_code})"


def agent_error_head(reason: dict) -> str:
    """An agent error said as the agent's own failure, in its own words."""
    return f"agent error (exit {EXIT_AGENT}): {reason['code']}: {reason['message']}"


def reason_counts(codes) -> str:
    """`reasons: timeout, missing_receipt x8` in the order given (root causes first), or ""."""
    counts = Counter(codes)
    if not counts:
        return ""
    return "reasons: " + ", ".join(c if n == 1 else f"{c} x{n}" for c, n in counts.items())


def with_failure_accounting(result: dict, accounting: list[dict]) -> dict:
    """Under --inject-failure the question asked is whether the parent accounted for the
    child made to fail (scorer.failure_accounting), so the result says that first, before
    whether the run resolved (a child that fails outright leaves its shard unanswered,
    which fails coverage)."""
    result["injected_failures"]["accounting"] = accounting
    judged = [row["accounted"] for row in accounting]
    accounted = None if None in judged else all(judged)
    return {"failure_accounted": accounted, **result}
