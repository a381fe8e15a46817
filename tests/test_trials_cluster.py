"""Run sets as a batch scheduler drives them, end to end with the simulated agent: one
trial at a time by `--trial-index`, `--resume` refused after a changed setting, and a run set
ended by SIGTERM, Ctrl-C or a hang-up. The refusals share one stored set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

from swarm_fanout.evidence.runsets import load_config
from tests.runner_case import (
    RUNNER,
    SIMULATED,
    RunSetCase,
    StderrLines,
    past_the_same_interrupt,
    two_shard_fixture,
)

# The set the tests of a stored run set share: trial 2 of 2, injected, run by --trial-index.
STORED_SET = ("--trials", "2", "--run-set", "set", "--trial-index", "2")
INJECT = ("--inject-failure", "worker-events-01:2")


class BatchSchedulerTest(RunSetCase):
    def stored_set(self) -> tuple[str, subprocess.CompletedProcess, dict]:
        """The shared run set's dir (run in its own temp dir; tests only read it), and how its
        trial's run ended and the result it printed."""
        shared = self.shared_run("simulated/flaky", None, *STORED_SET, *INJECT)
        self.assertIn(shared.done.returncode, (0, 1))
        return os.path.join(shared.tmp, "set"), shared.done, shared.result

    def assert_refused(self, set_dir: str, *args: str, said: bytes, **flags) -> dict:
        """runner.py with `args` on the stored set exits 2 saying `said`, and writes nothing."""
        done, refused = self.runner(*args, **{"model": None, "fixture": None, **flags})
        self.assertEqual(done.returncode, 2, args)
        self.assertIn(said, done.stderr)
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-2"])
        return refused

    def test_resume_refuses_a_changed_fixture_and_another_model(self):
        set_dir, _, _ = self.stored_set()
        said = b"model: stored 'simulated/flaky', now 'simulated/oracle'"
        self.assert_refused(set_dir, "--resume", set_dir, said=said, model="simulated/oracle")
        # The stored fixture edited in place, and put back as it was when the test ends.
        shard = os.path.join(two_shard_fixture(), "shards", "events-01.jsonl")
        with open(shard, "rb") as handle:
            kept = handle.read()
        self.addCleanup(Path(shard).write_bytes, kept)
        with open(shard, "a", encoding="utf-8") as handle:
            handle.write("\n")
        refused = self.assert_refused(set_dir, "--resume", set_dir, said=b"fixture_digest: stored")
        self.assertEqual(refused["exit_code"], 2)
        self.assertEqual(refused["reasons"][0]["code"], "run_set_settings_differ")

    def test_a_run_set_keeps_its_injected_failures_and_refuses_a_resume_with_other_ones(self):
        set_dir, _, result = self.stored_set()
        stored = load_config(set_dir)
        self.assertEqual(stored["inject_failure"], [{"worker": "worker-events-01", "calls": 2}])
        self.assertEqual(result["injected_failures"]["asked"], stored["inject_failure"])
        said = b"--inject-failure: stored worker-events-01:2, now"
        for other in (("--inject-failure", "worker-events-02"), INJECT * 2):
            refused = self.assert_refused(set_dir, "--resume", set_dir, *other, said=said)
            self.assertEqual(refused["reasons"][0]["code"], "run_set_settings_differ")
        # Without the flag, a resume's trial is injected as the stored set says.
        copied = self.copied_set(set_dir, "trial-2")
        done, _ = self.runner("--resume", copied, model=None, fixture=None)
        self.assertIn(done.returncode, (0, 1))
        trial = self.trial_results(copied)["trial-1"]
        self.assertEqual(trial["injected_failures"]["asked"], stored["inject_failure"])

    def test_trial_index_runs_exactly_that_trial_and_once(self):
        set_dir, done, result = self.stored_set()
        self.assertEqual(result["trial"], {"index": 2, "run_set": os.path.realpath(set_dir)})
        self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-2"])
        # Run again, with the set's own K or none: its stored result, and nothing run.
        for trials in ((), ("--trials", "2")):
            again, stored = self.runner(
                *trials, "--run-set", set_dir, "--trial-index", "2", model=None, fixture=None
            )
            self.assertEqual((again.returncode, stored), (done.returncode, result))
            self.assertEqual(sorted(os.listdir(set_dir)), ["run-set.json", "trial-2"])
        # The stored set's K is the bound.
        self.assert_refused(set_dir, "--run-set", set_dir, "--trial-index", "3", said=b"1..2")

    def test_an_index_outside_the_run_set_is_refused_before_anything_is_written(self):
        set_dir = os.path.join(self.tmp, "set")
        done, _ = self.runner("--trials", "6", "--run-set", set_dir, "--trial-index", "0")
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"--trial-index 0 is outside 1..6", done.stderr)
        self.assertIn(b"--trial-index $((INDEX + 1))", done.stderr)
        done, _ = self.runner("--trials", "6", "--run-set", set_dir, "--trial-index", "7")
        self.assertEqual(done.returncode, 2)
        # Without --trials a new run set has one trial, and the refusal names the flag.
        done, refused = self.runner("--run-set", set_dir, "--trial-index", "3")
        self.assertEqual(done.returncode, 2)
        self.assertEqual(refused["reasons"][0]["code"], "trial_index_out_of_range")
        said = "--trial-index 3 is outside 1..1 (the run set's --trials K"
        self.assertIn(said, refused["reasons"][0]["message"])
        self.assertFalse(os.path.exists(set_dir))
        stored, _, _ = self.stored_set()
        self.assert_refused(stored, "--run-set", stored, "--trial-index", "0", said=b"0 is outside")

    def test_a_trials_that_disagrees_with_the_stored_set_is_refused_with_the_difference(self):
        set_dir, _, _ = self.stored_set()
        said = b"trials: stored 2, now 5"
        self.assert_refused(
            set_dir, "--trials", "5", "--run-set", set_dir, "--trial-index", "1", said=said
        )
        self.assert_refused(set_dir, "--trials", "5", "--resume", set_dir, said=said)

    def start_hanging_set(self, grace: str, trials: str = "2") -> tuple[str, subprocess.Popen]:
        """A run set of hanging trials, two at a time, in its own process group as a
        terminal's job is, once the first two trials' children have spawned."""
        set_dir = os.path.join(self.tmp, "set")
        argv = [sys.executable, RUNNER, "--agent-bin", SIMULATED, "--agent-config"]
        argv += [self.agent_config, "--fixture", two_shard_fixture(), "--model", "simulated/hang"]
        argv += ["--timeout", "3600", "--grace", grace, "--trials", trials, "--jobs", "2"]
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

    def ended_set(self, set_dir: str, runner: subprocess.Popen, code: int) -> tuple[dict, str]:
        """The run set's summary and stderr once it exited with `code`: its two running trials
        were interrupted and left no process behind."""
        out, err = runner.communicate(timeout=120)
        summary = json.loads(out)
        self.assertEqual((runner.returncode, summary["exit_code"]), (code, code))
        results = self.trial_results(set_dir)
        self.assertEqual(sorted(results), ["trial-1", "trial-2"])
        for result in results.values():
            self.assertTrue(result["interrupted"])
            self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        return summary, err.decode()

    def test_sigterm_ends_the_running_trials_starts_no_more_and_still_summarizes(self):
        # The hanging trials' grandchildren ignore SIGTERM: each trial waits out its grace.
        set_dir, runner = self.start_hanging_set(grace="0.1", trials="3")
        runner.send_signal(signal.SIGTERM)
        summary, err = self.ended_set(set_dir, runner, 143)
        self.assertEqual(summary["failures"]["interrupted"], 2)
        self.assertEqual(summary["failures"]["not_run"], 1)
        self.assertEqual(summary["trials_scored"], 0)
        # What to do next: the resume command, with the flags run-set.json does not keep.
        *_, resume, report = err.splitlines()
        resume_command = f"runner.py --resume {set_dir} --jobs 2 --grace 0.1"
        self.assertTrue(
            resume.endswith(
                f"3 of 3 trials not done, to run them: uv run --locked python {resume_command}"
            ),
            resume,
        )
        self.assertIn("interrupted; ", resume)
        self.assertTrue(report.endswith(f"report.py {set_dir}"), report)

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
        _, err = self.ended_set(set_dir, runner, 130)
        # One "again" from the run set and one from each trial: no trial heard a press twice.
        again = [line for line in err.splitlines() if "SIGINT again" in line]
        self.assertEqual(len(again), 3, again)

    def test_a_hang_up_of_the_run_set_ends_its_trials(self):
        """A closed terminal hangs up the run set's runner; its trials, in sessions of their
        own, hear it from the run set and end their trees: none outlives it."""
        set_dir, runner = self.start_hanging_set(grace="0.1")
        os.kill(runner.pid, signal.SIGHUP)
        self.ended_set(set_dir, runner, 129)


if __name__ == "__main__":
    unittest.main()
