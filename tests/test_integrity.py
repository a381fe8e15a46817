"""Evidence integrity: delegation that cannot be faked by writing files.

Two halves. The forged corpus (tests/data/forged/<case>/, format in its README)
holds artifact trees made as an agent with a shell would make them, each an
overlay on a captured real run; every one is collected and scored exactly as a
real run and must fail with exactly its reason codes. Then every check and the
on builder runs: an honest builder run passes all of them, and each forgery a
check exists for fails it. (Answer provenance, part of delegation evidence, is in
test_scorer.)
"""

from __future__ import annotations

import json
import os
import shutil
import unittest

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_manifest
from swarm_fanout.evidence.jsonl import iso_to_ms
from swarm_fanout.evidence.transcripts import MAX_KEPT_PER_TRANSCRIPT
from swarm_fanout.rules.integrity import (
    HEADER_BEFORE_SPAWN_MS,
    INTEGRITY_CHECKS,
    META_AFTER_SPAWN_MS,
)
from swarm_fanout.scorer import score
from tests import temp_dir
from tests import test_real_runs as captures
from tests import test_scorer as scorer_tests
from tests.builders import (
    EPOCH_MS,
    ask_only_what_was_searched,
    iso,
    rewrite,
    small_fixture,
)

FORGED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "forged")
CASES = sorted(
    name for name in os.listdir(FORGED) if os.path.isfile(os.path.join(FORGED, name, "case.json"))
)
FIXTURE = small_fixture()
A, B, C = FIXTURE.shards


def forge(case: str, parent: str) -> str:
    """Materialize a forged case: its base capture, then its edits, then real paths."""
    spec = captures.load_json(os.path.join(FORGED, case, "case.json"))
    root = os.path.join(os.path.realpath(parent), case)
    shutil.copytree(os.path.join(captures.CORPUS, spec["base"]), root)
    for item in spec.get("copy", []):
        source = os.path.join(captures.CORPUS, item["from"], item["path"])
        target = os.path.join(root, item["to"])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(source):
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
    for item in spec.get("remove", []):
        path = os.path.join(root, item)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    for kind, mode in (("overlay", "wb"), ("append", "ab")):
        edits = os.path.join(FORGED, case, kind)
        for source in _files(edits) if os.path.isdir(edits) else ():
            target = os.path.join(root, os.path.relpath(source, edits))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(source, "rb") as handle, open(target, mode) as out:
                out.write(handle.read())
    for item in spec.get("replace", []):
        old, new = item["old"].encode(), item["new"].encode()
        replaced = 0
        for path in _files(os.path.join(root, item["path"])):
            with open(path, "rb") as handle:
                data = handle.read()
            if old in data:
                replaced += data.count(old)
                with open(path, "wb") as handle:
                    handle.write(data.replace(old, new))
        if not replaced:
            raise AssertionError(f"{case}: {item['old']!r} occurs nowhere in {item['path']}")
    for item in spec.get("mkdir", []):
        os.makedirs(os.path.join(root, item))
    captures.resolve_placeholders(root)
    return root


ZERO = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}


def assistant_change(**fields):
    """A `rewrite` change: every assistant message loses its responseId and takes `fields`."""

    def change(record):
        if record["type"] != "message" or record["message"]["role"] != "assistant":
            return record
        message = {k: v for k, v in record["message"].items() if k != "responseId"}
        return dict(record, message={**message, **fields})

    return change


def _files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return sorted(
        os.path.join(directory, file) for directory, _, files in os.walk(path) for file in files
    )


def setUpModule() -> None:
    ask_only_what_was_searched()


class ForgedCorpusTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = temp_dir(self)

    def scored(self, case: str):
        root = forge(case, self.tmp)
        fixture = load_manifest(root)
        return score(fixture, collect(root, fixture.artifact))

    def test_the_corpus_holds_the_forgeries_of_the_issue(self):
        self.assertEqual(
            CASES,
            [
                "child-fail-injected-replies",
                "main-header-only-child",
                "main-junk-replies",
                "main-ledger-backdated",
                "main-swapped-replies",
                "main-transcript-reused",
                "nospawn-copied-ledger",
                "nospawn-handwritten-ledger",
                "retry-stale-child-dir",
            ],
        )

    def test_every_forgery_fails_delegation_with_exactly_its_codes(self):
        for case in CASES:
            with self.subTest(case=case):
                expected = captures.load_json(os.path.join(FORGED, case, "case.json"))["codes"]
                verdict = self.scored(case)
                self.assertFalse(verdict.resolved)
                self.assertFalse(verdict.criteria["delegation_evidence"])
                self.assertEqual(sorted({reason.code for reason in verdict.reasons}), expected)

    def test_integrity_failures_name_the_forged_child(self):
        failures = self.scored("main-header-only-child").integrity["child_work"]["failures"]
        child = "sub-9f89a7ec/01a23676-4464-740b-b5ad-d592899757bc.jsonl"
        file = f"session-artifacts/01a23676-2c0e-73cc-9a77-4316f379fb77/{child}"
        detail = "no assistant message: the child never attempted a model call"
        self.assertEqual(failures, [{"child_id": "sub-9f89a7ec", "file": file, "detail": detail}])

    def test_injected_replies_are_caught_only_by_the_childs_receipts(self):
        verdict = self.scored("child-fail-injected-replies")
        self.assertTrue(verdict.criteria["coverage"])
        self.assertTrue(verdict.criteria["receipts"])
        failures = verdict.integrity["reply_receipts"]["failures"]
        self.assertEqual([f["child_id"] for f in failures], ["sub-b5202204", "sub-e2826222"])

    def test_junk_replies_leave_the_index_unsourced(self):
        verdict = self.scored("main-junk-replies")
        self.assertEqual(
            [row["delegation"] for row in verdict.shards], ["unsourced"] * 3 + ["ok"] * 5
        )
        self.assertTrue(all(result["passed"] for result in verdict.integrity.values()))


