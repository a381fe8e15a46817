"""One run of the agent on a fixture, from its settings to its result: `Trial` checks what the run
needs, makes its run dir ready (shell/prepare.py), launches and ends the agent
(shell/launch.py), writes what the runner saw (the witness, the replay), scores what is on disk
(scorer.py, rules/result.py) and writes result.json from one record, `TrialResult`
(shell/trial_result.py), once. A `RunRefused` ends it as a `Refusal`: the same record, the exit
code and one line on stderr.
"""

from __future__ import annotations

import contextlib

from swarm_fanout import generate, scorer
from swarm_fanout.evidence import artifacts
from swarm_fanout.evidence.fixture import Fixture, FixtureError, fixture_digest, load_fixture
from swarm_fanout.reporting.terminal import evidence_hint, summary_line, undistinctive_warning
from swarm_fanout.rules import triage
from swarm_fanout.rules.exit_codes import EXIT_RESOLVED, EXIT_SIGNAL, EXIT_UNRESOLVED
from swarm_fanout.rules.result import run_result
from swarm_fanout.scripted import check as scripted_check
from swarm_fanout.scripted import model as scripted_model
from swarm_fanout.shell import replay, sandbox
from swarm_fanout.shell.agent_config import (
    ProxyError,
    agent_config_dir,
    route_through_proxy,
    unknown_provider,
)
from swarm_fanout.shell.cli import RunRefused, print_json, print_note
from swarm_fanout.shell.launch import DRIVES, Launched, agent_end, drive_records, launch_and_wait
from swarm_fanout.shell.observer import witness_record
from swarm_fanout.shell.prepare import make_run_dir, note_no_kernel, prepare_launch, sandbox_for
from swarm_fanout.shell.proxy import RecordingProxy
from swarm_fanout.shell.run_config import HARNESS, RunConfig
from swarm_fanout.shell.rundir import RunDir, find_agent, store_record, utc_now
from swarm_fanout.shell.trial_result import Outcome, Refusal, RunRecord, TrialResult
from swarm_fanout.shell.watch import Interrupt
from swarm_fanout.simulated.behaviours import BEHAVIOURS

SIMULATED_PROVIDER = "simulated"  # the bundled stand-in's models (swarm_fanout/simulated/agent.py)
# The providers the harness serves itself (suggested with the built-in ones for a typo), and
# the models each has.
HARNESS_MODELS = {
    SIMULATED_PROVIDER: ("behaviour", tuple(BEHAVIOURS)),
    scripted_model.PROVIDER: ("script", tuple(scripted_model.SCRIPTS)),
}


