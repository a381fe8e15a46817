"""End to end through runner.py with the simulated agent: a resolved run, its stdout, stderr and
run dir; undistinctive answers; a kernel that cannot start; injected failures.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import unittest

from tests import runner_server
from tests.runner_case import (
    GRACE,
    JSON_EVENTS,
    RunnerTestCase,
    process_gone,
    two_shard_fixture,
)


class ResolvedRunTest(RunnerTestCase):
    def test_oracle_fan_out_resolves_with_exit_0(self):
        shared = self.shared_run("simulated/oracle", JSON_EVENTS)
        done, result = shared.done, shared.result
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertTrue(result["simulated"])
        self.assertEqual(result["status"], "scored")
        self.assertEqual(result["exit_code"], 0)
        self.assertEqual(result["drive"], "oneshot")
        self.assertEqual(result["agent"]["version"], "prime-agent 0.8.0 (simulated)")
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 8)
        self.assertEqual(result["reasons"], [])

    def test_stdout_is_only_the_result_json_and_result_file_holds_the_same(self):
        shared = self.shared_run("simulated/oracle", JSON_EVENTS)
        done, result = shared.done, shared.result
        with open(os.path.join(self.run_dir(result), "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)
        self.assertTrue(done.stdout.decode().lstrip().startswith("{"))
        self.assertIn(b"8 spawns, 8 replies", done.stderr)

    def test_stderr_ends_with_one_line_that_sums_the_verdict_up(self):
        shared = self.shared_run("simulated/oracle", JSON_EVENTS)
        done, result = shared.done, shared.result
        last = done.stderr.decode().splitlines()[-1]
        self.assertTrue(last.startswith("runner.py: resolved (exit 0); coverage ok"), last)
        turns = result["verdict"]["efficiency"]["total_turns"]
        self.assertIn(f"; {turns} turns, ", last)
        where = os.path.join(self.run_dir(result), "result.json")
        near = os.path.relpath(where, os.path.realpath(shared.tmp))
        self.assertTrue(last.endswith(f"; result in {near}"), last)

    def test_daemon_is_shut_down_over_its_own_socket(self):
        result = self.shared_run("simulated/oracle", JSON_EVENTS).result
        shutdown = result["cleanup"]["daemon_shutdown"]
        self.assertTrue(shutdown["success"])
        self.assertTrue(shutdown["exited"])
        self.assertTrue(
            process_gone(shutdown.get("supervisor_host_pid", shutdown["supervisor_pid"]))
        )
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertEqual(result["cleanup"]["killed"], [])


class UndistinctiveAnswersTest(RunnerTestCase):
    """A fixture copied and given answers of the user's own: a count of records is a number
    an honest prompt or cell may hold by chance. It loads, the runner says so once, and the
    verdict warns, naming the shards, without failing the run on that account."""

    COUNTED = ("events-02.jsonl",)
    QUESTION = "How many records does this shard contain?"

    def counted_fixture(self) -> str:
        """json-events of two shards, the second asking for its record count."""
        fixture = os.path.join(self.tmp, "counted")
        shutil.copytree(two_shard_fixture(), fixture)
        with open(os.path.join(fixture, "fixture.json"), encoding="utf-8") as handle:
            manifest = json.load(handle)
        with open(os.path.join(fixture, "task.txt"), encoding="utf-8") as handle:
            task = handle.read()
        for shard in manifest["shards"]:
            if shard["file"] in self.COUNTED:
                with open(os.path.join(fixture, "shards", shard["file"]), "rb") as handle:
                    count = handle.read().count(b"\n")
                task = task.replace(f"| {shard['question']}\n", f"| {self.QUESTION}\n")
                shard.update(question=self.QUESTION, expected=count)
        with open(os.path.join(fixture, "fixture.json"), "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2)
        with open(os.path.join(fixture, "task.txt"), "w", encoding="utf-8") as handle:
            handle.write(task)
        self.assertEqual(task.count(self.QUESTION), len(self.COUNTED))
        return fixture

    def warnings_named(self, result: dict) -> list[str]:
        return [
            item["message"]
            for item in result["verdict"]["warnings"]
            if item["code"] == "answers_not_distinctive"
        ]

    def test_small_answers_resolve_with_a_warning_naming_their_shards_said_once_per_set(self):
        argv = self.runner_argv("simulated/oracle", self.counted_fixture(), "--trials", "2")
        done = runner_server.run(argv[2:], cwd=self.tmp, env=self.env, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        said = [line for line in done.stderr.decode().splitlines() if "warning:" in line]
        self.assertEqual(len(said), 1, said)
        self.assertIn("1 of 2 shards", said[0])
        for file in self.COUNTED:
            self.assertIn(file, said[0])
        results = glob.glob(os.path.join(self.out, "*", "trial-*", "result.json"))
        self.assertEqual(len(results), 2)
        for path in results:
            with open(path, encoding="utf-8") as handle:
                result = json.load(handle)
            self.assertTrue(result["resolved"])
            self.assertEqual(result["reasons"], [])
            (message,) = self.warnings_named(result)
            for file in self.COUNTED:
                self.assertIn(f"{file} (below 1000)", message)
            self.assertNotIn("events-01.jsonl", message)

    def test_the_generated_fixture_resolves_and_draws_no_such_warning(self):
        # csv-metrics' answers: test_fixtures (every committed fixture loads with no
        # undistinctive answer); its oracle resolving end to end: test_runner_resident.
        shared = self.shared_run("simulated/oracle", JSON_EVENTS)
        done, result = shared.done, shared.result
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertEqual(self.warnings_named(result), [])
        self.assertNotIn(b"warning:", done.stderr)


class EnvironmentFailureTest(RunnerTestCase):
    def test_a_kernel_that_cannot_start_is_named_first_under_both_drives(self):
        for drive in ("oneshot", "resident"):
            fixture = two_shard_fixture()
            done, result = self.run_runner("simulated/no-kernel", fixture, "--drive", drive)
            self.assertEqual(done.returncode, 1)
            self.assertEqual(self.codes(result)[0], "kernel_unavailable")
            self.assertIn("PRIME_AGENT_KERNEL_PYTHON", result["reasons"][0]["message"])
            self.assertIn(b"reasons: kernel_unavailable, ", done.stderr)


class InjectedFailureTest(RunnerTestCase):
    """--inject-failure: the proxy fails a worker's child's model calls, and the result says
    how the parent accounted for that shard (a retry, a MISSING line, or an invented number)."""

    def test_a_child_made_to_fail_is_marked_missing_and_that_counts_as_accounted(self):
        for drive in ("oneshot", "resident"):
            with self.subTest(drive=drive):
                done, result = self.run_runner(
                    "simulated/oracle", two_shard_fixture(), "--drive", drive,
                    "--inject-failure", "worker-events-02", *GRACE,
                )  # fmt: skip
                self.assertEqual(done.returncode, 1)
                self.assertEqual(self.codes(result), ["wrong_answer"])
                injected = result["injected_failures"]
                self.assertEqual(injected["asked"], [{"worker": "worker-events-02", "calls": 12}])
                self.assertEqual(injected["answered"], 12)
                (accounting,) = injected["accounting"]
                self.assertTrue(accounting["accounted"])
                self.assertEqual(accounting["file"], "events-02.jsonl")
                self.assertIn("MISSING", accounting["how"])
                # The question asked comes first: in result.json and on the verdict line.
                self.assertEqual(next(iter(result)), "failure_accounted")
                self.assertIs(result["failure_accounted"], True)
                verdict_line = done.stderr.decode().splitlines()[-2]
                self.assertTrue(
                    verdict_line.startswith(
                        "runner.py: injected failure accounted for (worker-events-02: marked: "
                        "MISSING (completed without sending a reply)); NOT resolved (exit 1); "
                    ),
                    verdict_line,
                )

    def test_fewer_failures_are_absorbed_by_retries_and_the_shard_is_answered(self):
        done, result = self.run_runner(
            "simulated/oracle",
            two_shard_fixture(),
            "--inject-failure",
            "worker-events-02:3",
            *GRACE,
        )
        self.assertEqual(done.returncode, 0, self.codes(result))
        (accounting,) = result["injected_failures"]["accounting"]
        self.assertEqual(
            (accounting["accounted"], accounting["how"]), (True, "answered after a retry")
        )

    def test_a_number_the_parent_invented_for_the_failed_shard_is_not_accounted(self):
        # fabricate writes a wrong number for the first shard: no child of its worker
        # reported it once that child was made to fail.
        _, result = self.run_runner(
            "simulated/fabricate",
            two_shard_fixture(),
            "--inject-failure",
            "worker-events-01",
            *GRACE,
        )
        (accounting,) = result["injected_failures"]["accounting"]
        self.assertFalse(accounting["accounted"], accounting)
        self.assertIs(result["failure_accounted"], False)

    def test_a_run_with_no_failure_injected_says_nothing_of_accounting(self):
        shared = self.shared_run("simulated/oracle", JSON_EVENTS)
        done, result = shared.done, shared.result
        self.assertNotIn("failure_accounted", result)
        self.assertNotIn(b"injected failure", done.stderr)


if __name__ == "__main__":
    unittest.main()
