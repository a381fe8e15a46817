"""End to end through runner.py with the simulated agent: verdicts, exit codes, hygiene."""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import runner
from evidence.artifacts import collect
from evidence.witness import Witness
from rules import triage
from scripted import check as scripted
from scripted.model import SCRIPTS
from shell import launch, procs, regrade, rundir
from shell.watch import Progress
from tests.builders import RunBuilder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(ROOT, "runner.py")
SIMULATED = os.path.join(ROOT, "simulated", "agent.py")
JSON_EVENTS = os.path.join(ROOT, "fixtures", "json-events")
CSV_METRICS = os.path.join(ROOT, "fixtures", "csv-metrics")
# What the simulated agent logs its daemon's pid as, per drive: the one-shot CLI's detached
# supervisor, or the resident drive's foreground daemon (the runner's own child).
DAEMON_LOGGED_AS = {"oneshot": "supervisor", "resident": "daemon"}
# --grace for the runs that leave a process behind which never exits on its own (it ignores
# SIGTERM, or a daemon never answers): the run waits out the whole grace, once after the
# daemon's shutdown and once between SIGTERM and SIGKILL, so the tests keep it short. A
# daemon still gets 0.5 s to answer shutdown: the one that never answers costs that.
GRACE = ("--grace", "0.1")


def process_gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for its new parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def logged_pids(run_dir: str, what: str) -> list[int]:
    with open(os.path.join(run_dir, "stderr.txt"), encoding="utf-8", errors="replace") as handle:
        return [int(pid) for pid in re.findall(rf"{what} pid=(\d+)", handle.read())]


def host_pid(result: dict, logged: int) -> int:
    """A pid the agent logged, as the runner sees it: in a sandbox the agent logs its pid in
    there, and the cleanup record maps the run's processes' pids here to those."""
    inside = result["cleanup"].get("sandbox_pids")
    if inside is None:
        return logged
    (pid,) = [int(host) for host, ns in inside.items() if ns == logged]
    return pid


def live_host_pid(runner_pid: int, logged: int) -> int:
    """The same while the run runs: the runner's descendant that has the logged pid in its
    sandbox (unsandboxed, the logged pid itself)."""
    below = procs.descendants(runner_pid, procs.process_table())
    found = [pid for pid in below if procs.namespace_pid(pid) == logged]
    return found[0] if found else logged


def logged_host_pids(result: dict, what: str) -> list[int]:
    return [host_pid(result, pid) for pid in logged_pids(result["run_dir"], what)]


