"""Bad input gets a named reason and a documented exit code, never a traceback.

Run-dir cases put a file of tests/data/bad/ (or a generated one: a line of several
megabytes, an index past the byte cap, symlink loops) into a materialized captured run and
regrade it with the scorer's CLI, the path a stored run takes. Fixture cases hand
a broken manifest to runner.py. The fuzz test of the same readers is tests/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
import shutil
import tempfile
import unittest
from typing import ClassVar

from swarm_fanout.evidence.artifacts import MAX_ARTIFACT_BYTES
from swarm_fanout.shell import regrade as regrade_shell
from tests import runner_server, temp_dir
from tests.test_real_runs import materialize

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "data", "bad")
ROOT = os.path.dirname(HERE)


def regrade(run_dir: str) -> tuple[int, dict]:
    """`scorer.py --fixture RUN RUN`, in process: exit code and verdict JSON."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = regrade_shell.main(["--fixture", run_dir, run_dir])
    return code, json.loads(out.getvalue())


class RunDirCase(unittest.TestCase):
    def setUp(self) -> None:
        self.run_dir = materialize("main", temp_dir(self))
        self.parent = glob.glob(os.path.join(self.run_dir, "sessions", "*.jsonl"))[0]
        self.ledger = glob.glob(os.path.join(self.run_dir, "agent-home", "rlm-ledger", "*"))[0]
        self.children = sorted(
            glob.glob(os.path.join(self.run_dir, "session-artifacts", "*", "sub-*"))
        )

    def put(self, name: str, target: str, append: bool = False) -> None:
        with open(os.path.join(BAD, name), "rb") as handle:
            data = handle.read().replace(b"@RUN@", self.run_dir.encode())
        with open(target, "ab" if append else "wb") as handle:
            handle.write(data)

    def assert_graded(self, exit_code: int, findings: set[str], reasons: set[str] = frozenset()):
        code, verdict = regrade(self.run_dir)
        self.assertEqual(code, exit_code, verdict["reasons"])
        self.assertLessEqual(findings, set(verdict["findings"]["counts"]), verdict["findings"])
        self.assertLessEqual(reasons, {reason["code"] for reason in verdict["reasons"]})
        return verdict


