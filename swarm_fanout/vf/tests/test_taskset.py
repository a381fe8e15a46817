"""The taskset without vf-eval: its tasks, their setup, the verdict on a copy of what the
product left in a runtime (the same verdict as on the run dir itself), the reward and metrics
read from it, and the local harness's isolation and cleanup. The simulated agent plays the
product, one-shot, in the layout the local harness gives a rollout."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

from verifiers.v1.acp import ACPTurn
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

from swarm_fanout import ledger
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_fixture
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.scorer import score
from swarm_fanout.shell import procs, sandbox
from swarm_fanout.vf import copyout
from swarm_fanout.vf.copyout import CopyError, RuntimeLayout, copy_out
from swarm_fanout.vf.harness import (
    MARKER,
    LocalPrimeAgentConfig,
    LocalPrimeAgentHarness,
    end_rollout,
)
from swarm_fanout.vf.taskset import (
    ACP_KEY,
    LAYOUT_KEY,
    VERDICT_KEY,
    NotTheModels,
    SwarmFanoutConfig,
    SwarmFanoutTaskset,
)

REPO = Path(__file__).resolve().parents[3]
AGENT = REPO / "swarm_fanout" / "simulated" / "agent.py"
FIXTURES = REPO / "fixtures"
PRIME = "ai.primeintellect.prime-agent"


def run(coroutine):
    return asyncio.run(coroutine)


def tasks(**config) -> dict:
    """The taskset's tasks by name (the committed fixtures unless `config` says otherwise)."""
    taskset = SwarmFanoutTaskset(SwarmFanoutConfig(id="swarm-fanout", **config))
    return {task.data.name: task for task in taskset}


def reward_of(task, trace) -> dict:
    return run(task.verdict_reward(trace))


def fake_trace(trace_id: str = "t-1") -> SimpleNamespace:
    """What the task's hooks read of a verifiers Trace: its id, info, agent timing and
    whether a stage timed out."""
    agent = SimpleNamespace(start=100.0, end=112.5)
    return SimpleNamespace(
        id=trace_id, info={}, timing=SimpleNamespace(agent=agent), is_timeout=False
    )


class RolloutCase(unittest.TestCase):
    """A runtime working dir and a rollout dir laid out as the local harness lays one out."""

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="sf-vf-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.runtime = SubprocessRuntime(SubprocessConfig())
        self.runtime.workdir = Path(self.tmp) / "work"
        self.runtime.workdir.mkdir()
        self.paths = RunPaths.of(tempfile.mkdtemp(prefix="sf-vf-", dir="/tmp"))
        self.addCleanup(end_rollout, self.paths.root)
        for path in (self.paths.agent_home, self.paths.sessions, self.paths.home, self.paths.tmp):
            os.makedirs(path)
        self.harness = LocalPrimeAgentHarness(LocalPrimeAgentConfig(id="swarm-fanout"))

    def play(self, behaviour: str, cwd: str, prompt: str) -> None:
        """The simulated agent, one-shot, with the environment the local harness gives."""
        env = {**os.environ, **self.harness._env_of(self.paths)}
        argv = [sys.executable, str(AGENT), "--mode", "json", "--daemon-socket"]
        argv += [self.paths.socket, "--model", f"simulated/{behaviour}", "--", prompt]
        done = subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=300
        )
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])

    def rollout(self, behaviour: str, fixture: str = "json-events", task=None) -> tuple:
        """A task set up in the runtime, played, and finalized: (task, trace)."""
        task, trace = self.played(behaviour, task or tasks()[fixture])
        run(task.finalize(trace, self.runtime))
        return task, trace

    def played(self, behaviour: str | None, task) -> tuple:
        """A task set up in the runtime and played (None: the agent never ran), not yet
        finalized: (task, trace)."""
        trace = fake_trace()
        run(task.setup(trace, self.runtime))
        if behaviour is not None:
            self.play(behaviour, str(self.runtime.workdir), task.data.prompt)
        layout = RuntimeLayout(
            str(self.runtime.workdir), self.paths.sessions, self.paths.agent_home
        )
        trace.info[LAYOUT_KEY] = layout.to_json()
        return task, trace


