"""Code read as Python (evidence/cells.py), end to end through the scorer: what a cell
names, writes and draws on decides `answer_not_derived` and `answer_written_before_reply`,
both ways. And the reader itself is total: any text gives a reading."""

from __future__ import annotations

import random
import unittest

from swarm_fanout.evidence.cells import Session
from tests.builders import ask_only_what_was_searched
from tests.test_scorer import FIXTURE, DerivationCase

A, B, C = FIXTURE.shards
INDEX_LINES = [f"- {s.file}: {s.expected}" for s in FIXTURE.shards]


def setUpModule() -> None:
    ask_only_what_was_searched()


# Forms a child reads its shard with, each_child's (work, before): the regular expressions
# missed them all, and each is a read of the child's own shard.
READS = {
    "a bash cell that counts by redirection": (
        lambda s: f"%%bash\nwc -l < shards/{s.file}\n",
        None,
    ),
    "a comment naming a socket, beside a plain read": (
        lambda s: (
            "# local file only: no requests.get / socket needed\n"
            f"answer = len(open('shards/{s.file}').readlines())\n"
        ),
        None,
    ),
    "an unused glob import and a path built from the task's fields": (
        lambda s: (
            "import glob, json, os\nfrom pathlib import Path\n"
            f"task = {{'shard': {s.file.split('.')[0]!r}, 'ext': 'jsonl'}}\n"
            "name = task['shard'] + '.' + task['ext']\n"
            "p = Path('shards') / name\nanswer = sum(1 for _ in open(p))\n"
        ),
        None,
    ),
    "%cd into the shards dir, then the bare name": (
        lambda s: f"answer = len(open({s.file!r}).readlines())\n",
        lambda s: (("%cd shards", "/repo/shards\n"),),
    ),
    "os.chdir into the shards dir, then the bare name": (
        lambda s: f"answer = len(open({s.file!r}).readlines())\n",
        lambda s: (("import os\nos.chdir('shards')", ""),),
    ),
    "a shell command handed to subprocess": (
        lambda s: f"answer = subprocess.check_output('wc -l < shards/{s.file}', shell=True)\n",
        None,
    ),
    "a shell command reading a shard the cell already read": (
        lambda s: "answer = int(out)\n",
        lambda s: (
            (
                f"print(open('shards/{s.file}').readline())\n"
                f"out = subprocess.check_output('wc -l < shards/{s.file}', shell=True)",
                "{}\n",
            ),
        ),
    ),
    "a function defined in an earlier cell whose body reads": (
        lambda s: "answer = len(load())\n",
        lambda s: ((f"def load():\n    return open('shards/{s.file}').readlines()", ""),),
    ),
    "a walrus": (
        lambda s: f"if (n := len(open('shards/{s.file}').readlines())):\n    answer = n\n",
        None,
    ),
    "a path from a starred assignment": (
        lambda s: (
            f"*parts, name = 'shards', {s.file!r}\n"
            "answer = len(open(os.path.join(*parts, name)).readlines())\n"
        ),
        None,
    ),
    "an argv list handed to subprocess.run": (
        lambda s: (
            f"path = 'shards/{s.file}'\n"
            "answer = subprocess.run(['wc', '-l', path], capture_output=True).stdout\n"
        ),
        None,
    ),
    "a %time magic line": (
        lambda s: f"%time answer = len(open('shards/{s.file}').readlines())\n",
        None,
    ),
    "a shell line with an environment prefix": (
        lambda s: f"answer = !LC_ALL=C wc -l shards/{s.file}\n",
        None,
    ),
    "the output of a shell line bound in an earlier cell": (
        lambda s: "answer = int(out[0].split()[0])\n",
        lambda s: ((f"out = !wc -l shards/{s.file}", ""),),
    ),
    "bash -c": (lambda s: f"answer = !bash -c 'wc -l < shards/{s.file}'\n", None),
    "a copy to a scratch file by a pipe into tee": (
        lambda s: "answer = len(open('scratch.jsonl').readlines())\n",
        lambda s: ((f"!cat shards/{s.file} | tee scratch.jsonl > /dev/null", ""),),
    ),
}
# The same forms holding a typed answer, or reading what is not the child's shard: each_child's
# (work, before) and what the reason says, if it is checked.
NOT_READS = {
    "a name read from the shard, then rebound to a typed number": (
        lambda s: f"n = {s.expected - 4} + 4\nanswer = n\n",
        lambda s: ((f"n = len(open('shards/{s.file}').readlines())", ""),),
        "drew on no file at all",
    ),
    "a cell the kernel ran that does not parse (a newer Python's, say)": (
        lambda s: f"answer = len(open('shards/{s.file}').readlines()\n",
        None,
        "does not parse as Python",
    ),
    "a walrus binding a typed number": (
        lambda s: f"answer = (n := {s.expected - 4} + 4)\n",
        lambda s: ((f"n = len(open('shards/{s.file}').readlines())", ""),),
        None,
    ),
    "a typed number taken from a starred target": (
        lambda s: (
            f"counted, *typed = len(open('shards/{s.file}').readlines()), {s.expected}\n"
            "answer = typed[0]\n"
        ),
        None,
        None,
    ),
    "an argv list that reads another child's transcript": (
        lambda s: "answer = subprocess.run(['cat', '../sessions/root.jsonl']).stdout\n",
        None,
        None,
    ),
    "a %time magic line that types the answer": (
        lambda s: f"%time answer = {s.expected}\n",
        None,
        "it was typed into code",
    ),
}
# The parent's final index written before it spawns, never again, in forms the regular
# expressions missed: each is a write.
WRITES = {
    "a name bound in a tuple assignment": (
        "src, out = 'x', 'combined-index.md'\nPath(out).write_text(text)"
    ),
    "an open call wrapped over lines": (
        "with open(\n    'combined-index.md',\n    'w',\n) as f:\n    f.write(text)"
    ),
    "a path opened with a keyword mode": (
        "with Path('combined-index.md').open(mode='w') as f:\n    f.write(text)"
    ),
    "mode wt": "with open('combined-index.md', 'wt') as f:\n    f.write(text)",
    "a %%writefile cell": "%%writefile combined-index.md\n# Combined index\n",
    "a path joined under a dir whose name holds load": (
        "download_dir = os.getcwd()\nout = Path(download_dir) / 'combined-index.md'\n"
        "out.write_text(text)"
    ),
    "an argv list that copies to a variable's path": (
        "out = 'combined-index.md'\nsubprocess.run(['cp', 'draft.md', out], check=True)"
    ),
    "!cp": "!cp draft.md combined-index.md",
    "%%bash mv": "%%bash\nmv draft.md combined-index.md",
    "a pipe into tee": "!cat draft.md | tee combined-index.md",
    "cp with an environment prefix": "!LC_ALL=C cp draft.md combined-index.md",
    "bash -c cp": '!bash -c "cp draft.md combined-index.md"',
}


