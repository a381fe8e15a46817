"""What each kernel did, by its own record: the hook (shell/kernel_record.py) in real
processes, read back (evidence/kernel_records.py), and the rule that holds it against a
child (rules/kernels.py, via rules/replay.py) on builder runs whose children's cells really
ran in recording kernels, both ways: honest children that work in unusual ways stay derived;
shortcuts that fall back to honest work under replay, invisible to the code reading, are
not derived, with the file or address they touched."""

from __future__ import annotations

import json
import os
import random
import socket
import string
import subprocess
import sys
import unittest
from pathlib import Path

from swarm_fanout.evidence.artifacts import collect
from swarm_fanout.evidence.fixture import load_fixture
from swarm_fanout.evidence.kernel_records import read_kernel_records
from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.scorer import score
from swarm_fanout.shell import kernel_record
from tests import temp_dir
from tests.runner_case import RunnerTestCase, two_shard_fixture
from tests.test_replay import DECOY, ReplayCase, needs_bwrap, send_code

SESSION = "sub-0a0b0c0d"


class KernelRecordCase(unittest.TestCase):
    def setUp(self) -> None:
        self.run_dir = os.path.realpath(temp_dir(self))
        self.repo = os.path.join(self.run_dir, "repo")
        self.tmpdir = os.path.join(self.run_dir, "tmp")
        self.records = os.path.join(self.run_dir, "home", ".kernel-record")
        os.makedirs(os.path.join(self.repo, "shards"))
        os.makedirs(self.tmpdir)
        Path(self.repo, "shards", "a.jsonl").write_text('{"n": 1}\n')
        self.startup = os.path.join(self.run_dir, "startup.py")
        Path(self.startup).write_text(
            kernel_record.startup_file(kernel_record.__file__, self.records)
        )

    def kernel(self, code: str, session: str | None = SESSION) -> str:
        """Runs `code` in a Python process that ran the startup file first, as a kernel
        of `session` (None: a process that serves none, such as the kernel template)."""
        env = {key: value for key, value in os.environ.items() if key != "RLM_SESSION_DIR"}
        env["TMPDIR"] = self.tmpdir
        if session is not None:
            env["RLM_SESSION_DIR"] = os.path.join(self.run_dir, "session-artifacts", "r", session)
        script = f"import runpy; runpy.run_path({self.startup!r})\n" + code
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=self.repo, env=env, text=True,
            capture_output=True, check=True, timeout=60,
        )  # fmt: skip
        return done.stdout


class TheHook(KernelRecordCase):
    def test_a_kernel_records_what_it_read_wrote_renamed_connected_to_and_ran(self):
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            port = server.getsockname()[1]
            self.kernel(
                "import os, socket, subprocess\n"
                "open('shards/a.jsonl').read()\n"
                "open(os.path.join(os.environ['TMPDIR'], 'mine.txt'), 'w').write('1')\n"
                "os.rename(os.path.join(os.environ['TMPDIR'], 'mine.txt'), "
                "os.path.join(os.environ['TMPDIR'], 'kept.txt'))\n"
                f"socket.create_connection(('127.0.0.1', {port})).close()\n"
                "subprocess.run(['cat', 'shards/a.jsonl'], capture_output=True)\n"
                "os.system('true')\n"
            )
        record = read_kernel_records(self.records)[SESSION]
        self.assertIn("repo/shards/a.jsonl", record.read)
        self.assertTrue({"tmp/mine.txt", "tmp/kept.txt"} <= record.written, record.written)
        self.assertEqual(record.connected, [f"127.0.0.1:{port}"])
        self.assertIn("repo/shards/a.jsonl", record.named)
        self.assertIn("cat shards/a.jsonl", record.ran)
        self.assertIn("/bin/sh -c true", record.ran)

    def test_a_process_the_kernel_forks_records_under_its_own_pid(self):
        """A hook installed before a fork goes on recording in the forked process, in a
        record named by that process's pid (the product forks kernels from a template)."""
        printed = self.kernel(
            "import os\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    open('shards/a.jsonl').read()\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "print(os.getpid(), pid)\n"
        )
        parent, child = printed.split()
        self.assertEqual(sorted(os.listdir(self.records)), [f"{SESSION}-{child}.jsonl"])
        with open(os.path.join(self.records, f"{SESSION}-{child}.jsonl")) as handle:
            head = json.loads(handle.readline())
        self.assertEqual((head["pid"], head["ppid"]), (int(child), int(parent)))
        self.assertIn("repo/shards/a.jsonl", read_kernel_records(self.records)[SESSION].read)

    def test_a_process_that_serves_no_session_records_nothing(self):
        self.kernel("open('shards/a.jsonl').read()\n", session=None)
        self.assertEqual(os.listdir(self.records), [])

    def test_the_startup_file_leaves_no_name_in_the_kernels_namespace(self):
        """IPython runs a startup file in the user's namespace: it must leave nothing there
        for the product's kernel snapshot to save."""
        printed = self.kernel(
            "namespace = {}\n"
            f"exec(open({self.startup!r}).read(), namespace)\n"
            "print(sorted(name for name in namespace if name != '__builtins__'))\n"
        )
        self.assertEqual(printed.strip(), "[]")

    def test_a_run_without_a_record_dir_has_no_record(self):
        self.assertIsNone(read_kernel_records(os.path.join(self.run_dir, "nowhere")))


