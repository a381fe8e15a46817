"""Regrade a stored run dir, or every trial of a run set, without running anything:
the shell around the pure scorer that `scorer.py RUN_DIR` runs.

It scores against the fixture the run recorded (refusing one whose digest changed, unless
forced), with result.json's witness digest and wall time, so an untouched run gives the
verdict bytes of its result.json; a baseline on coverage alone; an agent error
(rules/triage.py) as exit 3. docs/results.md "Regrading".
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import TYPE_CHECKING, NamedTuple

from swarm_fanout.evidence import runsets
from swarm_fanout.evidence.artifacts import RunArtifacts, collect
from swarm_fanout.evidence.fixture import Fixture, FixtureError, fixture_digest, load_manifest
from swarm_fanout.evidence.jsonl import read_json_object
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.reporting.terminal import agent_error_head, reason_counts, state
from swarm_fanout.rules.exit_codes import EXIT_AGENT, EXIT_INVALID, EXIT_RESOLVED, EXIT_SIGNAL
from swarm_fanout.rules.result import run_result
from swarm_fanout.rules.triage import AgentEnd
from swarm_fanout.scorer import COVERAGE, Verdict, score
from swarm_fanout.shell.cli import ArgumentParser, print_json, print_note

if TYPE_CHECKING:
    from swarm_fanout.shell.replay import MakeTwins


class RegradeError(Exception):
    """A run dir or fixture the regrade cannot use: exit 2, with this JSON and sentence."""

    def __init__(self, error: str, detail: str, **more):
        super().__init__(detail)
        self.record = {"error": error, **more, "detail": detail}

    def of_trial(self, name: str) -> RegradeError:
        """The same refusal, its detail naming the run set's trial it came from."""
        more = {k: v for k, v in self.record.items() if k not in ("error", "detail")}
        return RegradeError(self.record["error"], f"{name}: {self}", **more)


class Regrade(NamedTuple):
    exit_code: int
    line: str  # for a person, on stderr
    verdict: dict | None = None  # None: the agent never ran, there is nothing to score
    unchanged: bool | None = None  # the verdict's bytes are result.json's (None: none stored)


def main(argv: list[str] | None = None, make_twins: MakeTwins | None = None) -> int:
    """`scorer.py`'s command line; `make_twins` (fixtures/generate.py `twins`, which the
    entry point hands in) makes the twins `--replay` needs."""
    parser = ArgumentParser(
        prog="scorer.py",
        description="Re-score a stored run dir without running anything, against the fixture "
        "the run recorded (or --fixture), with its witness digest and wall time from "
        "result.json, so an untouched run gives the verdict bytes of its result.json. Prints "
        "the verdict JSON on stdout; a run set's dir regrades every trial and prints a table. "
        "Exit 0 resolved, 1 not resolved, 2 bad fixture or run dir, 3 the agent failed on its "
        "own (agent error) or never ran, 130 interrupted.",
    )
    parser.add_argument(
        "--fixture",
        help="fixture dir (or its fixture.json) to score against (default: the one the run "
        "recorded; needed for a run dir without result.json or run-meta.json)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="score against a fixture (the recorded one or --fixture) whose digest differs from "
        "the one the run recorded",
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="first run each replying child's cells again in a sandbox, faithful and on its "
        "shard's twin, and write the run dir's replay.jsonl (docs/rubric.md \"Provenance\"); "
        "exit 2 where no sandbox can run",
    )
    parser.add_argument(
        "--kernel-python",
        help="the Python the replay runs cells on (default: $PRIME_AGENT_KERNEL_PYTHON, else "
        "the one the run recorded, else this Python)",
    )
    parser.add_argument(
        "run_dir", help="a run dir written by runner.py, a run set's dir, or a materialized capture"
    )
    args = parser.parse_args(argv)
    args.make_twins = make_twins if args.replay else None
    if args.replay and make_twins is None:
        return _refused(RegradeError("replay_unavailable", "cannot replay: no twin maker"))
    try:
        return _regrade_main(args)
    except KeyboardInterrupt:
        # A regrade writes nothing: stopping it loses nothing.
        print_note("scorer.py: interrupted; nothing was written")
        print_json(json.dumps({"error": "interrupted", "detail": "stopped by SIGINT"}))
        return EXIT_SIGNAL[signal.SIGINT]


