"""The benchmark's synthetic runs must be honest runs: scored resolved with every
integrity check passing, so that tools/bench.py times the whole scoring path (the
benchmark itself is not a test; this only pins what it measures)."""

from __future__ import annotations

import json
import os
import unittest

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_manifest
from swarm_fanout.scorer import score
from tests import temp_dir
from tools import bench

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def event_shapes(path: str) -> dict[str, set]:
    """Each kind of stdout event (a message_update by its assistantMessageEvent type,
    an rlm_child_update by the child's status) -> the keys its events have."""
    shapes: dict[str, set] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            event = json.loads(line)
            kind = event["type"]
            keys = set(event)
            if kind == "message_update":
                kind += "/" + event["assistantMessageEvent"]["type"]
            elif kind == "rlm_child_update":
                kind += "/" + event["child"]["status"]
                keys |= {"child." + key for key in event["child"]}
            elif kind in ("message_start", "message_end"):
                kind += "/" + event["message"]["role"]
            shapes.setdefault(kind, set()).update(keys)
    return shapes


class SyntheticRunTest(unittest.TestCase):
    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")

    def test_the_stream_has_the_events_of_a_captured_run_and_scores_like_the_parent(self):
        manifest, files = bench.make_run(
            self.run_dir, children=3, output_bytes=500, ledger_records=10, polls=4
        )
        stream_path = os.path.join(self.run_dir, "stdout.jsonl")
        self.assertIn(stream_path, files)
        captured = event_shapes(os.path.join(DATA, "real-runs", "main", "stdout.jsonl"))
        written = event_shapes(stream_path)
        # Every kind of event the capture has, with the same keys; nothing it lacks.
        self.assertEqual(written, captured)
        fixture = load_manifest(manifest)
        run = collect(self.run_dir, fixture.artifact)
        self.assertEqual(run.stream.header_id, run.parent.header_id)
        self.assertEqual(run.stream.findings, ())
        # The stream ends with the run: one assistant message_end per parent turn.
        self.assertEqual(run.stream.turns, run.parent.turns)
        self.assertEqual(run.stream.turns, 1 + 4)
        self.assertEqual(run.stream.usage, run.parent.usage)
        # Each delivered reply starts a run of its own (contract §7).
        with open(stream_path, encoding="utf-8") as handle:
            kinds = [json.loads(line)["type"] for line in handle]
        self.assertEqual(kinds.count("agent_start"), 1 + 3)
        self.assertEqual(kinds.count("agent_end"), 1 + 3)
        self.assertEqual(kinds.count("rlm_child_update"), 3 * 9)

    def test_without_the_stream_the_run_still_scores_resolved(self):
        manifest, files = bench.make_run(
            self.run_dir, children=2, output_bytes=100, ledger_records=10, polls=1, stream=False
        )
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "stdout.jsonl")))
        self.assertFalse(any(path.endswith("stdout.jsonl") for path in files))
        fixture = load_manifest(manifest)
        self.assertTrue(score(fixture, collect(self.run_dir, fixture.artifact)).resolved)

    def test_the_floor_is_given_every_json_file_the_scorer_reads_the_ledger_last(self):
        _, files = bench.make_run(
            self.run_dir, children=2, output_bytes=100, ledger_records=10, polls=1
        )
        found = {
            os.path.join(root, name)
            for root, _, names in os.walk(self.run_dir)
            for name in names
            if name.endswith(".jsonl") or name == "rlm-subagent.json"
        }
        self.assertEqual(sorted(files), sorted(found))
        # The ledger is last and padded to the asked number of records.
        with open(files[-1], "rb") as handle:
            self.assertEqual(sum(1 for _ in handle), 10)

    def test_every_shape_scores_resolved_with_every_check_passing_and_prints_what_it_names(self):
        for shape in bench.SHAPES:
            with self.subTest(shape=shape):
                run_dir = os.path.join(self.run_dir, shape)
                manifest, files = bench.make_run(
                    run_dir, children=3, output_bytes=2000, ledger_records=10, polls=4, shape=shape
                )
                fixture = load_manifest(manifest)
                verdict = score(fixture, collect(run_dir, fixture.artifact))
                self.assertTrue(verdict.resolved, [item.to_json() for item in verdict.reasons])
                failing = [name for name, check in verdict.integrity.items() if not check["passed"]]
                self.assertEqual(failing, [])
                self.assertEqual(verdict.details["depth1_spawns"], 3)
                with open(files[0], encoding="utf-8") as handle:
                    parent = handle.read()
                # Written as the product writes it: UTF-8, not `\u` escapes.
                self.assertEqual("\u2014" in parent, shape in ("unicode", "progress"))
                if shape == "progress":
                    # A later poll's output repeats the reply received before it.
                    polls = [line for line in parent.splitlines() if "Received 1 of 3" in line]
                    self.assertTrue(polls)
                    self.assertIn("s0000.jsonl: 0", polls[-1])

    def test_a_run_dir_can_be_named_so_that_its_ledger_fills_a_byte_budget(self):
        parent = os.path.dirname(self.run_dir)
        plain = bench.run_dir_for(parent, 3, 50, None)
        budget = 18_000
        padded = bench.run_dir_for(parent, 3, 50, budget)
        self.assertEqual(os.path.basename(plain), "run")
        self.assertTrue(os.path.basename(padded).startswith("run-"))
        manifest, files = bench.make_run(
            padded, children=3, output_bytes=100, ledger_records=50, polls=1
        )
        size = os.path.getsize(files[-1])
        # Each character of the run dir's name is in every record's paths: 50
        # records, 3 of them spawns with two paths each, so one more character
        # would add 53 bytes.
        self.assertLessEqual(size, budget)
        self.assertGreater(size, budget - 53)
        fixture = load_manifest(manifest)
        self.assertTrue(score(fixture, collect(padded, fixture.artifact)).resolved)


if __name__ == "__main__":
    unittest.main()
