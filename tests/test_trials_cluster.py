"""Run sets as a batch scheduler drives them, end to end with the simulated agent: one
trial at a time by `--trial-index`, `--resume` after a killed trial or a changed setting, and a
run set ended by SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

from tests.runner_case import (
    RUNNER,
    SIMULATED,
    RunSetCase,
    StderrLines,
    past_the_same_interrupt,
    two_shard_fixture,
    without_timings,
)


class BatchSchedulerTest(RunSetCase):
    def test_resume_after_a_killed_trial_gives_the_uninterrupted_summary(self):
        _, uninterrupted = self.runner(
            "--trials", "3", "--jobs", "3", "--run-set", os.path.join(self.tmp, "a")
        )
        set_dir = os.path.join(self.tmp, "b")
        for index in ("1", "3"):
            self.runner("--trials", "3", "--run-set", set_dir, "--trial-index", index)
        # What a trial killed mid-run leaves: its dir, some of the agent's files, no result.
        os.makedirs(os.path.join(set_dir, "trial-2", "sessions"))
        done, resumed = self.runner("--resume", set_dir, model=None, fixture=None)
        self.assertEqual(
            sorted(self.trial_results(set_dir)), ["trial-1", "trial-2-retry1", "trial-3"]
        )
        self.assertTrue(os.path.isdir(os.path.join(set_dir, "trial-2", "sessions")))
        self.assertEqual(resumed["trials"][1]["dir"], "trial-2-retry1")
        self.assertEqual(resumed["trials"][1]["attempts"], 2)
        for summary in (uninterrupted, resumed):
            for trial in summary["trials"]:
                trial.pop("dir"), trial.pop("attempts")
            summary["run_set"].pop("jobs")
        self.assertEqual(without_timings(resumed), without_timings(uninterrupted))
        self.assertIn(b"trial 2/3 started", done.stderr)
        self.assertNotIn(b"trial 1/3 started", done.stderr)

    def test_resume_refuses_a_changed_fixture_and_another_model(self):
        fixture = os.path.join(self.tmp, "fixture")
        shutil.copytree(two_shard_fixture(), fixture)
        set_dir = os.path.join(self.tmp, "set")
        self.runner("--trials", "2", "--run-set", set_dir, "--trial-index", "1", fixture=fixture)
        done, _ = self.runner("--resume", set_dir, model="simulated/oracle", fixture=None)
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"model: stored 'simulated/flaky', now 'simulated/oracle'", done.stderr)
        with open(os.path.join(fixture, "shards", "events-01.jsonl"), "a", encoding="utf-8") as f:
            f.write("\n")
        done, refused = self.runner("--resume", set_dir, model=None, fixture=None)
        self.assertEqual((done.returncode, refused["exit_code"]), (2, 2))
        self.assertEqual(refused["reasons"][0]["code"], "run_set_settings_differ")
        self.assertIn(b"fixture_digest: stored", done.stderr)
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-1"])

    def test_a_run_set_keeps_its_injected_failures_and_refuses_a_resume_with_other_ones(self):
        set_dir = os.path.join(self.tmp, "set")
        inject = ("--inject-failure", "worker-events-01:2")
        done, result = self.runner(
            "--trials", "2", "--run-set", set_dir, "--trial-index", "1", *inject
        )
        self.assertIn(done.returncode, (0, 1))
        with open(os.path.join(set_dir, "run-set.json"), encoding="utf-8") as handle:
            stored = json.load(handle)
        self.assertEqual(stored["inject_failure"], [{"worker": "worker-events-01", "calls": 2}])
        self.assertEqual(result["injected_failures"]["asked"], stored["inject_failure"])
        for other in (("--inject-failure", "worker-events-02"), inject * 2):
            done, refused = self.runner("--resume", set_dir, *other, model=None, fixture=None)
            self.assertEqual(done.returncode, 2, other)
            self.assertEqual(refused["reasons"][0]["code"], "run_set_settings_differ")
            self.assertIn(b"--inject-failure: stored worker-events-01:2, now", done.stderr)
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-1"])
        # Without the flag, the resume's trial is injected as the stored set says.
        done, _ = self.runner("--resume", set_dir, model=None, fixture=None)
        self.assertIn(done.returncode, (0, 1))
        trial = self.trial_results(set_dir)["trial-2"]
        self.assertEqual(trial["injected_failures"]["asked"], stored["inject_failure"])

    def test_a_trial_index_past_a_new_run_set_of_one_trial_names_trials(self):
        set_dir = os.path.join(self.tmp, "set")
        done, refused = self.runner("--run-set", set_dir, "--trial-index", "3")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(refused["reasons"][0]["code"], "trial_index_out_of_range")
        self.assertIn(
            "--trial-index 3 is outside 1..1 (the run set's --trials K",
            refused["reasons"][0]["message"],
        )
        self.assertFalse(os.path.exists(set_dir))

    def test_trial_index_runs_exactly_that_trial_and_once(self):
        set_dir = os.path.join(self.tmp, "set")
        done, result = self.runner("--trials", "3", "--run-set", set_dir, "--trial-index", "2")
        self.assertIn(done.returncode, (0, 1))
        self.assertEqual(result["trial"], {"index": 2, "run_set": os.path.realpath(set_dir)})
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-2"])
        again, stored = self.runner(
            "--run-set", set_dir, "--trial-index", "2", model=None, fixture=None
        )
        self.assertEqual((again.returncode, stored), (done.returncode, result))
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-2"])
        refused, _ = self.runner(
            "--run-set", set_dir, "--trial-index", "4", model=None, fixture=None
        )
        self.assertEqual(refused.returncode, 2)

    def test_sigterm_ends_the_running_trials_starts_no_more_and_still_summarizes(self):
        set_dir = os.path.join(self.tmp, "set")
        argv = [
            sys.executable,
            RUNNER,
            "--agent-bin",
            SIMULATED,
            "--agent-config",
            self.agent_config,
        ]
        argv += ["--fixture", two_shard_fixture(), "--model", "simulated/hang", "--timeout", "60"]
        # The hanging trials' grandchildren ignore SIGTERM: each trial waits out its grace.
        argv += ["--grace", "0.1"]
        runner = subprocess.Popen(
            [*argv, "--trials", "3", "--jobs", "2", "--run-set", set_dir],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.addCleanup(runner.wait, 60)
        ledgers = [os.path.join(set_dir, f"trial-{n}", "agent-home", "rlm-ledger") for n in (1, 2)]
        deadline = time.monotonic() + 60
        while not all(os.path.isdir(path) and os.listdir(path) for path in ledgers):
            self.assertLess(time.monotonic(), deadline, "the hanging trials never spawned")
            time.sleep(0.05)
        runner.send_signal(signal.SIGTERM)
        out, err = runner.communicate(timeout=60)
        summary = json.loads(out)
        self.assertEqual((runner.returncode, summary["exit_code"]), (143, 143))
        results = self.trial_results(set_dir)
        self.assertEqual(sorted(results), ["trial-1", "trial-2"])
        for result in results.values():
            self.assertTrue(result["interrupted"])
            self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        self.assertEqual(summary["failures"]["interrupted"], 2)
        self.assertEqual(summary["failures"]["not_run"], 1)
        self.assertEqual(summary["trials_scored"], 0)
        # What to do next: the resume command, with the flags run-set.json does not keep.
        *_, resume, report = err.decode().splitlines()
        resume_command = f"runner.py --resume {set_dir} --jobs 2 --grace 0.1"
        self.assertTrue(
            resume.endswith(
                f"3 of 3 trials not done, to run them: uv run --locked python {resume_command}"
            ),
            resume,
        )
        self.assertIn("interrupted; ", resume)
        self.assertTrue(report.endswith(f"report.py {set_dir}"), report)

    def start_hanging_set(self, grace: str) -> tuple[str, subprocess.Popen]:
        """A run set of two hanging trials, two at a time, in its own process group as a
        terminal's job is, once both trials' children have spawned."""
        set_dir = os.path.join(self.tmp, "set")
        argv = [sys.executable, RUNNER, "--agent-bin", SIMULATED, "--agent-config"]
        argv += [self.agent_config, "--fixture", two_shard_fixture(), "--model", "simulated/hang"]
        argv += ["--timeout", "3600", "--grace", grace, "--trials", "2", "--jobs", "2"]
        runner = subprocess.Popen(
            [*argv, "--run-set", set_dir],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.addCleanup(runner.wait, 120)
        ledgers = [os.path.join(set_dir, f"trial-{n}", "agent-home", "rlm-ledger") for n in (1, 2)]
        deadline = time.monotonic() + 120  # a guard against a hang, not a measure
        while not all(os.path.isdir(path) and os.listdir(path) for path in ledgers):
            self.assertLess(time.monotonic(), deadline, "the hanging trials never spawned")
            time.sleep(0.05)
        return set_dir, runner

    def test_each_ctrl_c_at_the_terminal_reaches_each_trial_once(self):
        """Ctrl-C as a terminal sends it, to the run set's process group: the trials, in
        sessions of their own, hear each press once, passed on by the run set. The first
        ends their trees with a grace no run waits out (an hour), the second at once."""
        set_dir, runner = self.start_hanging_set(grace="3600")
        os.killpg(runner.pid, signal.SIGINT)
        lines = StderrLines(runner)
        said = [lines.first_with(b"a second Ctrl-C ends it now") for _ in range(3)]
        self.assertIn(
            "runner.py: SIGINT: ending the 2 trials running; no new trial starts; a second "
            "Ctrl-C ends it now",
            said,
        )
        for n in (1, 2):
            self.assertTrue(any(f"processes of trial {n}/2 " in line for line in said), said)
        past_the_same_interrupt(time.monotonic())
        os.killpg(runner.pid, signal.SIGINT)
        out, err = runner.communicate(timeout=120)
        summary = json.loads(out)
        self.assertEqual((runner.returncode, summary["exit_code"]), (130, 130))
        # One "again" from the run set and one from each trial: no trial heard a press twice.
        again = [line for line in err.decode().splitlines() if "SIGINT again" in line]
        self.assertEqual(len(again), 3, again)
        for result in self.trial_results(set_dir).values():
            self.assertTrue(result["interrupted"])
            self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_a_hang_up_of_the_run_set_ends_its_trials(self):
        """A closed terminal hangs up the run set's runner; its trials, in sessions of their
        own, hear it from the run set and end their trees: none outlives it."""
        set_dir, runner = self.start_hanging_set(grace="0.1")
        os.kill(runner.pid, signal.SIGHUP)
        out, _ = runner.communicate(timeout=120)
        self.assertEqual((runner.returncode, json.loads(out)["exit_code"]), (129, 129))
        results = self.trial_results(set_dir)
        self.assertEqual(len(results), 2)
        for result in results.values():
            self.assertTrue(result["interrupted"])
            self.assertEqual(result["cleanup"]["leaked_processes"], 0)

    def test_a_zero_based_index_is_refused_before_anything_is_written(self):
        set_dir = os.path.join(self.tmp, "set")
        done, _ = self.runner("--trials", "6", "--run-set", set_dir, "--trial-index", "0")
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"--trial-index 0 is outside 1..6", done.stderr)
        self.assertIn(b"--trial-index $((INDEX + 1))", done.stderr)
        self.assertFalse(os.path.exists(set_dir))
        # One past the end is refused as early, and a stored set's K is the bound.
        done, _ = self.runner("--trials", "6", "--run-set", set_dir, "--trial-index", "7")
        self.assertEqual((done.returncode, os.path.exists(set_dir)), (2, False))
        self.runner("--trials", "2", "--run-set", set_dir, "--trial-index", "1")
        done, _ = self.runner("--run-set", set_dir, "--trial-index", "0", model=None, fixture=None)
        self.assertEqual(done.returncode, 2)
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-1"])

    def test_a_trials_that_disagrees_with_the_stored_set_is_refused_with_the_difference(self):
        set_dir = os.path.join(self.tmp, "set")
        self.runner("--trials", "2", "--run-set", set_dir, "--trial-index", "1")
        done, _ = self.runner("--trials", "5", "--run-set", set_dir, "--trial-index", "2")
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"trials: stored 2, now 5", done.stderr)
        done, _ = self.runner("--trials", "5", "--resume", set_dir, model=None, fixture=None)
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"trials: stored 2, now 5", done.stderr)
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-1"])
        # The same K, or none, is the set's own.
        done, result = self.runner("--trials", "2", "--run-set", set_dir, "--trial-index", "2")
        self.assertEqual(result["trial"]["index"], 2)
        done, summary = self.runner("--resume", set_dir, model=None, fixture=None)
        self.assertEqual(summary["trials_scored"], 2)


if __name__ == "__main__":
    unittest.main()
