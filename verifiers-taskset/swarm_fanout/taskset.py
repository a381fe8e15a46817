"""The fixtures as a verifiers v1 taskset, scored by the harness's own scorer.

One task per fixture dir: its prompt is task.txt; `setup` writes the fixture's other files
(the shards) into the runtime's working dir and commits them, as shell/rundir.py makes a
run's repo; fixture.json, which holds the answers, stays on this host. After the agent's
session closes, `finalize` copies what the product wrote out of the runtime (copyout.py),
replays each replying child's cells in a sandbox where bwrap runs (shell/replay.py, as the
runner does; docs/rubric.md "Provenance"), and scores the copy with `scorer.score`, the code
`scorer.py` runs: the verdict JSON goes into
`trace.info["swarm_fanout"]`, the reward is 1.0 exactly when it resolves, and the metrics
are read from it. There is no witness inside a verifiers rollout, so every verdict carries
the warning `unwitnessed` (docs/witness.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator

from pydantic import Field
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

import fixtures
from evidence.artifacts import collect
from evidence.fixture import MANIFEST, TASK, FixtureError, fixture_digest, load_fixture
from fixtures import generate
from rules.provenance import PROVENANCE_RULES
from scorer import CRITERION_NAMES, score
from shell import replay
from swarm_fanout.copyout import CopyError, RuntimeLayout, copy_out

# Where the local harness records the rollout's layout (harness.py), and where the verdict goes.
LAYOUT_KEY = "swarm_fanout_layout"
VERDICT_KEY = "swarm_fanout"
# Where the local harness records what the prompt response said of the children (harness.py).
ACP_KEY = "swarm_fanout_acp"
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "swarm-fanout",
    "GIT_AUTHOR_EMAIL": "swarm-fanout@invalid",
    "GIT_COMMITTER_NAME": "swarm-fanout",
    "GIT_COMMITTER_EMAIL": "swarm-fanout@invalid",
}
COMMIT = (
    "set -e; git -c init.defaultBranch=main init -q; git add -A; "
    'git -c commit.gpgsign=false commit -q -m "fixture $1"'
)
PROVENANCE_CODES = frozenset(code for code, _, _ in PROVENANCE_RULES)


def default_fixtures_dir() -> str:
    """The fixtures that ship with the harness."""
    return os.path.dirname(os.path.abspath(fixtures.__file__))


class SwarmFanoutData(TaskData):
    fixture_root: str
    """The fixture dir on this host: its shards go into the runtime, its answers never do."""
    fixture_digest: str
    """fixture.json's and the shards' digest when the task was loaded; scoring refuses a
    fixture that changed since (evidence/fixture.py)."""


class SwarmFanoutTaskConfig(TaskConfig):
    keep_runs: str | None = None
    """Keep each rollout's copied-out run dir under this dir, as `<trace id>/`, to regrade
    (`scorer.py DIR --fixture F`) or read (`report.py DIR`); default: removed once scored."""


class SwarmFanoutConfig(TasksetConfig):
    fixtures_dir: str = Field(default_factory=default_fixtures_dir)
    """Every dir under it holding a fixture.json is a task (default: the harness's own)."""
    task: SwarmFanoutTaskConfig = SwarmFanoutTaskConfig()


class SwarmFanoutTask(Task[SwarmFanoutData, State, SwarmFanoutTaskConfig]):
    @property
    def key(self) -> str:
        """The fixture's name: the data's content hash holds this host's fixture path."""
        return self.data.id or self.hash

    async def setup(self, trace: Trace, runtime: Runtime) -> None:
        root = self.data.fixture_root
        for path in _fixture_files(root):
            with open(os.path.join(root, path), "rb") as handle:
                await runtime.write(path, handle.read())
        name = os.path.basename(root)
        done = await runtime.run(["sh", "-c", COMMIT, "sh", name], GIT_ENV)
        if done.exit_code != 0:
            raise RuntimeError(f"git in the runtime failed: {done.stderr.strip()[-300:]}")

    async def finalize(self, trace: Trace, runtime: Runtime) -> None:
        trace.info[VERDICT_KEY] = await self._scored(trace, runtime)

    async def _scored(self, trace: Trace, runtime: Runtime) -> dict:
        try:
            fixture = load_fixture(self.data.fixture_root)
            if fixture_digest(fixture.root) != self.data.fixture_digest:
                return {"error": "fixture_changed", "detail": f"{fixture.root} changed"}
        except FixtureError as error:
            return {"error": error.code, "detail": error.message}
        layout = RuntimeLayout.from_json(trace.info.get(LAYOUT_KEY)) or await stock_layout(
            trace, runtime
        )
        keep = self.config.keep_runs
        dest = os.path.join(keep, trace.id) if keep else tempfile.mkdtemp(prefix="swarm-fanout-")
        try:
            os.makedirs(dest, exist_ok=bool(not keep))
            copied = await copy_out(runtime, layout, fixture.artifact, dest)
            python = replay.kernel_python(None, os.environ, dest)
            replayed = await asyncio.to_thread(
                replay.replay_step, dest, fixture, generate.twins, python
            )
            run = collect(dest, fixture.artifact)
        except CopyError as error:
            return {"error": error.code, "detail": str(error), "layout": layout.to_json()}
        finally:
            if not keep:
                shutil.rmtree(dest, ignore_errors=True)
        verdict = score(fixture, run, wall_time_s=_agent_seconds(trace))
        record = {
            "verdict": verdict.to_json(),
            "layout": layout.to_json(),
            "copied": copied.to_json(),
            "replay": replayed,
        }
        if keep:
            record["run_dir"] = os.path.realpath(dest)
        return record

    @reward
    async def resolved(self, trace: Trace) -> float:
        """1.0 exactly when the harness's verdict resolves."""
        verdict = trace.info.get(VERDICT_KEY, {}).get("verdict")
        return 1.0 if isinstance(verdict, dict) and verdict.get("resolved") is True else 0.0

    @metric
    async def verdict(self, trace: Trace) -> dict[str, float]:
        """The four criteria, the provenance and integrity counts, efficiency, and how many
        children were still outstanding when the prompt response came (local harness)."""
        return verdict_metrics(trace.info.get(VERDICT_KEY, {}), trace.info.get(ACP_KEY))


def verdict_metrics(record: dict, acp: object) -> dict[str, float]:
    verdict = record.get("verdict")
    metrics: dict[str, float] = {"scored": float(isinstance(verdict, dict))}
    if isinstance(acp, dict) and isinstance(acp.get("outstanding_at_response"), int):
        metrics["outstanding_at_response"] = float(acp["outstanding_at_response"])
    if not isinstance(verdict, dict):
        return metrics
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


async def stock_layout(trace: Trace, runtime: Runtime) -> RuntimeLayout:
    """Where verifiers' own prime-agent harness keeps a rollout's product state: agent dir
    `<root>/agent`, sessions in its default `<agent dir>/sessions` (§2), the repo in the
    runtime's working dir, where its ACP client opens the session."""
    from verifiers.v1.harnesses.prime_agent.harness import PrimeAgentHarness

    agent_home = PrimeAgentHarness._root(trace) + "/agent"
    cwd = await runtime.run(["pwd"], {})
    return RuntimeLayout(cwd.stdout.strip(), agent_home + "/sessions", agent_home)


def _agent_seconds(trace: Trace) -> float | None:
    span = trace.timing.agent
    return round(span.end - span.start, 3) if span.start and span.end else None


def _fixture_files(root: str) -> list[str]:
    """The fixture's files as the runner copies them into a run's repo: all but its
    manifest, its prompt and any .git (shell/rundir.py)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if name != ".git")
        for filename in sorted(filenames):
            path = os.path.relpath(os.path.join(dirpath, filename), root)
            if path not in (MANIFEST, TASK):
                found.append(path)
    return found


class SwarmFanoutTaskset(Taskset[SwarmFanoutTask, SwarmFanoutConfig]):
    def load(self) -> Iterator[SwarmFanoutTask]:
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
