"""Run one orchestration trial of prime-agent on a fixture and score it, or a run set of them.

The entry point: the flags become a `RunConfig` (shell/run_config.py); a run is made ready
(shell/prepare.py), launched and ended (shell/launch.py), scored (scorer.py, rules/result.py)
and its result written and printed; a run set runs its trials as runner.py processes
(shell/trials.py). A `RunRefused` becomes the result JSON, exit code and stderr line in
`_refused`. Exit codes: README "Exit codes" (rules/exit_codes.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
from argparse import BooleanOptionalAction, RawDescriptionHelpFormatter

from swarm_fanout import generate, scorer
from swarm_fanout.evidence import artifacts, runsets
from swarm_fanout.evidence.fixture import Fixture, FixtureError, fixture_digest, load_fixture
from swarm_fanout.reporting.summary import summarize_run_set
from swarm_fanout.reporting.terminal import (
    evidence_hint,
    set_next_steps,
    set_summary_line,
    summary_line,
    undistinctive_warning,
)
from swarm_fanout.rules.exit_codes import EXIT_RESOLVED, EXIT_SIGNAL, EXIT_UNRESOLVED
from swarm_fanout.rules.result import result_json, with_failure_accounting
from swarm_fanout.scripted import check as scripted_check
from swarm_fanout.scripted import model as scripted_model
from swarm_fanout.shell import replay, sandbox, trials
from swarm_fanout.shell.agent_config import (
    ProxyError,
    agent_config_dir,
    route_through_proxy,
    unknown_provider,
)
from swarm_fanout.shell.cli import ArgumentParser, RunRefused, did_you_mean, print_json, print_note
from swarm_fanout.shell.launch import (
    DRIVES,
    Launch,
    Launched,
    agent_end,
    drive_records,
    launch_and_wait,
)
from swarm_fanout.shell.observer import witness_record
from swarm_fanout.shell.prepare import agent_and_sandbox, make_run_dir, prepare_launch
from swarm_fanout.shell.proxy import RecordingProxy
from swarm_fanout.shell.run_config import HARNESS, RunConfig
from swarm_fanout.shell.rundir import RunDir, store_record, utc_now
from swarm_fanout.shell.watch import Interrupt
from swarm_fanout.simulated.behaviours import BEHAVIOURS

SIMULATED_PROVIDER = "simulated"  # the bundled stand-in's models (swarm_fanout/simulated/agent.py)
# The providers the harness serves itself (suggested with the built-in ones for a typo), and
# the models each has.
HARNESS_MODELS = {
    SIMULATED_PROVIDER: ("behaviour", tuple(BEHAVIOURS)),
    scripted_model.PROVIDER: ("script", tuple(scripted_model.SCRIPTS)),
}
# What a run set passes on to its trials' processes, and to the resume it prints: the flags
# run-set.json does not keep, or that a trial may override.
TRIAL_FLAGS = ("agent_bin", "agent_config", "timeout", "grace", "upstream", "sandbox")
RESUME_FLAGS = ("jobs", "grace", "upstream", "sandbox")


def _parser() -> ArgumentParser:
    description = (
        "Run prime-agent headless on a swarm-fanout fixture, score what it left on disk, print "
        "the result JSON on stdout (progress on stderr). Exit 0 resolved, 1 not resolved, 2 "
        "invalid, 3 the agent could not be run or erred, 130/143/129 interrupted. Flags in full: "
        "README and docs/."
    )
    epilog = (
        f"behaviours (--model {SIMULATED_PROVIDER}/<behaviour>, --agent-bin "
        f"./swarm_fanout/simulated/agent.py"
        f"): {', '.join(BEHAVIOURS)}\n\nscripts (--model {scripted_model.PROVIDER}/<script>, "
        f"any agent): {', '.join(scripted_model.SCRIPTS)}"
    )
    parser = ArgumentParser(
        prog="runner.py",
        description=_filled(description),
        epilog="\n\n".join(_filled(part) for part in epilog.split("\n\n")),
        formatter_class=RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--fixture", help="fixture dir, e.g. fixtures/json-events")
    add("--model", help="provider/model for the agent; simulated/<behaviour>, scripted/<script>")
    add("--drive", choices=tuple(DRIVES), help="how the agent is run (default oneshot)")
    add("--timeout", type=float, help="seconds before the agent is ended (default 1800)")
    add("--grace", type=float, metavar="S", help="seconds a run's processes get to end")
    add("--agent-bin", help="agent executable (default prime-agent)")
    add("--out", default="runs", help="dir that receives the run dirs (default runs/)")
    add("--agent-config", help="dir of auth.json and models.json (default the product's)")
    add("--upstream", metavar="URL", help="where the model proxy forwards (default the provider)")
    add("--sandbox", action=BooleanOptionalAction, help="in a bwrap sandbox (default: if it works)")
    add("--inject-failure", action="append", default=[], metavar="WORKER[:N]",
        help="fail N (default 12) model calls of WORKER's child (HTTP 500)")  # fmt: skip
    add("--baseline", action="store_true", help="single-agent baseline: no delegation asked")
    add("--trials", type=int, metavar="K", help="run K trials as a run set (default 1)")
    add("--jobs", type=int, metavar="J", help="trials of a run set run at once (default 1)")
    add("--run-set", metavar="DIR", help="the run set's dir (default a new one under --out)")
    add("--trial-index", type=int, metavar="N", help="run trial N (1..K) of --run-set")
    add("--resume", metavar="DIR", help="run the trials of run set DIR that have no result")
    return parser


def _filled(text: str) -> str:
    """Wrapped for --help, never inside a hyphenated name."""
    return textwrap.fill(text, 79, break_on_hyphens=False, break_long_words=False)


def parse_args(argv: list[str] | None) -> RunConfig:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = RunConfig.of(args)
    except ValueError as error:
        parser.error(str(error))
    if (config.trials is not None and config.trials < 1) or (config.jobs or 1) < 1:
        parser.error("--trials and --jobs must be at least 1")
    if config.trial_index is not None and not config.run_set:
        parser.error("--trial-index needs --run-set (and, for a new run set, --trials K)")
    if config.resume and (config.run_set or config.trial_index is not None):
        parser.error("--resume takes the run set's dir itself: no --run-set or --trial-index")
    if config.jobs is not None and (config.trial_index is not None or not config.is_run_set):
        parser.error("--jobs runs a run set's trials at once: give --trials K (or --resume)")
    stored = config.resume or (
        config.run_set and os.path.exists(os.path.join(config.run_set, runsets.RUN_SET_FILE))
    )
    for flag in ("fixture", "model"):
        if not stored and getattr(config, flag) is None:
            parser.error(f"the following arguments are required: --{flag}")
    provider, _, name = (config.model or "").partition("/")
    if provider in HARNESS_MODELS and name not in HARNESS_MODELS[provider][1]:
        kind, names = HARNESS_MODELS[provider]
        hint = did_you_mean(name, names, f"{provider}/")
        parser.error(f"no {kind} {name!r}; {hint}{kind}s: {', '.join(names)}")
    if _script(config.model or "") is not None and config.baseline:
        parser.error(
            "--baseline with a scripted model checks nothing: the scripts' expected outcomes "
            "are for the fan-out task"
        )
    return config


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    with Interrupt() as interrupt:
        try:
            if config.trial_index is not None or config.is_run_set:
                _known_provider(config)  # before the run set's dir is made
            if config.trial_index is not None:
                return _trial_of_set(config, interrupt)
            if config.is_run_set:
                return _run_set(config, interrupt)
        except RunRefused as refusal:
            return _refused(refusal)
        return _run(config.settled(None), interrupt)


def _known_provider(config: RunConfig) -> None:
    """A misspelt provider (`anthropc/...`) is refused before anything is made, as a
    misspelt behaviour is: nothing could route its calls."""
    if not config.model:
        return
    provider = config.model.partition("/")[0]
    agent_dir = agent_config_dir(config.agent_config)
    why = unknown_provider(provider, agent_dir, config.upstream, tuple(HARNESS_MODELS))
    if why is not None:
        raise RunRefused("unknown_provider", why, extra={"model": config.model})


# --- run sets ---------------------------------------------------------------------------------


def _run_set(config: RunConfig, interrupt: Interrupt) -> int:
    """Run (or resume) a run set, then write and print its summary."""
    set_dir, stored, _, fixture = trials.open_set(
        config, config.resume or config.run_set, "cannot run the run set"
    )
    print_note(f"runner.py: run set {set_dir}")
    _warn_undistinctive(fixture)
    flags = config.flags(*TRIAL_FLAGS)
    interrupted = trials.run_trials(set_dir, stored, flags, config.jobs_at_once, interrupt)
    summary = summarize_run_set(set_dir, stored, interrupted or 0)
    summary_file = os.path.join(set_dir, runsets.SUMMARY_FILE)
    text, summary_file = store_record(summary, summary_file, "summary_file_error")
    print_note(f"runner.py: {set_summary_line(summary, summary_file)}")
    for line in set_next_steps(summary, set_dir, config.flags(*RESUME_FLAGS)):
        print_note(f"runner.py: {line}")
    print_json(text)
    return summary["exit_code"]


def _trial_of_set(config: RunConfig, interrupt: Interrupt) -> int:
    """Exactly trial N of a run set: one run, in the set's next dir for trial N."""
    index = config.trial_index
    set_dir = os.path.realpath(config.run_set)
    why = f"cannot run trial {index} of {set_dir}"
    set_dir, stored, settled, _ = trials.open_set(config, set_dir, why, index)
    found = runsets.attempts(set_dir)
    for attempt in found:
        if attempt.index == index and runsets.is_done(attempt):
            print_note(f"runner.py: trial {attempt.index} is done: {attempt.dir}")
            print_json(json.dumps(attempt.result, indent=2))
            return attempt.result.get("exit_code", EXIT_UNRESOLVED)
    run_dir = trials.next_trial_dir(set_dir, index, found)
    trial = {"index": index, "run_set": set_dir}
    return _run(settled, interrupt, run_dir, trial, label=f"trial {index}/{stored['trials']}")


