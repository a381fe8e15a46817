"""A run's result: how it is judged from its verdict and how it ended, the one rule the runner
and a regrade of the stored run share (an agent error first, rules/triage.py; then what the
runner saw end the run, a daemon or ACP error, an interrupt, the timeout, named before what it
caused; then the verdict), and the record result.json is written from. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from swarm_fanout.evidence.artifacts import RunArtifacts
from swarm_fanout.rules import triage
from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_RESOLVED, EXIT_UNRESOLVED


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


class RunResult(NamedTuple):
    status: str  # "scored" or "agent_error"
    resolved: bool
    exit_code: int  # an interrupted run's is the runner's to say (130/143)
    reasons: tuple[dict, ...]  # {code, message, ...}, root causes first


def run_result(judged: tuple[bool, tuple], run: RunArtifacts, end: AgentEnd | None) -> RunResult:
    """The result of a scored run from its judged verdict (scorer.py `Verdict.judged`: whether
    it passes, and its reasons); `end` None: a run the runner did not record (a capture)."""
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
    passed, kept = judged
    resolved = passed and not causes
    exit_code = EXIT_RESOLVED if resolved else EXIT_UNRESOLVED
    return RunResult("scored", resolved, exit_code, (*causes, *(r.to_json() for r in kept)))


class RunRecord(NamedTuple):
    """What the runner recorded of a run before it ended, in the order result.json and
    run-meta.json give it (docs/results.md); None: not known (yet), and not written."""

    harness: str
    simulated: bool  # the model or the agent is the bundled stand-in (trial.py decides)
    model: str
    drive: str
    trial: dict | None = None  # {index, run_set}: a run set's trial
    baseline: bool | None = None
    resolved_by: str | None = None  # a baseline's one criterion
    started_at: str | None = None
    fixture: dict | None = None  # {name, path, shards, digest}
    agent: dict | None = None  # {bin, path, version, kernel_python}
    run_dir: str | None = None
    sandbox: dict | None = None
    witness: dict | None = None
    replay: dict | None = None
    injected_failures: dict | None = None  # {asked, answered}

    def to_json(self) -> dict:
        return _written(self)


class Outcome(NamedTuple):
    """How a launched run ended, scored or an agent error, in the order result.json gives it."""

    status: str
    resolved: bool
    exit_code: int
    reasons: tuple[dict, ...]
    agent: dict  # the record's, with how the agent ended
    interrupted: bool
    cleanup: dict
    finished_at: str
    resident: dict | None = None  # the resident drive's record
    acp: dict | None = None  # the ACP drive's, with the children outstanding at its response
    outstanding_at_response: int | None = None
    verdict: dict | None = None
    contract_check: str | None = None  # a scripted run's, with its differences
    differences: list | None = None
    injected_failures: dict | None = None  # the record's, with each worker's accounting
    failure_accounted: bool | None = None  # written first (TrialResult)

    def to_json(self) -> dict:
        return _written(self, *(("outstanding_at_response",) if self.acp is not None else ()))


class Refusal(NamedTuple):
    """How a run that could not go on ended (shell/cli.py `RunRefused`), with the fields the
    refusal names."""

    status: str
    exit_code: int
    reasons: tuple[dict, ...]
    resolved: bool = False
    model: str | None = None
    interrupted: bool | None = None
    fixture: dict | None = None  # {path}: the fixture that could not be read
    resident: dict | None = None  # the drive's record of a task it never took
    acp: dict | None = None
    cleanup: dict | None = None
    finished_at: str | None = None  # a run whose agent did not run

    def to_json(self) -> dict:
        result = {"status": self.status, "resolved": self.resolved, "exit_code": self.exit_code}
        for name in ("model", "interrupted", "fixture", "resident", "acp", "cleanup"):
            if getattr(self, name) is not None:
                result[name] = getattr(self, name)
        result["reasons"] = list(self.reasons)
        if self.finished_at is not None:
            result["finished_at"] = self.finished_at
        return result


class TrialResult(NamedTuple):
    """result.json: what was recorded of the run (None: a run set refused before any run),
    then how it ended; a key both give keeps the record's place, with the end's value."""

    record: RunRecord | None
    end: Outcome | Refusal

    def to_json(self) -> dict:
        accounted = isinstance(self.end, Outcome) and self.end.injected_failures
        first = {"failure_accounted": self.end.failure_accounted} if accounted else {}
        return {**first, **(self.record.to_json() if self.record else {}), **self.end.to_json()}


def _written(record: NamedTuple, *null: str) -> dict:
    """A record's fields as JSON, in their order: None is not written, but for the fields named."""
    return {
        name: value for name, value in record._asdict().items() if value is not None or name in null
    }


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