class RunnerTestCase(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.out = os.path.join(self.tmp, "runs")
        # The user's real agent dir is never read: credentials come from here.
        self.agent_config = os.path.join(self.tmp, "agent-config")
        os.mkdir(self.agent_config)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_AGENT_")}

    def runner_argv(self, model: str, fixture: str = JSON_EVENTS, *extra: str) -> list[str]:
        return [
            sys.executable,
            RUNNER,
            "--fixture",
            fixture,
            "--agent-bin",
            SIMULATED,
            "--model",
            model,
            "--out",
            self.out,
            "--agent-config",
            self.agent_config,
            *extra,
        ]

    def run_runner(self, model: str, fixture: str = JSON_EVENTS, *extra: str):
        done = subprocess.run(
            self.runner_argv(model, fixture, *extra),
            cwd=self.tmp,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
        )
        result = json.loads(done.stdout)
        return done, result

    def run_dir(self, result: dict) -> str:
        return result["run_dir"]

    def codes(self, result: dict) -> list[str]:
        return [item["code"] for item in result["reasons"]]


class ResolvedRunTest(RunnerTestCase):
    def test_oracle_fan_out_resolves_with_exit_0(self):
        done, result = self.run_runner("simulated/oracle")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertTrue(result["simulated"])
        self.assertEqual(result["status"], "scored")
        self.assertEqual(result["exit_code"], 0)
        self.assertEqual(result["drive"], "oneshot")
        self.assertEqual(result["agent"]["version"], "prime-agent 0.8.0 (simulated)")
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 8)
        self.assertEqual(result["reasons"], [])

    def test_csv_fixture_resolves_too(self):
        done, result = self.run_runner("simulated/oracle", CSV_METRICS)
        self.assertEqual(done.returncode, 0)
        self.assertTrue(result["resolved"])

    def test_stdout_is_only_the_result_json_and_result_file_holds_the_same(self):
        done, result = self.run_runner("simulated/oracle")
        with open(os.path.join(self.run_dir(result), "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)
        self.assertTrue(done.stdout.decode().lstrip().startswith("{"))
        self.assertIn(b"8 spawns, 8 replies", done.stderr)

    def test_stderr_ends_with_one_line_that_sums_the_verdict_up(self):
        done, result = self.run_runner("simulated/oracle")
        last = done.stderr.decode().splitlines()[-1]
        self.assertTrue(last.startswith("runner.py: resolved (exit 0); coverage ok"), last)
        turns = result["verdict"]["efficiency"]["total_turns"]
        self.assertIn(f"; {turns} model calls, ", last)
        where = os.path.join(self.run_dir(result), "result.json")
        near = os.path.relpath(where, os.path.realpath(self.tmp))
        self.assertTrue(last.endswith(f"; result in {near}"), last)

    def test_daemon_is_shut_down_over_its_own_socket(self):
        _, result = self.run_runner("simulated/oracle")
        shutdown = result["cleanup"]["daemon_shutdown"]
        self.assertTrue(shutdown["success"])
        self.assertTrue(shutdown["exited"])
        self.assertTrue(
            process_gone(shutdown.get("supervisor_host_pid", shutdown["supervisor_pid"]))
        )
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertEqual(result["cleanup"]["killed"], [])

    def test_run_dir_is_an_isolated_copy_of_the_fixture_in_a_fresh_git_repo(self):
        with open(os.path.join(self.agent_config, "models.json"), "w") as handle:
            handle.write('{"providers": {}}\n')
        with open(os.path.join(self.agent_config, "settings.json"), "w") as handle:
            handle.write("{}\n")
        _, result = self.run_runner("simulated/oracle")
        run = self.run_dir(result)
        repo = os.path.join(run, "repo")
        self.assertEqual(sorted(os.listdir(repo)), [".git", "combined-index.md", "shards"])
        log = subprocess.run(
            ["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True, check=True
        )
        self.assertEqual(len(log.stdout.splitlines()), 1)
        home = os.path.join(run, "agent-home")
        self.assertTrue(os.path.exists(os.path.join(home, "models.json")))
        self.assertFalse(os.path.exists(os.path.join(home, "settings.json")))
        self.assertEqual(os.stat(os.path.join(home, "auth.json")).st_mode & 0o777, 0o600)
        for name in ("sessions", "session-artifacts", "home", "stdout.jsonl", "stderr.txt"):
            self.assertTrue(os.path.exists(os.path.join(run, name)), name)

    def test_every_run_gets_a_new_run_dir(self):
        _, first = self.run_runner("simulated/oracle")
        _, second = self.run_runner("simulated/oracle")
        self.assertNotEqual(self.run_dir(first), self.run_dir(second))
        self.assertEqual(len(os.listdir(self.out)), 2)


class CheatTest(RunnerTestCase):
    def assert_unresolved(self, model: str, expected_codes: list[str]) -> dict:
        done, result = self.run_runner(model)
        self.assertEqual(done.returncode, 1, done.stderr.decode())
        self.assertFalse(result["resolved"])
        self.assertEqual(result["status"], "scored")
        self.assertEqual(sorted(set(self.codes(result))), sorted(expected_codes))
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        summary = done.stderr.decode().splitlines()[-1]
        self.assertIn("NOT resolved (exit 1)", summary)
        for code in expected_codes:
            self.assertIn(code, summary)
        return result

    def test_agent_that_does_nothing_fails(self):
        self.assert_unresolved("simulated/nop", ["artifact_missing", "no_spawn"])

    def test_parent_that_answers_itself_fails_delegation(self):
        result = self.assert_unresolved("simulated/no-spawn", ["no_spawn"])
        self.assertTrue(result["verdict"]["coverage"])

    def test_double_spawn_fails_dedup(self):
        result = self.assert_unresolved("simulated/double-spawn", ["duplicate_spawn"])
        self.assertEqual(result["verdict"]["details"]["duplicate_spawns"], 8)

    def test_fabricated_answer_fails_coverage(self):
        # The parent wrote a number no child reported: wrong, and unsourced.
        result = self.assert_unresolved("simulated/fabricate", ["unsourced_answer", "wrong_answer"])
        self.assertEqual(list(result["verdict"]["details"]["wrong_answers"]), ["events-01.jsonl"])

    def test_silently_dropped_child_fails_receipts(self):
        # The parent filled the silent child's line itself: no receipt, no source.
        result = self.assert_unresolved(
            "simulated/silent-drop", ["missing_receipt", "unsourced_answer"]
        )
        self.assertEqual(len(result["verdict"]["details"]["children_without_receipt"]), 1)

    def assert_forged(self, model: str, expected_codes: list[str], failed: dict) -> dict:
        """A forgery of delegation: the index is right, delegation fails on the integrity
        checks `failed` names, each with its number of failures (one per worker)."""
        result = self.assert_unresolved(model, expected_codes)
        verdict = result["verdict"]
        self.assertTrue(verdict["coverage"])
        self.assertFalse(verdict["delegation_evidence"])
        counts = {name: check["count"] for name, check in verdict["integrity"].items()}
        self.assertEqual({name: n for name, n in counts.items() if n}, failed)
        return result

    def test_parent_that_forges_ledger_dirs_and_replies_fails_integrity(self):
        # No real spawn: the forger's child transcripts hold a header and the task only (no
        # model call), their display files name a spawning cell that never ran, and the
        # replies it appended to itself have no receipt in any child. Header times, task ids,
        # ledger lines and display names are consistent, so those checks pass; with no child
        # call there is no usage to attribute either.
        self.assert_forged(
            "simulated/forge-ledger",
            [
                *("answer_not_derived", "child_did_no_work", "spawn_code_unmatched"),
                # The stream shows the forging cell but no child it claims to spawn.
                *("stream_mismatch", "unsent_reply"),
            ],
            {"child_work": 8, "spawn_code": 8, "reply_receipts": 8},
        )

    def test_children_that_reply_junk_fail_provenance(self):
        # A real fan-out, but every reply is `<file>: done`: the right answers in the index
        # come from no child. Every record is the product's own, so integrity holds.
        result = self.assert_forged("simulated/junk-replies", ["unsourced_answer"], {})
        self.assertTrue(result["verdict"]["receipts"])

    def test_children_that_never_work_fail_integrity(self):
        # Real spawns whose transcripts end at the task; the parent replied in their names.
        self.assert_forged(
            "simulated/zero-work-children",
            ["answer_not_derived", "child_did_no_work", "unsent_reply"],
            {"child_work": 8, "reply_receipts": 8},
        )


class ProvenanceTest(RunnerTestCase):
    """A shard counts only if its worker's child worked the answer out and the parent learned
    it from that child (scorer.PROVENANCE_RULES). Every record of these runs is the product's
    own, so integrity holds; the index is right, so coverage holds."""

    def assert_provenance(self, behaviour: str, codes: list[str], statuses: list[str]) -> None:
        """Under both drives: exactly `codes` (resolved when there are none), and each
        shard's delegation status in fixture order."""
        for drive in ("oneshot", "resident"):
            with self.subTest(drive=drive):
                model = "simulated/" + behaviour
                done, result = self.run_runner(model, JSON_EVENTS, "--drive", drive)
                self.assertEqual(done.returncode, 1 if codes else 0, done.stderr.decode())
                self.assertIs(result["resolved"], not codes)
                self.assertEqual(sorted(set(self.codes(result))), codes)
                verdict = result["verdict"]
                self.assertEqual([row["delegation"] for row in verdict["shards"]], statuses)
                self.assertTrue(verdict["coverage"])
                failed = [name for name, check in verdict["integrity"].items() if check["count"]]
                self.assertEqual(failed, [])
                self.assertEqual(result["cleanup"]["leaked_processes"], 0)
                if behaviour in SCRIPTS:
                    # The scripted model plays the same cheat to the real product and
                    # expects the verdict the simulated agent earns here.
                    check = scripted.contract_check(behaviour, drive, result)
                    self.assertEqual(check["differences"], [])

    def test_parent_that_tells_each_child_its_answer_fails_provenance(self):
        # The parent counted every shard first and wrote the answer into each child's task.
        self.assert_provenance(
            "answer-in-task", ["answer_known_before_spawn"], ["known_before_spawn"] * 8
        )

    def test_children_that_send_a_number_typed_into_their_cell_fail_provenance(self):
        self.assert_provenance("literal-send", ["answer_not_derived"], ["not_derived"] * 8)

    def test_index_written_before_the_children_reply_fails_provenance(self):
        # The children worked every answer out, but the final index predates their replies.
        self.assert_provenance(
            "early-index", ["answer_written_before_reply"], ["written_before_reply"] * 8
        )

    def test_answers_passed_on_between_siblings_fail_for_the_siblings_that_passed_them(self):
        # The first shard's child worked out every answer: its own shard stays ok.
        self.assert_provenance(
            "sibling-forward", ["answer_not_derived"], ["ok"] + ["not_derived"] * 7
        )

    def test_child_that_sends_without_printing_still_resolves(self):
        # Its cell's text is the receipt; the number is in the result's sent messages.
        self.assert_provenance("count-and-send", [], ["ok"] * 8)

    def test_child_that_peeks_at_shards_before_answering_still_resolves(self):
        self.assert_provenance("peek-first", [], ["ok"] * 8)


class UndistinctiveAnswersTest(RunnerTestCase):
    """A fixture copied and given answers of the user's own: a count of records is a number
    an honest prompt or cell may hold by chance. It loads, the runner says so once, and the
    verdict warns, naming the shards, without failing the run on that account."""

    COUNTED = ("events-02.jsonl", "events-05.jsonl")
    QUESTION = "How many records does this shard contain?"

    def counted_fixture(self) -> str:
        """json-events with shards 2 and 5 asking for their record count."""
        fixture = os.path.join(self.tmp, "counted")
        shutil.copytree(JSON_EVENTS, fixture)
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

    def test_a_fixture_with_small_answers_resolves_with_a_warning_naming_its_shards(self):
        done, result = self.run_runner("simulated/oracle", self.counted_fixture())
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertEqual(result["reasons"], [])
        (message,) = self.warnings_named(result)
        for file in self.COUNTED:
            self.assertIn(f"{file} (below 1000)", message)
        self.assertNotIn("events-01.jsonl", message)
        said = [line for line in done.stderr.decode().splitlines() if "warning:" in line]
        self.assertEqual(len(said), 1, said)
        self.assertIn("2 of 8 shards", said[0])
        for file in self.COUNTED:
            self.assertIn(file, said[0])

    def test_a_run_set_says_it_once_and_every_trial_verdict_warns(self):
        argv = self.runner_argv("simulated/oracle", self.counted_fixture(), "--trials", "2")
        done = subprocess.run(
            argv, cwd=self.tmp, env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
            timeout=120,
        )  # fmt: skip
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        said = [line for line in done.stderr.decode().splitlines() if "warning:" in line]
        self.assertEqual(len(said), 1, said)
        results = glob.glob(os.path.join(self.out, "*", "trial-*", "result.json"))
        self.assertEqual(len(results), 2)
        for path in results:
            with open(path, encoding="utf-8") as handle:
                self.assertEqual(len(self.warnings_named(json.load(handle))), 1)

    def test_the_generated_fixtures_draw_no_such_warning(self):
        for fixture in (JSON_EVENTS, CSV_METRICS):
            with self.subTest(fixture=os.path.basename(fixture)):
                done, result = self.run_runner("simulated/oracle", fixture)
                self.assertEqual(done.returncode, 0, done.stderr.decode())
                self.assertEqual(self.warnings_named(result), [])
                self.assertNotIn(b"warning:", done.stderr)


class EnvironmentFailureTest(RunnerTestCase):
    def test_a_kernel_that_cannot_start_is_named_first_under_both_drives(self):
        for drive in ("oneshot", "resident"):
            done, result = self.run_runner("simulated/no-kernel", JSON_EVENTS, "--drive", drive)
            self.assertEqual(done.returncode, 1)
            self.assertEqual(self.codes(result)[0], "kernel_unavailable")
            self.assertIn("PRIME_AGENT_KERNEL_PYTHON", result["reasons"][0]["message"])
            self.assertIn(b"reasons: kernel_unavailable, ", done.stderr)


NO_KEY = "Error: No API key found for anthropic."


class AgentErrorTest(RunnerTestCase):
    """An agent that fails on its own before the model answers anything is an agent error:
    exit 3 in its own words, not the model's failure (rules/triage.py)."""

    def failing_agent(self) -> str:
        """An agent that exits 1 at once, as the product does without credentials."""
        agent = os.path.join(self.tmp, "failing-agent")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write(f"#!/bin/sh\necho '{NO_KEY}' >&2\nexit 1\n")
        os.chmod(agent, 0o755)
        return agent

    def run_failing_agent(self) -> tuple[subprocess.CompletedProcess, dict]:
        argv = self.runner_argv("anthropic/claude-sonnet-4-5")
        argv[argv.index(SIMULATED)] = self.failing_agent()
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
        return done, json.loads(done.stdout)

    def test_an_agent_that_exits_1_at_once_is_an_agent_error_in_its_own_words(self):
        done, result = self.run_failing_agent()
        self.assertEqual((done.returncode, result["exit_code"]), (3, 3))
        self.assertEqual((result["status"], result["resolved"]), ("agent_error", False))
        message = f"the agent exited 1 before any model call was answered: {NO_KEY}"
        self.assertEqual(result["reasons"], [{"code": "agent_exited", "message": message}])
        self.assertEqual(result["agent"]["first_error"], NO_KEY)
        # What it left is still scored and kept, apart from the result's reasons.
        self.assertIn("parent_transcript_missing", self.codes(result["verdict"]))
        last = done.stderr.decode().splitlines()[-1]
        self.assertTrue(last.startswith("runner.py: agent error (exit 3): agent_exited: "), last)
        self.assertIn(NO_KEY, last)

    def test_a_misspelt_simulated_model_is_an_agent_error(self):
        done, result = self.run_runner("simulated/orcale")
        self.assertEqual((done.returncode, result["status"]), (3, "agent_error"))
        self.assertEqual(self.codes(result), ["agent_exited"])
        self.assertIn('unknown model "simulated/orcale"', result["reasons"][0]["message"])
        self.assertIn(b"agent_exited: the agent exited 1 before any model call", done.stderr)

    def test_a_regrade_of_an_agent_error_exits_3_with_the_verdict_of_its_result(self):
        _, result = self.run_failing_agent()
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = regrade.main([result["run_dir"]])
        self.assertEqual(code, 3)
        self.assertEqual(out.getvalue(), json.dumps(result["verdict"], indent=2) + "\n")
        self.assertIn("agent error (exit 3): agent_exited: ", err.getvalue())
        self.assertIn(NO_KEY, err.getvalue())


class TriageTest(unittest.TestCase):
    """The agent-error rule (triage.agent_error) on run dirs the builders write."""

    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = os.path.join(tmp.name, "run")
        os.mkdir(self.root)

    def triage(self, *calls: int, **ended) -> dict | None:
        """The rule on the run dir as it is, with the proxy's record of `calls` (statuses),
        after an agent that exited 0 on its own unless `ended` says otherwise."""
        run = collect(self.root, None)
        if calls:
            witnessed = tuple({"status": status, "error": None} for status in calls)
            run = dataclasses.replace(run, witness=Witness(None, {"proxy": True}, witnessed))
        how = {"exit_code": 0, "timed_out": False, "interrupted": False, "stderr_tail": None}
        return triage.agent_error(run, **{**how, **ended})

    def test_a_parent_whose_every_call_failed_is_an_agent_error_in_the_first_error(self):
        builder = RunBuilder(self.root)
        builder.failed_call("401 invalid x-api-key")
        builder.failed_call("401 invalid x-api-key")
        self.assertEqual(
            self.triage(),
            {
                "code": "model_calls_failed",
                "message": "every model call failed, the first with: 401 invalid x-api-key",
            },
        )

    def test_a_model_that_answered_once_is_the_models_run_however_it_ended(self):
        builder = RunBuilder(self.root)
        builder.failed_call()
        builder.assistant("Looking at the shards.")
        self.assertIsNone(self.triage(exit_code=1, stderr_tail="crashed"))

    def test_an_agent_that_exited_without_a_transcript_is_an_agent_error(self):
        self.assertEqual(
            self.triage(exit_code=1, stderr_tail="no model"),
            {
                "code": "agent_exited",
                "message": "the agent exited 1 before any model call was answered: no model",
            },
        )

    def test_an_agent_that_exited_0_without_calling_the_model_is_an_agent_error(self):
        self.assertEqual(
            self.triage(exit_code=0)["message"],
            "the agent exited 0 before any model call was answered: see its stderr.txt",
        )

    def test_a_timeout_before_any_model_call_is_a_timeout_not_an_agent_error(self):
        self.assertIsNone(self.triage(exit_code=-15, timed_out=True))

    def test_failed_calls_then_a_timeout_are_still_an_agent_error(self):
        RunBuilder(self.root).failed_call("429 rate limited")
        error = self.triage(exit_code=-15, timed_out=True)
        self.assertEqual(error["code"], "model_calls_failed")

    def test_an_interrupted_run_is_never_an_agent_error(self):
        self.assertIsNone(self.triage(exit_code=-2, interrupted=True))

    def test_calls_the_proxy_answered_cannot_be_hidden_by_deleting_the_transcript(self):
        # The model ran, then its shell deleted the sessions and killed the CLI.
        self.assertIsNone(self.triage(401, 200, exit_code=-9, stderr_tail="Killed"))

    def test_a_refusal_only_the_proxy_saw_is_named_by_its_status(self):
        self.assertEqual(
            self.triage(404, exit_code=0)["message"],
            "every model call failed, the first with: HTTP 404",
        )


class RegradeTest(unittest.TestCase):
    """`scorer.py RUN_DIR` regrades a stored run as the runner scored it. The runs: trial 1
    of a run set of 2 on a copy of json-events (so the fixture can change), and a baseline."""

    @classmethod
    def setUpClass(cls) -> None:
        tmp = tempfile.TemporaryDirectory()
        cls.addClassCleanup(tmp.cleanup)
        cls.tmp = tmp.name
        cls.fixture = os.path.join(cls.tmp, "fixture")
        shutil.copytree(JSON_EVENTS, cls.fixture)
        cls.set_dir = os.path.join(cls.tmp, "set")
        cls.result, cls.stderr = cls.run_trial(cls.set_dir, "--trials", "2")
        baseline_set = os.path.join(cls.tmp, "baseline")
        cls.baseline, _ = cls.run_trial(baseline_set, "--trials", "1", "--baseline")

    @classmethod
    def run_trial(cls, set_dir: str, *extra: str) -> tuple[dict, str]:
        config = os.path.join(cls.tmp, "agent-config")
        os.makedirs(config, exist_ok=True)
        argv = [sys.executable, RUNNER, "--fixture", cls.fixture, "--agent-bin", SIMULATED]
        argv += ["--model", "simulated/oracle", "--agent-config", config]
        argv += ["--run-set", set_dir, "--trial-index", "1", *extra]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_AGENT_")}
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True)
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
        code, _, _ = self.regrade("--fixture", JSON_EVENTS, self.result["run_dir"])
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

    def test_an_edited_witness_fails_on_regrade(self):
        witness = os.path.join(self.result["run_dir"], "witness.jsonl")
        self.restored_afterwards(witness)
        with open(witness, "ab") as handle:
            handle.write(b'{"kind":"sighting"}\n')
        code, out, _ = self.regrade(self.result["run_dir"])
        self.assertEqual(code, 1)
        self.assertIn("witness_tampered", self.reason_codes(out))

    def test_a_run_set_dir_regrades_every_trial(self):
        code, out, err = self.regrade(self.set_dir)
        table = json.loads(out)
        self.assertEqual((code, table["exit_code"]), (1, 1))  # trial 2 never ran
        self.assertEqual(
            table["trials"],
            [
                {
                    "index": 1,
                    "dir": "trial-1",
                    "status": "scored",
                    "resolved": True,
                    "exit_code": 0,
                    "verdict_unchanged": True,
                },
                {"index": 2, "dir": None, "status": "not_run"},
            ],
        )
        self.assertIn("scorer.py: trial-1: resolved (exit 0)", err)

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
        progress = r"runner\.py: trial 1/2: finished after \d+s of 1800s: 8 spawns, 8 replies"
        self.assertRegex(self.stderr, progress)
        last = self.stderr.splitlines()[-1]
        self.assertTrue(last.startswith("runner.py: trial 1/2: resolved (exit 0); "), last)


class HygieneTest(RunnerTestCase):
    def test_hanging_agent_is_ended_at_the_timeout_and_still_scored(self):
        done, result = self.run_runner("simulated/hang", JSON_EVENTS, "--timeout", "1", *GRACE)
        self.assertEqual(done.returncode, 1)
        self.assertTrue(result["agent"]["timed_out"])
        # The CLI's own exit status: ended by the runner's SIGTERM (it obeys it).
        self.assertEqual(result["agent"]["exit_code"], -signal.SIGTERM)
        self.assertIsNone(result["agent"]["first_error"])
        self.assertEqual(self.codes(result)[0], "timeout")
        # The root cause first on the verdict line, before the receipts it cost.
        self.assertIn(b"; reasons: timeout, ", done.stderr)
        self.assertRegex(done.stderr, rb"runner\.py: timed out after \d+s of 1s: 8 spawns")
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 8)
        grandchildren = logged_host_pids(result, "grandchild")
        self.assertEqual(len(grandchildren), 1)
        # The grandchild ignores SIGTERM: only SIGKILL ended it.
        self.assertIn(grandchildren[0], result["cleanup"]["killed"])
        for pid in grandchildren + logged_host_pids(result, "supervisor"):
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_process_that_escapes_by_setsid_and_an_empty_environment_is_ended(self):
        done, result = self.run_runner("simulated/escape", JSON_EVENTS, *GRACE)
        self.assertEqual(done.returncode, 0)
        (escaped,) = logged_host_pids(result, "escaped")
        self.assertTrue(process_gone(escaped))
        self.assertIn(escaped, result["cleanup"]["killed"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def interrupt_hanging_run(self, signum: int, drive: str) -> tuple[subprocess.Popen, dict, int]:
        """Signal the runner once simulated/hang has spawned its children and its
        SIGTERM-ignoring grandchild; returns the runner, its printed result and the pid of
        the grandchild's parent, read before the signal (the CLI one-shot, the daemon
        resident: simulated/hang runs the root in the CLI, or in a thread of the daemon)."""
        runner = subprocess.Popen(
            self.runner_argv("simulated/hang", JSON_EVENTS, "--drive", drive, *GRACE),
            cwd=self.tmp,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.addCleanup(runner.kill)
        deadline = time.monotonic() + 60
        while not glob.glob(os.path.join(self.out, "*", "stderr.txt")) or not logged_pids(
            glob.glob(os.path.join(self.out, "*"))[0], "grandchild"
        ):
            self.assertLess(time.monotonic(), deadline, "the agent never started")
            time.sleep(0.05)
        (grandchild,) = logged_pids(glob.glob(os.path.join(self.out, "*"))[0], "grandchild")
        parent = parent_pid(live_host_pid(runner.pid, grandchild))
        runner.send_signal(signum)
        out, _ = runner.communicate(timeout=60)
        return runner, json.loads(out), parent

    def assert_interrupted(self, signum: int, drive: str, exit_code: int) -> None:
        runner, result, parent = self.interrupt_hanging_run(signum, drive)
        self.assertEqual(runner.returncode, exit_code)
        self.assertEqual(result["exit_code"], exit_code)
        self.assertEqual(result["drive"], drive)
        self.assertEqual(self.codes(result)[0], "interrupted")
        self.assertFalse(result["resolved"])
        # Both drives spawn every child before the grandchild is logged.
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 8)
        run = self.run_dir(result)
        with open(os.path.join(run, "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)
        cleanup = result["cleanup"]
        (grandchild,) = logged_host_pids(result, "grandchild")
        (supervisor,) = logged_host_pids(result, DAEMON_LOGGED_AS[drive])
        for pid in (grandchild, supervisor, parent):
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(cleanup["leaked_processes"], 0)
        # The daemon was shut down over its own socket and had exited before anything
        # was signalled: the final sweep would end it too, so no signal may have reached it.
        shutdown = cleanup["daemon_shutdown"]
        self.assertIs(shutdown.get("success"), True, shutdown)
        self.assertIs(shutdown.get("exited"), True, shutdown)
        self.assertEqual(
            shutdown.get("supervisor_host_pid", shutdown.get("supervisor_pid")),
            supervisor,
            shutdown,
        )
        self.assertNotIn(supervisor, cleanup["terminated"])
        self.assertNotIn(supervisor, cleanup["killed"])
        # TERM first, then KILL after the grace: the grandchild ignores SIGTERM, so it got
        # both; the one-shot CLI obeys SIGTERM, so it got no SIGKILL. Resident, the
        # grandchild's parent is the daemon itself, which no signal reached (above).
        self.assertIn(grandchild, cleanup["terminated"])
        self.assertIn(grandchild, cleanup["killed"])
        self.assertEqual(parent == supervisor, drive == "resident")
        if drive == "oneshot":
            self.assertIn(parent, cleanup["terminated"])
            self.assertNotIn(parent, cleanup["killed"])
            # The CLI's exit status is the runner's SIGTERM, not a crash to quote.
            self.assertEqual(result["agent"]["exit_code"], -signal.SIGTERM)

    def test_grandchild_holding_the_output_files_open_is_ended(self):
        done, result = self.run_runner("simulated/hold-files", JSON_EVENTS, *GRACE)
        self.assertEqual(done.returncode, 0, result["reasons"])
        (holder,) = logged_host_pids(result, "holding")
        self.assertIn(holder, result["cleanup"]["killed"])
        self.assertTrue(process_gone(holder))
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        with open(os.path.join(self.run_dir(result), "result.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), result)

    def test_ctrl_c_ends_the_tree_scores_what_exists_and_exits_130(self):
        self.assert_interrupted(signal.SIGINT, "oneshot", 130)

    def test_sigterm_ends_the_tree_scores_what_exists_and_exits_143(self):
        self.assert_interrupted(signal.SIGTERM, "oneshot", 143)

    def test_ctrl_c_of_a_resident_run_shuts_its_daemon_down_scores_and_exits_130(self):
        self.assert_interrupted(signal.SIGINT, "resident", 130)

    def test_sigterm_of_a_resident_run_shuts_its_daemon_down_scores_and_exits_143(self):
        self.assert_interrupted(signal.SIGTERM, "resident", 143)


class ScriptedShardLimitTest(RunnerTestCase):
    def test_a_script_refuses_a_fixture_of_more_than_19_shards(self):
        # prime-agent v0.8.0 delivers at most 19 replies to a parent busy in one turn.
        fixtures = os.path.join(self.tmp, "fixtures")
        generator = os.path.join(ROOT, "fixtures", "generate.py")
        for shards in ("20", "19"):
            subprocess.run(
                [
                    *(sys.executable, generator, "--out", fixtures, "--shards", shards),
                    *("--fixture", "json-events"),
                ],
                check=True,
                capture_output=True,
            )
            done, result = self.run_runner(
                "scripted/fanout", os.path.join(fixtures, "json-events"), "--timeout", "5"
            )
            if shards == "20":
                self.assertEqual(done.returncode, 2)
                self.assertEqual(result["status"], "invalid_invocation")
                self.assertEqual(self.codes(result), ["too_many_shards_for_script"])
                self.assertFalse(os.path.exists(self.out))
            else:
                # 19 shards are run: exit 3, not 2 (the simulated agent knows no scripted
                # model and exits at once, an agent error).
                self.assertEqual(result["status"], "agent_error")
                self.assertEqual(done.returncode, 3)


class AgentEnvTest(unittest.TestCase):
    def agent_env(self, **user) -> dict:
        saved = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
        os.environ.update(user)
        return rundir.RunDir("/run").agent_env()

    def test_metrics_are_off_unless_the_user_asks_and_models_stay_online(self):
        os.environ.pop("PRIME_AGENT_TELEMETRY", None)
        env = self.agent_env()
        self.assertEqual(env["PRIME_AGENT_TELEMETRY"], "0")
        self.assertEqual(env["PI_SKIP_VERSION_CHECK"], "1")
        # PI_OFFLINE would also drop private Prime Inference models: never set for a real model.
        self.assertNotIn("PI_OFFLINE", env)
        self.assertEqual(self.agent_env(PRIME_AGENT_TELEMETRY="1")["PRIME_AGENT_TELEMETRY"], "1")

    def test_what_would_steer_the_product_elsewhere_is_dropped(self):
        env = self.agent_env(
            PRIME_AGENT_INTERNAL_X="1", RLM_DEPTH="2", GIT_DIR="/x", PRIME_AGENT_SESSION_DIR="/s"
        )
        for name in ("PRIME_AGENT_INTERNAL_X", "RLM_DEPTH", "GIT_DIR"):
            self.assertNotIn(name, env)
        self.assertEqual(env["PRIME_AGENT_SESSION_DIR"], "/run/sessions")
        self.assertEqual(env["HOME"], "/run/home")


class KernelPythonTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.home = tmp.name

    def venv_python(self, *parts: str) -> str:
        python = os.path.join(self.home, *parts, "kernel-venv", "bin", "python")
        os.makedirs(os.path.dirname(python))
        with open(python, "w", encoding="utf-8") as handle:
            handle.write("#!/bin/sh\n")
        os.chmod(python, 0o755)
        return python

    def test_the_users_own_kernel_venv_is_found_under_home_then_xdg(self):
        self.assertIsNone(rundir.users_kernel_python({"HOME": self.home}))
        xdg = self.venv_python("data", "prime", "agent")
        env = {"HOME": self.home, "XDG_DATA_HOME": os.path.join(self.home, "data")}
        self.assertEqual(rundir.users_kernel_python(env), xdg)
        primary = self.venv_python(".prime", "agent")
        self.assertEqual(rundir.users_kernel_python(env), primary)

    def test_a_kernel_the_user_names_is_left_to_the_product(self):
        self.venv_python(".prime", "agent")
        for name in ("PRIME_AGENT_KERNEL_PYTHON", "PRIME_AGENT_KERNEL_VENV"):
            self.assertIsNone(rundir.users_kernel_python({"HOME": self.home, name: "/k"}))

    def test_the_run_gets_it_although_its_home_is_its_own(self):
        python = self.venv_python(".prime", "agent")
        saved = dict(os.environ)
        self.addCleanup(lambda: (os.environ.clear(), os.environ.update(saved)))
        os.environ.pop("PRIME_AGENT_KERNEL_PYTHON", None)
        os.environ.pop("PRIME_AGENT_KERNEL_VENV", None)
        os.environ["HOME"] = self.home
        env = rundir.RunDir("/run").agent_env()
        self.assertEqual(env["HOME"], "/run/home")
        self.assertEqual(env["PRIME_AGENT_KERNEL_PYTHON"], python)


class SocketPathTest(RunnerTestCase):
    """The product binds a socket per session worker under $TMPDIR (at most 107 bytes)."""

    def test_every_run_dir_length_gives_sockets_that_fit(self):
        branches = set()
        for length in range(1, 140):
            run = rundir.RunDir("/" + "r" * length)
            run.fit_sockets()
            self.addCleanup(run.cleanup_tmp)
            self.assertTrue(rundir.fits_a_socket(rundir.worker_socket_path(run.tmp)), length)
            self.assertTrue(rundir.fits_a_socket(run.socket), length)
            own_tmp = run.tmp == os.path.join(run.root, "tmp")
            # The run dir's own tmp is kept whenever the product's sockets fit there.
            fits_there = rundir.fits_a_socket(rundir.worker_socket_path(run.root + "/tmp"))
            self.assertEqual(own_tmp, fits_there, length)
            branches.add(own_tmp)
        self.assertEqual(branches, {True, False})

    def test_a_run_whose_own_tmp_is_60_bytes_still_resolves(self):
        # v0.8.0 failed such a run (a run set's trial): its 60-byte TMPDIR passed the old
        # bound, but the worker socket under it was over 107 bytes long.
        base = tempfile.mkdtemp(prefix="", dir="/tmp")
        self.addCleanup(shutil.rmtree, base, True)
        run_name = len("json-events-20261202T220414Z-509525/tmp") + 1
        self.out = os.path.join(base, "p" * (60 - run_name - len(base) - 1))
        for drive in ("oneshot", "resident"):
            done, result = self.run_runner("simulated/oracle", JSON_EVENTS, "--drive", drive)
            self.assertEqual(len(os.path.join(self.run_dir(result), "tmp")), 60)
            self.assertEqual(done.returncode, 0, result["reasons"])
            self.assertTrue(result["resolved"])


class ResidentDriveTest(RunnerTestCase):
    def test_oracle_resolves_under_the_resident_drive(self):
        done, result = self.run_runner("simulated/oracle", JSON_EVENTS, "--drive", "resident")
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertTrue(result["resolved"])
        self.assertEqual(result["drive"], "resident")
        self.assertEqual(
            [step["command"] for step in result["resident"]["commands"]],
            ["create", "attach", "prompt", "wait_for_headless_completion", "get_state"],
        )
        self.assertFalse(result["resident"]["final_state"]["hasRunningRlmChildren"])
        run = self.run_dir(result)
        with open(os.path.join(run, "stdout.jsonl"), encoding="utf-8") as handle:
            header = json.loads(handle.readline())
        self.assertEqual(header["id"], result["resident"]["session"]["sessionId"])
        self.assertTrue(os.path.getsize(os.path.join(run, "daemon-wire.jsonl")) > 0)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertTrue(result["cleanup"]["daemon_shutdown"]["exited"])

    def test_parent_that_ends_its_turn_early_fails_one_shot(self):
        done, result = self.run_runner("simulated/end-turn-early")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(sorted(set(self.codes(result))), ["artifact_missing", "missing_receipt"])
        self.assertEqual(result["verdict"]["details"]["terminal_notices"], 3)

    def test_parent_that_ends_its_turn_early_resolves_resident(self):
        done, result = self.run_runner(
            "simulated/end-turn-early", JSON_EVENTS, "--drive", "resident"
        )
        self.assertEqual(done.returncode, 0, result["reasons"])
        self.assertTrue(result["resolved"])
        self.assertEqual(result["verdict"]["details"]["child_replies"], 8)

    def test_cheats_fail_under_the_resident_drive_too(self):
        done, result = self.run_runner("simulated/fabricate", CSV_METRICS, "--drive", "resident")
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result), ["wrong_answer", "unsourced_answer"])

    def test_forgeries_fail_under_the_resident_drive_too(self):
        forgeries = {
            "forge-ledger": [
                "answer_not_derived",
                "child_did_no_work",
                "spawn_code_unmatched",
                "stream_mismatch",
                "unsent_reply",
            ],
            "junk-replies": ["unsourced_answer"],
            "zero-work-children": ["answer_not_derived", "child_did_no_work", "unsent_reply"],
        }
        for behaviour, codes in forgeries.items():
            with self.subTest(behaviour):
                model = "simulated/" + behaviour
                done, result = self.run_runner(model, CSV_METRICS, "--drive", "resident")
                self.assertEqual(done.returncode, 1, done.stderr.decode())
                self.assertFalse(result["verdict"]["delegation_evidence"])
                self.assertEqual(sorted(set(self.codes(result))), codes)
                self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_hanging_resident_session_is_ended_at_the_timeout(self):
        done, result = self.run_runner(
            "simulated/hang", JSON_EVENTS, "--drive", "resident", "--timeout", "1", *GRACE
        )
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result)[0], "timeout")
        self.assertTrue(result["resident"]["admitted"])
        for pid in logged_host_pids(result, "grandchild") + logged_host_pids(result, "daemon"):
            self.assertTrue(process_gone(pid), pid)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_daemon_that_never_answers_is_timed_out_and_ended(self):
        agent = os.path.join(self.tmp, "silent-daemon")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write(SILENT_DAEMON)
        os.chmod(agent, 0o755)
        argv = self.runner_argv(
            "simulated/oracle", JSON_EVENTS, "--drive", "resident", "--timeout", "1", *GRACE
        )
        argv[argv.index(SIMULATED)] = agent
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
        result = json.loads(done.stdout)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(self.codes(result)[0], "timeout")
        self.assertFalse(result["resident"]["admitted"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        (pid,) = logged_host_pids(result, "silent")
        self.assertTrue(process_gone(pid))

    def test_daemon_too_old_for_the_barrier_is_refused_with_exit_3(self):
        agent = os.path.join(self.tmp, "old-daemon")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write(SILENT_DAEMON.replace('"version": 7', '"version": 6'))
        os.chmod(agent, 0o755)
        argv = self.runner_argv("simulated/oracle", JSON_EVENTS, "--drive", "resident", *GRACE)
        argv[argv.index(SIMULATED)] = agent
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
        result = json.loads(done.stdout)
        self.assertEqual(done.returncode, 3)
        self.assertEqual(self.codes(result), ["daemon_incompatible"])
        self.assertIn("version", result["reasons"][0]["message"])
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)


# A daemon that says hello on its socket and then never answers a command.
SILENT_DAEMON = f"""#!{sys.executable}
import json, os, socket, sys, time
if "--version" in sys.argv:
    sys.exit(0)
path = sys.argv[sys.argv.index("--daemon-socket") + 1]
print(f"silent pid={{os.getpid()}}", file=sys.stderr, flush=True)
listener = socket.socket(socket.AF_UNIX)
listener.bind(path)
listener.listen()
hello = {{"type": "daemon_hello", "protocol": {{"name": "prime-agent.daemon", "version": 7}},
         "schemaRevision": 22, "supervisorPid": os.getpid(),
         "serverCapabilities": ["rlm_quiescence_barrier"]}}
held = []
while True:
    connection, _ = listener.accept()
    connection.sendall((json.dumps(hello) + "\\n").encode())
    held.append(connection)
"""


class ScriptedModelTest(RunnerTestCase):
    """`--model scripted/<script>`: the runner serves the model to the installed agent."""

    def test_scripted_endpoint_is_served_logged_and_checked(self):
        agent = os.path.join(self.tmp, "calls-the-model")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write(CALLS_THE_MODEL)
        os.chmod(agent, 0o755)
        argv = self.runner_argv("scripted/fanout")
        argv[argv.index(SIMULATED)] = agent
        # A HOME with no kernel venv and no PRIME_AGENT_KERNEL_PYTHON: the runner warns.
        env = {**self.env, "HOME": self.tmp}
        done = subprocess.run(argv, env=env, capture_output=True, timeout=60)
        result = json.loads(done.stdout)
        self.assertIn(b"runner.py: note: no kernel Python", done.stderr)
        self.assertIsNone(result["agent"]["kernel_python"])
        # The agent did no fan-out, so the product and the script disagree.
        self.assertEqual(done.returncode, 1)
        self.assertEqual(result["contract_check"], "fail")
        self.assertIn("resolved is False, expected True", result["differences"])
        run = self.run_dir(result)
        with open(os.path.join(run, "agent-home", "models.json"), encoding="utf-8") as handle:
            provider = json.load(handle)["providers"]["scripted"]
        self.assertTrue(provider["baseUrl"].startswith("http://127.0.0.1:"))
        self.assertIn("fanout", [model["id"] for model in provider["models"]])
        with open(os.path.join(run, "model-log.jsonl"), encoding="utf-8") as handle:
            (request,) = [json.loads(line) for line in handle]
        self.assertEqual(request["http_status"], 200)
        self.assertTrue(request["response_id"].startswith("chatcmpl-"))
        with open(os.path.join(run, "stderr.txt"), encoding="utf-8") as handle:
            stderr = handle.read()
        self.assertIn(request["response_id"], stderr)
        # The endpoint is local: the product runs offline, without metrics or update check.
        for setting in ("PI_OFFLINE=1", "PRIME_AGENT_TELEMETRY=0", "PI_SKIP_VERSION_CHECK=1"):
            self.assertIn(setting, stderr.splitlines())

    def test_unknown_script_is_a_usage_error(self):
        done = subprocess.run(
            self.runner_argv("scripted/no-such-script"), env=self.env, capture_output=True
        )
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"no script 'no-such-script'", done.stderr)

    def test_a_scripted_baseline_is_a_usage_error(self):
        argv = self.runner_argv("scripted/no-spawn", JSON_EVENTS, "--baseline")
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"--baseline with a scripted model checks nothing", done.stderr)
        self.assertFalse(os.path.exists(self.out))


# An agent that finds the scripted provider in its agent home and calls it once.
CALLS_THE_MODEL = f"""#!{sys.executable}
import json, os, sys, urllib.request
if "--version" in sys.argv:
    sys.exit(0)
home = os.environ["PRIME_AGENT_CODING_AGENT_DIR"]
with open(os.path.join(home, "models.json")) as handle:
    base = json.load(handle)["providers"]["scripted"]["baseUrl"]
body = {{"model": "fanout", "stream": False, "messages": [{{"role": "user", "content": "hi"}}]}}
request = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(),
                                 {{"Content-Type": "application/json"}})
with urllib.request.urlopen(request, timeout=10) as response:
    print(json.load(response)["id"], file=sys.stderr)
for name in ("PI_OFFLINE", "PRIME_AGENT_TELEMETRY", "PI_SKIP_VERSION_CHECK"):
    print(name + "=" + str(os.environ.get(name)), file=sys.stderr)
"""


class InvalidInputTest(RunnerTestCase):
    def run_in_process(self, *argv: str, **env: str) -> tuple[int, str, str]:
        """runner.main in this process, for the paths that end before a run dir is made."""
        out, err = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, {**self.env, **env}, clear=True),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = runner.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def test_an_agent_not_on_path_names_the_stand_in_and_leaves_no_run_dir(self):
        argv = self.runner_argv("anthropic/claude-sonnet-4-5")[2:]
        del argv[argv.index("--agent-bin") : argv.index("--agent-bin") + 2]
        empty = os.path.join(self.tmp, "empty-path")
        os.mkdir(empty)
        code, out, err = self.run_in_process(*argv, PATH=empty)
        self.assertEqual(code, 3)
        result = json.loads(out)
        self.assertEqual(
            (result["status"], self.codes(result)), ("agent_not_run", ["agent_not_found"])
        )
        message = result["reasons"][0]["message"]
        self.assertTrue(
            message.startswith("'prime-agent' is not on PATH; to try the harness "), message
        )
        self.assertIn("simulated/agent.py --model simulated/oracle", message)
        self.assertIn(message, err)
        self.assertNotIn("run_dir", result)
        self.assertFalse(os.path.exists(self.out))

    def test_an_agent_that_is_not_executable_says_so_and_leaves_no_run_dir(self):
        agent = os.path.join(self.tmp, "agent-without-x")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write("#!/bin/sh\nexit 0\n")
        argv = self.runner_argv("simulated/oracle")[2:]
        argv[argv.index(SIMULATED)] = agent
        code, out, _ = self.run_in_process(*argv)
        self.assertEqual(code, 3)
        result = json.loads(out)
        self.assertEqual(self.codes(result), ["agent_not_executable"])
        self.assertEqual(
            result["reasons"][0]["message"], f"{agent!r} is not executable (chmod +x it)"
        )
        self.assertFalse(os.path.exists(self.out))

    def test_a_run_set_whose_agent_is_missing_makes_no_set_dir(self):
        argv = self.runner_argv("simulated/oracle", JSON_EVENTS, "--trials", "2")[2:]
        argv[argv.index(SIMULATED)] = os.path.join(self.tmp, "no-such-agent")
        code, out, err = self.run_in_process(*argv)
        self.assertEqual((code, out), (3, ""))
        self.assertIn("the agent could not be run: ", err)
        self.assertIn("no-such-agent' does not exist", err)
        self.assertFalse(os.path.exists(self.out))

    def run_with_a_closed_pipe(self, stream: str) -> subprocess.CompletedProcess:
        """The oracle run with `stream` ("stdout" or "stderr") a pipe nobody reads;
        the other is captured."""
        read_end, write_end = os.pipe()
        os.close(read_end)
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: write_end}
        try:
            return subprocess.run(
                self.runner_argv("simulated/oracle"),
                cwd=self.tmp,
                env=self.env,
                stdin=subprocess.DEVNULL,
                timeout=120,
                **pipes,
            )
        finally:
            os.close(write_end)

    def test_a_reader_that_closed_stdout_early_gets_no_traceback_and_the_run_its_code(self):
        # `runner.py ... | head -1`: the pipe is gone before the result is printed.
        done = self.run_with_a_closed_pipe("stdout")
        self.assertEqual(done.returncode, 0)
        self.assertNotIn(b"Traceback", done.stderr)
        (run_dir,) = glob.glob(os.path.join(self.out, "*"))
        with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as handle:
            self.assertTrue(json.load(handle)["resolved"])

    def test_a_closed_stderr_costs_only_the_lines_for_a_person(self):
        # `runner.py ... 2>&1 | head -1`, with stdout kept: stderr is gone before the
        # verdict line is printed.
        done = self.run_with_a_closed_pipe("stderr")
        self.assertEqual(done.returncode, 0)
        self.assertTrue(json.loads(done.stdout)["resolved"])

    def broken_fixture(self, mutate) -> str:
        path = os.path.join(self.tmp, "broken")
        shutil.copytree(JSON_EVENTS, path)
        manifest = os.path.join(path, "fixture.json")
        with open(manifest, encoding="utf-8") as handle:
            data = json.load(handle)
        text = mutate(data)
        with open(manifest, "w", encoding="utf-8") as handle:
            handle.write(text if isinstance(text, str) else json.dumps(data))
        return path

    def assert_invalid(self, mutate, detail: str) -> None:
        done, result = self.run_runner("simulated/oracle", self.broken_fixture(mutate))
        self.assertEqual(done.returncode, 2)
        self.assertEqual(result["status"], "invalid_fixture")
        self.assertEqual(result["reasons"][0]["code"], "invalid_fixture")
        self.assertEqual(result["reasons"][0]["detail"], detail)
        self.assertIn(b"invalid fixture", done.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_malformed_fixture_json_exits_2(self):
        self.assert_invalid(lambda data: "{not json", "fixture_json_invalid")

    def test_fixture_without_shards_key_exits_2(self):
        self.assert_invalid(lambda data: data.pop("shards") and None, "fixture_key_missing")

    def test_path_traversal_in_a_shard_name_exits_2(self):
        self.assert_invalid(
            lambda data: data["shards"][0].update(file="../../x"), "fixture_unsafe_path"
        )

    def test_non_integer_expected_answer_exits_2(self):
        self.assert_invalid(
            lambda data: data["shards"][0].update(expected="17"), "fixture_bad_value"
        )

    def test_duplicate_shard_file_exits_2(self):
        self.assert_invalid(
            lambda data: data["shards"][1].update(file=data["shards"][0]["file"]),
            "fixture_duplicate_file",
        )

    def test_missing_shard_file_exits_2(self):
        self.assert_invalid(
            lambda data: data["shards"][0].update(file="absent.jsonl"), "fixture_shard_missing"
        )

    def test_agent_version_printed_on_stderr_is_recorded(self):
        # The real CLI prints --version on stderr when stdin is not a terminal.
        agent = os.path.join(self.tmp, "stderr-version-agent")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write('#!/bin/sh\n[ "$1" = --version ] && echo 0.8.0 >&2\nexit 0\n')
        os.chmod(agent, 0o755)
        argv = self.runner_argv("anthropic/claude-sonnet-4-5")
        argv[argv.index(SIMULATED)] = agent
        done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
        result = json.loads(done.stdout)
        self.assertEqual(result["agent"]["version"], "0.8.0")
        self.assertFalse(result["simulated"])

    def test_help_documents_every_flag(self):
        done = subprocess.run(
            [sys.executable, RUNNER, "--help"], capture_output=True, text=True, timeout=60
        )
        self.assertEqual(done.returncode, 0)
        flags = ("--fixture", "--model", "--timeout", "--agent-bin", "--out", "--agent-config")
        for flag in (*flags, "--drive", "--grace", "--upstream", "--inject-failure"):
            self.assertIn(flag, done.stdout)

    def test_a_provider_the_proxy_cannot_reach_is_named_exit_3(self):
        # No upstream for it in models.json or the product's catalog: a typo in the
        # provider is caught before the agent starts, not scored as a model failure.
        done = subprocess.run(
            self.runner_argv("anthropc/claude-sonnet-4-5"), env=self.env, capture_output=True
        )
        self.assertEqual(done.returncode, 3)
        result = json.loads(done.stdout)
        self.assertEqual(self.codes(result), ["model_proxy_unavailable"])
        self.assertIn("anthropc", result["reasons"][0]["message"])

    def test_a_malformed_inject_failure_is_a_usage_error(self):
        for bad in ("worker-events-01:0", "worker-events-01:x", ":2"):
            argv = self.runner_argv("simulated/oracle", JSON_EVENTS, "--inject-failure", bad)
            done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
            self.assertEqual(done.returncode, 2, bad)
            self.assertIn(b"--inject-failure", done.stderr)

    def test_missing_required_flag_is_a_usage_error(self):
        done = subprocess.run(
            [sys.executable, RUNNER, "--model", "x/y"], capture_output=True, timeout=60
        )
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"--fixture", done.stderr)


