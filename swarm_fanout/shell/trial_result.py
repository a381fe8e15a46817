"""result.json's record (docs/results.md "The result JSON"): what the runner recorded of a run
before it ended (`RunRecord`), then how it ended, scored or an agent error (`Outcome`) or
refused (`Refusal`), joined in `TrialResult`. trial.py builds and writes it, once; no rule
reads it (the result's judgement is rules/result.py).
"""

from __future__ import annotations

from typing import NamedTuple


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
