"""The benchmark's synthetic runs must be honest runs: scored resolved with every
integrity check passing, so that bench.py times the whole scoring path (the
benchmark itself is not a test; this only pins what it measures)."""

from __future__ import annotations

import json
import os
import tempfile
import unittest

import bench
from artifacts import collect
from fixture import load_manifest
from scorer import score


class SyntheticRunTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.run_dir = os.path.join(tmp.name, "run")

    def test_a_small_synthetic_run_scores_resolved_with_every_check_passing(self):
        manifest, _ = bench.make_run(
            self.run_dir, children=3, output_bytes=500, ledger_records=40, polls=4
        )
        fixture = load_manifest(manifest)
        verdict = score(fixture, collect(self.run_dir, fixture.artifact))
        self.assertTrue(verdict.resolved, [item.to_json() for item in verdict.reasons])
        self.assertEqual(
            [name for name, check in verdict.integrity.items() if not check["passed"]], []
        )
        self.assertEqual(verdict.details["depth1_spawns"], 3)

    def test_the_floor_reads_every_line_of_every_file_it_is_given(self):
        _, files = bench.make_run(
            self.run_dir, children=2, output_bytes=100, ledger_records=10, polls=1
        )
        lines = 0
        for path in files:
            with open(path, "rb") as handle:
                lines += sum(1 for line in handle if json.loads(line) is not None)
        self.assertEqual(bench.measure_floor(files)["lines"], lines)
        # The ledger is last and padded to the asked number of records.
        with open(files[-1], "rb") as handle:
            self.assertEqual(sum(1 for _ in handle), 10)


if __name__ == "__main__":
    unittest.main()