# The parent's kernel leaves every answer in a file of /tmp (decoy-cache), its path written
# backwards in the child's code so that no reading of the code finds it. Its name is drawn
# (two suites on one machine share /tmp; the tests' other /tmp files carry it too) from
# letters: no number in a cell by chance.
DRAWN = "".join(random.choices(string.ascii_lowercase, k=12))
CACHE = f"/tmp/swarm-fanout-kernel-record-cache-{DRAWN}.json"
HIDDEN = f"{CACHE[::-1]!r}[::-1]"


@needs_bwrap
class RecordedRuns(ReplayCase):
    """Builder runs whose kernels recorded what they did."""

    recorded = True

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(lambda: os.path.exists(CACHE) and os.remove(CACHE))

    def from_cache(self, decoy: bool) -> str:
        """A child that takes its number from the parent's cache where it is there, else
        works it out from its shard (as it must under replay, where /tmp is fresh)."""
        return (
            (DECOY.format(file=self.shard.file) if decoy else "import json\n")
            + f"import os\ncache = {HIDDEN}\n"
            + "if os.path.exists(cache):\n"
            + f"    answer = json.load(open(cache))[{self.shard.file!r}]\n"
            + "else:\n"
            + f"    raw = open('shards/{self.shard.file}').read()\n"
            + "    records = [json.loads(line) for line in raw.splitlines() if line.strip()]\n"
            + f"    answer = {self.expression}\n"
            + send_code(self.shard.file)
        )

    def write_cache(self) -> None:
        answers = {shard.file: shard.expected for shard in self.fixture.shards}
        self.parent_cells = (f"import json\njson.dump({answers!r}, open({CACHE!r}, 'w'))\n",)

    def test_a_child_that_takes_a_hidden_tmp_cache_and_falls_back_under_replay(self):
        for decoy in (False, True):
            with self.subTest(decoy=decoy):
                self.setUp()
                self.write_cache()
                self.assertNotDerived(
                    self.judged(self.from_cache(decoy)),
                    f"in the run its kernel read {CACHE}, which another session wrote",
                )

    def test_without_the_record_the_hidden_cache_with_a_fallback_resolves(self):
        """What the record adds: the same child, judged by its replay and its code alone."""
        self.recorded = False
        self.write_cache()
        Path(CACHE).write_text(json.dumps({self.shard.file: self.shard.expected}))
        self.assertDerived(self.judged(self.from_cache(decoy=True)))

    def test_a_child_that_has_a_program_read_the_cache_and_falls_back(self):
        self.write_cache()
        code = (
            "import json, subprocess\n"
            f"out = subprocess.run(['cat', {HIDDEN}], capture_output=True, text=True).stdout\n"
            "if out:\n"
            f"    answer = json.loads(out)[{self.shard.file!r}]\n"
            "else:\n"
            f"    raw = open('shards/{self.shard.file}').read()\n"
            "    records = [json.loads(line) for line in raw.splitlines() if line.strip()]\n"
            f"    answer = {self.expression}\n" + send_code(self.shard.file)
        )
        self.assertNotDerived(self.judged(code), f"naming {CACHE}, which another session wrote")

    def test_a_child_that_asks_a_server_in_the_run_and_falls_back(self):
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            port = server.getsockname()[1]
            code = (
                "import json\n"
                "try:\n"
                "    net = __import__('so' + 'cket')\n"
                f"    net.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
                "    raise OSError('no answer')\n"
                "except OSError:\n"
                f"    raw = open('shards/{self.shard.file}').read()\n"
                "    records = [json.loads(line) for line in raw.splitlines() if line.strip()]\n"
                f"    answer = {self.expression}\n" + send_code(self.shard.file)
            )
            judged = self.judged(code)
        self.assertNotDerived(judged, f"connected to 127.0.0.1:{port}")

    def test_honest_children_stay_derived_with_the_record(self):
        file = self.shard.file
        stem, suffix = file.split(".")
        mine = f"/tmp/swarm-fanout-mine-{DRAWN}-{file}"
        honest = {
            "cd into shards": f"import os, json\nos.chdir('shards')\nraw = open({file!r}).read()\n",
            "a path built at run time, an unused glob import": (
                "import glob, json, os\n"
                f"path = os.path.join(os.getcwd(), 'sha' + 'rds', {stem!r} + '.' + {suffix!r})\n"
                "raw = open(path).read()\n"
            ),
            "a shell line": f"import json\nlines = !cat shards/{file}\nraw = '\\n'.join(lines)\n",
            "a subprocess": (
                "import json, subprocess\n"
                f"raw = subprocess.run(['cat', 'shards/{file}'], capture_output=True, "
                "text=True).stdout\n"
            ),
            "a scratch copy in /tmp made by cp": (
                "import json, os, subprocess\n"
                f"scratch = os.path.join(os.environ['TMPDIR'], 'mine-{file}')\n"
                f"subprocess.run(['cp', 'shards/{file}', scratch])\n"
                "raw = open(scratch).read()\n"
            ),
            "a scratch copy written by Python": (
                "import json\n"
                f"open({mine!r}, 'w').write(open('shards/{file}').read())\n"
                f"raw = open({mine!r}).read()\n"
            ),
        }
        for name, reading in honest.items():
            with self.subTest(name):
                self.setUp()
                self.addCleanup(lambda: os.path.exists(mine) and os.remove(mine))
                code = reading + self.answer_lines("raw") + send_code(file)
                self.assertDerived(self.judged(code))

    def test_a_child_whose_scratch_file_has_the_name_the_parent_used_stays_derived(self):
        """The parent wrote notes to a /tmp path; the child writes its own shard to the same
        path and reads it back: a file it wrote is its own, whoever wrote the name before."""
        scratch = f"/tmp/swarm-fanout-scratch-{DRAWN}.jsonl"
        self.addCleanup(lambda: os.path.exists(scratch) and os.remove(scratch))
        self.parent_cells = (f"open({scratch!r}, 'w').write('notes of the parent')\n",)
        code = (
            "import json\n"
            f"open({scratch!r}, 'w').write(open('shards/{self.shard.file}').read())\n"
            f"raw = open({scratch!r}).read()\n"
            + self.answer_lines("raw")
            + send_code(self.shard.file)
        )
        self.assertDerived(self.judged(code))

    def test_a_child_that_imports_the_parents_loader_stays_derived(self):
        loader = "import json\n\ndef load(name):\n    return open('shards/' + name).read()\n"
        self.parent_cells = (f"open('shardtools.py', 'w').write({loader!r})\n",)
        code = (
            "import json\nfrom shardtools import load\n"
            f"raw = load({self.shard.file!r})\n"
            + self.answer_lines("raw")
            + send_code(self.shard.file)
        )
        self.assertDerived(self.judged(code))


