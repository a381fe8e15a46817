"""Run one orchestration trial of prime-agent on a fixture and score it, or a run set of them.

The shell around the pure scorer: make a fresh run dir, copy the fixture into a
new git repo, launch the agent headless in an isolated agent home, wait, end
every process the run started, collect the artifacts, score them, write
`result.json` and print it. Exit codes: 0 resolved, 1 scored and not resolved,
2 invalid invocation or fixture, 3 the agent could not be run or failed on its own
before the model answered anything (an agent error, rules/triage.py), 130/143 the runner
was interrupted by SIGINT/SIGTERM (the run is still scored).

With `--trials K` (or `--run-set`, `--resume`) it runs a run set instead: K such
trials, each its own runner.py process (shell/trials.py), then prints `summary.json`.

The run dir's layout and the agent's argv and environment live in shell/rundir.py;
launching, watching and ending the agent's processes in shell/launch.py.

Why one module of this size: it is the one shell a run passes through, in order (flags,
fixture, run dir, model proxy, launch, witness, collect, score, result), and each step's
failure has its own result and exit code beside the step; the run-set commands are the
same flags around shell/trials.py.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.parse
from datetime import datetime, timezone

import scorer
from evidence import artifacts, runsets
from evidence.fixture import (
    Fixture,
    FixtureError,
    fixture_digest,
    load_fixture,
    undistinctive_answers,
)
from reporting.summary import summarize_run_set
from rules import triage
from rules.exit_codes import EXIT_AGENT, EXIT_INVALID, EXIT_RESOLVED, EXIT_SIGNAL, EXIT_UNRESOLVED
from scripted import check as scripted
from scripted import model as scripted_model
from shell import sandbox, trials
from shell.agent_config import models_json_override, parse_models_json, set_provider
from shell.cli import ArgumentParser, did_you_mean, print_json, print_note
from shell.launch import agent_version, launch_and_wait
from shell.observer import write_witness
from shell.proxy import RecordingProxy
from shell.rundir import STRIPPED_ENV_PREFIXES, RunDir, write_atomic
from shell.watch import Interrupt

HARNESS = {"name": "swarm-fanout", "version": "0.1.0"}
DRIVES = ("oneshot", "resident", "acp")
SIMULATED_PROVIDER = "simulated"  # the bundled stand-in's models (simulated/agent.py)
# The providers the harness serves itself, suggested with the built-in ones for a typo.
HARNESS_PROVIDERS = (SIMULATED_PROVIDER, scripted_model.PROVIDER)
# The calls --inject-failure fails by default: enough to make a child fail outright, as the
# product retries (3 tries of a request, 4 attempts of a message: docs/product-contract.md §5,
# the captured child-fail run's 12 requests for 4 failed messages).
INJECTED_CALLS = 12
DEFAULTS = {"timeout": 1800.0, "agent_bin": "prime-agent", "drive": "oneshot", "trials": 1}
# The bundled stand-in, named to a user whose prime-agent is not on PATH.
PROJECT = os.path.dirname(os.path.abspath(__file__))  # the project: its pyproject.toml, uv.lock
STAND_IN = os.path.join(PROJECT, "simulated", "agent.py")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = ArgumentParser(
        prog="runner.py",
        description="Run prime-agent headless on a swarm-fanout fixture, score what it left on "
        "disk, print the result JSON on stdout (progress goes to stderr). Exit 0 resolved, 1 "
        "scored but not resolved, 2 invalid invocation or fixture, 3 the agent could not be "
        "run or failed on its own before the model answered (an agent error), 130/143 "
        "interrupted.",
    )
    parser.add_argument(
        "--fixture",
        help="fixture dir, e.g. fixtures/json-events (required, except for a stored run set)",
    )
    parser.add_argument(
        "--model",
        help="provider/model passed to the agent, e.g. anthropic/claude-sonnet-4-5; "
        "simulated/<behaviour> with --agent-bin ./simulated/agent.py; scripted/<script> to run "
        "the installed agent against the harness's own scripted model endpoint (scripts: "
        + ", ".join(scripted_model.SCRIPTS)
        + "; no credentials, no tokens; exit 0 when the product still behaves as the script "
        "expects, see contract_check in the result) (required, except for a stored run set)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds before the agent's process tree is ended and the run scored as timed out "
        "(default 1800)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        metavar="S",
        help="when a run ends, seconds the agent's processes get to act on their own before "
        "the runner goes on: the daemon to answer shutdown{force} (at least 0.5), what is left to "
        "exit after it, and each process between SIGTERM and SIGKILL (default 5, 3 and 3; the "
        "self-tests set it short)",
    )
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="where the recording model proxy forwards the model's calls (default: the "
        "provider's baseUrl in your models.json, else the provider's built-in endpoint)",
    )
    parser.add_argument(
        "--inject-failure",
        action="append",
        default=[],
        metavar="WORKER[:N]",
        help="the proxy answers the next N model calls of WORKER's child with HTTP 500 itself, "
        "to measure how the parent accounts for a failed child (default 12: prime-agent 0.8.0 "
        "tries each request 3 times and each message 4 times, so 12 make the child fail; fewer "
        "are absorbed by its retries); repeatable",
    )
    parser.add_argument(
        "--agent-bin",
        help="agent executable, on PATH or a path (default prime-agent; ./simulated/agent.py "
        "is the bundled stand-in)",
    )
    parser.add_argument(
        "--out", default="runs", help="dir that receives one new run dir per run (default runs/)"
    )
    parser.add_argument(
        "--agent-config",
        default=None,
        help="dir whose auth.json and models.json are copied into the run's isolated agent home "
        "(default $PRIME_AGENT_CODING_AGENT_DIR, else ~/.prime/agent)",
    )
    parser.add_argument(
        "--drive",
        choices=DRIVES,
        help="oneshot: the CLI's --mode json, which stops the worker (and aborts running "
        "children) when the parent first goes idle; resident: start the daemon, run the parent "
        "as a resident session and wait on the RLM quiescence barrier; acp: --mode acp over "
        "stdio, as editors and verifiers drive it, waited on until its terminal-quiescence "
        "update (default oneshot)",
    )
    parser.add_argument(
        "--sandbox",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the agent and everything it starts in a bubblewrap sandbox: read-only but "
        "for the run's own dirs, its own PID and network namespaces, no network but the "
        "model proxy, only the environment the product needs (default: on when bwrap works "
        "here, else off with a note; --sandbox where it does not is exit 2; --no-sandbox: "
        "off)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="single-agent baseline: a prompt derived from fixture.json asks the agent to answer "
        "every shard itself and write the same artifact; resolved = coverage alone",
    )
    parser.add_argument(
        "--trials",
        type=int,
        help="run K independent trials as a run set runs/<run-id>/trial-<n>/ and print its "
        "summary (default 1: one run, as without the flag); a stored run set keeps its own K, "
        "and another K given to it is refused",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="trials of a run set run at once (default 1)"
    )
    parser.add_argument(
        "--run-set",
        metavar="DIR",
        help="the run set's dir (default a new runs/<fixture>-<time>-<hex>/); with --trial-index, "
        "the set whose trial to run, created from the other flags if it has no run-set.json",
    )
    parser.add_argument(
        "--trial-index",
        type=int,
        metavar="N",
        help="run exactly trial N (1..K, counted from 1) of --run-set and print its result, for "
        "a batch scheduler (a zero-based array index: pass it plus 1); a trial already done "
        "prints its stored result",
    )
    parser.add_argument(
        "--resume",
        metavar="DIR",
        help="run the trials of run set DIR that have no result (a killed trial runs again in "
        "trial-<n>-retry<m>), then print its summary; refused (exit 2) when the fixture's "
        "digest, the harness version, --model, --drive or --baseline differ from run-set.json",
    )
    args = parser.parse_args(argv)
    if args.timeout is not None and not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if args.grace is not None and not args.grace > 0:
        parser.error("--grace must be a positive number of seconds")
    try:
        args.inject_failure = [_injection(item) for item in args.inject_failure]
    except ValueError as error:
        parser.error(str(error))
    if (args.trials is not None and args.trials < 1) or args.jobs < 1:
        parser.error("--trials and --jobs must be at least 1")
    if args.trial_index is not None and not args.run_set:
        parser.error("--trial-index needs --run-set")
    if args.resume and (args.run_set or args.trial_index is not None):
        parser.error("--resume takes the run set's dir itself: no --run-set or --trial-index")
    stored = args.resume or (
        args.run_set and os.path.exists(os.path.join(args.run_set, runsets.RUN_SET_FILE))
    )
    for flag in ("fixture", "model"):
        if not stored and getattr(args, flag) is None:
            parser.error(f"the following arguments are required: --{flag}")
    script = _script(args.model or "")
    if script is not None and script not in scripted_model.SCRIPTS:
        hint = did_you_mean(script, scripted_model.SCRIPTS, f"{scripted_model.PROVIDER}/")
        parser.error(f"no script {script!r}; {hint}scripts: {', '.join(scripted_model.SCRIPTS)}")
    if script is not None and args.baseline:
        parser.error(
            "--baseline with a scripted model checks nothing: the scripts' expected outcomes "
            "are for the fan-out task"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with Interrupt() as interrupt:
        if args.resume:
            return _run_set(args, interrupt, args.resume)
        if args.trial_index is not None:
            return _trial_of_set(args, interrupt)
        if args.run_set or (args.trials or 1) > 1:
            return _run_set(args, interrupt, args.run_set)
        return _run(_with_defaults(args, {}), interrupt)


def _with_defaults(args: argparse.Namespace, stored: dict) -> argparse.Namespace:
    """Flags given win, then the stored run set's values, then the defaults."""
    values = dict(vars(args))
    for key in ("fixture", "model", "drive", "timeout", "agent_bin", "agent_config", "trials"):
        if values.get(key) is None:
            values[key] = stored.get(key, DEFAULTS.get(key))
    values["baseline"] = bool(values.get("baseline") or stored.get("baseline"))
    return argparse.Namespace(**values)