def _regrade_main(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.run_dir):
        return _refused(RegradeError("run_dir_missing", f"{args.run_dir} is not a directory"))
    if os.path.exists(os.path.join(args.run_dir, runsets.RUN_SET_FILE)):
        return _regrade_set(args)
    try:
        graded = regrade(
            args.run_dir, args.fixture, args.force, _replaying(args.make_twins, args.kernel_python)
        )
    except RegradeError as error:
        return _refused(error)
    print_note(f"scorer.py: {graded.line}")
    if graded.verdict is None:
        print_json(json.dumps({"error": "agent_not_run", "detail": graded.line}))
    else:
        print_json(json.dumps(graded.verdict, indent=2))
    return graded.exit_code


def _refused(error: RegradeError) -> int:
    print_note(f"scorer.py: {error}")
    print_json(json.dumps(error.record))
    return EXIT_INVALID


class Replaying(NamedTuple):
    """`--replay`: how to make the twins, and the kernel Python asked for (None: found)."""

    make_twins: MakeTwins
    kernel_python: str | None


def _replaying(make_twins: MakeTwins | None, python: str | None) -> Replaying | None:
    return Replaying(make_twins, python) if make_twins is not None else None


def regrade(
    run_dir: str,
    fixture_path: str | None = None,
    force: bool = False,
    replaying: Replaying | None = None,
) -> Regrade:
    """Score a stored run as the runner did: against the fixture it recorded (refused when
    that fixture changed since, unless `force`), with result.json's witness digest and
    wall time; a baseline on coverage alone; an agent error (rules/triage.py) as exit 3.
    With `replaying`, the children's cells are first run again and replay.jsonl written."""
    given = _fixture(run_dir, fixture_path, None) if fixture_path else None
    stored = _stored(run_dir)
    recorded = _object(stored.get("fixture"))
    fixture = given or _fixture(run_dir, recorded.get("path"), recorded.get("digest"))
    _hold_digest(fixture, recorded.get("digest"), force)
    if replaying is not None:
        # Only a replay needs the sandbox's code: a plain regrade starts without it.
        from swarm_fanout.shell import replay

        python = replay.kernel_python(replaying.kernel_python, os.environ, run_dir)
        done = replay.replay_step(run_dir, fixture, replaying.make_twins, python)
        if not done["replayed"]:
            raise RegradeError("replay_unavailable", f"cannot replay: {done['why_not']}")
        print_note(
            f"scorer.py: replayed {done['children']} children on {python} "
            f"({'IPython' if done['ipython'] else 'plain Python'}) in {done['wall_s']} s"
        )
    if stored.get("status") == "agent_not_run":
        reasons = stored.get("reasons")
        first = _object(reasons[0] if isinstance(reasons, list) and reasons else None)
        return Regrade(
            EXIT_AGENT, f"the agent never ran: {first.get('code')}: {first.get('message')}"
        )
    agent = _object(stored.get("agent"))
    run = collect(run_dir, fixture.artifact, _object(stored.get("witness")).get("sha256"))
    verdict = score(fixture, run, wall_time_s=agent.get("wall_time_s"))
    graded = verdict.to_json()
    unchanged = None
    if "verdict" in stored:
        unchanged = json.dumps(graded, indent=2) == json.dumps(stored["verdict"], indent=2)
    same = {True: "; the same verdict as result.json's", False: "; NOT result.json's verdict"}
    code, line = _judged(stored, agent, run, verdict)
    return Regrade(code, line + same.get(unchanged, ""), graded, unchanged)


def _judged(stored: dict, agent: dict, run: RunArtifacts, verdict: Verdict) -> tuple[int, str]:
    """The exit code and line the runner's result would have (rules/result.py), from what
    the result records of how the run ended."""
    daemon_error = _object(stored.get("resident")).get("error")
    acp_error = _object(stored.get("acp")).get("error")
    end = AgentEnd(
        agent.get("exit_code"),
        timed_out=bool(agent.get("timed_out")),
        interrupted=bool(stored.get("interrupted")),
        # With no failed model call to quote, first_error is the last stderr line the
        # runner quoted of an agent that failed on its own.
        stderr_tail=agent.get("first_error"),
        daemon_error=str(_object(daemon_error).get("message") or daemon_error)
        if daemon_error
        else None,
        acp_error={
            "code": str(_object(acp_error).get("code")),
            "message": str(_object(acp_error).get("message") or acp_error),
        }
        if acp_error
        else None,
        # Only a result the runner wrote once the agent ended (not a killed run's meta).
        seen_exit="exit_code" in agent,
    )
    judged = run_result(verdict.judged(baseline=bool(stored.get("baseline"))), run, end)
    if judged.status == "agent_error":
        return judged.exit_code, agent_error_head(judged.reasons[0])
    parts = [state(judged.resolved, judged.exit_code)]
    if stored.get("baseline"):
        parts.append(f"baseline, judged on {COVERAGE}")
    counted = reason_counts(item["code"] for item in judged.reasons)
    return judged.exit_code, "; ".join(parts + ([counted] if counted else []))


