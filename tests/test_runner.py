"""runner.py's own lines and judgements without a run: the one-line verdicts, progress, the
agent's stderr tail, the agent-error triage on builder-made runs, the agent's environment.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import unittest

from swarm_fanout import report, runner
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.witness import Witness
from swarm_fanout.reporting import terminal
from swarm_fanout.rules import triage
from swarm_fanout.shell import launch, regrade, rundir
from swarm_fanout.shell.run_config import INJECTED_CALLS
from swarm_fanout.shell.trial_result import Outcome, Refusal, RunRecord, TrialResult
from swarm_fanout.shell.watch import Progress
from tests import executable, temp_dir
from tests.builders import RunBuilder


class TriageTest(unittest.TestCase):
    """The agent-error rule (triage.agent_error) on run dirs the builders write."""

    def setUp(self) -> None:
        self.root = os.path.join(temp_dir(self), "run")
        os.mkdir(self.root)

    def triage(self, *calls: int, **ended) -> dict | None:
        """The rule on the run dir as it is, with the proxy's record of `calls` (statuses),
        after an agent that exited 0 on its own unless `ended` says otherwise."""
        run = collect(self.root, None)
        if calls:
            witnessed = tuple({"status": status, "error": None} for status in calls)
            run = run._replace(witness=Witness(None, {"proxy": True}, witnessed))
        how = {"exit_code": 0, "timed_out": False, "interrupted": False, "stderr_tail": None}
        return triage.agent_error(run, triage.AgentEnd(**{**how, **ended}))

    def test_a_parent_whose_every_call_failed_is_an_agent_error_in_the_first_error(self):
        builder = RunBuilder(self.root)
        builder.failed_call("401 invalid x-api-key")
        builder.failed_call("401 invalid x-api-key")
        message = "every model call failed, the first with: 401 invalid x-api-key"
        self.assertEqual(self.triage(), {"code": "model_calls_failed", "message": message})

    def test_a_model_that_answered_once_is_the_models_run_however_it_ended(self):
        builder = RunBuilder(self.root)
        builder.failed_call()
        builder.assistant("Looking at the shards.")
        self.assertIsNone(self.triage(exit_code=1, stderr_tail="crashed"))

    def test_an_agent_that_exited_without_a_transcript_is_an_agent_error(self):
        message = "the agent exited 1 before any model call was answered: no model"
        error = self.triage(exit_code=1, stderr_tail="no model")
        self.assertEqual(error, {"code": "agent_exited", "message": message})

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
        self.home = temp_dir(self)

    def venv_python(self, *parts: str) -> str:
        python = os.path.join(self.home, *parts, "kernel-venv", "bin", "python")
        os.makedirs(os.path.dirname(python))
        executable(python, "#!/bin/sh\n")
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


class SummaryLineTest(unittest.TestCase):
    """The one-line verdicts on stderr, for the branches a simulated run seldom takes."""

    def result(self, **changes) -> dict:
        """A result.json failing two criteria, with two reasons twice each, unless changed."""
        verdict = dict(coverage=True, delegation_evidence=False, dedup=True, receipts=False)
        verdict["efficiency"] = {"total_turns": 12, "total_tokens": 45210}
        reasons = [{"code": "missing_receipt"}, {"code": "timeout"}] * 2
        result = dict(resolved=False, exit_code=1, reasons=reasons, verdict=verdict)
        return {**result, "cleanup": {"leaked_processes": 0}, **changes}

    def set_summary(self, **changes) -> dict:
        """A run set's summary.json, of four trials scored and one resolved unless changed."""
        summary = {
            "trials_scored": 4, "trials_planned": 4, "resolved": 1,
            "resolve_rate_ci95": [0.046, 0.699], "exit_code": 1, "trials_errored": 0,
            "failures": {}, "errors": {},
        }  # fmt: skip
        return summary | changes

    def test_each_criterion_reason_count_and_the_calls_are_named(self):
        line = terminal.summary_line(self.result())
        self.assertEqual(
            line,
            "NOT resolved (exit 1); coverage ok, delegation_evidence FAILED, dedup ok, "
            "receipts FAILED; reasons: missing_receipt x2, timeout x2; "
            "12 turns, 45,210 tokens",
        )

    def test_the_cost_is_said_when_the_product_priced_the_calls(self):
        result = self.result()
        result["verdict"]["efficiency"]["total_cost_usd"] = 1.2345
        self.assertIn("12 turns, 45,210 tokens, $1.23", terminal.summary_line(result))
        result["verdict"]["efficiency"]["total_cost_usd"] = 0
        self.assertIn("45,210 tokens", terminal.summary_line(result))
        self.assertNotIn("$", terminal.summary_line(result))

    def test_a_baseline_a_contract_check_and_leaked_processes_are_said(self):
        result = self.result(baseline=True, contract_check="fail", reasons=[])
        result["cleanup"]["leaked_processes"] = 2
        line = terminal.summary_line(result, os.path.join(os.sep, "elsewhere", "result.json"))
        self.assertEqual(
            line,
            "NOT resolved (exit 1); contract check fail; baseline, judged on coverage: ok; "
            f"12 turns, 45,210 tokens; 2 leaked processes; result in "
            f"{os.path.join(os.sep, 'elsewhere', 'result.json')}",
        )

    def test_a_run_set_line_counts_failures_most_first(self):
        failures = {"not_run": 1, "missing_receipt": 3, "dedup": 3}
        summary = self.set_summary(trials_planned=5, failures=failures)
        line = terminal.set_summary_line(summary, os.path.join(os.getcwd(), "set", "summary.json"))
        self.assertEqual(
            line,
            "run set: 1/4 scored trials resolved (25%, 95% CI 5%-70%), 5 planned; exit 1; "
            "failures: dedup x3, missing_receipt x3, not_run x1; "
            f"summary in {os.path.join('set', 'summary.json')}",
        )

    def test_under_injected_failures_the_line_leads_with_the_accounting(self):
        rows = [
            {"worker": "worker-a", "accounted": True, "how": "marked: MISSING (x)"},
            {"worker": "worker-b", "accounted": False, "how": "a number no child reported (7)"},
        ]
        for accounted, said in ((True, "accounted for"), (False, "NOT accounted for")):
            with self.subTest(accounted=accounted):
                result = self.result(
                    failure_accounted=accounted, injected_failures={"accounting": rows}
                )
                self.assertTrue(
                    terminal.summary_line(result).startswith(
                        f"injected failure {said} (worker-a: marked: MISSING (x); worker-b: a "
                        "number no child reported (7)); NOT resolved (exit 1); "
                    )
                )

    def test_a_run_set_line_gives_the_accounting_rate_beside_the_resolve_rate(self):
        summary = self.set_summary(
            resolved=0,
            resolve_rate_ci95=[0.0, 0.49],
            failure_accounting={"trials": 4, "accounted": 3, "rate_ci95": [0.3, 0.954]},
            failures={"wrong_answer": 4},
        )
        self.assertEqual(
            terminal.set_summary_line(summary, None),
            "run set: 0/4 scored trials resolved (0%, 95% CI 0%-49%); injected failure "
            "accounted for in 3/4 (75%, 95% CI 30%-95%), 4 planned; exit 1; "
            "failures: wrong_answer x4",
        )

    def test_a_run_set_with_nothing_scored_has_no_rate(self):
        summary = self.set_summary(
            trials_scored=0,
            trials_planned=2,
            resolved=0,
            resolve_rate_ci95=[None, None],
            exit_code=3,
            failures={"not_run": 2},
        )
        line = terminal.set_summary_line(summary, os.path.join(os.getcwd(), "summary.json"))
        self.assertTrue(line.startswith("run set: 0/0 scored trials resolved, 2 planned; exit 3"))

    def test_a_run_set_line_counts_errored_trials_apart(self):
        summary = self.set_summary(
            trials_scored=2,
            trials_planned=3,
            resolved=2,
            resolve_rate_ci95=[0.342, 1.0],
            exit_code=3,
            trials_errored=1,
            errors={"agent_exited": 1},
        )
        self.assertEqual(
            terminal.set_summary_line(summary, None),
            "run set: 2/2 scored trials resolved (100%, 95% CI 34%-100%), 1 errored (not "
            "counted), 3 planned; exit 3; errors: agent_exited x1",
        )

    def test_the_root_cause_is_named_before_what_it_caused(self):
        codes = ("timeout", "child_did_no_work", "missing_receipt", "child_did_no_work")
        line = terminal.summary_line(self.result(reasons=[{"code": code} for code in codes]))
        self.assertIn("; reasons: timeout, child_did_no_work x2, missing_receipt; ", line)

    def test_an_agent_error_gives_the_agents_own_words_and_not_the_models_failure(self):
        said = "the agent exited 1 before any model call was answered: no API key"
        result = self.result(
            status="agent_error", exit_code=3, reasons=[{"code": "agent_exited", "message": said}]
        )
        self.assertEqual(
            terminal.summary_line(result, os.path.join(os.sep, "r", "result.json")),
            f"agent error (exit 3): agent_exited: {said}; not scored as the model's failure; "
            f"result in {os.path.join(os.sep, 'r', 'result.json')}",
        )


