"""A run's settings as one record: built once from the command line (`RunConfig.of`), settled
against a stored run set and its defaults (`settled`), stored in run-set.json (`stored`),
held against it on a trial or `--resume` (`differences`), and turned back into flags for a
trial's process and for the commands the runner prints (`flags`)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields, replace

from swarm_fanout.evidence import runsets
from swarm_fanout.evidence.fixture import Fixture, fixture_digest
from swarm_fanout.shell.cli import RunRefused, did_you_mean

HARNESS = {"name": "swarm-fanout", "version": "0.1.0"}
# The calls --inject-failure fails by default: enough to make a child fail outright, as the
# product retries (3 tries of a request, 4 attempts of a message: docs/product-contract.md §5,
# the captured child-fail run's 12 requests for 4 failed messages).
INJECTED_CALLS = 12
DEFAULTS = {"timeout": 1800.0, "agent_bin": "prime-agent", "drive": "oneshot", "trials": 1}
# Taken from a stored run set when not given; the flags a trial and a resume must match.
STORED = ("fixture", "model", "drive", "timeout", "agent_bin", "agent_config")


@dataclass(frozen=True)
class RunConfig:
    """Every flag of runner.py; None where not given (`settled` fills in the rest)."""

    fixture: str | None = None
    model: str | None = None
    drive: str | None = None
    timeout: float | None = None
    grace: float | None = None
    upstream: str | None = None
    inject_failure: tuple[tuple[str, int], ...] = ()
    agent_bin: str | None = None
    out: str = "runs"
    agent_config: str | None = None
    sandbox: bool | None = None
    baseline: bool = False
    trials: int | None = None
    jobs: int | None = None
    run_set: str | None = None
    trial_index: int | None = None
    resume: str | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> RunConfig:
        """The parsed flags; raises ValueError naming a value no run can use."""
        for flag in ("timeout", "grace"):
            value = getattr(args, flag)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"--{flag} must be a positive number of seconds, not {value}")
        given = {field.name: getattr(args, field.name) for field in fields(cls)}
        given["inject_failure"] = tuple(injection(text) for text in args.inject_failure)
        return cls(**given)

    @property
    def jobs_at_once(self) -> int:
        return self.jobs or 1

    @property
    def is_run_set(self) -> bool:
        return bool(self.resume or self.run_set or (self.trials or 1) > 1)

    def settled(self, stored: dict | None) -> RunConfig:
        """Flags given win, then the stored run set's values, then the defaults."""
        kept = _stored_flags(stored)
        values = {
            key: kept.get(key, DEFAULTS.get(key))
            for key in (*STORED, "trials")
            if getattr(self, key) is None
        }
        values["baseline"] = bool(self.baseline or kept.get("baseline"))
        values["inject_failure"] = self.inject_failure or kept.get("inject_failure", ())
        return replace(self, **values)

    def stored(
        self, fixture: Fixture, agent_path: str | None, version: str | None, created_at: str
    ) -> dict:
        """What a run set records, and what every trial and resume of it must match."""
        return {
            "harness_version": HARNESS["version"],
            "fixture": {"name": fixture.name, "path": fixture.root, "shards": len(fixture.shards)},
            "fixture_digest": fixture_digest(fixture.root),
            "model": self.model,
            "drive": self.drive,
            "baseline": self.baseline,
            "inject_failure": _injections_json(self.inject_failure),
            # Absolute, so a resume from another dir launches the same agent.
            "agent_bin": agent_path or self.agent_bin,
            "agent_version": version,
            "agent_config": self.agent_config,
            "timeout": self.timeout,
            "trials": self.trials,
            "jobs": self.jobs_at_once,
            "created_at": created_at,
        }

    def differences(self, stored: dict, fixture: Fixture, given_trials: int | None) -> list[str]:
        """How these settled flags differ from a stored run set's, as `key: stored X, now Y`.
        A --trials given to it must be its own K: every task of a batch array gets the same
        command, so another K is a script that changed, said, not ignored."""
        wanted = {
            "fixture_digest": fixture_digest(fixture.root),
            "harness_version": HARNESS["version"],
            "model": self.model,
            "drive": self.drive,
            "baseline": self.baseline,
            "inject_failure": _injections_json(self.inject_failure),
        }
        found = runsets.mismatches(stored, wanted)
        injected = stored.get("inject_failure", [])
        if injected != wanted["inject_failure"]:
            found.append(
                f"--inject-failure: stored {_injections_text(injected)}, "
                f"now {_injections_text(wanted['inject_failure'])}"
            )
        if given_trials is not None and given_trials != stored.get("trials"):
            found.append(f"trials: stored {stored.get('trials')!r}, now {given_trials!r}")
        return found

    def check_workers(self, fixture: Fixture) -> None:
        """--inject-failure must name a worker of the fixture, or it would fail nothing."""
        workers = [shard.worker for shard in fixture.shards]
        for worker, _ in self.inject_failure:
            if worker not in workers:
                hint = did_you_mean(worker, workers)
                said = f"--inject-failure {worker}: fixture {fixture.name} has no such worker; "
                raise RunRefused("unknown_worker", f"{said}{hint}its workers: {', '.join(workers)}")

    def flags(self, *keys: str) -> list[str]:
        """The flags of `keys` that were given, as a command line gives them."""
        argv: list[str] = []
        for key in keys:
            value, flag = getattr(self, key), "--" + key.replace("_", "-")
            if key == "inject_failure":
                argv += [word for worker, n in value for word in (flag, f"{worker}:{n}")]
            elif isinstance(value, bool):
                argv.append(flag if value else f"--no-{key}")
            elif value is not None:
                argv += [flag, str(value)]
        return argv


def injection(text: str) -> tuple[str, int]:
    """`--inject-failure WORKER[:N]` as (worker, calls)."""
    worker, _, count = text.partition(":")
    if not worker or (count and not count.isdigit()) or count == "0":
        raise ValueError(f"--inject-failure takes WORKER[:N] with N >= 1, not {text!r}")
    return worker, int(count or INJECTED_CALLS)


def _injections_json(injections) -> list[dict]:
    return [{"worker": worker, "calls": count} for worker, count in injections]


def _injections_text(stored: list) -> str:
    if not stored:
        return "none"
    return ", ".join(f"{item.get('worker')}:{item.get('calls')}" for item in stored)


def _stored_flags(stored: dict | None) -> dict:
    if stored is None:
        return {}
    flags = {key: stored.get(key) for key in ("model", "drive", "baseline", "timeout", "trials")}
    flags.update(
        fixture=stored["fixture"]["path"],
        agent_bin=stored.get("agent_bin"),
        agent_config=stored.get("agent_config"),
        inject_failure=runsets.injected(stored),
    )
    return flags
