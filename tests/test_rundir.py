"""result.json and the other files a run dir keeps are written whole or not at all; the repo a
run starts from holds the fixture's files as `repo_files` lists them (what a verifiers task
writes into its runtime)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from swarm_fanout import trial
from swarm_fanout.evidence.fixture import load_fixture
from swarm_fanout.shell.rundir import RunDir, repo_files, write_atomic
from swarm_fanout.shell.trial_result import Refusal, TrialResult
from tests import temp_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class WriteAtomicTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = temp_dir(self)
        self.path = os.path.join(self.dir, "result.json")

    def test_a_file_is_replaced_whole_and_nothing_else_is_left(self):
        write_atomic(self.path, "old\n")
        write_atomic(self.path, "new\n")
        with open(self.path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "new\n")
        self.assertEqual(os.listdir(self.dir), ["result.json"])

    def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(self):
        write_atomic(self.path, "old\n")
        no_space = OSError(28, "No space left on device")
        replace = mock.patch("swarm_fanout.shell.rundir.os.replace", side_effect=no_space)
        with replace, self.assertRaises(OSError):
            write_atomic(self.path, "new\n")
        with open(self.path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "old\n")
        self.assertEqual(os.listdir(self.dir), ["result.json"])


class RepoTest(unittest.TestCase):
    def test_a_runs_repo_holds_exactly_the_files_repo_files_lists_committed(self):
        with tempfile.TemporaryDirectory() as tmp:
            fixture_dir = os.path.join(tmp, "fixture")
            shutil.copytree(FIXTURES / "json-events", fixture_dir)
            # Files of the fixture's own beside the shards and below them go in too.
            Path(fixture_dir, "README.txt").write_text("notes\n")
            Path(fixture_dir, "shards", "extra").mkdir()
            Path(fixture_dir, "shards", "extra", "more.txt").write_text("more\n")
            run = RunDir.at(os.path.join(tmp, "run"))
            run.prepare(load_fixture(fixture_dir), os.path.join(tmp, "no-agent-config"))
            listed = subprocess.run(
                ["git", "ls-files"], cwd=run.paths.repo, capture_output=True, text=True, check=True
            ).stdout.split()
            self.assertEqual(sorted(listed), repo_files(fixture_dir))
            self.assertIn("README.txt", listed)
            self.assertIn("shards/extra/more.txt", listed)
            self.assertNotIn("fixture.json", listed)
            self.assertNotIn("task.txt", listed)
            run.cleanup_tmp()


class EmitTest(unittest.TestCase):
    def test_a_result_that_cannot_be_stored_is_still_printed_with_its_exit_code(self):
        with tempfile.TemporaryDirectory() as tmp:
            gone = RunDir(os.path.join(tmp, "removed-run-dir"))
            result = TrialResult(None, Refusal("agent_not_run", 3, ()))
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = trial.emit(result, gone)
        self.assertEqual(code, 3)
        printed = json.loads(out.getvalue())
        self.assertEqual(printed["exit_code"], 3)
        self.assertTrue(printed["result_file_error"].startswith("FileNotFoundError"))
        self.assertIn("could not write", err.getvalue())


if __name__ == "__main__":
    unittest.main()
