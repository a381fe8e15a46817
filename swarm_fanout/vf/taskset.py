"""swarm-fanout as a verifiers v1 taskset, scored by the harness's own scorer.

Tasks come from a split: `fixtures` (default), one task per fixture dir; `train` or `eval`,
tasks generated on the fly by fixtures/generate.py (generated.py), deterministically from
(split, seed, index). The prompt is the fixture's task.txt; `setup` writes the fixture's
other files (the shards) into the runtime's working dir and commits them, as shell/rundir.py
makes a run's repo; the answers stay on this host. After the agent's session closes,
`finalize` copies what the product wrote out of the runtime (copyout.py), replays each
replying child's cells in a sandbox where bwrap runs (shell/replay.py, as the runner does;
docs/rubric.md "Provenance"), and scores the copy with `scorer.score`, the code `scorer.py`
runs: the verdict JSON goes into `trace.info["swarm_fanout"]`, the reward is 1.0 exactly
when it resolves (or, shaped, the fraction of shards earned), and the metrics are read from
it. A failure that is not the model's (the copy-out, a fixture changed since loading, the
scorer, the verdict's `agent_error`) raises from the hook, so verifiers records the rollout
as errored (`TaskError`) and never rewards it. There is no witness inside a verifiers
rollout, so every verdict carries the warning `unwitnessed` (docs/witness.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Literal, NamedTuple

from pydantic import Field, model_validator
from verifiers.v1 import (
    Runtime,
    State,
    Task,
    TaskConfig,
    TaskData,
    Taskset,
    TasksetConfig,
    Trace,
    metric,
    reward,
)
from verifiers.v1.harnesses.prime_agent import harness as stock

from swarm_fanout import generate
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import (
    MANIFEST,
    Fixture,
    FixtureError,
    fixture_digest,
    load_fixture,
)
from swarm_fanout.rules.provenance import PROVENANCE_RULES
from swarm_fanout.rules.result import run_result
from swarm_fanout.rules.triage import AgentEnd
from swarm_fanout.scorer import CRITERION_NAMES, score
from swarm_fanout.shell import replay
from swarm_fanout.shell.rundir import REPO_GIT_ENV, repo_commands, repo_files
from swarm_fanout.vf import copyout, generated
from swarm_fanout.vf.copyout import CopyError, RuntimeLayout, copy_out

# Where the local harness records the rollout's layout (harness.py), and where the verdict goes.
LAYOUT_KEY = "swarm_fanout_layout"
VERDICT_KEY = "swarm_fanout"
# Where the local harness records what the prompt response said of the children (harness.py).
ACP_KEY = "swarm_fanout_acp"
PROVENANCE_CODES = frozenset(code for code, _, _ in PROVENANCE_RULES)


class NotTheModels(RuntimeError):
    """A rollout that cannot be judged, for a reason that is not the model's: raised from a
    task hook, so verifiers records it as a TaskError and gives it no reward."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code = code


def default_fixtures_dir() -> str:
    """The fixtures that ship with the harness."""
    return str(generate.FIXTURES_DIR)


class SwarmFanoutData(TaskData):
    fixture_root: str | None = None
    """The fixtures split: the fixture dir on this host; its shards go into the runtime, its
    answers never do."""
    generation: generated.Spec | None = None
    """A generated split: what regenerates the fixture (generated.py); no answers."""
    fixture_digest: str
    """The fixture's digest when the task was loaded; scoring refuses a fixture that
    changed since."""


class SwarmFanoutTaskConfig(TaskConfig):
    keep_runs: str | None = None
    """Keep each rollout's copied-out run dir under this dir, as `<trace id>/`, to regrade
    (`scorer.py DIR --fixture F`) or read (`report.py DIR`); default: removed once scored."""
    max_copy_bytes: int = Field(copyout.MAX_COPY_BYTES, ge=1)
    """The most the copy-out takes of a rollout's files: a rollout that wrote more is an
    error (`copy_too_large`), not a score."""
    reward: Literal["resolved", "earned_shards"] = "resolved"
    """`resolved`: 1.0 exactly when the verdict resolves. `earned_shards` (shaped): the
    fraction of shards whose answer was earned (covered, delegated, derived, received)."""


