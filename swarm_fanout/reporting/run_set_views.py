"""Run sets as the report and the comparison read them: `load_run_set` reads one from disk
into a `RunSetView` (its config, its summary recomputed from the trials' results, a
`TrialView` per trial with its fan-out timeline), and where the pages written beside a
report go."""

from __future__ import annotations

import os
from dataclasses import dataclass

from swarm_fanout.evidence import runsets
from swarm_fanout.evidence.jsonl import read_json_object
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.reporting import evidence_page, timeline
from swarm_fanout.reporting.render import Cell
from swarm_fanout.reporting.summary import summarize_run_set


@dataclass(frozen=True)
class TrialView:
    index: int
    dir: str | None
    summary: dict  # the trial's row of the run set's summary
    timeline: timeline.Timeline | None
    flags: dict[str, tuple[str, ...]] | None = None  # child id -> the verdict's codes naming it

    @property
    def status_cell(self) -> Cell:
        """resolved, FAILED, an error of the agent's own (counted apart) or not run."""
        status = self.summary.get("status")
        if self.dir is None or status == "not_run":
            return Cell("not run", tone="muted")
        if status in evidence_page.ERRORED:
            return Cell(evidence_page.ERRORED[status], tone="error")
        if self.summary.get("resolved"):
            return Cell("resolved", tone="good")
        return Cell("FAILED" if status == "scored" else str(status), tone="bad")


@dataclass(frozen=True)
class RunSetView:
    dir: str
    config: dict
    summary: dict
    trials: tuple[TrialView, ...]
    report: str | None = None  # its report.html, when one has been written
    injected: tuple[tuple[str, int], ...] = ()  # --inject-failure's (worker, calls)

    @property
    def task(self) -> str:
        return "baseline" if self.config["baseline"] else "fan-out"

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Fixture, model, drive and kind: the task, and whether failures were injected."""
        kind = f"{self.task}, failure injected" if self.injected else self.task
        return (self.config["fixture"]["name"], self.config["model"], self.config["drive"], kind)

    @property
    def name(self) -> str:
        return os.path.basename(self.dir)


def load_run_set(set_dir: str) -> RunSetView:
    """A run set as it is on disk now: its summary is recomputed from the trials' results."""
    if not os.path.exists(set_dir):
        raise runsets.RunSetError(f"{set_dir} does not exist")
    set_dir = os.path.realpath(set_dir)
    config = runsets.load_config(set_dir)
    if config is None:
        raise runsets.RunSetError(f"{set_dir} has no {runsets.RUN_SET_FILE}")
    summary = summarize_run_set(set_dir, config)
    views = []
    for trial in summary["trials"]:
        path = os.path.join(set_dir, trial["dir"]) if trial["dir"] else None
        shape = timeline.read_timeline(path) if path else None
        flags = timeline.flagged_children(_verdict_of(path)) if path else None
        views.append(TrialView(trial["index"], trial["dir"], trial, shape, flags))
    report = os.path.join(set_dir, "report.html")
    return RunSetView(
        set_dir,
        config,
        summary,
        tuple(views),
        report if os.path.isfile(report) else None,
        set_injections(set_dir, config),
    )


def _verdict_of(run_dir: str) -> dict | None:
    """The verdict in a trial's result.json, if it has one."""
    result = read_json_object(RunPaths.of(run_dir).result, [], max_bytes=runsets.MAX_RESULT_BYTES)
    verdict = (result or {}).get("verdict")
    return verdict if isinstance(verdict, dict) else None


def set_injections(set_dir: str, config: dict) -> tuple[tuple[str, int], ...]:
    """What --inject-failure asked of the set: stored in run-set.json, or, in a set made
    before it was, in its trials' results."""
    if "inject_failure" in config:
        return runsets.injected(config)
    for attempt in runsets.attempts(set_dir):
        found = runsets.injected(attempt.result)
        if found:
            return found
    return ()


def run_sets_under(path: str) -> list[str]:
    """The run set itself, or every run set directly inside a dir of them."""
    if os.path.exists(os.path.join(path, runsets.RUN_SET_FILE)):
        return [path]
    return [
        os.path.join(path, name)
        for name in sorted(os.listdir(path))
        if os.path.exists(os.path.join(path, name, runsets.RUN_SET_FILE))
    ]


def is_run_dir(path: str) -> bool:
    """One run's dir (a runner's, a trial's, a materialized capture), not a run set."""
    paths = RunPaths.of(path)
    return not os.path.exists(os.path.join(path, runsets.RUN_SET_FILE)) and (
        os.path.isfile(paths.result) or os.path.isdir(paths.sessions)
    )


def evidence_path(out_dir: str, set_dir: str, trial_dir: str, folder: str = "evidence") -> str:
    """Where a trial's evidence page is written beside a report in `out_dir` (beside a
    comparison, in its own `folder`, so that a report's pages there keep their way back)."""
    return os.path.join(out_dir, folder, os.path.basename(set_dir), f"{trial_dir}.html")


def relative(path: str, out_dir: str) -> str:
    """`path` as a link from a page written in `out_dir`."""
    return os.path.relpath(path, out_dir).replace(os.sep, "/")
