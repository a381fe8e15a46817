"""Regrading a stored run (scorer.py on a run dir): the verdict bytes of result.json, baselines,
a changed fixture, a deleted or edited witness, a run set.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import unittest
from unittest import mock

from swarm_fanout.shell import regrade
from tests import runner_server, temp_dir
from tests.runner_case import CSV_METRICS, SIMULATED, two_shard_fixture


class RegradeTest(unittest.TestCase):
    """`scorer.py RUN_DIR` regrades a stored run as the runner scored it. The runs: trial 1
    of a run set of 3 on a copy of json-events of two shards (so the fixture can change), its
    trial 3 (trial 2 never runs), and a baseline."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = temp_dir(cls)
        cls.fixture = os.path.join(cls.tmp, "fixture")
        shutil.copytree(two_shard_fixture(), cls.fixture)
        cls.set_dir = os.path.join(cls.tmp, "set")
        cls.result, cls.stderr = cls.run_trial(cls.set_dir, "--trials", "3")
        cls.third, _ = cls.run_trial(cls.set_dir, index=3)
        baseline_set = os.path.join(cls.tmp, "baseline")
        cls.baseline, _ = cls.run_trial(baseline_set, "--trials", "1", "--baseline")

    @classmethod
    def run_trial(cls, set_dir: str, *extra: str, index: int = 1) -> tuple[dict, str]:
        config = os.path.join(cls.tmp, "agent-config")
        os.makedirs(config, exist_ok=True)
        argv = ["--fixture", cls.fixture, "--agent-bin", SIMULATED]
        argv += ["--model", "simulated/oracle", "--agent-config", config]
        argv += ["--run-set", set_dir, "--trial-index", str(index), *extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_AGENT_")}
        done = runner_server.run(argv, cwd=cls.tmp, env=env, timeout=120)
        return json.loads(done.stdout), done.stderr.decode()

    def regrade(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = regrade.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def restored_afterwards(self, path: str) -> None:
        with open(path, "rb") as handle:
            original = handle.read()

        def restore() -> None:
            with open(path, "wb") as handle:
                handle.write(original)

        self.addCleanup(restore)

    def reason_codes(self, verdict_text: str) -> list[str]:
        return [item["code"] for item in json.loads(verdict_text)["reasons"]]

    def test_a_regrade_without_fixture_gives_the_verdict_bytes_of_result_json(self):
        code, out, err = self.regrade(self.result["run_dir"])
        self.assertEqual(code, 0)
        # Wall time included: the regrade takes it from result.json.
        self.assertEqual(out, json.dumps(self.result["verdict"], indent=2) + "\n")
        self.assertIn("resolved (exit 0); the same verdict as result.json's", err)

    def test_a_baseline_trial_regrades_as_a_baseline(self):
        code, out, err = self.regrade(self.baseline["run_dir"])
        self.assertEqual(code, 0)
        self.assertFalse(json.loads(out)["resolved"])  # no delegation, as it was told
        self.assertIn("resolved (exit 0); baseline, judged on coverage", err)

    def test_a_changed_fixture_is_refused_unless_forced(self):
        shard = os.path.join(self.fixture, "shards", "events-01.jsonl")
        self.restored_afterwards(shard)
        with open(shard, "ab") as handle:
            handle.write(b"\n")
        code, out, err = self.regrade(self.result["run_dir"])
        self.assertEqual(code, 2)
        self.assertEqual(json.loads(out)["error"], "fixture_changed")
        self.assertIn("is not the one the run used", err)
        self.assertIn("pass --force", err)
        code, out, err = self.regrade("--force", self.result["run_dir"])
        self.assertEqual(code, 0)
        self.assertIn("scored against it (--force)", err)

    def test_a_fixture_given_is_held_against_the_runs_digest_too(self):
        code, _, _ = self.regrade("--fixture", two_shard_fixture(), self.result["run_dir"])
        self.assertEqual(code, 0)  # the same files as the run's copy: the same digest
        code, out, _ = self.regrade("--fixture", CSV_METRICS, self.result["run_dir"])
        self.assertEqual((code, json.loads(out)["error"]), (2, "fixture_changed"))

    def test_a_deleted_witness_fails_on_regrade(self):
        witness = os.path.join(self.result["run_dir"], "witness.jsonl")
        os.rename(witness, witness + ".away")
        self.addCleanup(os.rename, witness + ".away", witness)
        code, out, err = self.regrade(self.result["run_dir"])
        self.assertEqual(code, 1)
        self.assertIn("witness_missing", self.reason_codes(out))
        self.assertIn("NOT result.json's verdict", err)

    def test_a_run_set_dir_regrades_every_trial(self):
        code, out, err = self.regrade(self.set_dir)
        table = json.loads(out)
        self.assertEqual((code, table["exit_code"]), (1, 1))  # trial 2 never ran
        scored = {"status": "scored", "resolved": True, "exit_code": 0, "verdict_unchanged": True}
        self.assertEqual(
            table["trials"],
            [
                {"index": 1, "dir": "trial-1", **scored},
                {"index": 2, "dir": None, "status": "not_run"},
                {"index": 3, "dir": "trial-3", **scored},
            ],
        )
        self.assertIn("scorer.py: trial-1: resolved (exit 0)", err)
        self.assertIn("scorer.py: trial-3: resolved (exit 0)", err)

    def test_a_run_set_regrades_every_trial_in_order(self):
        witness = os.path.join(self.third["run_dir"], "witness.jsonl")
        self.restored_afterwards(witness)
        with open(witness, "ab") as handle:
            handle.write(b'{"kind":"sighting"}\n')
        code, out, err = self.regrade(self.set_dir)
        self.assertEqual(code, 1)
        rows = [(row["status"], row.get("verdict_unchanged")) for row in json.loads(out)["trials"]]
        self.assertEqual(rows, [("scored", True), ("not_run", None), ("scored", False)])
        lines = [line for line in err.splitlines() if line.startswith("scorer.py: trial-")]
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].startswith("scorer.py: trial-1: resolved (exit 0)"), lines)
        self.assertIn("scorer.py: trial-3: NOT resolved (exit 1)", lines[1])
        self.assertIn("witness_tampered", lines[1])

    def test_a_trial_refused_in_a_run_set_refuses_it_by_name(self):
        result_path = os.path.join(self.third["run_dir"], "result.json")
        self.restored_afterwards(result_path)
        with open(result_path, "w", encoding="utf-8") as handle:
            json.dump({**self.third, "fixture": {"path": os.path.join(self.tmp, "gone")}}, handle)
        code, out, err = self.regrade(self.set_dir)
        record = json.loads(out)
        self.assertEqual(
            (code, record["error"], record["code"]), (2, "invalid_fixture", "fixture_not_found")
        )
        self.assertTrue(record["detail"].startswith("trial-3: "), record["detail"])
        self.assertIn("scorer.py: trial-1: resolved (exit 0)", err)
        self.assertIn("scorer.py: trial-3: ", err)

    def test_ctrl_c_stops_a_regrade_with_exit_130_and_says_so(self):
        with mock.patch.object(regrade, "collect", side_effect=KeyboardInterrupt):
            code, out, err = self.regrade(self.result["run_dir"])
        self.assertEqual((code, json.loads(out)["error"]), (130, "interrupted"))
        self.assertIn("scorer.py: interrupted; nothing was written", err)

    def test_a_run_whose_agent_never_ran_has_nothing_to_regrade(self):
        run_dir = os.path.join(self.tmp, "never-ran")
        os.mkdir(run_dir)
        self.addCleanup(shutil.rmtree, run_dir)
        result = {
            "status": "agent_not_run",
            "fixture": self.result["fixture"],
            "reasons": [{"code": "model_proxy_unavailable", "message": "no upstream"}],
        }
        with open(os.path.join(run_dir, "result.json"), "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        code, out, err = self.regrade(run_dir)
        self.assertEqual((code, json.loads(out)["error"]), (3, "agent_not_run"))
        self.assertIn("the agent never ran: model_proxy_unavailable: no upstream", err)

    def test_a_trials_progress_and_verdict_lines_name_it(self):
        progress = r"runner\.py: trial 1/3: finished after \d+s of 1800s: 2 spawns, 2 replies"
        self.assertRegex(self.stderr, progress)
        last = self.stderr.splitlines()[-1]
        self.assertTrue(last.startswith("runner.py: trial 1/3: resolved (exit 0); "), last)
        self.assertNotIn("report.py", self.stderr, "a resolved run needs no next step")


if __name__ == "__main__":
    unittest.main()