class NextStepTest(unittest.TestCase):
    """What the last stderr lines say to do next: copyable commands, paths near the cwd."""

    def summary(self, exit_code: int, *scored: bool) -> dict:
        trials = [{"index": n, "scored": done} for n, done in enumerate(scored, 1)]
        return {"trials": trials, "trials_planned": len(trials), "exit_code": exit_code}

    def test_a_run_that_did_not_resolve_is_pointed_at_its_evidence_page(self):
        self.assertEqual(
            terminal.evidence_hint(os.path.join(os.getcwd(), "runs", "json-events-x")),
            "why, criterion by criterion: uv run --locked python report.py runs/json-events-x",
        )

    def test_an_interrupted_run_set_names_its_resume_command_and_its_report(self):
        steps = terminal.set_next_steps(self.summary(130, True, False, False), "/data/runs/a b", [])
        self.assertEqual(
            steps,
            [
                "interrupted; 2 of 3 trials not done, to run them: "
                "uv run --locked python runner.py --resume '/data/runs/a b'",
                "its report: uv run --locked python report.py '/data/runs/a b'",
            ],
        )

    def test_errored_trials_are_left_to_a_resume_and_a_finished_set_only_to_its_report(self):
        (resume, _) = terminal.set_next_steps(self.summary(3, True, False), "/s", ["--jobs", "2"])
        self.assertEqual(
            resume,
            "1 of 2 trials not done, to run them: "
            "uv run --locked python runner.py --resume /s --jobs 2",
        )
        self.assertEqual(
            terminal.set_next_steps(self.summary(1, True, True), "/s", []),
            ["its report: uv run --locked python report.py /s"],
        )

    def test_a_resume_is_given_the_flags_run_set_json_does_not_keep(self):
        kept = ["--jobs", "2", "--grace", "0.1", "--upstream", "http://127.0.0.1:9"]
        given = ["--fixture", "f", "--model", "simulated/oracle", "--trials", "3"]
        config = runner.parse_args([*given, *kept, "--no-sandbox", "--inject-failure", "w-1"])
        # run-set.json keeps the injection (and the fixture, model and trials).
        self.assertEqual(config.flags(*runner.RESUME_FLAGS), [*kept, "--no-sandbox"])
        injected = ["--inject-failure", f"w-1:{INJECTED_CALLS}"]
        self.assertEqual(config.flags("inject_failure"), injected)