def _set_config(args: argparse.Namespace, fixture: Fixture, set_dir: str) -> dict:
    """What a run set records, and what every trial and resume of it must match."""
    agent_bin, _ = find_agent(args.agent_bin)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
    os.makedirs(set_dir, exist_ok=True)
    version = agent_version(agent_bin, environment, set_dir) if agent_bin else None
    return {
        "harness_version": HARNESS["version"],
        "fixture": {"name": fixture.name, "path": fixture.root, "shards": len(fixture.shards)},
        "fixture_digest": fixture_digest(fixture.root),
        "model": args.model,
        "drive": args.drive,
        "baseline": args.baseline,
        # Absolute, so a resume from another dir launches the same agent.
        "agent_bin": agent_bin or args.agent_bin,
        "agent_version": version,
        "agent_config": args.agent_config,
        "timeout": args.timeout,
        "trials": args.trials,
        "jobs": args.jobs,
        "created_at": _now(),
    }


def _matched(args: argparse.Namespace, stored: dict | None) -> tuple[argparse.Namespace, Fixture]:
    """The resolved flags and the fixture; raises RunSetError for a fixture that changed."""
    given_trials = args.trials
    args = _with_defaults(args, _stored_flags(stored))
    try:
        fixture = load_fixture(args.fixture)
    except FixtureError as error:
        raise runsets.RunSetError(f"invalid fixture: {error.message}") from None
    if stored is not None:
        wanted = {
            "fixture_digest": fixture_digest(fixture.root),
            "harness_version": HARNESS["version"],
            "model": args.model,
            "drive": args.drive,
            "baseline": args.baseline,
        }
        differences = runsets.mismatches(stored, wanted) + _trials_differ(given_trials, stored)
        if differences:
            raise runsets.RunSetError(
                "the run set was made with other settings: " + "; ".join(differences)
            )
    return args, fixture