class SummaryLineTest(unittest.TestCase):
    """The one-line verdicts on stderr, for the branches a simulated run seldom takes."""

    def result(self, **changes) -> dict:
        verdict = {
            "coverage": True,
            "delegation_evidence": False,
            "dedup": True,
            "receipts": False,
            "efficiency": {"total_turns": 12, "total_tokens": 45210},
        }
        result = {
            "resolved": False,
            "exit_code": 1,
            "reasons": [{"code": "missing_receipt"}, {"code": "timeout"}] * 2,
            "verdict": verdict,
            "cleanup": {"leaked_processes": 0},
        }
        result.update(changes)
        return result

    def test_each_criterion_reason_count_and_the_calls_are_named(self):
        line = runner.summary_line(self.result())
        self.assertEqual(
            line,
            "NOT resolved (exit 1); coverage ok, delegation_evidence FAILED, dedup ok, "
            "receipts FAILED; reasons: missing_receipt x2, timeout x2; "
            "12 model calls, 45,210 tokens",
        )

    def test_the_cost_is_said_when_the_product_priced_the_calls(self):
        result = self.result()
        result["verdict"]["efficiency"]["total_cost_usd"] = 1.2345
        self.assertIn("12 model calls, 45,210 tokens, $1.23", runner.summary_line(result))
        result["verdict"]["efficiency"]["total_cost_usd"] = 0
        self.assertIn("45,210 tokens", runner.summary_line(result))
        self.assertNotIn("$", runner.summary_line(result))

    def test_a_baseline_a_contract_check_and_leaked_processes_are_said(self):
        result = self.result(baseline=True, contract_check="fail", reasons=[])
        result["cleanup"]["leaked_processes"] = 2
        line = runner.summary_line(result, os.path.join(os.sep, "elsewhere", "result.json"))
        self.assertEqual(
            line,
            "NOT resolved (exit 1); contract check fail; baseline, judged on coverage: ok; "
            f"12 model calls, 45,210 tokens; 2 leaked processes; result in "
            f"{os.path.join(os.sep, 'elsewhere', 'result.json')}",
        )

    def test_a_run_set_line_counts_failures_most_first(self):
        summary = {
            "trials_scored": 4,
            "trials_planned": 5,
            "resolved": 1,
            "resolve_rate_ci95": [0.046, 0.699],
            "exit_code": 1,
            "trials_errored": 0,
            "failures": {"not_run": 1, "missing_receipt": 3, "dedup": 3},
            "errors": {},
        }
        line = runner.set_summary_line(summary, os.path.join(os.getcwd(), "set", "summary.json"))
        self.assertEqual(
            line,
            "run set: 1/4 scored trials resolved (25%, 95% CI 5%-70%), 5 planned; exit 1; "
            "failures: dedup x3, missing_receipt x3, not_run x1; "
            f"summary in {os.path.join('set', 'summary.json')}",
        )

    def test_a_run_set_with_nothing_scored_has_no_rate(self):
        summary = {
            "trials_scored": 0,
            "trials_planned": 2,
            "resolved": 0,
            "resolve_rate_ci95": [None, None],
            "exit_code": 3,
            "trials_errored": 0,
            "failures": {"not_run": 2},
            "errors": {},
        }
        line = runner.set_summary_line(summary, os.path.join(os.getcwd(), "summary.json"))
        self.assertTrue(line.startswith("run set: 0/0 scored trials resolved, 2 planned; exit 3"))

    def test_a_run_set_line_counts_errored_trials_apart(self):
        summary = {
            "trials_scored": 2,
            "trials_planned": 3,
            "resolved": 2,
            "resolve_rate_ci95": [0.342, 1.0],
            "exit_code": 3,
            "trials_errored": 1,
            "failures": {},
            "errors": {"agent_exited": 1},
        }
        self.assertEqual(
            runner.set_summary_line(summary, None),
            "run set: 2/2 scored trials resolved (100%, 95% CI 34%-100%), 1 errored (not "
            "counted), 3 planned; exit 3; errors: agent_exited x1",
        )

    def test_the_root_cause_is_named_before_what_it_caused(self):
        codes = ("timeout", "child_did_no_work", "missing_receipt", "child_did_no_work")
        line = runner.summary_line(self.result(reasons=[{"code": code} for code in codes]))
        self.assertIn("; reasons: timeout, child_did_no_work x2, missing_receipt; ", line)

    def test_an_agent_error_gives_the_agents_own_words_and_not_the_models_failure(self):
        said = "the agent exited 1 before any model call was answered: no API key"
        result = self.result(
            status="agent_error", exit_code=3, reasons=[{"code": "agent_exited", "message": said}]
        )
        self.assertEqual(
            runner.summary_line(result, os.path.join(os.sep, "r", "result.json")),
            f"agent error (exit 3): agent_exited: {said}; not scored as the model's failure; "
            f"result in {os.path.join(os.sep, 'r', 'result.json')}",
        )


