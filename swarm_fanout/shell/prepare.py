"""Before the agent starts: the sandbox, checked before a run dir is made (`sandbox_for`), then
the run dir made ready, the agent's environment, its sandbox plan and what to launch
(`prepare_launch`). A run that cannot start raises `RunRefused`."""

from __future__ import annotations

import subprocess

from swarm_fanout.evidence.fixture import Fixture
from swarm_fanout.shell import sandbox, trials
from swarm_fanout.shell.agent_config import agent_config_dir, api_key_names
from swarm_fanout.shell.cli import RunRefused, print_note
from swarm_fanout.shell.launch import Launch, agent_version
from swarm_fanout.shell.run_config import RunConfig
from swarm_fanout.shell.rundir import RunDir


def sandbox_for(config: RunConfig) -> sandbox.Availability | None:
    """The sandbox's availability (None: --no-sandbox), or why the run cannot start: said
    before a run dir is made, so nothing is left behind."""
    available = sandbox.availability() if config.sandbox is not False else None
    if config.sandbox and not available.usable:
        said = f"--sandbox: {available.problem}"
        raise RunRefused("sandbox_unavailable", available.problem, said=said)
    if available is not None and not available.usable:
        print_note(f"runner.py: note: running without a sandbox: {available.problem}")
    return available


def make_run_dir(out: str, fixture_name: str, run_dir: str | None) -> RunDir:
    """A new run dir under `out`, or `run_dir` itself (a run set's trial)."""
    try:
        return RunDir.at(run_dir) if run_dir else RunDir.create(out, fixture_name)
    except OSError as error:
        said = f"cannot create a run dir {run_dir or f'under {out}'}: {error}"
        raise RunRefused("run_dir_unwritable", str(error), said=said) from None


def prepare_launch(
    config: RunConfig,
    fixture: Fixture,
    run: RunDir,
    agent_bin: str,
    available: sandbox.Availability | None,
    *,
    trial_index: int | None,
    offline: bool,
    label: str,
) -> tuple[Launch, sandbox.Plan, dict, str | None]:
    """The run dir made ready, and what to launch in it: the agent's environment (`offline`:
    the model is the harness's own endpoint; `trial_index`: a run set's trial), its sandbox
    plan, the sandbox's record for the result, and the agent's version."""
    try:
        run.prepare(fixture, agent_config_dir(config.agent_config))
    except (OSError, subprocess.SubprocessError) as error:
        raise RunRefused("run_setup_failed", str(error), status="agent_not_run") from None
    env = run.agent_env()
    if offline:
        # Nothing needs the network (contract §11).
        env["PI_OFFLINE"] = "1"
    if trial_index is not None:
        env[trials.TRIAL_ENV] = str(trial_index)
    env, plan, sandbox_record = sandbox.plan_run(
        available,
        agent_bin=agent_bin,
        env=env,
        run_root=run.root,
        writable=run.sandbox_writable(),
        key_names=api_key_names(run.paths.agent_home),
    )
    version = agent_version(agent_bin, env, run.paths.repo)
    task = trials.baseline_task(fixture) if config.baseline else fixture.task
    launch = Launch(
        agent_bin, config.model, task, env, config.drive, config.timeout, config.grace,
        fixture.artifact, label,
    )  # fmt: skip
    return launch, plan, sandbox_record, version


def note_no_kernel(env: dict) -> None:
    """Said for the real product, whose kernel the run's own HOME would have to build."""
    if not (env.get("PRIME_AGENT_KERNEL_PYTHON") or env.get("PRIME_AGENT_KERNEL_VENV")):
        print_note(
            "runner.py: note: no kernel Python (PRIME_AGENT_KERNEL_PYTHON is unset and your "
            "HOME has no prime-agent kernel venv): the agent will try to build one in the "
            "run's own HOME, which needs internet and takes minutes"
        )