class CellsTestCase(DerivationCase):
    def index_first(self, code: str) -> None:
        """The parent writes the final index with `code` before it spawns, never again."""
        with self.build.cell(code, "Writing the index."):
            self.build.write_index(INDEX_LINES)
        self.reply_all(self.fan_out())


class ChildFormsTest(CellsTestCase):
    def test_children_that_read_their_shard_in_forms_the_patterns_missed_derived(self):
        for form, (work, before) in READS.items():
            with self.subTest(form=form):
                self.setUp()
                self.each_child(work, before)
                self.assert_resolved()

    def test_children_whose_answer_is_typed_or_read_elsewhere_did_not_derive(self):
        for form, (work, before, said) in NOT_READS.items():
            with self.subTest(form=form):
                self.setUp()
                self.each_child(work, before)
                messages = self.assert_every_shard("answer_not_derived")
                for message in messages if said else ():
                    self.assertIn(said, message)


class IndexWritesTest(CellsTestCase):
    """The parent's last write of the index, in forms the regular expressions missed."""

    def test_an_index_written_before_the_spawn_in_these_forms_is_a_write(self):
        for form, code in WRITES.items():
            with self.subTest(form=form):
                self.setUp()
                self.index_first(code)
                self.assert_every_shard("answer_written_before_reply")

    def test_a_message_that_holds_an_arrow_and_the_file_name_is_no_write(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Done.", code="print('all replies in -> combined-index.md is final')")
        self.build.tool_result()
        self.assert_every_shard("answer_written_before_reply")

    def test_a_write_the_kernel_refused_as_a_syntax_error_did_nothing(self):
        self.build.assistant("Writing.", code="Path('combined-index.md').write_text(text")
        self.build.tool_result("SyntaxError: '(' was never closed\n", status="error")
        self.reply_all(self.fan_out())
        self.build.correct_index(FIXTURE)  # by a name the code builds: no call names it
        self.assert_resolved()

    def test_a_function_that_writes_the_index_writes_where_it_is_called(self):
        define = "def save(lines):\n    Path('combined-index.md').write_text('\\n'.join(lines))"
        self.build.assistant("Defining.", code=define)
        self.build.tool_result()
        self.reply_all(self.fan_out())
        with self.build.cell("save(lines)", "Writing the index."):
            self.build.correct_index(FIXTURE)
        self.assert_resolved()


class ParentFormsTest(CellsTestCase):
    """The parent's writes of the index in shell and print forms, both ways."""

    def test_print_to_a_handle_opened_before_the_spawn_writes_after_the_replies(self):
        with self.build.cell("f = open('combined-index.md', 'w')", "Opening the index."):
            pass
        self.reply_all(self.fan_out())
        with self.build.cell(f"print({INDEX_LINES!r}, file=f)\nf.close()", "Writing."):
            self.build.write_index(INDEX_LINES)
        self.assert_resolved()

    def test_print_to_the_index_before_the_spawn_is_a_write_and_to_stderr_none(self):
        self.index_first(
            f"with open('combined-index.md', 'a') as f:\n    print({INDEX_LINES!r}, file=f)"
        )
        self.build.assistant("Done.", code="import sys\nprint('index final', file=sys.stderr)")
        self.build.tool_result()
        self.assert_every_shard("answer_written_before_reply")

    def test_an_argv_list_that_copies_the_index_after_the_replies_is_the_last_write(self):
        self.reply_all(self.fan_out())
        with self.build.cell("subprocess.run(['cp', 'draft.md', 'combined-index.md'])", "Copy."):
            self.build.write_index(INDEX_LINES)
        self.assert_resolved()

    def test_tee_that_reads_the_index_from_stdin_does_not_write_it(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Keeping a copy.", code="!tee backup.md < combined-index.md")
        self.build.tool_result()
        self.assert_every_shard("answer_written_before_reply")

    def test_cp_of_the_index_to_a_backup_after_the_replies_does_not_write_it(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Keeping a copy.", code="!cp combined-index.md backup.md")
        self.build.tool_result()
        self.assert_every_shard("answer_written_before_reply")

    def test_the_index_copied_into_place_after_the_replies_is_the_last_write(self):
        self.build.assistant("Drafting.", code="Path('draft.md').write_text('# draft')")
        self.build.tool_result()
        self.reply_all(self.fan_out())
        with self.build.cell("%%bash\ncp draft.md combined-index.md", "Copying."):
            self.build.write_index(INDEX_LINES)
        self.assert_resolved()


class ReaderIsTotalTest(unittest.TestCase):
    def test_any_text_gives_a_reading(self):
        rng = random.Random(40)
        pieces = ["(", ")", "[", "'", '"', "\\", "\n", " ", "!", "%%", "%", "=", "f'{", "}",
                  "open(", "Path(", "/", "x", "1", "lambda", ":", "def ", "for ", " in ",
                  "with ", " as ", "cd ", ">", "|", "$", "\x00", "é", "await ",
                  "async "]  # fmt: skip
        session = Session()
        for _ in range(2000):
            code = "".join(rng.choice(pieces) for _ in range(rng.randrange(40)))
            cell = session.read(code)
            self.assertIsInstance(cell.readable, bool)

    def test_a_repeated_cell_is_read_against_the_session_as_it_is_now(self):
        session = Session()
        self.assertEqual(session.read("print(path)").named, frozenset())
        session.read("path = 'shards/a.jsonl'")
        self.assertEqual(session.read("print(path)").named, {"shards/a.jsonl"})
        session.read("%cd shards")
        self.assertEqual(session.read("print('b.jsonl')").named, {"shards/b.jsonl"})

    def test_deep_and_huge_code_is_unreadable_not_a_crash(self):
        for code in ("(" * 10_000, "x = " + "1 + " * 50_000 + "1", "x = 1\n" * 200_000):
            self.assertFalse(Session().read(code).readable)


if __name__ == "__main__":
    unittest.main()
