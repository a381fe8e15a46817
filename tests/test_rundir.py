"""result.json and the other files a run dir keeps are written whole or not at all."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import unittest
from unittest import mock

import runner
from shell.rundir import RunDir, write_atomic


class WriteAtomicTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, "result.json")

    def test_a_file_is_replaced_whole_and_nothing_else_is_left(self):
        write_atomic(self.path, "old\n")
        write_atomic(self.path, "new\n")
        with open(self.path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "new\n")
        self.assertEqual(os.listdir(self.dir), ["result.json"])

    def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(self):
        write_atomic(self.path, "old\n")
        with (
            mock.patch(
                "shell.rundir.os.replace", side_effect=OSError(28, "No space left on device")
            ),
            self.assertRaises(OSError),
        ):
            write_atomic(self.path, "new\n")
        with open(self.path, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "old\n")
        self.assertEqual(os.listdir(self.dir), ["result.json"])


class EmitTest(unittest.TestCase):
    def test_a_result_that_cannot_be_stored_is_still_printed_with_its_exit_code(self):
        with tempfile.TemporaryDirectory() as tmp:
            gone = RunDir(os.path.join(tmp, "removed-run-dir"))
            result = {"status": "agent_not_run", "resolved": False, "exit_code": 3}
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = runner._emit(result, gone)
        self.assertEqual(code, 3)
        printed = json.loads(out.getvalue())
        self.assertEqual(printed["exit_code"], 3)
        self.assertTrue(printed["result_file_error"].startswith("FileNotFoundError"))
        self.assertIn("could not write", err.getvalue())


if __name__ == "__main__":
    unittest.main()
