"""End to end through runner.py: an agent that fails on its own, the scripted endpoint, and
invalid input (missing or non-executable agent, broken fixtures, flags, closed pipes).
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path
from unittest import mock

from swarm_fanout import generate, runner
from swarm_fanout.scripted.model import SCRIPTS
from swarm_fanout.shell import regrade
from swarm_fanout.simulated.run import BEHAVIOURS
from tests import executable, runner_server
from tests.runner_case import (
    GRACE,
    JSON_EVENTS,
    ROOT,
    SIMULATED,
    RunnerTestCase,
    two_shard_fixture,
)

NO_KEY = "Error: No API key found for anthropic."


class AgentErrorTest(RunnerTestCase):
    """An agent that fails on its own before the model answers anything is an agent error:
    exit 3 in its own words, not the model's failure (rules/triage.py)."""

    def test_an_agent_that_exits_1_at_once_is_an_agent_error_in_its_own_words_regraded_too(self):
        # As the product does without credentials.
        failing = f"#!/bin/sh\necho '{NO_KEY}' >&2\nexit 1\n"
        argv = self.runner_argv("anthropic/claude-sonnet-4-5")
        argv[argv.index(SIMULATED)] = executable(os.path.join(self.tmp, "failing-agent"), failing)
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertEqual((done.returncode, result["exit_code"]), (3, 3))
        self.assertEqual((result["status"], result["resolved"]), ("agent_error", False))
        message = f"the agent exited 1 before any model call was answered: {NO_KEY}"
        self.assertEqual(result["reasons"], [{"code": "agent_exited", "message": message}])
        self.assertEqual(result["agent"]["first_error"], NO_KEY)
        # What it left is still scored and kept, apart from the result's reasons; with no
        # child to replay, no twins are drawn for one.
        self.assertIn("parent_transcript_missing", self.codes(result["verdict"]))
        with open(os.path.join(self.run_dir(result), "replay.jsonl"), encoding="utf-8") as handle:
            self.assertEqual(json.loads(handle.readline())["twins"], {})
        *_, last, hint = done.stderr.decode().splitlines()
        self.assertTrue(last.startswith("runner.py: agent error (exit 3): agent_exited: "), last)
        self.assertIn(NO_KEY, last)
        command = "runner.py: why, criterion by criterion: uv run --locked python report.py "
        self.assertTrue(hint.startswith(command), hint)
        self.assertTrue(hint.endswith(os.path.basename(self.run_dir(result))), hint)
        # A regrade of it exits 3 with the verdict of its result.
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = regrade.main([result["run_dir"]])
        self.assertEqual(code, 3)
        self.assertEqual(out.getvalue(), json.dumps(result["verdict"], indent=2) + "\n")
        self.assertIn("agent error (exit 3): agent_exited: ", err.getvalue())
        self.assertIn(NO_KEY, err.getvalue())

    def test_the_stand_ins_agent_error_in_the_results_page_is_what_a_run_says(self):
        # docs/results.md's example of an agent that exits before calling the model.
        with open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8") as handle:
            page = " ".join(handle.read().split())
        (model,) = set(re.findall(r'`unknown model "([^"]+)"', page))
        done = self.run_argv(self.runner_argv(model), self.env)
        self.assertEqual(done.returncode, 3, done.stderr.decode()[-2000:])
        result = json.loads(done.stdout)
        self.assertEqual(self.codes(result), ["agent_exited"])
        self.assertIn(f'unknown model "{model}"; behaviours', result["reasons"][0]["message"])


class ScriptedShardLimitTest(RunnerTestCase):
    def test_a_script_refuses_a_fixture_of_more_than_19_shards(self):
        # prime-agent v0.8.0 delivers at most 19 replies to a parent busy in one turn.
        for shards in (20, 19):
            fixtures = Path(self.tmp, f"{shards}-shards")
            generate.write_fixture(
                generate.KINDS_BY_NAME["json-events"], fixtures, shards, generate.DEFAULT_BASE_SEED
            )
            done, result = self.run_runner(
                "scripted/fanout", os.path.join(fixtures, "json-events"), "--timeout", "5"
            )
            if shards == 20:
                self.assertEqual(done.returncode, 2)
                self.assertEqual(result["status"], "invalid_invocation")
                self.assertEqual(self.codes(result), ["too_many_shards_for_script"])
                self.assertFalse(os.path.exists(self.out))
            else:
                # 19 shards are run: exit 3, not 2 (the simulated agent knows no scripted
                # model and exits at once, an agent error).
                self.assertEqual(result["status"], "agent_error")
                self.assertEqual(done.returncode, 3)