class SwarmFanoutConfig(TasksetConfig):
    split: Literal["fixtures", "train", "eval"] = "fixtures"
    """`fixtures`: the fixture dirs under `fixtures_dir`; `train` / `eval`: generated tasks,
    whose seeds never meet across the two splits."""
    fixtures_dir: str = Field(default_factory=default_fixtures_dir)
    """The fixtures split: every dir under it holding a fixture.json is a task."""
    num_tasks: int = Field(1000, ge=1, le=generated.MAX_TASKS)
    """A generated split: how many tasks it has."""
    seed: int = Field(0, ge=0)
    """A generated split: its seed (task i is the same under the same seed, split and knobs)."""
    min_shards: int = generated.Knobs().shards[0]
    """A generated split: the fewest shards a task has (2 at least)."""
    max_shards: int = generated.Knobs().shards[1]
    """A generated split: the most shards a task has (64 at most)."""
    fixture_kinds: list[str] = Field(default_factory=lambda: list(generated.Knobs().kinds))
    """A generated split: the fixture kinds tasks are drawn from (fixtures/generate.py)."""
    question_kinds: list[int] = Field(default_factory=lambda: list(generated.Knobs().questions))
    """A generated split: the question kinds shards cycle through, by number
    (docs/fixtures.md's table)."""
    min_records: int = generated.Knobs().records[0]
    """A generated split: the fewest records a shard has (40 at least)."""
    max_records: int = generated.Knobs().records[1]
    """A generated split: the most records a shard has (1000 at most)."""
    task: SwarmFanoutTaskConfig = SwarmFanoutTaskConfig()

    @model_validator(mode="after")
    def _knobs_in_range(self) -> SwarmFanoutConfig:
        generated.check_knobs(self.knobs)
        return self

    @property
    def knobs(self) -> generated.Knobs:
        return generated.Knobs(
            (self.min_shards, self.max_shards),
            tuple(self.fixture_kinds),
            tuple(self.question_kinds),
            (self.min_records, self.max_records),
        )


class Source(NamedTuple):
    """A task's fixture on this host: the scorer's Fixture, the files the runtime's repo
    gets, and the digest scoring checks."""

    fixture: Fixture
    files: dict[str, bytes]
    digest: str


def source_of(data: SwarmFanoutData) -> Source:
    """The task's fixture as it is now (raises NotTheModels when it cannot be had)."""
    if data.generation is not None:
        try:
            made = generated.generated(data.generation)
        except Exception as error:
            raise NotTheModels("generation_failed", f"{type(error).__name__}: {error}") from error
        return Source(made.fixture, made.files, made.digest)
    root = data.fixture_root or ""
    try:
        fixture = load_fixture(root)
    except FixtureError as error:
        raise NotTheModels(error.code, error.message) from error
    files = {}
    for path in repo_files(root):
        with open(os.path.join(root, path), "rb") as handle:
            files[path] = handle.read()
    return Source(fixture, files, fixture_digest(root))