# --- one run ----------------------------------------------------------------------------------


def _run(config: RunConfig, interrupt: Interrupt, run_dir=None, trial=None, label="") -> int:
    """One run; `label` ("trial 3/10") heads its progress and verdict lines in a run set."""
    base = {
        "harness": HARNESS,
        "simulated": config.model.startswith(f"{SIMULATED_PROVIDER}/"),
        "model": config.model,
        "drive": config.drive,
        **({"trial": trial} if trial else {}),
        **({"baseline": True, "resolved_by": scorer.COVERAGE} if config.baseline else {}),
        "started_at": utc_now(),
    }
    run = None
    try:
        fixture = _fixture(config, base)
        _known_provider(config)
        if trial is None:  # a run set's trials leave it to the set, which said it once
            _warn_undistinctive(fixture)
        config.check_workers(fixture)
        script = _script(config.model)
        refusal = scripted_check.too_many_shards(len(fixture.shards)) if script else None
        if refusal:
            raise RunRefused("too_many_shards_for_script", refusal)
        agent = agent_and_sandbox(config, base)
        run = make_run_dir(config.out, fixture.name, run_dir)
        base["run_dir"] = run.root
        launch, plan = prepare_launch(
            config, fixture, run, agent, base, offline=bool(script), label=label
        )
        run.write_meta(dict(base, argv=DRIVES[config.drive].argv(run, launch)))
        if interrupt.signum:
            message = "interrupted before the agent started"
            exit_code, extra = EXIT_SIGNAL[interrupt.signum], {"interrupted": True}
            raise RunRefused(
                "interrupted", message, status="agent_not_run", extra=extra, exit_code=exit_code
            )
        return _launch_and_score(config, fixture, run, launch, plan, base, interrupt)
    except RunRefused as refusal:
        if run is not None:
            run.cleanup_tmp()
        return _refused(refusal, base, run)


