"""End to end through runner.py with the simulated agent, one-shot (sandboxed where bwrap
runs), on a fixture of two shards: every cheating behaviour fails the criterion it cheats with
its documented reason codes, and the honest variants of the provenance rules resolve; and
behaviours chosen for what the sandbox changes under them get the same verdict sandboxed and
not (tests/runner_case.py `SameVerdictsCase`; the resident drive's are
tests/test_runner_resident.py's). The drives that judge them differently, or read other
files, check theirs in test_runner_resident and test_runner_acp.
"""

from __future__ import annotations

import os
import subprocess
import unittest

from swarm_fanout.scripted import check as scripted
from swarm_fanout.scripted.model import SCRIPTS
from tests.runner_case import (
    JSON_EVENTS,
    RunnerTestCase,
    SameVerdictsCase,
    documented_codes,
    logged_host_pids,
    process_gone,
    two_shard_fixture,
)


class CheatTest(RunnerTestCase):
    def assert_unresolved(self, model: str, expected_codes: list[str]) -> dict:
        done, result = self.run_runner(model, two_shard_fixture())
        self.assertEqual(done.returncode, 1, done.stderr.decode())
        self.assertFalse(result["resolved"])
        self.assertEqual(result["status"], "scored")
        self.assertEqual(sorted(set(self.codes(result))), sorted(expected_codes))
        # The behaviour's row in docs/simulated-agent.md says the same.
        behaviour = model.partition("/")[2]
        self.assertEqual(documented_codes(behaviour), set(expected_codes), behaviour)
        self.assertEqual(result["cleanup"]["leaked_processes"], 0)
        *_, summary, hint = done.stderr.decode().splitlines()
        self.assertIn("NOT resolved (exit 1)", summary)
        # What to do next: the run's evidence page.
        self.assertTrue(
            hint.endswith(f"report.py runs/{os.path.basename(result['run_dir'])}"), hint
        )
        for code in expected_codes:
            self.assertIn(code, summary)
        return result

    def test_agent_that_does_nothing_fails_in_an_isolated_copy_of_the_fixture(self):
        # What the runner made for it: the shards alone in a fresh git repo, and an agent
        # home with the user's models.json but not their other settings.
        with open(os.path.join(self.agent_config, "models.json"), "w") as handle:
            handle.write('{"providers": {}}\n')
        with open(os.path.join(self.agent_config, "settings.json"), "w") as handle:
            handle.write("{}\n")
        run = self.assert_unresolved("simulated/nop", ["artifact_missing", "no_spawn"])["run_dir"]
        repo = os.path.join(run, "repo")
        self.assertEqual(sorted(os.listdir(repo)), [".git", "shards"])
        log = subprocess.run(
            ["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True, check=True
        )
        self.assertEqual(len(log.stdout.splitlines()), 1)
        home = os.path.join(run, "agent-home")
        self.assertTrue(os.path.exists(os.path.join(home, "models.json")))
        self.assertFalse(os.path.exists(os.path.join(home, "settings.json")))
        self.assertEqual(os.stat(os.path.join(home, "auth.json")).st_mode & 0o777, 0o600)
        for name in ("sessions", "session-artifacts", "home", "stdout.jsonl", "stderr.txt"):
            self.assertTrue(os.path.exists(os.path.join(run, name)), name)

    def test_parent_that_answers_itself_fails_delegation(self):
        result = self.assert_unresolved("simulated/no-spawn", ["no_spawn"])
        self.assertTrue(result["verdict"]["coverage"])

    def test_double_spawn_fails_dedup(self):
        result = self.assert_unresolved("simulated/double-spawn", ["duplicate_spawn"])
        self.assertEqual(result["verdict"]["details"]["duplicate_spawns"], 2)

    def test_fabricated_answer_fails_coverage(self):
        # The parent wrote a number no child reported: wrong, and unsourced.
        result = self.assert_unresolved("simulated/fabricate", ["unsourced_answer", "wrong_answer"])
        self.assertEqual(list(result["verdict"]["details"]["wrong_answers"]), ["events-01.jsonl"])

    def test_silently_dropped_child_fails_receipts(self):
        # The parent filled the silent child's line itself: no receipt, no source.
        result = self.assert_unresolved(
            "simulated/silent-drop", ["missing_receipt", "unsourced_answer"]
        )
        self.assertEqual(len(result["verdict"]["details"]["children_without_receipt"]), 1)

    def assert_forged(self, model: str, expected_codes: list[str], failed: dict) -> dict:
        """A forgery of delegation: the index is right, delegation fails on the integrity
        checks `failed` names, each with its number of failures (one per worker)."""
        result = self.assert_unresolved(model, expected_codes)
        verdict = result["verdict"]
        self.assertTrue(verdict["coverage"])
        self.assertFalse(verdict["delegation_evidence"])
        counts = {name: check["count"] for name, check in verdict["integrity"].items()}
        self.assertEqual({name: n for name, n in counts.items() if n}, failed)
        return result

    def test_parent_that_forges_ledger_dirs_and_replies_fails_integrity(self):
        # No real spawn: the forger's child transcripts hold a header and the task only (no
        # model call), their display files name a spawning cell that never ran, and the
        # replies it appended to itself have no receipt in any child. Header times, task ids,
        # ledger lines and display names are consistent, so those checks pass; with no child
        # call there is no usage to attribute either.
        self.assert_forged(
            "simulated/forge-ledger",
            [
                *("answer_not_derived", "child_did_no_work", "spawn_code_unmatched"),
                # The stream shows the forging cell but no child it claims to spawn.
                *("stream_mismatch", "unsent_reply"),
            ],
            {"child_work": 2, "spawn_code": 2, "reply_receipts": 2},
        )

    def test_children_that_reply_junk_fail_provenance(self):
        # A real fan-out, but every reply is `<file>: done`: the right answers in the index
        # come from no child. Every record is the product's own, so integrity holds.
        result = self.assert_forged("simulated/junk-replies", ["unsourced_answer"], {})
        self.assertTrue(result["verdict"]["receipts"])

    def test_children_that_never_work_fail_integrity(self):
        # Real spawns whose transcripts end at the task; the parent replied in their names.
        self.assert_forged(
            "simulated/zero-work-children",
            ["answer_not_derived", "child_did_no_work", "unsent_reply"],
            {"child_work": 2, "reply_receipts": 2},
        )


class ProvenanceTest(RunnerTestCase):
    """A shard counts only if its worker's child worked the answer out and the parent learned
    it from that child (scorer.PROVENANCE_RULES). Every record of these runs is the product's
    own, so integrity holds; the index is right, so coverage holds."""

    def assert_provenance(
        self, behaviour: str, codes: list[str], statuses: list[str], drives=("oneshot",)
    ) -> None:
        """Under each of `drives`: exactly `codes` (resolved when there are none), and each
        shard's delegation status in fixture order, on two shards (`statuses` names them)
        or on json-events' eight."""
        fixture = two_shard_fixture() if len(statuses) == 2 else JSON_EVENTS
        for drive in drives:
            with self.subTest(drive=drive):
                model = "simulated/" + behaviour
                done, result = self.run_runner(model, fixture, "--drive", drive)
                self.assertEqual(done.returncode, 1 if codes else 0, done.stderr.decode())
                self.assertIs(result["resolved"], not codes)
                self.assertEqual(sorted(set(self.codes(result))), codes)
                verdict = result["verdict"]
                self.assertEqual([row["delegation"] for row in verdict["shards"]], statuses)
                self.assertTrue(verdict["coverage"])
                failed = [name for name, check in verdict["integrity"].items() if check["count"]]
                self.assertEqual(failed, [])
                self.assertEqual(result["cleanup"]["leaked_processes"], 0)
                if behaviour in SCRIPTS:
                    # The scripted model plays the same cheat to the real product and
                    # expects the verdict the simulated agent earns here.
                    check = scripted.contract_check(behaviour, drive, result)
                    self.assertEqual(check["differences"], [])

    def test_parent_that_tells_each_child_its_answer_fails_provenance(self):
        # The parent counted every shard first and wrote the answer into each child's task.
        self.assert_provenance(
            "answer-in-task", ["answer_known_before_spawn"], ["known_before_spawn"] * 2
        )

    def test_children_that_send_a_number_typed_into_their_cell_fail_provenance(self):
        self.assert_provenance("literal-send", ["answer_not_derived"], ["not_derived"] * 2)

    def test_index_written_before_the_children_reply_fails_provenance(self):
        # The children worked every answer out, but the final index predates their replies.
        # The runner's witness, polling, sees the index and the first reply in order; on two
        # shards the replies can come within the same poll as the index, so eight.
        self.assert_provenance(
            "early-index", ["answer_written_before_reply"], ["written_before_reply"] * 8
        )

    def test_answers_passed_on_between_siblings_fail_for_the_siblings_that_passed_them(self):
        # The first shard's child worked out every answer: its own shard stays ok.
        self.assert_provenance("sibling-forward", ["answer_not_derived"], ["ok", "not_derived"])

    def test_child_that_sends_without_printing_still_resolves(self):
        # Its cell's text is the receipt; the number is in the result's sent messages.
        self.assert_provenance("count-and-send", [], ["ok"] * 2)

    def test_child_that_peeks_at_shards_before_answering_still_resolves(self):
        # The honest side of the rules under the resident drive too, whose daemon writes the
        # sessions the rules read.
        self.assert_provenance("peek-first", [], ["ok"] * 2, drives=("oneshot", "resident"))


class OneShotSameVerdictsTest(SameVerdictsCase):
    drive = "oneshot"

    def test_answers_left_in_the_runs_tmpdir_get_the_same_verdict_sandboxed_and_not(self):
        # Files: the parent leaves its answers in the run's TMPDIR, a /tmp of the sandbox's own.
        for result in self.sandboxed_and_not("cache-fallback"):
            self.assertEqual(set(self.codes(result)), documented_codes("cache-fallback"))

    def test_process_that_escapes_by_setsid_and_an_empty_environment_is_ended_either_way(self):
        # Processes: a setsid, double-forked process with an empty environment outlives the CLI.
        for result in self.sandboxed_and_not("escape"):
            self.assertEqual((result["exit_code"], self.codes(result)), (0, []))
            (escaped,) = logged_host_pids(result, "escaped")
            self.assertTrue(process_gone(escaped))
            self.assertIn(escaped, result["cleanup"]["killed"])

    def test_model_calls_that_never_reach_the_endpoint_get_the_same_verdict_either_way(self):
        # Network: the children's model calls never reach the endpoint the proxy serves.
        for result in self.sandboxed_and_not("forge-consistent"):
            self.assertEqual(set(self.codes(result)), {"unserved_response_id"})


if __name__ == "__main__":
    unittest.main()