class MisspeltFlagTest(unittest.TestCase):
    """A flag typo is refused as argparse refuses it (usage, exit 2), naming the flag meant."""

    def refused(self, main, *argv: str) -> str:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as raised:
            main(list(argv))
        self.assertEqual(raised.exception.code, 2)
        return err.getvalue().splitlines()[-1]

    def test_each_program_names_the_flag_a_typo_meant(self):
        said = self.refused(runner.main, "--fixtrue", "fixtures/json-events")
        self.assertTrue(said.endswith("--fixtrue fixtures/json-events (did you mean --fixture?)"))
        said = self.refused(regrade.main, "--froce", "runs")
        self.assertTrue(said.endswith("(did you mean --force?)"), said)
        said = self.refused(report.main, "--comapre", "a", "b")
        self.assertTrue(said.endswith("(did you mean --compare?)"), said)

    def test_a_flag_given_with_its_value_is_matched_on_its_name(self):
        said = self.refused(runner.main, "--modle=anthropic/claude-sonnet-4-5")
        self.assertTrue(said.endswith("(did you mean --model?)"), said)

    def test_a_flag_like_none_gets_no_guess(self):
        said = self.refused(runner.main, "--zzzzz")
        self.assertTrue(said.endswith("unrecognized arguments: --zzzzz"), said)


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


