"""Every rubric rule, with its pass and fail cases, and the cheats we know."""

from __future__ import annotations

import json
import os
import tempfile
import unittest

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import Fixture, Shard
from swarm_fanout.evidence.transcripts import Usage, usage_from
from swarm_fanout.rules.answers import parse_answer_lines
from swarm_fanout.rules.knowledge import SHORTCUT
from swarm_fanout.scorer import score
from tests import temp_dir
from tests.builders import (
    RunBuilder,
    ask_only_what_was_searched,
    priced,
    small_fixture,
    tool_result,
)

FIXTURE = small_fixture()
A, B, C = FIXTURE.shards


def setUpModule() -> None:
    ask_only_what_was_searched()


class RunTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.run_dir = os.path.join(temp_dir(self), "run")
        self.build = RunBuilder(self.run_dir)
        self.build.shard_files.update({shard.worker: shard.file for shard in FIXTURE.shards})

    def verdict(self):
        return score(FIXTURE, collect(self.run_dir, FIXTURE.artifact))

    def codes(self, verdict) -> list[str]:
        return [reason.code for reason in verdict.reasons]

    def honest_run(self):
        children = self.build.fan_out(FIXTURE)
        self.build.correct_index(FIXTURE)
        return children

    def a_and_b_replied(self) -> dict:
        """A fan-out whose children for a and b replied their answers, c's not yet."""
        children = self.build.fan_out(FIXTURE, reply=False)
        for shard in (A, B):
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        return children


class HonestRunTest(RunTestCase):
    def test_honest_fan_out_is_resolved(self):
        self.honest_run()
        verdict = self.verdict()
        self.assertTrue(verdict.resolved, verdict.reasons)
        self.assertEqual(self.codes(verdict), [])
        self.assertEqual([row["delegation"] for row in verdict.shards], ["ok"] * 3)
        self.assertEqual([row["receipt"] for row in verdict.shards], ["reply"] * 3)

    def test_a_cell_printing_a_number_longer_than_python_reads_is_read_as_no_number(self):
        self.build.assistant("Looking.", code="print(2**20000)")
        self.build.tool_result("1" * 6100 + "\n")  # the scorer raised on it (int's limit)
        self.honest_run()
        self.assertTrue(self.verdict().resolved)

    def test_per_shard_table_names_file_worker_expected_answer_child_and_receipt(self):
        children = self.honest_run()
        row = self.verdict().shards[1]
        self.assertEqual(
            row,
            {
                "file": "b.jsonl",
                "worker": "worker-b",
                "expected": 22,
                "answered": ["22"],
                "coverage": "correct",
                "child_id": children["worker-b"].child_id,
                "delegation": "ok",
                "receipt": "reply",
            },
        )

    def test_same_artifacts_give_the_same_verdict_bytes(self):
        self.honest_run()
        first = json.dumps(self.verdict().to_json(), sort_keys=False)
        second = json.dumps(self.verdict().to_json(), sort_keys=False)
        self.assertEqual(first, second)