def _trials_differ(given: int | None, stored: dict) -> list[str]:
    """A --trials given to a stored run set must be its own K: every task of a batch array
    gets the same command, so another K is a script that changed, said, not ignored."""
    if given is None or given == stored.get("trials"):
        return []
    return [f"trials: stored {stored.get('trials')!r}, now {given!r}"]


def _trial_index_refusal(index: int, trials: int) -> str | None:
    """Why --trial-index cannot be trial of K, said before anything is written."""
    if 1 <= index <= trials:
        return None
    refusal = f"--trial-index {index} is outside 1..{trials}"
    if index == 0:
        refusal += (
            ": trials count from 1; a zero-based array index (Slurm --array=0-N, Kubernetes' "
            "JOB_COMPLETION_INDEX) is passed as --trial-index $((INDEX + 1))"
        )
    return refusal


def _stored_flags(stored: dict | None) -> dict:
    if stored is None:
        return {}
    flags = {key: stored.get(key) for key in ("model", "drive", "baseline", "timeout", "trials")}
    flags.update(
        fixture=stored["fixture"]["path"],
        agent_bin=stored.get("agent_bin"),
        agent_config=stored.get("agent_config"),
    )
    return flags


def _warn_undistinctive(fixture: Fixture) -> None:
    """Say once, before the agent starts, which shards' answers are not distinctive: the
    verdict's `answers_not_distinctive` warning says it again for each run."""
    plain = undistinctive_answers(fixture)
    if plain:
        named = "; ".join(f"{item.file}: {item.reason}" for item in plain)
        print_note(
            f"runner.py: warning: {len(plain)} of {len(fixture.shards)} shards have answers "
            "an honest prompt or cell may hold by chance, so their provenance can only be "
            f"judged by the flow rules (docs/fixtures.md): {named}"
        )


def _refuse(message: str) -> int:
    print_note(f"runner.py: {message}")
    return EXIT_INVALID


def find_agent(agent_bin: str) -> tuple[str | None, tuple[str, str] | None]:
    """The agent's absolute path, or (None, (reason code, sentence)) saying why there is none."""
    found = shutil.which(agent_bin)
    if found is not None:
        # The agent starts in the run's repo, so a relative path must not stay relative.
        return os.path.abspath(found), None
    if os.sep not in agent_bin:
        stand_in = _near(STAND_IN)
        stand_in = stand_in if os.path.isabs(stand_in) else os.path.join(".", stand_in)
        return None, (
            "agent_not_found",
            f"{agent_bin!r} is not on PATH; to try the harness without it, use --agent-bin "
            f"{stand_in} --model simulated/oracle (the bundled stand-in)",
        )
    if not os.path.exists(agent_bin):
        return None, ("agent_not_found", f"{agent_bin!r} does not exist")
    if os.path.isdir(agent_bin):
        return None, ("agent_not_executable", f"{agent_bin!r} is a directory, not an executable")
    return None, ("agent_not_executable", f"{agent_bin!r} is not executable (chmod +x it)")


def _agent_missing(message: str) -> int:
    print_note(f"runner.py: the agent could not be run: {message}")
    return EXIT_AGENT


