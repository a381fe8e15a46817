"""`vf-eval` offline, end to end, as docs/verifiers.md runs it: the scripted endpoint in echo
mode on a loopback port, the simulated agent over ACP through verifiers' own ACP client and
interception, the local harness in the subprocess runtime. Also: that page's module map
names every module of the package."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from scripted.model import ScriptedModelServer

REPO = Path(__file__).resolve().parents[3]
PACKAGE = REPO / "verifiers-taskset"
PAGE = REPO / "docs" / "verifiers.md"
VF_EVAL_TIMEOUT_S = 1200  # a deadline for a stuck run, not a measure: no test asserts on time


def vf_eval() -> str:
    beside = Path(sys.executable).parent / "vf-eval"
    return str(beside) if beside.exists() else shutil.which("vf-eval") or "vf-eval"


class VfEvalTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="sf-vf-eval-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.server = ScriptedModelServer(os.path.join(self.tmp, "model.jsonl"), echo=True)
        self.server.start()
        self.addCleanup(self.server.stop)

    def evaluate(self, behaviour: str) -> dict:
        """One rollout (the first fixture) of `simulated/<behaviour>`: its trace."""
        out = os.path.join(self.tmp, behaviour)
        argv = [vf_eval(), "swarm-fanout", "-m", f"simulated/{behaviour}", "-n", "1"]
        argv += ["--client.base-url", self.server.base_url]
        argv += ["--env.agent.runtime.type", "subprocess", "--env.agent.harness.id", "swarm-fanout"]
        argv += ["--env.agent.harness.agent-bin", str(REPO / "simulated" / "agent.py")]
        argv += ["--env.agent.harness.provider", "simulated", "--no-push", "--no-rich", "-o", out]
        done = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, timeout=VF_EVAL_TIMEOUT_S
        )
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        (traces,) = Path(out).glob("*/traces.jsonl")
        (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
        (trace,) = episode["traces"]
        self.assertEqual(trace["errors"], [])
        cleanup = trace["info"]["swarm_fanout_cleanup"]
        self.assertEqual(cleanup["leaked_pids"], [])
        self.assertTrue(cleanup["removed"])
        return trace

    def test_an_honest_fan_out_scores_one(self):
        trace = self.evaluate("oracle")
        self.assertEqual(trace["rewards"]["resolved"]["score"], 1.0)
        self.assertEqual(trace["metrics"]["outstanding_at_response"], 0.0)
        self.assertTrue(trace["info"]["swarm_fanout"]["verdict"]["resolved"])

    def test_a_parent_that_ends_its_turn_early_loses_its_children_and_scores_zero(self):
        trace = self.evaluate("end-turn-early")
        self.assertEqual(trace["rewards"]["resolved"]["score"], 0.0)
        self.assertEqual(trace["metrics"]["outstanding_at_response"], 8.0)
        codes = {item["code"] for item in trace["info"]["swarm_fanout"]["verdict"]["reasons"]}
        self.assertEqual(codes, {"artifact_missing", "missing_receipt"})


class PageTest(unittest.TestCase):
    def test_the_page_names_every_module_of_the_package(self):
        named = set(re.findall(r"^\| `(verifiers-taskset/[^`]+\.py)` \|", PAGE.read_text(), re.M))
        modules = {
            str(path.relative_to(REPO))
            for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and ".egg-info" not in str(path)
        }
        self.assertEqual(named, modules)


if __name__ == "__main__":
    unittest.main()