class ProgressTest(unittest.TestCase):
    def test_progress_lines_give_the_elapsed_time_of_the_timeout_and_the_trial(self):
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stderr(err):
            progress = Progress(rundir.RunDir(tmp), 30.0, "trial 2/5", sandboxed=True)
            progress.report(12.4)
            progress.report(30.2, ended="timed out")
            Progress(rundir.RunDir(tmp), 30.0).report(1.0)
        self.assertEqual(
            err.getvalue().splitlines(),
            [
                "runner.py: trial 2/5: running 12s of 30s: 0 spawns, 0 replies (sandboxed)",
                "runner.py: trial 2/5: timed out after 30s of 30s: 0 spawns, 0 replies (sandboxed)",
                "runner.py: running 1s of 30s: 0 spawns, 0 replies (not sandboxed)",
            ],
        )


class InjectedFailureTest(RunnerTestCase):
    """--inject-failure: the proxy fails a worker's child's model calls, and the result says
    how the parent accounted for that shard (a retry, a MISSING line, or an invented number)."""

    def test_a_child_made_to_fail_is_marked_missing_and_that_counts_as_accounted(self):
        for drive in ("oneshot", "resident"):
            with self.subTest(drive=drive):
                done, result = self.run_runner(
                    "simulated/oracle", JSON_EVENTS, "--drive", drive,
                    "--inject-failure", "worker-events-05", *GRACE,
                )  # fmt: skip
                self.assertEqual(done.returncode, 1)
                self.assertEqual(self.codes(result), ["wrong_answer"])
                injected = result["injected_failures"]
                self.assertEqual(injected["asked"], [{"worker": "worker-events-05", "calls": 12}])
                self.assertEqual(injected["answered"], 12)
                (accounting,) = injected["accounting"]
                self.assertTrue(accounting["accounted"])
                self.assertEqual(accounting["file"], "events-05.jsonl")
                self.assertIn("MISSING", accounting["how"])

    def test_fewer_failures_are_absorbed_by_retries_and_the_shard_is_answered(self):
        done, result = self.run_runner(
            "simulated/oracle", JSON_EVENTS, "--inject-failure", "worker-events-05:3", *GRACE
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
            "simulated/fabricate", JSON_EVENTS, "--inject-failure", "worker-events-01", *GRACE
        )
        (accounting,) = result["injected_failures"]["accounting"]
        self.assertFalse(accounting["accounted"], accounting)