def _run_set(args: argparse.Namespace, interrupt: Interrupt, set_dir: str | None) -> int:
    """Run (or resume) a run set, then write and print its summary."""
    try:
        stored = runsets.load_config(set_dir) if set_dir else None
        if args.resume and stored is None:
            raise runsets.RunSetError(f"{set_dir} has no {runsets.RUN_SET_FILE}")
        resolved, fixture = _matched(args, stored)
        _, missing = find_agent(resolved.agent_bin)
        if missing:
            # Before the set's dir is made: no trial could run.
            return _agent_missing(missing[1])
        if stored is None:
            set_dir = set_dir or trials.new_run_set_dir(args.out, fixture.name, resolved.baseline)
            stored = trials.store_config(set_dir, _set_config(resolved, fixture, set_dir))
            resolved, fixture = _matched(args, stored)
    except (runsets.RunSetError, OSError) as error:
        return _refuse(f"cannot run the run set: {error}")
    print_note(f"runner.py: run set {set_dir}")
    _warn_undistinctive(fixture)
    overrides = [
        item
        for flag, key in (("--agent-bin", "agent_bin"), ("--agent-config", "agent_config"))
        if getattr(args, key) is not None
        for item in (flag, getattr(args, key))
    ]
    if args.timeout is not None:
        overrides += ["--timeout", str(args.timeout)]
    if args.grace is not None:
        overrides += ["--grace", str(args.grace)]
    if args.upstream:
        overrides += ["--upstream", args.upstream]
    if args.sandbox is not None:
        overrides.append("--sandbox" if args.sandbox else "--no-sandbox")
    for worker, count in args.inject_failure:
        overrides += ["--inject-failure", f"{worker}:{count}"]
    interrupted = trials.run_trials(set_dir, stored, overrides, args.jobs, interrupt)
    summary = summarize_run_set(set_dir, stored, interrupted or 0)
    summary_file = os.path.join(set_dir, runsets.SUMMARY_FILE)
    text, summary_file = _store(summary, summary_file, "summary_file_error")
    print_note(f"runner.py: {set_summary_line(summary, summary_file)}")
    for line in set_next_steps(summary, set_dir, _resume_flags(args)):
        print_note(f"runner.py: {line}")
    print_json(text)
    return summary["exit_code"]


def set_summary_line(summary: dict, summary_file: str | None) -> str:
    """One line for a person at a terminal: how many trials resolved, and why the others not."""
    scored, resolved = summary["trials_scored"], summary["resolved"]
    head = f"run set: {resolved}/{scored} scored trials resolved"
    if scored:
        low, high = summary["resolve_rate_ci95"]
        head += f" ({resolved / scored:.0%}, 95% CI {low:.0%}-{high:.0%})"
    head += _accounting_rate(summary.get("failure_accounting"))
    errored = summary["trials_errored"]
    head += f", {errored} errored (not counted)" if errored else ""
    parts = [head + f", {summary['trials_planned']} planned; exit {summary['exit_code']}"]
    for key in ("failures", "errors"):
        counts = summary[key]
        if counts:
            counted = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            parts.append(f"{key}: " + ", ".join(f"{code} x{n}" for code, n in counted))
    if summary_file:
        parts.append(f"summary in {_near(summary_file)}")
    return "; ".join(parts)


def _accounting_rate(accounting: dict | None) -> str:
    """Beside the resolve rate, when failures were injected: how often the parent accounted."""
    if not accounting:
        return ""
    low, high = accounting["rate_ci95"]
    judged, accounted = accounting["trials"], accounting["accounted"]
    return (
        f"; injected failure accounted for in {accounted}/{judged} "
        f"({accounted / judged:.0%}, 95% CI {low:.0%}-{high:.0%})"
    )


def command(program: str, *words: str) -> str:
    """A command line to copy: the documented way to run the harness's programs, from the
    working dir (outside the project, `uv run` is told where it is)."""
    head = ["uv run --locked"]
    if os.path.realpath(os.getcwd()) != os.path.realpath(PROJECT):
        head.append(f"--project {shlex.quote(_near(PROJECT))}")
        program = _near(os.path.join(PROJECT, program))
    return " ".join([*head, "python", shlex.quote(program), *(shlex.quote(w) for w in words)])


def evidence_hint(run_dir: str) -> str:
    """What to do after a run that did not resolve: read its evidence page."""
    return f"why, criterion by criterion: {command('report.py', _near(run_dir))}"


def set_next_steps(summary: dict, set_dir: str, resume_flags: list[str]) -> list[str]:
    """What to do after a run set: carry on when trials are left to run (interrupted, killed
    or errored: a resume runs them), and read its report."""
    steps = []
    left = sum(1 for trial in summary["trials"] if not trial["scored"])
    if left:
        why = "interrupted; " if summary["exit_code"] in EXIT_SIGNAL.values() else ""
        steps.append(
            f"{why}{left} of {summary['trials_planned']} trials not done, to run them: "
            + command("runner.py", "--resume", _near(set_dir), *resume_flags)
        )
    steps.append(f"its report: {command('report.py', _near(set_dir))}")
    return steps


def _resume_flags(args: argparse.Namespace) -> list[str]:
    """The flags a run set was given that run-set.json does not keep, for its resume."""
    flags = ["--jobs", str(args.jobs)] if args.jobs > 1 else []
    if args.grace is not None:
        flags += ["--grace", str(args.grace)]
    if args.upstream:
        flags += ["--upstream", args.upstream]
    for worker, count in args.inject_failure:
        flags += ["--inject-failure", f"{worker}:{count}"]
    return flags


def _near(path: str) -> str:
    """The path relative to the working dir, unless that climbs out of it."""
    near = os.path.relpath(path)
    return path if near.startswith("..") else near


