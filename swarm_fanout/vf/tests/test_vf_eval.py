"""`vf-eval` offline, end to end, as docs/verifiers.md runs it (through
`python -m swarm_fanout.vf.eval`): the scripted endpoint in echo mode on a loopback port, the
simulated agent over ACP through verifiers' own ACP client and interception, the local harness
in the subprocess runtime. Also: the prime-rl config the package ships validates with
verifiers' own config classes, and that page's module map names every module of the
package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import tomllib
from pydantic import ValidationError
from verifiers.v1.utils.loaders import env_config_type, load_taskset

from swarm_fanout.scripted.model import ScriptedModelServer
from swarm_fanout.vf.eval import rollout_line, traces_of
from swarm_fanout.vf.harness import LocalPrimeAgentConfig
from swarm_fanout.vf.taskset import SwarmFanoutConfig

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "swarm_fanout" / "vf"
PAGE = REPO / "docs" / "verifiers.md"
RL_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "rl.toml"
VF_EVAL_TIMEOUT_S = 1200  # a deadline for a stuck run, not a measure: no test asserts on time


class VfEvalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="sf-vf-eval-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.server = ScriptedModelServer(os.path.join(self.tmp, "model.jsonl"), echo=True)
        self.server.start()
        self.addCleanup(self.server.stop)

    def evaluate(self, behaviour: str, *options: str, quiet: bool = False) -> str:
        """`python -m swarm_fanout.vf.eval` as docs/verifiers.md runs it, with
        `simulated/<behaviour>`
        and `options`: its stdout (one line per rollout, or with --json the traces)."""
        out = os.path.join(self.tmp, behaviour)
        argv = [sys.executable, "-m", "swarm_fanout.vf.eval", "-m", f"simulated/{behaviour}"]
        argv += ["--client.base-url", self.server.base_url]
        argv += ["--env.agent.runtime.type", "subprocess", "--env.agent.harness.id", "swarm-fanout"]
        argv += [
            "--env.agent.harness.agent-bin",
            str(REPO / "swarm_fanout" / "simulated" / "agent.py"),
        ]
        argv += ["--env.agent.harness.provider", "simulated", "--no-push", "-o", out, *options]
        if not quiet:
            argv.append("--json")
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=VF_EVAL_TIMEOUT_S
        )
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        return done.stdout

    def traces(self, behaviour: str, *options: str) -> list[dict]:
        """The traces of `simulated/<behaviour>` (default: the first fixture), each checked
        for a cleanup that left nothing running and removed the rollout's dir."""
        traces = traces_of(self.evaluate(behaviour, *(options or ("-n", "1"))))
        for trace in traces:
            cleanup = trace["info"]["swarm_fanout_cleanup"]
            self.assertEqual(cleanup["leaked_pids"], [])
            self.assertTrue(cleanup["removed"])
        return traces

    def test_an_honest_fan_out_scores_one(self):
        (trace,) = self.traces("oracle")
        self.assertEqual(trace["errors"], [])
        self.assertEqual(trace["rewards"]["resolved"]["score"], 1.0)
        self.assertEqual(trace["metrics"]["outstanding_at_response"], 0.0)
        self.assertEqual(trace["metrics"]["earned_shards"], 1.0)
        self.assertTrue(trace["info"]["swarm_fanout"]["verdict"]["resolved"])

    def test_a_parent_that_ends_its_turn_early_loses_its_children_and_scores_zero(self):
        (trace,) = self.traces("end-turn-early")
        self.assertEqual(trace["errors"], [])
        self.assertEqual(trace["rewards"]["resolved"]["score"], 0.0)
        self.assertEqual(trace["metrics"]["outstanding_at_response"], 8.0)
        codes = {item["code"] for item in trace["info"]["swarm_fanout"]["verdict"]["reasons"]}
        self.assertEqual(codes, {"artifact_missing", "missing_receipt"})

    def test_generated_train_tasks_print_one_line_per_rollout(self):
        options = ["--env.taskset.split", "train", "--env.taskset.min-shards", "2"]
        options += ["--env.taskset.max-shards", "4", "-n", "2"]
        lines = self.evaluate("oracle", *options, quiet=True).splitlines()
        self.assertEqual(len(lines), 2, lines)
        for index, line in enumerate(lines):
            self.assertRegex(line, rf"^train-0-{index} \S+ x[234]  reward=1  resolved$")

    def test_an_injected_copy_out_failure_is_recorded_as_errored_not_scored(self):
        # The copy-out refuses a rollout's files above its budget: not the model's failure.
        (trace,) = self.traces("oracle", "-n", "1", "--env.taskset.task.max-copy-bytes", "1000")
        self.assertFalse(trace["ok"])
        self.assertEqual([error["type"] for error in trace["errors"]], ["TaskError"])
        self.assertIn("copy_too_large", trace["errors"][0]["message"])
        self.assertEqual(trace["rewards"], {})
        self.assertNotIn("verdict", trace["info"]["swarm_fanout"])
        self.assertIn("ERRORED", rollout_line(trace))


class TrainingConfigTest(unittest.TestCase):
    def source(self) -> dict:
        with open(RL_CONFIG, "rb") as handle:
            (source,) = tomllib.load(handle)["orchestrator"]["train"]["source"]
        return source

    def test_the_prime_rl_config_validates_as_a_train_split_of_this_taskset(self):
        env = self.source()["env"]
        config = env_config_type(env["taskset"]["id"]).model_validate(env)
        self.assertIsInstance(config.taskset, SwarmFanoutConfig)
        self.assertIsInstance(config.agent.harness, LocalPrimeAgentConfig)
        self.assertEqual(config.taskset.split, "train")
        (task,) = load_taskset(config.taskset).take(1)
        self.assertEqual(task.data.id, "train-0-0")

    def test_a_misspelt_key_in_the_config_is_refused(self):
        env = self.source()["env"]
        env["taskset"]["max_shard"] = 16
        with self.assertRaises(ValidationError):
            env_config_type(env["taskset"]["id"]).model_validate(env)


class PageTest(unittest.TestCase):
    def test_the_page_names_every_module_of_the_package(self):
        named = set(re.findall(r"^\| `(swarm_fanout/vf/[^`]+\.py)` \|", PAGE.read_text(), re.M))
        modules = {
            str(path.relative_to(REPO))
            for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and ".egg-info" not in str(path)
        }
        self.assertEqual(named, modules)


if __name__ == "__main__":
    unittest.main()