class CoverageTest(RunTestCase):
    def test_missing_artifact_fails_coverage(self):
        self.build.fan_out(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["coverage"])
        self.assertIn("artifact_missing", self.codes(verdict))
        self.assertEqual(verdict.details["missing_shards"], ["a.jsonl", "b.jsonl", "c.jsonl"])

    def test_missing_line_is_reported_for_its_shard(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 11", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["coverage"])
        self.assertEqual(verdict.details["missing_shards"], ["b.jsonl"])
        self.assertEqual(
            [(r.code, r.shard) for r in verdict.reasons], [("missing_answer", "b.jsonl")]
        )

    def test_fabricated_answer_is_wrong_with_what_was_found(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 11", "- b.jsonl: 23", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["coverage"])
        self.assertEqual(
            verdict.details["wrong_answers"], {"b.jsonl": {"expected": "22", "found": ["23"]}}
        )

    def test_answers_swapped_between_shards_are_caught(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 22", "- b.jsonl: 11", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertEqual(sorted(verdict.details["wrong_answers"]), ["a.jsonl", "b.jsonl"])

    def test_two_different_answers_for_one_shard_is_wrong_not_right(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 11", "- a.jsonl: 12", "- b.jsonl: 22", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["coverage"])
        self.assertIn("conflicting_answers", self.codes(verdict))
        self.assertEqual(verdict.details["wrong_answers"]["a.jsonl"]["found"], ["11", "12"])

    def test_the_same_line_written_twice_still_counts(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 11", "- a.jsonl: 11", "- b.jsonl: 22", "- c.jsonl: 33"])
        self.assertTrue(self.verdict().criteria["coverage"])

    def test_forms_a_model_naturally_writes_are_accepted(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(
            ["  - shards/a.jsonl: `11`  ", "* **`./b.jsonl`**: **22**", "+ `c.jsonl`:33"]
        )
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["coverage"], verdict.reasons)

    def test_thousands_separators_are_the_same_number(self):
        lines = parse_answer_lines("- a.jsonl: 1,234\n- b.jsonl: 12,34\n")
        self.assertEqual(
            [(line.file, line.value) for line in lines], [("a.jsonl", 1234), ("b.jsonl", None)]
        )

    def test_missing_marker_line_is_a_wrong_answer(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 11", "- b.jsonl: MISSING (no reply)", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertEqual(
            verdict.details["wrong_answers"],
            {"b.jsonl": {"expected": "22", "found": ["MISSING (no reply)"]}},
        )

    def test_lines_for_unknown_files_are_a_warning_not_a_failure(self):
        self.honest_run()
        with open(self.build.paths.artifact("combined-index.md"), "a") as handle:
            handle.write("- z.jsonl: 99\n")
        verdict = self.verdict()
        self.assertTrue(verdict.resolved)
        # The small fixture's answers (11, 22, 33) draw their own warning too, and a run
        # dir without replay.jsonl its own.
        self.assertEqual(
            [w.code for w in verdict.warnings],
            ["extra_lines", "unwitnessed", "not_replayed", "answers_not_distinctive"],
        )


class DistinctiveAnswersTest(RunTestCase):
    def test_distinctive_answers_draw_no_warning(self):
        answers = (4871, 6133, 7919)
        fixture = FIXTURE._replace(
            shards=tuple(
                shard._replace(expected=answer)
                for shard, answer in zip(FIXTURE.shards, answers, strict=True)
            ),
        )
        self.build.fan_out(fixture)
        self.build.correct_index(fixture)
        verdict = score(fixture, collect(self.run_dir, fixture.artifact))
        self.assertTrue(verdict.resolved, verdict.reasons)
        self.assertNotIn("answers_not_distinctive", [w.code for w in verdict.warnings])


KERNEL_FAILURE = (
    "Failed to set up the Python kernel runtime. uv python install 3.11 failed with exit code 1\n"
    "First-time setup needs internet to install uv, Python, ..."
)


class KernelUnavailableTest(RunTestCase):
    """The product could not start the kernel: the environment failed, not the model."""

    def failed_cell(self, text: str, is_error: bool) -> None:
        self.build.assistant("Spawning.", code="await rlm('x', name='worker-a')")
        call_id, _ = self.build.running
        self.build.running = None
        result = {**tool_result(call_id, text), "details": {}, "isError": is_error}
        self.build._append_parent({"type": "message", "message": result})

    def test_the_products_kernel_failure_is_named_first(self):
        self.failed_cell(KERNEL_FAILURE, is_error=True)
        self.failed_cell("Failed to set up the Python kernel runtime. again", is_error=True)
        verdict = self.verdict()
        self.assertEqual(
            self.codes(verdict)[:3], ["kernel_unavailable", "artifact_missing", "no_spawn"]
        )
        first_line = KERNEL_FAILURE.split("\n")[0]
        self.assertTrue(verdict.reasons[0].message.endswith(": " + first_line))
        self.assertFalse(verdict.resolved)

    def test_a_cell_that_prints_the_words_is_not_the_product(self):
        # A cell's own output or exception is never an error result of the tool.
        self.failed_cell(KERNEL_FAILURE, is_error=False)
        self.assertNotIn("kernel_unavailable", self.codes(self.verdict()))

    def test_other_tool_errors_are_not_kernel_failures(self):
        self.failed_cell("Request was aborted", is_error=True)
        self.assertNotIn("kernel_unavailable", self.codes(self.verdict()))


class DelegationTest(RunTestCase):
    def test_parent_that_answers_itself_fails_delegation(self):
        self.build.assistant("I counted every shard myself.", code="print('done')")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["coverage"])
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertEqual(self.codes(verdict), ["no_spawn"])
        self.assertFalse(verdict.resolved)

    def test_helper_named_spawns_do_not_substitute_for_workers(self):
        for shard in FIXTURE.shards:
            child = self.build.spawn(f"helper-{shard.file}")
            self.build.reply(child, f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertEqual(self.codes(verdict), ["missing_worker_edge"] * 3)

    def test_edge_without_child_transcript_fails(self):
        children = self.build.fan_out(FIXTURE)
        os.remove(children["worker-c"].path)
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertIn("missing_child_transcript", self.codes(verdict))

    def test_child_transcript_outside_the_parents_artifacts_does_not_count(self):
        elsewhere = os.path.join(self.run_dir, "elsewhere", "sub-0000abcd", "x.jsonl")
        for shard in FIXTURE.shards[:2]:
            child = self.build.spawn(shard.worker)
            self.build.reply(child, f"{shard.file}: {shard.expected}")
        child = self.build.spawn("worker-c", child_path=elsewhere)
        self.build.reply(child, "c.jsonl: 33")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertEqual(verdict.shards[2]["delegation"], "missing_child_transcript")
        self.assertFalse(verdict.criteria["delegation_evidence"])

    def test_edges_of_another_parent_do_not_count(self):
        other_parent = os.path.join(self.build.paths.sessions, "another-root.jsonl")
        for shard in FIXTURE.shards:
            child = self.build.spawn(shard.worker, parent_path=other_parent)
            self.build.reply(child, f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertEqual(self.codes(verdict), ["no_spawn"])

    def test_child_deleted_before_it_replied_fails_delegation(self):
        children = self.a_and_b_replied()
        self.build.delete(children["worker-c"])
        self.build.notice(children["worker-c"], kind="cancelled")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertEqual(verdict.shards[2]["delegation"], "deleted_before_receipt")
        self.assertIn("deleted_before_receipt", self.codes(verdict))

    def test_child_deleted_without_any_receipt_fails_delegation_and_receipts(self):
        children = self.a_and_b_replied()
        self.build.delete(children["worker-c"])
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertFalse(verdict.criteria["receipts"])

    def test_child_deleted_after_it_replied_is_cleanup_and_still_counts(self):
        children = self.honest_run()
        for child in children.values():
            self.build.delete(child)
        verdict = self.verdict()
        self.assertTrue(verdict.resolved, verdict.reasons)

    def test_retry_after_delete_counts_the_new_child(self):
        children = self.a_and_b_replied()
        self.build.notice(children["worker-c"])
        self.build.delete(children["worker-c"])
        again = self.build.spawn("worker-c")
        self.build.reply(again, "c.jsonl: 33")
        # Written by a parent cell after the new child's reply: derived from it.
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        verdict = self.verdict()
        self.assertTrue(verdict.resolved, verdict.reasons)
        self.assertEqual([row["delegation"] for row in verdict.shards], ["ok"] * 3)
        self.assertEqual(verdict.shards[2]["child_id"], again.child_id)
        self.assertEqual(verdict.details["depth1_spawns"], 4)
        self.assertEqual(verdict.details["terminal_notices"], 1)


class AnswerProvenanceTest(RunTestCase):
    """A shard's correct answer came back in a reply from its own worker's child."""

    def test_parent_that_computed_answers_its_children_did_not_send_fails(self):
        children = self.build.fan_out(FIXTURE, reply=False)
        for worker in ("worker-a", "worker-b", "worker-c"):
            self.build.reply(children[worker], "I could not read the shard.")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["coverage"])
        self.assertFalse(verdict.criteria["delegation_evidence"])
        self.assertEqual(self.codes(verdict), ["unsourced_answer"] * 3)
        self.assertEqual(verdict.shards[0]["delegation"], "unsourced")
        self.assertEqual(verdict.details["shard_workers_with_edge_and_child_transcript"], 3)

    def test_answer_from_a_siblings_reply_does_not_count(self):
        children = self.build.fan_out(FIXTURE, reply=False)
        self.build.reply(children["worker-a"], "b.jsonl: 22")
        self.build.reply(children["worker-b"], "a.jsonl: 11")
        self.build.reply(children["worker-c"], "c.jsonl: 33")
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertEqual(
            [(r.code, r.shard) for r in verdict.reasons],
            [("unsourced_answer", "a.jsonl"), ("unsourced_answer", "b.jsonl")],
        )

    def test_child_that_ended_with_a_notice_sources_nothing(self):
        children = self.a_and_b_replied()
        self.build.notice(children["worker-c"])
        self.build.correct_index(FIXTURE)
        self.assertEqual(self.codes(self.verdict()), ["unsourced_answer"])

    def test_a_number_no_child_reported_is_unsourced_even_when_wrong(self):
        self.build.fan_out(FIXTURE)
        self.build.write_index(["- a.jsonl: 12", "- b.jsonl: 22", "- c.jsonl: 33"])
        verdict = self.verdict()
        self.assertEqual(self.codes(verdict), ["wrong_answer", "unsourced_answer"])
        self.assertEqual(verdict.shards[0]["delegation"], "unsourced")

    def test_an_answer_the_parent_computed_for_a_silent_child_is_unsourced(self):
        self.a_and_b_replied()
        self.build.correct_index(FIXTURE)
        codes = self.codes(self.verdict())
        self.assertEqual(codes, ["unsourced_answer", "missing_receipt"])

    def test_a_missing_marker_has_nothing_to_trace(self):
        children = self.a_and_b_replied()
        self.build.notice(children["worker-c"])
        self.build.write_index(["- a.jsonl: 11", "- b.jsonl: 22", "- c.jsonl: MISSING (no reply)"])
        verdict = self.verdict()
        self.assertEqual(self.codes(verdict), ["wrong_answer"])
        self.assertTrue(verdict.criteria["delegation_evidence"])


class DerivationCase(RunTestCase):
    """Runs whose children each get their own cells, for the derivation rules."""

    def fan_out(self, **per_worker) -> dict:
        """One spawning cell; `per_worker[worker]` gives that child's spawn options."""
        workers = [shard.worker for shard in FIXTURE.shards]
        with self.build.cell(f"for name in {workers!r}:\n    await rlm(task, name=name)\n"):
            return {w: self.build.spawn(w, **per_worker.get(w, {})) for w in workers}

    def reply_all(self, children: dict, index: bool = False) -> None:
        """Every child replies its answer; with `index`, a parent cell then writes the index."""
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        if index:
            self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])

    def shard_codes(self, verdict=None) -> list[tuple[str, str | None]]:
        verdict = self.verdict() if verdict is None else verdict
        return [(r.code, r.shard) for r in verdict.reasons]

    def read_and_send(self, shard, read: str) -> str:
        return read + (
            f"await agent_message.send({shard.file + ': '!r} + str(answer), "
            "receiver_role='parent')\n"
        )

    def each_child(self, work, before=None, task=None) -> None:
        """Every child, spawned with `task(shard)` if given, runs its `before(shard)` cells
        (code, output), then `work(shard)` and sends its answer; the parent writes the index
        after the replies."""
        per_worker = {
            s.worker: {
                "work": self.read_and_send(s, work(s)),
                "before": before(s) if before else (),
                **({"task": task(s)} if task else {}),
            }
            for s in FIXTURE.shards
        }
        self.reply_all(self.fan_out(**per_worker), index=True)

    def assert_resolved(self) -> None:
        verdict = self.verdict()
        self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons])
        self.assertEqual([row["delegation"] for row in verdict.shards], ["ok"] * 3)

    def assert_every_shard(self, code: str) -> list[str]:
        """Every shard fails with `code`, and nothing else does; the reasons' messages."""
        verdict = self.verdict()
        self.assertEqual(self.shard_codes(verdict), [(code, s.file) for s in FIXTURE.shards])
        return [reason.message for reason in verdict.reasons]


class DerivationTest(DerivationCase):
    """A shard counts only if its own child worked the answer out and the parent learned it
    from that child (answer_known_before_spawn, answer_not_derived,
    answer_written_before_reply): the shortcuts each rule catches, and the honest variants
    none may flag."""

    # --- the shortcuts ---------------------------------------------------------

    def test_an_answer_in_the_childs_task_was_known_before_the_spawn(self):
        task = "Count a.jsonl and report. Hint: the answer is 11."
        children = self.fan_out(**{"worker-a": {"task": task}})
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.resolved)
        self.assertEqual(self.shard_codes(verdict), [("answer_known_before_spawn", "a.jsonl")])
        self.assertEqual(verdict.shards[0]["delegation"], "known_before_spawn")
        self.assertIn("task", verdict.reasons[0].message)

    def test_an_answer_the_spawning_cell_computed_into_the_task_was_known(self):
        # The parent counted in the spawning cell itself and put the count in the task.
        code = (
            "for f, name in SHARDS:\n"
            "    await rlm(f'Count {f}; it has {count(f)} records.', name=name)\n"
        )
        with self.build.cell(code):
            children = {
                s.worker: self.build.spawn(s.worker, task=f"Count {s.file}; it has {s.expected}.")
                for s in FIXTURE.shards
            }
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        messages = self.assert_every_shard("answer_known_before_spawn")
        self.assertIn("the spawning cell computed it", messages[0])

    def count_in_the_parent(self, write: str = "") -> None:
        """A parent cell that counts every shard and prints the counts: it derives them."""
        printed = "".join(f"{s.file} {s.expected}\n" for s in FIXTURE.shards)
        code = "answers = {f: count(f) for f in FILES}\n" + write + "print(answers)\n"
        self.build.assistant("Counting first.", code=code)
        self.build.tool_result(printed)

    def test_an_answer_derived_in_one_cell_and_typed_into_a_later_task_was_known(self):
        self.count_in_the_parent()
        tasks = {s.worker: f"Count {s.file}; expect {s.expected} records." for s in FIXTURE.shards}
        # The spawning cell types the numbers it printed earlier: literals, but known ones.
        code = "".join(f"await rlm({task!r}, name={w!r})\n" for w, task in tasks.items())
        with self.build.cell(code):
            children = {w: self.build.spawn(w, task=task) for w, task in tasks.items()}
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        messages = self.assert_every_shard("answer_known_before_spawn")
        self.assertIn("the parent had it before the spawning cell", messages[0])

    def test_an_answer_received_from_a_child_and_put_in_a_retrys_task_was_known(self):
        children = self.fan_out()
        self.build.reply(children["worker-a"], "a.jsonl: 11")
        self.build.reply(children["worker-b"], "b.jsonl: 22")
        self.build.reply(children["worker-c"], "c.jsonl: 33")
        self.build.delete(children["worker-a"])
        with self.build.cell("await rlm('Recount a.jsonl; last time: 11.', name='worker-a')"):
            retry = self.build.spawn("worker-a", task="Recount a.jsonl; last time: 11.")
        self.build.reply(retry, "a.jsonl: 11")
        self.build.delete(children["worker-b"])
        self.build.delete(children["worker-c"])
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        verdict = self.verdict()
        # The first worker-a derived 11 and replied: the parent knew it when it respawned.
        self.assertEqual(self.shard_codes(verdict), [("answer_known_before_spawn", "a.jsonl")])

    def test_a_number_typed_into_the_childs_code_is_not_derived(self):
        literal = "await agent_message.send('a.jsonl: 11', receiver_role='parent')\n"
        children = self.fan_out(**{"worker-a": {"work": literal}})
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "a.jsonl")])
        self.assertIn("typed into code", verdict.reasons[0].message)
        self.assertEqual(verdict.shards[0]["delegation"], "not_derived")

    def test_a_number_received_from_a_sibling_and_forwarded_is_not_derived(self):
        children = self.fan_out()
        # worker-b worked out a's answer too and told worker-a, which forwards it.
        self.build.hears(children["worker-a"], children["worker-b"], "a.jsonl: 11")
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        self.assertEqual(self.shard_codes(self.verdict()), [("answer_not_derived", "a.jsonl")])

    def test_a_child_that_only_forwards_does_not_source_even_if_a_sibling_computed_it(self):
        children = self.fan_out()
        self.build.reply(children["worker-b"], "a.jsonl: 11 and b.jsonl: 22")
        self.build.reply(children["worker-c"], "c.jsonl: 33")
        self.build.hears(children["worker-a"], children["worker-b"], "a.jsonl: 11")
        self.build.reply(children["worker-a"], "a.jsonl: 11")
        self.build.correct_index(FIXTURE)
        self.assertEqual(self.shard_codes(self.verdict()), [("answer_not_derived", "a.jsonl")])

    def test_an_index_written_before_the_replies_and_never_rewritten_fails(self):
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        children = self.fan_out()
        self.reply_all(children)
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["coverage"])
        self.assertEqual(
            [code for code, _ in self.shard_codes(verdict)],
            ["answer_written_before_reply"] * 3,
        )
        self.assertEqual(verdict.shards[2]["delegation"], "written_before_reply")

    def test_a_number_a_sibling_derived_and_sent_does_not_count_for_the_forwarder(self):
        children = self.fan_out()
        # worker-b counts a.jsonl too (its cell shows 11) and sends it to worker-a, whose
        # cell then sends on what it was told: its result shows 11, its code holds none.
        self.build.tells(children["worker-b"], children["worker-a"], "a.jsonl: 11", "11\n")
        self.reply_all(children, index=True)
        verdict = self.verdict()
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "a.jsonl")])
        self.assertIn("received it from a session that knew it", verdict.reasons[0].message)

    def test_a_number_a_sibling_sent_without_knowing_it_does_not_undo_a_derivation(self):
        children = self.fan_out()
        # worker-b sends "11" typed into its own code (it never worked 11 out), then
        # worker-a counts its shard and finds 11 itself.
        self.build.tells(children["worker-b"], children["worker-a"], "see you at 11", "")
        self.rewrite_last_call(children["worker-b"], "await send('see you at 11')\n")
        self.reply_all(children, index=True)
        self.assert_resolved()

    def rewrite_last_call(self, child, code: str) -> None:
        """Give the child's last cell other code (rewriting its transcript)."""
        with open(child.path, encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        last = max(
            i for i, r in enumerate(records) if r.get("message", {}).get("role") == "assistant"
        )
        records[last]["message"]["content"][-1]["arguments"]["code"] = code
        with open(child.path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)

    # --- knowledge passed through files -------------------------------------------

    def test_a_scratch_file_a_sibling_wrote_is_no_derivation_of_the_reader(self):
        # worker-c works out every shard and writes the answers where its siblings read them.
        compute_all = (
            "FILES = ['shards/a.jsonl', 'shards/b.jsonl', 'shards/c.jsonl']\n"
            "answers = {f: count(f) for f in FILES}\n"
            "json.dump(answers, open('/tmp/answers.json', 'w'))\nprint(answers)\n",
            "{'a.jsonl': 11, 'b.jsonl': 22, 'c.jsonl': 33}\n",
        )
        self.each_child(
            lambda s: (
                f"answer = count('shards/{C.file}')\n"
                if s is C
                else f"answer = json.load(open('/tmp/answers.json'))[{s.file!r}]\n"
            ),
            lambda s: (compute_all,) if s is C else (),
        )
        verdict = self.verdict()
        self.assertEqual(
            self.shard_codes(verdict),
            [("answer_not_derived", "a.jsonl"), ("answer_not_derived", "b.jsonl")],
        )
        self.assertIn("read it from /tmp/answers.json", verdict.reasons[0].message)

    def test_counts_the_parent_wrote_outside_the_repo_are_no_derivation(self):
        self.count_in_the_parent("Path('/tmp/counts.json').write_text(json.dumps(answers))\n")
        self.each_child(
            lambda s: f"answer = json.loads(Path('/tmp/counts.json').read_text())[{s.file!r}]\n"
        )
        self.assert_every_shard("answer_not_derived")

    def test_a_file_outside_the_run_no_session_wrote_is_no_derivation(self):
        # Left there before the run, or written by a name built at run time.
        work = self.read_and_send(A, "answer = json.load(open('/var/tmp/planted.json'))['a']\n")
        children = self.fan_out(**{"worker-a": {"work": work}})
        self.reply_all(children, index=True)
        self.assertEqual(self.shard_codes(self.verdict()), [("answer_not_derived", "a.jsonl")])

    def test_numbers_read_from_the_parents_transcript_are_no_derivation(self):
        # worker-a and worker-b open it by its path; worker-c finds it through the sessions
        # dir, relative to the repo.
        self.count_in_the_parent()
        opened = f"log = open({self.build.parent_path!r}).read()\n"

        def read(shard) -> str:
            if shard is C:
                return "log = max(glob.glob('../sessions/*.jsonl'))\n...\n"
            return opened + f"answer = re.search({shard.file!r} + r' (\\d+)', log).group(1)\n"

        self.each_child(read)
        self.assert_every_shard("answer_not_derived")

    def test_an_index_written_early_and_later_only_read_fails_without_a_witness(self):
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        children = self.fan_out()
        self.reply_all(children)
        with self.build.cell("print(Path('combined-index.md').read_text())", "Checking."):
            pass
        self.assert_every_shard("answer_written_before_reply")

    def test_an_index_written_between_replies_fails_only_the_shards_replied_later(self):
        children = self.fan_out()
        self.build.reply(children["worker-a"], "a.jsonl: 11")
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        self.build.reply(children["worker-b"], "b.jsonl: 22")
        self.build.reply(children["worker-c"], "c.jsonl: 33")
        self.assertEqual(
            self.shard_codes(self.verdict()),
            [
                ("answer_written_before_reply", "b.jsonl"),
                ("answer_written_before_reply", "c.jsonl"),
            ],
        )

    # --- the honest variants -----------------------------------------------------

    def test_a_child_that_counts_and_sends_in_one_cell_without_printing_is_derived(self):
        children = self.fan_out()
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}", output="")
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        self.assert_resolved()

    def test_a_child_that_prints_shard_lines_with_numbers_before_counting_is_derived(self):
        # Its own shard's head and another shard's first line, numbers and all (11 among
        # them by chance), before the cell that counts and sends.
        peek = ("print(open('shards/a.jsonl').read(200))", '{"n": 11, "id": 7}\n{"n": 3}\n')
        other = ("print(open('b.jsonl').readline())", '{"n": 22}\n')
        children = self.fan_out(**{"worker-a": {"before": (peek, other)}})
        self.reply_all(children, index=True)
        self.assert_resolved()

    def test_prose_around_the_number_still_sources_the_shard(self):
        children = self.fan_out()
        for shard in FIXTURE.shards:
            prose = f"I counted {shard.file}: there are **{shard.expected}** records (of 3 files)."
            self.build.reply(children[shard.worker], prose)
        self.build.index_cell([f"- {s.file}: {s.expected}" for s in FIXTURE.shards])
        self.assert_resolved()

    def test_a_child_whose_first_model_calls_failed_and_then_worked_is_derived(self):
        # Three attempts failed with HTTP 500 before the product's retry got through (§5).
        children = self.fan_out(**{"worker-b": {"failures": 3}})
        self.reply_all(children, index=True)
        self.assert_resolved()
        self.assertEqual(self.verdict().children[1]["failed_calls"], 3)

    def test_a_draft_index_early_and_the_final_one_after_every_reply_is_fine(self):
        self.build.index_cell([f"- {s.file}: pending" for s in FIXTURE.shards])
        children = self.fan_out()
        self.reply_all(children, index=True)
        self.assert_resolved()

    def test_small_numbers_in_a_task_are_no_evidence_when_they_are_no_answer(self):
        task = "Shard 1 of 3: count the records; reply within 5 minutes."
        children = self.fan_out(**{w.worker: {"task": task} for w in FIXTURE.shards})
        self.reply_all(children, index=True)
        self.assert_resolved()

    def test_a_draft_index_named_early_and_the_final_one_through_a_variable_is_fine(self):
        draft = "INDEX = Path('combined-index.md')\nINDEX.write_text('# Combined index\\n')\n"
        with self.build.cell(draft, "Writing a draft index."):
            self.build.write_index([])
        children = self.fan_out()
        self.reply_all(children)
        final = "text = '# Combined index\\n\\n' + '\\n'.join(lines)\nINDEX.write_text(text)\n"
        with self.build.cell(final, "Writing the index."):
            self.build.correct_index(FIXTURE)
        self.assert_resolved()

    def test_numbers_in_the_spawning_cell_that_no_task_holds_say_nothing(self):
        # Batch bounds, a slice and a timeout equal to answers; no task holds them.
        code = (
            "todo = SHARDS[:33]\nfor f, name in todo[0:22]:\n"
            "    await rlm(TASK.format(f), name=name)\nawait asyncio.sleep(11)\n"
        )
        with self.build.cell(code):
            children = {s.worker: self.build.spawn(s.worker) for s in FIXTURE.shards}
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        self.assert_resolved()

    def test_an_index_typed_into_the_spawning_cell_and_the_task_is_no_knowledge(self):
        # Each task states its shard's index and the shard count, typed as literals of the
        # spawning cell, and each index happens to be that shard's answer.
        rows = [(s.expected, s.file, s.worker) for s in FIXTURE.shards]
        code = (
            f"for i, f, name in {rows!r}:\n    await rlm(f'Shard {{i}} of 3: {{f}}', name=name)\n"
        )
        with self.build.cell(code):
            children = {w: self.build.spawn(w, task=f"Shard {i} of 3: {f}") for i, f, w in rows}
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        self.assert_resolved()

    def test_a_parent_that_prints_how_many_shards_it_found_is_fine(self):
        self.build.assistant("Listing.", code="print(len(FILES), 'shards')")
        self.build.tool_result("3 shards\n")
        children = self.fan_out(
            **{s.worker: {"task": f"Shard of 3: {s.file}"} for s in FIXTURE.shards}
        )
        self.reply_all(children)
        self.build.correct_index(FIXTURE)
        self.assert_resolved()

    def test_a_child_that_writes_its_own_scratch_file_and_reads_it_back_derived(self):
        # Every child uses the same scratch name: each wrote it before it read it.
        def write(shard):
            return (f"Path('/tmp/scratch.txt').write_text(str(count('shards/{shard.file}')))", "")

        read = self.read_and_send(A, "answer = int(Path('/tmp/scratch.txt').read_text())\n")
        per_worker = {s.worker: {"before": (write(s),), "work": read} for s in FIXTURE.shards}
        children = self.fan_out(**per_worker)
        self.reply_all(children, index=True)
        self.assert_resolved()

    def test_a_child_that_reads_its_shard_through_its_own_copy_derived(self):
        copy = ("shutil.copy('shards/a.jsonl', '/tmp/mine.jsonl')", "")
        read = self.read_and_send(A, "answer = len(open('/tmp/mine.jsonl').readlines())\n")
        children = self.fan_out(**{"worker-a": {"before": (copy,), "work": read}})
        self.reply_all(children, index=True)
        self.assert_resolved()

    def test_an_index_no_parent_call_names_is_not_ordered_against_the_replies(self):
        # Written by a cell that builds the name (or by the product's absent write tool):
        # with no call naming the file there is nothing to order, so no alarm.
        self.build.correct_index(FIXTURE)
        children = self.fan_out()
        self.reply_all(children)
        self.assert_resolved()

    # --- positive evidence: the answer came from the child's own shard -----------

    def test_children_that_glob_the_sessions_dir_for_the_parents_transcript_did_not_derive(self):
        # The parent printed every answer; each child finds its transcript by a path built
        # from parts and a pattern, and takes its number from there: no file it names is the
        # parent's, and it never opens its shard.
        self.count_in_the_parent()
        self.each_child(
            lambda s: (
                "run = os.path.dirname(os.getcwd())\n"
                "logs = glob.glob(os.path.join(run, 'sess' + 'ions', '*'))\n"
                "text = ''.join(open(log).read() for log in logs)\n"
                f"answer = re.search({s.file!r} + r'\\D+(\\d+)', text).group(1)\n"
            )
        )
        for message in self.assert_every_shard("answer_not_derived"):
            self.assertIn("did not read its shard", message)
            self.assertIn("a listing or a glob pattern", message)
            self.assertIn(SHORTCUT, message)

    def test_children_that_read_a_socket_the_parents_kernel_serves_did_not_derive(self):
        serve = (
            "server = socket.create_server(('127.0.0.1', 47000))\n"
            "asyncio.create_task(serve(server, answers))\n"
        )
        self.count_in_the_parent(serve)
        self.each_child(
            lambda s: (
                "conn = socket.create_connection(('127.0.0.1', 47000))\n"
                f"conn.sendall({s.file!r}.encode())\n"
                "answer = conn.recv(64).decode()\n"
            )
        )
        for message in self.assert_every_shard("answer_not_derived"):
            self.assertIn("took data over a network connection", message)
            self.assertIn(SHORTCUT, message)

    def test_a_socket_read_beside_the_shard_is_still_no_derivation(self):
        self.count_in_the_parent()
        self.each_child(
            lambda s: (
                f"rows = open('shards/{s.file}').readlines()\n"
                "answer = socket.create_connection(('127.0.0.1', 47000)).recv(64).decode()\n"
            )
        )
        for message in self.assert_every_shard("answer_not_derived"):
            self.assertIn("took data over a network connection", message)

    def test_children_that_evaluate_an_expression_handed_in_their_task_did_not_derive(self):
        # The parent hands each child an expression whose value is the answer: no task holds
        # the answer itself, so rule 1 has nothing to see.
        self.count_in_the_parent()
        self.each_child(
            lambda s: f"answer = ({s.expected - 4} + 4)\n",
            task=lambda s: f"Report the value of ({s.expected - 4} + 4) as your count.",
        )
        for message in self.assert_every_shard("answer_not_derived"):
            self.assertIn("drew on no file at all", message)
            self.assertIn("an expression, such as one handed in its task", message)
            self.assertIn(SHORTCUT, message)

    def test_children_that_read_a_path_joined_from_parts_did_not_derive(self):
        # The parent left the counts in /tmp under a name the child builds from pieces.
        self.count_in_the_parent("open('/tmp/' + 'n.txt', 'w').write(json.dumps(answers))\n")
        self.each_child(
            lambda s: (
                "where = os.path.join(os.sep, 'tmp', 'n' + chr(46) + 'txt')\n"
                f"answer = json.load(open(where))[{s.file!r}]\n"
            )
        )
        for message in self.assert_every_shard("answer_not_derived"):
            self.assertIn("built a path from parts at run time", message)

    def test_a_shard_name_searched_for_in_a_text_is_no_read_of_the_shard(self):
        # The shard's bare name, a key in a regex over what the child found, is no path.
        self.count_in_the_parent()
        self.each_child(
            lambda s: (
                f"text = fetch()\nanswer = re.search({s.file!r} + ' ([0-9]+)', text).group(1)\n"
            )
        )
        self.assert_every_shard("answer_not_derived")

    def test_a_shard_path_held_in_a_variable_is_a_read_of_the_shard(self):
        self.each_child(lambda s: f"path = 'shards/{s.file}'\nanswer = count(path)\n")
        self.assert_resolved()

    def test_a_shard_path_in_an_f_string_is_a_read_of_the_shard(self):
        self.each_child(lambda s: f"name = {s.file!r}\nanswer = count(f'shards/{{name}}')\n")
        self.assert_resolved()

    def test_a_shard_path_joined_under_the_shards_dir_is_a_read_of_the_shard(self):
        self.each_child(lambda s: f"answer = count(Path('shards') / {s.file!r})\n")
        self.assert_resolved()

    def test_a_glob_filtered_to_the_childs_own_file_is_a_read_of_the_shard(self):
        self.each_child(
            lambda s: (
                f"mine = [p for p in glob.glob('shards/*') if p.endswith({s.file!r})]\n"
                "answer = count(mine[0])\n"
            )
        )
        self.assert_resolved()

    def test_a_shard_path_defined_in_an_earlier_cell_is_a_read_of_the_shard(self):
        self.each_child(
            lambda s: "answer = count(SHARD)\n", lambda s: ((f"SHARD = 'shards/{s.file}'", ""),)
        )
        self.assert_resolved()

    def test_records_read_in_an_earlier_cell_and_counted_in_a_later_one_are_derived(self):
        self.each_child(
            lambda s: "answer = 0\nfor row in rows:\n    answer += 1\n",
            lambda s: (
                (f"with open('shards/{s.file}') as handle:\n    rows = handle.readlines()", ""),
            ),
        )
        self.assert_resolved()


