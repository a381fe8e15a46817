"""The batch-scheduler files in docs/cluster/ run as they stand: the sbatch file's array task
and its chained summary, and the Kubernetes indexed Job's script and its summary Job, each
run here as the scheduler would run it, with `uv` played by this interpreter and the
simulated agent."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

from tests import executable, temp_dir
from tests.runner_case import ROOT, SIMULATED, two_shard_fixture

CLUSTER = os.path.join(ROOT, "docs", "cluster")
SBATCH = os.path.join(CLUSTER, "run-set.sbatch")
JOB = os.path.join(CLUSTER, "run-set-job.yaml")
SUMMARY_JOB = os.path.join(CLUSTER, "run-set-summary-job.yaml")
# `uv run --locked python ARGS` as the files write it, played by the interpreter running the
# tests, so the files' commands run unchanged without uv on PATH.
UV = f"""#!/bin/sh
[ "$1 $2 $3" = "run --locked python" ] || exit 64
shift 3
exec {sys.executable} "$@"
"""


def read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def block_script(manifest: str) -> str:
    """The shell script of a Job's container: the `- |` block under `args:`."""
    lines = manifest.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- |") + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line[indent:])
    return "\n".join(body)


def job_env(manifest: str) -> dict[str, str]:
    """The Job's `env:` list, name to value."""
    pairs = re.findall(r"- name: (\w+)\n\s+value: (.+)", manifest)
    return {name: value.strip().strip('"') for name, value in pairs}


class ClusterFilesCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)
        bin_dir = os.path.join(self.tmp, "bin")
        os.mkdir(bin_dir)
        executable(os.path.join(bin_dir, "uv"), UV)
        config = os.path.join(self.tmp, "agent-config")
        os.mkdir(config)
        self.set_dir = os.path.join(self.tmp, "shared", "runs", "exp1")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PRIME_AGENT_")}
        self.env.update(
            PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
            PRIME_AGENT_CODING_AGENT_DIR=config,
            RUN_SET=self.set_dir,
            # What the files do with trials does not depend on the fixture's size.
            FIXTURE=two_shard_fixture(),
            AGENT_BIN=SIMULATED,
            MODEL="simulated/oracle",
        )

    def run_shell(self, argv: list[str], **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            cwd=ROOT,
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=300,
        )

    def results(self) -> dict[str, dict]:
        found = {}
        for name in sorted(os.listdir(self.set_dir)):
            path = os.path.join(self.set_dir, name, "result.json")
            if os.path.exists(path):
                found[name] = json.loads(read(path))
        return found


class SbatchFileTest(ClusterFilesCase):
    def test_the_array_size_the_trials_and_the_run_set_path_agree(self):
        text = read(SBATCH)
        first = re.search(r"#SBATCH --array=(\d+)-\d+", text).group(1)
        self.assertEqual(first, "0", "the common, zero-based habit")
        self.assertIn("TRIALS=${TRIALS:-$((${SLURM_ARRAY_TASK_MAX:?", text)
        (default,) = set(re.findall(r"RUN_SET:-([^}]+)\}", text))
        self.assertEqual(default, "/shared/runs/exp1")
        self.assertIn("sbatch --dependency=afterany:", text)
        self.assertNotIn("--dependency=afterok", text)

    def test_array_tasks_then_the_chained_summary_fill_one_run_set(self):
        if shutil.which("bash") is None:
            self.skipTest("needs bash")
        bash = shutil.which("bash")
        # Submitted as `sbatch --array=0-1`: the first task ran, the second never did. Slurm
        # sets the array's bounds in every task's environment.
        done = self.run_shell([bash, SBATCH], SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_TASK_MAX="1")
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-2000:])
        self.assertEqual(sorted(self.results()), ["trial-1"])
        # The summary step as the file's comment chains it, its --wrap command run as is.
        wrap = re.search(r'--wrap "([^"]+)"', read(SBATCH)).group(1)
        done = self.run_shell([bash, "-c", wrap])
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-2000:])
        summary = json.loads(done.stdout)
        self.assertEqual((summary["trials_scored"], summary["resolved"]), (2, 2))
        self.assertEqual(sorted(self.results()), ["trial-1", "trial-2"])

    def test_the_environment_is_made_once_and_the_summary_has_a_time_limit(self):
        text = read(SBATCH)
        self.assertIn("#   uv sync --locked", text)
        (chained,) = re.findall(r"^#\s+sbatch --dependency=.*$", text, re.MULTILINE)
        self.assertRegex(chained, r" --time=\d\d:\d\d:\d\d ")

    def test_a_task_runs_its_trial_of_the_array_as_submitted_and_exits_as_it_did(self):
        # `sbatch --array=0-49` over the file's own --array=0-5: task 7 is trial 8 of 50,
        # and its trial's exit code (1: not resolved) is the task's.
        done = self.run_shell(
            [shutil.which("bash") or "bash", SBATCH],
            SLURM_ARRAY_TASK_ID="7",
            SLURM_ARRAY_TASK_MAX="49",
            SLURM_ARRAY_TASK_COUNT="50",
            MODEL="simulated/fabricate",
        )
        self.assertEqual(done.returncode, 1, done.stderr.decode()[-2000:])
        self.assertEqual(sorted(self.results()), ["trial-8"])
        self.assertEqual(self.results()["trial-8"]["exit_code"], 1)
        self.assertEqual(json.loads(read(os.path.join(self.set_dir, "run-set.json")))["trials"], 50)