def _fixture(config: RunConfig, base: dict) -> Fixture:
    """The fixture, and where and what it was in `base`, so a regrade finds it and knows
    when it changed."""
    try:
        fixture = load_fixture(config.fixture)
    except FixtureError as error:
        said, extra = f"invalid fixture: {error.message}", {"fixture": {"path": config.fixture}}
        raise RunRefused(
            "invalid_fixture", error.message, status="invalid_fixture", said=said,
            detail=error.code, extra=extra,
        ) from None  # fmt: skip
    base["fixture"] = {
        "name": fixture.name,
        "path": fixture.root,
        "shards": len(fixture.shards),
        "digest": fixture_digest(fixture.root),
    }
    return fixture


def _launch_and_score(config, fixture, run: RunDir, launch: Launch, plan, base, interrupt) -> int:
    """Launch the agent and end it, write what the runner saw, score what is on disk."""
    try:
        with contextlib.ExitStack() as stack:
            proxy = _model_proxy(config, run, stack)
            launched = launch_and_wait(run, launch, interrupt, proxy=proxy, plan=plan)
    except ProxyError as error:
        raise RunRefused("model_proxy_unavailable", str(error), status="agent_not_run") from None
    except sandbox.SandboxError as error:
        raise RunRefused("sandbox_start_failed", str(error), status="agent_not_run") from None
    except OSError as error:
        raise RunRefused("agent_exec_failed", str(error), status="agent_not_run") from None
    # The agent's whole tree is gone: what the runner saw may now be written down, and the
    # children's cells run again (shell/replay.py) before the run is scored.
    base["witness"] = _write_witness(run, config, proxy, launched)
    if not launched.interrupted:
        print_note("runner.py: replaying the children's cells (swarm_fanout/shell/replay.py)")
        python = replay.kernel_python(None, launch.env, run.root)
        base["replay"] = replay.replay_step(run.root, fixture, generate.twins, python)
    if config.inject_failure:
        base["injected_failures"] = {
            "asked": [{"worker": w, "calls": n} for w, n in config.inject_failure],
            "answered": sum(1 for call in proxy.records() if call.injected),
        }
    _refuse_unadmitted(launched)
    collected = artifacts.collect(run.root, fixture.artifact, base["witness"]["sha256"])
    verdict = scorer.score(fixture, collected, wall_time_s=launched.wall_time_s)
    result = result_json(
        base, verdict, collected, agent_end(launched), signal=launched.interrupted,
        wall_time_s=launched.wall_time_s, cleanup=launched.cleanup,
        records=drive_records(launched), finished_at=utc_now(),
    )  # fmt: skip
    if config.inject_failure:
        workers = [worker for worker, _ in config.inject_failure]
        result = with_failure_accounting(result, scorer.failure_accounting(verdict, workers))
    script = _script(config.model)
    if script and config.inject_failure:
        # The script's expected outcome is for a run nobody broke on purpose.
        result.update(
            contract_check="inconclusive",
            differences=["failures were injected (--inject-failure); judged by the verdict"],
        )
    elif script:
        # A scripted run asks whether the installed product and the harness still
        # agree: the script's expected outcome, not `resolved`, decides the exit.
        result.update(scripted_check.contract_check(script, config.drive, result))
        if not launched.interrupted and result["status"] == "scored":
            agree = result["contract_check"] == "pass"
            result["exit_code"] = EXIT_RESOLVED if agree else EXIT_UNRESOLVED
    return _emit(result, run, launch.label)