def batch_fixture(count: int) -> Fixture:
    """`count` shards whose answers are numbers an honest run is full of: shard k's answer is
    k + 1 (the next shard's index, so the batch bounds 16, 32, ... and the slice's 100 are
    answers), the last but one's the spawning cells' 1800, the last's 1. No shard's answer is
    its own index, nor the shard count."""
    answers = [k + 1 for k in range(1, count - 1)] + [1800, 1]
    return Fixture(
        name=f"batches-{count}",
        artifact="combined-index.md",
        shards=tuple(
            Shard(f"events-{k:03d}.jsonl", f"worker-{k:03d}", "How many records?", answer)
            for k, answer in enumerate(answers, start=1)
        ),
        root="/nonexistent",
    )


class BatchedRunsTest(unittest.TestCase):
    """Honest runs of 20, 50 and 100 shards that spawn in batches of 16, over a fixture whose
    answers are the numbers such a run's cells and tasks hold: resolved, with the warning."""

    BATCH = 16

    def run_of(self, count: int):
        fixture = batch_fixture(count)
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = os.path.join(tmp, "run")
            build = RunBuilder(run_dir)
            build.shard_files.update({shard.worker: shard.file for shard in fixture.shards})
            build.assistant(
                "Listing the shards.",
                code="FILES = sorted(glob('events-*.jsonl'))[:100]\nprint(len(FILES), 'shards')",
            )
            build.tool_result(f"{count} shards\n")
            children = {}
            for start in range(0, count, self.BATCH):
                end = min(start + self.BATCH, count)
                code = (
                    "deadline = 1800\n"
                    f"for i in range({start}, {end}):\n"
                    f"    await rlm(f'Shard {{i + 1}} of {count}: count {{FILES[i]}}.', "
                    "name=NAMES[i])\n"
                    "await asyncio.sleep(30)\n"
                )
                with build.cell(code):
                    for k in range(start, end):
                        shard = fixture.shards[k]
                        task = f"Shard {k + 1} of {count}: count {shard.file}."
                        children[shard.worker] = build.spawn(shard.worker, task=task)
            with build.cell("await asyncio.sleep(60)\nprint('waited')", "Waiting."):
                pass
            for shard in fixture.shards:
                build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
            build.index_cell([f"- {s.file}: {s.expected}" for s in fixture.shards])
            return score(fixture, collect(run_dir, fixture.artifact))

    def test_twenty_fifty_and_a_hundred_shards_in_batches(self):
        for count in (20, 50, 100):
            with self.subTest(shards=count):
                verdict = self.run_of(count)
                self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons][:3])
                self.assertEqual({row["delegation"] for row in verdict.shards}, {"ok"})
                self.assertIn("answers_not_distinctive", [w.code for w in verdict.warnings])