class KubernetesJobTest(ClusterFilesCase):
    def test_completions_and_trials_agree_and_the_indexes_are_zero_based(self):
        text = read(JOB)
        completions = re.search(r"completions: (\d+)", text).group(1)
        self.assertEqual(job_env(text)["TRIALS"], completions)
        self.assertIn("completionMode: Indexed", text)
        self.assertIn('"$((JOB_COMPLETION_INDEX + 1))"', block_script(text))
        self.assertEqual(job_env(text)["RUN_SET"], job_env(read(SUMMARY_JOB))["RUN_SET"])

    def test_the_image_holds_the_environment_and_the_summary_job_has_a_time_limit(self):
        self.assertIn("RUN uv sync --locked", read(JOB))
        deadline = re.search(r"^  activeDeadlineSeconds: (\d+)$", read(SUMMARY_JOB), re.MULTILINE)
        self.assertIsNotNone(deadline, "the summary Job sets no time limit")
        self.assertGreater(int(deadline.group(1)), 0)

    def test_an_agent_that_could_not_run_is_a_failure_the_job_sees(self):
        # Exit 3: the environment failed, not the model; Kubernetes must run the pod again.
        env = {**job_env(read(JOB)), **self.env, "TRIALS": "2", "JOB_COMPLETION_INDEX": "0"}
        env["AGENT_BIN"] = os.path.join(self.tmp, "no-such-agent")
        done = self.run_shell(["/bin/sh", "-c", block_script(read(JOB))], **env)
        self.assertEqual(done.returncode, 3, done.stderr.decode()[-2000:])

    def test_an_indexed_pod_then_the_summary_job_summarize_one_run_set(self):
        script = block_script(read(JOB))
        env = {**job_env(read(JOB)), **self.env, "TRIALS": "1"}
        # An unresolved trial's pod succeeds: its outcome is in its result.json, and
        # Kubernetes must not run it again.
        unresolved = dict(env, JOB_COMPLETION_INDEX="0", MODEL="simulated/fabricate")
        done = self.run_shell(["/bin/sh", "-c", script], **unresolved)
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-2000:])
        self.assertEqual(self.results()["trial-1"]["exit_code"], 1)
        # A refused invocation is a failure the Job sees.
        refused = self.run_shell(["/bin/sh", "-c", script], **env, JOB_COMPLETION_INDEX="1")
        self.assertEqual(refused.returncode, 2)
        # The summary Job's --resume (which runs a missing trial as the sbatch file's summary
        # does: SbatchFileTest) exits with the run set's code.
        done = self.run_shell(["/bin/sh", "-c", block_script(read(SUMMARY_JOB))])
        summary = json.loads(done.stdout)
        self.assertEqual((summary["trials_scored"], summary["resolved"]), (1, 0))
        self.assertEqual((done.returncode, summary["exit_code"]), (1, 1))


if __name__ == "__main__":
    unittest.main()