class StderrTailTest(unittest.TestCase):
    """What a crashed agent said, quoted in an agent error."""

    def said(self, text: str) -> str | None:
        path = os.path.join(temp_dir(self), "stderr.txt")
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

    def test_a_long_line_is_cut_at_a_word_and_says_so(self):
        said = self.said("unknown; choose one of " + ", ".join(["behaviour"] * 80) + "\n")
        self.assertTrue(said.endswith("behaviour, … (cut; the whole of it in stderr.txt)"), said)
        self.assertLessEqual(len(said), launch.STDERR_TAIL_CHARS + 50)


class ResultRecordTest(unittest.TestCase):
    """result.json is written from one record (shell/trial_result.py `TrialResult`): every key it
    holds is a field of it, every field a key, in the order the result has always had."""

    def filled(self, record, **given):
        return record(**{name: given.get(name, f"<{name}>") for name in record._fields})

    def keys(self, record, end) -> list[str]:
        return list(TrialResult(record, end).to_json())

    def test_every_field_is_a_key_and_every_key_a_field(self):
        record = self.filled(RunRecord)
        for end_type in (Outcome, Refusal):
            with self.subTest(end=end_type.__name__):
                keys = self.keys(record, self.filled(end_type))
                self.assertEqual(set(keys), set(RunRecord._fields) | set(end_type._fields))

    def test_a_field_not_known_is_not_written_but_an_acp_runs_outstanding_children_are(self):
        record = RunRecord("<harness>", False, "<model>", "<drive>")
        outcome = Outcome(*(f"<{name}>" for name in Outcome._fields[:8]))
        refusal = Refusal("<status>", 2, ())
        self.assertEqual(self.keys(None, refusal), ["status", "resolved", "exit_code", "reasons"])
        self.assertEqual(self.keys(record, outcome), [*record._fields[:4], *outcome._fields[:8]])
        acp = self.keys(record, outcome._replace(acp={"error": None}))
        self.assertEqual(acp[-2:], ["acp", "outstanding_at_response"])

    def test_a_scored_result_keeps_its_order_the_accounting_first(self):
        keys = self.keys(self.filled(RunRecord), self.filled(Outcome))
        self.assertEqual(
            keys,
            ["failure_accounted", "harness", "simulated", "model", "drive", "trial", "baseline",
             "resolved_by", "started_at", "fixture", "agent", "run_dir", "sandbox", "witness",
             "replay", "injected_failures", "status", "resolved", "exit_code", "reasons",
             "interrupted", "cleanup", "finished_at", "resident", "acp", "outstanding_at_response",
             "verdict", "contract_check", "differences"],
        )  # fmt: skip

    def test_what_a_refusal_names_follows_its_exit_code_unless_the_record_has_it(self):
        record = RunRecord("<harness>", False, "<model>", "<drive>", started_at="<t>")
        refusal = Refusal("invalid_fixture", 2, (), model="<model>", fixture={"path": "f"})
        self.assertEqual(
            self.keys(record, refusal),
            ["harness", "simulated", "model", "drive", "started_at", "status", "resolved",
             "exit_code", "fixture", "reasons"],
        )  # fmt: skip
        self.assertEqual(
            self.keys(None, refusal),
            ["status", "resolved", "exit_code", "model", "fixture", "reasons"],
        )


if __name__ == "__main__":
    unittest.main()
