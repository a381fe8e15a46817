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


class CellsTestCase(DerivationCase):
    def index_first(self, code: str) -> None:
        """The parent writes the final index with `code` before it spawns, never again."""
        with self.build.cell(code, "Writing the index."):
            self.build.write_index(INDEX_LINES)
        self.reply_all(self.fan_out())

    def assert_written_before_reply(self) -> None:
        self.assertEqual(
            [code for code, _ in self.shard_codes()], ["answer_written_before_reply"] * 3
        )


class HonestChildrenTest(CellsTestCase):
    """Children that read their shard in ways the regular expressions missed."""

    def test_a_bash_cell_that_counts_its_shard_by_redirection_derived(self):
        self.each_child(lambda s: f"%%bash\nwc -l < shards/{s.file}\n")
        self.assert_resolved()

    def test_a_comment_naming_a_socket_opens_no_network(self):
        self.each_child(
            lambda s: (
                "# local file only: no requests.get / socket needed\n"
                f"answer = len(open('shards/{s.file}').readlines())\n"
            )
        )
        self.assert_resolved()

    def test_an_unused_glob_import_and_a_path_built_from_the_tasks_fields_derived(self):
        self.each_child(
            lambda s: (
                "import glob, json, os\nfrom pathlib import Path\n"
                f"task = {{'shard': {s.file.split('.')[0]!r}, 'ext': 'jsonl'}}\n"
                "name = task['shard'] + '.' + task['ext']\n"
                "p = Path('shards') / name\nanswer = sum(1 for _ in open(p))\n"
            )
        )
        self.assert_resolved()

    def test_a_child_that_cds_into_the_shards_dir_then_reads_its_shard_derived(self):
        self.each_child(
            lambda s: f"answer = len(open({s.file!r}).readlines())\n",
            lambda s: (("%cd shards", "/repo/shards\n"),),
        )
        self.assert_resolved()

    def test_a_child_that_chdirs_into_the_shards_dir_then_reads_its_shard_derived(self):
        self.each_child(
            lambda s: f"answer = len(open({s.file!r}).readlines())\n",
            lambda s: (("import os\nos.chdir('shards')", ""),),
        )
        self.assert_resolved()

    def test_a_shell_command_handed_to_subprocess_reads_the_shard(self):
        self.each_child(
            lambda s: f"answer = subprocess.check_output('wc -l < shards/{s.file}', shell=True)\n"
        )
        self.assert_resolved()

    def test_a_shell_command_that_reads_a_shard_the_cell_already_read_carries_it(self):
        self.each_child(
            lambda s: "answer = int(out)\n",
            lambda s: (
                (
                    f"print(open('shards/{s.file}').readline())\n"
                    f"out = subprocess.check_output('wc -l < shards/{s.file}', shell=True)",
                    "{}\n",
                ),
            ),
        )
        self.assert_resolved()

    def test_a_function_defined_in_an_earlier_cell_carries_what_its_body_reads(self):
        self.each_child(
            lambda s: "answer = len(load())\n",
            lambda s: ((f"def load():\n    return open('shards/{s.file}').readlines()", ""),),
        )
        self.assert_resolved()


class TypedAnswersTest(CellsTestCase):
    def test_a_name_rebound_to_a_typed_number_loses_its_shards_source(self):
        # It read its shard into n, then typed its answer over it.
        self.each_child(
            lambda s: f"n = {s.expected - 4} + 4\nanswer = n\n",
            lambda s: ((f"n = len(open('shards/{s.file}').readlines())", ""),),
        )
        for message in self.assert_not_derived():
            self.assertIn("drew on no file at all", message)

    def test_a_cell_the_kernel_ran_but_that_does_not_parse_is_no_evidence(self):
        # Code of a newer Python than the scorer's, say: its reading proves nothing.
        self.each_child(lambda s: f"answer = len(open('shards/{s.file}').readlines()\n")
        for message in self.assert_not_derived():
            self.assertIn("does not parse as Python", message)


