"""Run one orchestration trial of prime-agent on a fixture and score it, or a run set of them.

The entry point: the flags become a `RunConfig` (shell/run_config.py); one run is a `Trial`
(trial.py), from its settings to its result.json; a run set runs its trials as runner.py
processes (shell/trials.py). Exit codes: README "Exit codes" (rules/exit_codes.py).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from argparse import BooleanOptionalAction, RawDescriptionHelpFormatter

from swarm_fanout.evidence import runsets
from swarm_fanout.reporting.summary import summarize_run_set
from swarm_fanout.reporting.terminal import set_next_steps, set_summary_line
from swarm_fanout.rules.exit_codes import EXIT_UNRESOLVED
from swarm_fanout.scripted import model as scripted_model
from swarm_fanout.shell import trials
from swarm_fanout.shell.cli import ArgumentParser, RunRefused, did_you_mean, print_json, print_note
from swarm_fanout.shell.launch import DRIVES
from swarm_fanout.shell.run_config import RunConfig
from swarm_fanout.shell.rundir import store_record
from swarm_fanout.shell.watch import Interrupt
from swarm_fanout.simulated.behaviours import BEHAVIOURS
from swarm_fanout.trial import (
    HARNESS_MODELS,
    SIMULATED_PROVIDER,
    Trial,
    known_provider,
    refused,
    script_of,
    warn_undistinctive,
)

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
    if script_of(config.model or "") is not None and config.baseline:
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
                known_provider(config)  # before the run set's dir is made
            if config.trial_index is not None:
                return _trial_of_set(config, interrupt)
            if config.is_run_set:
                return _run_set(config, interrupt)
        except RunRefused as refusal:
            return refused(refusal)
        return Trial(config.settled(None), interrupt).result()


# --- run sets ---------------------------------------------------------------------------------


def _run_set(config: RunConfig, interrupt: Interrupt) -> int:
    """Run (or resume) a run set, then write and print its summary."""
    set_dir, stored, _, fixture = trials.open_set(
        config, config.resume or config.run_set, "cannot run the run set"
    )
    print_note(f"runner.py: run set {set_dir}")
    warn_undistinctive(fixture)
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
    label = f"trial {index}/{stored['trials']}"
    return Trial(settled, interrupt, run_dir, trial, label).result()


if __name__ == "__main__":
    sys.exit(main())
