"""Whose failure a run is: the model's, or the agent's own before the model got to work.
An eval keeps errors apart from scores (Inspect's error vs score, Harbor's exception
trials): a run that never reached the model says nothing about it. `agent_error` is the
rule (docs/results.md#agent-errors), pure over what the run left on disk and what the runner
saw of the agent's end (`AgentEnd`), so the runner and a regrade of the stored run decide alike.
"""

from __future__ import annotations

from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts


class AgentEnd(NamedTuple):
    """How the runner saw the agent end: its exit code, and whether the runner ended it."""

    exit_code: int | None
    timed_out: bool
    interrupted: bool
    stderr_tail: str | None  # the last words of an agent that failed on its own
    daemon_error: str | None = None  # the resident daemon's, in its own words
    # The ACP drive's {code, message} (shell/acp_drive.py).
    acp_error: dict | None = None
    seen_exit: bool = True  # False: a run the runner never saw end (a killed run's meta)


def agent_error(run: RunArtifacts, end: AgentEnd) -> dict | None:
    """The reason `{code, message}` when the run is an agent error, else None: no model call
    was answered (`model_answered`) and one failed (`model_calls_failed`), or the agent ended
    on its own, not at the timeout (`agent_exited`)."""
    if end.interrupted or model_answered(run):
        return None
    failure = first_failure(run)
    if failure is not None:
        return {
            "code": "model_calls_failed",
            "message": f"every model call failed, the first with: {failure}",
        }
    if end.timed_out:
        return None
    # The runner quotes the stderr of an agent that exited non-zero only.
    words = end.stderr_tail or (
        "it wrote nothing on stderr" if end.exit_code else "see its stderr.txt"
    )
    return {
        "code": "agent_exited",
        "message": f"the agent exited {end.exit_code} before any model call was answered: {words}",
    }


def model_answered(run: RunArtifacts) -> bool:
    """Any model call of the run got an answer: the recording proxy relayed one with a 2xx
    status, or the root's transcript or its stream holds a call that did not fail. Any one
    will do, so an agent that deletes its transcript cannot hide the calls the proxy saw."""
    statuses = (call.get("status") for call in run.witness.model_calls) if run.witness else ()
    if any(isinstance(status, int) and 200 <= status < 300 for status in statuses):
        return True
    parent = run.parent
    if parent is not None and parent.turns > parent.failed_calls:
        return True
    return bool(run.stream and run.stream.response_ids)


def first_error(run: RunArtifacts) -> str | None:
    """The first failed model call the agent recorded: its stream first, then the root's
    transcript."""
    if run.stream and run.stream.first_error:
        return run.stream.first_error
    return run.parent.first_error if run.parent else None


def first_failure(run: RunArtifacts) -> str | None:
    """The first failed model call: as the agent recorded it, else as the recording proxy
    relayed it (an HTTP error status)."""
    recorded = first_error(run)
    if recorded is not None:
        return recorded
    for call in run.witness.model_calls if run.witness else ():
        status = call.get("status")
        # A call cut off at the end of the run received nothing (None): not a failure.
        if isinstance(status, int) and status >= 400:
            error = call.get("error")
            return f"HTTP {status}" + (f" ({error})" if error else "")
    return None