class StderrTailTest(unittest.TestCase):
    """What a crashed agent said, quoted in an agent error."""

    def said(self, text: str) -> str | None:
        path = os.path.join(tempfile.mkdtemp(), "stderr.txt")
        self.addCleanup(shutil.rmtree, os.path.dirname(path))
        with open(path, "w") as handle:
            handle.write(text)
        return launch.stderr_tail(path)

    def test_the_products_cause_comes_first_then_where_to_read_more(self):
        # prime-agent 0.8.0 without a key for the model's provider.
        text = (
            "No API key found for anthropic.\n\nUse /login to log into a provider. See:\n"
            "  docs/providers.md\n  docs/models.md\n"
        )
        self.assertEqual(self.said(text), "No API key found for anthropic. … docs/models.md")

    def test_a_traceback_keeps_its_last_line(self):
        text = 'Traceback (most recent call last):\n  File "x"\nTypeError: bad\n'
        self.assertEqual(self.said(text), "Traceback (most recent call last): … TypeError: bad")

    def test_one_line_is_said_once_and_nothing_is_none(self):
        self.assertEqual(
            self.said('unknown model "simulated/orcale"\n'), 'unknown model "simulated/orcale"'
        )
        self.assertIsNone(self.said("\n \n"))


class UnusableModelsJsonTest(RunnerTestCase):
    def test_a_models_json_the_harness_cannot_extend_is_named_exit_3(self):
        # A file that is JSON but no object of providers: named, never a traceback, for
        # the stand-in's provider and the scripted model's alike.
        config = os.path.join(self.tmp, "bad-config")
        os.makedirs(config)
        with open(os.path.join(config, "models.json"), "w", encoding="utf-8") as handle:
            handle.write("[1, 2]")
        for model in ("simulated/oracle", "scripted/fanout"):
            with self.subTest(model=model):
                argv = self.runner_argv(model, JSON_EVENTS, *GRACE)
                argv[argv.index("--agent-config") + 1] = config
                done = subprocess.run(argv, env=self.env, capture_output=True, timeout=60)
                self.assertNotIn(b"Traceback", done.stderr)
                self.assertEqual(done.returncode, 3)
                result = json.loads(done.stdout)
                self.assertEqual(self.codes(result), ["model_proxy_unavailable"])
                self.assertIn("providers", result["reasons"][0]["message"])


if __name__ == "__main__":
    unittest.main()