def _trial_of_set(args: argparse.Namespace, interrupt: Interrupt) -> int:
    """Exactly trial N of a run set: today's single run, in the set's next dir for trial N."""
    set_dir = os.path.realpath(args.run_set)
    try:
        stored = runsets.load_config(set_dir)
        resolved, fixture = _matched(args, stored)
        # Before anything is written: a refused index must not leave a run set behind.
        refusal = _trial_index_refusal(args.trial_index, (stored or vars(resolved))["trials"])
        if refusal:
            raise runsets.RunSetError(refusal)
        if stored is None:
            _, missing = find_agent(resolved.agent_bin)
            if missing:
                # Before the set's dir is made (in a stored set, the trial says so itself).
                return _agent_missing(missing[1])
            stored = trials.store_config(set_dir, _set_config(resolved, fixture, set_dir))
            resolved, fixture = _matched(args, stored)
    except (runsets.RunSetError, OSError) as error:
        return _refuse(f"cannot run trial {args.trial_index} of {set_dir}: {error}")
    found = runsets.attempts(set_dir)
    for attempt in found:
        if attempt.index == args.trial_index and runsets.is_done(attempt):
            print_note(f"runner.py: trial {attempt.index} is done: {attempt.dir}")
            print_json(json.dumps(attempt.result, indent=2))
            return attempt.result.get("exit_code", EXIT_UNRESOLVED)
    run_dir = trials.next_trial_dir(set_dir, args.trial_index, found)
    trial = {"index": args.trial_index, "run_set": set_dir}
    label = f"trial {args.trial_index}/{stored['trials']}"
    return _run(resolved, interrupt, run_dir=run_dir, trial=trial, label=label)


def _run(
    args: argparse.Namespace,
    interrupt: Interrupt,
    run_dir: str | None = None,
    trial: dict | None = None,
    label: str = "",
) -> int:
    """One run; `label` ("trial 3/10") heads its progress and verdict lines in a run set."""
    base = {
        "harness": HARNESS,
        "simulated": args.model.startswith("simulated/"),
        "model": args.model,
        "drive": args.drive,
        **({"trial": trial} if trial else {}),
        **({"baseline": True, "resolved_by": "coverage"} if args.baseline else {}),
        "started_at": _now(),
    }
    try:
        fixture = load_fixture(args.fixture)
    except FixtureError as error:
        print_note(f"runner.py: invalid fixture: {error.message}")
        result = dict(base, status="invalid_fixture", resolved=False, exit_code=EXIT_INVALID)
        result["fixture"] = {"path": args.fixture}
        result["reasons"] = [
            {"code": "invalid_fixture", "detail": error.code, "message": error.message}
        ]
        return _emit(result, None)
    if trial is None:  # a run set's trials leave it to the set, which said it once
        _warn_undistinctive(fixture)
    # Where and what the fixture was, so a regrade finds it and knows when it changed.
    base["fixture"] = {
        "name": fixture.name,
        "path": fixture.root,
        "shards": len(fixture.shards),
        "digest": fixture_digest(fixture.root),
    }
    script = _script(args.model)
    refusal = scripted.too_many_shards(len(fixture.shards)) if script else None
    if refusal:
        print_note(f"runner.py: {refusal}")
        result = dict(base, status="invalid_invocation", resolved=False, exit_code=EXIT_INVALID)
        result["reasons"] = [{"code": "too_many_shards_for_script", "message": refusal}]
        return _emit(result, None)
    agent_bin, missing = find_agent(args.agent_bin)
    base["agent"] = {"bin": args.agent_bin, "path": agent_bin, "version": None}
    if missing:
        # Said before a run dir is made: nothing is left behind.
        return _not_run(base, None, *missing)
    available = sandbox.availability() if args.sandbox is not False else None
    if args.sandbox and not available.usable:
        print_note(f"runner.py: --sandbox: {available.problem}")
        result = dict(base, status="invalid_invocation", resolved=False, exit_code=EXIT_INVALID)
        result["reasons"] = [{"code": "sandbox_unavailable", "message": available.problem}]
        return _emit(result, None)
    sandboxed = available is not None and available.usable
    if available is not None and not sandboxed:
        print_note(f"runner.py: note: running without a sandbox: {available.problem}")
    try:
        run = RunDir.at(run_dir) if run_dir else RunDir.create(args.out, fixture.name)
    except OSError as error:
        where = run_dir or f"under {args.out}"
        print_note(f"runner.py: cannot create a run dir {where}: {error}")
        result = dict(base, status="invalid_invocation", resolved=False, exit_code=EXIT_INVALID)
        result["reasons"] = [{"code": "run_dir_unwritable", "message": str(error)}]
        return _emit(result, None)
    base["run_dir"] = run.root
    try:
        run.prepare(fixture, _agent_config_dir(args.agent_config))
    except (OSError, subprocess.SubprocessError) as error:
        run.cleanup_tmp()
        return _not_run(base, run, "run_setup_failed", str(error))
    env = run.agent_env()
    if script:
        # The model is the harness's own endpoint: nothing needs the network (§11).
        env["PI_OFFLINE"] = "1"
    if trial:
        env[trials.TRIAL_ENV] = str(trial["index"])
    plan = None
    if sandboxed:
        env = sandbox.agent_env(env, _models_json_key_names(run))
        plan = sandbox.Plan(
            available.bwrap,
            sandbox.plan_binds(
                agent_bin=agent_bin,
                env=env,
                run_root=run.root,
                writable=run.sandbox_writable(),
                home=os.path.expanduser("~"),
            ),
        )
    base["sandbox"] = {
        "enabled": sandboxed,
        "bwrap": available.bwrap if available else None,
        **({"binds": plan.binds.to_json()} if plan else {}),
        **({} if sandboxed else {"why_not": available.problem if available else "--no-sandbox"}),
    }
    task = trials.baseline_task(fixture) if args.baseline else fixture.task
    version = agent_version(agent_bin, env, run.repo)
    base["simulated"] = base["simulated"] or "simulated" in (version or "")
    base["agent"]["version"] = version
    base["agent"]["kernel_python"] = env.get("PRIME_AGENT_KERNEL_PYTHON")
    if not base["simulated"] and not (
        env.get("PRIME_AGENT_KERNEL_PYTHON") or env.get("PRIME_AGENT_KERNEL_VENV")
    ):
        print_note(
            "runner.py: note: no kernel Python (PRIME_AGENT_KERNEL_PYTHON is unset and your "
            "HOME has no prime-agent kernel venv): the agent will try to build one in the "
            "run's own HOME, which needs internet and takes minutes"
        )
    argv = run.drive_argv(args.drive, agent_bin, args.model, task)
    run.write_meta(dict(base, argv=argv))
    if interrupt.signum:
        run.cleanup_tmp()
        return _not_run(
            base,
            run,
            "interrupted",
            "interrupted before the agent started",
            exit_code=EXIT_SIGNAL[interrupt.signum],
            extra={"interrupted": True},
        )
    try:
        with contextlib.ExitStack() as stack:
            proxy = _model_proxy(args, run, script, stack)
            outcome = launch_and_wait(
                run,
                agent_bin,
                args.model,
                task,
                env,
                args.timeout,
                interrupt,
                args.drive,
                args.grace,
                fixture.artifact,
                label,
                proxy=proxy,
                plan=plan,
            )
    except ProxyError as error:
        run.cleanup_tmp()
        return _not_run(base, run, "model_proxy_unavailable", str(error))
    except sandbox.SandboxError as error:
        run.cleanup_tmp()
        return _not_run(base, run, "sandbox_start_failed", str(error))
    except OSError as error:
        run.cleanup_tmp()
        return _not_run(base, run, "agent_exec_failed", str(error))
    # The agent's whole tree is gone: what the runner saw may now be written down.
    base["witness"] = _write_witness(run, args, proxy, outcome)
    if args.inject_failure:
        base["injected_failures"] = _injected(args, proxy)
    drive, session = next(
        ((name, outcome[name]) for name in ("resident", "acp") if outcome[name]), (None, None)
    )
    stopped = outcome["timed_out"] or outcome["interrupted"]
    if session is not None and not session["admitted"] and session.get("error") and not stopped:
        # The daemon (or the ACP agent) never took the task: nothing of the agent ran.
        error = session["error"]
        extra = {drive: session, "cleanup": outcome["cleanup"]}
        return _not_run(base, run, error["code"], error["message"], extra=extra)
    collected = artifacts.collect(run.root, fixture.artifact, base["witness"]["sha256"])
    verdict = scorer.score(fixture, collected, wall_time_s=outcome["wall_time_s"])
    result = _result(base, outcome, verdict, collected)
    if args.inject_failure:
        workers = [worker for worker, _ in args.inject_failure]
        result["injected_failures"]["accounting"] = scorer.failure_accounting(verdict, workers)
        result = _lead_with_accounting(result)
    if script and args.inject_failure:
        # The script's expected outcome is for a run nobody broke on purpose.
        result.update(
            contract_check="inconclusive",
            differences=["failures were injected (--inject-failure); judged by the verdict"],
        )
    elif script:
        # A scripted run asks whether the installed product and the harness still
        # agree: the script's expected outcome, not `resolved`, decides the exit.
        result.update(scripted.contract_check(script, args.drive, result))
        if not outcome["interrupted"] and result["status"] == "scored":
            agree = result["contract_check"] == "pass"
            result["exit_code"] = EXIT_RESOLVED if agree else EXIT_UNRESOLVED
    return _emit(result, run, label)