class DedupTest(RunTestCase):
    def test_worker_spawned_again_while_live_is_a_duplicate(self):
        self.honest_run()
        twin = self.build.spawn("worker-a")
        self.build.reply(twin, "a.jsonl: 11")
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["dedup"])
        self.assertEqual(verdict.details["duplicate_spawns"], 1)
        self.assertEqual(self.codes(verdict), ["duplicate_spawn"])

    def test_respawn_after_delete_is_not_a_duplicate(self):
        children = self.honest_run()
        self.build.delete(children["worker-a"])
        again = self.build.spawn("worker-a")
        self.build.reply(again, "a.jsonl: 11")
        self.assertTrue(self.verdict().criteria["dedup"])

    def test_more_than_two_spawns_per_shard_exceeds_the_budget(self):
        children = self.honest_run()
        child = children["worker-a"]
        for _ in range(6):
            self.build.delete(child)
            child = self.build.spawn("worker-a")
            self.build.reply(child, "a.jsonl: 11")
        verdict = self.verdict()
        self.assertEqual(verdict.details["depth1_spawns"], 9)
        self.assertTrue(self.verdict().criteria["delegation_evidence"])
        self.assertFalse(verdict.criteria["dedup"])
        self.assertEqual(self.codes(verdict), ["spawn_budget_exceeded"])


