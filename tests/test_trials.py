"""Run sets end to end with the simulated agent (runner.py --trials, --resume, --trial-index,
--baseline), and the summary as a pure function."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import shlex
import subprocess
import unittest
from typing import ClassVar
from unittest import mock

from swarm_fanout import runner
from swarm_fanout.evidence.fixture import load_fixture
from swarm_fanout.evidence.runsets import Attempt, is_done
from swarm_fanout.reporting import terminal
from swarm_fanout.reporting.stats import wilson_interval
from swarm_fanout.reporting.summary import TrialRecord, summarize
from swarm_fanout.shell import rundir
from swarm_fanout.shell.trials import baseline_task
from tests.runner_case import JSON_EVENTS, SIMULATED, RunSetCase, without_timings

# The run set of simulated/flaky that most tests here read (RunSetCase.shared_set).
SET_OF_3 = ("--trials", "3", "--jobs", "2")


class TrialsTest(RunSetCase):
    def test_k_trials_two_at_a_time_each_in_its_own_dir_with_a_summary(self):
        shared, set_dir = self.shared_set(*SET_OF_3)
        done, summary = shared.done, shared.result
        results = self.trial_results(set_dir)
        self.assertEqual(sorted(results), ["trial-1", "trial-2", "trial-3"])
        # Flaky at seed 11: trial 2 fabricates.
        self.assertEqual([result["resolved"] for result in results.values()], [True, False, True])
        self.assertEqual((summary["resolved"], summary["trials_scored"]), (2, 3))
        # A failed trial fails the set, and its reasons are counted once per trial.
        self.assertEqual(done.returncode, 1)
        self.assertEqual(summary["failures"], {"unsourced_answer": 1, "wrong_answer": 1})
        self.assertIsNone(summary["failure_accounting"])  # no failure injected, none judged
        # pass^2 = C(2,2)/C(3,2), pass@2 = 1 - C(1,2)/C(3,2), by hand
        self.assertEqual((summary["pass_hat_k"]["2"], summary["pass_at_k"]["2"]), (1 / 3, 1))
        self.assertEqual(sorted(summary["pass_hat_k"]), ["1", "2", "3"])
        for name, result in results.items():
            self.assertEqual(result["trial"]["index"], int(name.split("-")[1]))
        with open(os.path.join(set_dir, "summary.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), summary)
        config = summary["run_set"]
        self.assertEqual((config["trials"], config["jobs"], config["baseline"]), (3, 2, False))
        self.assertEqual(config["agent_version"], "prime-agent 0.8.0 (simulated)")
        self.assertEqual(len(config["fixture_digest"]), 64)
        self.assertIn(b"trial 3/3 finished", done.stderr)
        *_, last, report = done.stderr.decode().splitlines()
        head = "runner.py: run set: 2/3 scored trials resolved (67%, "
        self.assertTrue(last.startswith(head), last)
        self.assertTrue(last.endswith(os.path.join(os.path.basename(set_dir), "summary.json")))
        # Run from outside the project: the command names it, and works as printed.
        near = os.path.relpath(os.path.realpath(set_dir), os.path.realpath(shared.tmp))
        project = terminal.PROJECT
        said = f"uv run --locked --project {project} python {project}/report.py {near}"
        self.assertEqual(report, f"runner.py: its report: {said}")
        self.assertFalse(os.path.exists(os.path.join(set_dir, "report.html")))
        shown = subprocess.run(
            shlex.split(said),
            cwd=shared.tmp,
            # uv leaves a lock file of its own in the temp dir: this test's, removed with it.
            env={**os.environ, "TMPDIR": self.tmp},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertTrue(os.path.exists(os.path.join(set_dir, "report.html")), shown.stderr)
        # --jobs 2: the first two trials ran at the same time.
        first, second = results["trial-1"], results["trial-2"]
        self.assertLess(first["started_at"], second["finished_at"])
        self.assertLess(second["started_at"], first["finished_at"])

    def test_resume_after_a_killed_trial_gives_the_uninterrupted_summary(self):
        shared, uninterrupted_dir = self.shared_set(*SET_OF_3)
        # Trials 1 and 3 ran; trial 2 was killed mid-run: its dir, some of the agent's files,
        # no result.
        set_dir = self.copied_set(uninterrupted_dir, "trial-1", "trial-3")
        os.makedirs(os.path.join(set_dir, "trial-2", "sessions"))
        done, resumed = self.runner("--resume", set_dir, model=None, fixture=None)
        self.assertEqual(
            sorted(self.trial_results(set_dir)), ["trial-1", "trial-2-retry1", "trial-3"]
        )
        self.assertTrue(os.path.isdir(os.path.join(set_dir, "trial-2", "sessions")))
        self.assertEqual(resumed["trials"][1]["dir"], "trial-2-retry1")
        self.assertEqual(resumed["trials"][1]["attempts"], 2)
        uninterrupted = copy.deepcopy(shared.result)
        for summary in (uninterrupted, resumed):
            for trial in summary["trials"]:
                trial.pop("dir"), trial.pop("attempts")
            summary["run_set"].pop("jobs")
        # The trial run again is the same; the copied ones' timelines are left out: their
        # ledgers are keyed on the sessions dirs' paths they ran at, and read here as none.
        self.assertEqual(
            *(without_timings(summary["trials"][1]) for summary in (resumed, uninterrupted))
        )
        for summary in (uninterrupted, resumed):
            for row in (summary, *summary["trials"]):
                row.pop("max_concurrent_children")
        self.assertEqual(without_timings(resumed), without_timings(uninterrupted))
        self.assertIn(b"trial 2/3 started", done.stderr)
        self.assertNotIn(b"trial 1/3 started", done.stderr)
        self.assertNotIn(b"trial 3/3 started", done.stderr)

    def test_errored_trials_are_kept_apart_and_a_resume_runs_them_again(self):
        _, stored = self.shared_set(*SET_OF_3)
        set_dir = self.copied_set(stored, "trial-1", "trial-3")
        # Trial 2 on a node whose agent has no credentials: it exits 1 before any model call.
        agent = os.path.join(self.tmp, "node-agent")
        with open(agent, "w", encoding="utf-8") as handle:
            handle.write(
                f'#!/bin/sh\n[ "$1" = --version ] && exec {SIMULATED} "$@"\n'
                "echo 'no credentials on this node' >&2; exit 1\n"
            )
        os.chmod(agent, 0o755)
        done, summary = self.runner(
            "--resume", set_dir, "--agent-bin", agent, model=None, fixture=None
        )
        self.assertEqual((done.returncode, summary["exit_code"]), (3, 3))
        counts = ("trials_scored", "resolved", "trials_errored", "resolve_rate")
        self.assertEqual([summary[key] for key in counts], [2, 2, 1, 1.0])
        self.assertEqual(list(summary["pass_hat_k"]), ["1", "2"])  # n = 2: the errored one is out
        self.assertEqual((summary["failures"], summary["errors"]), ({}, {"agent_exited": 1}))
        self.assertEqual(summary["trials"][1]["status"], "agent_error")
        self.assertIn(b"1 errored (not counted)", done.stderr)
        self.assertIn(b"runner.py: trial 2/3: agent error (exit 3): agent_exited: ", done.stderr)
        done, summary = self.runner(
            "--resume", set_dir, "--agent-bin", SIMULATED, model=None, fixture=None
        )
        # Trial 2 scored this time (it fabricates, at seed 11), and it alone ran.
        self.assertEqual(
            (done.returncode, summary["resolved"], summary["trials_errored"]), (1, 2, 0)
        )
        self.assertEqual(summary["trials"][1]["dir"], "trial-2-retry1")
        self.assertIn(b"trial 2/3 started", done.stderr)
        self.assertNotIn(b"trial 1/3 started", done.stderr)

    def test_a_resident_run_set_drives_every_trial_through_its_own_daemon(self):
        done, summary = self.runner(
            "--trials", "2", "--jobs", "2", "--drive", "resident", model="simulated/oracle"
        )
        self.assertEqual((done.returncode, summary["resolve_rate"]), (0, 1.0))
        self.assertEqual(summary["run_set"]["drive"], "resident")
        (set_dir,) = [os.path.join(self.out, name) for name in os.listdir(self.out)]
        for name, result in self.trial_results(set_dir).items():
            with self.subTest(trial=name):
                self.assertEqual(result["drive"], "resident")
                self.assertEqual(result["cleanup"]["leaked_processes"], 0)
                # Each trial's own daemon answered on its own socket, and was shut down.
                self.assertTrue(os.path.exists(os.path.join(set_dir, name, "daemon-wire.jsonl")))
                self.assertTrue(result["cleanup"]["daemon_shutdown"]["success"])

    def test_a_summary_that_cannot_be_stored_is_still_printed_with_its_exit_code(self):
        _, stored = self.shared_set(*SET_OF_3)
        set_dir = self.copied_set(stored, "trial-1", "trial-2", "trial-3")
        real_write = rundir.write_atomic

        def full_disk(path: str, text: str) -> None:
            if os.path.basename(path) == "summary.json":
                raise OSError(28, "No space left on device")
            real_write(path, text)

        out, err = io.StringIO(), io.StringIO()
        with (
            mock.patch.dict(os.environ, self.env, clear=True),
            mock.patch("swarm_fanout.shell.rundir.write_atomic", full_disk),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = runner.main(["--resume", set_dir])
        summary = json.loads(out.getvalue())
        self.assertEqual((code, summary["exit_code"], summary["resolved"]), (1, 1, 2))
        self.assertIn("No space left on device", summary["summary_file_error"])
        self.assertIn("could not write", err.getvalue())
        self.assertNotIn("summary in", err.getvalue())
        self.assertFalse(os.path.exists(os.path.join(set_dir, "summary.json")))


class BaselineTest(RunSetCase):
    def test_baseline_is_scored_on_coverage_and_gives_the_fan_outs_overhead(self):
        shared, fan_out_dir = self.shared_set(*SET_OF_3)
        # A baseline set of one trial beside the fan-out set of the same fixture and model.
        self.env["SIMULATED_FLAKY_P"] = "1"
        base_dir = os.path.join(os.path.dirname(fan_out_dir), "baseline")
        done, baseline = self.runner("--run-set", base_dir, "--baseline")
        self.assertEqual(done.returncode, 0)
        result = self.trial_results(base_dir)["trial-1"]
        self.assertEqual((result["baseline"], result["resolved_by"]), (True, "coverage"))
        self.assertTrue(result["resolved"])
        self.assertFalse(result["verdict"]["resolved"])  # no_spawn, as it was told
        self.assertEqual(result["reasons"], [])
        self.assertEqual(result["verdict"]["details"]["depth1_spawns"], 0)
        ratio = shared.result["tokens"]["median"] / baseline["tokens"]["median"]
        self.assertEqual(baseline["overhead"]["tokens"], ratio)
        self.assertGreater(ratio, 1)

    def test_baseline_prompt_asks_every_question_and_names_no_worker(self):
        fixture = load_fixture(JSON_EVENTS)
        prompt = baseline_task(fixture)
        for shard in fixture.shards:
            self.assertIn(f"- `shards/{shard.file}` | {shard.question}\n", prompt)
            self.assertNotIn(shard.worker, prompt)
            self.assertNotIn(str(shard.expected), re.findall(r"(?<![\w.-])\d+(?![\w.-])", prompt))
        self.assertIn("Do not spawn subagents", prompt)
        self.assertIn(fixture.artifact, prompt)


def record(index: int, result: dict | None) -> TrialRecord:
    return TrialRecord(index, f"trial-{index}" if result else None, 1 if result else 0, result)


def scored(resolved: bool, *codes: str) -> dict:
    reasons = [{"code": code} for code in codes]
    return {"status": "scored", "resolved": resolved, "reasons": reasons, "exit_code": 0}


def errored(code: str = "agent_exited") -> dict:
    return {"status": "agent_error", "resolved": False, "reasons": [{"code": code}], "exit_code": 3}


class SummaryTest(unittest.TestCase):
    config: ClassVar[dict] = {"trials": 3}

    def test_a_trial_that_never_ran_is_not_run_and_fails_the_set(self):
        summary = summarize(
            self.config, [record(1, scored(True)), record(2, scored(True)), record(3, None)]
        )
        self.assertEqual((summary["trials_scored"], summary["resolved"]), (2, 2))
        self.assertEqual(summary["failures"], {"not_run": 1})
        self.assertEqual(summary["exit_code"], 1)

    def test_reasons_count_trials_not_occurrences(self):
        records = [record(1, scored(False, "wrong_answer", "wrong_answer", "unsourced_answer"))]
        summary = summarize({"trials": 1}, records)
        self.assertEqual(summary["failures"], {"unsourced_answer": 1, "wrong_answer": 1})
        self.assertIsNone(summary["failure_accounting"])  # no failure injected, none judged

    def test_agent_never_run_exits_3_and_an_interrupt_its_signal(self):
        not_run = {
            "status": "agent_not_run",
            "resolved": False,
            "reasons": [{"code": "agent_not_found"}],
        }
        summary = summarize({"trials": 1}, [record(1, not_run)])
        self.assertEqual((summary["exit_code"], summary["trials_scored"]), (3, 0))
        self.assertEqual(
            (summary["trials_errored"], summary["errors"]), (1, {"agent_not_found": 1})
        )
        self.assertEqual(summary["resolve_rate"], None)
        self.assertEqual(summarize({"trials": 1}, [record(1, scored(True))], 15)["exit_code"], 143)

    def test_errored_trials_are_in_none_of_the_estimates(self):
        records = [
            record(1, scored(True)),
            record(2, scored(False, "wrong_answer")),
            record(3, errored("model_calls_failed")),
            record(4, errored("agent_exited")),
        ]
        summary = summarize({"trials": 4}, records)
        self.assertEqual((summary["trials_scored"], summary["resolved"]), (2, 1))
        self.assertEqual(summary["trials_errored"], 2)
        self.assertEqual(summary["resolve_rate"], 0.5)
        # Wilson's interval for 1 of 2, and pass^k only up to k = n = 2.
        self.assertEqual(summary["resolve_rate_ci95"], list(wilson_interval(1, 2)))
        self.assertEqual(summary["pass_hat_k"], {"1": 0.5, "2": 0.0})
        self.assertEqual(summary["failures"], {"wrong_answer": 1})
        self.assertEqual(summary["errors"], {"agent_exited": 1, "model_calls_failed": 1})
        self.assertEqual(summary["exit_code"], 1)  # a scored trial did not resolve

    def test_cost_has_a_median_and_a_cost_per_resolved_trial(self):
        def costing(result: dict, dollars) -> dict:
            return dict(result, verdict={"efficiency": {"total_cost_usd": dollars}})

        records = [
            record(1, costing(scored(True), 0.5)),
            record(2, costing(scored(False, "wrong_answer"), 0.25)),
            record(3, costing(scored(True), 1.5)),
            record(4, costing(errored(), 9.0)),  # errored: in no estimate
        ]
        summary = summarize({"trials": 4}, records)
        self.assertEqual(summary["cost_usd"], {"n": 3, "median": 0.5, "min": 0.25, "max": 1.5})
        # $2.25 for the three scored trials, 2 of them resolved: the failure's cost is counted.
        self.assertEqual(summary["cost_per_resolved_usd"], 1.125)
        self.assertEqual([row["cost_usd"] for row in summary["trials"]], [0.5, 0.25, 1.5, 9.0])
        # A scored trial that said no cost leaves the per-resolved cost unknown, not flattered;
        # so does a set with nothing resolved.
        records[1] = record(2, costing(scored(False), None))
        self.assertIsNone(summarize({"trials": 4}, records)["cost_per_resolved_usd"])
        failed = [record(1, costing(scored(False), 0.5))]
        self.assertIsNone(summarize({"trials": 1}, failed)["cost_per_resolved_usd"])

    def test_an_errored_or_interrupted_attempt_is_run_again(self):
        self.assertTrue(is_done(Attempt(1, 0, "trial-1", scored(False))))
        self.assertFalse(is_done(Attempt(1, 0, "trial-1", errored())))
        self.assertFalse(is_done(Attempt(1, 0, "trial-1", dict(scored(False), interrupted=True))))

    def test_the_accounting_rate_counts_the_trials_that_judged_it(self):
        def injected(resolved: bool, accounted: bool | None) -> dict:
            return {**scored(resolved, "wrong_answer"), "failure_accounted": accounted}

        records = [
            record(1, injected(False, True)),
            record(2, injected(False, True)),
            record(3, injected(True, True)),
            record(4, injected(False, False)),
            # A worker with no shard judges nothing; an errored trial is no estimate's.
            record(5, injected(False, None)),
            record(6, errored()),
        ]
        summary = summarize({"trials": len(records)}, records)
        low, high = wilson_interval(3, 4)
        self.assertEqual(
            summary["failure_accounting"],
            {"trials": 4, "accounted": 3, "rate": 0.75, "rate_ci95": [low, high]},
        )
        self.assertEqual(
            [trial["failure_accounted"] for trial in summary["trials"]],
            [True, True, True, False, None, None],
        )


if __name__ == "__main__":
    unittest.main()