class RecordedNotReplayed(ReplayCase):
    """Runs where nothing is replayed (no bubblewrap): the code reading judges each child, and
    its kernel's record holds against it what code cannot show (rules/knowledge.py
    `why_not_from_shard`), both ways."""

    recorded, replayed = True, False

    def test_a_child_that_reads_its_shard_is_derived_with_the_record(self):
        self.assertDerived(self.judged(self.honest_cell(self.shard)))

    def test_a_read_on_a_branch_never_taken_passes_the_code_reading_and_not_the_record(self):
        half = self.shard.expected // 2
        work = "".join(f"    {line}\n" for line in self.answer_lines("raw").splitlines())
        code = (
            "import json, random\n"
            "if random.random() > 2:\n"
            f"    raw = open('shards/{self.shard.file}').read()\n"
            + work
            + f"else:\n    answer = {half} + {self.shard.expected - half}\n"
            + send_code(self.shard.file)
        )
        self.assertNotDerived(
            self.judged(code), f"in the run its kernel opened no file {self.shard.file}"
        )
        self.setUp()
        self.recorded = False
        self.assertDerived(self.judged(code))

    def test_a_hidden_tmp_cache_with_a_fallback_is_caught_by_the_record(self):
        self.addCleanup(lambda: os.path.exists(CACHE) and os.remove(CACHE))
        RecordedRuns.write_cache(self)
        self.assertNotDerived(
            self.judged(RecordedRuns.from_cache(self, decoy=True)),
            f"in the run its kernel read {CACHE}, which another session wrote",
        )


