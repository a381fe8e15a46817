"""A run's result: how it is judged from its verdict and how it ended, the one rule the runner
and a regrade of the stored run share (an agent error first, rules/triage.py; then what the
runner saw end the run, a daemon or ACP error, an interrupt, the timeout, named before what it
caused; then the verdict). Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts
from swarm_fanout.rules import triage
from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_RESOLVED, EXIT_UNRESOLVED
from swarm_fanout.rules.triage import AgentEnd


class RunResult(NamedTuple):
    status: str  # "scored" or "agent_error"
    resolved: bool
    exit_code: int  # an interrupted run's is the runner's to say (130/143)
    reasons: tuple[dict, ...]  # {code, message, ...}, root causes first


def run_result(judged: tuple[bool, tuple], run: RunArtifacts, end: AgentEnd | None) -> RunResult:
    """The result of a scored run from its judged verdict (scorer.py `Verdict.judged`: whether
    it passes, and its reasons); `end` None: a run the runner did not record (a capture)."""
    error = triage.agent_error(run, end) if end is not None and end.seen_exit else None
    causes = root_causes(end)
    if error is not None:
        return RunResult("agent_error", False, EXIT_AGENT, (error, *causes))
    passed, kept = judged
    resolved = passed and not causes
    exit_code = EXIT_RESOLVED if resolved else EXIT_UNRESOLVED
    return RunResult("scored", resolved, exit_code, (*causes, *(r.to_json() for r in kept)))


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