class SwarmFanoutTask(Task[SwarmFanoutData, State, SwarmFanoutTaskConfig]):
    @property
    def key(self) -> str:
        """The fixture's name, or the generated task's split, seed and index: the data's
        content hash would hold this host's fixture path."""
        return self.data.id or self.hash

    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        source = self._source()
        for path, data in source.files.items():
            await runtime.write(path, data)
        for command in repo_commands(source.fixture.name):
            done = await runtime.run(command, REPO_GIT_ENV)
            if done.exit_code != 0:
                raise RuntimeError(f"git in the runtime failed: {done.stderr.strip()[-300:]}")

    async def finalize(self, trace: Trace, runtime: Runtime) -> None:
        trace.info[VERDICT_KEY] = record = {}
        source = self._source()
        layout = RuntimeLayout.from_json(trace.info.get(LAYOUT_KEY)) or await stock_layout(runtime)
        record["layout"] = layout.to_json()
        keep = self.config.keep_runs
        dest = os.path.join(keep, trace.id) if keep else tempfile.mkdtemp(prefix="swarm-fanout-")
        artifact = source.fixture.artifact
        try:
            os.makedirs(dest, exist_ok=bool(not keep))
            copied = await copy_out(runtime, layout, artifact, dest, self.config.max_copy_bytes)
            python = replay.kernel_python(None, os.environ, dest)
            record["replay"] = await asyncio.to_thread(
                replay.replay_step, dest, source.fixture, generate.twins, python
            )
            replayed = record["replay"]
            why_not = replayed.get("why_not") or ""
            if replayed.get("replayed") is False and not why_not.startswith("no sandbox"):
                raise NotTheModels("replay_failed", why_not)
            run = collect(dest, artifact)
        except CopyError as error:
            record.update(error=error.code, detail=str(error))
            raise NotTheModels(error.code, str(error)) from error
        finally:
            if not keep:
                shutil.rmtree(dest, ignore_errors=True)
        record["copied"] = copied.to_json()
        if keep:
            record["run_dir"] = os.path.realpath(dest)
        try:
            verdict = score(source.fixture, run, wall_time_s=_agent_seconds(trace))
        except Exception as error:
            record.update(error="scorer_failed", detail=f"{type(error).__name__}: {error}")
            raise NotTheModels("scorer_failed", f"{type(error).__name__}: {error}") from error
        record["verdict"] = verdict.to_json()
        # The rule runner.py applies: a run in which no model call was answered is the
        # agent's failure (bad credentials, a model the provider lacks), not the model's.
        end = AgentEnd(None, timed_out=bool(trace.is_timeout), interrupted=False, stderr_tail=None)
        judged = run_result(verdict.judged(baseline=False), run, end)
        record["status"] = judged.status
        if judged.status == "agent_error":
            first = judged.reasons[0]
            raise NotTheModels("agent_error", f"{first['code']}: {first['message']}")

    def _source(self) -> Source:
        source = source_of(self.data)
        if source.digest != self.data.fixture_digest:
            raise NotTheModels(
                "fixture_changed", f"task {self.key}'s fixture changed since it was loaded"
            )
        return source

    @reward
    async def verdict_reward(self, trace: Trace) -> dict[str, float]:
        """`resolved`: 1.0 exactly when the verdict resolves; or, when the task config asks
        for the shaped reward, `earned_shards`."""
        verdict = _verdict(trace)
        if self.config.reward == "earned_shards":
            return {"earned_shards": earned_fraction(verdict)}
        return {"resolved": 1.0 if verdict["resolved"] is True else 0.0}

    @metric
    async def verdict(self, trace: Trace) -> dict[str, float]:
        """The four criteria, the provenance and integrity counts, the fraction of shards
        earned, efficiency, and how many children were still outstanding when the prompt
        response came (local harness)."""
        return verdict_metrics(_verdict(trace), trace.info.get(ACP_KEY))


def _verdict(trace: Trace) -> dict:
    verdict = trace.info.get(VERDICT_KEY, {}).get("verdict")
    if not isinstance(verdict, dict):
        raise NotTheModels("no_verdict", "the rollout was not scored")
    return verdict


def earned_fraction(verdict: dict) -> float:
    """The fraction of shards whose answer was earned: covered (the index holds the right
    answer), delegated and derived (a child of its own worked it out: delegation `ok`) and
    received (its child's reply came back)."""
    rows = verdict["shards"]
    earned = sum(
        row["coverage"] == "correct" and row["delegation"] == "ok" and row["receipt"] == "reply"
        for row in rows
    )
    return earned / len(rows) if rows else 0.0