class ProxyError(Exception):
    """The model's provider cannot be brought behind the recording proxy."""


def _injection(text: str) -> tuple[str, int]:
    worker, _, count = text.partition(":")
    if not worker or (count and not count.isdigit()) or count == "0":
        raise ValueError(f"--inject-failure takes WORKER[:N] with N >= 1, not {text!r}")
    return worker, int(count or INJECTED_CALLS)


def _model_proxy(args, run: RunDir, script: str | None, stack) -> RecordingProxy:
    """The recording proxy for every run (shell/observer.py), in front of the harness's own
    endpoint for a scripted model, else the provider's upstream; the run's models.json
    points the model's provider at it (docs/witness.md)."""
    provider, _, model_id = args.model.partition("/")
    try:
        if script:
            # The harness plays the model: its endpoint serves behind the proxy, so the
            # scripted and the real run's endpoint check are one code path.
            server = stack.enter_context(scripted_model.ScriptedModelServer(run.model_log))
            proxy = stack.enter_context(RecordingProxy({provider: server.base_url}))
            set_provider(
                run.agent_home, provider, scripted_model.provider_entry(proxy.url(provider))
            )
        elif provider == SIMULATED_PROVIDER:
            # The stand-in makes each of its model calls to the harness's echo endpoint
            # (simulated/product.py), behind the proxy like any model.
            echo = scripted_model.ScriptedModelServer(run.model_log, echo=True)
            server = stack.enter_context(echo)
            proxy = stack.enter_context(RecordingProxy({provider: server.base_url}))
            entry = {"baseUrl": proxy.url(provider), "api": "openai-completions"}
            set_provider(run.agent_home, provider, {**entry, "apiKey": "simulated"})
        else:
            path = os.path.join(run.agent_home, "models.json")
            user = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    user = parse_models_json(handle.read())
            config, upstream = models_json_override(
                user,
                provider,
                "http://127.0.0.1/",
                upstream=args.upstream,
                model_id=model_id,
                also_known=HARNESS_PROVIDERS,
            )
            # The route is the upstream's host: the product sends some fields only when
            # the baseUrl names it (OpenRouter's and Vercel's routing, OpenAI's
            # prompt_cache_key: packages/ai openai-completions.ts), and the proxy's URL
            # then still does.
            route = urllib.parse.urlsplit(upstream).hostname or provider
            proxy = stack.enter_context(RecordingProxy({route: upstream}))
            config, _ = models_json_override(
                user, provider, proxy.url(route), upstream=upstream, model_id=model_id
            )
            write_atomic(path, json.dumps(config, indent=2) + "\n")
    except (OSError, ValueError) as error:
        # The user's models.json, or the model's provider, cannot be brought behind it.
        raise ProxyError(f"model {args.model!r}: {error}") from None
    for worker, count in args.inject_failure:
        proxy.inject_failures(worker, count)
    return proxy