def _model_proxy(config: RunConfig, run: RunDir, stack) -> RecordingProxy:
    """The recording proxy, in front of the harness's own endpoint for a scripted model
    (its script) or a simulated one (an echo the stand-in calls), else the provider's."""
    provider = config.model.partition("/")[0]
    local = None
    if _script(config.model):
        server = stack.enter_context(scripted_model.ScriptedModelServer(run.paths.model_log))
        local = (server.base_url, scripted_model.provider_entry)
    elif provider == SIMULATED_PROVIDER:
        echo = scripted_model.ScriptedModelServer(run.paths.model_log, echo=True)
        server = stack.enter_context(echo)
        entry = {"api": "openai-completions", "apiKey": "simulated"}
        local = (server.base_url, lambda url: {"baseUrl": url, **entry})
    return route_through_proxy(
        stack,
        run.paths.agent_home,
        config.model,
        upstream=config.upstream,
        local=local,
        also_known=tuple(HARNESS_MODELS),
        injections=config.inject_failure,
    )


def _write_witness(run: RunDir, config, proxy: RecordingProxy, launched: Launched) -> dict:
    """witness.jsonl from the runner's own channels, written once the agent is gone."""
    proxy.stop()
    header = {
        "model": config.model,
        "drive": config.drive,
        "proxy": bool(proxy.routes),
        "observer": launched.observer,
        "processes": launched.processes,
    }
    return witness_record(
        run.paths.witness,
        header=header,
        model_calls=[call.to_json() for call in proxy.records()],
        sightings=launched.sightings,
        channels=launched.channels,
    )


def _script(model: str) -> str | None:
    """The scripted-model script a `scripted/<script>` model names, else None."""
    provider, _, name = model.partition("/")
    return name if provider == scripted_model.PROVIDER else None


# --- what is printed and written --------------------------------------------------------------


def _refuse_unadmitted(launched: Launched) -> None:
    """The daemon (or the ACP agent) never took the task: nothing of the agent ran."""
    drive, session = next(
        ((name, record) for name, record in drive_records(launched).items() if record),
        (None, None),
    )
    stopped = launched.timed_out or launched.interrupted
    if session is not None and not session["admitted"] and session.get("error") and not stopped:
        error = session["error"]
        extra = {drive: session, "cleanup": launched.cleanup}
        raise RunRefused(error["code"], error["message"], status="agent_not_run", extra=extra)


def _refused(refusal: RunRefused, base: dict | None = None, run: RunDir | None = None) -> int:
    """A refusal as the result JSON (written too when a run dir was made), its exit code and
    one line on stderr: the one place a refusal is said."""
    print_note(f"runner.py: {refusal.said}")
    result = dict(base or {}, status=refusal.status, resolved=False, exit_code=refusal.exit_code)
    result.update(refusal.extra)
    result["reasons"] = [refusal.reason]
    if refusal.status == "agent_not_run":
        result["finished_at"] = utc_now()
    return _emit(result, run)


def _emit(result: dict, run: RunDir | None, label: str = "") -> int:
    where = run.paths.result if run is not None else None
    text, where = store_record(result, where, "result_file_error")
    if result.get("status") in ("scored", "agent_error"):
        head = f"{label}: " if label else ""
        print_note(f"runner.py: {head}{summary_line(result, where)}")
        if not result["resolved"] and run is not None:
            print_note(f"runner.py: {head}{evidence_hint(run.root)}")
    print_json(text)
    return result["exit_code"]


def _warn_undistinctive(fixture: Fixture) -> None:
    warning = undistinctive_warning(fixture)
    if warning:
        print_note(f"runner.py: {warning}")


if __name__ == "__main__":
    sys.exit(main())
