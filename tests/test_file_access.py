"""The witness of file access: the recorder (shell/file_access.py) on real processes, and the
rules that read it (rules/file_access.py, positive evidence in rules/knowledge.py) on
builder-made witnessed runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import unittest

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.witness import read_witness
from swarm_fanout.rules.file_access import file_access
from swarm_fanout.rules.knowledge import UNWITNESSED
from swarm_fanout.scorer import score
from swarm_fanout.shell import observer
from swarm_fanout.shell.file_access import FileAccessWitness
from tests import test_witness
from tests.builders import small_fixture

FIXTURE = small_fixture()
A, B, C = FIXTURE.shards
DEADLINE_S = 30.0
UNPRIVILEGED = {"witnessed": False, "why": "Operation not permitted: fanotify needs CAP_SYS_ADMIN"}


class RecorderTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.root = os.path.realpath(tmp.name)
        self.witness = FileAccessWitness(self.root).start()
        self.addCleanup(self.witness.stop)

    def test_it_records_which_process_opened_a_file_or_says_why_it_cannot(self):
        status = self.witness.status()
        if not status["witnessed"]:
            self.assertIn("fanotify", status["why"])
            self.assertEqual(self.witness.records(), [])
            return
        path = os.path.join(self.root, "shards", "a.jsonl")
        os.makedirs(os.path.dirname(path))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("{}\n")  # the runner's own write: not recorded
        reader = subprocess.Popen(
            [sys.executable, "-c", f"open({path!r}).read(); input()"], stdin=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not self.witness.records() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            reader.communicate(b"\n", timeout=DEADLINE_S)
        (record,) = [r for r in self.witness.records() if r["path"] == "shards/a.jsonl"]
        self.assertEqual((record["pid"], record["what"]), (reader.pid, "open"))
        self.assertEqual(record["ancestors"][0], os.getpid())
        self.assertNotIn(os.getpid(), [r["pid"] for r in self.witness.records()])

    def test_a_tmpdir_kept_outside_the_run_dir_is_recorded_where_the_layout_has_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            witness = FileAccessWitness(self.root, tmp).start()
            self.addCleanup(witness.stop)
            if not witness.status()["witnessed"]:
                self.assertEqual(witness.records(), [])
                return
            path = os.path.join(os.path.realpath(tmp), "counts.txt")
            subprocess.run([sys.executable, "-c", f"open({path!r}, 'w').write('1')"], check=True)
            deadline = time.monotonic() + DEADLINE_S
            while not any(r["what"] == "write" for r in witness.records()):
                self.assertLess(time.monotonic(), deadline, witness.records())
                time.sleep(0.05)
            witness.stop()
            self.assertEqual({r["path"] for r in witness.records()}, {"tmp/counts.txt"})


class FileAccessRuleTest(unittest.TestCase):
    """A builder's witnessed run whose witness also holds what each kernel opened."""

    setUp = test_witness.WitnessedRunTest.setUp
    sightings = test_witness.WitnessedRunTest.sightings
    model_calls = test_witness.WitnessedRunTest.model_calls

    PARENT_KERNEL = 90

    def fan_out(self) -> dict:
        children = self.build.fan_out(FIXTURE, reply=False)
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        self.build.finish()
        return children

    def kernels(self, children: dict) -> dict[str, int]:
        return {worker: 100 + k for k, worker in enumerate(sorted(children))}

    def honest_opens(self, children: dict) -> list[dict]:
        """Each child's kernel snapshots its state, opens its shard and the shared IPython
        history; the parent's kernel writes the index."""
        root = self.build.root_id
        opens = [
            self.opened(self.PARENT_KERNEL, "write", f"session-artifacts/{root}/kernel-state.json"),
            self.opened(self.PARENT_KERNEL, "write", "repo/combined-index.md"),
        ]
        for shard in FIXTURE.shards:
            pid = self.kernels(children)[shard.worker]
            state = f"session-artifacts/{root}/session-artifacts/"
            state += f"{children[shard.worker].session_id}/kernel-state.json"
            opens += [
                self.opened(pid, "open", f"repo/shards/{shard.file}"),
                self.opened(pid, "write", "home/.ipython/profile_default/history.sqlite"),
                self.opened(pid, "write", state),
            ]
        return opens

    def opened(self, pid: int, what: str, path: str, ancestors=(1000,)) -> dict:
        return {"pid": pid, "what": what, "path": path, "seen": 1.0, "ancestors": list(ancestors)}

    def verdict(self, opens: list[dict], status: dict | None = None):
        header = {"file_access": status or {"witnessed": True, "mechanism": "fanotify"}}
        digest = observer.write_witness(
            self.paths.witness,
            header={"proxy": True, **header},
            model_calls=self.model_calls(),
            sightings=self.sightings(),
            channels=[],
            file_opens=opens,
        )
        return score(FIXTURE, collect(self.run_dir, FIXTURE.artifact, digest))

    def shard_codes(self, verdict) -> list[tuple[str, str | None]]:
        return [(reason.code, reason.shard) for reason in verdict.reasons]

    def test_an_honest_run_whose_kernels_opened_their_shards_is_resolved(self):
        children = self.fan_out()
        verdict = self.verdict(self.honest_opens(children))
        self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons])
        self.assertEqual(verdict.witness["file_access"], {"witnessed": True, "sessions": 4})

    def test_a_child_whose_kernel_opened_the_parents_transcript_did_not_derive(self):
        # Its code names its shard as an honest child's does; its kernel read the parent's
        # transcript, found by a path the code never spelled.
        children = self.fan_out()
        parent = os.path.relpath(self.build.parent_path, self.paths.root)
        opens = self.honest_opens(children)
        opens.append(self.opened(self.kernels(children)["worker-a"], "open", parent))
        verdict = self.verdict(opens)
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "a.jsonl")])
        self.assertIn(f"the runner saw its processes open {parent}", verdict.reasons[0].message)

    def test_a_file_the_parents_kernel_wrote_read_by_a_childs_shell_is_foreign(self):
        children = self.fan_out()
        kernel = self.kernels(children)["worker-b"]
        opens = self.honest_opens(children)
        opens.append(self.opened(self.PARENT_KERNEL, "write", "tmp/counts.txt"))
        # A `cat` the child's cell started through a shell: its kernel is its ancestor.
        opens.append(self.opened(7001, "open", "tmp/counts.txt", ancestors=(7000, kernel, 1000)))
        verdict = self.verdict(opens)
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "b.jsonl")])
        self.assertIn("open tmp/counts.txt", verdict.reasons[0].message)

    def test_a_repo_file_another_session_wrote_that_a_replay_held_is_the_replays_to_judge(self):
        # The parent's loader module, whose bytecode a child's import opened: where the
        # replays held it (replay.jsonl's repo_files), the twin replay judges what it gave.
        children = self.fan_out()
        kernel = self.kernels(children)["worker-b"]
        opens = self.honest_opens(children)
        pyc = "repo/__pycache__/shardtools.cpython-311.pyc"
        opens.append(self.opened(self.PARENT_KERNEL, "write", pyc))
        opens.append(self.opened(kernel, "open", pyc))
        self.verdict(opens)  # writes the witness
        access = file_access(read_witness(self.paths.witness))
        session = children["worker-b"].session_id
        self.assertEqual(access.foreign_opened(session), pyc)
        self.assertIsNone(access.foreign_opened(session, frozenset({pyc})))

    def test_a_child_whose_kernel_never_opened_its_shard_did_not_derive(self):
        children = self.fan_out()
        kernel = self.kernels(children)["worker-c"]
        opens = [
            o
            for o in self.honest_opens(children)
            if not (o["pid"] == kernel and o["path"].startswith("repo/shards/"))
        ]
        verdict = self.verdict(opens)
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "c.jsonl")])
        self.assertIn("open no file c.jsonl", verdict.reasons[0].message)

    def test_a_process_with_no_kernel_among_its_ancestors_is_no_ones(self):
        children = self.fan_out()
        parent = os.path.relpath(self.build.parent_path, self.paths.root)
        opens = [*self.honest_opens(children), self.opened(8000, "open", parent)]
        self.assertTrue(self.verdict(opens).resolved)

    def test_a_shard_opened_by_a_process_gone_before_it_could_be_placed_counts(self):
        # A `wc` the child's cell ran on its shard ended before the runner read its event.
        children = self.fan_out()
        kernel = self.kernels(children)["worker-c"]
        opens = [
            o
            for o in self.honest_opens(children)
            if not (o["pid"] == kernel and o["path"].startswith("repo/shards/"))
        ]
        opens.append(self.opened(7100, "open", "repo/shards/c.jsonl", ancestors=()))
        self.assertTrue(self.verdict(opens).resolved)

    def test_where_the_runner_could_not_watch_the_verdict_says_so_and_rests_on_the_code(self):
        self.fan_out()
        verdict = self.verdict([], UNPRIVILEGED)
        self.assertTrue(verdict.resolved, [r.to_json() for r in verdict.reasons])
        self.assertEqual(verdict.witness["file_access"], UNPRIVILEGED)

    def test_a_code_judged_failure_of_an_unwatched_run_says_it_rests_on_the_code(self):
        # worker-a works out the expression its task handed it, reading no file.
        expression = "answer = 7 + 4\nawait agent_message.send(answer, receiver_role='parent')\n"
        self.build.shard_files.update({s.worker: s.file for s in FIXTURE.shards})
        with self.build.cell("for name in NAMES:\n    await rlm(TASK, name=name)\n"):
            children = {
                s.worker: self.build.spawn(s.worker, work=expression if s is A else None)
                for s in FIXTURE.shards
            }
        for shard in FIXTURE.shards:
            self.build.reply(children[shard.worker], f"{shard.file}: {shard.expected}")
        self.build.correct_index(FIXTURE)
        self.build.finish()
        verdict = self.verdict([], UNPRIVILEGED)
        self.assertEqual(self.shard_codes(verdict), [("answer_not_derived", "a.jsonl")])
        self.assertIn(UNWITNESSED, verdict.reasons[0].message)


if __name__ == "__main__":
    unittest.main()