def _write_witness(run: RunDir, args, proxy: RecordingProxy, outcome: dict) -> dict:
    """witness.jsonl from the runner's own channels, written once the agent is gone."""
    proxy.stop()
    calls = [call.to_json() for call in proxy.records()]
    header = {
        "model": args.model,
        "drive": args.drive,
        "proxy": bool(proxy.routes),
        "observer": outcome["observer"],
        "processes": outcome["processes"],
    }
    digest = write_witness(
        run.paths.witness,
        header=header,
        model_calls=calls,
        sightings=outcome["sightings"],
        channels=outcome["channels"],
    )
    return {
        "file": os.path.basename(run.paths.witness),
        "sha256": digest,
        "model_calls": len(calls),
        "sightings": len(outcome["sightings"]),
        "channels": outcome["channels"],
    }


def _injected(args, proxy: RecordingProxy) -> dict:
    """What --inject-failure asked for, and how many calls the proxy answered itself."""
    return {
        "asked": [{"worker": worker, "calls": count} for worker, count in args.inject_failure],
        "answered": sum(1 for call in proxy.records() if call.injected),
    }


def _lead_with_accounting(result: dict) -> dict:
    """Under --inject-failure the question asked is whether the parent accounted for the
    child made to fail, so result.json says that first, before whether the run resolved
    (a child that fails outright leaves its shard unanswered, which fails coverage). None
    when a worker named has no shard, so there was nothing to account for."""
    judged = [row["accounted"] for row in result["injected_failures"]["accounting"]]
    accounted = None if None in judged else all(judged)
    return {"failure_accounted": accounted, **result}


def _accounting_head(result: dict) -> list[str]:
    """The verdict line's first part under --inject-failure: accounted or not, and how."""
    if "failure_accounted" not in result:
        return []
    state = {True: "accounted for", False: "NOT accounted for", None: "not judged"}
    rows = result["injected_failures"]["accounting"]
    how = "; ".join(f"{row['worker']}: {row['how']}" for row in rows)
    return [f"injected failure {state[result['failure_accounted']]} ({how})"]


def _script(model: str) -> str | None:
    """The scripted-model script a `scripted/<script>` model names, else None."""
    provider, _, name = model.partition("/")
    return name if provider == scripted_model.PROVIDER else None


def _result(
    base: dict, outcome: dict, verdict: scorer.Verdict, collected: artifacts.RunArtifacts
) -> dict:
    """The result of a run whose agent was launched: scored, or an agent error when the
    agent failed on its own before the model answered anything (rules/triage.py)."""
    passed, kept = scorer.outcome(verdict, baseline=bool(base.get("baseline")))
    resident, acp = outcome["resident"], outcome["acp"]
    daemon_error = resident.get("error") if resident else None
    acp_error = acp.get("error") if acp else None
    # What the runner saw end the run is a root cause: named before what it caused.
    seen = []
    if daemon_error:
        seen.append({"code": "daemon_error", "message": daemon_error["message"]})
    if acp_error:
        seen.append(
            {"code": "acp_error", "detail": acp_error["code"], "message": acp_error["message"]}
        )
    if outcome["interrupted"]:
        seen.append({"code": "interrupted", "message": "the runner was interrupted"})
    if outcome["timed_out"]:
        seen.append({"code": "timeout", "message": "the agent did not finish in time"})
    error = triage.agent_error(
        collected,
        exit_code=outcome["exit_code"],
        timed_out=outcome["timed_out"],
        interrupted=bool(outcome["interrupted"]),
        stderr_tail=outcome["stderr_tail"],
    )
    resolved = passed and not seen and not error
    if error:
        status, exit_code, reasons = "agent_error", EXIT_AGENT, [error, *seen]
    else:
        status, reasons = "scored", [*seen, *(item.to_json() for item in kept)]
        if outcome["interrupted"]:
            exit_code = EXIT_SIGNAL[outcome["interrupted"]]
        else:
            exit_code = EXIT_RESOLVED if resolved else EXIT_UNRESOLVED
    agent = dict(base["agent"])
    agent.update(
        exit_code=outcome["exit_code"],
        timed_out=outcome["timed_out"],
        wall_time_s=outcome["wall_time_s"],
        first_error=triage.first_error(collected) or outcome["stderr_tail"],
    )
    result = dict(base, status=status, resolved=resolved, exit_code=exit_code, reasons=reasons)
    result.update(
        agent=agent,
        interrupted=bool(outcome["interrupted"]),
        cleanup=outcome["cleanup"],
        finished_at=_now(),
        **({"resident": resident} if resident else {}),
        # The children a client that stops at the prompt's response would have lost (§13).
        **({"acp": acp, "outstanding_at_response": acp["outstanding_at_response"]} if acp else {}),
        verdict=verdict.to_json(),
    )
    return result