class AgentOutputTest(RunDirCase):
    def test_invalid_utf8_and_nul_bytes_on_stdout(self):
        self.put("stdout-bad-bytes.jsonl", os.path.join(self.run_dir, "stdout.jsonl"))
        verdict = self.assert_graded(0, {"invalid_utf8", "malformed_json"})
        self.assertEqual(verdict["efficiency"]["stream"]["tokens"]["total"], 0)

    def test_stream_records_of_every_wrong_type_are_read_not_raised(self):
        # Assistant turns the root transcript lacks: model calls only the stream shows.
        self.put("stdout-wrong-types.jsonl", os.path.join(self.run_dir, "stdout.jsonl"), True)
        self.assert_graded(1, set(), {"stream_mismatch"})

    def test_replay_records_of_every_wrong_type_are_left_out(self):
        # A stored run's replay.jsonl, edited: no child record of a wrong shape is used.
        self.put("replay-wrong-types.jsonl", os.path.join(self.run_dir, "replay.jsonl"))
        verdict = self.assert_graded(0, set())
        self.assertEqual({shard["delegation"] for shard in verdict["shards"]}, {"ok"})

    def test_transcript_records_of_every_wrong_type(self):
        self.put("transcript-bad-lines.jsonl", self.parent, append=True)
        self.assert_graded(0, {"invalid_utf8", "not_an_object", "wrong_type", "malformed_json"})

    def test_invalid_bytes_and_wrong_types_in_a_child_transcript(self):
        child_file = glob.glob(os.path.join(self.children[0], "*.jsonl"))[0]
        self.put("transcript-bad-lines.jsonl", child_file, append=True)
        # Two of the lines are assistant messages with no responseId: in a child,
        # whose calls the integrity checks hold to account, that is a named failure.
        verdict = self.assert_graded(
            1,
            {"invalid_utf8", "not_an_object", "wrong_type", "malformed_json"},
            {"missing_response_id"},
        )
        # The findings are the child's, and its good lines still count.
        self.assertIn(os.path.relpath(child_file, self.run_dir), json.dumps(verdict["findings"]))
        self.assertEqual(verdict["details"]["depth1_spawns"], 8)

    def test_transcript_line_of_several_megabytes_is_read(self):
        line = {"type": "message", "message": {"role": "toolResult", "content": "x" * 5_000_000}}
        with open(self.parent, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
        verdict = self.assert_graded(0, set())
        self.assertEqual(verdict["findings"]["counts"], {})

    def test_transcript_line_over_the_line_cap_is_skipped_not_loaded(self):
        with open(self.parent, "ab") as handle:
            handle.write(b'{"x":"' + b"y" * (33 * 1024 * 1024) + b'"}\n')
        self.assert_graded(0, {"line_too_long"})

    def test_combined_index_past_the_byte_cap(self):
        index = os.path.join(self.run_dir, "repo", "combined-index.md")
        with open(index, "a", encoding="utf-8") as handle:
            chunk = "noise " * 65536  # one line of words, no index line: the cap is what is tested
            for _ in range(MAX_ARTIFACT_BYTES // len(chunk) + 1):
                handle.write(chunk)
        self.assert_graded(0, {"byte_cap"})

    def test_symlink_loops_and_links_out_of_the_run_in_session_artifacts(self):
        artifacts_root = os.path.dirname(self.children[0])
        os.symlink("sub-0badf00d", os.path.join(artifacts_root, "sub-0badf00d"))
        os.symlink("/", os.path.join(artifacts_root, "sub-deadbeef"))
        child_file = glob.glob(os.path.join(self.children[0], "*.jsonl"))[0]
        outside = os.path.join(os.path.dirname(self.run_dir), "outside.jsonl")
        shutil.move(child_file, outside)
        os.symlink(outside, child_file)
        os.symlink("loop", os.path.join(self.children[1], "loop.jsonl"))
        verdict = self.assert_graded(
            1, {"not_a_directory", "not_a_regular_file"}, {"missing_child_transcript"}
        )
        self.assertFalse(verdict["delegation_evidence"])

    def test_symlinked_sessions_transcript_is_not_read(self):
        outside = os.path.join(os.path.dirname(self.run_dir), "parent.jsonl")
        shutil.move(self.parent, outside)
        os.symlink(outside, self.parent)
        self.assert_graded(1, {"not_a_regular_file"}, {"parent_transcript_missing"})

    def test_fifo_in_place_of_a_child_transcript_does_not_block(self):
        os.mkfifo(os.path.join(self.children[0], "waiting.jsonl"))
        self.assert_graded(0, {"not_a_regular_file"})


class LedgerInputTest(RunDirCase):
    def test_ledger_of_version_2_is_not_read_as_edges(self):
        self.put("ledger-v2.jsonl", self.ledger)
        verdict = self.assert_graded(1, {"bad_version"}, {"no_spawn"})
        self.assertIn("ledger_findings", {w["code"] for w in verdict["warnings"]})

    def test_torn_last_line_is_tolerated(self):
        self.put("ledger-torn-tail.jsonl", self.ledger)
        verdict = self.assert_graded(1, {"torn_tail"}, {"missing_worker_edge"})
        self.assertEqual(verdict["details"]["depth1_spawns"], 1)
        self.assertFalse(verdict["evidence"]["ledgers"][0]["rejected_by_product"])

    def test_lines_of_every_wrong_json_type(self):
        self.put("ledger-wrong-types.jsonl", self.ledger)
        verdict = self.assert_graded(1, {"malformed_record", "missing_at", "not_an_object"})
        self.assertEqual(verdict["details"]["depth1_spawns"], 0)
        self.assertTrue(verdict["evidence"]["ledgers"][0]["rejected_by_product"])

    def test_invalid_bytes_make_the_product_reject_the_ledger(self):
        self.put("ledger-bad-bytes.jsonl", self.ledger)
        verdict = self.assert_graded(1, {"invalid_utf8", "malformed_json"})
        self.assertTrue(verdict["evidence"]["ledgers"][0]["rejected_by_product"])

    def pad_with_renames(self, count: int, pad: int) -> None:
        """Append `count` valid renames of the first child, each with an unknown key
        of `pad` characters (the product ignores unknown keys)."""
        with open(self.ledger, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        rename = json.loads(lines[1])
        rename.update(op="rename", at=json.loads(lines[-1])["at"], pad="p" * pad)
        del rename["parent"], rename["depth"]
        line = (json.dumps(rename) + "\n").encode()
        with open(self.ledger, "ab") as handle:
            for _ in range(count):
                handle.write(line)

    def test_ledger_over_the_products_record_limit(self):
        self.pad_with_renames(100_000, 0)
        # The product would reject this ledger whole, so it proves no delegation.
        verdict = self.assert_graded(1, {"over_record_limit"}, {"ledger_inconsistent"})
        self.assertTrue(verdict["evidence"]["ledgers"][0]["rejected_by_product"])

    def test_ledger_over_the_products_byte_limit(self):
        # Fewer lines than the record limit, more bytes than the size limit.
        self.pad_with_renames(20_000, 1_800)
        self.assertGreater(os.path.getsize(self.ledger), 32 * 1024 * 1024)
        verdict = self.assert_graded(1, {"over_size_limit"}, {"ledger_inconsistent"})
        self.assertNotIn("over_record_limit", verdict["findings"]["counts"])
        self.assertTrue(verdict["evidence"]["ledgers"][0]["rejected_by_product"])

    def test_ledger_past_the_read_cap_is_read_up_to_it(self):
        # 70 MB: past the product's limit and past the harness's own read cap of
        # twice that limit, which stops reading (named) instead of loading it all.
        self.pad_with_renames(35_000, 2_000)
        self.assertGreater(os.path.getsize(self.ledger), 64 * 1024 * 1024)
        verdict = self.assert_graded(1, {"over_size_limit", "byte_cap"}, {"ledger_inconsistent"})
        self.assertTrue(verdict["evidence"]["ledgers"][0]["rejected_by_product"])


class FixtureInputTest(unittest.TestCase):
    CASES: ClassVar[dict[str, str]] = {
        "missing-key": "fixture_key_missing",
        "duplicate-file": "fixture_duplicate_file",
        "path-traversal": "fixture_unsafe_path",
        "absolute-artifact": "fixture_unsafe_path",
        "non-integer-expected": "fixture_bad_value",
        "boolean-expected": "fixture_bad_value",
        "not-json": "fixture_json_invalid",
        "not-utf8": "fixture_json_invalid",
        "not-an-object": "fixture_json_invalid",
    }

    def test_broken_manifests_exit_2_with_a_named_reason(self):
        source = os.path.join(ROOT, "fixtures", "json-events")
        for case, detail in self.CASES.items():
            with self.subTest(case=case), tempfile.TemporaryDirectory() as tmp:
                fixture_dir = os.path.join(tmp, "fixture")
                shutil.copytree(source, fixture_dir)
                manifest = os.path.join(BAD, "fixtures", case + ".json")
                shutil.copyfile(manifest, os.path.join(fixture_dir, "fixture.json"))
                argv = ["--fixture", fixture_dir, "--model", "x/y", "--agent-bin", "true"]
                argv += ["--out", os.path.join(tmp, "r")]
                done = runner_server.run(argv, cwd=os.getcwd(), env=dict(os.environ), timeout=60)
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertNotIn(b"Traceback", done.stderr)
                result = json.loads(done.stdout)
                self.assertEqual(result["reasons"][0]["code"], "invalid_fixture")
                self.assertEqual(result["reasons"][0]["detail"], detail)

    def scorer_refusal(self, *argv: str) -> tuple[int, dict, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = regrade_shell.main(list(argv))
        return code, json.loads(out.getvalue()), err.getvalue()

    def test_a_dir_that_is_no_run_is_refused_naming_what_it_lacks(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, refusal, err = self.scorer_refusal(tmp)
        self.assertEqual((code, refusal["error"]), (2, "not_a_run_dir"))
        for lacking in ("result.json", "run-meta.json", "sessions/"):
            self.assertIn(lacking, refusal["detail"])
        self.assertIn(refusal["detail"], err)

    def test_a_run_dir_that_records_no_fixture_asks_for_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "sessions"))
            code, refusal, _ = self.scorer_refusal(tmp)
        self.assertEqual((code, refusal["error"]), (2, "fixture_unknown"))
        self.assertIn("pass --fixture", refusal["detail"])

    def test_a_result_json_that_is_no_object_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "result.json"), "w", encoding="utf-8") as handle:
                handle.write("[1, 2]\n")
            code, refusal, _ = self.scorer_refusal(tmp)
        self.assertEqual((code, refusal["error"]), (2, "run_dir_invalid"))

    def test_scorer_cli_refuses_a_broken_manifest_with_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            manifest = os.path.join(BAD, "fixtures", "path-traversal.json")
            shutil.copyfile(manifest, os.path.join(tmp, "fixture.json"))
            code, refusal, _ = self.scorer_refusal("--fixture", tmp, tmp)
        self.assertEqual((code, refusal["code"]), (2, "fixture_unsafe_path"))


if __name__ == "__main__":
    unittest.main()
