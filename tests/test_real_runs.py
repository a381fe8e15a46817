"""The captured real prime-agent runs score to exactly the verdicts they must get.

Each run under tests/data/real-runs was produced by prime-agent v0.8.0 driven by a
scripted model; its `expected.json` is the verdict a correct harness reaches. A
run is materialized into a temp dir (the `@RUN@` placeholder replaced by the
real path, the ledger renamed to the product's key for it) and then collected
and scored exactly as runner.py does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import unittest
from pathlib import Path

from swarm_fanout import ledger
from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_manifest
from swarm_fanout.scorer import score
from tests import builders, temp_dir
from tests.builders import ask_only_what_was_searched
from tests.simulated_case import RECORD_KINDS, assert_captured_shapes, shapes, transcript_kind

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real-runs")
RUNS = sorted(
    name for name in os.listdir(CORPUS) if os.path.isfile(os.path.join(CORPUS, name, "run.json"))
)
PLACEHOLDER = b"@RUN@"


def materialize(name: str, parent: str) -> str:
    """Copy a capture to `parent/name`, with real paths and the product's ledger name."""
    root = os.path.join(os.path.realpath(parent), name)
    shutil.copytree(os.path.join(CORPUS, name), root)
    resolve_placeholders(root)
    return root


def resolve_placeholders(root: str) -> None:
    """`@RUN@` becomes `root`; the ledger takes the name the product keys it by."""
    for directory, _, files in os.walk(root):
        for file in files:
            path = os.path.join(directory, file)
            os.chmod(path, 0o644)
            with open(path, "rb") as handle:
                data = handle.read()
            if PLACEHOLDER in data:
                with open(path, "wb") as handle:
                    handle.write(data.replace(PLACEHOLDER, root.encode()))
    captured = os.path.join(root, "agent-home", "rlm-ledger", "LEDGER.jsonl")
    if os.path.exists(captured):
        with open(captured, encoding="utf-8") as handle:
            sessions_dir = json.loads(handle.readline())["sessionsDir"]
        key = hashlib.sha256(sessions_dir.encode()).hexdigest()[:16]
        os.rename(captured, os.path.join(os.path.dirname(captured), key + ".jsonl"))


def load_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def setUpModule() -> None:
    ask_only_what_was_searched()


class CapturedRunTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def materialized(self, name: str):
        root = materialize(name, self.tmp)
        fixture = load_manifest(root)
        run = collect(root, fixture.artifact)
        return root, fixture, run


class CapturedVerdictTest(CapturedRunTestCase):
    def test_the_corpus_holds_all_eight_captured_runs(self):
        self.assertEqual(
            RUNS,
            [
                "child-fail",
                "endturn-oneshot",
                "main",
                "nospawn",
                "oneshot-delete-after-reply",
                "resident",
                "retry",
                "session-dir-env",
            ],
        )

    def test_every_captured_run_is_found_and_scored_as_it_ran(self):
        for name in RUNS:
            with self.subTest(run=name):
                root, fixture, run = self.materialized(name)
                facts = load_json(os.path.join(root, "run.json"))
                # The parent is found by its header id, not its file name.
                self.assertEqual(run.parent.path, os.path.join(root, facts["parent_transcript"]))
                self.assertEqual(run.parent.header_id, facts["parent_header_id"])
                # The ledger is found where the product keyed it.
                keyed = facts["ledger_keyed_on"]
                home = os.path.join(root, "agent-home")
                self.assertEqual(
                    [item.path for item in run.ledgers],
                    [ledger.ledger_path(home, os.path.join(root, keyed))] if keyed else [],
                )
                verdict = score(fixture, run)
                expected = load_json(os.path.join(root, "expected.json"))
                as_json = verdict.to_json()
                for key in ("resolved", "coverage", "delegation_evidence", "dedup", "receipts"):
                    self.assertEqual(as_json[key], expected[key], key)
                self.assertEqual(as_json["details"], expected["details"])
                # Real delegation, failed and torn-down children included (child-fail,
                # endturn-oneshot), leaves records that agree with each other, and no findings.
                for check, result in verdict.integrity.items():
                    self.assertEqual(result, {"passed": True, "count": 0, "failures": []}, check)
                self.assertNotIn("unsourced", [row["delegation"] for row in verdict.shards])
                self.assertEqual(verdict.findings["counts"], {})
                # One turn per answered request; a 500 persists one error message per three
                # HTTP tries (contract §5 "Retries").
                calls = set()
                with open(os.path.join(root, "model-log.jsonl"), encoding="utf-8") as handle:
                    for line in handle:
                        request = json.loads(line)
                        if request["kind"] != "aux":
                            calls.add((request["conversation_log"], request["transcript_entry_id"]))
                self.assertEqual(verdict.efficiency["total_turns"], len(calls))
                # The fake provider has no price in its catalog: every assistant message says
                # `usage.cost.total` 0, a cost reported (0), not a missing one.
                self.assertEqual(verdict.efficiency["parent"]["cost_usd"], 0)
                self.assertEqual(verdict.efficiency["total_cost_usd"], 0)

    def test_a_turn_aborted_by_teardown_is_counted_apart(self):
        _, fixture, run = self.materialized("endturn-oneshot")
        parent = score(fixture, run).efficiency["parent"]
        self.assertEqual((parent["turns"], parent["aborted_calls"]), (4, 1))

    def test_one_shot_stream_counts_only_root_calls(self):
        _, fixture, run = self.materialized("main")
        efficiency = score(fixture, run).efficiency
        self.assertEqual(efficiency["stream"]["turns"], 13)
        self.assertEqual(efficiency["parent"]["turns"], 13)
        self.assertEqual(efficiency["children"]["turns"], 16)
        self.assertEqual(
            efficiency["stream"]["tokens"]["total"], efficiency["parent"]["tokens"]["total"]
        )


class BuilderFidelityTest(CapturedRunTestCase):
    """The test builders write records as the real product does: each dict of every kind
    with keys the capture has, in its order (the stdout stream's events: test_bench)."""

    def test_builder_records_have_the_captures_shapes(self):
        build = builders.RunBuilder(os.path.join(self.tmp, "built"), stream=True)
        with build.cell("await rlm('x', name='worker-a')"):
            child = build.spawn("worker-a")
        build.reply(child, "a.jsonl: 11")
        build.notice(child)
        build.delete(child)
        families = {name: RECORD_KINDS[name] for name in ("transcript", "display", "ledger")}
        real = Path(materialize("retry", self.tmp))
        ours = assert_captured_shapes(self, Path(build.paths.root), real, families)
        self.assertLessEqual(
            {
                ("session", "root"),
                ("session", "child"),
                ("message", "assistant"),
                ("message", "toolResult"),
                ("custom_message", "agent_message", "child"),
                ("custom_message", "rlm_child_terminal_notice", None),
                ("child_usage_attributed",),
            },
            set(shapes(ours["transcript"], transcript_kind)),
        )
        self.assertEqual([record["op"] for record in ours["ledger"]], ["meta", "spawn", "delete"])
        self.assertEqual(len(ours["display"]), 1)


if __name__ == "__main__":
    unittest.main()