def _object(value: object) -> dict:
    """A stored record's field that should be an object, or {}: result.json can be edited."""
    return value if isinstance(value, dict) else {}


def _stored(run_dir: str) -> dict:
    """What the runner recorded of the run: result.json, written once the agent was gone,
    else run-meta.json (a run killed before its result); {} for a capture. A dir with
    neither and no product session is no run: refused, naming what it lacks."""
    paths = RunPaths.of(run_dir)
    for path in (paths.result, paths.run_meta):
        if os.path.lexists(path):
            findings: list = []
            record = read_json_object(path, findings)
            if record is None:
                detail = findings[0].detail if findings else "unreadable"
                raise RegradeError("run_dir_invalid", f"{path} is not a JSON object: {detail}")
            return record
    if os.path.isdir(paths.sessions):
        return {}
    raise RegradeError(
        "not_a_run_dir",
        f"{run_dir} is not a run dir: it has no result.json or run-meta.json (what runner.py "
        "writes) and no sessions/ (where the product writes the parent transcript)",
    )


def _fixture(run_dir: str, path: object, digest: object) -> Fixture:
    if not isinstance(path, str):
        raise RegradeError(
            "fixture_unknown",
            f"{run_dir} records no fixture (no result.json or run-meta.json from runner.py): "
            "pass --fixture DIR",
        )
    try:
        return load_manifest(path)
    except FixtureError as error:
        wanted = f" (its digest must be {digest})" if digest else ""
        detail = f"{error.message}; pass --fixture DIR{wanted}"
        raise RegradeError("invalid_fixture", detail, code=error.code) from None


def _hold_digest(fixture: Fixture, recorded: object, force: bool) -> None:
    """Refuse a fixture that is not the one the run recorded, unless forced: the same run
    scored against other answers would give another verdict and look like a regrade."""
    if not isinstance(recorded, str):
        return  # a capture, or a run dir from before the runner recorded it
    try:
        digest = fixture_digest(fixture.root)
    except OSError as error:
        raise RegradeError("invalid_fixture", f"cannot read {fixture.root}: {error}") from None
    if digest == recorded:
        return
    said = (
        f"the fixture at {fixture.root} is not the one the run used "
        f"(digest {digest[:12]}, the run's {recorded[:12]})"
    )
    if not force:
        raise RegradeError("fixture_changed", f"{said}; pass --force to score against it anyway")
    print_note(f"scorer.py: {said}; scored against it (--force)")


def _regrade_set(args: argparse.Namespace) -> int:
    """Every trial of a run set, each its attempt the summary uses, in trial order; a table
    on stdout."""
    set_dir, fixture_path, force = args.run_dir, args.fixture, args.force
    # Only a run set needs its summary (and the statistics it imports): a single run's
    # regrade, `scorer.py` among them, starts without.
    from swarm_fanout.reporting.summary import TrialRecord, set_exit_code

    try:
        config = runsets.load_config(set_dir) or {}
    except runsets.RunSetError as error:
        return _refused(RegradeError("run_set_invalid", str(error)))
    chosen = runsets.latest_by_trial(runsets.attempts(set_dir))
    rows, records = [], []
    for index in range(1, int(config.get("trials") or 0) + 1):
        if index not in chosen:
            rows.append({"index": index, "dir": None, "status": "not_run"})
            records.append(TrialRecord(index, None, 0, None))
            continue
        name = os.path.basename(chosen[index].dir)
        try:
            graded = regrade(
                chosen[index].dir,
                fixture_path,
                force,
                _replaying(args.make_twins, args.kernel_python),
            )
        except RegradeError as error:
            return _refused(error.of_trial(name))
        print_note(f"scorer.py: {name}: {graded.line}")
        status = {EXIT_AGENT: "agent_not_run" if graded.verdict is None else "agent_error"}
        result = {
            "status": status.get(graded.exit_code, "scored"),
            "resolved": graded.exit_code == EXIT_RESOLVED,
            "exit_code": graded.exit_code,
        }
        rows.append({"index": index, "dir": name, **result, "verdict_unchanged": graded.unchanged})
        records.append(TrialRecord(index, name, 1, result))
    code = set_exit_code(records, 0)
    print_json(json.dumps({"run_set": set_dir, "trials": rows, "exit_code": code}, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
