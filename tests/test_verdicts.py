"""tools/verdicts.py, the check that a scorer change leaves every verdict's bytes as they
were: `compare` finds every difference and every missing case; a case's bytes are those
`scorer.py` prints; a run dir kept by SWARM_FANOUT_KEEP_RUNS scores, put back, as it did
where it ran."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import unittest

from tests import temp_dir
from tests.builders import RunBuilder, small_fixture
from tests.keep_runs import FIXTURE, KEPT, RUN, Keeper
from tests.test_real_runs import materialize
from tools import verdicts

SCORER = os.path.join(verdicts.ROOT, "scorer.py")


def case(text: str, exit_code: int = 0) -> dict:
    return {"exit_code": exit_code, "sha256": "-", "verdict": text, "note": ""}


class CompareTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def dumped(self, name: str, cases: dict) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"commit": name, "cases": cases}, handle)
        return path

    def compared(self, before: dict, after: dict) -> tuple[int, str]:
        first, second = self.dumped("a.json", before), self.dumped("b.json", after)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = verdicts.main(["compare", first, second])
        return code, out.getvalue()

    def test_identical_dumps_exit_0(self):
        cases = {"real-runs/main": case('{\n  "resolved": true\n}\n'), "bad/x": case("{}\n", 1)}
        code, out = self.compared(cases, dict(cases))
        self.assertEqual(code, 0, out)
        self.assertIn("2 identical, 0 differ, 0 only in A, 0 only in B", out)

    def test_one_differing_byte_is_named_with_its_diff(self):
        before = {"forged/a": case('"message": "no spawn"\n'), "forged/b": case("{}\n")}
        after = {"forged/a": case('"message": "no spawn."\n'), "forged/b": case("{}\n")}
        code, out = self.compared(before, after)
        self.assertEqual(code, 1)
        self.assertIn("DIFFERS forged/a (exit 0 -> 0)", out)
        self.assertIn('-"message": "no spawn"', out)
        self.assertIn('+"message": "no spawn."', out)
        self.assertNotIn("DIFFERS forged/b", out)
        self.assertIn("1 identical, 1 differ", out)

    def test_another_exit_code_alone_is_a_difference(self):
        code, out = self.compared({"runs/x": case("{}\n", 0)}, {"runs/x": case("{}\n", 1)})
        self.assertEqual(code, 1)
        self.assertIn("DIFFERS runs/x (exit 0 -> 1)", out)

    def test_a_case_missing_from_either_dump_is_named(self):
        before = {"real-runs/main": case("{}\n"), "real-runs/retry": case("{}\n")}
        after = {"real-runs/main": case("{}\n"), "runs/kept/t-1": case("{}\n")}
        code, out = self.compared(before, after)
        self.assertEqual(code, 1)
        self.assertIn("ONLY IN A real-runs/retry", out)
        self.assertIn("ONLY IN B runs/kept/t-1", out)
        self.assertIn("1 identical, 0 differ, 1 only in A, 1 only in B", out)

    def test_a_file_that_is_no_dump_exits_2(self):
        path = os.path.join(self.tmp, "not-a-dump.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('{"cases": [1, 2]}')
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = verdicts.main(["compare", path, path])
        self.assertEqual(code, 2)
        self.assertIn("not a dump of tools.verdicts", err.getvalue())


class CaseBytesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def test_a_cases_bytes_are_what_scorer_py_prints(self):
        root = materialize("main", self.tmp)
        done = subprocess.run(
            [sys.executable, SCORER, "--fixture", root, root], capture_output=True, timeout=60
        )
        dumped = verdicts.scored(root, root)
        self.assertEqual(dumped["verdict"].encode(), done.stdout)
        self.assertEqual(dumped["exit_code"], done.returncode)
        self.assertTrue(json.loads(done.stdout)["resolved"])

    def test_a_kept_run_put_back_where_it_ran_scores_as_it_did_there(self):
        fixture = small_fixture()
        run_dir = os.path.realpath(os.path.join(self.tmp, "made", "run"))
        build = RunBuilder(run_dir)
        build.fan_out(fixture)
        build.correct_index(fixture)
        keeper = Keeper(os.path.join(self.tmp, "kept"))
        keeper.test = "tests.test_x.T.test_y"
        keeper.saw_scored(run_dir, fixture)
        keeper.keep(os.path.join(self.tmp, "made"))
        entry = os.path.join(self.tmp, "kept", "tests.test_x.T.test_y-1")
        with open(os.path.join(entry, KEPT), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["run_dir"], run_dir)
        there = verdicts.scored(run_dir, os.path.join(entry, FIXTURE))
        self.assertTrue(json.loads(there["verdict"])["resolved"], there["verdict"])
        shutil.rmtree(run_dir)
        self.assertEqual(verdicts.kept_case(entry), there)
        self.assertFalse(os.path.exists(run_dir))
        # Why it is put back: the product keys the ledger on the run's path, and a run scored
        # where it was copied to has none.
        moved = verdicts.scored(os.path.join(entry, RUN), os.path.join(entry, FIXTURE))
        self.assertIn("no_spawn", moved["verdict"])


if __name__ == "__main__":
    unittest.main()