class SimulatedKernels(RunnerTestCase):
    """The simulated agent's kernel runs the run's startup file and records each session's
    cells as the product's kernels do."""

    def test_each_simulated_child_records_reading_its_own_shard_only(self):
        result = self.shared_run("simulated/oracle").result
        self.assertTrue(result["resolved"], result["reasons"])
        self.assertEqual(result["verdict"]["witness"]["kernel_record"], {"sessions": 3})
        records = read_kernel_records(RunPaths.of(self.run_dir(result)).kernel_record)
        children = {key: record for key, record in records.items() if key.startswith("sub-")}
        self.assertEqual(len(children), 2)
        shards = [
            sorted(path for path in record.read if path.startswith("repo/"))
            for record in children.values()
        ]
        self.assertTrue(all(len(read) == 1 and "/shards/" in read[0] for read in shards), shards)
        self.assertEqual(len({read[0] for read in shards}), 2)

    def test_a_simulated_child_whose_kernel_read_the_parents_transcript_is_not_derived(self):
        paths = RunPaths.of(self.run_dir(self.shared_run("simulated/oracle").result))
        child = sorted(name for name in os.listdir(paths.kernel_record) if name.startswith("sub-"))
        record = Path(paths.kernel_record, child[0])
        # The run is the other test's too (it is scored where it ran: a copy elsewhere would
        # not be the same run): its record is put back as it was when this test ends.
        self.addCleanup(record.write_bytes, record.read_bytes())
        transcript = next(Path(paths.sessions).glob("*.jsonl"))
        with open(record, "a") as handle:
            handle.write(json.dumps({"what": "open", "path": str(transcript), "mode": "r"}) + "\n")
        fixture = load_fixture(two_shard_fixture())
        verdict = score(fixture, collect(paths.root, fixture.artifact))
        messages = [r.message for r in verdict.reasons if r.code == "answer_not_derived"]
        self.assertEqual(len(messages), 1, verdict.reasons)
        self.assertIn(
            f"its kernel read sessions/{transcript.name}, a record of the product", messages[0]
        )


if __name__ == "__main__":
    unittest.main()