class TasksTest(unittest.TestCase):
    def test_the_tasks_are_the_fixtures_with_task_txt_as_the_prompt(self):
        found = tasks()
        self.assertEqual(sorted(found), ["csv-metrics", "json-events"])
        for name, task in found.items():
            self.assertEqual(task.data.prompt, (FIXTURES / name / "task.txt").read_text())
            self.assertEqual(task.key, name)

    def test_no_answer_of_fixture_json_is_in_the_task_data(self):
        for name, task in tasks().items():
            dumped = json.dumps(task.data.model_dump(mode="json"))
            for shard in load_fixture(str(FIXTURES / name)).shards:
                self.assertNotIn(str(shard.expected), dumped, f"{name}: {shard.file}")


class SetupTest(RolloutCase):
    def test_setup_writes_the_shards_and_commits_them_but_not_the_manifest_or_prompt(self):
        task = tasks()["json-events"]
        run(task.setup(fake_trace(), self.runtime))
        work = self.runtime.workdir
        shards = sorted(path.name for path in (work / "shards").iterdir())
        self.assertEqual(
            shards, sorted(p.name for p in (FIXTURES / "json-events" / "shards").iterdir())
        )
        self.assertFalse((work / "fixture.json").exists())
        self.assertFalse((work / "task.txt").exists())
        log = subprocess.run(
            ["git", "log", "--format=%s"], cwd=work, capture_output=True, text=True, check=True
        )
        self.assertEqual(log.stdout, "fixture json-events\n")


class SameVerdictTest(RolloutCase):
    """A copy out of the runtime is scored as the run dir it was copied from."""

    def in_place_and_copied(self, behaviour: str) -> tuple[dict, dict]:
        fixture = load_fixture(str(FIXTURES / "json-events"))
        shutil.copytree(
            str(FIXTURES / "json-events" / "shards"), os.path.join(self.paths.repo, "shards")
        )
        self.play(behaviour, self.paths.repo, fixture.task)
        in_place = score(fixture, collect(self.paths.root, fixture.artifact)).to_json()
        dest = os.path.join(self.tmp, "copy")
        os.mkdir(dest)
        layout = RuntimeLayout(self.paths.repo, self.paths.sessions, self.paths.agent_home)
        run(copy_out(self.runtime, layout, fixture.artifact, dest))
        copied = score(fixture, collect(dest, fixture.artifact)).to_json()
        # The one difference: the ledger's name is the key of the sessions dir it sits beside.
        for verdict, paths in ((in_place, self.paths), (copied, RunPaths.of(dest))):
            for item in verdict["evidence"]["ledgers"]:
                self.assertEqual(
                    os.path.join(paths.root, item.pop("path")),
                    ledger.ledger_path(paths.agent_home, paths.sessions),
                )
        return in_place, copied

    def test_an_honest_fan_out_resolves_in_place_and_copied(self):
        in_place, copied = self.in_place_and_copied("oracle")
        self.assertTrue(in_place["resolved"])
        self.assertEqual(copied, in_place)

    def test_a_child_told_its_answer_fails_provenance_in_place_and_copied(self):
        in_place, copied = self.in_place_and_copied("answer-in-task")
        self.assertIn("answer_known_before_spawn", [r["code"] for r in in_place["reasons"]])
        self.assertEqual(copied, in_place)