class Trial:
    """One run: `record` is what the runner recorded of it so far (run-meta.json, then the head
    of result.json), `run` its run dir once made; `result()` runs it and writes its result."""

    def __init__(
        self,
        config: RunConfig,
        interrupt: Interrupt,
        run_dir: str | None = None,
        trial: dict | None = None,
        label: str = "",
    ):
        """`run_dir`, `trial` ({index, run_set}) and `label` ("trial 3/10"): a run set's trial."""
        self.config, self.interrupt, self.run_dir, self.label = config, interrupt, run_dir, label
        self.script = script_of(config.model)
        self.run: RunDir | None = None
        baseline = {"baseline": True, "resolved_by": scorer.COVERAGE} if config.baseline else {}
        self.record = RunRecord(HARNESS, False, config.model, config.drive, trial=trial, **baseline)
        self._fill(started_at=utc_now())

    def _fill(self, **fields) -> None:
        """The record with `fields`; whether the run is simulated is decided here, from the
        model and the agent's version, whenever either is known."""
        record = self.record._replace(**fields)
        version = (record.agent or {}).get("version") or ""
        simulated = record.model.startswith(f"{SIMULATED_PROVIDER}/") or "simulated" in version
        self.record = record._replace(simulated=simulated)

    def result(self) -> int:
        """Run the trial; write, print and say its result; its exit code."""
        try:
            outcome = self._outcome()
        except RunRefused as refusal:
            if self.run is not None:
                self.run.cleanup_tmp()
            return refused(refusal, self.record, self.run)
        return emit(TrialResult(self.record, outcome), self.run, self.label)

    def _outcome(self) -> Outcome:
        """The run, from its fixture to its outcome; a run that cannot go on raises
        `RunRefused`."""
        config = self.config
        fixture = self._fixture()
        known_provider(config)
        if self.record.trial is None:  # a run set's trials leave it to the set, which said it once
            warn_undistinctive(fixture)
        config.check_workers(fixture)
        too_many = scripted_check.too_many_shards(len(fixture.shards)) if self.script else None
        if too_many:
            raise RunRefused("too_many_shards_for_script", too_many)
        agent_bin, missing = find_agent(config.agent_bin)
        self._fill(agent={"bin": config.agent_bin, "path": agent_bin, "version": None})
        if missing:
            raise RunRefused(*missing, status="agent_not_run")
        available = sandbox_for(config)
        self.run = run = make_run_dir(config.out, fixture.name, self.run_dir)
        self._fill(run_dir=run.root)
        trial_index = self.record.trial["index"] if self.record.trial else None
        launch, plan, sandbox_record, version = prepare_launch(
            config, fixture, run, agent_bin, available, trial_index=trial_index,
            offline=bool(self.script), label=self.label,
        )  # fmt: skip
        kernel_python = launch.env.get("PRIME_AGENT_KERNEL_PYTHON")
        self._fill(
            sandbox=sandbox_record,
            agent={**self.record.agent, "version": version, "kernel_python": kernel_python},
        )
        if not self.record.simulated:
            note_no_kernel(launch.env)
        run.write_meta({**self.record.to_json(), "argv": DRIVES[config.drive].argv(run, launch)})
        if self.interrupt.signum:
            raise RunRefused(
                "interrupted", "interrupted before the agent started", status="agent_not_run",
                extra={"interrupted": True}, exit_code=EXIT_SIGNAL[self.interrupt.signum],
            )  # fmt: skip
        try:
            with contextlib.ExitStack() as stack:
                proxy = self._model_proxy(stack)
                launched = launch_and_wait(run, launch, self.interrupt, proxy=proxy, plan=plan)
        except ProxyError as error:
            raise RunRefused(
                "model_proxy_unavailable", str(error), status="agent_not_run"
            ) from None
        except sandbox.SandboxError as error:
            raise RunRefused("sandbox_start_failed", str(error), status="agent_not_run") from None
        except OSError as error:
            raise RunRefused("agent_exec_failed", str(error), status="agent_not_run") from None
        # The agent's whole tree is gone: what the runner saw may now be written down, and the
        # children's cells run again (shell/replay.py) before the run is scored.
        self._fill(witness=self._write_witness(proxy, launched))
        if not launched.interrupted:
            print_note("runner.py: replaying the children's cells (swarm_fanout/shell/replay.py)")
            python = replay.kernel_python(None, launch.env, run.root)
            replayed = replay.replay_step(
                run.root, fixture, generate.twins, python, available=available
            )
            self._fill(replay=replayed)
        if config.inject_failure:
            asked = [{"worker": worker, "calls": calls} for worker, calls in config.inject_failure]
            answered = sum(1 for call in proxy.records() if call.injected)
            self._fill(injected_failures={"asked": asked, "answered": answered})
        refuse_unadmitted(launched)
        return self._scored(fixture, launched)

    def _fixture(self) -> Fixture:
        """The fixture, and where and what it was in the record, so a regrade finds it and
        knows when it changed."""
        path = self.config.fixture
        try:
            fixture = load_fixture(path)
        except FixtureError as error:
            raise RunRefused(
                "invalid_fixture", error.message, status="invalid_fixture",
                said=f"invalid fixture: {error.message}", detail=error.code,
                extra={"fixture": {"path": path}},
            ) from None  # fmt: skip
        digest = fixture_digest(fixture.root)
        shards = len(fixture.shards)
        self._fill(
            fixture={"name": fixture.name, "path": fixture.root, "shards": shards, "digest": digest}
        )
        return fixture

    def _scored(self, fixture: Fixture, launched: Launched) -> Outcome:
        """Score what is on disk; the outcome, a scripted run's exit by its expected outcome."""
        config, record = self.config, self.record
        collected = artifacts.collect(self.run.root, fixture.artifact, record.witness["sha256"])
        verdict = scorer.score(fixture, collected, wall_time_s=launched.wall_time_s)
        end = agent_end(launched)
        judged = run_result(verdict.judged(baseline=config.baseline), collected, end)
        exit_code = judged.exit_code
        if launched.interrupted and judged.status == "scored":
            exit_code = EXIT_SIGNAL[launched.interrupted]
        agent = {
            **record.agent, "exit_code": end.exit_code, "timed_out": end.timed_out,
            "wall_time_s": launched.wall_time_s,
            "first_error": triage.first_error(collected) or end.stderr_tail,
        }  # fmt: skip
        outcome = Outcome(
            judged.status, judged.resolved, exit_code, judged.reasons, agent, end.interrupted,
            launched.cleanup, utc_now(), verdict=verdict.to_json(), **drive_records(launched),
        )  # fmt: skip
        if config.inject_failure:
            workers = [worker for worker, _ in config.inject_failure]
            accounting = scorer.failure_accounting(verdict, workers)
            accounted = [row["accounted"] for row in accounting]
            outcome = outcome._replace(
                injected_failures={**record.injected_failures, "accounting": accounting},
                failure_accounted=None if None in accounted else all(accounted),
            )
        if self.script and config.inject_failure:
            # The script's expected outcome is for a run nobody broke on purpose.
            why = "failures were injected (--inject-failure); judged by the verdict"
            return outcome._replace(contract_check="inconclusive", differences=[why])
        if self.script:
            # A scripted run asks whether the installed product and the harness still
            # agree: the script's expected outcome, not `resolved`, decides the exit.
            result = TrialResult(record, outcome).to_json()
            outcome = outcome._replace(
                **scripted_check.contract_check(self.script, config.drive, result)
            )
            if not launched.interrupted and outcome.status == "scored":
                agree = outcome.contract_check == "pass"
                outcome = outcome._replace(exit_code=EXIT_RESOLVED if agree else EXIT_UNRESOLVED)
        return outcome

    def _model_proxy(self, stack: contextlib.ExitStack) -> RecordingProxy:
        """The recording proxy, in front of the harness's own endpoint for a scripted model
        (its script) or a simulated one (an echo the stand-in calls), else the provider's."""
        config, model_log = self.config, self.run.paths.model_log
        local = None
        if self.script:
            server = stack.enter_context(scripted_model.ScriptedModelServer(model_log))
            local = (server.base_url, scripted_model.provider_entry)
        elif self.record.model.partition("/")[0] == SIMULATED_PROVIDER:
            server = stack.enter_context(scripted_model.ScriptedModelServer(model_log, echo=True))
            entry = {"api": "openai-completions", "apiKey": "simulated"}
            local = (server.base_url, lambda url: {"baseUrl": url, **entry})
        return route_through_proxy(
            stack, self.run.paths.agent_home, config.model, upstream=config.upstream,
            local=local, also_known=tuple(HARNESS_MODELS), injections=config.inject_failure,
        )  # fmt: skip

    def _write_witness(self, proxy: RecordingProxy, launched: Launched) -> dict:
        """witness.jsonl from the runner's own channels, written once the agent is gone."""
        proxy.stop()
        header = {
            "model": self.config.model,
            "drive": self.config.drive,
            "proxy": bool(proxy.routes),
            "observer": launched.observer,
            "processes": launched.processes,
        }
        return witness_record(
            self.run.paths.witness,
            header=header,
            model_calls=[call.to_json() for call in proxy.records()],
            sightings=launched.sightings,
            channels=launched.channels,
        )