class ScriptedModelTest(RunnerTestCase):
    """`--model scripted/<script>`: the runner serves the model to the installed agent."""

    def test_scripted_endpoint_is_served_logged_and_checked(self):
        agent = executable(os.path.join(self.tmp, "calls-the-model"), CALLS_THE_MODEL)
        argv = self.runner_argv("scripted/fanout")
        argv[argv.index(SIMULATED)] = agent
        # A HOME with no kernel venv and no PRIME_AGENT_KERNEL_PYTHON: the runner warns.
        env = {**self.env, "HOME": self.tmp}
        done = self.run_argv(argv, env)
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

    def test_an_unknown_script_is_a_usage_error_naming_the_closest_and_every_script(self):
        done = self.run_argv(self.runner_argv("scripted/no-such-script"), self.env)
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"no script 'no-such-script'", done.stderr)
        self.assertNotIn(b"did you mean", done.stderr)
        done = self.run_argv(self.runner_argv("scripted/fanot"), self.env)
        self.assertEqual(done.returncode, 2)
        said = done.stderr.decode()
        self.assertIn("no script 'fanot'; did you mean scripted/fanout?", said)
        self.assertIn("scripts: " + ", ".join(SCRIPTS), said)

    def test_a_scripted_baseline_is_a_usage_error(self):
        argv = self.runner_argv("scripted/no-spawn", JSON_EVENTS, "--baseline")
        done = self.run_argv(argv, self.env)
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
        self.assertIn("swarm_fanout/simulated/agent.py --model simulated/oracle", message)
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
        result = json.loads(out)
        self.assertEqual((code, result["status"], result["exit_code"]), (3, "agent_not_run", 3))
        self.assertEqual(self.codes(result), ["agent_not_found"])
        self.assertIn("the agent could not be run: ", err)
        self.assertIn("no-such-agent' does not exist", err)
        self.assertFalse(os.path.exists(self.out))

    def run_with_a_closed_pipe(self, model: str, stream: str) -> subprocess.CompletedProcess:
        """A run of `model` with `stream` ("stdout" or "stderr") a pipe nobody reads; the
        other is captured."""
        read_end, write_end = os.pipe()
        os.close(read_end)
        argv = self.runner_argv(model, two_shard_fixture())[2:]
        try:
            run = runner_server.Started(argv, cwd=self.tmp, env=self.env, **{stream: write_end})
        finally:
            os.close(write_end)
        with run:
            out, err = run.communicate(timeout=120)
        return subprocess.CompletedProcess(run.args, run.returncode, out, err)

    def test_a_reader_that_closed_stdout_early_gets_no_traceback_and_the_run_its_code(self):
        # `runner.py ... | head -1`: the pipe is gone before the result is printed.
        done = self.run_with_a_closed_pipe("simulated/oracle", "stdout")
        self.assertEqual(done.returncode, 0)
        self.assertNotIn(b"Traceback", done.stderr)
        (run_dir,) = glob.glob(os.path.join(self.out, "*"))
        with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as handle:
            self.assertTrue(json.load(handle)["resolved"])

    def test_a_closed_stderr_costs_only_the_lines_for_a_person(self):
        # `runner.py ... 2>&1 | head -1`, with stdout kept: stderr is gone before the
        # verdict line is printed.
        # An agent that does nothing: the result is the verdict's, exit code and all.
        done = self.run_with_a_closed_pipe("simulated/nop", "stderr")
        result = json.loads(done.stdout)
        self.assertEqual((done.returncode, result["exit_code"], result["status"]), (1, 1, "scored"))
        self.assertEqual(set(self.codes(result)), {"artifact_missing", "no_spawn"})

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

    def test_an_expected_answer_off_by_one_is_refused_before_a_run_not_scored(self):
        # The oracle would answer right and be failed with wrong_answer: the fixture is
        # wrong, not the model.
        self.assert_invalid(
            lambda data: data["shards"][0].update(expected=data["shards"][0]["expected"] + 1),
            "fixture_answer_wrong",
        )

    # Each broken manifest of tests/data/bad/fixtures goes through runner.py in
    # test_bad_inputs; here, what only the fixture's other files show.
    def test_missing_shard_file_exits_2(self):
        self.assert_invalid(
            lambda data: data["shards"][0].update(file="absent.jsonl"), "fixture_shard_missing"
        )

    def test_agent_version_printed_on_stderr_is_recorded(self):
        # The real CLI prints --version on stderr when stdin is not a terminal.
        agent = executable(
            os.path.join(self.tmp, "stderr-version-agent"),
            '#!/bin/sh\n[ "$1" = --version ] && echo 0.8.0 >&2\nexit 0\n',
        )
        argv = self.runner_argv("anthropic/claude-sonnet-4-5")
        argv[argv.index(SIMULATED)] = agent
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertEqual(result["agent"]["version"], "0.8.0")
        self.assertFalse(result["simulated"])

    def test_a_misspelt_provider_is_refused_before_a_run_dir_or_trial_exit_2(self):
        # Not built in, not the harness's, not in models.json, no --upstream: a typo in the
        # provider is refused as a misspelt behaviour is, with nothing left on disk.
        for extra in ((), ("--trials", "2")):
            done = self.run_argv(self.runner_argv("anthropc/m", JSON_EVENTS, *extra), self.env)
            self.assertEqual(done.returncode, 2, extra)
            result = json.loads(done.stdout)
            self.assertEqual(self.codes(result), ["unknown_provider"])
            message = result["reasons"][0]["message"]
            self.assertIn("'anthropc'", message)
            self.assertIn("did you mean anthropic?", message)
            self.assertIn(b"did you mean anthropic?", done.stderr)
            self.assertFalse(os.path.exists(self.out))

    def test_a_typo_of_the_simulated_provider_suggests_it_and_names_upstream(self):
        done = self.run_argv(self.runner_argv("simulatd/oracle"), self.env)
        self.assertEqual(done.returncode, 2)
        message = json.loads(done.stdout)["reasons"][0]["message"]
        self.assertIn("did you mean simulated?", message)
        self.assertIn("--upstream URL", message)
        self.assertIn("scripted, simulated", message)
        self.assertFalse(os.path.exists(self.out))

    def test_a_provider_of_the_users_models_json_is_not_refused_as_a_typo(self):
        # A provider of one's own, with its endpoint in models.json: the run goes on to
        # launch the agent (here, one that is not there: the refusal after the provider).
        config = os.path.join(self.tmp, "own-config")
        os.makedirs(config)
        with open(os.path.join(config, "models.json"), "w", encoding="utf-8") as handle:
            json.dump({"providers": {"my-llm": {"baseUrl": "http://127.0.0.1:9/v1"}}}, handle)
        argv = self.runner_argv("my-llm/some-model")
        argv[argv.index("--agent-config") + 1] = config
        argv[argv.index("--agent-bin") + 1] = os.path.join(self.tmp, "no-such-agent")
        done = self.run_argv(argv, self.env)
        result = json.loads(done.stdout)
        self.assertNotIn("unknown_provider", self.codes(result))
        self.assertEqual(self.codes(result), ["agent_not_found"])

    def test_a_misspelt_behaviour_is_refused_before_a_run_dir_or_trial(self):
        for extra in ((), ("--trials", "3")):
            argv = self.runner_argv("simulated/orcale", JSON_EVENTS, *extra)
            done = self.run_argv(argv, self.env)
            self.assertEqual(done.returncode, 2, extra)
            said = done.stderr.decode()
            self.assertIn("no behaviour 'orcale'; did you mean simulated/oracle?", said)
            self.assertIn("behaviours: " + ", ".join(BEHAVIOURS), said)
            self.assertFalse(os.path.exists(self.out))

    def test_an_injection_into_no_worker_of_the_fixture_is_refused_naming_its_workers(self):
        for extra in ((), ("--trials", "2")):
            argv = self.runner_argv("simulated/oracle", JSON_EVENTS, *extra)[2:]
            code, out, err = self.run_in_process(*argv, "--inject-failure", "worker-event-03")
            self.assertEqual(code, 2, extra)
            result = json.loads(out)
            self.assertEqual(self.codes(result), ["unknown_worker"])
            message = result["reasons"][0]["message"]
            self.assertIn("did you mean worker-events-03?", message)
            self.assertIn("its workers: worker-events-01, worker-events-02,", message)
            self.assertIn("has no such worker", err)
            self.assertFalse(os.path.exists(self.out))

    def usage_error(self, *argv: str) -> str:
        """What runner.main says, in process, of `argv`, which must be a usage error (exit 2)."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as raised:
            runner.main(list(argv))
        self.assertEqual(raised.exception.code, 2, argv)
        return err.getvalue()

    def test_a_flag_missing_malformed_or_out_of_range_is_a_usage_error_naming_it(self):
        argv = self.runner_argv("simulated/oracle", JSON_EVENTS)[2:]
        said = {("--model", "x/y"): "--fixture"}
        for bad in ("worker-events-01:0", "worker-events-01:x", ":2"):
            said[(*argv, "--inject-failure", bad)] = (
                f"--inject-failure takes WORKER[:N] with N >= 1, not {bad!r}"
            )
        for flag, value in (("--timeout", "inf"), ("--timeout", "nan"), ("--timeout", "0"),
                            ("--grace", "-1"), ("--grace", "inf")):  # fmt: skip
            said[(*argv, flag, value)] = f"{flag} must be a positive number of seconds"
        for extra in (("--jobs", "2"), ("--jobs", "2", "--run-set", "s", "--trial-index", "1")):
            said[(*argv, *extra)] = "--jobs runs a run set's trials at once: give --trials K"
        for bad, words in said.items():
            with self.subTest(bad=bad[len(argv) :] or bad):
                self.assertIn(words, self.usage_error(*bad))

    def test_help_names_every_flag_behaviour_and_script(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit) as raised:
            runner.main(["--help"])
        self.assertEqual(raised.exception.code, 0)
        said = " ".join(out.getvalue().split())
        flags = ("--fixture", "--model", "--timeout", "--agent-bin", "--out", "--agent-config")
        for flag in (*flags, "--drive", "--grace", "--upstream", "--inject-failure"):
            self.assertIn(flag, said)
        self.assertIn(", ".join(BEHAVIOURS), said)
        self.assertIn(", ".join(SCRIPTS), said)


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
                done = self.run_argv(argv, self.env)
                self.assertNotIn(b"Traceback", done.stderr)
                self.assertEqual(done.returncode, 3)
                result = json.loads(done.stdout)
                self.assertEqual(self.codes(result), ["model_proxy_unavailable"])
                self.assertIn("providers", result["reasons"][0]["message"])


if __name__ == "__main__":
    unittest.main()