def verdict_metrics(verdict: dict, acp: object) -> dict[str, float]:
    metrics: dict[str, float] = {}
    if isinstance(acp, dict) and isinstance(acp.get("outstanding_at_response"), int):
        metrics["outstanding_at_response"] = float(acp["outstanding_at_response"])
    metrics["resolved"] = float(verdict["resolved"] is True)
    metrics["earned_shards"] = earned_fraction(verdict)
    for criterion in CRITERION_NAMES:
        metrics[criterion] = float(verdict[criterion] is True)
    codes = [item["code"] for item in verdict["reasons"]]
    metrics["provenance_failures"] = float(sum(code in PROVENANCE_CODES for code in codes))
    metrics["integrity_failures"] = float(
        sum(not check["passed"] for check in verdict["integrity"].values())
    )
    efficiency = verdict["efficiency"]
    metrics["children"] = float(efficiency["children"]["count"])
    metrics["total_turns"] = float(efficiency["total_turns"])
    metrics["total_tokens"] = float(efficiency["total_tokens"])
    if efficiency["wall_time_s"] is not None:
        metrics["wall_time_s"] = float(efficiency["wall_time_s"])
    return metrics


# The stock harness's agent dirs in its runtime (`<its state root>/<rollout>/agent`), each
# printed when its sessions name the runtime's working dir, where the rollout's session ran.
FIND_STOCK = (
    'cwd=$(pwd); echo "$cwd"; for d in "$1"/*/agent; do [ -d "$d" ] || continue; '
    'grep -rqsF -- ""$cwd"" "$d/sessions" && echo "$d"; done; exit 0'
)


async def stock_layout(runtime: Runtime) -> RuntimeLayout:
    """Where verifiers' own prime-agent harness kept this rollout's product state, found in
    the runtime: under its public state root, the agent dir whose sessions (its default
    `<agent dir>/sessions`, §2) ran in the runtime's working dir, the repo. Raises
    NotTheModels when there is not exactly one."""
    found = await runtime.run(["sh", "-c", FIND_STOCK, "sh", stock.STATE_ROOT], {})
    lines = found.stdout.strip().splitlines() if found.exit_code == 0 else []
    if len(lines) != 2:
        raise NotTheModels(
            "layout_not_found",
            f"{len(lines) - 1 if lines else 0} agent dirs under {stock.STATE_ROOT} hold a "
            "session in the runtime's working dir; one was expected",
        )
    cwd, agent_home = lines
    return RuntimeLayout(cwd, agent_home + "/sessions", agent_home)


def _agent_seconds(trace: Trace) -> float | None:
    span = trace.timing.agent
    return round(span.end - span.start, 3) if span.start and span.end else None


class SwarmFanoutTaskset(Taskset[SwarmFanoutTask, SwarmFanoutConfig]):
    def load(self) -> Iterator[SwarmFanoutTask]:
        if self.config.split == "fixtures":
            yield from self._fixture_dirs()
            return
        knobs, split, seed = self.config.knobs, self.config.split, self.config.seed
        for index in range(self.config.num_tasks):
            spec = generated.spec(split, seed, index, knobs)
            made = generated.generated(spec)
            key = f"{split}-{seed}-{index}"
            data = SwarmFanoutData(
                id=key,
                name=f"{key} {spec.kind} x{spec.shard_count}",
                prompt=made.fixture.task,
                generation=spec,
                fixture_digest=made.digest,
            )
            yield SwarmFanoutTask(data, self.config.task)

    def _fixture_dirs(self) -> Iterator[SwarmFanoutTask]:
        base = self.config.fixtures_dir
        for name in sorted(os.listdir(base)):
            root = os.path.join(base, name)
            if not os.path.isfile(os.path.join(root, MANIFEST)):
                continue
            fixture = load_fixture(root)
            data = SwarmFanoutData(
                id=fixture.name,
                name=fixture.name,
                prompt=fixture.task,
                fixture_root=os.path.realpath(root),
                fixture_digest=fixture_digest(root),
            )
            yield SwarmFanoutTask(data, self.config.task)