def _not_run(
    base: dict,
    run: RunDir | None,
    code: str,
    message: str,
    exit_code: int = EXIT_AGENT,
    extra: dict | None = None,
) -> int:
    print_note(f"runner.py: the agent could not be run: {message}")
    result = dict(base, status="agent_not_run", resolved=False, exit_code=exit_code)
    result.update(extra or {})
    result["reasons"] = [{"code": code, "message": message}]
    result["finished_at"] = _now()
    return _emit(result, run)


def _store(record: dict, path: str | None, error_key: str) -> tuple[str, str | None]:
    """Write `record` as JSON to `path` (None: nowhere); returns the text to print and
    where it is stored. A failed write is noted on stderr and in `record[error_key]`,
    and the record is printed all the same, with its exit code."""
    text = json.dumps(record, indent=2)
    if path is None:
        return text, None
    try:
        write_atomic(path, text + "\n")
    except OSError as error:
        print_note(f"runner.py: could not write {path}: {error}")
        record[error_key] = f"{type(error).__name__}: {error}"
        return json.dumps(record, indent=2), None
    return text, path


def _emit(result: dict, run: RunDir | None, label: str = "") -> int:
    where = run.result if run is not None else None
    text, where = _store(result, where, "result_file_error")
    if result.get("status") in ("scored", "agent_error"):
        head = f"{label}: " if label else ""
        print_note(f"runner.py: {head}{summary_line(result, where)}")
        if not result["resolved"] and run is not None:
            print_note(f"runner.py: {head}{evidence_hint(run.root)}")
    print_json(text)
    return result["exit_code"]


def summary_line(result: dict, result_file: str | None = None) -> str:
    """One line for a person at a terminal: the outcome, what failed, root causes first
    (a timeout before the missing receipts it caused), and where to look."""
    if result.get("status") == "agent_error":
        return _agent_error_line(result, result_file)
    verdict = result["verdict"]
    state = "resolved" if result["resolved"] else "NOT resolved"
    parts = [*_accounting_head(result), f"{state} (exit {result['exit_code']})"]
    if "contract_check" in result:
        parts.append(f"contract check {result['contract_check']}")
    if result.get("baseline"):
        parts.append(f"baseline, judged on coverage: {_mark(verdict['coverage'])}")
    else:
        criteria = ("coverage", "delegation_evidence", "dedup", "receipts")
        parts.append(", ".join(f"{name} {_mark(verdict[name])}" for name in criteria))
    # In the result's order, which puts root causes first; a Counter keeps that order.
    counts = collections.Counter(item["code"] for item in result["reasons"])
    if counts:
        named = [code if n == 1 else f"{code} x{n}" for code, n in counts.items()]
        parts.append("reasons: " + ", ".join(named))
    efficiency = verdict["efficiency"]
    # Turns are the answered model calls the transcripts hold; the witness's count of HTTP
    # calls also has the retries of a failed turn and a call a teardown cut off.
    turns = efficiency["total_turns"]
    parts.append(f"{turns} turn{'' if turns == 1 else 's'}, {efficiency['total_tokens']:,} tokens")
    cost = efficiency.get("total_cost_usd")
    if cost:  # a zero or missing cost is no cost (simulated, scripted, an unpriced model)
        parts[-1] += f", ${cost:,.2f}" if cost >= 0.01 else f", ${cost:.4f}"
    leaked = result["cleanup"]["leaked_processes"]
    if leaked:
        parts.append(f"{leaked} leaked processes")
    if result_file:
        parts.append(f"result in {_near(result_file)}")
    return "; ".join(parts)


def _agent_error_line(result: dict, result_file: str | None) -> str:
    """The agent's own failure, in its own words, said as not the model's."""
    first, *rest = result["reasons"]
    parts = [f"agent error (exit {result['exit_code']}): {first['code']}: {first['message']}"]
    parts += [item["code"] for item in rest]
    parts.append("not scored as the model's failure")
    if result_file:
        parts.append(f"result in {_near(result_file)}")
    return "; ".join(parts)


def _mark(passed: bool) -> str:
    return "ok" if passed else "FAILED"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _models_json_key_names(run: RunDir) -> tuple[str, ...]:
    """The variables the run's models.json names as a provider's apiKey: the sandboxed
    agent gets them too (sandbox.agent_env)."""
    path = os.path.join(run.agent_home, "models.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return sandbox.models_json_key_names(parse_models_json(handle.read()))
    except (OSError, ValueError):
        return ()


def _agent_config_dir(explicit: str | None) -> str:
    if explicit:
        return explicit
    return os.environ.get("PRIME_AGENT_CODING_AGENT_DIR") or os.path.join(
        os.path.expanduser("~"), ".prime", "agent"
    )


if __name__ == "__main__":
    sys.exit(main())