class RunTestCase(scorer_tests.RunTestCase):
    def failures(self, check: str) -> list[dict]:
        verdict = self.verdict()
        if verdict.integrity[check]["failures"]:
            self.assertFalse(verdict.criteria["delegation_evidence"])
            code = next(code for name, code, _, _ in INTEGRITY_CHECKS if name == check)
            self.assertIn(code, [reason.code for reason in verdict.reasons])
        return verdict.integrity[check]["failures"]

    def details(self, check: str) -> list[str]:
        return [failure["detail"] for failure in self.failures(check)]

    def display_path(self, child) -> str:
        return os.path.join(os.path.dirname(child.path), "rlm-subagent.json")

    def rewrite_display(self, child, **fields) -> None:
        path = self.display_path(child)
        with open(path, encoding="utf-8") as handle:
            display = json.load(handle)
        display.update(fields)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({k: v for k, v in display.items() if v is not None}, handle)

    def rewrite_header(self, child, **fields) -> None:
        rewrite(child.path, lambda r: {**r, **fields} if r["type"] == "session" else r)

    def spawn_record(self, child) -> dict:
        with open(self.build.ledger, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        return next(r for r in records if r["op"] == "spawn" and r["childId"] == child.child_id)

    def spawn_at(self, child) -> int:
        return iso_to_ms(self.spawn_record(child)["at"])

    def drop_attributions(self, count: int) -> None:
        """Drops the parent's first `count` child_usage_attributed entries."""
        dropped = []

        def drop(record):
            if record["type"] == "child_usage_attributed" and len(dropped) < count:
                dropped.append(record)
                return None
            return record

        rewrite(self.build.parent_path, drop)


class HonestBuilderRunTest(RunTestCase):
    def test_honest_builder_run_passes_every_check(self):
        self.honest_run()
        verdict = self.verdict()
        self.assertTrue(verdict.resolved, verdict.reasons)
        self.assertEqual([name for name, *_ in INTEGRITY_CHECKS], list(verdict.integrity))
        for name, result in verdict.integrity.items():
            self.assertEqual(result, {"passed": True, "count": 0, "failures": []}, name)


class BoundedCollectionTest(RunTestCase):
    def test_records_past_the_per_transcript_cap_are_a_finding_not_kept(self):
        self.honest_run()
        for _ in range(MAX_KEPT_PER_TRANSCRIPT):
            self.build.usage_attributed({"input": 1, "output": 1, "totalTokens": 2})
        run = collect(self.run_dir, FIXTURE.artifact)
        self.assertEqual(len(run.parent.usage_attributions), MAX_KEPT_PER_TRANSCRIPT)
        self.assertEqual([f.code for f in run.parent.findings], ["kept_cap"])


class LedgerCheckTest(RunTestCase):
    def test_meta_that_is_not_first_fails(self):
        self.honest_run()
        rewrite(self.build.ledger, lambda r: None if r["op"] == "meta" else r)
        self.assertEqual(self.details("ledger"), ["meta_not_first: line 1 is not a meta record"])

    def edit_ledger(self, which: str, **fields) -> None:
        """The ledger's records `which` names (an op, or a childId) take `fields`."""
        rewrite(
            self.build.ledger,
            lambda r: {**r, **fields} if which in (r["op"], r.get("childId")) else r,
        )

    def test_meta_naming_another_sessions_dir_fails(self):
        self.honest_run()
        self.edit_ledger("meta", sessionsDir="/elsewhere")
        details = self.details("ledger")
        self.assertEqual(len(details), 1)
        self.assertTrue(details[0].startswith("meta_hash_mismatch"))

    def test_at_that_goes_back_fails(self):
        children = self.honest_run()
        self.edit_ledger(children["worker-c"].child_id, at=iso(EPOCH_MS))
        failures = self.failures("ledger")
        self.assertEqual([f["child_id"] for f in failures], [children["worker-c"].child_id])
        self.assertIn("is before line", failures[0]["detail"])

    def test_at_that_is_no_time_fails(self):
        children = self.honest_run()
        self.edit_ledger(children["worker-b"].child_id, at="now")
        self.assertEqual(self.details("ledger"), ["at 'now' is no ISO-8601 time"])

    def test_meta_stamped_after_the_first_spawn_is_the_products_own_order(self):
        children = self.honest_run()
        first = self.spawn_at(children["worker-a"])
        for late, failed in ((META_AFTER_SPAWN_MS, False), (META_AFTER_SPAWN_MS + 1, True)):
            with self.subTest(late_ms=late):
                self.edit_ledger("meta", at=iso(first + late))
                self.assertEqual(bool(self.failures("ledger")), failed)

    def test_childid_spawned_twice_fails(self):
        children = self.honest_run()
        again = dict(self.spawn_record(children["worker-a"]), at=self.build.now())
        self.build.ledger_line(again)
        self.assertEqual(
            [(f["child_id"], f["line"]) for f in self.failures("ledger")],
            [(children["worker-a"].child_id, 5)],
        )
        self.assertIn("childId spawned again", self.details("ledger")[0])

    def test_spawn_after_a_line_the_product_rejects_fails(self):
        meta = {"v": 1, "op": "meta", "at": iso(EPOCH_MS), "sessionsDir": self.build.paths.sessions}
        self.build.ledger_line(meta)
        self.build.ledger_line("not json")
        self.honest_run()
        details = self.details("ledger")
        self.assertTrue(details[0].startswith("malformed_json"))
        after = "spawn after a line the product rejects: the product never wrote it"
        self.assertEqual(details[1:], [after] * 3)

    def test_depth_two_spawn_under_the_root_fails(self):
        self.honest_run()
        child = self.build.spawn("helper", depth=2)
        self.assertEqual(
            [(f["child_id"], f["detail"]) for f in self.failures("ledger")],
            [(child.child_id, "depth 2 under the root, whose children are depth 1")],
        )


class ChildPathCheckTest(RunTestCase):
    def test_transcript_whose_stem_is_not_its_header_id_fails(self):
        children = self.honest_run()
        self.rewrite_header(children["worker-b"], id="01a23676-0000-7000-8000-000000000000")
        details = self.details("child_path")
        self.assertEqual(len(details), 1)
        self.assertIn("is not the header id 01a23676-0000-7000-8000-000000000000", details[0])

    def test_transcript_outside_its_childid_dir_fails(self):
        self.build.fan_out(FIXTURE)
        stray = os.path.join(self.build.paths.children_root("elsewhere"), "x.jsonl")
        self.build.spawn("helper", child_path=stray)
        self.build.correct_index(FIXTURE)
        failures = self.failures("child_path")
        self.assertEqual(len(failures), 1)
        self.assertIn("is not in", failures[0]["detail"])

    def test_second_transcript_in_a_child_dir_fails(self):
        children = self.honest_run()
        shutil.copyfile(
            children["worker-a"].path,
            os.path.join(os.path.dirname(children["worker-a"].path), "copy.jsonl"),
        )
        self.assertIn("2 transcripts in the dir", self.details("child_path")[0])


class ChildHeaderCheckTest(RunTestCase):
    def test_header_naming_another_parent_fails(self):
        children = self.honest_run()
        self.rewrite_header(children["worker-a"], parentSession=self.build.parent_path + ".old")
        self.assertIn("parentSession", self.details("child_header")[0])

    def test_header_of_another_depth_or_cwd_fails(self):
        children = self.honest_run()
        self.rewrite_header(children["worker-a"], rlmDepth=2, cwd="/elsewhere")
        details = self.details("child_header")
        self.assertEqual(len(details), 2)
        self.assertIn("rlmDepth 2", details[0])
        self.assertIn("cwd '/elsewhere'", details[1])

    def test_header_written_after_the_spawn_fails(self):
        children = self.honest_run()
        at = self.spawn_at(children["worker-a"])
        self.rewrite_header(children["worker-a"], timestamp=iso(at + 1))
        self.assertIn("-1 ms before the spawn", self.details("child_header")[0])

    def test_header_written_long_before_the_spawn_fails(self):
        children = self.honest_run()
        at = self.spawn_at(children["worker-a"])
        for gap, failed in ((HEADER_BEFORE_SPAWN_MS, False), (HEADER_BEFORE_SPAWN_MS + 1, True)):
            with self.subTest(gap_ms=gap):
                self.rewrite_header(children["worker-a"], timestamp=iso(at - gap))
                self.assertEqual(bool(self.failures("child_header")), failed)


class ChildBodyCheckTest(RunTestCase):
    def test_task_of_another_child_or_session_fails(self):
        children = self.honest_run()

        def forged(record):
            if record.get("customType") == "agent_message":
                details = dict(record["details"], id="spawn:sub-00000000")
                details["from"] = dict(details["from"], sessionId="01a23676-0000")
                return dict(record, details=details)
            return record

        rewrite(children["worker-a"].path, forged)
        details = self.details("child_task")
        self.assertEqual(len(details), 2)
        self.assertIn("'spawn:sub-00000000'", details[0])
        self.assertIn("from session '01a23676-0000'", details[1])

    def test_task_only_child_did_no_work(self):
        children = self.honest_run()
        rewrite(children["worker-b"].path, lambda r: None if r["type"] == "message" else r)
        self.assertEqual(len(self.failures("child_work")), 1)

    def test_child_whose_every_call_failed_did_work(self):
        # Captured run child-fail: 4 attempts, each stopReason error, zero usage, no
        # responseId, no child_usage_attributed entry.
        children = self.build.fan_out(FIXTURE, reply=False)
        rewrite(children["worker-c"].path, assistant_change(stopReason="error", usage=ZERO))
        self.drop_attributions(1)
        self.build.notice(children["worker-c"])
        for name in ("child_work", "response_ids", "usage_attribution"):
            self.assertEqual(self.failures(name), [], name)

    def test_model_call_without_response_id_fails(self):
        children = self.honest_run()
        rewrite(children["worker-a"].path, assistant_change())
        detail = "assistant message (toolUse) without a responseId"
        self.assertEqual(self.details("response_ids"), [detail])

    def test_aborted_turn_needs_no_response_id(self):
        children = self.honest_run()
        rewrite(children["worker-a"].path, assistant_change(stopReason="aborted"))
        self.assertEqual(self.failures("response_ids"), [])


class DisplayCheckTest(RunTestCase):
    def test_missing_display_file_fails(self):
        children = self.honest_run()
        os.remove(os.path.join(os.path.dirname(children["worker-a"].path), "rlm-subagent.json"))
        self.assertEqual(self.details("display"), ["no readable rlm-subagent.json"])

    def test_display_of_another_child_fails(self):
        children = self.honest_run()
        other = children["worker-b"]
        fields = {"childId": other.child_id, "sessionName": "worker-b", "sessionFile": other.path}
        self.rewrite_display(children["worker-a"], **fields)
        self.assertEqual(len(self.failures("display")), 3)

    def test_display_may_hold_a_name_from_a_later_rename(self):
        children = self.honest_run()
        child = children["worker-a"]
        rename = {"v": 1, "op": "rename", "at": self.build.now(), "childId": child.child_id}
        self.build.ledger_line({**rename, "child": child.path, "name": "worker-a2"})
        self.rewrite_display(child, sessionName="worker-a2")
        self.assertEqual(self.failures("display"), [])


class SpawnCodeCheckTest(RunTestCase):
    def test_display_without_spawn_code_fails(self):
        children = self.honest_run()
        self.rewrite_display(children["worker-a"], spawnCode=None)
        self.assertEqual(self.details("spawn_code"), ["no spawnCode"])

    def test_spawn_code_that_no_cell_ran_fails(self):
        children = self.honest_run()
        self.rewrite_display(children["worker-a"], spawnCode="await rlm('x', name='worker-a')")
        detail = "spawnCode is the code of no parent ipython call"
        self.assertEqual(self.details("spawn_code"), [detail])

    def test_spawn_recorded_outside_the_cell_fails(self):
        children = self.honest_run()
        # A child spawned later (in a cell of its own) claims the fan-out cell's code.
        helper = self.build.spawn("helper")
        self.build.notice(helper)
        with open(self.display_path(children["worker-a"]), encoding="utf-8") as handle:
            self.rewrite_display(helper, spawnCode=json.load(handle)["spawnCode"])
        failures = self.failures("spawn_code")
        self.assertEqual([f["child_id"] for f in failures], [helper.child_id])
        self.assertIn("outside every run of that cell", failures[0]["detail"])

    def test_cell_that_never_returned_still_holds_its_spawns(self):
        self.build.assistant("Spawning.", code="await rlm('x', name='worker-a')")
        child = self.build.spawn("worker-a")
        self.build.reply(child, "a.jsonl: 11")
        self.assertEqual(self.failures("spawn_code"), [])


class UsageAttributionCheckTest(RunTestCase):
    def test_child_call_without_attribution_fails(self):
        children = self.honest_run()
        self.drop_attributions(1)
        failures = self.failures("usage_attribution")
        self.assertEqual(len(failures), 1)
        self.assertEqual(failures[0]["child_id"], children["worker-a"].child_id)
        self.assertIn("3 child calls with usage input 50", failures[0]["detail"])

    def test_attribution_without_child_call_fails(self):
        self.honest_run()
        self.build.usage_attributed({"input": 7, "output": 1, "totalTokens": 8})
        failures = self.failures("usage_attribution")
        self.assertEqual(len(failures), 1)
        self.assertNotIn("child_id", failures[0])
        self.assertIn("1 child_usage_attributed entries with usage input 7", failures[0]["detail"])


class ReplyReceiptCheckTest(RunTestCase):
    def test_reply_the_child_never_sent_fails(self):
        children = self.a_and_b_replied()
        self.build.reply(children["worker-c"], "c.jsonl: 33", sent=False)
        self.build.correct_index(FIXTURE)
        failures = self.failures("reply_receipts")
        self.assertEqual([f["child_id"] for f in failures], [children["worker-c"].child_id])
        self.assertIn("no receipt with this id", failures[0]["detail"])

    def test_reply_whose_text_was_edited_fails(self):
        self.honest_run()
        rewrite(
            self.build.parent_path,
            lambda r: (
                dict(r, details=dict(r["details"], message="b.jsonl: 23"))
                if r.get("customType") == "agent_message"
                and r["details"]["message"] == "b.jsonl: 22"
                else r
            ),
        )
        self.assertIn("the child sent other text", self.details("reply_receipts")[0])

    def test_reply_from_no_child_of_the_parent_is_ignored(self):
        children = self.honest_run()
        self.build.reply(
            children["worker-a"], "a.jsonl: 11", session_id="01a23676-0000", sent=False
        )
        self.assertTrue(self.verdict().resolved)


class ChildDirCheckTest(RunTestCase):
    def test_sub_dir_without_an_edge_is_an_orphan(self):
        self.honest_run()
        os.makedirs(
            os.path.join(self.build.paths.children_root(self.build.root_id), "sub-0000abcd")
        )
        self.assertEqual([f["child_id"] for f in self.failures("orphan_dirs")], ["sub-0000abcd"])

    def test_edge_without_a_sub_dir_fails(self):
        self.honest_run()
        child = self.build.spawn("helper", write_transcript=False)
        self.build.notice(child)
        self.assertEqual([f["child_id"] for f in self.failures("edge_dirs")], [child.child_id])

    def test_child_older_than_the_run_is_stale(self):
        children = self.honest_run()
        with open(children["worker-a"].path, encoding="utf-8") as handle:
            started = iso_to_ms(json.loads(handle.readline())["timestamp"]) + 1
        with open(os.path.join(self.run_dir, "run-meta.json"), "w", encoding="utf-8") as handle:
            json.dump({"started_at": iso(started)}, handle)
        self.assertEqual(
            [f["child_id"] for f in self.failures("stale_dirs")], [children["worker-a"].child_id]
        )


if __name__ == "__main__":
    unittest.main()