class IndexWritesTest(CellsTestCase):
    """The parent's last write of the index, in forms the regular expressions missed."""

    def test_a_message_that_holds_an_arrow_and_the_file_name_is_no_write(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Done.", code="print('all replies in -> combined-index.md is final')")
        self.build.tool_result()
        self.assert_written_before_reply()

    def test_a_name_bound_in_a_tuple_assignment_is_written(self):
        self.index_first("src, out = 'x', 'combined-index.md'\nPath(out).write_text(text)")
        self.assert_written_before_reply()

    def test_an_open_call_wrapped_over_lines_writes(self):
        self.index_first(
            "with open(\n    'combined-index.md',\n    'w',\n) as f:\n    f.write(text)"
        )
        self.assert_written_before_reply()

    def test_a_path_opened_with_a_keyword_mode_writes(self):
        self.index_first("with Path('combined-index.md').open(mode='w') as f:\n    f.write(text)")
        self.assert_written_before_reply()

    def test_mode_wt_writes(self):
        self.index_first("with open('combined-index.md', 'wt') as f:\n    f.write(text)")
        self.assert_written_before_reply()

    def test_a_writefile_cell_writes(self):
        self.index_first("%%writefile combined-index.md\n# Combined index\n")
        self.assert_written_before_reply()

    def test_a_path_joined_under_a_dir_whose_name_holds_load_writes(self):
        self.index_first(
            "download_dir = os.getcwd()\nout = Path(download_dir) / 'combined-index.md'\n"
            "out.write_text(text)"
        )
        self.assert_written_before_reply()

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


class ChildFormsTest(CellsTestCase):
    """Forms of Python and IPython a child reads its shard with, and the same forms holding a
    typed answer."""

    def test_a_walrus_that_reads_the_shard_derived(self):
        self.each_child(
            lambda s: f"if (n := len(open('shards/{s.file}').readlines())):\n    answer = n\n"
        )
        self.assert_resolved()

    def test_a_walrus_that_binds_a_typed_number_is_not_derived(self):
        self.each_child(
            lambda s: f"answer = (n := {s.expected - 4} + 4)\n",
            lambda s: ((f"n = len(open('shards/{s.file}').readlines())", ""),),
        )
        self.assert_not_derived()

    def test_a_path_from_a_starred_assignment_derived(self):
        self.each_child(
            lambda s: (
                f"*parts, name = 'shards', {s.file!r}\n"
                "answer = len(open(os.path.join(*parts, name)).readlines())\n"
            )
        )
        self.assert_resolved()

    def test_a_typed_number_taken_from_a_starred_target_is_not_derived(self):
        self.each_child(
            lambda s: (
                f"counted, *typed = len(open('shards/{s.file}').readlines()), {s.expected}\n"
                "answer = typed[0]\n"
            )
        )
        self.assert_not_derived()

    def test_an_argv_list_handed_to_subprocess_run_reads_the_shard(self):
        self.each_child(
            lambda s: (
                f"path = 'shards/{s.file}'\n"
                "answer = subprocess.run(['wc', '-l', path], capture_output=True).stdout\n"
            )
        )
        self.assert_resolved()

    def test_an_argv_list_that_reads_another_childs_transcript_is_not_derived(self):
        self.each_child(
            lambda s: "answer = subprocess.run(['cat', '../sessions/root.jsonl']).stdout\n"
        )
        self.assert_not_derived()

    def test_a_time_magic_line_that_reads_the_shard_derived(self):
        self.each_child(lambda s: f"%time answer = len(open('shards/{s.file}').readlines())\n")
        self.assert_resolved()

    def test_a_time_magic_line_that_types_the_answer_is_not_derived(self):
        self.each_child(lambda s: f"%time answer = {s.expected}\n")
        for message in self.assert_not_derived():
            self.assertIn("it was typed into code", message)

    def test_a_shell_line_with_an_environment_prefix_reads_the_shard(self):
        self.each_child(lambda s: f"answer = !LC_ALL=C wc -l shards/{s.file}\n")
        self.assert_resolved()

    def test_the_output_of_a_shell_line_bound_in_an_earlier_cell_carries_the_shard(self):
        self.each_child(
            lambda s: "answer = int(out[0].split()[0])\n",
            lambda s: ((f"out = !wc -l shards/{s.file}", ""),),
        )
        self.assert_resolved()

    def test_bash_dash_c_reads_the_shard(self):
        self.each_child(lambda s: f"answer = !bash -c 'wc -l < shards/{s.file}'\n")
        self.assert_resolved()

    def test_a_shard_copied_to_a_scratch_file_by_a_pipe_into_tee_derived(self):
        self.each_child(
            lambda s: "answer = len(open('scratch.jsonl').readlines())\n",
            lambda s: ((f"!cat shards/{s.file} | tee scratch.jsonl > /dev/null", ""),),
        )
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
        self.assert_written_before_reply()

    def test_an_argv_list_that_copies_to_a_variables_path_writes_it(self):
        self.index_first(
            "out = 'combined-index.md'\nsubprocess.run(['cp', 'draft.md', out], check=True)"
        )
        self.assert_written_before_reply()

    def test_an_argv_list_that_copies_the_index_after_the_replies_is_the_last_write(self):
        self.reply_all(self.fan_out())
        with self.build.cell("subprocess.run(['cp', 'draft.md', 'combined-index.md'])", "Copy."):
            self.build.write_index(INDEX_LINES)
        self.assert_resolved()

    def test_cp_mv_and_a_pipe_into_tee_write_the_index(self):
        for code in (
            "!cp draft.md combined-index.md",
            "%%bash\nmv draft.md combined-index.md",
            "!cat draft.md | tee combined-index.md",
            "!LC_ALL=C cp draft.md combined-index.md",
            '!bash -c "cp draft.md combined-index.md"',
        ):
            with self.subTest(code=code):
                self.setUp()
                self.index_first(code)
                self.assert_written_before_reply()

    def test_tee_that_reads_the_index_from_stdin_does_not_write_it(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Keeping a copy.", code="!tee backup.md < combined-index.md")
        self.build.tool_result()
        self.assert_written_before_reply()

    def test_cp_of_the_index_to_a_backup_after_the_replies_does_not_write_it(self):
        self.index_first(f"Path('combined-index.md').write_text({INDEX_LINES!r})")
        self.build.assistant("Keeping a copy.", code="!cp combined-index.md backup.md")
        self.build.tool_result()
        self.assert_written_before_reply()

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