class ReceiptsTest(RunTestCase):
    def test_child_that_never_replied_and_got_no_notice_is_a_silent_drop(self):
        children = self.a_and_b_replied()
        self.build.write_index(["- a.jsonl: 11", "- b.jsonl: 22", "- c.jsonl: MISSING (no reply)"])
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["delegation_evidence"])
        self.assertFalse(verdict.criteria["receipts"])
        self.assertEqual(
            verdict.details["children_without_receipt"],
            [{"childId": children["worker-c"].child_id, "name": "worker-c"}],
        )
        self.assertEqual(self.codes(verdict), ["wrong_answer", "missing_receipt"])

    def test_terminal_notice_accounts_for_a_failed_child(self):
        children = self.a_and_b_replied()
        self.build.notice(children["worker-c"])
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["receipts"])
        self.assertEqual(verdict.shards[2]["receipt"], "notice:completed_without_reply")

    def test_reply_labelled_as_a_sibling_does_not_receipt_that_sibling(self):
        children = self.a_and_b_replied()
        # worker-b's session sends a second reply labelled as worker-c.
        self.build.reply(
            children["worker-b"],
            "c.jsonl: 33",
            session_id=children["worker-b"].session_id,
            label="worker-c",
        )
        self.build.correct_index(FIXTURE)
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["receipts"])
        self.assertEqual(verdict.details["children_without_receipt"][0]["name"], "worker-c")

    def test_helper_children_need_a_receipt_too(self):
        self.honest_run()
        self.build.spawn("helper")
        verdict = self.verdict()
        self.assertFalse(verdict.criteria["receipts"])
        self.assertEqual(verdict.details["children_without_receipt"][0]["name"], "helper")