def script_of(model: str) -> str | None:
    """The script a `scripted/<script>` model names, else None."""
    provider, _, name = model.partition("/")
    return name if provider == scripted_model.PROVIDER else None


def known_provider(config: RunConfig) -> None:
    """A misspelt provider (`anthropc/...`) is refused before anything is made, as a
    misspelt behaviour is: nothing could route its calls."""
    if not config.model:
        return
    provider = config.model.partition("/")[0]
    agent_dir = agent_config_dir(config.agent_config)
    why = unknown_provider(provider, agent_dir, config.upstream, tuple(HARNESS_MODELS))
    if why is not None:
        raise RunRefused("unknown_provider", why, extra={"model": config.model})


def refuse_unadmitted(launched: Launched) -> None:
    """The daemon (or the ACP agent) never took the task: nothing of the agent ran."""
    drive, session = next(
        ((name, record) for name, record in drive_records(launched).items() if record),
        (None, None),
    )
    ended_by_runner = launched.timed_out or launched.interrupted
    if (
        session is not None
        and not session["admitted"]
        and session.get("error")
        and not ended_by_runner
    ):
        error = session["error"]
        extra = {drive: session, "cleanup": launched.cleanup}
        raise RunRefused(error["code"], error["message"], status="agent_not_run", extra=extra)


def refused(refusal: RunRefused, record: RunRecord | None = None, run: RunDir | None = None) -> int:
    """A refusal as the result (written too when a run dir was made), its exit code and one
    line on stderr: the one place a refusal is said."""
    print_note(f"runner.py: {refusal.said}")
    finished_at = utc_now() if refusal.status == "agent_not_run" else None
    end = Refusal(
        refusal.status,
        refusal.exit_code,
        (refusal.reason,),
        **refusal.extra,
        finished_at=finished_at,
    )
    return emit(TrialResult(record, end), run)


def emit(result: TrialResult, run: RunDir | None, label: str = "") -> int:
    """result.json written (where a run dir was made) and printed, and said on stderr: the one
    place a run's result is written."""
    where = run.paths.result if run is not None else None
    written = result.to_json()
    text, where = store_record(written, where, "result_file_error")
    if result.end.status in ("scored", "agent_error"):
        head = f"{label}: " if label else ""
        print_note(f"runner.py: {head}{summary_line(written, where)}")
        if not result.end.resolved and run is not None:
            print_note(f"runner.py: {head}{evidence_hint(run.root)}")
    print_json(text)
    return result.end.exit_code


def warn_undistinctive(fixture: Fixture) -> None:
    warning = undistinctive_warning(fixture)
    if warning:
        print_note(f"runner.py: {warning}")