class RewardTest(RolloutCase):
    def test_an_honest_fan_out_earns_reward_one_with_every_criterion_met(self):
        task, trace = self.rollout("oracle")
        self.assertEqual(reward_of(task, trace), {"resolved": 1.0})
        metrics = run(task.verdict(trace))
        for criterion in ("coverage", "delegation_evidence", "dedup", "receipts"):
            self.assertEqual(metrics[criterion], 1.0, criterion)
        self.assertEqual(metrics["provenance_failures"], 0.0)
        self.assertEqual(metrics["integrity_failures"], 0.0)
        self.assertEqual(metrics["children"], 8.0)
        self.assertEqual(metrics["wall_time_s"], 12.5)
        verdict = trace.info[VERDICT_KEY]["verdict"]
        # Replayed where bwrap runs (shell/replay.py), and said where it does not.
        replayed = trace.info[VERDICT_KEY]["replay"]["replayed"]
        self.assertEqual(replayed, sandbox.availability().usable)
        expected = ["unwitnessed"] + ([] if replayed else ["not_replayed"])
        self.assertEqual([w["code"] for w in verdict["warnings"]], expected)

    def test_a_parent_that_answers_every_shard_itself_earns_zero(self):
        task, trace = self.rollout("no-spawn")
        self.assertEqual(reward_of(task, trace), {"resolved": 0.0})
        metrics = run(task.verdict(trace))
        self.assertEqual(metrics["delegation_evidence"], 0.0)
        self.assertEqual(metrics["children"], 0.0)

    def test_children_told_their_answers_earn_zero_with_a_provenance_failure_each(self):
        task, trace = self.rollout("answer-in-task")
        self.assertEqual(reward_of(task, trace), {"resolved": 0.0})
        self.assertEqual(run(task.verdict(trace))["provenance_failures"], 8.0)

    def test_a_forged_ledger_earns_zero_on_integrity(self):
        task, trace = self.rollout("forge-ledger")
        self.assertEqual(reward_of(task, trace), {"resolved": 0.0})
        self.assertGreater(run(task.verdict(trace))["integrity_failures"], 0.0)

    def test_without_the_local_harness_the_stock_harness_layout_is_scored(self):
        # Where verifiers' prime-agent harness keeps the product's state: an agent dir under
        # a dir of its own below its state root, sessions in the agent dir's default place.
        from verifiers.v1.harnesses.prime_agent.harness import STATE_ROOT

        task, trace = tasks()["json-events"], fake_trace(f"stock-{os.getpid()}")
        os.makedirs(STATE_ROOT, exist_ok=True)
        root = tempfile.mkdtemp(dir=STATE_ROOT)
        self.addCleanup(end_rollout, root)
        agent_home = os.path.join(root, "agent")
        os.makedirs(agent_home)
        # Another rollout's agent dir beside it, whose session ran elsewhere.
        other = tempfile.mkdtemp(dir=STATE_ROOT)
        self.addCleanup(shutil.rmtree, other, True)
        os.makedirs(os.path.join(other, "agent", "sessions"))
        with open(os.path.join(other, "agent", "sessions", "s.jsonl"), "w") as handle:
            handle.write('{"type":"session","cwd":"/elsewhere"}\n')
        run(task.setup(trace, self.runtime))
        env = {**os.environ, MARKER: agent_home, "HOME": self.paths.home, "TMPDIR": self.paths.tmp}
        env.pop("PRIME_AGENT_SESSION_DIR", None)
        argv = [sys.executable, str(AGENT), "--mode", "json", "--daemon-socket", self.paths.socket]
        argv += ["--model", "simulated/oracle", "--", task.data.prompt]
        done = subprocess.run(
            argv, cwd=self.runtime.workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True
        )
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        run(task.finalize(trace, self.runtime))
        self.assertEqual(trace.info[VERDICT_KEY]["layout"]["agent_home"], agent_home)
        self.assertEqual(reward_of(task, trace), {"resolved": 1.0})

    def test_a_copy_too_large_raises_by_name_and_is_never_rewarded(self):
        task = tasks()["json-events"]
        task.config.max_copy_bytes = 1000
        self.addCleanup(setattr, task.config, "max_copy_bytes", copyout.MAX_COPY_BYTES)
        task, trace = self.played("oracle", task)
        with self.assertRaises(NotTheModels) as caught:
            run(task.finalize(trace, self.runtime))
        self.assertEqual(caught.exception.code, "copy_too_large")
        self.assertEqual(trace.info[VERDICT_KEY]["error"], "copy_too_large")
        with self.assertRaises(NotTheModels):
            reward_of(task, trace)

    def test_a_runtime_the_copy_cannot_read_raises_copy_failed(self):
        task, trace = self.played("oracle", tasks()["json-events"])
        os.chmod(self.paths.sessions, 0)
        self.addCleanup(os.chmod, self.paths.sessions, 0o700)
        if os.access(self.paths.sessions, os.R_OK):
            self.skipTest("running as a user who reads any dir")
        with self.assertRaises(NotTheModels) as caught:
            run(task.finalize(trace, self.runtime))
        self.assertEqual(caught.exception.code, "copy_failed")

    def test_a_fixture_changed_since_loading_raises_fixture_changed(self):
        copy = os.path.join(self.tmp, "fixtures", "json-events")
        shutil.copytree(FIXTURES / "json-events", copy)
        (task,) = tasks(fixtures_dir=os.path.dirname(copy)).values()
        task, trace = self.played("oracle", task)
        with open(os.path.join(copy, "fixture.json"), "a") as handle:
            handle.write("\n")
        with self.assertRaises(NotTheModels) as caught:
            run(task.finalize(trace, self.runtime))
        self.assertEqual(caught.exception.code, "fixture_changed")

    def test_a_scorer_that_fails_raises_scorer_failed(self):
        from swarm_fanout.vf import taskset

        def broken(*args, **kwargs):
            raise KeyError("a scorer bug")

        original = taskset.score
        taskset.score = broken
        self.addCleanup(setattr, taskset, "score", original)
        task, trace = self.played("oracle", tasks()["json-events"])
        with self.assertRaises(NotTheModels) as caught:
            run(task.finalize(trace, self.runtime))
        self.assertEqual(caught.exception.code, "scorer_failed")

    def test_an_agent_that_never_got_a_model_answer_raises_agent_error(self):
        task, trace = self.played(None, tasks()["json-events"])
        with self.assertRaises(NotTheModels) as caught:
            run(task.finalize(trace, self.runtime))
        self.assertEqual(caught.exception.code, "agent_error")
        self.assertEqual(trace.info[VERDICT_KEY]["status"], "agent_error")

    def test_a_parent_that_answers_everything_itself_is_scored_not_an_agent_error(self):
        _, trace = self.rollout("no-spawn")
        self.assertEqual(trace.info[VERDICT_KEY]["status"], "scored")

    def test_the_shaped_reward_is_the_fraction_of_shards_earned(self):
        task = tasks()["json-events"]
        task.config.reward = "earned_shards"
        self.addCleanup(setattr, task.config, "reward", "resolved")
        task, trace = self.rollout("fabricate", task=task)
        # The first shard's answer in the index is wrong: 7 of 8 earned, not resolved.
        self.assertEqual(reward_of(task, trace), {"earned_shards": 7 / 8})
        metrics = run(task.verdict(trace))
        self.assertEqual((metrics["resolved"], metrics["earned_shards"]), (0.0, 7 / 8))

    def test_children_told_their_answers_earn_no_shard(self):
        task, trace = self.rollout("answer-in-task")
        self.assertEqual(run(task.verdict(trace))["earned_shards"], 0.0)

    def test_a_run_kept_under_keep_runs_regrades_with_scorer_py(self):
        task, trace = self.rollout("oracle")
        keep = os.path.join(self.tmp, "kept")
        task.config.keep_runs = keep
        self.addCleanup(setattr, task.config, "keep_runs", None)
        run(task.finalize(trace, self.runtime))
        run_dir = trace.info[VERDICT_KEY]["run_dir"]
        self.assertEqual(run_dir, os.path.realpath(os.path.join(keep, trace.id)))
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "scorer.py"),
                run_dir,
                "--fixture",
                str(FIXTURES / "json-events"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        # A copied run keeps no result.json, so the regrade knows no wall time.
        regraded, kept = json.loads(done.stdout), trace.info[VERDICT_KEY]["verdict"]
        self.assertEqual(kept["efficiency"].pop("wall_time_s"), 12.5)
        self.assertIsNone(regraded["efficiency"].pop("wall_time_s"))
        self.assertEqual(regraded, kept)


class CopyOutTest(RolloutCase):
    def test_a_link_out_of_the_copy_is_skipped_and_named(self):
        os.symlink("/etc/passwd", os.path.join(self.paths.sessions, "stolen.jsonl"))
        layout = RuntimeLayout(
            str(self.runtime.workdir), self.paths.sessions, self.paths.agent_home
        )
        dest = os.path.join(self.tmp, "copy")
        os.mkdir(dest)
        copied = run(copy_out(self.runtime, layout, "combined-index.md", dest))
        self.assertEqual(len(copied.skipped), 1)
        self.assertIn("stolen.jsonl", copied.skipped[0])
        self.assertFalse(os.path.lexists(os.path.join(dest, "sessions", "stolen.jsonl")))

    def test_a_sessions_dir_the_runtime_cannot_tar_is_a_named_copy_error(self):
        os.chmod(self.paths.sessions, 0)
        self.addCleanup(os.chmod, self.paths.sessions, 0o700)
        if os.access(self.paths.sessions, os.R_OK):
            self.skipTest("running as a user who reads any dir")
        layout = RuntimeLayout(
            str(self.runtime.workdir), self.paths.sessions, self.paths.agent_home
        )
        with self.assertRaises(CopyError) as caught:
            run(copy_out(self.runtime, layout, "combined-index.md", os.path.join(self.tmp, "c")))
        self.assertEqual(caught.exception.code, "copy_failed")

    def test_the_ledger_is_renamed_to_the_key_of_the_copys_sessions_dir(self):
        self.play("oracle", str(self.runtime.workdir), tasks()["json-events"].data.prompt)
        layout = RuntimeLayout(
            str(self.runtime.workdir), self.paths.sessions, self.paths.agent_home
        )
        dest = os.path.realpath(os.path.join(self.tmp, "copy"))
        os.mkdir(dest)
        run(copy_out(self.runtime, layout, "combined-index.md", dest))
        copied = RunPaths.of(dest)
        expected = ledger.ledger_path(copied.agent_home, copied.sessions)
        self.assertEqual(os.listdir(os.path.dirname(expected)), [os.path.basename(expected)])
        with open(expected, encoding="utf-8") as handle:
            text = handle.read()
        self.assertNotIn(self.paths.root, text)
        self.assertIn(copied.sessions, text)


class LocalHarnessTest(RolloutCase):
    def test_the_products_home_agent_dir_sessions_and_tmp_are_the_rollouts_own(self):
        env = self.harness._env_of(self.paths)
        for key in ("HOME", "TMPDIR", MARKER, "PRIME_AGENT_SESSION_DIR"):
            self.assertTrue(env[key].startswith(self.paths.root + os.sep), key)

    def test_cleanup_ends_the_detached_daemon_and_removes_the_rollout_dir(self):
        self.play("oracle", str(self.runtime.workdir), tasks()["json-events"].data.prompt)
        self.assertTrue(
            procs.with_environment(MARKER, self.paths.agent_home, procs.process_table())
        )
        report = end_rollout(self.paths.root)
        self.assertTrue(report["daemon_shutdown"]["success"])
        self.assertEqual(report["leaked_pids"], [])
        self.assertTrue(report["removed"])
        self.assertFalse(
            procs.with_environment(MARKER, self.paths.agent_home, procs.process_table())
        )

    def test_cleanup_ends_a_stray_that_ignores_sigterm(self):
        env = {**os.environ, MARKER: self.paths.agent_home}
        code = (
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print(1, flush=True)\n"
            "time.sleep(600)\n"
        )
        stray = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
        self.addCleanup(stray.stdout.close)
        self.addCleanup(stray.kill)
        stray.stdout.readline()  # SIGTERM is ignored from here on
        report = end_rollout(self.paths.root)
        self.assertIn(stray.pid, report["terminated"])
        self.assertEqual(report["leaked_pids"], [])
        self.assertIsNotNone(stray.wait(timeout=30))

    def test_a_runtime_other_than_this_hosts_is_refused(self):
        container = SimpleNamespace(type="docker")
        with self.assertRaises(RuntimeError) as caught:
            run(self.harness.setup(container))
        self.assertIn("--env.agent.runtime.type subprocess", str(caught.exception))

    def test_outstanding_at_response_is_the_quiescence_after_the_response_boundary(self):
        quiescence = {"outstandingSubagents": 8, "remainingAutonomousContinuations": 0}
        updates = [
            {PRIME: {"promptTurnId": 1, "eventSequence": 7, "phase": "event"}},
            {PRIME: {"promptTurnId": 1, "eventSequence": 8, "phase": "responseBoundary"}},
            {PRIME: {"promptTurnId": 1, "eventSequence": 9, "phase": "event",
                     "quiescence": quiescence}},
        ]  # fmt: skip
        trace = fake_trace()
        self.harness.acp_turn_result(trace, ACPTurn(reply="done", update_metadata=updates))
        self.assertEqual(trace.info[ACP_KEY]["outstanding_at_response"], 8)
        self.assertFalse(trace.info[ACP_KEY]["terminal_quiescence_seen"])

    def test_a_turn_without_a_response_boundary_records_no_count(self):
        trace = fake_trace()
        self.harness.acp_turn_result(trace, ACPTurn(reply="", update_metadata=[]))
        self.assertNotIn(ACP_KEY, trace.info)


if __name__ == "__main__":
    unittest.main()