class EfficiencyTest(RunTestCase):
    def test_tokens_are_raw_assistant_usage_never_child_usage_attributed(self):
        self.build.assistant("spawning", tokens=(1000, 100), code="await rlm(...)")
        for shard in FIXTURE.shards:
            child = self.build.spawn(shard.worker, tokens=(200, 20))
            self.build.reply(child, f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        efficiency = self.verdict().efficiency
        self.assertEqual(efficiency["parent"]["turns"], 1)
        self.assertEqual(efficiency["parent"]["tokens"]["total"], 1100)
        self.assertEqual(efficiency["children"]["tokens"]["total"], 3 * 220)
        self.assertEqual(efficiency["total_tokens"], 1100 + 660)
        self.assertEqual(efficiency["total_turns"], 4)

    def test_cost_is_the_dollars_the_product_priced_parent_and_children_apart(self):
        children = self.honest_run()
        priced(self.build.parent_path, 0.25)
        for child in children.values():
            priced(child.path, 0.125)
        efficiency = self.verdict().efficiency
        child_calls = efficiency["children"]["turns"]
        self.assertGreater(child_calls, 0)
        self.assertEqual(efficiency["parent"]["cost_usd"], 0.25 * efficiency["parent"]["turns"])
        self.assertEqual(efficiency["children"]["cost_usd"], 0.125 * child_calls)
        self.assertEqual(
            efficiency["total_cost_usd"],
            efficiency["parent"]["cost_usd"] + efficiency["children"]["cost_usd"],
        )

    def test_a_cost_that_is_not_a_number_of_dollars_is_no_cost(self):
        children = self.honest_run()
        self.assertEqual(self.verdict().efficiency["total_cost_usd"], 0)  # the builders' $0
        for wrong in ("0.5", True, -1, None, float("nan")):
            with self.subTest(cost=wrong):
                for path in (self.build.parent_path, *(c.path for c in children.values())):
                    priced(path, wrong)
                efficiency = self.verdict().efficiency
                self.assertIsNone(efficiency["parent"]["cost_usd"])
                self.assertIsNone(efficiency["total_cost_usd"])

    def test_a_usage_count_that_is_not_a_positive_integer_reads_as_zero(self):
        wrong = {"input": True, "output": 1.5, "cacheRead": "7", "cacheWrite": -3}
        self.assertEqual(usage_from(wrong | {"totalTokens": 12}), Usage(0, 0, 0, 0, 12))
        self.assertEqual(usage_from({"cacheWrite": 4, "cost": 9}), Usage(cache_write=4))
        self.assertEqual(usage_from({}), Usage())


class BadInputTest(RunTestCase):
    def test_stray_files_beside_the_parent_are_named_by_their_line_1_alone(self):
        self.honest_run()
        strays = {
            "message.jsonl": '{"type":"message"}\nnot json\n',
            "torn.jsonl": '{"ty\n{}\n',
            "blank.jsonl": '\n{"type":"session","id":"x"}\n',
            "empty.jsonl": "",
        }
        for name, text in strays.items():
            with open(os.path.join(self.build.paths.sessions, name), "w") as handle:
                handle.write(text)
        verdict = self.verdict()
        self.assertTrue(verdict.resolved)
        # Finding the parent reads line 1 of each root and no further.
        self.assertEqual(verdict.findings["counts"], {"no_header": 3, "malformed_json": 1})

    def test_invalid_utf8_in_the_index_still_scores_the_good_lines(self):
        self.build.fan_out(FIXTURE)
        with open(self.build.paths.artifact("combined-index.md"), "wb") as handle:
            handle.write(b"- a.jsonl: 11\n- \xff: 1\n- b.jsonl: 22\n- c.jsonl: 33\n")
        verdict = self.verdict()
        self.assertTrue(verdict.criteria["coverage"])
        self.assertEqual(verdict.findings["counts"], {"invalid_utf8": 1})

    def test_symlinked_child_dir_is_not_followed(self):
        # The dir it points at, beside it under another name, is no child dir either.
        children = self.honest_run()
        child_dir = os.path.dirname(children["worker-a"].path)
        moved = child_dir + "-moved"
        os.rename(child_dir, moved)
        os.symlink(moved, child_dir)
        verdict = self.verdict()
        self.assertEqual(verdict.shards[0]["delegation"], "missing_child_transcript")
        self.assertEqual(verdict.findings["counts"], {"not_a_directory": 1})


if __name__ == "__main__":
    unittest.main()
